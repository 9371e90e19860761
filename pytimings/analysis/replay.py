"""What fixing it buys: each window re-timed from its dependencies, with durations changed.

The replay keeps every measured duration and every dependency the timeline shows, and
re-derives start times (docs/replay.md):

- a GPU op starts at the latest of its stream predecessor's end, its launch call's end,
  and, where the op started right after an op on another stream of its device ended
  (within ``CAP_NS``) and nothing else explains its start, that op's end (an event wait
  the capture shows only by its effect); then the latency it was measured to have after
  that constraint. An op whose measured start lies more than ``CAP_NS`` (the contract's
  50 µs submission bound) after everything the trace shows it depends on waited for
  something the capture does not show: its window is excluded, not guessed;
- a host thread keeps the order and durations of what it did, except that a call that
  waited for the GPU (stream/event/device synchronize, a blocking memcpy) ends when the
  awaited op ends in the replay, plus its own measured tail, and everything after it on
  that thread moves with it;
- a what-if change scales durations: ``kernel:GLOB=F`` the GPU ops whose name (or short
  name) matches, ``NAME=F`` the self time of the host activities (ranges, CUDA API calls,
  cpu_ops, ...) of that name: the instants where it is the innermost activity on its
  thread (``F=0`` removes them, so everything after them on the thread moves earlier).

A window's replayed length is ``max(end of its range, end of the ops launched inside it)
- start``, both replayed; the saving is measured minus replayed length. Unchanged, the
replay reproduces each included window exactly (``fidelity``); changing only durations
makes nothing later, so a saving never exceeds the time removed.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from pytimings._native import _intervals as iv
from pytimings._native._replay import replay as _replay
from pytimings.analysis.classes import string_mask
from pytimings.analysis.windows import Windows, range_windows, trace_windows
from pytimings.errors import UsageError
from pytimings.ingest.links import event_waits
from pytimings.ingest.names import is_synchronizing, short_kernel_name
from pytimings.model.trace import Trace

if TYPE_CHECKING:
    from pytimings.analysis.result import Attribution

I64 = npt.NDArray[np.int64]
NONE = np.iinfo(np.int64).min
CAP_NS = iv.LAUNCH_PICKUP_NS  # the contract's 50 µs bound: the latency a replay keeps
CROSS_THREAD_NOTE = (
    "a lower bound: several host threads launch the work, each kept in its measured order; "
    "what one thread waits for on another is not in the trace, so work another thread did "
    "later stays where it was"
)
# ---------------------------------------------------------------------------- changes


@dataclass(frozen=True)
class Change:
    """One what-if change: durations of matching GPU ops (``kernel``) or host activities'
    self time (``host``) multiplied by ``factor``."""

    target: str  # "kernel" or "host"
    pattern: str
    factor: float

    @property
    def text(self) -> str:
        return f"{'kernel:' if self.target == 'kernel' else ''}{self.pattern}={self.factor:g}"


def parse_changes(spec: str) -> list[Change]:
    """``NAME=F[,NAME=F...]``; ``kernel:GLOB=F`` for GPU ops. F >= 0 (0 removes)."""
    out = []
    for item in (s.strip() for s in spec.split(",")):
        name, eq, value = item.rpartition("=")
        if not item or not eq or not name:
            raise UsageError(f"--what-if {item!r}: expected NAME=FACTOR (e.g. scheduler=0)")
        try:
            factor = float(value)
        except ValueError:
            raise UsageError(f"--what-if {item!r}: {value!r} is not a number") from None
        if not math.isfinite(factor) or factor < 0:
            raise UsageError(f"--what-if {item!r}: the factor must be a finite number >= 0")
        if name.startswith("kernel:"):
            out.append(Change("kernel", name.removeprefix("kernel:"), factor))
        else:
            out.append(Change("host", name, factor))
    return out


def _matching_ids(strings: Sequence[str], pattern: str, short: bool) -> npt.NDArray[np.bool_]:
    def hit(s: str) -> bool:
        if s == pattern or fnmatch.fnmatchcase(s, pattern):
            return True
        return short and fnmatch.fnmatchcase(short_kernel_name(s), pattern)

    return string_mask(strings, hit)


# ---------------------------------------------------------------------------- the graph


@dataclass
class Graph:
    """Per-rank dependency facts, measured once and shared by every window and change."""

    trace: Trace
    launch_row: I64  # api row per op, -1 unknown
    launch_start: I64
    launch_end: I64
    thread: npt.NDArray[np.int32]  # launch thread per op, -1 unknown
    pred: I64  # stream predecessor per op, -1 none
    dep: I64  # cross-stream dependency per op, -1 none
    dep_lat: I64
    lat: I64  # latency after the binding constraint
    unexplained: npt.NDArray[np.bool_]
    # sync calls (rows of api_calls), by thread then start
    s_row: I64
    s_thread: npt.NDArray[np.int32]
    s_start: I64
    s_end: I64
    s_wait: I64  # op awaited, -1 none
    s_tail: I64
    by_launch: I64  # linked ops by (launch thread, launch start)
    by_launch_key: I64  # thread << 1 of each, sorted
    pos: I64  # each op's place in an order independent of the rows' order


def _latest_end_before(ends_sorted: I64, rows_sorted: I64, t: I64) -> I64:
    """Per time in ``t``: the row (of ``rows_sorted``, by end) with the latest end <= t."""
    at = np.searchsorted(ends_sorted, t, side="right") - 1
    return np.where(at >= 0, rows_sorted[np.maximum(at, 0)], -1)


def dependency_graph(trace: Trace, launch_row: I64) -> Graph:
    ops, api = trace.gpu_ops, trace.api_calls
    n = len(ops)
    start, end = ops["start"], ops["end"]
    has = launch_row >= 0
    safe = np.maximum(launch_row, 0)
    l_start = np.where(has, api["start"][safe] if len(api) else 0, NONE).astype(np.int64)
    l_end = np.where(has, api["end"][safe] if len(api) else 0, NONE).astype(np.int64)
    thread = np.where(has, api["thread"][safe] if len(api) else -1, -1).astype(np.int32)
    # one order of the ops that the rows' order does not change (ties: end, name text,
    # correlation), so that every choice below is the same for any order of the rows
    ids, inv = np.unique(ops["name"], return_inverse=True)
    by_text = np.argsort(np.asarray([trace.strings[i] for i in ids.tolist()], dtype=object))
    name_rank = np.argsort(by_text)[inv.reshape(-1)]
    order = np.lexsort(
        (ops["correlation"], name_rank, end, start, ops["stream"], ops["device"], ops["rank"])
    )
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    # stream predecessor: previous op on (rank, device, stream) in that order
    same = np.zeros(n, dtype=bool)
    if n > 1:
        o = order
        same[1:] = (
            (ops["rank"][o[1:]] == ops["rank"][o[:-1]])
            & (ops["device"][o[1:]] == ops["device"][o[:-1]])
            & (ops["stream"][o[1:]] == ops["stream"][o[:-1]])
        )
    pred = np.full(n, -1, dtype=np.int64)
    pred[order[1:][same[1:]]] = order[:-1][same[1:]]
    v_pred = np.where(pred >= 0, end[np.maximum(pred, 0)], NONE)
    v_launch = l_end
    best = np.maximum(v_pred, v_launch)
    # stream waits the capture records: the waiting op starts after the awaited op ends
    dep = np.full(n, -1, dtype=np.int64)
    dep_lat = np.zeros(n, dtype=np.int64)
    waiting, awaited = event_waits(trace, launch_row)
    for w, a in zip(waiting.tolist(), awaited.tolist(), strict=True):
        if end[a] <= start[w] and (dep[w] < 0 or end[a] > end[dep[w]]):
            dep[w] = a
    read = dep >= 0  # no latency of their own: what follows the awaited end is the op's
    # otherwise an event wait shows as a start right after an op on another stream
    late = np.flatnonzero(((best == NONE) | (start - best > 0)) & ~read)
    if late.size:
        dev_key = (ops["rank"].astype(np.int64) << 20) | (ops["device"].astype(np.int64) & 0xFFFFF)
        by_end = np.lexsort((pos, end, dev_key))
        k_end, k_key = end[by_end], dev_key[by_end]
        for dk in np.unique(dev_key[late]):
            lo, hi = np.searchsorted(k_key, [dk, dk + 1])
            mine = late[dev_key[late] == dk]
            cand = _latest_end_before(k_end[lo:hi], by_end[lo:hi], start[mine])
            ok = cand >= 0
            # the latest-ending op before the start that is on another stream
            c = cand[ok]
            other = ops["stream"][c] != ops["stream"][mine[ok]]
            gap = start[mine[ok]] - end[c]
            take = other & (gap <= CAP_NS) & ((best[mine[ok]] == NONE) | (end[c] > best[mine[ok]]))
            dep[mine[ok][take]] = c[take]
            dep_lat[mine[ok][take]] = gap[take]
    v_dep = np.where(dep >= 0, end[np.maximum(dep, 0)] + dep_lat, NONE)
    best = np.maximum(best, v_dep)
    lat = np.where(best == NONE, 0, start - best)
    unexplained = (best != NONE) & (lat > CAP_NS)
    # host calls that waited for the GPU, and the op each waited for
    is_sync = np.zeros(len(api), dtype=bool)
    if len(api):
        names = string_mask(trace.strings, is_synchronizing)
        is_sync = names[api["name"]] & (api["thread"] >= 0)
    s_row = np.flatnonzero(is_sync)
    s_row = s_row[np.lexsort((api["end"][s_row], api["start"][s_row], api["thread"][s_row]))]
    s_start, s_end = api["start"][s_row], api["end"][s_row]
    s_wait = np.full(s_row.size, -1, dtype=np.int64)
    if s_row.size and n:
        by_end = np.lexsort((pos, end))
        e_sorted = end[by_end]
        for j in range(s_row.size):
            lo = np.searchsorted(e_sorted, s_start[j], side="right")
            hi = np.searchsorted(e_sorted, s_end[j], side="right")
            if lo == hi:
                continue
            cand = by_end[lo:hi]
            cand = cand[
                (ops["rank"][cand] == api["rank"][s_row[j]]) & has[cand]
                & (l_start[cand] <= s_start[j])
            ]  # fmt: skip
            if cand.size:  # the latest end (then the last in the order above)
                s_wait[j] = cand[-1]
    s_tail = np.where(s_wait >= 0, s_end - end[np.maximum(s_wait, 0)], 0)
    linked = np.flatnonzero(has)
    by_launch = linked[np.lexsort((l_start[linked], thread[linked]))]
    return Graph(
        trace, launch_row, l_start, l_end, thread, pred, dep, dep_lat, lat, unexplained,
        s_row, api["thread"][s_row].astype(np.int32), s_start, s_end, s_wait, s_tail,
        by_launch, thread[by_launch].astype(np.int64) << 1, pos,
    )  # fmt: skip


# ---------------------------------------------------------------------------- host warp


@dataclass
class HostChanges:
    """Per thread, disjoint intervals whose time is scaled by ``keep`` (< 1 removes time),
    with the time removed before each interval's start (``before``)."""

    start: dict[int, I64] = field(default_factory=dict)
    end: dict[int, I64] = field(default_factory=dict)
    keep: dict[int, npt.NDArray[np.float64]] = field(default_factory=dict)
    before: dict[int, npt.NDArray[np.float64]] = field(default_factory=dict)

    def add(self, thread: int, ivs: list[tuple[int, int, float]]) -> None:
        """Intervals of one thread; where two overlap, the earlier one keeps the overlap."""
        ivs.sort()
        s: list[int] = []
        e: list[int] = []
        f: list[float] = []
        for a, b, k in ivs:
            a = max(a, e[-1]) if e else a
            if b > a:
                s.append(a)
                e.append(b)
                f.append(k)
        self.start[thread] = np.asarray(s, dtype=np.int64)
        self.end[thread] = np.asarray(e, dtype=np.int64)
        self.keep[thread] = np.asarray(f, dtype=np.float64)
        lost = (self.end[thread] - self.start[thread]) * (1.0 - self.keep[thread])
        self.before[thread] = np.concatenate([[0.0], np.cumsum(lost)[:-1]])

    def _cum(self, thread: int, t: I64) -> npt.NDArray[np.float64]:
        s, e, f = self.start[thread], self.end[thread], self.keep[thread]
        at = np.searchsorted(s, t, side="right") - 1
        j = np.maximum(at, 0)
        inside = np.clip(t - s[j], 0, e[j] - s[j]) * (1.0 - f[j])
        out: npt.NDArray[np.float64] = np.where(at >= 0, self.before[thread][j] + inside, 0.0)
        return out

    def removed(self, thread: int, t: I64, origin: int) -> I64:
        """Time removed on ``thread`` between ``origin`` and each ``t``."""
        if thread not in self.start or self.start[thread].size == 0:
            return np.zeros(t.shape, dtype=np.int64)
        r = self._cum(thread, t) - self._cum(thread, np.asarray([origin], dtype=np.int64))[0]
        out: I64 = np.rint(r).astype(np.int64)
        return out


