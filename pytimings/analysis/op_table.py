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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from pytimings._native import _intervals as iv
from pytimings._native import _optable, _stats
from pytimings.analysis.graph_capture import (
    OWN,
    Captures,
    GraphMatch,
    capture_doc,
    match_replays,
)
from pytimings.analysis.op_launch import (
    NO_OP,
    REASON_CODES,
    REASONS,
    OpText,
    cores,
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
    of_interest,
    roofline,
)
from pytimings.analysis.partition import device_order
from pytimings.analysis.selection import per_window
from pytimings.ingest.names import short_kernel_name
from pytimings.model.trace import ActivityKind, CopyKind, OpKind, Trace

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
    # per GPU op (row of trace.gpu_ops): its row in ``ops``, -1 where none (int32 from
    # op_table, int64 from merge_tables)
    op_row: npt.NDArray[np.int32] | I64
    # per GPU op: its index in CATEGORIES (an op no window reports: by its kernel name)
    category: npt.NDArray[np.int8]
    # the GPU names the trace's devices report, in device order ("" each: none reported)
    trace_gpus: list[str] = field(default_factory=list)

    def doc(self) -> dict[str, Any]:
        return {
            "ops": self.ops,
            "categories": self.categories,
            "op_attribution": self.attribution,
            "gpu": self.gpu,
            "trace_gpus": self.trace_gpus,
        }


def trace_gpu_names(a: Attribution) -> list[str]:
    """The distinct GPU names the trace's devices report, in device order (none empty)."""
    dev = a.trace.devices
    names = (a.trace.strings[int(dev["name"][i])] for i in range(len(dev)))
    return list(dict.fromkeys(n for n in names if n))


def trace_gpu(a: Attribution) -> GpuSpec | None:
    """The table's GPU the reported devices name (the first device whose name is known)."""
    for name in trace_gpu_names(a):
        spec = gpu_from_trace(name)
        if spec is not None:
            return spec
    return None


def _sums(group: I64, values: I64, n: int) -> I64:
    """Per group id in [0, n), the exact integer sum of ``values`` (one compiled pass)."""
    c = np.ascontiguousarray
    return _stats.group_sums(c(group, dtype=np.int64), c(values, dtype=np.int64), n)


def _device_pairs(a: Attribution) -> list[tuple[int, int, npt.NDArray[np.uint8] | None, I64]]:
    """Per (rank, device) of the windows: the mask of its GPU ops (None: every op is
    there) and its window entries."""
    ops, w = a.trace.gpu_ops, a.windows
    out = []
    for r, d in sorted({(int(r), int(d)) for r, d in zip(w["rank"], w["device"], strict=True)}):
        same = (ops["rank"] == r) & (ops["device"] == d)
        keep = None if same.all() else same.view(np.uint8)
        out.append((r, d, keep, np.flatnonzero((w["rank"] == r) & (w["device"] == d))))
    return out


def _window_of(
    a: Attribution, pairs: list[tuple[int, int, npt.NDArray[np.uint8] | None, I64]]
) -> npt.NDArray[np.int32] | None:
    """Per GPU op, the window entry that reports it (it starts in the window, on its rank
    and device; -1: none), when no two window entries of a device overlap (one window
    per op); None otherwise (:func:`~pytimings.analysis.selection.per_window` then)."""
    ops, w = a.trace.gpu_ops, a.windows
    win = np.full(len(ops), -1, dtype=np.int32)
    start = np.ascontiguousarray(ops["start"], dtype=np.int64)
    for _, _, keep, rows in pairs:
        rows = rows[w["end_ns"][rows] > w["start_ns"][rows]]  # an empty window holds none
        rows = rows[np.argsort(w["start_ns"][rows], kind="stable")]
        ws, we = w["start_ns"][rows], w["end_ns"][rows]
        if bool((ws[1:] < we[:-1]).any()):
            return None
        c = np.ascontiguousarray
        _optable.window_index(start, keep, c(ws, np.int64), c(we, np.int64), c(rows), win)
    return win


