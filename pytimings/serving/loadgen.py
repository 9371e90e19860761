"""``pytimings loadgen``: drive an OpenAI-compatible streaming server and save latencies.

Sends streaming (SSE) requests to ``<url>/completions`` or ``<url>/chat/completions``,
closed-loop at a fixed concurrency (each of C workers sends its next request when the
previous one ends) or, with ``--rate R``, open-loop: arrivals at R requests/s (Poisson by
default, from a seeded generator), with the concurrency level as a cap on
requests in flight (as ``vllm bench serve --max-concurrency``).

Timing. A request's clock (``start_ns``) starts when its bytes leave: aiohttp's trace hooks
run just before the request's headers and body are written to the socket, in the same step
of the event loop (:func:`send_stamps`), so building the request, waiting for a connection
and a busy event loop are not in its TTFT; a closed-loop round that starts C requests at
once charges its own start-up to none of them. ``scheduled_ns`` keeps when it was due (its
arrival time in an open-loop schedule, the moment its closed-loop worker took it), and the
difference is reported as ``send_lag_ms`` beside TTFT (with ``--rate`` and a cap, it
includes the wait for a free slot): the client's own lateness, which must stay small for
the offered load to be the one intended. Before each level's warm-up, C GETs of
``<url>/models`` at once open C pooled connections.

Workloads (:mod:`pytimings.serving.workload`): ``--trace`` replays a request trace's arrival
times and lengths (each level is one round of the whole trace, ``--concurrency`` its cap),
``--dataset`` takes prompts from a ShareGPT-style file, ``--arrival`` / ``--burstiness`` /
``--ramp`` shape the open loop, ``--rates`` runs one level per rate, ``--max-error-rate``
stops the sweep after a round whose level has failed more than that share, and
``--percentiles`` saves more percentiles; all are recorded in ``config.workload``.

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
import errno
import importlib.util
import itertools
import json
import math
import os
import signal
import socket
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytimings._core import now_ns
from pytimings.console import options
from pytimings.console.options import DETAIL, duration
from pytimings.console.text import duration_ms
from pytimings.errors import UsageError, install_hint
from pytimings.model.requests import RequestRecord, errors_by_kind
from pytimings.record.memory import check_period
from pytimings.record.recorder import boot_id
from pytimings.serving import engine as engine_metrics
from pytimings.serving import telemetry, workload
from pytimings.serving._format import fmt_num, format_table
from pytimings.serving.metrics import DEFINITIONS, parse_slo, serving_metrics
from pytimings.serving.runfile import SCHEMA, write_json
from pytimings.serving.saturation import RULE as SATURATION_RULE
from pytimings.serving.saturation import past_saturation

APIS = ("completions", "chat")
# soak intervals a level may have: each is a round with its own statistics, so 2 s cut
# into 1 us intervals ran out of memory after the load and lost every measured request
MAX_INTERVALS = 100_000
OPEN_TIMEOUT_S = 10.0  # the pool warm-up's GETs: a server that never answers them costs this

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
    # workload (pytimings.serving.workload): a trace to replay or a dataset's prompts, the
    # arrival process of the open loop, one level per rate, an error-rate limit
    trace: workload.Trace | None = None
    trace_speed: float = 1.0
    dataset: workload.Dataset | None = None
    arrival: str = "poisson"
    burstiness: float = 1.0
    ramp_s: float = 0.0
    rates: tuple[float, ...] = ()  # --rates: one level per rate at the one concurrency
    max_error_rate: float | None = None
    percentiles: tuple[float, ...] = ()  # reported beside p90/p95/p99

    @property
    def levels(self) -> list[tuple[int, float | None]]:
        """(concurrency, rate) of each level, in the order run."""
        if self.rates:
            return [(self.concurrency[0], r) for r in self.rates]
        return [(c, self.rate) for c in self.concurrency]

    @property
    def endpoint(self) -> str:
        return self.url.rstrip("/") + (
            "/completions" if self.api == "completions" else "/chat/completions"
        )

    def body(self, prompt: str, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
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
            "workload": self.workload_json(),
        }  # fmt: skip

    def workload_json(self) -> dict[str, Any]:
        """What was sent and when, beyond the lengths and rate above (``compare`` tells two
        runs of different workloads by it)."""
        return {
            "source": "trace" if self.trace else "dataset" if self.dataset else "synthetic",
            "trace": None if self.trace is None else self.trace.to_json(self.trace_speed),
            "dataset": None if self.dataset is None else self.dataset.to_json(),
            "arrival": None if self.rate is None and not self.rates else self.arrival,
            "burstiness": self.burstiness if self.arrival == "gamma" else None,
            "ramp_s": self.ramp_s, "rates": list(self.rates),
            "max_error_rate": self.max_error_rate, "percentiles": list(self.percentiles),
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


# errno of a connection the peer tore down (RST: the server process died or aborted it)
_RESET_ERRNOS = frozenset({errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED})


def _error_kind(exc: BaseException) -> tuple[str, str]:
    """The error kind and detail of an exception out of aiohttp (see the kinds in
    :mod:`pytimings.serving.runfile`). A reset is told from an orderly close: aiohttp raises
    ClientOSError(ECONNRESET) when the RST comes before the response, and, once the body is
    streaming, a ClientPayloadError whose message ends with the ConnectionResetError (its
    only trace of the cause)."""
    import aiohttp
    from aiohttp.http_exceptions import HttpProcessingError, LineTooLong

    detail = f"{type(exc).__name__}: {exc}"[:300]
    connect_timeout = getattr(aiohttp, "ConnectionTimeoutError", ())  # aiohttp >= 3.10
    if isinstance(exc, connect_timeout):
        return "connect", f"{type(exc).__name__}: connect timed out"
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return "timeout", f"{type(exc).__name__}: no data for the chunk timeout"
    if isinstance(exc, asyncio.TimeoutError):
        return "timeout", f"{type(exc).__name__}: the request's total timeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "connect", str(exc)
    if isinstance(exc, OSError) and exc.errno in _RESET_ERRNOS:
        return "reset", detail
    if isinstance(exc, aiohttp.ClientPayloadError):
        return ("reset" if "ConnectionResetError" in str(exc) else "early_close"), detail
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "early_close", detail
    if isinstance(exc, LineTooLong | ValueError):  # ValueError: a line over the buffer
        return "malformed_sse", detail
    if isinstance(exc, aiohttp.ClientResponseError | HttpProcessingError):
        return "malformed_http", detail  # no valid HTTP response (status line, headers)
    if isinstance(exc, aiohttp.ClientConnectionError):
        return "connection", detail  # any other socket failure (errno in the detail)
    return "client", detail


def send_stamps() -> Any:
    """An aiohttp TraceConfig that sets a request's ``start_ns`` when its bytes leave: the
    hooks run just before the headers and each body chunk are written to the socket, in the
    same step of the event loop, so the last one is the request's send time to within
    microseconds (building the request, taking or opening a connection are before it)."""
    import aiohttp

    async def sent(_session: Any, ctx: Any, _params: Any) -> None:
        record = (ctx.trace_request_ctx or {}).get("record")
        if record is not None:
            record.start_ns = now_ns()

    trace = aiohttp.TraceConfig()
    trace.on_request_headers_sent.append(sent)
    trace.on_request_chunk_sent.append(sent)
    return trace


def _headers(cfg: Config) -> dict[str, str]:
    headers = {"Accept": "text/event-stream"}
    if cfg.api_key:
        headers["Authorization"] = f"Bearer {cfg.api_key}"
    return headers


async def _send_one(
    session: Any, cfg: Config, request: _Request, scheduled_ns: int
) -> RequestRecord:
    """One streaming request due at ``scheduled_ns``; ``start_ns`` is set when its bytes
    leave (:func:`send_stamps`; it stays the scheduled time if it never leaves). Every
    failure becomes an error kind on the record."""
    import aiohttp
    from aiohttp.http_exceptions import HttpProcessingError

    req_id, prompt, max_tokens = request
    rec = RequestRecord(req_id=req_id, start_ns=scheduled_ns, scheduled_ns=scheduled_ns)
    try:
        async with session.post(
            cfg.endpoint, json=cfg.body(prompt, max_tokens), headers=_headers(cfg),
            trace_request_ctx={"record": rec},
        ) as resp:  # fmt: skip
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
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, HttpProcessingError) as exc:
        rec.error, rec.error_detail = _error_kind(exc)
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


async def open_connections(session: Any, cfg: Config, n: int) -> None:
    """Open ``n`` pooled connections before anything is timed: ``n`` GETs of
    ``<url>/models`` at once (OpenAI-compatible servers list their models there; any answer,
    even a 404, leaves its connection open in the pool; a failure, or no answer within
    OPEN_TIMEOUT_S, is left to the warm-up to report)."""
    import aiohttp

    limit = aiohttp.ClientTimeout(total=min(cfg.timeout_s, OPEN_TIMEOUT_S))
    url = cfg.url.rstrip("/") + "/models"

    async def get() -> None:
        try:
            async with session.get(url, headers=_headers(cfg), timeout=limit) as r:
                await r.read()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            pass

    await asyncio.gather(*(get() for _ in range(n)))


_Request = tuple[str, str, int]  # request id, prompt, max_tokens


class _Prompts:
    """Prompts of a level: a dataset's, in a seeded shuffled order cycled, or built words."""

    def __init__(self, cfg: Config, rng: np.random.Generator) -> None:
        self.cfg, self.rng = cfg, rng
        ds = cfg.dataset
        self.order = iter(()) if ds is None else itertools.cycle(rng.permutation(len(ds.prompts)))

    def request(self, req_id: str, input_len: int | None = None, output_len: int | None = None
                ) -> _Request:  # fmt: skip
        """``input_len`` / ``output_len``: a trace's, else --input-len / --output-len."""
        max_tokens = self.cfg.output_len if output_len is None else output_len
        if self.cfg.dataset is not None:
            return req_id, self.cfg.dataset.prompts[next(self.order)], max_tokens
        words = self.cfg.input_len if input_len is None else input_len
        return req_id, build_prompt(words, self.rng), max_tokens


