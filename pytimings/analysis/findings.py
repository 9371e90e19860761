"""Findings: the biggest losses in an :class:`~pytimings.analysis.attribution.Attribution`,
ranked by the time they cost, each with its numbers and the evidence behind them.

Every rule here is generic (no trace is special-cased) and states only what its numbers
show: how long, how often, where in the windows, and what the launching host thread was
doing meanwhile (the innermost host activities of the contract's host attribution, and
what the GPUs ran while it waited in a synchronizing call); never why. The
capture rules (:mod:`.capture`) say where the capture itself shapes the labels.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from pytimings._native import _intervals as iv
from pytimings.analysis.capture import CAPTURE_RULES
from pytimings.analysis.classes import COMM, MEMORY
from pytimings.analysis.comm_findings import comm_bandwidth
from pytimings.analysis.finding import (
    GPU_BOUND_SHARE,
    Finding,
    Fix,
    agree,
    pct,
    plural,
    runs_text,
    scope,
)
from pytimings.analysis.host import interval_charges, summed
from pytimings.analysis.kernel_findings import cpu_compute, op_categories, ops_under_roofline
from pytimings.analysis.memory import memory_findings
from pytimings.analysis.op_table import LazyOpTable
from pytimings.analysis.partition import BUSY_LABELS, IDLE_LABELS, LABELS
from pytimings.analysis.selection import per_window, reported
from pytimings.console.text import duration
from pytimings.ingest.names import (
    is_synchronizing,
    op_name_ids,
    short_kernel_name,
    trace_vendor,
)
from pytimings.model.trace import ACTIVITY_KIND_NAMES, ActivityKind, CopyKind, MemKind, OpKind

if TYPE_CHECKING:
    from pytimings.analysis.result import Attribution

I64 = npt.NDArray[np.int64]
TINY_KERNEL_NS = 10_000  # kernels shorter than this are "tiny" (launch cost is of this order)
# a gap's launch_overhead this long is no kernel's launch cost (a launch takes microseconds):
# the host sat in one long call, or the op was queued; tiny kernels do not explain it
LONG_LAUNCH_GAP_NS = 1_000_000
# tiny eager kernels are named beside launch_overhead only when the short gaps before eager
# ops hold at least this share of it
TINY_BLAME_SHARE = 0.5
HOST_WINDOW_SHARE = 0.2  # the host-window finding: the top activity's least share of them
MIN_SHARE = 0.01  # a loss under 1% of the analysed time is not reported
MAX_GAP_GROUPS = 3  # host-bound gap groups reported (largest first)
GAP_CLUSTER_RATIO = 4.0  # gaps before one kernel differing more than this are apart
MAX_ACTIVITIES = 3  # host activities named per host-bound gap group: the largest, and
ACTIVITY_MIN_SHARE = 0.1  # the next ones holding at least this share of its host_bound


HOST_SIDE_LAYERS = ("host", "scheduling")  # what a host-side change fixes
# the GPUs busy at least this share of the windows: a host-side finding ranks by its
# saving alone (the host is seldom what holds such windows back; the ``gpu_bound`` finding
# itself asks for GPU_BOUND_SHARE, a stricter bar, before it names the GPU the bottleneck)
HOST_RANK_BUSY_SHARE = 0.8


def _gpu_bound_set(found: Sequence[Finding]) -> bool:
    """Whether the windows' GPUs are busy at least ``HOST_RANK_BUSY_SHARE`` of them, as
    the hardware finding measures it (none: not known to be)."""
    for f in found:
        if f.layer == "hardware" and "busy_ns" in f.evidence and f.evidence.get("window_ns"):
            return bool(f.evidence["busy_ns"] >= HOST_RANK_BUSY_SHARE * f.evidence["window_ns"])
    return False


def ranked(found: Sequence[Finding], total_ns: int) -> list[Finding]:
    """The findings worth reporting (at least ``MIN_SHARE`` of ``total_ns``, or of the
    hardware layer): capture findings first (they say how far to trust the rest), then
    by what fixing them saves (``evidence.saving_ns``, the replay's; the loss where the
    replay cannot say), biggest first (ties: loss, layer, title). On a GPU-bound window
    set (``HOST_RANK_BUSY_SHARE``) a host-side finding counts only its saving (none where the
    replay cannot say), so it ranks below the GPU-side findings unless it saves more."""
    total = max(1, total_ns)
    out = [
        f
        for f in found
        if f.loss_ns >= MIN_SHARE * total or f.layer == "hardware" or f.evidence.get("space")
    ]
    gpu_bound = _gpu_bound_set(found)

    def worth(f: Finding) -> int:
        saving = f.saving_ns
        if gpu_bound and f.layer in HOST_SIDE_LAYERS:
            return saving or 0
        return f.loss_ns if saving is None else saving

    def key(f: Finding) -> tuple[bool, bool, int, int, str, str]:
        # a host thread inside which the GPUs are busy holds nothing back: after the rest
        return (f.layer != "capture", bool(f.evidence.get("gpu_bound")), -worth(f),
                -f.loss_ns, f.layer, f.title)  # fmt: skip

    out.sort(key=key)
    return out


# --------------------------------------------------------------------------- hardware


def _per_device(a: Attribution) -> list[dict[str, Any]]:
    """Per (rank, device) of the windows: their time and the GPU's busy time in them."""
    w = a.windows
    per: list[dict[str, Any]] = []
    for r, d in sorted({(int(r), int(d)) for r, d in zip(w["rank"], w["device"], strict=False)}):
        m = (w["rank"] == r) & (w["device"] == d)
        win = int(w["window_ns"][m].sum())
        busy = sum(int(w[f"{x}_ns"][m].sum()) for x in BUSY_LABELS)
        per.append({"rank": r, "device": d, "window_ns": win, "busy_ns": busy})
    return per


