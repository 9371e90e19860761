"""The load generator's JSON output, schema ``pytimings.serving/2``: write, read, validate.

``pytimings.serving/1`` files (before engine metrics) still load: their levels have no
``engine``. ``/2`` adds each level's ``engine`` and the top-level ``engine_metrics`` and
``saturation``:

::

    {
      "schema": "pytimings.serving/2",
      "created_utc": "2026-11-30T23:59:59Z",
      "clock": "CLOCK_MONOTONIC ns of the load-generator host (pytimings.now_ns)",
      "host": "loadgen-host",           # its host name
      "boot_id": "…",                   # its kernel's boot id (``join`` tells a shared clock by it)
      "config": {"url": ..., "model": ..., "api": "completions" | "chat",
                 "input_len": int, "output_len": int, "requests": int, "rounds": int,
                 "warmup": int, "rate": float | null, "seed": int, "concurrency": [int],
                 "timeout_s": float, "chunk_timeout_s": float, "ignore_eos": bool,
                 "definition": "vllm" | "genai-perf" | "llmperf", "slo_ms": {str: float},
                 "prompt": str (how prompts were built and how exact their length is),
                 "duration_s", "interval_s": float | null (a soak's; null otherwise),
                 "workload": {"source": "synthetic" | "trace" | "dataset",
                              "trace": null | {"path", "format", "requests", "span_s",
                                               "speed", "input_tokens", "output_tokens"},
                              "dataset": null | {"path", "prompts", "skipped"},
                              "arrival": "poisson" | "constant" | "gamma" | null (closed),
                              "burstiness": float | null, "ramp_s": float,
                              "rates": [float], "max_error_rate": float | null,
                              "percentiles": [float]}},   # (pytimings.serving.workload)
      "levels": [                       # one per concurrency level, in the order run
        {"concurrency": int, "rate": float | null,
         "stopped": {...},                # only where --max-error-rate stopped the sweep
         "warmup": {"requests": int, "errors": {kind: int}},   # sent, not measured
         "rounds": [
           {"round": int,                 # 0-based
            "start_ns": int, "end_ns": int,   # benchmark window of the round
            "errors": {kind: int},        # every failed request, by kind
            "summary": {...},             # ServingMetrics.to_dict() of this round (ms;
                                          # null where a statistic has no values), with
                                          # send_lag_ms: the client's send lag; ITL per
                                          # chunk "itl_ms" and per token
                                          # "itl_per_token_ms", "tokens_per_chunk"; with
                                          # --percentiles, "p50", "p99.9"... in each
            "requests": [RequestRecord.to_json(), ...]}   # every request, failed included;
                                          # start_ns: its bytes left, scheduled_ns: it was due
         ],
         "summary": {...},               # metrics over all rounds of the level
         "telemetry": {...},             # loadgen --telemetry[-url]: docs/telemetry.md
                                         # (each round too: its energy and J/token)
         "intervals": [                  # soaks only (--duration): one per round
           {"index": int, "start_ns": int, "end_ns": int, "completed": int,
            "errors": {kind: int}, "request_throughput": float, "output_throughput": float,
            "ttft_ms" | "tpot_ms" | "itl_ms" | "e2el_ms": {"p50": float, "p99": float}}],
         "engine": null | {               # engine metrics (pytimings.serving.engine)
           "url": str, "scrapes": int, "failed_scrapes": int,   # in the measured window
           "series": {concept or raw name: [[t_ns, value], ...]},
           "counters": {concept or raw name: float},   # each counter's increase
           "left_out": {"non_finite": int,   # NaN/infinite samples of the scrapes
                        "over_cap": int},    # series past MAX_OTHER_SERIES in a scrape
           "histograms": {concept or raw name: {"count", "sum", "mean"}},  # over the level
           "spec_decode": null | {"draft_tokens", "accepted_tokens", "drafts",
                                  "acceptance_rate", "mean_acceptance_length"}}}
      ],
      "engine_metrics": {"url": str | null, "interval_s": float, "note": str},
      "error_limit": {"max_error_rate": float | null,
                      "stopped_at": null | {"concurrency", "rate", "round", "error_rate",
                                            "errors": {kind: int}}},
      "saturation": {"rule": str, "stop": bool, "stopped_after": int | null,
                     "not_run": [int]},     # levels --stop-at-saturation left out (or
                                            # not finished: see interrupted)
      "interrupted": {                  # only when the run stopped before its last level
        "concurrency": int,             # (Ctrl-C, the server gone at a later level's
        "reason": str,                  # warm-up, an error): that level, why, and every
        "requests": [RequestRecord.to_json(), ...]}   # request it measured before
    }

Error kinds: ``connect`` (no connection), ``http_4xx`` / ``http_5xx`` (status, with the
body's start in ``error_detail``), ``timeout`` (the request's total timeout, or no bytes for
chunk_timeout_s: a stall; the detail says which), ``reset`` (the peer reset the connection,
ECONNRESET/EPIPE: the server died or aborted it, before or during the stream),
``early_close`` (the connection closed in order, or the stream ended, before
``data: [DONE]``), ``malformed_sse`` (unparseable event, wrong content type, an event nested
too deep to decode, a line longer than the client's line limit), ``malformed_http`` (no
valid HTTP response: status line, headers), ``sse_error`` (the server streamed an error
object), ``bad_usage`` (a ``usage`` token count that is not an integer in [0, 2**31): a
bool, a float, a negative or absurd number), ``connection`` (any other socket error, its
errno in the detail), ``client`` (any other client failure, named in the detail).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytimings.errors import TraceFormatError
from pytimings.fileout import write_text
from pytimings.ingest.detect import detect_format
from pytimings.model.requests import RequestRecord

SCHEMA = "pytimings.serving/2"
SCHEMAS = ("pytimings.serving/1", SCHEMA)  # what load_run reads
ERROR_KINDS = (
    "connect", "http_4xx", "http_5xx", "timeout", "reset", "early_close", "malformed_sse",
    "malformed_http", "sse_error", "bad_usage", "connection", "client",
)  # fmt: skip


@dataclass
class Round:
    index: int
    start_ns: int
    end_ns: int
    records: list[RequestRecord]
    errors: dict[str, int]
    summary: dict[str, Any]
    telemetry: dict[str, Any] | None = None  # loadgen --telemetry: this round's energy


@dataclass
class Level:
    concurrency: int
    rate: float | None
    rounds: list[Round]
    summary: dict[str, Any]
    warmup: dict[str, Any]
    intervals: list[dict[str, Any]] | None = None  # soak runs: per-interval metrics
    engine: dict[str, Any] | None = None  # engine metrics (pytimings.serving.engine)
    telemetry: dict[str, Any] | None = None  # loadgen --telemetry (serving/telemetry.py)


@dataclass
class Interrupted:
    concurrency: int
    reason: str
    records: list[RequestRecord]


@dataclass
class Run:
    path: str
    config: dict[str, Any]
    levels: list[Level]
    host: str | None = None  # the load generator's host name (files before it: None)
    boot_id: str | None = None  # its kernel's boot id (one CLOCK_MONOTONIC; older: None)
    fmt: str = SCHEMA  # the file's format (other tools' result files: pytimings.serving.foreign)
    # the run stopped before its last level: that level, why, and what it measured
    interrupted: Interrupted | None = None

    def level(self, concurrency: int) -> Level | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)


def _strict(obj: Any) -> Any:
    """NaN/inf (a statistic of no values) become null: the file stays strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_strict(v) for v in obj]
    return obj