@dataclass
class _Batch:
    records: list[RequestRecord]
    start_ns: int
    end_ns: int


async def _run_batch(
    session: Any,
    cfg: Config,
    concurrency: int,
    requests: Iterable[_Request],
    due_s: Iterator[float] | None,
    tick: Callable[[], None],
    until_ns: int | None = None,
    sink: list[RequestRecord] | None = None,
) -> _Batch:
    """Send ``requests`` closed-loop, or open-loop at the times ``due_s`` (seconds from the
    batch's start), capped at C in flight; with ``until_ns``, no request is sent after that
    time (a soak: ``requests`` need not end); ``sink`` gets each record as it completes."""
    results: dict[int, RequestRecord] = {}
    feed = enumerate(requests)

    def open_() -> bool:
        return until_ns is None or now_ns() < until_ns

    async def one(i: int, request: _Request, scheduled_ns: int) -> None:
        results[i] = rec = await _send_one(session, cfg, request, scheduled_ns)
        if sink is not None:
            sink.append(rec)
        tick()

    start = now_ns()
    if due_s is None:

        async def worker() -> None:
            while open_() and (item := next(feed, None)) is not None:
                await one(*item, now_ns())

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    else:
        cap = asyncio.Semaphore(concurrency)
        loop = asyncio.get_running_loop()
        t0 = loop.time()

        async def capped(i: int, request: _Request, scheduled_ns: int) -> None:
            async with cap:
                await one(i, request, scheduled_ns)

        tasks = []
        for (i, request), due in zip(feed, due_s, strict=False):
            await asyncio.sleep(max(0.0, t0 + due - loop.time()))
            if not open_():
                break
            scheduled_ns = start + round(due * 1e9)
            tasks.append(asyncio.create_task(capped(i, request, scheduled_ns)))
        await asyncio.gather(*tasks)
    end = now_ns()
    return _Batch([results[i] for i in sorted(results)], start, end)


