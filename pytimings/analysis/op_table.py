"""The per-op table of a result (``analyze --json`` keys ``ops``, ``categories``,
``op_attribution``, ``gpu``; ``pytimings ops``): the reported GPU ops grouped by the op
that launched them (:mod:`pytimings.analysis.op_launch`), each group's perf model and
roofline (:mod:`pytimings.analysis.ops`), and the GPU time per category (docs/ops.md).

Busy-time split: at every instant of a window's busy time (the window's overlap with the
union of its device's GPU ops) the instant goes to the first category in
:data:`~pytimings.analysis.ops.CATEGORIES` order among the ops running then, so the split
sums exactly to the busy time (integer ns).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from pytimings._native import _intervals as iv
from pytimings._native import _stats
from pytimings.analysis.op_launch import (
    REASONS,
    OpText,
    kineto_op,
    launching_ops,
    nvtx_op,
)
from pytimings.analysis.ops import (
    CATEGORIES,
    GpuSpec,
    OpCall,
    Roofline,
    category_of_kernel,
    gpu_from_trace,
    model_op,
    roofline,
)
from pytimings.analysis.selection import per_window, reported
from pytimings.model.trace import OpKind

if TYPE_CHECKING:
    from pytimings.analysis.result import Attribution

I64 = npt.NDArray[np.int64]
_UNKNOWN = len(CATEGORIES)  # no category (never left so: "other" takes it)


@dataclass
class OpTable:
    """What :func:`op_table` returns; ``doc()`` is its JSON."""

    ops: list[dict[str, Any]]
    categories: list[dict[str, Any]]
    window_categories: list[list[dict[str, Any]]]
    attribution: dict[str, Any]
    gpu: dict[str, Any] | None

    def doc(self) -> dict[str, Any]:
        return {
            "ops": self.ops,
            "categories": self.categories,
            "op_attribution": self.attribution,
            "gpu": self.gpu,
        }


def trace_gpu(a: Attribution) -> GpuSpec | None:
    """The table's GPU the reported devices name (the first device whose name is known)."""
    dev = a.trace.devices
    for i in range(len(dev)):
        spec = gpu_from_trace(a.trace.strings[int(dev["name"][i])])
        if spec is not None:
            return spec
    return None


def _sums(group: I64, values: I64, n: int) -> I64:
    """Per group id in [0, n), the exact integer sum of ``values`` (one compiled pass)."""
    c = np.ascontiguousarray
    return _stats.group_sums(c(group, dtype=np.int64), c(values, dtype=np.int64), n)


def _busy_split(a: Attribution, cat: npt.NDArray[np.int8]) -> tuple[I64, npt.NDArray[np.int64]]:
    """Per window entry: busy ns (its overlap with the union of its device's GPU ops) and per
    category the busy ns charged (the module's rule), over the compiled interval union."""
    ops, w = a.trace.gpu_ops, a.windows
    n = len(w)
    split = np.zeros((n, len(CATEGORIES)), dtype=np.int64)
    busy = np.zeros(n, dtype=np.int64)
    for r, d in {(int(r), int(d)) for r, d in zip(w["rank"], w["device"], strict=True)}:
        mine = np.flatnonzero((ops["rank"] == r) & (ops["device"] == d))
        st = ops["start"][mine]
        if st.size > 1 and not bool((st[1:] >= st[:-1]).all()):
            mine = mine[np.argsort(st, kind="stable")]
        rows = np.flatnonzero((w["rank"] == r) & (w["device"] == d))
        ws, we = w["start_ns"][rows], w["end_ns"][rows]
        c = cat[mine]
        covered = np.zeros(rows.size, dtype=np.int64)
        for k in np.unique(c[c < len(CATEGORIES)]).tolist():
            m = mine[c <= k]
            us, ue = iv.union(ops["start"][m], ops["end"][m])
            total = iv.overlap_lengths(ws, we, us, ue)
            split[rows, k] = total - covered
            covered = total
        busy[rows] = covered
    return busy, split


