"""Other tools' result files as runs: ``vllm bench serve``, SGLang ``bench_serving`` and
AIPerf, read into the run model of :mod:`pytimings.serving.runfile` with what they carry.

The format is told by content, never by the file name (:func:`load_any`):

* a ``pytimings.serving/1`` or ``/2`` run file (a JSON object with that ``schema``);
* ``vllm bench serve --save-result`` (one JSON object with ``num_prompts`` / ``model_id`` /
  ``burstiness`` / ``date``): per-request ``ttfts`` (s), ``itls`` (lists of s),
  ``input_lens``, ``output_lens``, ``errors`` -- written only with ``--save-detailed``; a
  file without them holds only aggregates and is refused (nothing to resample);
* SGLang ``bench_serving --output-file`` (JSON Lines, one object per benchmark run, with
  ``dataset_name`` / ``sharegpt_output_len``; per-request lists as vLLM's with
  ``--output-details``): each line is a round of the level of its ``max_concurrency``;
* AIPerf ``profile_export.jsonl`` (one record a line: ``metadata.request_start_ns`` /
  ``request_end_ns``, ``metrics.time_to_first_token``, ``inter_chunk_latency``,
  ``output_sequence_length``, ``input_sequence_length``, each ``{"value", "unit"}``, and
  ``error``), or a JSON list of such records: one level, one round from the first send to
  the last end; records of a phase other than ``profiling`` are counted as warm-up.

What a file lacks stays absent, listed in the run's ``config["absent"]``: vLLM and SGLang
record no send times, so every request starts at 0 in a window as long as the file's
``duration`` (TTFT, TPOT, ITL, E2E and throughput are exact; peak concurrency is not known,
and the level's concurrency is the tool's ``max_concurrency``, or the request count
without a cap); their chunks carry one token each except as ``output_lens`` says.
A failed request keeps the tool's error text under the kind ``tool_error``. A truncated
file, a record of the wrong shape, or any other JSON gives one line naming the file.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from pytimings.errors import TraceFormatError
from pytimings.model.requests import RequestRecord, errors_by_kind
from pytimings.serving.metrics import peak_concurrency
from pytimings.serving.runfile import SCHEMAS, Level, Round, Run, load_run

VLLM = "vllm bench serve"
SGLANG = "sglang bench_serving"
AIPERF = "aiperf profile_export"
FORMATS = ("pytimings.serving", VLLM, SGLANG, AIPERF)
_VLLM_KEYS = ("num_prompts", "model_id", "burstiness", "date")
_SGLANG_KEYS = ("dataset_name", "sharegpt_output_len")
# units of AIPerf's {"value", "unit"} -> ns (counts, "tokens", ride the same shape)
_TO_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9, "sec": 1e9, "tokens": 1.0}


def load_any(path: str | os.PathLike[str]) -> Run:
    """A run from any known result file (see the module doc); TraceFormatError otherwise."""
    where = os.fspath(path)
    try:
        with open(where, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return load_run(where)  # it names the file and the reason
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    except RecursionError:
        raise TraceFormatError(where, "JSON nested too deep") from None
    if isinstance(doc, dict) and (doc.get("schema") in SCHEMAS or "schema" in doc):
        return load_run(where)
    try:
        if isinstance(doc, dict) and any(k in doc for k in _VLLM_KEYS):
            return _bench_run(where, [doc], VLLM)
        if isinstance(doc, dict) and any(k in doc for k in _SGLANG_KEYS):
            return _bench_run(where, [doc], SGLANG)
        if isinstance(doc, list) and doc and all(_is_aiperf(r) for r in doc):
            return _aiperf_run(where, doc)
        if doc is None:
            lines = _json_lines(where, text)
            if lines and _is_aiperf(lines[0]):
                return _aiperf_run(where, lines)
            if lines and any(k in lines[0] for k in _SGLANG_KEYS):
                return _bench_run(where, lines, SGLANG)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise TraceFormatError(
            where, f"malformed result file: {type(exc).__name__}: {exc}"
        ) from None
    if doc is None:
        return load_run(where)  # not JSON: a recording, a trace, or broken (it says which)
    raise TraceFormatError(
        where, "not a result file of a known format (" + ", ".join(FORMATS) + ")"
    )


def _json_lines(where: str, text: str) -> list[dict[str, Any]] | None:
    """Every non-empty line as a JSON object; None when the first is not one (not JSONL)."""
    out: list[dict[str, Any]] = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            if not out:
                return None
            raise TraceFormatError(where, f"line {i} is not valid JSON (truncated?)") from None
        if not isinstance(obj, dict):
            raise TraceFormatError(where, f"line {i} is not a JSON object")
        out.append(obj)
    return out


def _is_aiperf(obj: Any) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("metadata"), dict) and "metrics" in obj


def _number(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{what} must be a finite number >= 0, got {v!r:.40}")
    return float(v)


def _count(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _MAX_INT64:
        raise ValueError(f"{what} must be a count within int64, got {v!r:.40}")
    return v


_MAX_INT64 = 2**63 - 1


def _ns(value_ns: float | int, what: str) -> int:
    """A time in ns as the run stores it (int64); ValueError past that (ttfts of 1e300 s were
    an OverflowError in report/compare)."""
    if not 0 <= value_ns < 2.0**63:
        raise ValueError(f"{what} is past int64 nanoseconds (292 years), got {value_ns!r:.40}")
    return round(value_ns)


def _bench_round(where: str, obj: dict[str, Any], fmt: str, index: int) -> Round:
    if "ttfts" not in obj or "itls" not in obj:
        flag = "--save-detailed" if fmt == VLLM else "--output-details"
        raise TraceFormatError(
            where, f"a {fmt} result without per-request ttfts/itls (aggregates only): rerun "
            f"with {flag}",
        )  # fmt: skip
    ttfts, itls, outs = obj["ttfts"], obj["itls"], obj["output_lens"]
    ins = obj.get("input_lens")
    errors = obj.get("errors")
    n = len(ttfts)
    for name, v in (("itls", itls), ("output_lens", outs), ("input_lens", ins), ("errors", errors)):
        if v is not None and len(v) != n:
            raise ValueError(f"{name} has {len(v)} entries for {n} ttfts")
    window = _ns(_number(obj["duration"], "duration") * 1e9, "duration")
    records = []
    for i in range(n):
        rec = RequestRecord(req_id=f"r{index}-{i}", start_ns=0)
        err = errors[i] if errors is not None else ""
        if err:
            rec.error, rec.error_detail, rec.end_ns = "tool_error", str(err)[:200], 0
            records.append(rec)
            continue
        t = _number(ttfts[i], f"ttfts[{i}]") * 1e9
        times = [t]
        for j, gap in enumerate(itls[i]):
            t += _number(gap, f"itls[{i}][{j}]") * 1e9
            times.append(t)
        rec.chunk_ns = [_ns(x, f"ttfts[{i}] + itls[{i}]") for x in times]
        rec.chunk_tokens = [1] * len(times)
        rec.output_tokens = _count(outs[i], f"output_lens[{i}]")
        rec.input_tokens = None if ins is None else _count(ins[i], f"input_lens[{i}]")
        rec.end_ns = rec.chunk_ns[-1]
        records.append(rec)
    return Round(index, 0, max(window, max((r.end_ns or 0 for r in records), default=0)),
                 records, errors_by_kind(records), summary={})  # fmt: skip


def _concurrency(obj: dict[str, Any]) -> int:
    c = obj.get("max_concurrency")
    if isinstance(c, int) and not isinstance(c, bool) and c >= 1:
        return c
    return max(len(obj.get("ttfts") or []), 1)


def _rate(obj: dict[str, Any]) -> float | None:
    r = obj.get("request_rate")
    if isinstance(r, int | float) and not isinstance(r, bool) and 0 < r < math.inf:
        return float(r)
    return None


def _bench_run(where: str, objs: list[dict[str, Any]], fmt: str) -> Run:
    levels: dict[int, Level] = {}
    for obj in objs:
        c = _concurrency(obj)
        lv = levels.setdefault(c, Level(c, _rate(obj), [], summary={}, warmup={}))
        lv.rounds.append(_bench_round(where, obj, fmt, len(lv.rounds)))
    first = objs[0]
    config = {
        "source": fmt, "model": first.get("model_id") or first.get("model"),
        "backend": first.get("backend"), "rate": _rate(first),
        "absent": ["request send times (every request starts at 0 in a window of the "
                   "file's duration)", "peak concurrency", "engine metrics"],
    }  # fmt: skip
    return Run(where, config, sorted(levels.values(), key=lambda x: x.concurrency), fmt=fmt)


def _value_ns(metrics: dict[str, Any], key: str, what: str) -> Any:
    m = metrics.get(key)
    if m is None:
        return None
    unit = str(m.get("unit", "ms"))
    if unit not in _TO_NS:
        raise ValueError(f"{what}: {key} in unit {unit!r}")
    v = m["value"]
    if isinstance(v, list):
        return [_number(x, f"{what}: {key}") * _TO_NS[unit] for x in v]
    return _number(v, f"{what}: {key}") * _TO_NS[unit]


def _aiperf_record(rec: dict[str, Any], i: int) -> RequestRecord:
    md, metrics, what = rec["metadata"], rec.get("metrics") or {}, f"record {i + 1}"
    start = _count(md["request_start_ns"], f"{what}: request_start_ns")
    end = md.get("request_end_ns")
    out = RequestRecord(
        req_id=str(md.get("x_request_id") or i),
        start_ns=start,
        end_ns=None if end is None else _count(end, f"{what}: request_end_ns"),
    )
    err = rec.get("error")
    if err is not None or md.get("was_cancelled"):
        kind = "cancelled" if md.get("was_cancelled") else "tool_error"
        out.error = kind
        out.error_detail = json.dumps(err)[:200] if err is not None else "cancelled"
        out.end_ns = out.end_ns if out.end_ns is not None else start
        return out
    ttft = _value_ns(metrics, "time_to_first_token", what)
    if ttft is None:
        raise ValueError(f"{what}: no time_to_first_token (a non-streaming profile has no TTFT)")
    times = [ttft]  # relative to the send: epoch ns are past float64's exact integers
    gaps = _value_ns(metrics, "inter_chunk_latency", what)
    for g in gaps or []:
        times.append(times[-1] + g)
    out.chunk_ns = [_ns(start + _ns(t, f"{what}: a token's time"), what) for t in times]
    out.chunk_tokens = [1] * len(times)
    osl = _value_ns(metrics, "output_sequence_length", what)  # unit "tokens": scale 1
    out.output_tokens = None if osl is None else _count(round(osl), f"{what}: output tokens")
    isl = _value_ns(metrics, "input_sequence_length", what)
    out.input_tokens = None if isl is None else _count(round(isl), f"{what}: input tokens")
    if out.end_ns is None:
        lat = _value_ns(metrics, "request_latency", what)
        end = out.chunk_ns[-1] if lat is None else _ns(start + _ns(lat, f"{what}: latency"), what)
        out.end_ns = end
    return out


def _aiperf_run(where: str, objs: list[dict[str, Any]]) -> Run:
    recs, warm = [], 0
    for i, obj in enumerate(objs):
        if not _is_aiperf(obj):
            raise ValueError(f"record {i + 1} has no metadata/metrics")
        if obj["metadata"].get("benchmark_phase", "profiling") != "profiling":
            warm += 1
            continue
        recs.append(_aiperf_record(obj, i))
    if not recs:
        raise ValueError("no record of the profiling phase")
    t0 = min(r.start_ns for r in recs)
    t1 = max(max(r.end_ns or r.start_ns, *(r.chunk_ns or [0])) for r in recs)
    rd = Round(0, t0, t1, recs, errors_by_kind(recs), summary={})
    level = Level(peak_concurrency(recs), None, [rd], summary={}, warmup={"requests": warm})
    config = {"source": AIPERF, "absent": ["the benchmark's concurrency setting (the level is "
              "the peak number of requests in flight)", "engine metrics"]}  # fmt: skip
    return Run(where, config, [level], fmt=AIPERF)
