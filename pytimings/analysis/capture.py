"""Capture findings: where the capture itself, not the workload, shapes the labels.

Each rule states what the timeline shows (ops that start long after their launch call
returned with nothing visible on their GPU, ops that start before their launch call,
windows whose range ends where the capture ends, ops without a launch call, a trend in the
launch-to-start delay) and, under ``evidence["distorts"]``, which labels that moves and by
how much (label -> ns). :func:`pytimings.analysis.findings.ranked` lists capture findings
first when they pass its threshold: every other number is read through them.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from pytimings._native import _intervals as iv
from pytimings.analysis.comm_hints import unclassified_comm
from pytimings.analysis.finding import Finding, agree, pct, plural, runs_text, scope
from pytimings.analysis.partition import LABELS
from pytimings.analysis.selection import reported
from pytimings.console.text import duration
from pytimings.ingest.names import short_kernel_name

if TYPE_CHECKING:
    from pytimings.analysis.result import Attribution

I64 = npt.NDArray[np.int64]
# an op that starts this long after its launch call returned, while its GPU runs nothing the
# trace shows, waited on something outside the trace: the GPU picks a submitted op up in
# microseconds, so even a loaded driver queue does not take a millisecond
LATE_START_NS = 1_000_000
# a launch-to-start drift smaller than this over the capture moves no label boundary that
# matters (it is the contract's launch pick-up bound, 50 µs)
DRIFT_MIN_NS = 50_000
DRIFT_BINS = 8  # the capture's span is cut into this many equal bins for the drift trend
DRIFT_MIN_SAMPLES = 3  # ops launched onto an idle GPU needed in a bin for its minimum
DRIFT_MIN_R2 = 0.8  # the bin minima must follow a line this well to call it a drift
_DROPPED_OPEN = "open_at_capture_end"  # loaders' dropped-count key for ranges never closed


def _pairs(a: Attribution) -> list[tuple[int, int]]:
    w = a.windows
    return sorted({(int(r), int(d)) for r, d in zip(w["rank"], w["device"], strict=True)})


def _on(a: Attribution, rows: I64, r: int, d: int) -> I64:
    ops = a.trace.gpu_ops
    out: I64 = rows[(ops["rank"][rows] == r) & (ops["device"][rows] == d)]
    return out


def _busy(a: Attribution, r: int, d: int) -> tuple[I64, I64]:
    """The union of the non-empty ops of (rank, device)."""
    ops = a.trace.gpu_ops
    rows = np.flatnonzero((ops["rank"] == r) & (ops["device"] == d) & (ops["end"] > ops["start"]))
    rows = rows[np.argsort(ops["start"][rows], kind="stable")]
    return iv.union(ops["start"][rows], ops["end"][rows])


def _in_windows(a: Attribution, r: int, d: int, s: I64, e: I64) -> int:
    """Time of the intervals ``[s, e)`` (their union) inside the window entries of
    (rank, device), each entry counted: what the labels of those entries hold of them."""
    if s.size == 0:
        return 0
    w = a.windows
    order = np.argsort(s, kind="stable")
    us, ue = iv.union(np.ascontiguousarray(s[order]), np.ascontiguousarray(e[order]))
    wi = np.flatnonzero((w["rank"] == r) & (w["device"] == d))
    ws = np.ascontiguousarray(w["start_ns"][wi])
    we = np.ascontiguousarray(w["end_ns"][wi])
    return int(iv.overlap_lengths(ws, we, us, ue).sum())


def _delays_text(wait: I64) -> str:
    """'149.00 ms' for one delay (or several equal ones), else '1.20 ms to 149.00 ms'."""
    lo, hi = duration(int(wait.min())), duration(int(wait.max()))
    return lo if lo == hi else f"{lo} to {hi}"


def _names(a: Attribution, rows: I64, n: int = 3) -> list[str]:
    c = Counter(int(x) for x in a.trace.gpu_ops["name"][rows])
    top = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return [short_kernel_name(a.trace.strings[i]) for i, _ in top]


def _distorts_text(distorts: dict[str, int]) -> str:
    return ", ".join(f"{k.removesuffix('_ns')} {duration(v)}" for k, v in distorts.items() if v)


def late_starts(a: Attribution) -> list[Finding]:
    """Ops that start ``LATE_START_NS`` or more after their launch call returned while
    their GPU runs nothing the trace shows: the wait is labelled launch_overhead or
    device_wait, but nothing in the trace explains it."""
    ops, api = a.trace.gpu_ops, a.trace.api_calls
    row = a.launches.api_row
    cand = reported(a, np.flatnonzero((row >= 0) & (ops["end"] > ops["start"])))
    lend = api["end"][row[cand]] if cand.size else cand
    keep = ops["start"][cand] - lend >= LATE_START_NS
    cand, lend = cand[keep], lend[keep]
    if cand.size == 0:
        return []
    seen = np.zeros(cand.size, dtype=np.int64)  # GPU busy time between call end and start
    for r, d in _pairs(a):
        m = np.flatnonzero((ops["rank"][cand] == r) & (ops["device"][cand] == d))
        if m.size:
            seen[m] = iv.overlap_lengths(
                np.ascontiguousarray(lend[m]), ops["start"][cand[m]], *_busy(a, r, d)
            )
    late = seen == 0
    rows, lend = cand[late], lend[late]
    if rows.size == 0:
        return []
    wait = ops["start"][rows] - lend
    # what the labels hold of the waits: the launch_overhead part of the gaps these ops end
    # ([host_bound_end, +launch_overhead) after the call returned); the rest is device_wait
    g = a.gaps
    gi = np.flatnonzero(np.isin(g.op, rows))
    ret = lend[np.searchsorted(rows, g.op[gi])]  # rows are sorted (reported(): row order)
    hb = g.host_bound_end[gi]
    lo = int(np.maximum(0, hb + g.launch_overhead_ns(a.launches)[gi] - np.maximum(hb, ret)).sum())
    total = 0
    for r, d in _pairs(a):
        m = np.flatnonzero((ops["rank"][rows] == r) & (ops["device"][rows] == d))
        total += _in_windows(a, r, d, lend[m], ops["start"][rows[m]])
    distorts = {"launch_overhead_ns": lo, "device_wait_ns": max(0, total - lo)}
    title = (
        f"capture: {plural(int(rows.size), 'op')} ({', '.join(repr(n) for n in _names(a, rows))}) "
        f"{agree(int(rows.size), 'starts', 'start')} {_delays_text(wait)} "
        "after the launch call returned while the GPU runs nothing "
        "the trace shows (work queued outside the "
        f"capture, another process, or a host/GPU clock offset); {duration(total)} of "
        f"{scope(a.by)} is that wait ({_distorts_text(distorts)})"
    )
    return [
        Finding(
            "capture",
            title,
            total,
            {
                "ops": int(rows.size),
                "min_wait_ns": int(wait.min()),
                "median_wait_ns": float(np.median(wait)),
                "max_wait_ns": int(wait.max()),
                "visible_busy_ns": int(seen[late].sum()),
                "threshold_ns": LATE_START_NS,
                "op_names": _names(a, rows),
                "distorts": distorts,
            },
        )
    ]


def before_launch(a: Attribution) -> list[Finding]:
    """Ops that start before their launch call began: the host and GPU clocks disagree by
    at least that much; each gap such an op ends is labelled host_bound whole."""
    ops = a.trace.gpu_ops
    row = a.launches.api_row
    linked = reported(a, np.flatnonzero((row >= 0) & (ops["end"] > ops["start"])))
    off = ops["start"][linked] - a.launches.start[linked]
    neg = off < 0
    if not neg.any():
        return []
    rows = linked[neg]
    g = a.gaps
    gi = np.isin(g.op, rows)
    hb = int((g.host_bound_end[gi] - g.g0[gi]).sum())
    worst = int(-off[neg].min())
    distorts = {"host_bound_ns": hb}
    title = (
        f"capture: {int(neg.sum())} of {plural(int(linked.size), 'linked op')} "
        f"{agree(int(neg.sum()), 'starts', 'start')} before the launch call began "
        f"(by up to {duration(worst)}, median "
        f"{duration(float(np.median(-off[neg])))}): the host and GPU clocks disagree by at least "
        f"{duration(worst)}; {duration(hb)} of host_bound in "
        f"{plural(int(gi.sum()), 'gap')} ends at "
        "such ops"
    )
    return [
        Finding(
            "capture",
            title,
            hb,
            {
                "ops_before_launch": int(neg.sum()),
                "linked_ops": int(linked.size),
                "clock_offset_ns": worst,
                "median_offset_ns": float(np.median(-off[neg])),
                "gaps": int(gi.sum()),
                "distorts": distorts,
            },
        )
    ]


def cut_windows(a: Attribution) -> list[Finding]:
    """``--by`` windows whose range ends exactly where the rank's capture ends (the last
    instant of any op, call or range): the range was cut there, and its labels are those
    of a part; ranges the loader found still open at the end are counted too."""
    if a.by is None:
        return []
    tr, w = a.trace, a.windows
    rr = a.window_range_rows
    rg = tr.ranges
    open_ranges = sum(v for k, v in tr.dropped.items() if _DROPPED_OPEN in k)
    cut = np.zeros(len(w), dtype=bool)
    for r in np.unique(w["rank"]).tolist():
        ends = [t["end"][t["rank"] == r] for t in (tr.gpu_ops, tr.api_calls, rg) if len(t)]
        end = max(int(e.max()) for e in ends if e.size)
        mine = (w["rank"] == r) & (rr >= 0)
        cut[mine] = rg["end"][rr[mine]] >= end
    if not cut.any():
        return []
    rows = np.flatnonzero(cut)
    distorts = {f"{x}_ns": int(w[f"{x}_ns"][rows].sum()) for x in LABELS}
    distorts = {k: v for k, v in distorts.items() if v}
    total = int(w["window_ns"][rows].sum())
    idx = np.unique(w["index"][rows]).tolist()  # the windows' numbers (--window N's)
    one = len(idx) == 1
    title = (
        f"capture: {plural(len(idx), f'{a.by} window')} (number {runs_text(idx)}) "
        f"{'ends' if one else 'end'} where the capture ends, cut short: "
        f"{duration(total)} ({_distorts_text(distorts)}) is the part of "
        f"{'a window' if one else 'windows'} the capture holds"
        + (
            f"; {plural(open_ranges, 'range')} still open at the capture's end "
            f"{agree(open_ranges, 'was', 'were')} not loaded"
            if open_ranges
            else ""
        )
    )
    return [
        Finding(
            "capture",
            title,
            total,
            {
                "cut_windows": len(idx),
                "window_rows": rows.tolist(),
                "window_ns": total,
                "open_ranges_not_loaded": open_ranges,
                "distorts": distorts,
            },
        )
    ]


def unlinked_ops(a: Attribution) -> list[Finding]:
    """Ops without a launch call in the trace: the idle gap each ends is idle_other whole
    (its split into host_bound, launch_overhead and device_wait needs the call)."""
    ops = a.trace.gpu_ops
    row = a.launches.api_row
    shown = reported(a, np.flatnonzero(ops["end"] > ops["start"]))
    bare = shown[row[shown] < 0]
    if bare.size == 0:
        return []
    idle = 0
    for r, d in _pairs(a):
        mine = _on(a, bare, r, d)
        if mine.size == 0:
            continue
        bs, be = _busy(a, r, d)
        # the busy segments that begin with no linked op: the gap before each has no call
        linked_starts = ops["start"][
            _on(a, np.flatnonzero((row >= 0) & (ops["end"] > ops["start"])), r, d)
        ]
        seg = np.flatnonzero(~np.isin(bs, linked_starts))
        prev = np.concatenate([[np.iinfo(np.int64).min // 2], be[:-1]])[seg]
        idle += _in_windows(a, r, d, prev, bs[seg])
    distorts = {"idle_other_ns": idle}
    title = (
        f"capture: {int(bare.size)} of {plural(int(shown.size), 'GPU op')} "
        f"({pct(bare.size / shown.size)}) {agree(int(bare.size), 'has', 'have')} no launch call "
        f"in the trace; the {duration(idle)} of idle time before them is idle_other, unsplit"
    )
    return [
        Finding(
            "capture",
            title,
            idle,
            {
                "ops_without_launch": int(bare.size),
                "ops": int(shown.size),
                "share": float(bare.size / shown.size),
                "correlation_without_call": int(a.launches.unlinked),
                "distorts": distorts,
            },
        )
    ]


def _drift(a: Attribution, r: int, d: int) -> dict[str, Any] | None:
    """The trend of the smallest launch-to-start delay (op start - launch call end) of the
    ops launched onto an idle GPU (the host_bound gaps they end), per bin of the capture."""
    ops, api, g = a.trace.gpu_ops, a.trace.api_calls, a.gaps
    k = g.op[(g.host_bound_end < g.g1) & (ops["rank"][g.op] == r) & (ops["device"][g.op] == d)]
    k = np.unique(k)
    row = a.launches.api_row[k]
    k, row = k[row >= 0], row[row >= 0]
    if k.size < DRIFT_BINS * DRIFT_MIN_SAMPLES:
        return None
    t = ops["start"][k]
    delay = (t - api["end"][row]).astype(np.float64)
    edges = np.linspace(t.min(), t.max(), DRIFT_BINS + 1)
    b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, DRIFT_BINS - 1)
    xs, ys = [], []
    for i in range(DRIFT_BINS):
        m = b == i
        if m.sum() >= DRIFT_MIN_SAMPLES:
            j = np.argmin(delay[m])
            xs.append(float(t[m][j]))
            ys.append(float(delay[m][j]))
    if len(xs) < DRIFT_BINS // 2:
        return None
    x, y = np.asarray(xs), np.asarray(ys)
    slope, icept = np.polyfit(x - x[0], y, 1)
    fit = slope * (x - x[0]) + icept
    ss = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(((y - fit) ** 2).sum()) / ss if ss > 0 else 0.0
    span = float(t.max() - t.min())
    return {
        "rank": r,
        "device": d,
        "drift_ns": slope * span,
        "ppm": slope * 1e6,
        "r2": r2,
        "bins": len(xs),
        "samples": int(k.size),
        "span_ns": int(span),
    }


def clock_drift(a: Attribution) -> list[Finding]:
    """A steady trend in the smallest launch-to-start delay over the capture: the GPU clock
    runs at another rate than the host's, moving the host_bound / launch_overhead boundary
    of every gap by up to the drift."""
    found = [x for r, d in _pairs(a) if (x := _drift(a, r, d)) is not None]
    drifting = [x for x in found if abs(x["drift_ns"]) >= DRIFT_MIN_NS and x["r2"] >= DRIFT_MIN_R2]
    if not drifting:
        return []
    worst = max(drifting, key=lambda x: abs(x["drift_ns"]))
    g = a.gaps
    moved = int(np.minimum(g.host_bound_end - g.g0, int(abs(worst["drift_ns"]))).sum())
    distorts = {"host_bound_ns": moved, "launch_overhead_ns": moved}
    title = (
        f"capture: the smallest delay from a launch call's return to its op's start "
        f"{'grows' if worst['drift_ns'] > 0 else 'shrinks'} by {duration(abs(worst['drift_ns']))} "
        f"over {duration(worst['span_ns'])} on GPU {worst['device']} ({worst['ppm']:+.0f} ppm, "
        f"R² {worst['r2']:.2f} over {worst['bins']} bins): the GPU and host clocks drift "
        f"apart; the host_bound / launch_overhead boundary of each gap moves by up to that "
        f"(at most {duration(moved)})"
    )
    return [
        Finding(
            "capture",
            title,
            moved,
            {"drift": drifting, "worst": worst, "distorts": distorts},
        )
    ]


CAPTURE_RULES = (
    late_starts, before_launch, cut_windows, unlinked_ops, clock_drift, unclassified_comm,
)  # fmt: skip