def _ops_rows(
    a: Attribution, sel: I64, op_row: I64, table: str, gpu: GpuSpec | None, dur: I64
) -> tuple[list[dict[str, Any]], npt.NDArray[np.int8]]:
    """The ``ops`` rows over the selected, attributed GPU ops; and per GPU op (all rows of
    gpu_ops) its category (its op's, else its kernel name's)."""
    tr = a.trace
    ops, strings = tr.gpu_ops, tr.strings
    cat = np.full(len(ops), _UNKNOWN, dtype=np.int8)
    kind = ops["kind"][sel]
    cat[sel[kind == OpKind.MEMCPY]] = CATEGORIES.index("memcpy")
    cat[sel[kind == OpKind.MEMSET]] = CATEGORIES.index("memset")
    mine = sel[op_row[sel] >= 0]
    rows_out: list[dict[str, Any]] = []
    if mine.size:
        src = tr.host_ops if table == "host_ops" else tr.ranges
        launcher = op_row[mine]
        keys = src["name"][launcher].astype(np.int64) << 32
        if table == "host_ops":
            keys |= src["args"][launcher].astype(np.int64)
        uniq, inv = _stats.factorize(keys)  # few distinct keys: hashed, not sorted
        texts: list[OpText] = [
            kineto_op(strings[key >> 32], strings[key & 0xFFFFFFFF])
            if table == "host_ops"
            else nvtx_op(strings[key >> 32])
            for key in uniq.tolist()
        ]
        # one row per (name, input dims, input types)
        group_of: dict[tuple[str, str, str], int] = {}
        gid = np.empty(len(texts), dtype=np.int64)
        for i, t in enumerate(texts):
            key = (t.name, repr(t.input_dims), repr(t.input_types))
            gid[i] = group_of.setdefault(key, len(group_of))
        g = gid[inv]
        ng = len(group_of)
        kernel_ns = _sums(g, dur[mine], ng)
        calls = _stats.distinct_counts(launcher, g, len(src), ng)  # distinct launching ops
        first_text: dict[int, OpText] = {}
        for i in range(len(texts)):
            first_text.setdefault(int(gid[i]), texts[i])
        kernels: dict[int, set[str]] = {}
        pairs, _ = _stats.factorize((g << 32) | ops["name"][mine].astype(np.int64), False)
        for key in pairs.tolist():
            kernels.setdefault(key >> 32, set()).add(strings[key & 0xFFFFFFFF])
        cat_of_group = np.empty(ng, dtype=np.int8)
        for gi in range(ng):
            t = first_text[gi]
            call = OpCall(
                t.name,
                tuple(t.input_dims),
                tuple(t.input_types),
                tuple(t.concrete_inputs),
                tuple(t.input_strides),
                tuple(sorted(kernels[gi])),
            )
            cost = model_op(call)
            # an op no rule names (a user NVTX range around mixed kernels): its kernels'
            # own categories
            vague = cost.family is None and cost.category == "other"
            cat_of_group[gi] = _UNKNOWN if vague else CATEGORIES.index(cost.category)
            mean = kernel_ns[gi] / calls[gi]
            rl = _roofline(cost.gflops, cost.bytes, float(mean), cost.dtype, gpu)
            rows_out.append(
                {
                    "name": t.name,
                    "input_dims": t.input_dims,
                    "input_types": t.input_types,
                    "category": cost.category,
                    "calls": int(calls[gi]),
                    "kernel_ns": int(kernel_ns[gi]),
                    "gflops": cost.gflops,
                    "bytes": cost.bytes,
                    "dtype": cost.dtype,
                    "tflops_s": rl.tflops_s,
                    "tb_s": rl.tb_s,
                    "intensity": rl.intensity,
                    "bound": rl.bound,
                    "roofline_fraction": rl.fraction,
                }
            )
        known = cat[mine] == _UNKNOWN
        cat[mine[known]] = cat_of_group[g[known]]
    rest = sel[cat[sel] == _UNKNOWN]
    if rest.size:
        names, inv2 = _stats.factorize(ops["name"][rest].astype(np.int64))
        by_name = np.array(
            [CATEGORIES.index(category_of_kernel(strings[int(x)])) for x in names], np.int8
        )
        cat[rest] = by_name[inv2]
    rows_out.sort(key=lambda r: (-r["kernel_ns"], r["name"], repr(r["input_dims"])))
    return rows_out, cat