def _busy_split(
    a: Attribution,
    cat: npt.NDArray[np.int8],
    pairs: list[tuple[int, int, npt.NDArray[np.uint8] | None, I64]],
) -> tuple[I64, npt.NDArray[np.int64]]:
    """Per window entry: busy ns (its overlap with the union of its device's GPU ops) and per
    category the busy ns charged (the module's rule): the unions of the ops of categories
    up to each one, in one compiled pass per device."""
    ops, w = a.trace.gpu_ops, a.windows
    n_cat = len(CATEGORIES)
    split = np.zeros((len(w), n_cat), dtype=np.int64)
    busy = np.zeros(len(w), dtype=np.int64)
    c = np.ascontiguousarray
    start, end = c(ops["start"], dtype=np.int64), c(ops["end"], dtype=np.int64)
    for r, d, _, rows in pairs:
        ws, we = w["start_ns"][rows], w["end_ns"][rows]
        points = np.unique(np.concatenate([ws, we])).astype(np.int64)
        order = a.device_orders.get((r, d))
        if order is None:  # a result built without them
            order = device_order(a.trace, r, d)
        # f[k, i]: the length of the union of categories <= k before points[i]
        f = _optable.busy_split(start, end, cat, c(order), n_cat, points, parts=cores())
        i0, i1 = np.searchsorted(points, ws), np.searchsorted(points, we)
        covered = np.where(we > ws, f[:, i1] - f[:, i0], 0)
        split[rows] = np.diff(covered, axis=0, prepend=0).T
        busy[rows] = covered[-1]
    return busy, split


@dataclass
class _Charged:
    """The attributed GPU ops of the selection: per GPU op its op text (an index into
    ``texts``, -1: not charged); the texts from ``n_direct`` on are graph captures' ops,
    run by the ``replayed`` rows whose op calls are ``replayed_call`` (distinct calls are
    distinct values). Per text over its GPU ops: kernel ns, the graph-replayed part,
    distinct launching ops (``calls``; a capture's: none), whether a copy over a link is
    among them; and the distinct ``text << 32 | kernel name`` pairs."""

    text: npt.NDArray[np.int32]
    texts: list[OpText]
    n_direct: int
    replayed: I64
    replayed_call: I64
    kernel_ns: I64
    graph_ns: I64
    calls: I64
    over_link: npt.NDArray[np.bool_]
    pairs: I64
    # the texts [first, end) that are kernels' own names (GPU ops with no op range around)
    by_kernel: tuple[int, int] = (0, 0)