def host_activities(trace: Trace) -> tuple[I64, I64, I64, I64]:
    """(start, end, name, thread) of every host activity: host ranges, API calls, host_ops."""
    rg, api, ho = trace.ranges, trace.api_calls, trace.host_ops
    on_host = np.flatnonzero(rg["thread"] >= 0)
    blocks = [
        (rg["start"][on_host], np.maximum(rg["end"][on_host], rg["start"][on_host]),
         rg["name"][on_host], rg["thread"][on_host]),
        (api["start"], api["end"], api["name"], api["thread"]),
        (ho["start"], ho["end"], ho["name"], ho["thread"]),
    ]  # fmt: skip
    s, e, n, t = (np.concatenate([b[c] for b in blocks]).astype(np.int64) for c in range(4))
    return s, e, n, t


def _host_changes(trace: Trace, changes: Sequence[Change]) -> HostChanges:
    """The self-time intervals of the host activities each change names, per thread."""
    per: dict[int, list[tuple[int, int, float]]] = {}
    s_all, e_all, n_all, t_all = host_activities(trace)
    for ch in changes:
        if ch.target != "host":
            continue
        ids = _matching_ids(trace.strings, ch.pattern, short=False)
        hit = np.flatnonzero(ids[n_all] & (t_all >= 0))
        if hit.size == 0:
            raise UsageError(
                f"--what-if {ch.text!r}: no range or host activity is named {ch.pattern!r}"
            )
        for th in np.unique(t_all[hit]):
            on = np.flatnonzero(t_all == th)
            on = on[np.lexsort((-e_all[on], s_all[on]))]
            on_s, on_e = s_all[on], e_all[on]
            for h in hit[t_all[hit] == th]:
                a, b = int(s_all[h]), int(e_all[h])
                lo, hi = np.searchsorted(on_s, [a, b], side="left")
                cand = np.arange(lo, hi)  # what starts inside it, by start
                cand = cand[(on_e[cand] <= b) & (on[cand] != h) & (on_e[cand] > on_s[cand])]
                mine = per.setdefault(int(th), [])
                if cand.size == 0:
                    if b > a:
                        mine.append((a, b, ch.factor))
                    continue
                cs, ce = iv.union(on_s[cand], on_e[cand])  # its children's union
                for x, y in zip(np.concatenate([[a], ce]), np.concatenate([cs, [b]]), strict=True):
                    if y > x:
                        mine.append((int(x), int(y), ch.factor))
    hc = HostChanges()
    for th, ivs in per.items():
        hc.add(th, ivs)
    return hc