def hardware(a: Attribution) -> list[Finding]:
    """GPU busy share vs idle (and its split), over all devices, naming the extremes."""
    w = a.windows
    per = _per_device(a)
    win = int(w["window_ns"].sum())
    if win == 0:
        return []
    busy = sum(p["busy_ns"] for p in per)
    idle = {x: int(w[f"{x}_ns"].sum()) for x in IDLE_LABELS}
    parts = ", ".join(f"{x} {pct(v / win)}" for x, v in sorted(idle.items(), key=lambda kv: -kv[1]))
    ranks = len({p["rank"] for p in per}) > 1

    def tag(p: dict[str, Any]) -> str:
        return f"rank {p['rank']} GPU {p['device']}" if ranks else f"GPU {p['device']}"

    if len(per) == 1:
        head = f"{tag(per[0])} is busy"
    else:
        share = sorted(per, key=lambda p: p["busy_ns"] / max(1, p["window_ns"]))
        lo, hi = share[0], share[-1]
        head = (
            f"{len(per)} GPUs (least busy {tag(lo)} "
            f"{pct(lo['busy_ns'] / max(1, lo['window_ns']))}, "
            f"most {tag(hi)} {pct(hi['busy_ns'] / max(1, hi['window_ns']))}) are busy"
        )
    return [
        Finding(
            "hardware",
            f"{head} {pct(busy / win)} of {scope(a.by)} ({duration(busy)} of {duration(win)}); "
            f"idle {pct(1 - busy / win)}: {parts}",
            win - busy,
            {
                "window_ns": win,
                "busy_ns": busy,
                **{f"{k}_ns": v for k, v in idle.items()},
                "devices": per,
            },
        )
    ]


def gpu_bound(a: Attribution) -> list[Finding]:
    """When every GPU of the windows is busy at least ``GPU_BOUND_SHARE`` of them: the GPU
    is the bottleneck. How far ahead the host runs (the contract's launch latency p50: an
    op starts that long after its launch call began) and, with ``--by``, the windows'
    length beside the GPU's busy time in them (the step is the GPU's period)."""
    per = _per_device(a)
    win = sum(p["window_ns"] for p in per)
    if not per or win == 0:
        return []
    shares = [p["busy_ns"] / max(1, p["window_ns"]) for p in per]
    low = min(shares)
    if low < GPU_BOUND_SHARE:
        return []
    busy = sum(p["busy_ns"] for p in per)
    lat = a.launch_latency.summary()
    w = a.windows
    row_busy = sum(w[f"{x}_ns"].astype(np.int64) for x in BUSY_LABELS)
    evidence: dict[str, Any] = {
        "threshold": GPU_BOUND_SHARE,
        "min_busy_share": low,
        "busy_ns": busy,
        "window_ns": win,
        "idle_ns": win - busy,
        "devices": per,
        "launch_latency_p50_ns": float(lat["p50"]) if lat["count"] else None,
        "window_p50_ns": float(np.percentile(w["window_ns"], 50)),
        "window_busy_p50_ns": float(np.percentile(row_busy, 50)),
    }
    ranks = len({p["rank"] for p in per}) > 1
    if len(per) == 1:
        p = per[0]
        who = f"rank {p['rank']} GPU {p['device']}" if ranks else f"GPU {p['device']}"
        head = f"the GPU is the bottleneck: {who} is busy {pct(low)}"
    else:
        head = f"the GPUs are the bottleneck: all {len(per)} are busy at least {pct(low)}"
    title = (
        f"{head} of {scope(a.by)} (idle {duration(win - busy)} in all: "
        "no host-side change saves more)"
    )
    if lat["count"]:
        title += f"; the host runs {duration(lat['p50'])} ahead of the GPU (launch latency p50)"
    if a.by is not None:
        title += (
            f"; {a.by} p50 {duration(evidence['window_p50_ns'])}, the GPU busy "
            f"{duration(evidence['window_busy_p50_ns'])} of it (p50): the step lasts as long as "
            f"its GPU work"
        )
    return [Finding("hardware", title, busy, evidence)]


# --------------------------------------------------------------------------- scheduling


def _activity_text(kind: str, name: str) -> str:
    """An activity as titles name it: ``cpu_op 'aten::mm'``; time inside none:
    ``no traced activity``."""
    return "no traced activity" if kind == "untraced" else f"{kind} '{name}'"


def _gap_activities(a: Attribution, rows: I64) -> tuple[list[dict[str, Any]], list[int]]:
    """The host activities charged for the host_bound parts of the gaps ``rows`` (the
    contract's innermost activity on the launching thread, :func:`host.interval_charges`),
    largest first: kind, name, ns, share of those parts, gaps (how many of the gaps it holds
    time in), window_rows; and each one's name id."""
    g, strings = a.gaps, a.trace.strings
    ch = interval_charges(
        a.trace,
        g.g0[rows],
        g.host_bound_end[rows],
        a.launches.thread[g.op[rows]].astype(np.int32),
        np.arange(rows.size, dtype=np.int64),
    )
    total = max(1, int((g.host_bound_end[rows] - g.g0[rows]).sum()))
    s = summed(ch, strings)
    out, ids = [], []
    for kind, nid, ns in zip(*(s[c].tolist() for c in ("kind", "name", "ns")), strict=True):
        held = ch["row"][(ch["kind"] == kind) & (ch["name"] == nid)]
        out.append(
            {
                "kind": ACTIVITY_KIND_NAMES[kind],
                "name": strings[nid],
                "ns": ns,
                "share": ns / total,
                "gaps": int(held.size),
                "window_rows": np.unique(g.window_row[rows[held]]).tolist(),
            }
        )
        ids.append(nid)
    return out, ids


