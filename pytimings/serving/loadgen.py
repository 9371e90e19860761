"""``pytimings loadgen``: drive an OpenAI-compatible streaming server and save latencies.

Sends streaming (SSE) requests to ``<url>/completions`` or ``<url>/chat/completions``,
closed-loop at a fixed concurrency (each of C workers sends its next request when the
previous one ends) or, with ``--rate R``, open-loop: Poisson arrivals at R requests/s
(exponential gaps from a seeded generator), with the concurrency level as a cap on
requests in flight (as ``vllm bench serve --max-concurrency``; a request's clock starts
when it is sent, so time spent waiting for the cap is not in its TTFT).

Each level runs ``--warmup`` requests (sent, counted, not measured), then ``--rounds``
rounds of ``--requests`` requests; or, a soak with ``--duration D --interval I``, sends
without pause for D and cuts the level into D/I rounds by send time, one per interval,
each with its metrics in the level's ``intervals`` (``compare`` tests them for drift).
Every request is saved with the arrival time of every token-bearing chunk (CLOCK_MONOTONIC
ns, taken when the chunk's line is read, before JSON decoding); see
:mod:`pytimings.serving.runfile` for the schema and error kinds. A failed request is
counted by kind in its round and never enters latency figures.

Lengths. Output: ``max_tokens`` = ``--output-len`` and ``ignore_eos: true`` (vLLM, SGLang
and TensorRT-LLM's OpenAI servers take it; ``--no-ignore-eos`` for servers that reject
unknown fields sends neither it nor ``continuous_usage_stats``, below), so the server
generates exactly that many tokens unless it stops early.
Input: no tokenizer is loaded, so the prompt is ``--input-len`` words drawn (seeded) from
a list of common short English words, each one token with a leading space in the
Llama/GPT/Qwen BPE vocabularies; the real count differs by the template's and BOS tokens
(chat adds a few). Token counts come from the server's ``usage`` (requested with
``stream_options.include_usage``) when it sends one, else one token per chunk --
``output_tokens`` is null in the record when it was counted. Tokens per chunk: a real
engine streams several tokens in one chunk (vLLM: 1.02-1.05 per chunk under load on 2 CPU
cores, ~3.9 with ngram speculation), so each chunk's count is asked for too
(``stream_options.continuous_usage_stats``: vLLM and SGLang then put the running usage in
every chunk). A chunk with the running usage is a token chunk when ``completion_tokens``
grew, by that many tokens, text or not (a detokenizer holds back the bytes of an incomplete
character: the tokens arrived, their text comes later); a chunk without it is one token
when it carries text. Hence ITL per chunk and per token in the metrics
(:mod:`pytimings.serving.metrics`).

HTTP client: aiohttp. It is the asyncio client with a C HTTP parser (per-chunk client cost
stays small at high concurrency, where a pure-Python parser would add latency of its own),
long maintained by aio-libs, and the one vLLM's benchmark uses, so figures are comparable.
SSE framing (``data:`` lines, blank-line dispatch) follows the WHATWG rules in a few
lines: no maintained SSE client exists for aiohttp, and the framing must report malformed
events as errors rather than skip them.

Engine metrics: with the server's Prometheus ``/metrics`` beside ``--url`` (when it answers
in the text format) or ``--metrics-url``, a task of its own scrapes it every
``--metrics-interval`` and each level gets an ``engine`` entry
(:mod:`pytimings.serving.engine`); ``--no-metrics`` turns it off. ``--stop-at-saturation``
ends the sweep after the first level past saturation (:mod:`pytimings.serving.saturation`);
the levels not run are listed in ``saturation.not_run``.

Exit status: 0 when at least one measured request succeeded, 1 when all failed, 2 on
bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.util
import itertools
import json
import math
import os
import re
import socket
import sys
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytimings._core import now_ns
from pytimings.console.args import SEED
from pytimings.errors import UsageError
from pytimings.model.requests import RequestRecord, errors_by_kind
from pytimings.record.recorder import boot_id
from pytimings.serving import engine as engine_metrics
from pytimings.serving import telemetry
from pytimings.serving._format import fmt_num, format_table
from pytimings.serving.metrics import DEFINITIONS, parse_slo, serving_metrics
from pytimings.serving.runfile import SCHEMA, write_json
from pytimings.serving.saturation import RULE as SATURATION_RULE
from pytimings.serving.saturation import past_saturation

APIS = ("completions", "chat")
# soak intervals a level may have: each is a round with its own statistics, so 2 s cut
# into 1 us intervals ran out of memory after the load and lost every measured request
MAX_INTERVALS = 100_000

# common English words, each a single token (with its leading space) in the Llama-2/3,
# GPT-2/4 and Qwen BPE vocabularies
_WORDS = (
    "the of and to in is was for on are with as at by be this from that have or had not "
    "but what all were when we there can an your which their said if do will each about "
    "how up out them then she many some so these would other into has more her two like "
    "him see time could no make than first been its who now people my made over did down "
    "only way find use may water long little very after words called just where most know "
    "get through back much before go good new write our used me man too any day same right "
    "look think also around another came come work three word must because does part even "
    "place well such here take why things help put years different away again off went old"
).split()

PROMPT_NOTE = (
    "input_len words drawn (seeded) from common English words that are one BPE token "
    "each with a leading space; true prompt_tokens (from usage when sent) differ by the "
    "chat template and BOS tokens"
)


def build_prompt(n_tokens: int, rng: np.random.Generator) -> str:
    """Deterministic token-ish text of about ``n_tokens`` tokens (see module docstring)."""
    idx = rng.integers(0, len(_WORDS), size=max(n_tokens, 1))
    return " ".join(_WORDS[i] for i in idx)


@dataclass(frozen=True)
class Config:
    url: str
    model: str
    api: str
    concurrency: tuple[int, ...]
    input_len: int
    output_len: int
    requests: int
    rounds: int
    warmup: int
    rate: float | None
    seed: int
    timeout_s: float
    chunk_timeout_s: float
    ignore_eos: bool
    definition: str
    slo_ms: dict[str, float] = field(default_factory=dict)
    api_key: str | None = None
    duration_s: float | None = None  # soak: each level runs this long ...
    interval_s: float | None = None  # ... in intervals this long (rounds)
    # engine metrics (pytimings.serving.engine): the /metrics URL, None: off; explicit: given
    # by --metrics-url (scraped even when it fails), else the default, used if it answers
    metrics_url: str | None = None
    metrics_explicit: bool = False
    metrics_interval_s: float = 1.0
    stop_at_saturation: bool = False

    @property
    def endpoint(self) -> str:
        return self.url.rstrip("/") + (
            "/completions" if self.api == "completions" else "/chat/completions"
        )

    def body(self, prompt: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.output_len,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0.0,
        }
        if self.ignore_eos:
            body["ignore_eos"] = True
            body["stream_options"]["continuous_usage_stats"] = True
        if self.api == "completions":
            body["prompt"] = prompt
        else:
            body["messages"] = [{"role": "user", "content": prompt}]
        return body

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url, "model": self.model, "api": self.api,
            "input_len": self.input_len, "output_len": self.output_len,
            "requests": self.requests, "rounds": self.rounds, "warmup": self.warmup,
            "rate": self.rate, "seed": self.seed, "concurrency": list(self.concurrency),
            "timeout_s": self.timeout_s, "chunk_timeout_s": self.chunk_timeout_s,
            "ignore_eos": self.ignore_eos, "definition": self.definition,
            "slo_ms": dict(self.slo_ms), "prompt": PROMPT_NOTE,
            "duration_s": self.duration_s, "interval_s": self.interval_s,
            "metrics_url": self.metrics_url, "metrics_interval_s": self.metrics_interval_s,
            "stop_at_saturation": self.stop_at_saturation,
        }  # fmt: skip


class _StreamError(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


def _chunk_text(obj: dict[str, Any], api: str) -> str:
    choices = obj.get("choices")
    if not choices:
        return ""
    first = choices[0] if isinstance(choices, list) else None
    if not isinstance(first, dict):
        raise _StreamError("malformed_sse", f"choices is not a list of objects: {choices!r:.80}")
    if api == "completions":
        text = first.get("text")
    else:
        delta = first.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else None
    return text if isinstance(text, str) else ""


_MAX_TOKENS = 2**31 - 1  # a token count beyond this is no real reply (and overflows int64 sums)


def _usage_count(usage: dict[str, Any], key: str) -> int | None:
    """``usage[key]`` as a token count (None when absent or null); anything but an integer in
    [0, 2**31) -- a bool, a float such as 1e30, a negative or huge number -- is a bad reply."""
    v = usage.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _MAX_TOKENS:
        raise _StreamError("bad_usage", f"usage.{key} is not a token count: {v!r:.40}")
    return v


def _connect_timeout_types() -> tuple[type[BaseException], ...]:
    import aiohttp

    t = getattr(aiohttp, "ConnectionTimeoutError", None)  # aiohttp >= 3.10
    return (t,) if t is not None else ()


async def _send_one(session: Any, cfg: Config, req_id: str, prompt: str) -> RequestRecord:
    """One streaming request; every failure becomes an error kind on the record."""
    import aiohttp
    from aiohttp.http_exceptions import HttpProcessingError

    connect_timeout = _connect_timeout_types()
    headers = {"Accept": "text/event-stream"}
    if cfg.api_key:
        headers["Authorization"] = f"Bearer {cfg.api_key}"
    rec = RequestRecord(req_id=req_id, start_ns=now_ns(), input_tokens=None)
    try:
        async with session.post(cfg.endpoint, json=cfg.body(prompt), headers=headers) as resp:
            if resp.status >= 400:
                body = (await resp.text(errors="replace"))[:200].replace("\n", " ")
                hint = ""
                if resp.status == 404 and "/v1" not in urllib.parse.urlsplit(cfg.url).path:
                    hint = f" (--url {cfg.url} has no /v1: OpenAI-compatible servers serve there)"
                raise _StreamError(
                    f"http_{resp.status // 100}xx", f"HTTP {resp.status}{hint}: {body}"
                )
            ctype = resp.headers.get("Content-Type", "")
            if not ctype.startswith("text/event-stream"):
                raise _StreamError("malformed_sse", f"Content-Type {ctype!r}, not an event stream")
            await _read_events(resp, cfg, rec)
    except _StreamError as exc:
        rec.error, rec.error_detail = exc.kind, str(exc)
    except connect_timeout as exc:
        rec.error, rec.error_detail = "connect", f"{type(exc).__name__}: connect timed out"
    except (asyncio.TimeoutError, aiohttp.ServerTimeoutError) as exc:
        rec.error, rec.error_detail = "timeout", f"{type(exc).__name__}: no data in time"
    except aiohttp.ClientConnectorError as exc:
        rec.error, rec.error_detail = "connect", str(exc)
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
        rec.error, rec.error_detail = "early_close", f"{type(exc).__name__}: {exc}"
    except (aiohttp.ClientError, ValueError) as exc:  # ValueError: a line over the buffer
        rec.error, rec.error_detail = "malformed_sse", f"{type(exc).__name__}: {exc}"
    except HttpProcessingError as exc:  # LineTooLong: a line over the client's limit
        rec.error, rec.error_detail = "malformed_sse", f"{type(exc).__name__}: {exc}"[:200]
    rec.end_ns = now_ns()
    return rec


async def _read_events(resp: Any, cfg: Config, rec: RequestRecord) -> None:
    """Consume the SSE stream (WHATWG framing: data lines, blank line ends an event)."""
    data: list[str] = []
    event_ns = 0
    done = False
    counted = 0  # output tokens in the token chunks so far
    async for raw in resp.content:
        t = now_ns()
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if line:
            if line.startswith("data:"):
                if not data:
                    event_ns = t
                data.append(line[6:] if line.startswith("data: ") else line[5:])
            continue  # comments (":"), event:, id:, retry: carry nothing we measure
        if not data:
            continue
        payload, data = "\n".join(data), []
        if done:
            raise _StreamError("malformed_sse", "data after [DONE]")
        if payload.strip() == "[DONE]":
            done = True
            continue
        try:
            obj = json.loads(payload)
        except json.JSONDecodeError:
            raise _StreamError("malformed_sse", f"undecodable event: {payload[:80]!r}") from None
        except RecursionError:
            raise _StreamError("malformed_sse", "event nested too deep to decode") from None
        if not isinstance(obj, dict):
            raise _StreamError("malformed_sse", f"event is not an object: {payload[:80]!r}")
        if obj.get("error") is not None:
            raise _StreamError("sse_error", json.dumps(obj["error"])[:200])
        if rec.server_id is None and obj.get("id") is not None:
            rec.server_id = str(obj["id"])
        usage = obj.get("usage")
        completion = None
        if isinstance(usage, dict):
            prompt_tokens = _usage_count(usage, "prompt_tokens")
            if prompt_tokens is not None:
                rec.input_tokens = prompt_tokens
            completion = _usage_count(usage, "completion_tokens")
        text = _chunk_text(obj, cfg.api)
        if completion is not None and obj.get("choices"):
            # the running usage (continuous_usage_stats) counts the chunk's tokens: several
            # (speculative decoding, an API server behind), or some with no text yet (the
            # detokenizer holds back an incomplete character); no new token, no token chunk
            if completion > counted:
                rec.chunk_ns.append(event_ns)
                rec.chunk_tokens.append(completion - counted)
                counted = completion
        elif text:
            rec.chunk_ns.append(event_ns)  # no count in the chunk: one token
            rec.chunk_tokens.append(1)
            counted += 1
        if completion is not None:
            rec.output_tokens = completion
    if not done:
        raise _StreamError(
            "early_close", f"stream ended before [DONE] after {len(rec.chunk_ns)} chunks"
        )


@dataclass
class _Batch:
    records: list[RequestRecord]
    start_ns: int
    end_ns: int


async def _run_batch(
    session: Any,
    cfg: Config,
    concurrency: int,
    prompts: Iterable[tuple[str, str]],
    rng: np.random.Generator,
    tick: Callable[[], None],
    until_ns: int | None = None,
    sink: list[RequestRecord] | None = None,
) -> _Batch:
    """Send ``prompts`` closed-loop (or Poisson open-loop with cfg.rate), capped at C; with
    ``until_ns``, no request is sent after that time (a soak: ``prompts`` need not end);
    ``sink`` gets each request's record as it completes."""
    results: dict[int, RequestRecord] = {}
    feed = enumerate(prompts)

    def open_() -> bool:
        return until_ns is None or now_ns() < until_ns

    async def one(i: int, req_id: str, prompt: str) -> None:
        results[i] = rec = await _send_one(session, cfg, req_id, prompt)
        if sink is not None:
            sink.append(rec)
        tick()

    start = now_ns()
    if cfg.rate is None:

        async def worker() -> None:
            while open_() and (item := next(feed, None)) is not None:
                await one(item[0], *item[1])

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    else:
        cap = asyncio.Semaphore(concurrency)
        loop = asyncio.get_running_loop()
        t0, due = loop.time(), 0.0

        async def capped(i: int, req_id: str, prompt: str) -> None:
            async with cap:
                await one(i, req_id, prompt)

        tasks = []
        for i, (req_id, prompt) in feed:
            if i:
                due += float(rng.exponential(1.0 / cfg.rate))
            await asyncio.sleep(max(0.0, t0 + due - loop.time()))
            if not open_():
                break
            tasks.append(asyncio.create_task(capped(i, req_id, prompt)))
        await asyncio.gather(*tasks)
    end = now_ns()
    return _Batch([results[i] for i in sorted(results)], start, end)