# ---------------------------------------------------------------------------- windows


@dataclass
class WindowReplay:
    name: str
    rank: int
    start_ns: int
    end_ns: int  # measured
    replayed_end_ns: int | None  # None: excluded
    excluded: str | None = None
    range_row: int = -1  # row in trace.ranges of a --by window's range
    threads: int = 1  # host threads in the replay (launching its ops, or ending it)
    # for the critical path
    ops: I64 = field(default_factory=lambda: np.empty(0, np.int64))
    op_start: I64 = field(default_factory=lambda: np.empty(0, np.int64))
    op_end: I64 = field(default_factory=lambda: np.empty(0, np.int64))
    op_bind: npt.NDArray[np.int8] = field(default_factory=lambda: np.empty(0, np.int8))

    @property
    def before_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def after_ns(self) -> int | None:
        return None if self.replayed_end_ns is None else self.replayed_end_ns - self.start_ns


def _window_ops(g: Graph, w: Windows, i: int) -> I64:
    """The window's ops, sorted: a --by window's are those launched inside its range on its
    thread (the contract's GPU projection), a whole-trace window's its rank's."""
    ops = g.trace.gpu_ops
    if w.thread[i] < 0:
        return np.flatnonzero(ops["rank"] == w.rank[i])
    rg = g.trace.ranges
    rr = int(w.range_row[i])
    rs, re_ = int(rg["start"][rr]), max(int(rg["end"][rr]), int(rg["start"][rr]))
    key = np.asarray([int(w.thread[i])], dtype=np.int64) << 1
    lo = np.searchsorted(g.by_launch_key, key, side="left")[0]
    hi = np.searchsorted(g.by_launch_key, key | 1, side="left")[0]
    at = g.by_launch[lo:hi]
    a, b = np.searchsorted(g.launch_start[at], [rs, re_], side="left")
    rows = at[a:b]
    return np.sort(rows[ops["rank"][rows] == w.rank[i]])