def _charged(
    a: Attribution,
    sel: npt.NDArray[np.bool_],
    op_row: npt.NDArray[np.int32] | I64,
    table: str,
    gm: GraphMatch | None,
    caps: Captures,
    fallback: I64 | None = None,
) -> _Charged:
    """The charged GPU ops (:class:`_Charged`); ``fallback``: GPU ops with no op around
    their launch charged to their kernel's name (:data:`KERNEL_ROW`)."""
    tr = a.trace
    ops, strings = tr.gpu_ops, tr.strings
    src = tr.host_ops if table == "host_ops" else tr.ranges
    c = np.ascontiguousarray
    gpu_cols = (
        c(ops["start"], dtype=np.int64), c(ops["end"], dtype=np.int64),
        c(ops["kind"], dtype=np.int8), c(ops["copy_kind"], dtype=np.int8),
        c(ops["name"], dtype=np.int32), OpKind.MEMCPY, CopyKind.DTOD,
    )  # fmt: skip
    uniq, text, kernel_ns, calls, over_link, pairs = _optable.launcher_texts(
        sel.view(np.uint8),
        op_row,
        c(src["name"], dtype=np.int32),
        c(src["args"], dtype=np.int32) if table == "host_ops" else None,
        *gpu_cols,
        parts=cores(),
    )
    texts = [
        kineto_op(strings[key >> 32], strings[key & 0xFFFFFFFF])
        if table == "host_ops"
        else nvtx_op(strings[key >> 32])
        for key in uniq.tolist()
    ]
    by_kernel = (len(texts), len(texts))
    if fallback is not None and fallback.size:
        # a GPU op with no op range around its launch: its kernel's own name is its op
        short = short_names(tr, fallback)
        names, idx = np.unique(short, return_inverse=True)
        text[fallback] = len(texts) + idx.reshape(-1).astype(np.int32)
        fb_texts = [OpText(KERNEL_ROW.format(n), [], [], [], []) for n in names.tolist()]
        total = len(texts) + len(fb_texts)
        fb_ns, fb_link, fb_pairs = _optable.text_totals(fallback, text, total, *gpu_cols)
        zeros = np.zeros(len(fb_texts), dtype=np.int64)
        kernel_ns = np.concatenate([kernel_ns, zeros]) + fb_ns
        calls = np.concatenate([calls, np.bincount(idx.reshape(-1), minlength=len(fb_texts))])
        over_link = np.concatenate([over_link, zeros.astype(bool)]) | fb_link
        pairs = np.concatenate([pairs, fb_pairs])
        texts += fb_texts
        by_kernel = (by_kernel[0], len(texts))
    none = np.empty(0, dtype=np.int64)
    if gm is None or not (gm.ref[sel] >= 0).any():
        return _Charged(
            text, texts, len(texts), none, none, kernel_ns, np.zeros_like(kernel_ns), calls,
            over_link, pairs, by_kernel,
        )  # fmt: skip
    replayed = np.flatnonzero(sel & (gm.ref >= 0))
    ref = gm.ref[replayed]
    n_direct = len(texts)
    text[replayed] = n_direct + ref
    # a replayed op's call: its captured op instance within its graph launch
    call = -1 - (gm.replay[replayed] * len(caps.ops) + ref)
    graph_ns, graph_link, graph_pairs = _optable.text_totals(
        replayed, text, n_direct + len(caps.ops), *gpu_cols
    )
    captured = np.zeros(len(caps.ops), dtype=np.int64)
    return _Charged(
        text,
        texts + caps.ops,
        n_direct,
        replayed,
        call,
        np.concatenate([kernel_ns, captured]) + graph_ns,
        graph_ns,
        np.concatenate([calls, captured]),
        np.concatenate([over_link, captured.astype(bool)]) | graph_link,
        np.concatenate([pairs, graph_pairs]),
        by_kernel,
    )


def outer_ops(trace: Trace, op_row: npt.NDArray[np.int32] | I64) -> I64:
    """Per GPU op, the host_ops row of the op it is charged to: the outermost cpu_op with a
    perf model of interest (:func:`~pytimings.analysis.ops.of_interest`) around its
    launching op ``op_row`` on its thread, else the launching op itself (-1 stays -1)."""
    host, strings = trace.host_ops, trace.strings
    out = np.asarray(op_row, dtype=np.int64)
    launching = np.unique(out[out >= 0])
    if not launching.size:
        return out
    names = np.unique(host["name"][host["kind"] == ActivityKind.CPU_OP])
    wanted = np.zeros(len(strings) + 1, dtype=bool)
    wanted[[int(n) for n in names.tolist() if of_interest(strings[int(n)])]] = True
    rows = np.flatnonzero(wanted[host["name"]] & (host["kind"] == ActivityKind.CPU_OP))
    if not rows.size:
        return out
    thread, start, end = host["thread"], host["start"], host["end"]
    rows = rows[np.lexsort((-end[rows], start[rows], thread[rows]))]
    # the outermost: not inside an earlier one of its thread (ops of a thread nest)
    reach = np.empty(rows.size, dtype=np.int64)
    top = np.ones(rows.size, dtype=bool)
    for t in np.unique(thread[rows]).tolist():
        at = np.flatnonzero(thread[rows] == t)
        reach[at] = np.maximum.accumulate(end[rows[at]])
        top[at[1:]] = start[rows[at[1:]]] >= reach[at[:-1]]
    tops = rows[top]
    outer = np.arange(len(host), dtype=np.int64)
    for t in np.unique(thread[launching]).tolist():
        mine = launching[thread[launching] == t]
        cand = tops[thread[tops] == t]
        if not cand.size:
            continue
        i = np.searchsorted(start[cand], start[mine], side="right") - 1
        ok = i >= 0
        ok[ok] = end[cand[i[ok]]] >= end[mine[ok]]
        outer[mine[ok]] = cand[i[ok]]
    return np.where(out >= 0, outer[np.maximum(out, 0)], -1)