async def _soak(
    session: Any,
    cfg: Config,
    conc: int,
    prompts: _Prompts,
    due_s: Iterator[float] | None,
    tick: Callable[[], None],
    sink: list[RequestRecord],
) -> list[_Batch]:
    """One level sent without pause for cfg.duration_s, cut into intervals of
    cfg.interval_s by send time (a request belongs to the interval it was sent in; every
    interval's window is interval_s long, so their throughputs compare)."""
    assert cfg.duration_s is not None and cfg.interval_s is not None
    requests = (prompts.request(f"c{conc}-s{i}") for i in itertools.count())
    step = round(cfg.interval_s * 1e9)
    n = max(1, math.ceil(cfg.duration_s / cfg.interval_s - 1e-9))
    t0 = now_ns()
    batch = await _run_batch(
        session, cfg, conc, requests, due_s, tick, until_ns=t0 + n * step, sink=sink
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


class Terminated(Exception):
    """SIGTERM (what ``timeout``, Slurm and Kubernetes send) stopped the run: it is saved as
    Ctrl-C's is, and the command exits 143 (128 + SIGTERM)."""

    def __init__(self) -> None:
        super().__init__("SIGTERM")


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
    total = None if cfg.duration_s is not None else len(cfg.levels) * per_level
    tick = progress(total) if progress is not None else (lambda: None)
    timeout = aiohttp.ClientTimeout(total=cfg.timeout_s, sock_read=cfg.chunk_timeout_s)
    connector = aiohttp.TCPConnector(limit=max(cfg.concurrency), force_close=False)
    levels: list[dict[str, Any]] = []
    metrics_url, metrics_note = await _metrics_url(cfg)
    scraper = engine_metrics.Scraper(metrics_url or "", cfg.metrics_interval_s)
    terminated = _cancel_on_sigterm()
    async with (
        aiohttp.ClientSession(
            timeout=timeout, connector=connector, trace_configs=[send_stamps()]
        ) as session,
        scraper,
    ):
        scraping = asyncio.create_task(scraper.run()) if metrics_url else None
        measured: list[RequestRecord] = []
        try:
            saturated = await _levels(cfg, session, scraper, metrics_url, tick, levels, measured)
        except (Exception, KeyboardInterrupt, asyncio.CancelledError) as caught:
            if not levels and not measured:
                if terminated.is_set():
                    raise Terminated() from None
                raise
            exc = Terminated() if terminated.is_set() else caught
            # what was measured is kept: the levels done, and the stopped level's requests
            doc = _document(cfg, levels, metrics_url, metrics_note, None)
            doc["interrupted"] = {
                "concurrency": cfg.levels[len(levels)][0],
                "reason": f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
                "requests": [r.to_json() for r in measured],
            }
            raise RunStopped(doc, exc) from exc
        finally:
            if scraping is not None:
                scraping.cancel()
    return _document(cfg, levels, metrics_url, metrics_note, saturated)


def _cancel_on_sigterm() -> threading.Event:
    """On SIGTERM, cancel the running task as Ctrl-C does, so what was measured is saved;
    the event tells the two apart. Only the main thread can take signals."""
    terminated = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        return terminated
    task = asyncio.current_task()
    assert task is not None

    def on_sigterm() -> None:
        terminated.set()
        task.cancel()

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, on_sigterm)
    return terminated


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
    for li, (conc, rate) in enumerate(cfg.levels):
        measured.clear()
        rng = np.random.default_rng([cfg.seed, li])
        prompts = _Prompts(cfg, rng)

        def due(
            rate: float | None = rate, rng: np.random.Generator = rng
        ) -> Iterator[float] | None:
            if rate is None:
                return None
            return workload.arrivals(cfg.arrival, rate, cfg.burstiness, cfg.ramp_s, rng)

        await open_connections(session, cfg, conc)
        warm_requests = [prompts.request(f"c{conc}-w{i}") for i in range(cfg.warmup)]
        warm = await _run_batch(session, cfg, conc, warm_requests, due(), tick)
        if warm.records and all(r.error is not None for r in warm.records):
            # the server cannot serve these requests: measuring would only count failures
            raise WarmupFailed(conc, warm.records[0].error_detail or str(warm.records[0].error))
        if metrics_url:
            measured_from = (await scraper.scrape()).t_ns  # the level's counters start here
        rounds = []
        batches = []
        stopped = None
        for ri in range(cfg.rounds if cfg.duration_s is None else 0):
            if cfg.trace is not None:  # the whole trace, at its own times
                trace = cfg.trace
                requests = [
                    prompts.request(f"c{conc}-t{i}", n_in, n_out)
                    for i, (n_in, n_out) in enumerate(zip(trace.input_len, trace.output_len,
                                                          strict=True))
                ]  # fmt: skip
                times: Iterator[float] | None = iter(t / cfg.trace_speed for t in trace.arrival_s)
            else:
                requests = [prompts.request(f"c{conc}-r{ri}-{i}") for i in range(cfg.requests)]
                times = due()
            batches.append(
                await _run_batch(session, cfg, conc, requests, times, tick, sink=measured)
            )
            stopped = _error_limit_passed(cfg, measured, conc, rate, ri)
            if stopped is not None:
                break
        if cfg.duration_s is not None:
            batches = await _soak(session, cfg, conc, prompts, due(), tick, measured)
            stopped = _error_limit_passed(cfg, measured, conc, rate, len(batches) - 1)
        for ri, batch in enumerate(batches):
            summary = serving_metrics(
                batch.records,
                cfg.definition,
                cfg.slo_ms,
                [(batch.start_ns, batch.end_ns)],
                cfg.percentiles,
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
            cfg.percentiles,
        ).to_dict()
        level: dict[str, Any] = {
            "concurrency": conc, "rate": rate,
            "warmup": {"requests": len(warm.records), "errors": errors_by_kind(warm.records)},
            "rounds": rounds, "summary": level_summary,
        }  # fmt: skip
        if cfg.duration_s is not None:
            level["intervals"] = [_interval(rd) for rd in rounds]
        level["engine"] = None
        if metrics_url:
            measured_to = (await scraper.scrape()).t_ns  # ... and end here
            level["engine"] = scraper.level_engine(measured_from, measured_to)
        if stopped is not None:
            level["stopped"] = stopped
        levels.append(level)
        measured.clear()
        if stopped is not None:
            return None
        if (
            cfg.stop_at_saturation
            and li
            and past_saturation(_saturation_point(levels[-2]), _saturation_point(levels[-1]))
        ):
            return conc
    return None


