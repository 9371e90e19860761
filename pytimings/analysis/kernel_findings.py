"""The kernel layer's findings over the per-op table (docs/ops.md, "Findings"): which op
categories hold a GPU-bound capture's busy time and how close their modelled ops run to
the GPU's peak, which ops and shapes run furthest under their roofline (what reaching it
would save), and compute ops that launched no GPU work while the GPU idled.

Each title states numbers its evidence holds; "up to" marks what the roofline bounds: the
byte model is the least DRAM traffic an op needs, so the time at its roof is a lower
bound on its kernels' time and the saving an upper bound (the replay's ``saving_ns`` then
says what shortening them shortens the windows by).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from pytimings._native import _intervals as iv
from pytimings._native import _optable
from pytimings.analysis.finding import GPU_BOUND_SHARE, Finding, Fix, pct, plural, scope
from pytimings.analysis.graph_capture import captured_into
from pytimings.analysis.op_launch import kineto_op
from pytimings.analysis.op_table import LazyOpTable, OpTable, trace_gpu
from pytimings.analysis.ops import FAMILIES, OpCall, model_op
from pytimings.analysis.partition import BUSY_LABELS
from pytimings.console.text import duration
from pytimings.ingest.names import api_concept, api_stem
from pytimings.model.trace import ActivityKind, RangeKind, Trace

if TYPE_CHECKING:
    from pytimings.analysis.result import Attribution

I64 = npt.NDArray[np.int64]
# categories whose time is arithmetic: their rate is set beside the dtype's peak
COMPUTE_CATEGORIES = ("gemm", "attention", "conv", "moe")
CATEGORY_MIN_SHARE = 0.1  # categories named beside the largest: at least this of busy time
MAX_CATEGORIES = 4
MAX_OPS = 3  # ops under the roofline reported (largest saving first)
# ops whose perf model counts arithmetic: one that launches no GPU work computes on the host
_COMPUTE_OPS = frozenset(n for f in FAMILIES if f.category in COMPUTE_CATEGORIES for n in f.names)
# the most a host op's shapes may claim per second of its host time and still be computed on
# a CPU: a few TFLOP/s (a whole server CPU's vector/matrix units on large GEMMs); a call
# claiming more did its work elsewhere (a graph capture, a launch the trace lost)
CPU_PLAUSIBLE_TFLOPS = 5.0
# API calls that launch GPU work, whether or not a GPU op followed (a launch inside a stream
# capture records a graph node and runs nothing then)
_LAUNCH_CONCEPTS = frozenset({"kernel_launch", "memcpy_async", "memset_async", "graph_launch"})
_CAPTURE_QUERIES = ("StreamGetCaptureInfo",)  # its stem: _v2/_v3 and ptsz spellings too


def _device_shares(a: Attribution) -> list[float]:
    """Per (rank, device) of the windows, the GPU's busy share of their time (the busy
    labels: the time some GPU op runs, what the op table's busy split splits)."""
    w = a.windows
    busy = np.sum([w[f"{x}_ns"].astype(np.int64) for x in BUSY_LABELS], axis=0)
    out = []
    for r, d in sorted({(int(r), int(d)) for r, d in zip(w["rank"], w["device"], strict=True)}):
        m = (w["rank"] == r) & (w["device"] == d)
        out.append(float(busy[m].sum()) / max(1, int(w["window_ns"][m].sum())))
    return out


def _category_rate(table: OpTable, category: str, kernel_ns: int) -> dict[str, Any] | None:
    """The achieved TFLOP/s of a category's modelled ops of its main dtype (the one holding
    most of their GPU time): their FLOPs over their GPU time, beside that dtype's peak."""
    gpu = table.gpu
    if gpu is None or kernel_ns <= 0:
        return None
    by_dtype: dict[str, list[float]] = {}
    for r in table.ops:
        if r["category"] != category or not r["gflops"] or r["dtype"] not in gpu["peak_tflops"]:
            continue
        acc = by_dtype.setdefault(r["dtype"], [0.0, 0.0])
        acc[0] += r["calls"] * r["gflops"]
        acc[1] += r["kernel_ns"]
    if not by_dtype:
        return None
    dtype = max(by_dtype, key=lambda k: (by_dtype[k][1], k))
    gflop, ns = by_dtype[dtype]
    if ns <= 0:
        return None
    tflops_s = gflop / ns * 1e6  # GFLOP / ns = 1e18 FLOP/s
    peak = float(gpu["peak_tflops"][dtype])
    return {
        "dtype": dtype,
        "tflops_s": tflops_s,
        "peak_tflops_s": peak,
        "peak_fraction": tflops_s / peak,
        "modelled_ns": int(ns),
        "modelled_share": ns / kernel_ns,
    }