def _launchers(
    a: Attribution, sel: npt.NDArray[np.bool_], inner: I64, row_of: I64, n_rows: int
) -> list[list[dict[str, Any]]]:
    """Per ``ops`` row, the innermost launching ops of its directly charged GPU ops by name:
    their kernel ns and calls (distinct launching ops), most kernel time first."""
    ops, host, strings = a.trace.gpu_ops, a.trace.host_ops, a.trace.strings
    mine = np.flatnonzero(sel & (inner >= 0) & (row_of >= 0))
    out: list[list[dict[str, Any]]] = [[] for _ in range(n_rows)]
    if not mine.size:
        return out
    key = row_of[mine].astype(np.int64) << 32 | host["name"][inner[mine]].astype(np.int64)
    uniq, inv = np.unique(key, return_inverse=True)
    inv = inv.reshape(-1)
    ns = np.bincount(inv, weights=(ops["end"] - ops["start"])[mine]).astype(np.int64)
    pairs = np.unique(np.stack([inv.astype(np.int64), inner[mine]]), axis=1)
    calls = np.bincount(pairs[0], minlength=uniq.size)
    for k in range(uniq.size):
        out[int(uniq[k] >> 32)].append(
            {
                "name": strings[int(uniq[k] & 0xFFFFFFFF)],
                "kernel_ns": int(ns[k]),
                "calls": int(calls[k]),
            }
        )
    return [sorted(x, key=lambda e: (-e["kernel_ns"], e["name"])) for x in out]


# the op row of a GPU op charged to its own name (no op range around its launch): its
# short kernel name (or copy's, memset's), whose category its kernels' names give
KERNEL_ROW = "(no op) {}"


def short_names(trace: Trace, rows: I64) -> npt.NDArray[np.object_]:
    """The short kernel names (no template or argument lists) of GPU op ``rows``."""
    ids = trace.gpu_ops["name"][rows]
    uniq, inv = np.unique(ids, return_inverse=True)
    short = [short_kernel_name(trace.strings[int(i)]) for i in uniq.tolist()]
    return np.asarray(short, dtype=object)[inv.reshape(-1)]


def _charged_by(a: Attribution, ch: _Charged, sel: npt.NDArray[np.bool_]) -> dict[str, int]:
    """Attributed kernel ns by how: ``op`` (the op around the launch), ``graph_capture``
    (a capture's op), ``kernel_name`` (the kernel's own name: no op range around it)."""
    ops = a.trace.gpu_ops
    dur = (ops["end"] - ops["start"]).astype(np.int64)
    text = ch.text
    graph = np.zeros(len(ops), dtype=bool)
    graph[ch.replayed] = True
    first, end = ch.by_kernel
    named = sel & (text >= first) & (text < end) & ~graph
    direct = sel & (text >= 0) & ~named & ~graph
    return {
        "op": int(dur[direct].sum()),
        "graph_capture": int(dur[sel & graph].sum()),
        "kernel_name": int(dur[named].sum()),
    }


def _ops_rows(
    a: Attribution, ch: _Charged, gpu: GpuSpec | None
) -> tuple[list[dict[str, Any]], npt.NDArray[np.int8], I64]:
    """The ``ops`` rows over the charged GPU ops; and per op text its group's category
    (``_UNKNOWN``: its kernels' own) and its group's row in ``ops`` (-1: none)."""
    strings = a.trace.strings
    texts = ch.texts
    # one row per (name, input dims, input types)
    group_of: dict[tuple[str, str, str], int] = {}
    gid = np.empty(len(texts), dtype=np.int64)
    for i, t in enumerate(texts):
        key = (t.name, repr(t.input_dims), repr(t.input_types))
        gid[i] = group_of.setdefault(key, len(group_of))
    ng = len(group_of)
    kernel_ns, graph_ns = _sums(gid, ch.kernel_ns, ng), _sums(gid, ch.graph_ns, ng)
    over_link = np.zeros(ng, dtype=bool)
    over_link[gid[ch.over_link]] = True
    # calls: distinct launching ops (op calls) per group; a graph replay's: per captured
    # op instance within its graph launch
    calls = _sums(gid, ch.calls, ng)
    graph_calls = np.zeros(ng, dtype=np.int64)
    if ch.replayed.size:
        _, at = np.unique(ch.replayed_call, return_index=True)
        graph_calls = np.bincount(gid[ch.text[ch.replayed[at]]], minlength=ng)
        calls += graph_calls
    first_text: dict[int, OpText] = {}
    for i in range(len(texts)):
        first_text.setdefault(int(gid[i]), texts[i])
    kernels: dict[int, set[str]] = {}
    for key in ch.pairs.tolist():
        kernels.setdefault(int(gid[key >> 32]), set()).add(strings[key & 0xFFFFFFFF])
    cat_of_group = np.full(ng, _UNKNOWN, dtype=np.int8)
    rows_out: list[dict[str, Any]] = []
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
        # a copy to or from the host (or between devices) runs at its link's rate, not
        # HBM's: its group gets no bound or fraction
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
    # rows exist for the groups some op call holds (a capture's ops hold none unless a
    # replay matched them)
    live = np.flatnonzero(calls)
    order = sorted(range(live.size), key=lambda i: _row_order(rows_out[i]))
    place = np.full(ng, -1, dtype=np.int64)
    place[live[order]] = np.arange(live.size)
    rows_out = [rows_out[i] for i in order]
    return rows_out, cat_of_group[gid], place[gid]


