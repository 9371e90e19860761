"""Serving metrics from request timelines: TTFT, TPOT, ITL, E2E, throughput, goodput.

Input is a sequence of :class:`~pytimings.model.requests.RequestRecord` (from the load
generator's JSON, ``runfile.load_run``, or :func:`pytimings.ingest.recording_file.load_requests`
of a saved recording) or a live log (:class:`~pytimings.model.requests.RequestSource`: the
recorder's :class:`~pytimings.record.requests.RequestLog`). Only requests with status "ok"
enter the latency and throughput figures; errored and unfinished ones are counted by kind in
``errors`` and still count toward peak concurrency (they loaded the server).

Notation for one request: ``s`` = start (sent / entered), ``c_1..c_m`` = arrival times of
its token-bearing chunks, ``k_j`` = tokens in chunk j, ``n`` = output tokens (the server's
``usage.completion_tokens`` when it sent one, else ``sum(k_j)``), ``e`` = end of the
response (stream closed / request context left).

Definitions, ``definition="vllm"`` (vLLM ``benchmarks/benchmark_serving.py`` /
``vllm bench serve``; the default):

* TTFT = c_1 - s. (vLLM's client stops it at the first event that has ``choices``, which
  for chat can be the role-only delta; servers send that with the first token, and
  pytimings takes the first chunk that carries text, as genai-perf and llmperf do.)
* E2E  = c_m - s (vLLM stops its clock at the last streamed chunk, not at [DONE]).
* TPOT = (E2E - TTFT) / (n - 1), only for n > 1: the first token is excluded because it
  carries the prefill. One value per request.
* ITL  = every gap c_{j+1} - c_j, pooled across requests (one value per gap, not per
  request; a chunk carrying several tokens is one gap, not divided): ITL per chunk.
* duration = the benchmark window (first request sent .. last request finished), given by
  the load generator per round; without one, min(s) .. max(e) over the records.
* request throughput = completed / duration; output token throughput = sum(n) / duration;
  total token throughput = sum(input + n) / duration.
* std is the population std (numpy default); percentiles are linear interpolation.

``definition="genai-perf"`` (NVIDIA GenAI-Perf, ``llm_profile_data_parser.py``):

* TTFT and E2E as above (its request latency ends at the last non-empty response).
* ITL  = (E2E - TTFT) / (n - 1) per request, n > 1: the formula vLLM calls TPOT, one value
  per request (older releases divided each chunk gap by the chunk's tokens). TPOT is
  reported with the same values.
* duration = max(c_m) - min(s) over the requests of the window: from the first request
  sent to the last response received, so idle time before/after the traffic is excluded.

``definition="llmperf"`` (Ray ``llmperf``, ``token_benchmark_ray.py`` and its OpenAI
client):

* TTFT as above. E2E = e - s: the clock runs until the stream is closed ([DONE] read).
* ITL  = (c_m - s) / n per request: the sum of all inter-chunk times *including TTFT*,
  divided by all output tokens -- so it is larger than vLLM's TPOT whenever TTFT exceeds
  one decode step.
* TPOT has no llmperf counterpart; it is reported with vLLM's formula for comparability.
* duration = the benchmark window, like vLLM; std is the sample std (ddof=1, pandas).

All definitions, besides: ITL per token (``itl_per_token``) = each gap c_{j+1} - c_j
divided by k_{j+1}, the tokens of the chunk that ends it, one value per token of that chunk
(a real engine streams several tokens in one chunk: vLLM when its API server falls behind,
and one chunk per verify step under speculative decoding), pooled across requests; and
tokens per chunk (``tokens_per_chunk``) = sum(k_j) / m over the chunks after the first (the
chunks that end a gap). With one token per chunk both equal their per-chunk counterparts.

All definitions: percentiles p90/p95/p99 (linear), max, mean, median, std; all in ms.
Token counts are the server's ``usage`` when it sent one, else counted chunks (the three
tools re-tokenize the generated text instead; with ``usage`` the counts are the server's
own and exact).

Goodput (DistServe's term, as in ``vllm bench serve --goodput``): requests per second that
completed within every given SLO. SLO keys: ``ttft``, ``tpot``, ``e2el`` and, for the
per-request ITL of genai-perf/llmperf, ``itl``. A request with n <= 1 has TPOT 0 for this
test (as vLLM does). Written ``ttft=200ms,tpot=50ms`` (units ms, s, us; bare = ms).

Peak concurrency: the most requests in flight at once (intervals [s, e); unfinished ones
open until the last timestamp seen).

Send lag (load generator): ``start_ns - scheduled_ns`` of each measured request that has a
``scheduled_ns`` -- how long the client took from the request being due to its last byte
leaving (building it, a connection, a busy event loop). It is the client's own delay, kept
out of TTFT and E2E and reported beside them; a large one means the client, not the
server, fell behind the schedule.

Phase breakdown: when an engine marked phases, the time in each phase per request (a phase
lasts until the next phase starts or the request ends; a phase entered several times,
e.g. "queue" after a preemption, is summed).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from pytimings.errors import UsageError
from pytimings.model.requests import RequestRecord, RequestSource, count_by_status
from pytimings.table import Table

__all__ = [
    "DEFINITIONS",
    "LatencyStats",
    "ServingMetrics",
    "measured",
    "parse_slo",
    "peak_concurrency",
    "phase_durations",
    "serving_metrics",
]

Definition = Literal["vllm", "genai-perf", "llmperf"]
DEFINITIONS: tuple[str, ...] = ("vllm", "genai-perf", "llmperf")
SLO_KEYS: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el")
_NS_PER_MS = 1e6


@dataclass(frozen=True)
class LatencyStats:
    """Summary of one latency metric, in milliseconds; NaN when there are no values."""

    count: int
    mean: float
    median: float
    std: float
    p90: float
    p95: float
    p99: float
    max: float
    # percentiles asked for beyond p90/p95/p99 (loadgen --percentiles): (q, value), saved
    # as "p<q>" (p50, p99.9)
    more: tuple[tuple[float, float], ...] = ()

    @classmethod
    def of(
        cls, values_ns: npt.ArrayLike, ddof: int = 0, percentiles: Sequence[float] = ()
    ) -> LatencyStats:
        v = np.asarray(values_ns, dtype=np.float64) / _NS_PER_MS
        extra = [q for q in percentiles if q not in (90, 95, 99)]
        if v.size == 0:
            nan = float("nan")
            return cls(0, nan, nan, nan, nan, nan, nan, nan, tuple((q, nan) for q in extra))
        p90, p95, p99, *more = np.percentile(v, [90, 95, 99, *extra])
        std = float(np.std(v, ddof=ddof)) if v.size > ddof else float("nan")
        return cls(
            int(v.size), float(v.mean()), float(np.median(v)), std,
            float(p90), float(p95), float(p99), float(v.max()),
            tuple(zip(extra, map(float, more), strict=True)),
        )  # fmt: skip

    def to_dict(self) -> dict[str, float | int]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "more"}
        out.update({f"p{q:g}": value for q, value in self.more})
        return out


@dataclass(frozen=True)
class ServingMetrics:
    definition: str
    completed: int
    errors: dict[str, int]  # error kind -> count; "unfinished" for never-ended requests
    duration_s: float
    input_tokens: int
    output_tokens: int
    request_throughput: float  # req/s
    output_throughput: float  # tok/s
    total_token_throughput: float  # tok/s
    peak_concurrency: int
    ttft: LatencyStats
    tpot: LatencyStats
    itl: LatencyStats
    e2el: LatencyStats
    itl_per_token: LatencyStats = field(default_factory=lambda: LatencyStats.of([]))
    tokens_per_chunk: float = float("nan")  # mean tokens of the chunks that end a gap
    slo_ms: dict[str, float] = field(default_factory=dict)
    goodput: float | None = None  # req/s meeting every SLO; None without SLOs
    good_requests: int | None = None
    phases: dict[str, LatencyStats] = field(default_factory=dict)
    # one row per measured request: req_id, start_ns, ttft_ns, tpot_ns (NaN: one token),
    # itl_ns (per-request ITL; NaN under vllm, whose ITL is per gap), e2el_ns, input_tokens,
    # output_tokens, and <phase>_ns per recorded phase (-1: not recorded for that request)
    per_request: Table = field(default_factory=lambda: Table({}))
    # measured requests whose input token count is unknown (counted as 0 in
    # total_token_throughput, which then understates)
    input_tokens_unknown: int = 0
    # the client's send lag of the measured requests that have a scheduled time (see above)
    send_lag: LatencyStats = field(default_factory=lambda: LatencyStats.of([]))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (times in ms, throughputs per second)."""
        return {
            "definition": self.definition,
            "completed": self.completed,
            "errors": dict(self.errors),
            "duration_s": self.duration_s,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "request_throughput": self.request_throughput,
            "output_throughput": self.output_throughput,
            "total_token_throughput": self.total_token_throughput,
            "peak_concurrency": self.peak_concurrency,
            "ttft_ms": self.ttft.to_dict(),
            "tpot_ms": self.tpot.to_dict(),
            "itl_ms": self.itl.to_dict(),
            "e2el_ms": self.e2el.to_dict(),
            "itl_per_token_ms": self.itl_per_token.to_dict(),
            "tokens_per_chunk": self.tokens_per_chunk,
            "slo_ms": dict(self.slo_ms),
            "goodput": self.goodput,
            "good_requests": self.good_requests,
            "phases_ms": {k: v.to_dict() for k, v in self.phases.items()},
            "input_tokens_unknown": self.input_tokens_unknown,
            "send_lag_ms": self.send_lag.to_dict(),
        }