async def _soak(
    session: Any,
    cfg: Config,
    conc: int,
    rng: np.random.Generator,
    tick: Callable[[], None],
    sink: list[RequestRecord],
) -> list[_Batch]:
    """One level sent without pause for cfg.duration_s, cut into intervals of
    cfg.interval_s by send time (a request belongs to the interval it was sent in; every
    interval's window is interval_s long, so their throughputs compare)."""
    assert cfg.duration_s is not None and cfg.interval_s is not None
    prompts = ((f"c{conc}-s{i}", build_prompt(cfg.input_len, rng)) for i in itertools.count())
    step = round(cfg.interval_s * 1e9)
    n = max(1, math.ceil(cfg.duration_s / cfg.interval_s - 1e-9))
    t0 = now_ns()
    batch = await _run_batch(
        session, cfg, conc, prompts, rng, tick, until_ns=t0 + n * step, sink=sink
    )
    bins: list[list[RequestRecord]] = [[] for _ in range(n)]
    for r in batch.records:
        bins[min((r.start_ns - t0) // step, n - 1)].append(r)
    out = [_Batch(recs, t0 + k * step, t0 + (k + 1) * step) for k, recs in enumerate(bins)]
    # a request let through just before the end is stamped when sent, microseconds later
    # (more on a loaded machine): the last window ends just after the last send
    out[-1].end_ns = max([out[-1].end_ns] + [r.start_ns + 1 for r in bins[-1]])
    return out


def _interval(rd: dict[str, Any]) -> dict[str, Any]:
    """A soak interval's entry in ``intervals``: the figures the drift test follows."""
    s = rd["summary"]
    return {
        "index": rd["round"], "start_ns": rd["start_ns"], "end_ns": rd["end_ns"],
        "completed": s["completed"], "errors": s["errors"],
        "request_throughput": s["request_throughput"],
        "output_throughput": s["output_throughput"],
        **{f"{m}_ms": {"p50": s[f"{m}_ms"]["median"], "p99": s[f"{m}_ms"]["p99"]}
           for m in ("ttft", "tpot", "itl", "e2el")},
    }  # fmt: skip


class WarmupFailed(Exception):
    """Every warm-up request of a level failed: the run stops before measuring."""

    def __init__(self, concurrency: int, reason: str) -> None:
        super().__init__(f"every warm-up request at concurrency {concurrency} failed: {reason}")


class RunStopped(Exception):
    """The run stopped before its last level: ``doc`` is the run file of what was measured
    (the levels done, and under ``interrupted`` the stopped level's measured requests)."""

    def __init__(self, doc: dict[str, Any], cause: BaseException) -> None:
        super().__init__(str(cause))
        self.doc, self.cause = doc, cause


async def run_load(
    cfg: Config, progress: Callable[[int | None], Callable[[], None]] | None = None
) -> dict[str, Any]:
    """Run every level and round; return the ``pytimings.serving/2`` document."""
    import aiohttp

    per_level = cfg.warmup + cfg.rounds * cfg.requests
    total = None if cfg.duration_s is not None else len(cfg.concurrency) * per_level
    tick = progress(total) if progress is not None else (lambda: None)
    timeout = aiohttp.ClientTimeout(total=cfg.timeout_s, sock_read=cfg.chunk_timeout_s)
    connector = aiohttp.TCPConnector(limit=max(cfg.concurrency), force_close=False)
    levels: list[dict[str, Any]] = []
    metrics_url, metrics_note = await _metrics_url(cfg)
    scraper = engine_metrics.Scraper(metrics_url or "", cfg.metrics_interval_s)
    async with (
        aiohttp.ClientSession(timeout=timeout, connector=connector) as session,
        scraper,
    ):
        scraping = asyncio.create_task(scraper.run()) if metrics_url else None
        measured: list[RequestRecord] = []
        try:
            saturated = await _levels(cfg, session, scraper, metrics_url, tick, levels, measured)
        except (Exception, KeyboardInterrupt, asyncio.CancelledError) as exc:
            if not levels and not measured:
                raise
            # what was measured is kept: the levels done, and the stopped level's requests
            doc = _document(cfg, levels, metrics_url, metrics_note, None)
            doc["interrupted"] = {
                "concurrency": cfg.concurrency[len(levels)],
                "reason": f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
                "requests": [r.to_json() for r in measured],
            }
            raise RunStopped(doc, exc) from exc
        finally:
            if scraping is not None:
                scraping.cancel()
    return _document(cfg, levels, metrics_url, metrics_note, saturated)


async def _levels(
    cfg: Config,
    session: Any,
    scraper: engine_metrics.Scraper,
    metrics_url: str | None,
    tick: Callable[[], None],
    levels: list[dict[str, Any]],
    measured: list[RequestRecord],
) -> int | None:
    """Measure the levels into ``levels``, each appended when done (``measured``: the
    level in progress's measured requests so far); returns the level past saturation the
    sweep stopped after, if any."""
    for li, conc in enumerate(cfg.concurrency):
        measured.clear()
        rng = np.random.default_rng([cfg.seed, li])
        warm_prompts = [
            (f"c{conc}-w{i}", build_prompt(cfg.input_len, rng)) for i in range(cfg.warmup)
        ]
        warm = await _run_batch(session, cfg, conc, warm_prompts, rng, tick)
        if warm.records and all(r.error is not None for r in warm.records):
            # the server cannot serve these requests: measuring would only count failures
            raise WarmupFailed(conc, warm.records[0].error_detail or str(warm.records[0].error))
        if metrics_url:
            measured_from = (await scraper.scrape()).t_ns  # the level's counters start here
        rounds = []
        batches = []
        for ri in range(cfg.rounds if cfg.duration_s is None else 0):
            prompts = [
                (f"c{conc}-r{ri}-{i}", build_prompt(cfg.input_len, rng))
                for i in range(cfg.requests)
            ]
            batches.append(await _run_batch(session, cfg, conc, prompts, rng, tick, sink=measured))
        if cfg.duration_s is not None:
            batches = await _soak(session, cfg, conc, rng, tick, measured)
        for ri, batch in enumerate(batches):
            summary = serving_metrics(
                batch.records, cfg.definition, cfg.slo_ms, [(batch.start_ns, batch.end_ns)]
            ).to_dict()
            rounds.append(
                {
                    "round": ri, "start_ns": batch.start_ns, "end_ns": batch.end_ns,
                    "errors": summary["errors"], "summary": summary,
                    "requests": [r.to_json() for r in batch.records],
                }
            )  # fmt: skip
        level_summary = serving_metrics(
            [r for b in batches for r in b.records],
            cfg.definition,
            cfg.slo_ms,
            [(b.start_ns, b.end_ns) for b in batches],
        ).to_dict()
        level: dict[str, Any] = {
            "concurrency": conc, "rate": cfg.rate,
            "warmup": {"requests": len(warm.records), "errors": errors_by_kind(warm.records)},
            "rounds": rounds, "summary": level_summary,
        }  # fmt: skip
        if cfg.duration_s is not None:
            level["intervals"] = [_interval(rd) for rd in rounds]
        level["engine"] = None
        if metrics_url:
            measured_to = (await scraper.scrape()).t_ns  # ... and end here
            level["engine"] = scraper.level_engine(measured_from, measured_to)
        levels.append(level)
        measured.clear()
        if (
            cfg.stop_at_saturation
            and li
            and past_saturation(_saturation_point(levels[-2]), _saturation_point(levels[-1]))
        ):
            return conc
    return None


def _document(
    cfg: Config,
    levels: list[dict[str, Any]],
    metrics_url: str | None,
    metrics_note: str,
    saturated: int | None,
) -> dict[str, Any]:
    """The ``pytimings.serving/2`` document of the levels measured."""
    return {
        "schema": SCHEMA,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "clock": "CLOCK_MONOTONIC ns of the load-generator host (pytimings.now_ns)",
        "host": socket.gethostname(),
        "boot_id": boot_id(),
        "config": cfg.to_json(),
        "levels": levels,
        "engine_metrics": {"url": metrics_url, "interval_s": cfg.metrics_interval_s,
                           "note": metrics_note},
        "saturation": {"rule": SATURATION_RULE, "stop": cfg.stop_at_saturation,
                       "stopped_after": saturated,
                       "not_run": [c for c in cfg.concurrency[len(levels):]]},
    }  # fmt: skip


def engine_line(doc: dict[str, Any]) -> str:
    """One line on the engine metrics: where from, how many scrapes failed (or why none)."""
    em = doc["engine_metrics"]
    if em["url"] is None:
        return f"engine metrics: {em['note']}"
    engines = [lv["engine"] for lv in doc["levels"] if lv["engine"] is not None]
    n = sum(e["scrapes"] for e in engines)
    failed = sum(e["failed_scrapes"] for e in engines)
    line = f"engine metrics from {em['url']}: {n} scrapes in the measured rounds, {failed} failed"
    non_finite = sum(e.get("left_out", {}).get("non_finite", 0) for e in engines)
    over_cap = sum(e.get("left_out", {}).get("over_cap", 0) for e in engines)
    if non_finite:
        line += f"; {non_finite} NaN or infinite samples left out"
    if over_cap:
        line += (
            f"; {over_cap} samples of metrics outside the concept table left out (over "
            f"{engine_metrics.MAX_OTHER_SERIES:,} series in a scrape)"
        )
    return line


def _saturation_point(level: dict[str, Any]) -> dict[str, float]:
    s = level["summary"]
    p50 = s["ttft_ms"]["median"]
    return {"throughput": s["output_throughput"], "ttft_p50": math.nan if p50 is None else p50}


async def _metrics_url(cfg: Config) -> tuple[str | None, str]:
    """The URL to scrape and a note on why (or why not)."""
    if cfg.metrics_url is None:
        return None, "off (--no-metrics)"
    if cfg.metrics_explicit:
        return cfg.metrics_url, "--metrics-url"
    if importlib.util.find_spec("prometheus_client") is None:
        return None, "off: prometheus_client is not installed (pip install 'pytimings[serving]')"
    if await engine_metrics.probe(cfg.metrics_url, cfg.metrics_interval_s):
        return cfg.metrics_url, "the server's /metrics (answered in Prometheus text format)"
    return None, f"off: {cfg.metrics_url} gave no Prometheus text exposition"


# --- command line -------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", required=True, help="model name sent in each request")
    p.add_argument("--api", default="completions", help="completions (default) or chat")
    p.add_argument("--concurrency", default="1", help="comma-separated levels, e.g. 1,4")
    p.add_argument("--input-len", type=int, default=1080, help="prompt tokens (approximate)")
    p.add_argument("--output-len", type=int, default=1020, help="max_tokens per request")
    p.add_argument("--requests", type=int, default=10, help="requests per round")
    p.add_argument("--rounds", type=int, default=3, help="measured rounds per level")
    p.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="unmeasured requests per level (>= the concurrency opens every connection first)",
    )
    p.add_argument("--rate", type=float, default=None, help="open-loop Poisson rate (req/s)")
    p.add_argument(
        "--duration",
        default=None,
        help="soak: run each level this long (e.g. 1h, 30m, 90s) instead of --rounds of "
        "--requests, saving per-interval metrics",
    )
    p.add_argument("--interval", default="1m", help="soak: length of one interval (default 1m)")
    p.add_argument("--seed", type=SEED, default=0, help="seed for prompts and arrivals")
    p.add_argument("--timeout", type=float, default=600.0, help="per-request limit, seconds")
    p.add_argument(
        "--chunk-timeout", type=float, default=60.0, help="longest silence in a stream, seconds"
    )
    p.add_argument(
        "--no-ignore-eos",
        action="store_true",
        help="send neither ignore_eos nor stream_options.continuous_usage_stats "
        "(for servers that reject unknown fields)",
    )
    p.add_argument(
        "--definition", default="vllm", help=f"metric definitions: {', '.join(DEFINITIONS)}"
    )
    p.add_argument("--slo", default=None, help="goodput SLOs, e.g. ttft=200ms,tpot=50ms")
    p.add_argument("--api-key", default=None, help="bearer token (default: $OPENAI_API_KEY)")
    p.add_argument(
        "--metrics-url",
        default=None,
        help="engine Prometheus endpoint to scrape during the run (default: /metrics beside "
        "--url, used when it answers in Prometheus text format)",
    )
    p.add_argument("--no-metrics", action="store_true", help="do not scrape engine metrics")
    p.add_argument(
        "--metrics-interval", default="1s", help="engine metrics scrape period (default 1s)"
    )
    p.add_argument(
        "--stop-at-saturation",
        action="store_true",
        help="end the sweep after the first level past saturation (output throughput within "
        "5%% of the previous level's while TTFT p50 doubles)",
    )
    p.add_argument("--out", required=True, help="output JSON (pytimings.serving/2)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar, no summary table")
    p.add_argument(
        "--telemetry",
        action="store_true",
        help="sample the local GPUs (NVML) during the load into the run file (docs/telemetry.md)",
    )
    p.add_argument(
        "--telemetry-url",
        default=None,
        metavar="URL",
        help="instead, scrape a DCGM exporter's Prometheus endpoint (http://HOST:9400/metrics)",
    )
    p.add_argument(
        "--telemetry-interval", type=float, default=0.1, metavar="S",
        help="seconds between telemetry samples (default 0.1)",
    )  # fmt: skip


_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(h|m|s|ms)?\s*$")
_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, None: 1.0}