def _name_categories(a: Attribution) -> npt.NDArray[np.int8]:
    """Per string id, the category of a GPU op by its kernel name alone (for the names of
    the trace's GPU ops; 0 for other ids)."""
    ops, strings = a.trace.gpu_ops, a.trace.strings
    names = _optable.names_present(np.ascontiguousarray(ops["name"], np.int32), len(strings))
    out = np.zeros(len(strings), dtype=np.int8)
    out[names] = [CATEGORIES.index(category_of_kernel(strings[int(x)])) for x in names]
    return out


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
    pairs = _device_pairs(a)
    win = _window_of(a, pairs)
    parts: list[I64] = []
    if win is None:  # overlapping window entries: an op may be in several
        parts = per_window(a, np.arange(len(ops), dtype=np.int64))
        sel = np.zeros(len(ops), dtype=bool)
        for p in parts:
            sel[p] = True
    else:
        sel = win >= 0
    caps = captures.copy() if captures is not None else Captures()
    gm: GraphMatch | None = None
    reason = launch.reason
    if (launch.graph & sel).any():
        own = caps.add(tr, OWN, a.launches)
        if not own.graphs and not own.incomplete:
            caps.sources.remove(own)
        gm = match_replays(tr, a.launches, launch.graph, caps)
        reason = reason.copy()
        reason[launch.graph] = gm.reason[launch.graph]
    fallback = None
    if launch.table == "ranges":  # Nsight: NVTX ranges are the ops, where there are any
        fallback = np.flatnonzero(sel & (reason == REASONS.index(NO_OP)))
        if fallback.size:
            reason = reason.copy()
            reason[fallback] = -1
    op_row = launch.op_row
    if launch.table == "host_ops":  # the op of interest around the launching op
        op_row = outer_ops(tr, op_row)
    charged = _charged(a, sel, op_row, launch.table, gm, caps, fallback)
    rows, text_cat, text_place = _ops_rows(a, charged, gpu)
    n_cat = len(CATEGORIES)
    c = np.ascontiguousarray
    # every op's category: a memcpy or memset by its kind, a charged op by its op's when
    # known, else by its kernel name (an op no window reports still makes the window busy)
    cat, row_of, win_kernel, tot_kernel, sums, r_ops, r_ns = _optable.op_categories(
        c(ops["start"], dtype=np.int64), c(ops["end"], dtype=np.int64),
        c(ops["kind"], dtype=np.int8), c(ops["name"], dtype=np.int32), sel.view(np.uint8),
        win, len(a.windows), charged.text, text_cat, text_place, _name_categories(a),
        reason, len(REASONS), launch.graph.view(np.uint8), OpKind.MEMCPY, OpKind.MEMSET,
        CATEGORIES.index("memcpy"), CATEGORIES.index("memset"), n_cat, parts=cores(),
    )  # fmt: skip
    busy, split = _busy_split(a, cat, pairs)
    # per row the innermost launching ops of its kernels (Kineto's cpu_ops; beneath the
    # op of interest: the ops that launched them)
    direct = sel & ~launch.graph & (charged.text >= 0) & (charged.text < charged.by_kernel[0])
    if launch.table == "host_ops":
        inner = np.asarray(launch.op_row, dtype=np.int64)
        names = _launchers(a, direct, inner, np.asarray(row_of, dtype=np.int64), len(rows))
    else:  # an NVTX range launches what it charges
        names = [[] for _ in rows]
    for r, launched_by in zip(rows, names, strict=True):
        r["launcher"] = launched_by
    if win is None:
        win_kernel = np.zeros((len(parts), n_cat), dtype=np.int64)
        if parts:
            rows_w = np.concatenate(parts)
            w_of = np.repeat(np.arange(len(parts)), [p.size for p in parts])
            cell = w_of * n_cat + np.minimum(cat[rows_w], n_cat - 1)
            dur = ops["end"][rows_w] - ops["start"][rows_w]
            win_kernel = _sums(cell, dur, len(parts) * n_cat).reshape(len(parts), n_cat)
    window_categories = [_category_list(win_kernel[i], split[i]) for i in range(len(a.windows))]
    unattributed = [
        {
            "reason": why,
            "code": REASON_CODES[k],
            "ops": int(r_ops[k]),
            "kernel_ns": int(r_ns[k]),
        }
        for k, why in enumerate(REASONS)
        if r_ops[k]
    ]
    attribution: dict[str, Any] = {
        "source": "cpu_op" if launch.table == "host_ops" else "nvtx",
        "kernel_ns": int(sums[0]),
        "attributed_ns": int(sums[1]),
        "graph_kernel_ns": int(sums[2]),
        "graph_attributed_ns": int(sums[3]),
        "busy_ns": int(busy.sum()),
        "unattributed": unattributed,
        # the attributed kernel time by what charged it: the op around the launch, a graph
        # capture's op, the kernel's own name (Nsight, no op range around the launch)
        "charged_by": _charged_by(a, charged, sel),
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
        trace_gpu_names(a),
    )