def _roofline(
    gflops: float | None, nbytes: float | None, mean: float, dtype: str | None, gpu: GpuSpec | None
) -> Roofline:
    """roofline(), with a zero-FLOP op (a copy modelled with 0 FLOPs) memory-bound at its
    share of the HBM bandwidth (roofline() divides by its zero attainable rate)."""
    if gflops == 0 and nbytes and gpu is not None and mean > 0:
        rl = roofline(None, nbytes, mean, dtype, gpu)
        frac = rl.tb_s / gpu.peak_tb_s if rl.tb_s is not None else None
        return Roofline(0.0, rl.tb_s, 0.0, "memory", frac)
    return roofline(gflops, nbytes, mean, dtype, gpu)


def _category_list(kernel: I64, busy: I64) -> list[dict[str, Any]]:
    total = int(kernel.sum())
    return [
        {
            "category": CATEGORIES[k],
            "kernel_ns": int(kernel[k]),
            "share": float(kernel[k] / total) if total else 0.0,
            "busy_ns": int(busy[k]),
        }
        for k in np.flatnonzero((kernel > 0) | (busy > 0)).tolist()
    ]


def op_table(a: Attribution, gpu: GpuSpec | None = None) -> OpTable:
    """The per-op table over the result's reported GPU ops; ``gpu``: the GPU whose peaks
    the roofline uses (default: the one the trace names, if the table knows it)."""
    tr = a.trace
    ops = tr.gpu_ops
    gpu = gpu if gpu is not None else trace_gpu(a)
    launch = launching_ops(tr, a.launches)
    everything = np.arange(len(ops), dtype=np.int64)
    parts = per_window(a, everything)
    sel = reported(a, everything)
    dur = ops["end"] - ops["start"]
    rows, cat = _ops_rows(a, sel, launch.op_row, launch.table, gpu, dur)
    n_cat = len(CATEGORIES)
    busy, split = _busy_split(a, cat)
    win_kernel = np.zeros((len(parts), n_cat), dtype=np.int64)
    if parts:
        rows_w = np.concatenate(parts)
        win = np.repeat(np.arange(len(parts)), [p.size for p in parts])
        cell = win * n_cat + np.minimum(cat[rows_w], n_cat - 1)
        win_kernel = _sums(cell, dur[rows_w], len(parts) * n_cat).reshape(len(parts), n_cat)
    window_categories = [_category_list(win_kernel[i], split[i]) for i in range(len(parts))]
    d_sel = dur[sel]
    tot_kernel = _sums(cat[sel].astype(np.int64), d_sel, n_cat)
    attributed = launch.op_row[sel] >= 0
    graph = launch.graph[sel]
    unattributed = []
    for k, why in enumerate(REASONS):
        m = launch.reason[sel] == k
        if m.any():
            unattributed.append(
                {"reason": why, "ops": int(m.sum()), "kernel_ns": int(d_sel[m].sum())}
            )
    attribution = {
        "source": "cpu_op" if launch.table == "host_ops" else "nvtx",
        "kernel_ns": int(d_sel.sum()),
        "attributed_ns": int(d_sel[attributed].sum()),
        "graph_kernel_ns": int(d_sel[graph].sum()),
        "graph_attributed_ns": int(d_sel[graph & attributed].sum()),
        "busy_ns": int(busy.sum()),
        "unattributed": unattributed,
    }
    gpu_doc = None
    if gpu is not None:
        gpu_doc = {
            "name": gpu.name,
            "peak_tflops": dict(gpu.peak_tflops),
            "peak_tb_s": gpu.peak_tb_s,
        }
    return OpTable(
        rows,
        _category_list(tot_kernel, split.sum(axis=0)),
        window_categories,
        attribution,
        gpu_doc,
    )