def parse_duration(text: str, name: str) -> float:
    """``"1h"``, ``"30m"``, ``"90s"``, ``"250ms"``, ``"5"`` (seconds) -> seconds (> 0)."""
    m = _DURATION.match(text)
    if m is None or not float(m.group(1)) > 0:
        raise UsageError(f"{name} {text!r}: expected a positive time like 1h, 30m, 90s")
    return float(m.group(1)) * _SECONDS[m.group(2)]


def _positive(name: str, value: float, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise UsageError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value:g}")


def config_from_args(args: argparse.Namespace) -> Config:
    try:
        url = urllib.parse.urlsplit(args.url)
        url.port  # noqa: B018 -- raises ValueError on a bad port
    except ValueError as exc:
        raise UsageError(f"--url {args.url!r}: {exc}") from None
    if url.scheme not in ("http", "https") or not url.hostname or " " in args.url:
        raise UsageError(f"--url {args.url!r}: expected http(s)://HOST:PORT/v1")
    if args.api not in APIS:
        raise UsageError(f"--api {args.api!r}: expected one of {', '.join(APIS)}")
    try:
        levels = tuple(int(x) for x in str(args.concurrency).split(",") if x.strip())
    except ValueError:
        raise UsageError(
            f"--concurrency {args.concurrency!r}: expected integers like 1,4"
        ) from None
    if not levels or min(levels) < 1:
        raise UsageError(f"--concurrency {args.concurrency!r}: every level must be >= 1")
    positive = {
        "--input-len": args.input_len,
        "--output-len": args.output_len,
        "--requests": args.requests,
        "--rounds": args.rounds,
        "--timeout": args.timeout,
        "--chunk-timeout": args.chunk_timeout,
    }
    for name, value in positive.items():
        _positive(name, value)
    _positive("--warmup", args.warmup, allow_zero=True)
    if args.rate is not None:
        _positive("--rate", args.rate)
    if args.definition not in DEFINITIONS:
        raise UsageError(
            f"--definition {args.definition!r}: expected one of {', '.join(DEFINITIONS)}"
        )
    duration = interval = None
    if args.duration is not None:
        duration = parse_duration(args.duration, "--duration")
        interval = parse_duration(args.interval, "--interval")
        if interval > duration:
            raise UsageError(
                f"--interval {args.interval} is longer than --duration {args.duration}"
            )
        if duration / interval > MAX_INTERVALS:
            raise UsageError(
                f"--interval {args.interval}: --duration {args.duration} would cut "
                f"{duration / interval:.3g} intervals, each a round with its own statistics; "
                f"at most {MAX_INTERVALS:,} (an interval of {duration / MAX_INTERVALS:.3g} s "
                "or longer)"
            )
    metrics_url, explicit = _metrics_target(args)
    metrics_interval = parse_duration(args.metrics_interval, "--metrics-interval")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        raise UsageError(f"--out {args.out!r}: directory {out_dir} does not exist")
    if os.path.isdir(args.out):
        raise UsageError(f"--out {args.out!r}: is a directory")
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise UsageError(f"--out {args.out!r}: directory {out_dir} is not writable")
    return Config(
        url=args.url, model=args.model, api=args.api, concurrency=levels,
        input_len=args.input_len, output_len=args.output_len, requests=args.requests,
        rounds=args.rounds, warmup=args.warmup, rate=args.rate, seed=args.seed,
        timeout_s=args.timeout, chunk_timeout_s=args.chunk_timeout,
        ignore_eos=not args.no_ignore_eos, definition=args.definition,
        slo_ms=parse_slo(args.slo), api_key=args.api_key or os.environ.get("OPENAI_API_KEY"),
        duration_s=duration, interval_s=interval, metrics_url=metrics_url,
        metrics_explicit=explicit, metrics_interval_s=metrics_interval,
        stop_at_saturation=args.stop_at_saturation,
    )  # fmt: skip