_SLO_ITEM = re.compile(r"^\s*([a-z0-9_]+)\s*[=:]\s*([0-9]*\.?[0-9]+)\s*(ms|s|us)?\s*$")
_UNIT_TO_MS = {"ms": 1.0, "s": 1000.0, "us": 1e-3, None: 1.0}


def parse_slo(text: str | Mapping[str, float] | None) -> dict[str, float]:
    """``"ttft=200ms,tpot=50ms"`` -> ``{"ttft": 200.0, "tpot": 50.0}`` (milliseconds)."""
    if text is None:
        return {}
    if isinstance(text, Mapping):
        items = {str(k): float(v) for k, v in text.items()}
    else:
        items = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            m = _SLO_ITEM.match(part)
            if m is None:
                raise UsageError(f"--slo: cannot read {part!r} (expected e.g. ttft=200ms)")
            items[m.group(1)] = float(m.group(2)) * _UNIT_TO_MS[m.group(3)]
    for key, value in items.items():
        if key not in SLO_KEYS:
            raise UsageError(f"--slo: unknown metric {key!r} (one of {', '.join(SLO_KEYS)})")
        if not value > 0:
            raise UsageError(f"--slo: {key} must be positive, got {value}")
    return items


def peak_concurrency(records: Sequence[RequestRecord]) -> int:
    """Most requests in flight at once; intervals are [start, end)."""
    if not records:
        return 0
    horizon = max(max(r.end_ns or r.start_ns, *(r.chunk_ns or [0])) for r in records)
    starts = np.array([r.start_ns for r in records], dtype=np.int64)
    ends = np.array([horizon + 1 if r.end_ns is None else r.end_ns for r in records], np.int64)
    times = np.concatenate([starts, ends])
    delta = np.concatenate([np.ones(len(starts), np.int64), -np.ones(len(ends), np.int64)])
    order = np.lexsort((delta, times))  # at equal times, ends (-1) before starts (+1)
    return int(np.cumsum(delta[order]).max())