def op_categories(a: Attribution, op_source: LazyOpTable) -> list[Finding]:
    """When every GPU of the windows is busy at least ``GPU_BOUND_SHARE`` of them (the
    kernels set the time): the categories holding the busy time, with their shares, and
    for arithmetic categories their modelled ops' rate beside the dtype's peak."""
    shares = _device_shares(a)
    if not shares or min(shares) < GPU_BOUND_SHARE:
        return []  # the op table is not even computed: the GPU is not what sets the time
    table = op_source.get()
    busy = sum(c["busy_ns"] for c in table.categories)
    win = a.totals["window_ns"]
    cats = sorted(table.categories, key=lambda c: (-c["busy_ns"], c["category"]))
    if busy <= 0:
        return []
    named = [c for i, c in enumerate(cats) if i == 0 or c["busy_ns"] >= CATEGORY_MIN_SHARE * busy]
    parts, evidence = [], []
    for c in named[:MAX_CATEGORIES]:
        e = {"category": c["category"], "busy_ns": c["busy_ns"], "share": c["busy_ns"] / busy}
        text = f"{c['category']} {pct(e['share'])} ({duration(c['busy_ns'])})"
        rate = (
            _category_rate(table, c["category"], c["kernel_ns"])
            if c["category"] in COMPUTE_CATEGORIES
            else None
        )
        if rate is not None:
            e["rate"] = rate
            text += (
                f" at {pct(rate['peak_fraction'])} of {rate['dtype']} peak "
                f"({rate['tflops_s']:.1f} TFLOP/s over {pct(rate['modelled_share'])} of its "
                f"GPU time)"
            )
        evidence.append(e)
        parts.append(text)
    gpu = table.gpu["name"] if table.gpu else None
    title = (
        f"the GPU's busy time ({duration(busy)}, {pct(busy / max(1, win))} of {scope(a.by)}) by op "
        f"category: " + ", ".join(parts)
    )
    return [
        Finding(
            "kernel",
            title,
            int(named[0]["busy_ns"]),
            {
                "busy_ns": busy,
                "window_ns": win,
                "min_busy_share": min(shares),
                "threshold": GPU_BOUND_SHARE,
                "gpu": gpu,
                "categories": evidence,
            },
        )
    ]


def _dims_text(dims: list[Any]) -> str:
    """An op's input dims as a title shows them: the trace's list, trailing empty entries
    (scalars, absent arguments) left out."""
    end = len(dims)
    while end and dims[end - 1] in ([], None, ""):
        end -= 1
    return json.dumps(dims[:end], separators=(", ", ": "))


def ops_under_roofline(a: Attribution, op_source: LazyOpTable) -> list[Finding]:
    """The ops and shapes whose GPU time would shrink most at their roofline: time x
    (1 - fraction reached), largest first (``MAX_OPS``), each with its bound, achieved
    rate, the roof and the time at the roof; its fix runs its GPU ops at the roof."""
    tr = a.trace
    launchers = np.any(tr.host_ops["kind"] == ActivityKind.CPU_OP) or np.any(
        (tr.ranges["kind"] == RangeKind.NVTX_PUSHPOP)
        | (tr.ranges["kind"] == RangeKind.NVTX_STARTEND)
    )
    if not launchers or (op_source.gpu is None and trace_gpu(a) is None):
        return []  # no op to charge, or no roof: the op table is not computed
    table = op_source.get()
    gpu = table.gpu
    if gpu is None:
        return []
    total = max(1, int(table.attribution["kernel_ns"]))
    cand = []
    for i, r in enumerate(table.ops):
        f = r["roofline_fraction"]
        if r["bound"] is None or f is None or not 0 <= f < 1 or r["kernel_ns"] <= 0:
            continue
        cand.append((r["kernel_ns"] * (1 - f), i))
    cand.sort(key=lambda c: (-c[0], c[1]))
    ops = a.trace.gpu_ops
    out = []
    for _, i in cand[:MAX_OPS]:
        r = table.ops[i]
        f = r["roofline_fraction"]
        rows = np.flatnonzero(table.op_row == i)
        # each GPU op at the roof, in integer ns as the fix's replay runs it
        at_roof = int(np.round((ops["end"][rows] - ops["start"][rows]) * f).sum())
        potential = r["kernel_ns"] - at_roof
        peak_tb_s = float(gpu["peak_tb_s"])
        peak_tflops = gpu["peak_tflops"].get(r["dtype"])  # None: no FLOPs, memory-bound
        if r["bound"] == "memory":
            rate, roof = f"{r['tb_s']:.2f} TB/s", f"{peak_tb_s:g} TB/s of memory bandwidth"
        else:
            rate = f"{r['tflops_s']:.1f} TFLOP/s"
            roof = f"{r['dtype']} peak {peak_tflops:g} TFLOP/s"
        title = (
            f"'{r['name']}' {_dims_text(r['input_dims'])} "
            f"({r['dtype'] or 'untyped'}, {r['category']}): "
            f"{plural(r['calls'], 'call')}, {duration(r['kernel_ns'])} of GPU time "
            f"({pct(r['kernel_ns'] / total)} of all), {r['bound']}-bound at {rate} = "
            f"{pct(f)} of the {gpu['name']}'s {roof}; at its roof its kernels would take "
            f"{duration(at_roof)}: up to {duration(potential)} less"
        )
        out.append(
            Finding(
                "kernel",
                title,
                int(potential),
                {
                    **{k: r[k] for k in ("name", "input_dims", "input_types", "category")},
                    **{k: r[k] for k in ("calls", "kernel_ns", "gflops", "bytes", "dtype")},
                    **{k: r[k] for k in ("tflops_s", "tb_s", "intensity", "bound")},
                    "roofline_fraction": f,
                    "kernel_share": r["kernel_ns"] / total,
                    "gpu": gpu["name"],
                    "peak_tflops": peak_tflops,
                    "peak_tb_s": peak_tb_s,
                    "gpu_ops": int(rows.size),
                    "at_roof_ns": at_roof,
                    "potential_ns": int(potential),
                },
                Fix(scaled=rows, factor=np.full(rows.size, f)),
            )
        )
    return out