def _metrics_target(args: argparse.Namespace) -> tuple[str | None, bool]:
    if args.no_metrics:
        if args.metrics_url is not None:
            raise UsageError("--metrics-url and --no-metrics contradict each other")
        return None, False
    if args.metrics_url is None:
        return engine_metrics.default_url(args.url), False
    u = urllib.parse.urlsplit(args.metrics_url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise UsageError(
            f"--metrics-url {args.metrics_url!r}: expected http(s)://HOST:PORT/metrics"
        )
    if importlib.util.find_spec("prometheus_client") is None:
        raise UsageError("--metrics-url needs prometheus_client: pip install 'pytimings[serving]'")
    return args.metrics_url, True


def _progress_bar(total: int | None) -> tuple[Any, Callable[[], None]]:
    from rich.console import Console
    from rich.progress import Progress

    bar = Progress(console=Console(stderr=True), transient=True)  # stdout stays the table
    task = bar.add_task("requests", total=total)
    bar.start()
    return bar, lambda: bar.advance(task)


def summary_table(doc: dict[str, Any]) -> str:
    headers = ["conc", "round", "ok", "errors", "req/s", "out tok/s", "goodput", "TTFT mean",
               "TTFT p99", "TPOT mean", "ITL p99", "E2E mean", "E2E p99"]  # fmt: skip
    rows = []
    for lv in doc["levels"]:
        for label, s, errs in [
            *((str(r["round"]), r["summary"], r["errors"]) for r in lv["rounds"]),
            ("all", lv["summary"], lv["summary"]["errors"]),
        ]:
            err = ",".join(f"{k}={v}" for k, v in sorted(errs.items())) or "0"
            rows.append([
                str(lv["concurrency"]), label, str(s["completed"]), err,
                fmt_num(s["request_throughput"]), fmt_num(s["output_throughput"], 1),
                fmt_num(s["goodput"]),
                fmt_num(s["ttft_ms"]["mean"]), fmt_num(s["ttft_ms"]["p99"]),
                fmt_num(s["tpot_ms"]["mean"]), fmt_num(s["itl_ms"]["p99"]),
                fmt_num(s["e2el_ms"]["mean"]), fmt_num(s["e2el_ms"]["p99"]),
            ])  # fmt: skip
    return "times in ms; goodput in req/s within the SLOs\n" + format_table(headers, rows)


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    if importlib.util.find_spec("aiohttp") is None:
        raise UsageError("loadgen needs aiohttp: pip install 'pytimings[serving]'")
    bars: list[Any] = []

    def progress(total: int | None) -> Callable[[], None]:
        bar, tick = _progress_bar(total)
        bars.append(bar)
        return tick

    # nothing at all when not a terminal (or without rich: the bar is a convenience)
    show_bar = (
        not args.quiet and sys.stderr.isatty() and importlib.util.find_spec("rich") is not None
    )
    if not args.telemetry_interval > 0:
        raise UsageError(f"--telemetry-interval: must be positive, not {args.telemetry_interval}")
    sampling = telemetry.start(args.telemetry, args.telemetry_url, args.telemetry_interval)
    stopped: RunStopped | None = None
    try:
        doc = asyncio.run(run_load(cfg, progress if show_bar else None))
    except WarmupFailed as exc:  # said even with --quiet, as below
        print(f"pytimings loadgen: {exc}; nothing measured, no run file", file=sys.stderr)
        return 1
    except RunStopped as exc:  # written below, then said even with --quiet
        doc, stopped = exc.doc, exc
    finally:
        for bar in bars:
            bar.stop()
        if sampling is not None:
            sampling[1]()  # the sampler's last sample is after the last level's end
    if sampling is not None:
        telemetry.attach(doc, sampling[0])
    write_json(doc, args.out)
    if stopped is not None:
        it = doc["interrupted"]
        print(
            f"pytimings loadgen: stopped at concurrency {it['concurrency']} ({it['reason']}); "
            f"wrote the {len(doc['levels'])} levels done and that level's "
            f"{len(it['requests'])} measured requests (under 'interrupted') to {args.out}",
            file=sys.stderr,
        )
        return 130 if isinstance(stopped.cause, KeyboardInterrupt | asyncio.CancelledError) else 1
    if not args.quiet:
        print(summary_table(doc))
        print(engine_line(doc))
        sat = doc["saturation"]
        if sat["stopped_after"] is not None:
            print(f"stopped after concurrency {sat['stopped_after']}, past saturation "
                  f"({sat['rule']}); not run: {', '.join(map(str, sat['not_run']))}")  # fmt: skip
        print(f"wrote {args.out}")
    completed = sum(lv["summary"]["completed"] for lv in doc["levels"])
    if completed:
        return 0
    # said even with --quiet: exit status 1 alone does not tell why
    errors: dict[str, int] = {}
    for lv in doc["levels"]:
        for kind, n in lv["summary"]["errors"].items():
            errors[kind] = errors.get(kind, 0) + int(n)
    counts = ", ".join(f"{kind} {n}" for kind, n in sorted(errors.items())) or "none counted"
    print(
        f"pytimings loadgen: every measured request failed ({counts}); see {args.out}",
        file=sys.stderr,
    )
    return 1