def phase_durations(rec: RequestRecord) -> dict[str, int]:
    """Time in each phase of a finished request (see the module docstring)."""
    out: dict[str, int] = {}
    if not rec.phases or rec.end_ns is None:
        return out
    phases = sorted(rec.phases, key=lambda p: p[1])
    bounds = [t for _, t in phases[1:]] + [rec.end_ns]
    for (name, t0), t1 in zip(phases, bounds, strict=True):
        out[name] = out.get(name, 0) + (t1 - t0)
    return out


def _window_duration_ns(
    ok: Sequence[RequestRecord], window: tuple[int, int] | None, definition: str
) -> int:
    if definition == "genai-perf":
        if not ok:
            return 0
        return max(r.chunk_ns[-1] for r in ok) - min(r.start_ns for r in ok)
    if window is not None:
        return window[1] - window[0]
    if not ok:
        return 0
    return max(r.end_ns or r.chunk_ns[-1] for r in ok) - min(r.start_ns for r in ok)


def _itl_per_token(ok: Sequence[RequestRecord]) -> tuple[npt.NDArray[np.float64], float]:
    """ITL per token (each gap over the tokens of the chunk ending it, repeated for each of
    them) and the mean tokens per gap-ending chunk; a chunk of 0 tokens carries no token."""
    values: list[npt.NDArray[np.float64]] = []
    tokens = chunks = 0
    for r in ok:
        gaps = np.diff(np.asarray(r.chunk_ns, dtype=np.int64)).astype(np.float64)
        k = np.asarray(r.chunk_tokens[1:], dtype=np.int64)
        has = k > 0
        values.append(np.repeat(gaps[has] / k[has], k[has]))
        tokens += int(k.sum())
        chunks += len(k)
    per_token = np.concatenate(values) if values else np.empty(0)
    return per_token, tokens / chunks if chunks else float("nan")