def _innermost(start: I64, end: I64, thread: I64) -> npt.NDArray[np.bool_]:
    """Per interval, whether no other of the same thread nests inside it (host activities
    of a thread nest properly)."""
    order = np.lexsort((-end, start, thread))
    s, e, t = start[order], end[order], thread[order]
    outer = np.zeros(order.size, dtype=bool)
    outer[:-1] = (t[1:] == t[:-1]) & (s[1:] < e[:-1])
    out = np.empty(order.size, dtype=bool)
    out[order] = ~outer
    return out


def _api_names(trace: Trace, keep: Callable[[str], bool]) -> npt.NDArray[np.bool_]:
    """Per API call, whether ``keep`` holds for its name (each distinct name tested once)."""
    api, strings = trace.api_calls, trace.strings
    ids = np.flatnonzero(np.bincount(api["name"], minlength=1))
    hit = np.zeros(len(strings) + 1, dtype=bool)
    for i in ids.tolist():
        hit[i] = keep(strings[i])
    out: npt.NDArray[np.bool_] = hit[api["name"]]
    return out


def cpu_compute(a: Attribution) -> list[Finding]:
    """Compute ops (a GEMM, attention or convolution model with FLOPs) that launch no GPU
    work while every GPU of their rank idles: per op name, the calls, their host time,
    their FLOPs by their shapes, and the time the rank's GPUs idle meanwhile (the loss).
    A call is host compute only on all the evidence: no launch call inside it (a launch
    inside a stream capture is a launch: it was captured into a graph), not overlapping a
    stream capture on its thread nor querying one (``…GetCaptureInfo``), and a FLOP rate a
    CPU reaches (``CPU_PLAUSIBLE_TFLOPS``)."""
    tr = a.trace
    host, strings = tr.host_ops, tr.strings
    names = _optable.names_present(np.ascontiguousarray(host["name"], np.int32), len(strings))
    compute = [int(n) for n in names.tolist() if strings[int(n)] in _COMPUTE_OPS]
    if not compute:
        return []
    wanted = np.zeros(len(strings), dtype=bool)
    wanted[compute] = True
    mask = wanted[host["name"]] & (host["kind"] == ActivityKind.CPU_OP)
    if not mask.any():
        return []
    # those with no launch call inside on their thread: a call linked to a GPU op, or any
    # call that launches (its GPU op may not have run then: a capture records it)
    api = tr.api_calls
    is_call = _api_names(tr, lambda n: api_concept(n) in _LAUNCH_CONCEPTS)
    is_call[a.launches.api_row[a.launches.api_row >= 0]] = True
    c = np.ascontiguousarray
    launched = _optable.contains_point(
        c(host["start"], np.int64), c(host["end"], np.int64), c(host["thread"], np.int32),
        mask.view(np.uint8), c(api["start"], np.int64), c(api["thread"], np.int32),
        is_call.view(np.uint8),
    )  # fmt: skip
    rows = np.flatnonzero(mask & (launched == 0))
    if rows.size == 0:
        return []
    rows = rows[_innermost(host["start"][rows], host["end"][rows], host["thread"][rows])]
    # nor inside a stream capture (its launches recorded graph nodes), nor querying one
    rows = rows[captured_into(tr, rows) < 0]
    queries = _api_names(tr, lambda n: api_stem(n) in _CAPTURE_QUERIES)
    if queries.any() and rows.size:
        in_query = _optable.contains_point(
            c(host["start"], np.int64), c(host["end"], np.int64), c(host["thread"], np.int32),
            np.isin(np.arange(len(host)), rows).view(np.uint8), c(api["start"], np.int64),
            c(api["thread"], np.int32), queries.view(np.uint8),
        )  # fmt: skip
        rows = rows[in_query[rows] == 0]
    if rows.size == 0:
        return []
    # the FLOPs of each by its shapes; only ops with arithmetic count
    keys = (host["name"][rows].astype(np.int64) << 32) | host["args"][rows].astype(np.int64)
    uniq, inv = np.unique(keys, return_inverse=True)
    per_key = []
    for key in uniq.tolist():
        t = kineto_op(strings[key >> 32], strings[key & 0xFFFFFFFF])
        call = OpCall(t.name, tuple(t.input_dims), tuple(t.input_types), tuple(t.concrete_inputs))
        per_key.append(model_op(call).gflops or 0.0)
    flops = np.asarray(per_key, dtype=np.float64)[inv.reshape(-1)]
    # a rate a CPU can reach (GFLOP per ns x 1e6 = TFLOP/s)
    host_ns = np.maximum(host["end"][rows] - host["start"][rows], 1).astype(np.float64)
    keep = (flops > 0) & (flops / host_ns * 1e6 <= CPU_PLAUSIBLE_TFLOPS)
    rows, flops = rows[keep], flops[keep]
    if rows.size == 0:
        return []
    idle = _idle_overlap(a, rows)
    out = []
    for nid in np.unique(host["name"][rows]).tolist():
        m = host["name"][rows] == nid
        mine, lost = rows[m], idle[m]
        if int(lost.sum()) <= 0:
            continue
        op_ns = int((host["end"][mine] - host["start"][mine]).sum())
        name = strings[int(nid)]
        gflop = float(flops[m].sum())
        tflops_s = gflop / max(op_ns, 1) * 1e6
        title = (
            f"cpu_op '{name}' launches no GPU work in {plural(int(mine.size), 'call')} "
            f"({duration(op_ns)} of host time, {gflop:.3g} GFLOP by its shapes, "
            f"{tflops_s:.3g} TFLOP/s): it computes on the host while its rank's GPUs idle "
            f"{duration(int(lost.sum()))} of it"
        )
        out.append(
            Finding(
                "kernel",
                title,
                int(lost.sum()),
                {
                    "name": name,
                    "calls": int(mine.size),
                    "op_ns": op_ns,
                    "gflop": gflop,
                    "launches": 0,
                    "tflops_s": tflops_s,
                    "evidence": (
                        "no launch call (kernel, copy, memset, graph) inside it on its thread, "
                        "not in a stream capture, no capture query; a rate a CPU reaches (at "
                        f"most {CPU_PLAUSIBLE_TFLOPS:g} TFLOP/s)"
                    ),
                    "gpu_idle_ns": int(lost.sum()),
                    "ranks": sorted(set(host["rank"][mine].tolist())),
                },
            )
        )
    return out