def _sync_wait(
    a: Attribution, ranks: I64, parts: Sequence[tuple[int, I64, I64]], kind: str, nid: int
) -> dict[str, Any] | None:
    """When the activity ``kind`` named ``nid`` is a synchronizing call
    (:func:`is_synchronizing`): its calls that meet ``parts`` (per thread a set of
    intervals: gaps' host_bound parts, host windows), their time, and the GPU ops running on
    any device of the ``ranks`` during those calls: per (name, device) the op time inside
    the calls and its share of the call time, largest first; ``gpu_busy_ns``: call time
    during which any op runs. None for any other activity."""
    tr = a.trace
    name = tr.strings[nid]
    if kind not in ("cuda_api", "cpu_op") or not is_synchronizing(name):
        return None
    table = tr.api_calls if kind == "cuda_api" else tr.host_ops
    mine = table["name"] == nid
    if kind == "cpu_op":
        mine &= table["kind"] == ActivityKind.CPU_OP
    calls = []
    for thread, us, ue in parts:
        cand = np.flatnonzero(mine & (table["thread"] == thread))
        met = iv.overlap_lengths(table["start"][cand], table["end"][cand], us, ue) > 0
        calls.append(cand[met])
    c = np.concatenate(calls)
    c = c[np.argsort(table["start"][c], kind="stable")]
    cs, ce = iv.union(table["start"][c], table["end"][c])
    call_ns = int((ce - cs).sum())
    ops = tr.gpu_ops
    on = np.flatnonzero(np.isin(ops["rank"], ranks) & (ops["end"] > ops["start"]))
    on = on[np.argsort(ops["start"][on], kind="stable")]
    inside = iv.overlap_lengths(ops["start"][on], ops["end"][on], cs, ce)
    busy_s, busy_e = iv.intersect(*iv.union(ops["start"][on], ops["end"][on]), cs, ce)
    per = Counter[tuple[str, int]]()
    for nm, dev, v in zip(ops["name"][on], ops["device"][on], inside, strict=True):
        if v > 0:
            per[tr.strings[int(nm)], int(dev)] += int(v)
    top = sorted(per.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    return {
        "kind": kind,
        "name": name,
        "calls": int(c.size),
        "call_ns": call_ns,
        "gpu_busy_ns": int((busy_e - busy_s).sum()),
        "gpu_ops": [
            {"name": n, "device": d, "ns": v, "share": v / max(1, call_ns)} for (n, d), v in top
        ],
    }


def _thread_name(a: Attribution, thread: int) -> str:
    th = a.trace.threads
    if 0 <= thread < len(th):
        name = a.trace.strings[int(th["name"][thread])]
        return name or f"tid {int(th['tid'][thread])}"
    return "unknown"


def _sync_text(sync: dict[str, Any] | None) -> str:
    """What a title says of a wait in a synchronizing call (:func:`_sync_wait`), if any."""
    if sync is None:
        return ""
    busy = ", ".join(
        f"'{short_kernel_name(o['name'])}' on GPU {o['device']} {pct(o['share'])}"
        for i, o in enumerate(sync["gpu_ops"])
        if i == 0 or o["share"] >= ACTIVITY_MIN_SHARE
    )
    return (
        f"; the host waits in {sync['name']} for the GPU "
        f"({plural(sync['calls'], 'call')}, {duration(sync['call_ns'])}); "
        f"on the GPUs meanwhile: {busy or 'nothing the trace shows'}"
    )


def _magnitude_clusters(values: I64) -> npt.NDArray[np.int64]:
    """Cluster ids for positive values: sorted, split wherever the next value is more than
    ``GAP_CLUSTER_RATIO`` times the previous one (so 20 µs gaps and 30 ms gaps before the
    same kernel are reported apart)."""
    order = np.argsort(values, kind="stable")
    v = values[order].astype(np.float64)
    brk = np.zeros(v.size, dtype=np.int64)
    brk[1:] = v[1:] > GAP_CLUSTER_RATIO * v[:-1]
    ids = np.empty(v.size, dtype=np.int64)
    ids[order] = np.cumsum(brk)
    return ids


def host_bound_gaps(a: Attribution) -> list[Finding]:
    """Host-bound gaps grouped by the op that ends them and by magnitude: where, and for
    how long, the GPU waits for the host to begin submitting."""
    g = a.gaps
    hb = g.host_bound_end - g.g0
    sel = np.flatnonzero((hb > 0) & (g.op >= 0))
    if sel.size == 0:
        return []
    tr = a.trace
    ops = tr.gpu_ops
    names = ops["name"][g.op[sel]]
    group = np.empty(sel.size, dtype=np.int64)
    next_id = 0
    for nid in np.unique(names):
        m = np.flatnonzero(names == nid)
        c = _magnitude_clusters(hb[sel[m]])
        group[m] = c + next_id
        next_id += int(c.max()) + 1
    totals = np.bincount(group, weights=hb[sel], minlength=next_id)
    top = sorted(range(next_id), key=lambda i: (-totals[i], i))[:MAX_GAP_GROUPS]
    w = a.windows
    total_hb = int(hb[sel].sum())
    total_win = max(1, int(w["window_ns"].sum()))
    out = []
    for gid in top:
        rows = sel[group == gid]
        nid = int(ops["name"][g.op[rows[0]]])

        v = hb[rows]
        threads = a.launches.thread[g.op[rows]]
        parts = []
        for t in np.unique(threads):
            mine = rows[threads == t]
            order = np.argsort(g.g0[mine], kind="stable")
            parts.append((int(t), *iv.union(g.g0[mine][order], g.host_bound_end[mine][order])))
        acts, act_ids = _gap_activities(a, rows)
        kname = tr.strings[nid]
        what = "kernel" if int(ops["kind"][g.op[rows[0]]]) == OpKind.KERNEL else "op"
        at_start = (
            bool(np.all(g.g0[rows] == w["start_ns"][g.window_row[rows]])) and a.by is not None
        )
        # which windows: their numbers (windows["index"], --window N's), when the gaps
        # are on one device; else a count of window entries
        wrows = np.unique(g.window_row[rows])
        where = ""
        if a.by is not None:
            keys = {(int(w["rank"][x]), int(w["device"][x])) for x in wrows}
            if len(keys) == 1:
                r, d = keys.pop()
                same = np.flatnonzero((w["rank"] == r) & (w["device"] == d))
                hit = w["index"][wrows].tolist()
                where = (
                    f" in {len(hit)} of {plural(same.size, f'{a.by} window')} ({runs_text(hit)})"
                )
            else:
                where = (
                    f" in {wrows.size} of "
                    f"{plural(len(w), f'{a.by} window entry', f'{a.by} window entries')} "
                    f"on {len(keys)} (rank, device) pairs"
                )
        thread_names = sorted({_thread_name(a, p[0]) for p in parts})
        shown = ", ".join(repr(n) for n in thread_names[:3])
        doing = (
            f"thread '{thread_names[0]}' is"
            if len(parts) == 1
            else f"the {len(parts)} launching threads ({shown}"
            + (", ..." if len(thread_names) > 3 else "")
            + ") are"
        )
        named = [x for i, x in enumerate(acts) if i == 0 or x["share"] >= ACTIVITY_MIN_SHARE]
        doing += " in " + ", ".join(
            f"{_activity_text(x['kind'], x['name'])} {pct(x['share'])} "
            f"({duration(x['ns'])} in {plural(x['gaps'], 'gap')}"
            + (f", {plural(len(x['window_rows']), 'window')}" if a.by is not None else "")
            + ")"
            for x in named[:MAX_ACTIVITIES]
        )
        ranks = np.unique(w["rank"][g.window_row[rows]])
        sync = _sync_wait(a, ranks, parts, acts[0]["kind"], act_ids[0])
        doing += _sync_text(sync)
        title = (
            f"host_bound before {'the first op of each window, ' if at_start else ''}"
            f"{what} '{short_kernel_name(kname)}': {plural(rows.size, 'gap')}{where}, "
            f"median {duration(float(np.median(v)))}, "
            f"total {duration(int(v.sum()))} ({pct(int(v.sum()) / total_win)} of {scope(a.by)}); "
            f"meanwhile {doing}"
        )
        out.append(
            Finding(
                "scheduling",
                title,
                int(v.sum()),
                fix=Fix(host_bound=rows),
                evidence={
                    "op_name": kname,
                    "gaps": int(rows.size),
                    "median_ns": float(np.median(v)),
                    "p90_ns": float(np.percentile(v, 90)),
                    "total_ns": int(v.sum()),
                    "share_of_host_bound": int(v.sum()) / max(1, total_hb),
                    "threads": thread_names,
                    "host_activities": acts,
                    "sync_wait": sync,
                    "window_rows": wrows.tolist(),
                    "at_window_start": at_start,
                },
            )
        )
    return out


# --------------------------------------------------------------------------- kernels


def kernels(a: Attribution) -> list[Finding]:
    """launch_overhead, split by where it sits: short gaps before eagerly launched ops, long
    gaps (``LONG_LAUNCH_GAP_NS`` or more), gaps before graph-replayed ops; tiny eager
    kernels are named only when the short gaps before eager ops hold most of it. The
    launch_overhead of windows that the repeated-windows finding claims is left to it
    (losses are not counted twice)."""
    t = a.totals
    ops = a.trace.gpu_ops
    k = reported(a, np.flatnonzero(ops["kind"] == OpKind.KERNEL))
    if k.size == 0:
        return []
    in_graph = a.launches.graph
    eager = k[~in_graph[k]]
    dur = ops["end"][eager] - ops["start"][eager]
    tiny = dur < TINY_KERNEL_NS
    lo = t["launch_overhead_ns"]
    if lo == 0 and not tiny.any():
        return []
    rep = _repeating(a)
    in_rep = int(a.windows["launch_overhead_ns"][rep[2]].sum()) if rep else 0
    win = max(1, t["window_ns"])
    glo = a.gaps.launch_overhead_ns(a.launches)
    has = glo > 0
    glo, graph_gap = glo[has], in_graph[a.gaps.op[has]]
    long_gap = ~graph_gap & (glo >= LONG_LAUNCH_GAP_NS)
    short_gap = ~graph_gap & ~long_gap
    ns = {x: int(glo[m].sum()) for x, m in (("short", short_gap), ("long", long_gap))}
    ns["graph"] = int(glo[graph_gap].sum())
    where = [
        f"{duration(ns['short'])} in {plural(int(short_gap.sum()), 'gap')} under "
        f"{duration(LONG_LAUNCH_GAP_NS)} before eager ops"
    ]
    if long_gap.any():
        where.append(
            f"{duration(ns['long'])} in {plural(int(long_gap.sum()), 'gap')} of "
            f"{duration(LONG_LAUNCH_GAP_NS)} or more (longest {duration(int(glo[long_gap].max()))})"
        )
    if graph_gap.any():
        where.append(
            f"{duration(ns['graph'])} in {plural(int(graph_gap.sum()), 'gap')} "
            "before graph-replayed ops"
        )
    # tiny kernels are set beside the loss only where the loss sits before eager ops in
    # gaps of the order of a launch
    name_tiny = eager.size > 0 and ns["short"] >= TINY_BLAME_SHARE * lo
    title = (
        f"launch_overhead is {pct(lo / win)} of {scope(a.by)} ({duration(lo)}"
        + (f", {duration(in_rep)} of it in the repeating windows below" if in_rep else "")
        + "): the GPU idles after the host began submitting the next op; "
        + ", ".join(where)
        + (
            f"; {int(tiny.sum())} of {plural(eager.size, 'eager kernel')} "
            f"({pct(tiny.mean())}) {agree(int(tiny.sum()), 'runs', 'run')} "
            f"under {duration(TINY_KERNEL_NS)} "
            f"(median {duration(float(np.median(dur)))})"
            if name_tiny
            else ""
        )
        + (
            f"; {plural(k.size - eager.size, 'kernel')} replayed from graphs"
            if eager.size < k.size
            else ""
        )
        + f"; launch latency p50 {duration(a.launch_latency.summary()['p50'])}"
    )
    gap_rows = np.flatnonzero(has)
    if rep:  # the repeating windows' launch_overhead is the graphs finding's
        gap_rows = gap_rows[~np.isin(a.gaps.window_row[gap_rows], rep[2])]
    return [
        Finding(
            "kernel",
            title,
            lo - in_rep,
            fix=Fix(launch=gap_rows),
            evidence={
                "launch_overhead_ns": lo,
                "launch_overhead_in_repeating_windows_ns": in_rep,
                "short_gap_launch_overhead_ns": ns["short"],
                "short_gaps": int(short_gap.sum()),
                "long_gap_launch_overhead_ns": ns["long"],
                "long_gaps": int(long_gap.sum()),
                "longest_gap_launch_overhead_ns": int(glo[long_gap].max()) if long_gap.any() else 0,
                "graph_gap_launch_overhead_ns": ns["graph"],
                "graph_gaps": int(graph_gap.sum()),
                "kernels": int(k.size),
                "graph_kernels": int(k.size - eager.size),
                "eager_kernels": int(eager.size),
                "tiny_kernels": int(tiny.sum()),
                "tiny_kernel_ns": int(dur[tiny].sum()),
                "tiny_kernels_named": bool(name_tiny),
                "median_kernel_ns": float(np.median(dur)) if dur.size else 0.0,
                "launch_latency_p50_ns": float(a.launch_latency.summary()["p50"]),
            },
        )
    ]


def _repeating(a: Attribution) -> tuple[int, int, I64] | None:
    """Windows that repeat the same kernels, none from a graph: (how many windows,
    kernels per window, their rows in ``a.windows``), or None when there are none."""
    w = a.windows
    if a.by is None or len(w) < 3:
        return None
    ops = a.trace.gpu_ops
    sigs: list[bytes] = []  # the sorted kernel names of a window
    launched_graph = 0
    in_graph = a.launches.graph
    for m in per_window(a, np.flatnonzero(ops["kind"] == OpKind.KERNEL)):
        sigs.append(np.sort(ops["name"][m]).tobytes())
        launched_graph += int(np.sum(in_graph[m]))
    counts = Counter(sigs)
    sig = min(counts, key=lambda s: (-counts[s], s))
    n = counts[sig]
    kernels = len(sig) // np.dtype(np.int32).itemsize
    if n < 3 or n < len(w) / 2 or launched_graph or not kernels:
        return None
    rows = np.asarray([i for i, x in enumerate(sigs) if x == sig], dtype=np.int64)
    return n, kernels, rows


def graphs(a: Attribution) -> list[Finding]:
    """Windows that repeat the same kernels without CUDA/HIP graphs; the loss is the
    launch_overhead inside those windows (the kernel finding claims the rest)."""
    rep = _repeating(a)
    if rep is None:
        return []
    n, kernels, rows = rep
    w = a.windows
    lo = int(w["launch_overhead_ns"][rows].sum())
    title = (
        f"{n} of {plural(len(w), f'{a.by} window')} launch the same "
        f"{plural(kernels, 'kernel')}, "
        f"none from a {trace_vendor(a.trace)} graph; "
        f"the GPU spends {duration(lo / n)} per window in launch_overhead"
    )
    gaps = np.flatnonzero(
        (a.gaps.launch_overhead_ns(a.launches) > 0) & np.isin(a.gaps.window_row, rows)
    )
    return [
        Finding(
            "kernel",
            title,
            lo,
            fix=Fix(launch=gaps),
            evidence={
                "repeating_windows": n,
                "kernels_per_window": kernels,
                "graph_kernels": 0,  # _repeating() holds only windows without graph work
                "launch_overhead_ns": lo,
            },
        )
    ]


# --------------------------------------------------------------------------- memory


def _exposed_ns(a: Attribution, rows: I64) -> int:
    """The time, inside the reported windows, that the given memory ops occupy while no
    compute or comm op runs on their device: the part of their ``memory`` label they cost."""
    ops, w = a.trace.gpu_ops, a.windows
    rows = rows[(a.classes[rows] == MEMORY) & (ops["end"][rows] > ops["start"][rows])]
    total = 0
    for r, d in {(int(r), int(d)) for r, d in zip(w["rank"], w["device"], strict=True)}:
        on = (ops["rank"] == r) & (ops["device"] == d)
        mine = rows[on[rows]]
        if mine.size == 0:
            continue
        busy = np.flatnonzero(on & (a.classes != MEMORY) & (ops["end"] > ops["start"]))
        mine = mine[np.argsort(ops["start"][mine], kind="stable")]
        busy = busy[np.argsort(ops["start"][busy], kind="stable")]
        ps, pe = iv.union(ops["start"][mine], ops["end"][mine])
        hidden = iv.intersect(ps, pe, *iv.union(ops["start"][busy], ops["end"][busy]))
        wi = np.flatnonzero((w["rank"] == r) & (w["device"] == d))
        ws = np.ascontiguousarray(w["start_ns"][wi])
        we = np.ascontiguousarray(w["end_ns"][wi])
        total += int(iv.overlap_lengths(ws, we, ps, pe).sum())
        total -= int(iv.overlap_lengths(ws, we, *hidden).sum())
    return total


def _bytes_text(nbytes: I64) -> str:
    """What copies move: '70.2 MB', or 'at least 70.2 MB (292 with no byte count)' when the
    trace gave some no size (the loaders record those as 0 and count them in ``dropped``)."""
    unknown = int(np.count_nonzero(nbytes == 0))
    mb = f"{int(nbytes.sum()) / 1e6:.1f} MB"
    return f"at least {mb} ({unknown} with no byte count)" if unknown else mb


def memory(a: Attribution) -> list[Finding]:
    ops = a.trace.gpu_ops
    out = []
    t = a.totals
    win = max(1, t["window_ns"])
    cp = reported(a, np.flatnonzero(ops["kind"] == OpKind.MEMCPY))
    if t["memory_ns"]:
        out.append(
            Finding(
                "memory",
                f"memory (memcpy/memset not hidden under compute or comm) is "
                f"{pct(t['memory_ns'] / win)} "
                f"of {scope(a.by)} ({duration(t['memory_ns'])}); {plural(cp.size, 'memcpy')} "
                f"{agree(cp.size, 'moves', 'move')} {_bytes_text(ops['bytes'][cp])}",
                t["memory_ns"],
                fix=Fix(ops=reported(a, np.flatnonzero(a.classes == MEMORY))),
                evidence={
                    "memory_ns": t["memory_ns"],
                    "memcpys": int(cp.size),
                    "bytes": int(ops["bytes"][cp].sum()),
                    "unknown_bytes": int(np.count_nonzero(ops["bytes"][cp] == 0)),
                },
            )
        )
    pageable = cp[
        (ops["src_mem"][cp] == MemKind.PAGEABLE) | (ops["dst_mem"][cp] == MemKind.PAGEABLE)
    ]
    if pageable.size:
        d = int((ops["end"][pageable] - ops["start"][pageable]).sum())
        exposed = _exposed_ns(a, pageable)
        out.append(
            Finding(
                "memory",
                f"{plural(pageable.size, 'memcpy')} {agree(pageable.size, 'uses', 'use')} "
                f"pageable host memory ({duration(d)} of copy time, "
                f"{duration(exposed)} of it not hidden under compute or comm, "
                f"{_bytes_text(ops['bytes'][pageable])})",
                exposed,
                {
                    "pageable_copies": int(pageable.size),
                    "copy_ns": d,
                    "exposed_ns": exposed,
                    "bytes": int(ops["bytes"][pageable].sum()),
                    "unknown_bytes": int(np.count_nonzero(ops["bytes"][pageable] == 0)),
                },
                Fix(ops=pageable),
            )
        )
    if a.by is not None:
        w = a.windows
        hd = cp[np.isin(ops["copy_kind"][cp], [CopyKind.HTOD, CopyKind.DTOH])]
        if hd.size:
            hit = 0
            d = 0
            inside = []
            for m in per_window(a, hd):
                hit += int(m.size)
                d += int((ops["end"][m] - ops["start"][m]).sum())
                inside.append(m)
            if hit:
                out.append(
                    Finding(
                        "memory",
                        f"{plural(hit, 'host<->device copy', 'host<->device copies')} (HtoD/DtoH) "
                        f"{agree(hit, 'runs', 'run')} inside {a.by} windows "
                        f"({hit / len(w):.1f} per window, {duration(d)} in all)",
                        d,
                        {"copies": hit, "copy_ns": d},
                        Fix(ops=np.unique(np.concatenate(inside))),
                    )
                )
    return out


# --------------------------------------------------------------------------- parallel


def parallel(a: Attribution) -> list[Finding]:
    t = a.totals
    comm = t["comm_overlapped_ns"] + t["comm_exposed_ns"]
    if comm == 0:
        return []
    ratio = t["comm_overlapped_ns"] / comm
    return [
        Finding(
            "parallel",
            f"comm_exposed is {pct(t['comm_exposed_ns'] / max(1, t['window_ns']))} "
            f"of {scope(a.by)} "
            f"({duration(t['comm_exposed_ns'])}); "
            f"only {pct(ratio)} of communication overlaps compute",
            t["comm_exposed_ns"],
            {
                "comm_exposed_ns": t["comm_exposed_ns"],
                "comm_overlapped_ns": t["comm_overlapped_ns"],
                "overlap_ratio": ratio,
            },
            Fix(ops=reported(a, np.flatnonzero(a.classes == COMM))),
        )
    ]


def collectives(a: Attribution) -> list[Finding]:
    c = a.collectives
    if c is None or len(c.table) == 0:
        return []
    tab = c.table
    skew, wait = tab["skew_ns"], tab["wait_ns"]
    instances = len({(n, i) for n, i in zip(tab["name"], tab["index"], strict=False)})
    s = c.straggler
    coll_ns = int((tab["end_ns"] - tab["start_ns"]).sum())
    title = (
        f"arrival skew at {plural(instances, 'collective')}: "
        f"median {duration(float(np.median(skew)))}, "
        f"p99 {duration(float(np.percentile(skew, 99)))}; "
        f"ranks wait {duration(int(wait.sum()))} in all inside "
        f"collectives ({pct(int(wait.sum()) / max(1, coll_ns))} of "
        f"collective time)"
    )
    if s is not None:
        title += f"; rank {s} arrives last in {c.last_counts[s]} of {instances}"
    evidence: dict[str, Any] = {
        "straggler": s,
        "last_counts": c.last_counts,
        "median_skew_ns": float(np.median(skew)),
        "wait_ns": int(wait.sum()),
        "clock_offset_ns": c.clock_offset_ns,
    }
    exposed = sum(v["exposed_ns"] for v in c.exposed.values())
    waiting = sum(v["waiting_ns"] for v in c.exposed.values())
    evidence |= {"exposed_ns": exposed, "waiting_exposed_ns": waiting}
    if exposed:
        title += (
            f"; of the {duration(exposed)} they are exposed, {duration(waiting)} "
            f"({pct(waiting / exposed)}) is waiting for peers, "
            f"{duration(exposed - waiting)} transfer"
        )
    return [Finding("parallel", title, int(wait.sum()), evidence)]


# --------------------------------------------------------------------------- application


def tail(a: Attribution) -> list[Finding]:
    w = a.windows
    if a.by is None or len(w) < 3:
        return []
    n = w["window_ns"].astype(np.float64)
    p50, p99 = np.percentile(n, [50, 99])
    if p50 <= 0:
        return []
    slow = np.flatnonzero(n >= np.percentile(n, 90))
    growth = {x: float(w[f"{x}_ns"][slow].mean() - np.median(w[f"{x}_ns"])) for x in LABELS}
    grows = max(growth, key=lambda x: growth[x])
    loss = int(np.sum(np.maximum(n - p50, 0)))
    title = (
        f"{a.by} p99 {duration(p99)} vs p50 {duration(p50)} ({p99 / p50:.2f}x); in the slowest "
        f"{plural(slow.size, 'window')} {grows} grows most "
        f"(+{duration(growth[grows])} over its median)"
    )
    return [
        Finding(
            "application",
            title,
            loss,
            {"p50_ns": float(p50), "p99_ns": float(p99), "grows": grows, "growth_ns": growth},
        )
    ]


# --------------------------------------------------------------------------- host


def _host_window_numbers(a: Attribution, held: npt.NDArray[np.intp]) -> str:
    """The ``--by`` windows' numbers (windows["index"]) of these host windows (each one's
    range's own extent on its thread), as runs; host windows without a GPU window entry
    (on a rank with no reported device, or without --by: threads) by their own order."""
    hw, w, rg = a.host.windows, a.windows, a.trace.ranges
    rr = a.window_range_rows
    number: dict[tuple[int, int, int, int], list[int]] = {}
    for i in np.flatnonzero(rr >= 0).tolist():
        r = int(rr[i])
        s = int(rg["start"][r])
        key = (int(w["rank"][i]), int(rg["thread"][r]), s, max(s, int(rg["end"][r])))
        number.setdefault(key, []).append(int(w["index"][i]))
    for v in number.values():  # a window's entries (one per device) share its number
        v[:] = sorted(set(v))
    # ranges of one extent on one thread (twins): the k-th such host window (in its
    # table's order) is the k-th such window by number, whatever the trace's row order
    nth: dict[tuple[int, int, int, int], int] = {}
    keys = []
    for h in range(len(hw)):
        key = (
            int(hw["rank"][h]),
            int(hw["thread"][h]),
            int(hw["start_ns"][h]),
            int(hw["end_ns"][h]),
        )
        keys.append((key, nth.get(key, 0)))
        nth[key] = keys[-1][1] + 1
    mine = [keys[h] for h in held.tolist()]
    if a.by is None or not all(k in number and j < len(number[k]) for k, j in mine):
        return runs_text(held.tolist(), first=1)
    return runs_text([number[k][j] for k, j in mine])


def host_windows(a: Attribution) -> list[Finding]:
    """Over the host windows (with ``--by``; of each thread, on a trace with no GPU ops
    analysed without it): the host activity (other than the windows' own ranges) holding
    the most self time, when it holds at least ``HOST_WINDOW_SHARE`` of their time (on a
    CPU-only capture, the only finding there is)."""
    hw, ch = a.host.windows, a.host.by_activity
    total = int(hw["window_ns"].sum())
    if total == 0:
        return []
    strings = a.trace.strings
    s = summed(ch, strings)
    # the windows' own ranges are left out: their self time is what no nested activity
    # covers, and naming them says nothing the window does not
    own = set(hw["name"].tolist()) if a.by is not None else set()
    rest = [
        i
        for i, (k, n) in enumerate(zip(s["kind"].tolist(), s["name"].tolist(), strict=True))
        if not (k == ActivityKind.RANGE and strings[n] in own)
    ]
    if not rest:
        return []
    kind, nid, ns = (int(s[c][rest[0]]) for c in ("kind", "name", "ns"))
    if ns < HOST_WINDOW_SHARE * total:
        return []
    held = np.unique(ch["row"][(ch["kind"] == kind) & (ch["name"] == nid)])
    k, name = ACTIVITY_KIND_NAMES[kind], strings[nid]
    parts = []
    for t in np.unique(hw["thread"][held]).tolist():
        mine = held[hw["thread"][held] == t]
        mine = mine[np.argsort(hw["start_ns"][mine], kind="stable")]
        parts.append((int(t), *iv.union(hw["start_ns"][mine], hw["end_ns"][mine])))
    ranks = np.unique(hw["rank"][held])
    sync = _sync_wait(a, ranks, parts, k, nid)
    wait = _waiting(a, ranks, parts, kind, nid)
    title = (
        f"{_activity_text(k, name)} holds {pct(ns / total)} of the host time in "
        f"{plural(len(hw), (a.by or 'thread') + ' host window')} "
        f"({duration(ns)} self time of their {duration(total)}), "
        f"in {len(held)} of them ({_host_window_numbers(a, held)})"
    ) + _sync_text(sync)
    if wait["gpu_bound"]:
        busy = f"{pct(wait['gpu_busy_share'])} of its {duration(wait['activity_ns'])}"
        title += (
            f"; the thread waits there: it launches no GPU work in it and the GPUs are busy {busy}"
            if wait["waiting"]
            else f"; the GPUs are busy {busy} (the thread launches "
            f"{plural(wait['launches'], 'GPU op')} in it)"
        ) + f", so it does not limit the step (the GPU idles {duration(wait['gpu_idle_ns'])} of it)"
    return [
        Finding(
            "host",
            title,
            ns,
            {
                **wait,
                "kind": k,
                "name": name,
                "ns": ns,
                "share": ns / total,
                "host_window_ns": total,
                "host_windows": len(hw),
                "host_window_rows": held.tolist(),
                "sync_wait": sync,
            },
        )
    ]


def _waiting(
    a: Attribution, ranks: I64, parts: Sequence[tuple[int, I64, I64]], kind: int, nid: int
) -> dict[str, Any]:
    """Whether the activity ``kind`` named ``nid`` holds the GPU back in ``parts`` (per
    thread, a set of intervals): over its instances there (their whole extent, nested
    activities included), ``launches`` (launch calls of GPU ops starting inside),
    ``gpu_busy_ns`` (time any GPU op of the ``ranks`` runs) of ``activity_ns``;
    ``gpu_bound``: the GPUs are busy at least ``GPU_BOUND_SHARE`` of it, so the thread
    holds them back by at most ``gpu_idle_ns`` (it runs ahead, or waits); ``waiting``:
    that, and it launches nothing meanwhile."""
    tr = a.trace
    canon = op_name_ids(tr.strings)  # ``nid`` is a name by the one rule, as charged
    if kind == ActivityKind.RANGE:
        table, mine = tr.ranges, canon[tr.ranges["name"]] == nid
    elif kind == ActivityKind.CUDA_API:
        table, mine = tr.api_calls, canon[tr.api_calls["name"]] == nid
    else:
        table = tr.host_ops
        mine = (canon[table["name"]] == nid) & (table["kind"] == kind)
    launch_rows = np.unique(a.launches.api_row[a.launches.api_row >= 0])
    api = tr.api_calls
    ops = tr.gpu_ops
    on = np.flatnonzero(np.isin(ops["rank"], ranks) & (ops["end"] > ops["start"]))
    on = on[np.argsort(ops["start"][on], kind="stable")]
    busy_s, busy_e = iv.union(ops["start"][on], ops["end"][on])
    act_ns = busy_ns = launches = 0
    for thread, us, ue in parts:
        cand = np.flatnonzero(mine & (table["thread"] == thread))
        cand = cand[np.argsort(table["start"][cand], kind="stable")]
        s, e = iv.intersect(*iv.union(table["start"][cand], table["end"][cand]), us, ue)
        act_ns += int((e - s).sum())
        busy_ns += int(iv.overlap_lengths(s, e, busy_s, busy_e).sum())
        calls = launch_rows[api["thread"][launch_rows] == thread]
        launches += int(iv.points_in_set(np.ascontiguousarray(api["start"][calls]), s, e).sum())
    share = busy_ns / act_ns if act_ns else 0.0
    return {
        "activity_ns": act_ns,
        "gpu_busy_ns": busy_ns,
        "gpu_busy_share": share,
        "gpu_idle_ns": act_ns - busy_ns,
        "launches": launches,
        "gpu_bound": bool(act_ns and share >= GPU_BOUND_SHARE),
        "waiting": bool(act_ns and launches == 0 and share >= GPU_BOUND_SHARE),
    }


Rule = Callable[["Attribution"], list[Finding]]
# a rule that also reads the op table (computed only when the rule asks for it)
OpRule = Callable[["Attribution", LazyOpTable], list[Finding]]


class Scope(Enum):
    """Where a rule's data is: ``RANK``, a rank's events (per-rank tasks run it on each
    rank, then :func:`pytimings.analysis.ranks.rank_findings` merges the ranks' findings);
    ``ACROSS``, only the windows table, totals and collectives (run once over all ranks)."""

    RANK = "rank"
    ACROSS = "across ranks"


@dataclass(frozen=True)
class Registered:
    """A findings rule, its layer (what its findings' ``layer`` is) and its scope."""

    layer: str
    scope: Scope
    rule: Rule | None = None
    op_rule: OpRule | None = None  # instead of ``rule``: reads the op table too

    def run(self, a: Attribution, ops: LazyOpTable) -> list[Finding]:
        if self.op_rule is not None:
            return self.op_rule(a, ops)
        assert self.rule is not None
        return self.rule(a)


def device_memory(a: Attribution) -> list[Finding]:
    """The memory layer's findings: peak, fragmentation, churn, growth (space findings
    carry ``evidence.space``: ranked by their place, not a time)."""
    return memory_findings(a.memory)


_RANK, _ACROSS = Scope.RANK, Scope.ACROSS
# Every findings rule, once. One trace (or several loaded together) runs all of them, in
# this order; per-rank tasks run the RANK ones on each rank and the ACROSS ones on the
# merged result, so one file and N files give the same rules.
REGISTRY: tuple[Registered, ...] = (
    *(Registered("capture", _RANK, rule) for rule in CAPTURE_RULES),
    Registered("hardware", _ACROSS, hardware),
    Registered("hardware", _ACROSS, gpu_bound),
    Registered("scheduling", _RANK, host_bound_gaps),
    Registered("kernel", _RANK, kernels),
    Registered("kernel", _RANK, graphs),
    Registered("memory", _RANK, memory),
    Registered("parallel", _ACROSS, parallel),
    Registered("parallel", _ACROSS, collectives),
    Registered("parallel", _ACROSS, comm_bandwidth),
    Registered("application", _ACROSS, tail),
    Registered("host", _RANK, host_windows),
    Registered("memory", _RANK, device_memory),
    Registered("kernel", _RANK, op_rule=op_categories),
    Registered("kernel", _RANK, op_rule=ops_under_roofline),
    Registered("kernel", _RANK, cpu_compute),
)


def run_rules(
    a: Attribution, ops: LazyOpTable, scopes: Collection[Scope] = tuple(Scope)
) -> list[Finding]:
    """The findings of every registered rule of ``scopes`` on ``a``, in registry order
    (unranked, without savings)."""
    return [f for entry in REGISTRY if entry.scope in scopes for f in entry.run(a, ops)]
