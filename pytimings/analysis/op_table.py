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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from pytimings._native import _intervals as iv
from pytimings._native import _stats
from pytimings.analysis.graph_capture import (
    OWN,
    Captures,
    GraphMatch,
    capture_doc,
    match_replays,
)
from pytimings.analysis.op_launch import (
    REASON_CODES,
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
from pytimings.model.trace import CopyKind, OpKind

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
    op_row: I64  # per GPU op (row of trace.gpu_ops): its row in ``ops``, -1 where none
    # per GPU op: its index in CATEGORIES (an op no window reports: by its kernel name)
    category: npt.NDArray[np.int8]

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


@dataclass
class _Charged:
    """The attributed GPU ops of the selection: ``rows`` (gpu_ops rows), per row its op text
    (an index into ``texts``), its op call (``call``: distinct calls are distinct values)
    and whether a graph replay ran it (``graph``)."""

    rows: I64
    text: I64
    call: I64
    graph: npt.NDArray[np.bool_]
    texts: list[OpText]


def _charged(
    a: Attribution, sel: I64, op_row: I64, table: str, gm: GraphMatch | None, caps: Captures
) -> _Charged:
    tr = a.trace
    strings = tr.strings
    mine = sel[op_row[sel] >= 0]
    texts: list[OpText] = []
    inv = np.empty(0, dtype=np.int64)
    launcher = op_row[mine]
    if mine.size:
        src = tr.host_ops if table == "host_ops" else tr.ranges
        keys = src["name"][launcher].astype(np.int64) << 32
        if table == "host_ops":
            keys |= src["args"][launcher].astype(np.int64)
        uniq, inv = _stats.factorize(keys)  # few distinct keys: hashed, not sorted
        texts = [
            kineto_op(strings[key >> 32], strings[key & 0xFFFFFFFF])
            if table == "host_ops"
            else nvtx_op(strings[key >> 32])
            for key in uniq.tolist()
        ]
    if gm is None or not (gm.ref[sel] >= 0).any():
        return _Charged(mine, inv, launcher, np.zeros(mine.size, dtype=bool), texts)
    replayed = sel[gm.ref[sel] >= 0]
    ref = gm.ref[replayed]
    # a replayed op's call: its captured op instance within its graph launch
    call = -1 - (gm.replay[replayed] * len(caps.ops) + ref)
    return _Charged(
        np.concatenate([mine, replayed]),
        np.concatenate([inv, len(texts) + ref]),
        np.concatenate([launcher, call]),
        np.concatenate([np.zeros(mine.size, dtype=bool), np.ones(replayed.size, dtype=bool)]),
        texts + caps.ops,
    )


def _ops_rows(
    a: Attribution, sel: I64, ch: _Charged, gpu: GpuSpec | None, dur: I64
) -> tuple[list[dict[str, Any]], npt.NDArray[np.int8], I64]:
    """The ``ops`` rows over the selected, attributed GPU ops; and per GPU op (all rows of
    gpu_ops) its category (its op's, else its kernel name's) and its ``ops`` row (-1)."""
    tr = a.trace
    ops, strings = tr.gpu_ops, tr.strings
    cat = np.full(len(ops), _UNKNOWN, dtype=np.int8)
    row_of = np.full(len(ops), -1, dtype=np.int64)
    kind = ops["kind"][sel]
    cat[sel[kind == OpKind.MEMCPY]] = CATEGORIES.index("memcpy")
    cat[sel[kind == OpKind.MEMSET]] = CATEGORIES.index("memset")
    mine = ch.rows
    rows_out: list[dict[str, Any]] = []
    if mine.size:
        texts = ch.texts
        # one row per (name, input dims, input types)
        group_of: dict[tuple[str, str, str], int] = {}
        gid = np.empty(len(texts), dtype=np.int64)
        for i, t in enumerate(texts):
            key = (t.name, repr(t.input_dims), repr(t.input_types))
            gid[i] = group_of.setdefault(key, len(group_of))
        g = gid[ch.text]
        ng = len(group_of)
        d = dur[mine]
        kernel_ns = _sums(g, d, ng)
        graph_ns = _sums(g[ch.graph], d[ch.graph], ng)
        # calls: distinct launching ops (op calls) per group
        _, at = np.unique(ch.call, return_index=True)
        calls = np.bincount(g[at], minlength=ng)
        graph_calls = np.bincount(g[at[ch.graph[at]]], minlength=ng)
        # a copy to or from the host (or between devices) runs at its link's rate, not
        # HBM's: its group gets no bound or fraction
        linked = (ops["kind"][mine] == OpKind.MEMCPY) & (ops["copy_kind"][mine] != CopyKind.DTOD)
        over_link = np.bincount(g, weights=linked, minlength=ng) > 0
        first_text: dict[int, OpText] = {}
        for i in range(len(texts)):
            first_text.setdefault(int(gid[i]), texts[i])
        kernels: dict[int, set[str]] = {}
        pairs, _ = _stats.factorize((g << 32) | ops["name"][mine].astype(np.int64), False)
        for key in pairs.tolist():
            kernels.setdefault(key >> 32, set()).add(strings[key & 0xFFFFFFFF])
        cat_of_group = np.full(ng, _UNKNOWN, dtype=np.int8)
        for gi in np.flatnonzero(calls).tolist():
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
            rl = roofline(cost.gflops, cost.bytes, float(mean), cost.dtype, gpu)
            if over_link[gi]:
                rl = Roofline(rl.tflops_s, rl.tb_s, rl.intensity, None, None)
            rows_out.append(
                {
                    "name": t.name,
                    "input_dims": t.input_dims,
                    "input_types": t.input_types,
                    "category": cost.category,
                    "calls": int(calls[gi]),
                    "kernel_ns": int(kernel_ns[gi]),
                    "graph_calls": int(graph_calls[gi]),
                    "graph_kernel_ns": int(graph_ns[gi]),
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
        # rows exist for the groups some op call holds (a capture's ops hold none
        # unless a replay matched them)
        live = np.flatnonzero(calls)
        order = sorted(range(live.size), key=lambda i: _row_order(rows_out[i]))
        place = np.full(ng, -1, dtype=np.int64)
        place[live[order]] = np.arange(live.size)
        row_of[mine] = place[g]
        rows_out = [rows_out[i] for i in order]
    rest = sel[cat[sel] == _UNKNOWN]
    cat[rest] = _by_kernel_name(a, rest)
    return rows_out, cat, row_of


def _by_kernel_name(a: Attribution, rows: I64) -> npt.NDArray[np.int8]:
    """The GPU ops' categories by their kernel names alone."""
    ops, strings = a.trace.gpu_ops, a.trace.strings
    names, inv = _stats.factorize(ops["name"][rows].astype(np.int64))
    by_name = np.array(
        [CATEGORIES.index(category_of_kernel(strings[int(x)])) for x in names], np.int8
    )
    return by_name[inv]


def _row_order(r: dict[str, Any]) -> tuple[int, str, str]:
    return (-r["kernel_ns"], r["name"], repr(r["input_dims"]))


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


def op_table(
    a: Attribution, gpu: GpuSpec | None = None, captures: Captures | None = None
) -> OpTable:
    """The per-op table over the result's reported GPU ops; ``gpu``: the GPU whose peaks
    the roofline uses (default: the one the trace names, if the table knows it);
    ``captures``: graph captures (``--capture``) that replayed kernels are matched to, with
    the trace's own captures (:mod:`pytimings.analysis.graph_capture`)."""
    tr = a.trace
    ops = tr.gpu_ops
    gpu = gpu if gpu is not None else trace_gpu(a)
    launch = launching_ops(tr, a.launches)
    everything = np.arange(len(ops), dtype=np.int64)
    parts = per_window(a, everything)
    sel = reported(a, everything)
    caps = captures.copy() if captures is not None else Captures()
    gm: GraphMatch | None = None
    reason = launch.reason
    if launch.graph[sel].any():
        own = caps.add(tr, OWN, a.launches)
        if not own.graphs and not own.incomplete:
            caps.sources.remove(own)
        gm = match_replays(tr, a.launches, launch.graph, caps)
        reason = reason.copy()
        reason[launch.graph] = gm.reason[launch.graph]
    charged = _charged(a, sel, launch.op_row, launch.table, gm, caps)
    dur = ops["end"] - ops["start"]
    rows, cat, row_of = _ops_rows(a, sel, charged, gpu, dur)
    # an op no window reports (it starts before a window and runs into it) still makes the
    # window busy: the busy split charges it by its kind and kernel name
    rest = np.flatnonzero(cat == _UNKNOWN)
    kind = ops["kind"][rest]
    cat[rest] = np.where(
        kind == OpKind.MEMCPY,
        CATEGORIES.index("memcpy"),
        np.where(kind == OpKind.MEMSET, CATEGORIES.index("memset"), _by_kernel_name(a, rest)),
    )
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
    if gm is not None:
        attributed |= gm.ref[sel] >= 0
    graph = launch.graph[sel]
    unattributed = []
    for k, why in enumerate(REASONS):
        m = reason[sel] == k
        if m.any():
            unattributed.append(
                {
                    "reason": why,
                    "code": REASON_CODES[k],
                    "ops": int(m.sum()),
                    "kernel_ns": int(d_sel[m].sum()),
                }
            )
    attribution: dict[str, Any] = {
        "source": "cpu_op" if launch.table == "host_ops" else "nvtx",
        "kernel_ns": int(d_sel.sum()),
        "attributed_ns": int(d_sel[attributed].sum()),
        "graph_kernel_ns": int(d_sel[graph].sum()),
        "graph_attributed_ns": int(d_sel[graph & attributed].sum()),
        "busy_ns": int(busy.sum()),
        "unattributed": unattributed,
    }
    if gm is not None or captures is not None:
        attribution["graph_replays"] = capture_doc(caps, gm)
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
        row_of,
        cat,
    )


def ops_of(a: Attribution) -> OpTable:
    """``a``'s op table for its GPU (``a.gpu``, else the one the trace names), computed on
    first use: the findings, ``analyze --json`` and ``pytimings ops`` share one."""
    if a._op_table is None:
        a._op_table = op_table(a, a.gpu, a.captures)
    table: OpTable = a._op_table
    return table


def merge_tables(tables: Sequence[OpTable], window_order: I64, n_gpu_ops: int) -> OpTable:
    """The op table of several ranks from each rank's (per-rank tasks: the ranks' tables in
    rank order, their windows concatenated then put in ``window_order``): rows of one op,
    shape and types summed (calls, kernel ns) with the roofline of the summed mean,
    categories and attribution summed, the first rank's GPU. The per-GPU-op arrays index
    no rank's trace: -1 (``n_gpu_ops`` rows, the merged trace's)."""
    gpu_doc = next((t.gpu for t in tables if t.gpu is not None), None)
    gpu = (
        GpuSpec(gpu_doc["name"], dict(gpu_doc["peak_tflops"]), gpu_doc["peak_tb_s"])
        if gpu_doc is not None
        else None
    )
    merged: dict[tuple[str, str, str], dict[str, Any]] = {}
    for t in tables:
        for r in t.ops:
            key = (r["name"], repr(r["input_dims"]), repr(r["input_types"]))
            if key not in merged:
                merged[key] = dict(r)
            else:
                merged[key]["calls"] += r["calls"]
                merged[key]["kernel_ns"] += r["kernel_ns"]
    rows = []
    for r in merged.values():
        rl = roofline(r["gflops"], r["bytes"], r["kernel_ns"] / r["calls"], r["dtype"], gpu)
        r.update(tflops_s=rl.tflops_s, tb_s=rl.tb_s, intensity=rl.intensity, bound=rl.bound)
        r["roofline_fraction"] = rl.fraction
        rows.append(r)
    rows.sort(key=_row_order)
    kernel = np.zeros(len(CATEGORIES), dtype=np.int64)
    busy = np.zeros(len(CATEGORIES), dtype=np.int64)
    for t in tables:
        for c in t.categories:
            kernel[CATEGORIES.index(c["category"])] += c["kernel_ns"]
            busy[CATEGORIES.index(c["category"])] += c["busy_ns"]
    windows = [w for t in tables for w in t.window_categories]
    attribution = merge_attribution([t.attribution for t in tables])
    return OpTable(
        rows,
        _category_list(kernel, busy),
        [windows[int(i)] for i in window_order],
        attribution,
        gpu_doc,
        np.full(n_gpu_ops, -1, dtype=np.int64),
        np.full(n_gpu_ops, _UNKNOWN, dtype=np.int8),
    )


def merge_attribution(docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The ``op_attribution`` of several tables' (ranks', files'): sums, the unattributed
    counts summed per reason (``graph_replays``: the caller's, it depends on the captures)."""
    out: dict[str, Any] = {
        "source": "/".join(sorted({d["source"] for d in docs})),
        **{
            k: sum(int(d[k]) for d in docs)
            for k in ("kernel_ns", "attributed_ns", "graph_kernel_ns", "graph_attributed_ns")
        },
        "busy_ns": sum(int(d["busy_ns"]) for d in docs),
    }
    why: dict[str, list[int]] = {}
    for d in docs:
        for u in d["unattributed"]:
            acc = why.setdefault(u["reason"], [0, 0])
            acc[0] += u["ops"]
            acc[1] += u["kernel_ns"]
    out["unattributed"] = [
        {"reason": k, "code": code, "ops": why[k][0], "kernel_ns": why[k][1]}
        for k, code in zip(REASONS, REASON_CODES, strict=True)
        if k in why
    ]
    return out


def category_segments(
    a: Attribution, table: OpTable, rank: int, device: int
) -> tuple[I64, I64, I64]:
    """The busy time of one device as intervals (start, end, category index), each instant
    charged as the busy split charges it: to the first category in CATEGORIES order among
    the reported GPU ops running then (intervals in category order, then time)."""
    ops = a.trace.gpu_ops
    mine = np.flatnonzero(
        (ops["rank"] == rank)
        & (ops["device"] == device)
        & (ops["end"] > ops["start"])
        & (table.category < len(CATEGORIES))
    )
    mine = mine[np.argsort(ops["start"][mine], kind="stable")]
    c = table.category[mine]
    parts_s, parts_e, parts_c = [], [], []
    cov_s = cov_e = np.empty(0, dtype=np.int64)
    for k in np.unique(c).tolist():
        m = mine[c <= k]
        us, ue = iv.union(ops["start"][m], ops["end"][m])
        # the new union minus the covered one (a subset of it): its complement's overlap
        gap_s = np.concatenate(([us[0]], cov_e))
        gap_e = np.concatenate((cov_s, [ue[-1]]))
        keep = gap_e > gap_s
        ns, ne = iv.intersect(us, ue, gap_s[keep], gap_e[keep])
        parts_s.append(ns)
        parts_e.append(ne)
        parts_c.append(np.full(ns.size, k, dtype=np.int64))
        cov_s, cov_e = us, ue
    if not parts_s:
        return cov_s, cov_e, cov_s
    return np.concatenate(parts_s), np.concatenate(parts_e), np.concatenate(parts_c)