def write_json(obj: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Write strict JSON atomically (see :mod:`pytimings.fileout`): a crash never leaves half
    a file."""
    write_text(path, json.dumps(_strict(obj), separators=(",", ":"), allow_nan=False) + "\n")


def load_run(path: str | os.PathLike[str]) -> Run:
    """Read and validate a ``pytimings.serving/1`` file; TraceFormatError names any fault."""
    where = os.fspath(path)
    try:
        with open(where, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise TraceFormatError(where, f"cannot read: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceFormatError(where, _not_json(where, exc)) from None
    except RecursionError:
        raise TraceFormatError(where, "JSON nested too deeply to be a run file") from None
    if not isinstance(doc, dict) or doc.get("schema") not in SCHEMAS:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise TraceFormatError(where, f"not a pytimings.serving/1 or /2 run file (schema: {got!r})")
    try:
        levels = [_level(lv, where) for lv in doc["levels"]]
        config = dict(doc["config"])
        it = doc.get("interrupted")
        interrupted = None if it is None else Interrupted(
            _integer(it["concurrency"], "interrupted.concurrency", 1),
            str(it["reason"]),
            [RequestRecord.from_json(q, where) for q in it["requests"]],
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as exc:
        raise TraceFormatError(where, f"malformed run file: {type(exc).__name__}: {exc}") from None
    host, boot = doc.get("host"), doc.get("boot_id")
    return Run(
        where,
        config,
        levels,
        host if isinstance(host, str) else None,
        boot if isinstance(boot, str) and boot else None,
        fmt=doc["schema"],
        interrupted=interrupted,
    )


def _not_json(where: str, exc: Exception) -> str:
    """Why a file is no run file: a recording or trace given in its place, or bad JSON."""
    try:
        fmt = detect_format(where)
    except TraceFormatError:
        return f"not valid JSON: {exc}"
    if fmt == "recording":
        return "this is a recording, not a loadgen run file (report and join read recordings)"
    return f"this is a trace ({fmt}), not a loadgen run file"


def _integer(v: Any, what: str, lo: int = 0) -> int:
    """A JSON integer in [lo, 2**63): what every count and CLOCK_MONOTONIC time must be."""
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v < 2**63:
        raise ValueError(f"{what} must be an integer in [{lo}, 2**63), got {v!r:.40}")
    return v


def _round(r: Any, where: str) -> Round:
    start, end = _integer(r["start_ns"], "start_ns"), _integer(r["end_ns"], "end_ns")
    if end < start:
        raise ValueError(f"end_ns {end} precedes start_ns {start}")
    return Round(
        index=_integer(r["round"], "round"),
        start_ns=start,
        end_ns=end,
        records=[RequestRecord.from_json(q, where) for q in r["requests"]],
        errors={str(k): _integer(v, f"errors[{k!r}]") for k, v in r["errors"].items()},
        summary=dict(r["summary"]),
        telemetry=None if r.get("telemetry") is None else dict(r["telemetry"]),
    )


def _level(obj: Any, where: str) -> Level:
    rounds = [_round(r, where) for r in obj["rounds"]]
    rate = obj.get("rate")
    if rate is not None and (
        isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate < math.inf
    ):
        raise ValueError(f"rate must be a positive number or null, got {rate!r:.40}")
    return Level(
        concurrency=_integer(obj["concurrency"], "concurrency", lo=1),
        rate=None if rate is None else float(rate),
        rounds=rounds,
        summary=dict(obj["summary"]),
        warmup=dict(obj.get("warmup", {})),
        intervals=None
        if obj.get("intervals") is None
        else [_soak_interval(i) for i in obj["intervals"]],
        engine=_engine(obj.get("engine")),
        telemetry=None if obj.get("telemetry") is None else dict(obj["telemetry"]),
    )


def _soak_interval(obj: Any) -> dict[str, Any]:
    """A soak interval entry with the keys the drift test reads (loadgen writes them)."""
    if not isinstance(obj, Mapping):
        raise ValueError(f"an intervals entry is not an object: {obj!r:.40}")
    missing = [k for k in _INTERVAL_KEYS if k not in obj]
    if missing:
        raise ValueError(f"an intervals entry lacks {', '.join(missing)}")
    start = _integer(obj["start_ns"], "interval start_ns")
    if _integer(obj["end_ns"], "interval end_ns") < start:
        raise ValueError(f"interval end_ns {obj['end_ns']} precedes start_ns {start}")
    for m in ("ttft", "tpot", "itl", "e2el"):
        q = obj[f"{m}_ms"]
        if not isinstance(q, Mapping) or "p50" not in q or "p99" not in q:
            raise ValueError(f"interval {m}_ms must be an object with p50 and p99")
    return dict(obj)


_INTERVAL_KEYS = ("start_ns", "end_ns", "completed", "errors", "output_throughput",
                  "ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")  # fmt: skip


def _engine(obj: Any) -> dict[str, Any] | None:
    """A level's ``engine`` entry, its series checked as [[t_ns, value], ...]."""
    if obj is None:
        return None
    out = dict(obj)
    for key in ("scrapes", "failed_scrapes"):
        _integer(out[key], f"engine.{key}")
    series = {}
    for name, pts in dict(out["series"]).items():
        series[str(name)] = [[_integer(t, f"engine.series[{name!r}] time"), float(v)]
                             for t, v in pts]  # fmt: skip
    out["series"] = series
    out["counters"] = {str(k): float(v) for k, v in dict(out.get("counters", {})).items()}
    sd = out.get("spec_decode")
    out["spec_decode"] = None if sd is None else dict(sd)
    return out