def _error_limit_passed(
    cfg: Config, measured: list[RequestRecord], conc: int, rate: float | None, round_: int
) -> dict[str, Any] | None:
    """Where the sweep stops for --max-error-rate: the level's failed share of its measured
    requests so far, when over the limit (checked after each round); else None."""
    if cfg.max_error_rate is None or not measured:
        return None
    share = sum(r.error is not None for r in measured) / len(measured)
    if share <= cfg.max_error_rate:
        return None
    return {"concurrency": conc, "rate": rate, "round": round_, "error_rate": share,
            "errors": errors_by_kind(measured)}  # fmt: skip


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
                       "not_run": [c for c, _ in cfg.levels[len(levels):]]},
        "error_limit": {"max_error_rate": cfg.max_error_rate,
                        "stopped_at": next((lv["stopped"] for lv in levels if "stopped" in lv),
                                           None)},
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
        return None, f"off: prometheus_client is not installed ({install_hint('serving')})"
    if await engine_metrics.probe(cfg.metrics_url, cfg.metrics_interval_s):
        return cfg.metrics_url, "the server's /metrics (answered in Prometheus text format)"
    return None, f"off: {cfg.metrics_url} gave no Prometheus text exposition"


# --- command line -------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", required=True, help=f"the model name{DETAIL}sent in each request")
    p.add_argument("--api", default="completions", help="completions (default) or chat")
    p.add_argument("--concurrency", default="1", help="comma-separated levels, e.g. 1,4")
    p.add_argument("--input-len", type=int, default=1080, help="prompt tokens (approximate)")
    p.add_argument("--output-len", type=int, default=1020, help="max_tokens per request")
    p.add_argument("--requests", type=int, default=None, help="requests per round (default 10)")
    p.add_argument("--rounds", type=int, default=None, help="measured rounds per level (default 3)")
    p.add_argument(
        "--warmup",
        type=int,
        default=2,
        help=f"unmeasured warm-up repetitions first{DETAIL}requests per level (>= the "
        "concurrency opens every connection first)",
    )
    p.add_argument("--rate", type=float, default=None, help="open-loop arrival rate (req/s)")
    p.add_argument(
        "--rates",
        default=None,
        metavar="R1,R2,...",
        help="one open-loop level per rate (req/s), at the one --concurrency as the cap",
    )
    p.add_argument(
        "--arrival",
        default="poisson",
        help=f"open-loop arrivals: {', '.join(workload.ARRIVALS)} (default poisson)",
    )
    p.add_argument(
        "--burstiness",
        type=float,
        default=None,
        help="gamma arrivals' shape: < 1 burstier than Poisson, 1 Poisson, > 1 more regular",
    )
    p.add_argument(
        "--ramp",
        type=duration,
        default=None,
        metavar="TIME",
        help="raise the rate linearly from 0 over this long at each round's start",
    )
    p.add_argument(
        "--trace",
        default=None,
        metavar="FILE",
        help="replay a request trace (arrival times, input/output lengths): JSONL "
        "{timestamp, input_len, output_len}, Mooncake JSONL or the Azure LLM inference CSV; "
        "each level is one round of the whole trace",
    )
    p.add_argument(
        "--trace-speed",
        type=float,
        default=None,
        help="replay the trace this many times faster (default 1)",
    )
    p.add_argument(
        "--dataset",
        default=None,
        metavar="FILE",
        help="prompts from a ShareGPT-style JSON/JSONL file instead of --input-len words",
    )
    p.add_argument(
        "--max-error-rate",
        type=float,
        default=None,
        metavar="F",
        help="stop the sweep after a round in which the level's failed share passes F (0-1)",
    )
    p.add_argument(
        "--percentiles",
        default=None,
        metavar="Q1,Q2,...",
        help="more latency percentiles to save beside p90/p95/p99, e.g. 50,99.9",
    )
    p.add_argument(
        "--duration",
        type=duration,
        default=None,
        metavar="TIME",
        help="soak: run each level this long (e.g. 1h, 30m, 90s) instead of --rounds of "
        "--requests, saving per-interval metrics",
    )
    p.add_argument(
        "--interval", type=duration, default="1m", metavar="TIME", help="soak: an interval's length"
    )
    options.add_seed(p, "the prompts' and arrivals'")
    p.add_argument(
        "--timeout", type=duration, default="600s", metavar="TIME", help="per-request limit"
    )
    p.add_argument(
        "--chunk-timeout",
        type=duration,
        default="60s",
        metavar="TIME",
        help="longest silence in a stream",
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
        "--metrics-interval",
        type=duration,
        default="1s",
        metavar="TIME",
        help="engine metrics scrape period",
    )
    p.add_argument(
        "--stop-at-saturation",
        action="store_true",
        help="end the sweep after the first level past saturation (output throughput within "
        "5%% of the previous level's while TTFT p50 doubles)",
    )
    options.add_out(p, "the run file (JSON, pytimings.serving/2)", required=True)
    options.add_quiet(p)
    options.add_no_table(p, "the summary table and its lines (the run file has them)")
    options.add_telemetry(p, "during the load, into the run file")
    p.add_argument(
        "--telemetry-url",
        default=None,
        metavar="URL",
        help="instead, scrape a DCGM exporter's Prometheus endpoint (http://HOST:9400/metrics)",
    )


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
    work = _workload_args(args, levels)
    requests, rounds = args.requests, args.rounds
    if work["trace"] is not None:
        for flag, value in (("--requests", requests), ("--rounds", rounds), ("--rate", args.rate),
                            ("--rates", args.rates), ("--duration", args.duration),
                            ("--dataset", args.dataset)):  # fmt: skip
            if value is not None:
                raise UsageError(f"--trace sets the requests and their times; drop {flag}")
        requests, rounds = len(work["trace"].arrival_s), 1
    requests = 10 if requests is None else requests
    rounds = 3 if rounds is None else rounds
    positive = {
        "--input-len": args.input_len,
        "--output-len": args.output_len,
        "--requests": requests,
        "--rounds": rounds,
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
    soak_s = interval = None
    if args.duration is not None:
        soak_s, interval = args.duration, args.interval
        if interval > soak_s:
            raise UsageError(f"--interval {interval:g} s is longer than --duration {soak_s:g} s")
        if soak_s / interval > MAX_INTERVALS:
            raise UsageError(
                f"--interval {interval:g} s: --duration {soak_s:g} s would cut "
                f"{soak_s / interval:.3g} intervals, each a round with its own statistics; "
                f"at most {MAX_INTERVALS:,} (an interval of {soak_s / MAX_INTERVALS:.3g} s "
                "or longer)"
            )
    metrics_url, explicit = _metrics_target(args)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        raise UsageError(f"--out {args.out!r}: directory {out_dir} does not exist")
    if os.path.isdir(args.out):
        raise UsageError(f"--out {args.out!r}: is a directory")
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise UsageError(f"--out {args.out!r}: directory {out_dir} is not writable")
    return Config(
        url=args.url, model=args.model, api=args.api, concurrency=levels,
        input_len=args.input_len, output_len=args.output_len, requests=requests,
        rounds=rounds, warmup=args.warmup, rate=args.rate, seed=args.seed,
        timeout_s=args.timeout, chunk_timeout_s=args.chunk_timeout,
        ignore_eos=not args.no_ignore_eos, definition=args.definition,
        slo_ms=parse_slo(args.slo), api_key=args.api_key or os.environ.get("OPENAI_API_KEY"),
        duration_s=soak_s, interval_s=interval, metrics_url=metrics_url,
        metrics_explicit=explicit, metrics_interval_s=args.metrics_interval,
        stop_at_saturation=args.stop_at_saturation, **work,
    )  # fmt: skip


def _numbers(flag: str, text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected numbers like 1,2.5") from None
    if not values or not all(math.isfinite(v) for v in values):
        raise UsageError(f"{flag} {text!r}: expected finite numbers like 1,2.5")
    return values


def _workload_args(args: argparse.Namespace, levels: tuple[int, ...]) -> dict[str, Any]:
    """The workload fields of Config from the flags (each checked, files read, before any
    request is sent)."""
    rates: tuple[float, ...] = ()
    if args.rates is not None:
        rates = _numbers("--rates", args.rates)
        if min(rates) <= 0:
            raise UsageError(f"--rates {args.rates!r}: every rate must be > 0")
        if args.rate is not None:
            raise UsageError("--rate and --rates contradict each other (--rates R is --rate R)")
        if len(levels) > 1:
            raise UsageError("--rates sweeps the rate at one --concurrency (the cap); give one")
    open_loop = args.rate is not None or bool(rates)
    if args.arrival not in workload.ARRIVALS:
        raise UsageError(f"--arrival {args.arrival!r}: expected one of "
                         f"{', '.join(workload.ARRIVALS)}")  # fmt: skip
    if args.arrival != "poisson" and not open_loop:
        raise UsageError(f"--arrival {args.arrival}: needs --rate or --rates (an open loop)")
    if args.burstiness is not None:
        if args.arrival != "gamma":
            raise UsageError("--burstiness is the shape of --arrival gamma; give that too")
        _positive("--burstiness", args.burstiness)
    if args.ramp is not None:
        if not open_loop:
            raise UsageError("--ramp raises an open-loop rate: needs --rate or --rates")
        _positive("--ramp", args.ramp)
    if args.max_error_rate is not None and not 0 <= args.max_error_rate < 1:
        raise UsageError(f"--max-error-rate must be in [0, 1), got {args.max_error_rate:g}")
    percentiles: tuple[float, ...] = ()
    if args.percentiles is not None:
        percentiles = _numbers("--percentiles", args.percentiles)
        if not all(0 < q < 100 for q in percentiles):
            raise UsageError(f"--percentiles {args.percentiles!r}: each must be in (0, 100)")
    if args.trace_speed is not None:
        if args.trace is None:
            raise UsageError("--trace-speed needs --trace")
        _positive("--trace-speed", args.trace_speed)
    return {
        "trace": None if args.trace is None else workload.read_trace(args.trace),
        "trace_speed": args.trace_speed or 1.0,
        "dataset": None if args.dataset is None else workload.read_dataset(args.dataset),
        "arrival": args.arrival, "burstiness": args.burstiness or 1.0,
        "ramp_s": args.ramp or 0.0, "rates": rates, "max_error_rate": args.max_error_rate,
        "percentiles": percentiles,
    }  # fmt: skip


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
        raise UsageError(f"--metrics-url needs prometheus_client: {install_hint('serving')}")
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
               "TTFT p99", "TPOT mean", "ITL p99", "E2E mean", "E2E p99",
               "send lag p99"]  # fmt: skip
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
                duration_ms(s["ttft_ms"]["mean"]), duration_ms(s["ttft_ms"]["p99"]),
                duration_ms(s["tpot_ms"]["mean"]), duration_ms(s["itl_ms"]["p99"]),
                duration_ms(s["e2el_ms"]["mean"]), duration_ms(s["e2el_ms"]["p99"]),
                duration_ms(s["send_lag_ms"]["p99"]),
            ])  # fmt: skip
    return "goodput in req/s within the SLOs\n" + format_table(headers, rows)


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    if importlib.util.find_spec("aiohttp") is None:
        raise UsageError(f"loadgen needs aiohttp: {install_hint('serving')}")
    bars: list[Any] = []

    def progress(total: int | None) -> Callable[[], None]:
        bar, tick = _progress_bar(total)
        bars.append(bar)
        return tick

    # nothing at all when not a terminal (or without rich: the bar is a convenience)
    show_bar = (
        not args.quiet and sys.stderr.isatty() and importlib.util.find_spec("rich") is not None
    )
    try:
        check_period("--telemetry-interval", args.telemetry_interval)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    sampling = telemetry.start(args.telemetry, args.telemetry_url, args.telemetry_interval)
    stopped: RunStopped | None = None
    try:
        doc = asyncio.run(run_load(cfg, progress if show_bar else None))
    except WarmupFailed as exc:  # said even with --quiet, as below
        print(f"pytimings loadgen: {exc}; nothing measured, no run file", file=sys.stderr)
        return 1
    except Terminated:
        print("pytimings loadgen: SIGTERM before a request was measured; no run file",
              file=sys.stderr)  # fmt: skip
        return 128 + signal.SIGTERM
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
        if isinstance(stopped.cause, Terminated):
            return 128 + signal.SIGTERM
        return 130 if isinstance(stopped.cause, KeyboardInterrupt | asyncio.CancelledError) else 1
    if not args.no_table:
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
