"""The load generator's JSON output, schema ``pytimings.serving/1``: write, read, validate.

::

    {
      "schema": "pytimings.serving/1",
      "created_utc": "2026-11-30T23:59:59Z",
      "clock": "CLOCK_MONOTONIC ns of the load-generator host (pytimings.now_ns)",
      "host": "loadgen-host",           # its host name (``join`` tells a shared clock by it)
      "config": {"url": ..., "model": ..., "api": "completions" | "chat",
                 "input_len": int, "output_len": int, "requests": int, "rounds": int,
                 "warmup": int, "rate": float | null, "seed": int, "concurrency": [int],
                 "timeout_s": float, "chunk_timeout_s": float, "ignore_eos": bool,
                 "definition": "vllm" | "genai-perf" | "llmperf", "slo_ms": {str: float},
                 "prompt": str (how prompts were built and how exact their length is),
                 "duration_s", "interval_s": float | null (a soak's; null otherwise)},
      "levels": [                       # one per concurrency level, in the order run
        {"concurrency": int, "rate": float | null,
         "warmup": {"requests": int, "errors": {kind: int}},   # sent, not measured
         "rounds": [
           {"round": int,                 # 0-based
            "start_ns": int, "end_ns": int,   # benchmark window of the round
            "errors": {kind: int},        # every failed request, by kind
            "summary": {...},             # ServingMetrics.to_dict() of this round (ms;
                                          # null where a statistic has no values)
            "requests": [RequestRecord.to_json(), ...]}   # every request, failed included
         ],
         "summary": {...},               # metrics over all rounds of the level
         "telemetry": {...},             # loadgen --telemetry[-url]: docs/telemetry.md
                                         # (each round too: its energy and J/token)
         "intervals": [                  # soaks only (--duration): one per round
           {"index": int, "start_ns": int, "end_ns": int, "completed": int,
            "errors": {kind: int}, "request_throughput": float, "output_throughput": float,
            "ttft_ms" | "tpot_ms" | "itl_ms" | "e2el_ms": {"p50": float, "p99": float}}]}
      ]
    }

Error kinds: ``connect`` (no connection), ``http_4xx`` / ``http_5xx`` (status, with the
body's start in ``error_detail``), ``timeout`` (total timeout, or no bytes for
chunk_timeout_s: a stall), ``malformed_sse`` (unparseable event, wrong content type),
``sse_error`` (the server streamed an error object), ``early_close`` (the stream ended or
the connection dropped before ``data: [DONE]``), ``bad_usage`` (a ``usage`` token count
that is not an integer in [0, 2**31): a bool, a float, a negative or absurd number).
``malformed_sse`` also covers an event nested too deep to decode and a line longer than
the client's line limit.
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

SCHEMA = "pytimings.serving/1"
ERROR_KINDS = (
    "connect", "http_4xx", "http_5xx", "timeout", "malformed_sse", "sse_error", "early_close",
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
    telemetry: dict[str, Any] | None = None  # loadgen --telemetry (serving/telemetry.py)


@dataclass
class Run:
    path: str
    config: dict[str, Any]
    levels: list[Level]
    host: str | None = None  # the load generator's host name (files before it: None)

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
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise TraceFormatError(where, f"not a {SCHEMA} run file (schema: {got!r})")
    try:
        levels = [_level(lv, where) for lv in doc["levels"]]
        config = dict(doc["config"])
    except (KeyError, TypeError, ValueError) as exc:
        raise TraceFormatError(where, f"malformed run file: {type(exc).__name__}: {exc}") from None
    host = doc.get("host")
    return Run(where, config, levels, host if isinstance(host, str) else None)


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
        intervals=None if obj.get("intervals") is None else [dict(i) for i in obj["intervals"]],
        telemetry=None if obj.get("telemetry") is None else dict(obj["telemetry"]),
    )