def _idle_overlap(a: Attribution, rows: I64) -> I64:
    """Per host op row, the time inside its rank's windows during which none of the rank's
    GPUs runs an op."""
    host, ops, w = a.trace.host_ops, a.trace.gpu_ops, a.windows
    out = np.zeros(rows.size, dtype=np.int64)
    for rank in np.unique(host["rank"][rows]).tolist():
        m = np.flatnonzero(host["rank"][rows] == rank)
        wi = np.flatnonzero(w["rank"] == rank)
        wi = wi[np.argsort(w["start_ns"][wi], kind="stable")]
        ws, we = iv.union(
            np.ascontiguousarray(w["start_ns"][wi], dtype=np.int64),
            np.ascontiguousarray(w["end_ns"][wi], dtype=np.int64),
        )
        on = np.flatnonzero((ops["rank"] == rank) & (ops["end"] > ops["start"]))
        on = on[np.argsort(ops["start"][on], kind="stable")]
        bs, be = iv.intersect(ws, we, *iv.union(ops["start"][on], ops["end"][on]))
        s = np.ascontiguousarray(host["start"][rows[m]])
        e = np.ascontiguousarray(host["end"][rows[m]])
        out[m] = iv.overlap_lengths(s, e, ws, we) - iv.overlap_lengths(s, e, bs, be)
    return out