def _position(rows: I64, x: I64) -> I64:
    """Where each of ``x`` is in the sorted ``rows`` (-1: not there; x < 0 stays -1)."""
    if rows.size == 0:
        return np.full(x.shape, -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(rows, x), rows.size - 1)
    return np.where((x >= 0) & (rows[at] == x), at, -1).astype(np.int64)


def _host_ends(g: Graph, rank: int) -> tuple[npt.NDArray[np.int32], I64]:
    """Per host thread of ``rank``: the latest end of its ranges and launch calls."""
    rg, api = g.trace.ranges, g.trace.api_calls
    launching = np.zeros(len(api), dtype=bool)
    launching[g.launch_row[g.launch_row >= 0]] = True
    r_sel = np.flatnonzero((rg["thread"] >= 0) & (rg["rank"] == rank))
    a_sel = np.flatnonzero(launching & (api["rank"] == rank))
    th = np.concatenate([rg["thread"][r_sel], api["thread"][a_sel]]).astype(np.int32)
    ends = np.concatenate(
        [np.maximum(rg["end"][r_sel], rg["start"][r_sel]), api["end"][a_sel]]
    ).astype(np.int64)
    uniq, inv = np.unique(th, return_inverse=True)
    last = np.full(uniq.size, NONE, dtype=np.int64)
    np.maximum.at(last, inv, ends)
    return uniq.astype(np.int32), last