def measured(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    """The requests that enter latency figures: status "ok" with at least one token chunk
    (an "ok" request without one has no TTFT; it is counted as "no_tokens")."""
    return [r for r in records if r.status == "ok" and r.chunk_ns]


def serving_metrics(
    records: Iterable[RequestRecord] | RequestSource,
    definition: str = "vllm",
    slo: str | Mapping[str, float] | None = None,
    windows: Sequence[tuple[int, int]] | None = None,
    percentiles: Sequence[float] = (),
) -> ServingMetrics:
    """Metrics of ``records`` under ``definition`` ("vllm", "genai-perf", "llmperf").

    ``percentiles``: more percentiles of every latency (e.g. 50, 99.9), beside p90/p95/p99.

    ``windows``: the benchmark windows (start_ns, end_ns) the records were sent in, one per
    round; the duration is summed over windows and each record belongs to the window its
    start falls in. Without windows, one window spans the records.
    """
    if definition not in DEFINITIONS:
        raise UsageError(f"unknown definition {definition!r} (one of {', '.join(DEFINITIONS)})")
    recs = records.records() if isinstance(records, RequestSource) else list(records)
    slo_ms = parse_slo(slo)
    if "itl" in slo_ms and definition == "vllm":
        raise UsageError("--slo itl: vLLM's ITL is pooled per gap, not per request; use tpot")

    counts = count_by_status(recs)
    errors = {k: v for k, v in counts.items() if k != "ok" and v}
    ok = measured(recs)
    if len(ok) < counts["ok"]:
        errors["no_tokens"] = counts["ok"] - len(ok)

    start = np.array([r.start_ns for r in ok], dtype=np.int64)
    first = np.array([r.chunk_ns[0] for r in ok], dtype=np.int64)
    last = np.array([r.chunk_ns[-1] for r in ok], dtype=np.int64)
    end = np.array([r.end_ns for r in ok], dtype=np.int64)
    n_out = np.array([r.n_output for r in ok], dtype=np.int64)
    n_in = np.array([r.input_tokens or 0 for r in ok], dtype=np.int64)

    ttft = first - start
    e2el = (end if definition == "llmperf" else last) - start
    multi = n_out > 1
    tpot = np.full(len(ok), np.nan)
    tpot[multi] = (last[multi] - first[multi]) / (n_out[multi] - 1)
    if definition == "vllm":
        gaps = [np.diff(np.asarray(r.chunk_ns, dtype=np.int64)).astype(np.float64) for r in ok]
        itl_values: npt.NDArray[np.float64] = np.concatenate(gaps) if gaps else np.empty(0)
        itl_per_req = np.full(len(ok), np.nan)
    elif definition == "genai-perf":
        itl_per_req = tpot.copy()
        itl_values = itl_per_req[multi]
    else:  # llmperf: all inter-chunk times including TTFT, over all output tokens
        itl_per_req = np.where(n_out > 0, (last - start) / np.maximum(n_out, 1), np.nan)
        itl_values = itl_per_req[n_out > 0]

    per_token, tokens_per_chunk = _itl_per_token(ok)

    if windows:
        bounds = sorted(windows)
        owner = [
            next((i for i, (a, b) in enumerate(bounds) if a <= r.start_ns <= b), None) for r in ok
        ]
        if any(o is None for o in owner):
            raise UsageError("a request started outside every benchmark window given")
        duration_ns = sum(
            _window_duration_ns([r for r, o in zip(ok, owner, strict=True) if o == i], w,
                                definition)
            for i, w in enumerate(bounds)
        )  # fmt: skip
    else:
        duration_ns = _window_duration_ns(ok, None, definition)
    duration_s = duration_ns / 1e9

    def per_s(x: float) -> float:
        return x / duration_s if duration_s > 0 else float("nan")

    goodput = good = None
    if slo_ms:
        checks = {
            "ttft": ttft,
            "tpot": np.where(multi, tpot, 0.0),
            "itl": np.nan_to_num(itl_per_req, nan=0.0),
            "e2el": e2el,
        }
        good_mask = np.ones(len(ok), dtype=bool)
        for key, limit_ms in slo_ms.items():
            good_mask &= checks[key] <= limit_ms * _NS_PER_MS
        good = int(good_mask.sum())
        goodput = per_s(good)

    ddof = 1 if definition == "llmperf" else 0
    phase_rows = [phase_durations(r) for r in ok]
    phase_names = sorted({name for row in phase_rows for name in row})
    phases = {
        name: LatencyStats.of([row[name] for row in phase_rows if name in row], ddof)
        for name in phase_names
    }
    per_request = Table(
        {
            "req_id": np.array([r.req_id for r in ok], dtype=object),
            "start_ns": start,
            "ttft_ns": ttft,
            "tpot_ns": tpot,
            "itl_ns": itl_per_req,
            "e2el_ns": e2el,
            "input_tokens": n_in,
            "output_tokens": n_out,
            **{
                f"{name}_ns": np.array([row.get(name, -1) for row in phase_rows], np.int64)
                for name in phase_names
            },
        }
    )
    total_out = sum(n_out.tolist())  # Python ints: counts near int64 summed in int64 wrapped
    total_in = sum(n_in.tolist())
    return ServingMetrics(
        definition=definition,
        completed=len(ok),
        errors=errors,
        duration_s=duration_s,
        input_tokens=total_in,
        output_tokens=total_out,
        request_throughput=per_s(len(ok)),
        output_throughput=per_s(total_out),
        total_token_throughput=per_s(total_in + total_out),
        peak_concurrency=peak_concurrency(recs),
        ttft=LatencyStats.of(ttft, ddof, percentiles),
        tpot=LatencyStats.of(tpot[multi], ddof, percentiles),
        itl=LatencyStats.of(itl_values, ddof, percentiles),
        e2el=LatencyStats.of(e2el, ddof, percentiles),
        itl_per_token=LatencyStats.of(per_token, ddof, percentiles),
        tokens_per_chunk=tokens_per_chunk,
        slo_ms=slo_ms,
        goodput=goodput,
        good_requests=good,
        phases=phases,
        per_request=per_request,
        input_tokens_unknown=sum(r.input_tokens is None for r in ok),
        send_lag=LatencyStats.of(
            [r.start_ns - r.scheduled_ns for r in ok if r.scheduled_ns is not None],
            ddof,
            percentiles,
        ),
    )