@dataclass
class LazyOpTable:
    """An attribution's op table for ``gpu`` (None: the one the trace names) and
    ``captures``, computed on first :meth:`get`: the findings, the session and a per-rank
    task share one (the session owns it; the attribution stays plain data)."""

    attribution: Attribution
    gpu: GpuSpec | None = None
    captures: Captures | None = None
    _table: OpTable | None = field(default=None, repr=False)

    def get(self) -> OpTable:
        if self._table is None:
            self._table = op_table(self.attribution, self.gpu, self.captures)
        return self._table


def _merged_launchers(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two rows' launchers summed per name, most kernel time first."""
    out: dict[str, dict[str, Any]] = {x["name"]: dict(x) for x in a}
    for x in b:
        if x["name"] in out:
            out[x["name"]]["kernel_ns"] += x["kernel_ns"]
            out[x["name"]]["calls"] += x["calls"]
        else:
            out[x["name"]] = dict(x)
    return sorted(out.values(), key=lambda x: (-x["kernel_ns"], x["name"]))


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
                merged[key] = {**r, "launcher": [dict(x) for x in r["launcher"]]}
            else:
                merged[key]["calls"] += r["calls"]
                merged[key]["kernel_ns"] += r["kernel_ns"]
                merged[key]["launcher"] = _merged_launchers(merged[key]["launcher"], r["launcher"])
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
        list(dict.fromkeys(n for t in tables for n in t.trace_gpus)),
    )


def merge_attribution(docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The ``op_attribution`` of several tables' (ranks', files'): sums (``charged_by`` per
    way), the unattributed counts summed per reason (``graph_replays``: the caller's, it
    depends on the captures)."""
    out: dict[str, Any] = {
        "source": "/".join(sorted({d["source"] for d in docs})),
        **{
            k: sum(int(d[k]) for d in docs)
            for k in ("kernel_ns", "attributed_ns", "graph_kernel_ns", "graph_attributed_ns")
        },
        "busy_ns": sum(int(d["busy_ns"]) for d in docs),
        "charged_by": {
            k: sum(int(d["charged_by"][k]) for d in docs)
            for k in ("op", "graph_capture", "kernel_name")
        },
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