def replay_window(
    g: Graph, w: Windows, i: int, dur: I64, host: HostChanges, keep_ops: bool,
    lat: I64 | None = None,
) -> WindowReplay:  # fmt: skip
    trace = g.trace
    lat = g.lat if lat is None else lat
    ops = trace.gpu_ops
    w_s, w_e = int(w.start[i]), int(w.end[i])
    # the host side starts where the range does: a tiled window (contract v3) may start
    # later, at the previous window's end, while its host work began at the range's start
    rr = int(w.range_row[i])
    h_s = min(w_s, int(trace.ranges["start"][rr])) if w.thread[i] >= 0 else w_s
    out = WindowReplay(w.name[i], int(w.rank[i]), w_s, w_e, None, range_row=rr)
    rows = _window_ops(g, w, i)
    if np.any(g.launch_row[rows] < 0):
        out.excluded = f"{int(np.sum(g.launch_row[rows] < 0))} GPU ops without a launch call"
        return out
    if np.any(g.unexplained[rows]):
        worst = rows[np.argmax(np.where(g.unexplained[rows], g.lat[rows], -1))]
        out.excluded = (
            f"op {short_kernel_name(trace.strings[ops['name'][worst]])!r} started "
            f"{g.lat[worst] / 1e3:.1f} µs after everything the capture shows it waits for"
        )
        return out
    n = rows.size
    # syncs of the window's threads inside the window
    threads = np.unique(g.thread[rows]) if w.thread[i] < 0 else np.asarray([w.thread[i]])
    sm = np.isin(g.s_thread, threads) & (g.s_start >= h_s) & (g.s_start < w_e)
    srows = np.flatnonzero(sm)
    m = srows.size
    s_local = np.full(g.s_row.size, -1, dtype=np.int64)
    s_local[srows] = np.arange(m)

    def warp(thread: npt.NDArray[np.int32], t: I64) -> I64:
        """Host times with the changed host time taken out (before sync gains)."""
        outw: I64 = t.copy()
        for th in np.unique(thread):
            sel = thread == th
            outw[sel] = t[sel] - host.removed(int(th), t[sel], h_s)
        return outw

    # the sync each launch (and each sync) comes after on its thread
    def last_sync(thread: npt.NDArray[np.int32], t: I64) -> I64:
        res = np.full(t.size, -1, dtype=np.int64)
        for th in np.unique(thread):
            sel = np.flatnonzero(thread == th)
            mine = srows[g.s_thread[srows] == th]
            if mine.size == 0:
                continue
            at = np.searchsorted(g.s_end[mine], t[sel], side="right") - 1
            res[sel] = np.where(at >= 0, s_local[mine[np.maximum(at, 0)]], -1)
        return res

    o_thread = g.thread[rows]
    ready = warp(o_thread, g.launch_end[rows])
    l_sync = last_sync(o_thread, g.launch_start[rows])
    pred, dep = g.pred[rows], g.dep[rows]
    pred_local = _position(rows, pred)
    pred_fixed = np.where((pred >= 0) & (pred_local < 0), ops["end"][np.maximum(pred, 0)], NONE)
    dep_local = _position(rows, dep)
    dep_fixed = np.where((dep >= 0) & (dep_local < 0), ops["end"][np.maximum(dep, 0)], NONE)
    st, se = g.s_start[srows], g.s_end[srows]
    s_thread = g.s_thread[srows]
    s_prev = np.full(m, -1, dtype=np.int64)
    if m > 1:
        same = s_thread[1:] == s_thread[:-1]
        s_prev[1:][same] = np.arange(m - 1)[same]
    wait = g.s_wait[srows]
    wait_local = _position(rows, wait)
    wait_fixed = np.where((wait >= 0) & (wait_local < 0), ops["end"][np.maximum(wait, 0)], NONE)
    # order: ops by max(start, launch start), syncs by end (first on ties: a launch that
    # starts as a sync ends comes after it)
    key = np.concatenate([np.maximum(ops["start"][rows], g.launch_start[rows]), se])
    kind = np.concatenate([np.ones(n, np.int8), np.zeros(m, np.int8)])
    ev = np.concatenate([np.arange(n), -np.arange(m) - 1]).astype(np.int64)
    tie = np.concatenate([g.pos[rows], np.arange(m)])
    order = ev[np.lexsort((tie, kind, key))]
    start, end, bind, _, gain = _replay(
        order, ops["end"][rows], dur[rows], lat[rows], pred_local, pred_fixed, dep_local,
        dep_fixed, g.dep_lat[rows], ready, l_sync, np.full(n, NONE, dtype=np.int64),
        warp(s_thread, st), warp(s_thread, se), s_prev, wait_local, wait_fixed, g.s_tail[srows],
    )  # fmt: skip
    # the window's host end, replayed: its range's end, or (whole trace) each thread's
    # last range or launch call
    if w.thread[i] >= 0:
        h_thread = np.asarray([w.thread[i]], dtype=np.int32)
        h_end = np.asarray([max(int(trace.ranges["end"][rr]), h_s)], dtype=np.int64)
    else:
        h_thread, h_end = _host_ends(g, int(w.rank[i]))
    j = last_sync(h_thread, h_end)
    gains = np.where(j >= 0, gain[np.maximum(j, 0)], 0) if m else np.zeros(j.size, np.int64)
    host_end = warp(h_thread, h_end) - gains
    replayed = max(int(host_end.max(initial=w_s)), int(end.max()) if n else w_s)
    out.threads = int(np.union1d(threads, h_thread).size)
    out.replayed_end_ns = replayed
    if keep_ops:
        out.ops, out.op_start, out.op_end, out.op_bind = rows, start, end, bind
    return out


@dataclass
class Replay:
    """Every window of an analysis replayed, once unchanged and once per change."""

    windows: list[WindowReplay]
    changes: list[Change]
    graph: Graph  # what the windows were replayed over (measured once per analysis)

    def fidelity(self) -> dict[str, Any]:
        errs = [
            abs(w.after_ns - w.before_ns) / max(1, w.before_ns)
            for w in self.windows
            if w.after_ns is not None
        ]
        excluded = [
            {"index": i, "name": w.name, "start_ns": w.start_ns, "rank": w.rank,
             "reason": w.excluded}
            for i, w in enumerate(self.windows, 1)
            if w.excluded is not None
        ]  # fmt: skip
        return {
            "windows": len(errs),
            "max_error": max(errs) if errs else None,
            "median_error": float(np.median(errs)) if errs else None,
            "excluded": excluded,
        }


def replay_windows(a: Attribution) -> Windows:
    """The analysis's windows (one per --by range instance, else per rank) in start order
    (ties: rank, end, thread), the order ``--window N`` counts in."""
    trace = a.trace
    ranks = np.unique(a.windows["rank"]).astype(np.int16)
    if a.by is None:
        return trace_windows(trace, a.launches, ranks)
    w = range_windows(trace, a.launches, a.by, ranks)
    o = np.lexsort((w.thread, w.end, w.rank, w.start))
    return Windows(
        [w.name[i] for i in o.tolist()], w.start[o], w.end[o], w.rank[o], w.thread[o],
        w.range_row[o],
    )  # fmt: skip


def replay(
    a: Attribution,
    changes: Sequence[Change] = (),
    keep_ops: bool = False,
    graph: Graph | None = None,
) -> Replay:
    """Replay every window of ``a`` (its ``--by`` windows, else one per rank) with
    ``changes`` applied (none: the fidelity check); ``graph``: one an earlier replay of
    ``a`` built."""
    trace = a.trace
    g = dependency_graph(trace, a.launches.api_row) if graph is None else graph
    ops = trace.gpu_ops
    dur = (ops["end"] - ops["start"]).astype(np.int64)
    for ch in changes:
        if ch.target == "kernel":
            hit = _matching_ids(trace.strings, ch.pattern, short=True)[ops["name"]]
            if not hit.any():
                raise UsageError(f"--what-if {ch.text!r}: no GPU op is named {ch.pattern!r}")
            dur[hit] = np.rint(dur[hit] * ch.factor).astype(np.int64)
    host = _host_changes(trace, changes)
    w = replay_windows(a)
    return Replay(
        [replay_window(g, w, i, dur, host, keep_ops) for i in range(len(w.name))],
        list(changes),
        g,
    )


def what_if(a: Attribution, changes: Sequence[Change] | str) -> dict[str, Any]:
    """The ``what_if`` document: per window before/after, and the total saving."""
    if isinstance(changes, str):
        changes = parse_changes(changes)
    base = replay(a)
    new = replay(a, changes, graph=base.graph)
    rows: list[dict[str, Any]] = []
    for i, (b, n) in enumerate(zip(base.windows, new.windows, strict=True), 1):
        if b.after_ns is None or n.after_ns is None:
            continue
        rows.append(
            {"index": i, "name": b.name, "start_ns": b.start_ns, "before_ns": b.after_ns,
             "after_ns": n.after_ns}
        )  # fmt: skip
    multi = any(w.threads > 1 for w in base.windows if w.after_ns is not None)
    return {
        "spec": ",".join(c.text for c in changes),
        "windows": rows,
        "excluded": base.fidelity()["excluded"],
        "note": CROSS_THREAD_NOTE if multi else None,
        "total_saving_ns": int(sum(r["before_ns"] - r["after_ns"] for r in rows)),
    }
