"""The critical path of a window: the chain of host time, launches, waits and GPU ops that
sets its length, walked back from its end over the unchanged replay (docs/replay.md). With
ranks replayed together (several ranks' windows, the n-th of each), a collective that
waited for a later rank's arrival carries the chain onto that rank (its links named
``[rank N] ...``, on the window's clock)."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from enum import Enum, IntEnum
from typing import TYPE_CHECKING, Any

import numpy as np

from pytimings.analysis.replay import (
    host_activities,
    rank_groups,
    rendezvous,
    replay,
    replay_windows,
)
from pytimings.errors import UsageError
from pytimings.ingest.names import short_kernel_name
from pytimings.model.trace import Trace

if TYPE_CHECKING:
    from pytimings.analysis.graph_capture import Captures
    from pytimings.analysis.result import Attribution

__all__ = ["Binding", "CriticalPath", "CriticalWindow", "Link", "LinkKind", "critical_path"]


class Binding(IntEnum):
    """What bound a GPU op's start in the replay (``WindowReplay.op_bind``)."""

    STREAM_ORDER = 0  # the op before it on its stream
    DEPENDENCY = 1  # an op of another stream it waited for (event, stream wait, collective)
    LAUNCH = 2  # its launch call
    FIXED = 3  # a start the replay keeps as measured (nothing it models bound it)


class LinkKind(Enum):
    """What a link of the critical path is (its value: the JSON's ``kind``)."""

    HOST = "host"  # host time, named by the innermost host activity
    SYNC = "sync"  # a synchronizing call waiting for a GPU op
    GPU_OP = "gpu_op"
    GPU_LATENCY = "gpu_latency"  # between an op and the one before it on its stream
    WAIT = "wait"  # for an op of another stream
    SUBMISSION = "submission"  # from the launch call's end to the op's start
    LAUNCH = "launch"  # the launch call
    BEFORE_WINDOW = "before window"  # the chain reaches back before the window starts


@dataclass
class Link:
    """One link of the chain, ``[start_ns, end_ns)`` on the window's clock; ``share``: of
    the window's length."""

    kind: LinkKind
    name: str
    start_ns: int
    end_ns: int
    share: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "name": self.name, "start_ns": self.start_ns,
                "end_ns": self.end_ns, "share": self.share}  # fmt: skip


@dataclass(frozen=True)
class CriticalWindow:
    """The window walked: its number (``Attribution.windows["index"]``, ``--window N``),
    name, rank, extent and start from the first window's."""

    index: int
    name: str
    rank: int
    start_ns: int
    end_ns: int
    from_first_ns: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CriticalPath:
    """The ``critical_path`` document: the window and the links tiling it, in time order."""

    window: CriticalWindow
    links: list[Link]

    def to_dict(self) -> dict[str, Any]:
        return {"window": self.window.to_dict(), "links": [lk.to_dict() for lk in self.links]}


class _HostIndex:
    """Every host activity (ranges, API calls, host_ops) gathered once, with its rows per
    thread, for the host links of one critical path."""

    def __init__(self, trace: Trace) -> None:
        self.strings = trace.strings
        self.start, self.end, self.name, thread = host_activities(trace)
        by_thread = np.argsort(thread, kind="stable")
        cut = np.flatnonzero(np.diff(thread[by_thread])) + 1
        self.rows = {int(thread[part[0]]): part for part in np.split(by_thread, cut) if part.size}

    def segments(self, thread: int, a: int, b: int) -> list[tuple[int, int, str]]:
        """``[a, b)`` on ``thread`` cut where its innermost host activity changes
        (innermost: the latest start, then the earliest end), named by it ("" where none
        covers)."""
        mine = self.rows.get(thread, np.empty(0, dtype=np.int64))
        s_all, e_all, n_all = self.start, self.end, self.name
        on = mine[(s_all[mine] < b) & (e_all[mine] > a) & (e_all[mine] > s_all[mine])]
        cuts = np.unique(np.clip(np.concatenate([[a, b], s_all[on], e_all[on]]), a, b))
        out: list[tuple[int, int, str]] = []
        for x, y in itertools.pairwise(cuts):
            cover = on[(s_all[on] <= x) & (e_all[on] >= y)]
            name = ""
            if cover.size:
                best = cover[np.lexsort((e_all[cover], -s_all[cover]))[0]]
                name = self.strings[n_all[best]]
            if out and out[-1][2] == name:
                out[-1] = (out[-1][0], int(y), name)
            else:
                out.append((int(x), int(y), name))
        return out


def _end_thread(trace: Trace, range_row: int, rank: int, end: int) -> int:
    """The thread a window that no GPU op ends ends on: its range's, or, for a whole-trace
    window (no range), the thread of the range or API call of its rank that ends last by
    ``end`` (what set the window's end); -1 if there is none."""
    if range_row >= 0:
        return int(trace.ranges["thread"][range_row])
    best, thread = -1, -1
    for table in (trace.ranges, trace.api_calls):
        mine = np.flatnonzero((table["rank"] == rank) & (table["end"] <= end))
        if mine.size:
            j = int(mine[np.argmax(table["end"][mine])])
            if int(table["end"][j]) > best:
                best, thread = int(table["end"][j]), int(table["thread"][j])
    return thread


def critical_path(
    a: Attribution, window: int | None = None, captures: Captures | None = None
) -> CriticalPath:
    """The chain of host time, launches, waits and GPU ops that sets one window's length
    (``window``: 1-based, in the order of the replay's windows; default the slowest
    included one), as links tiling the window, each with its share (``captures``: graph
    captures showing the edges inside its graphs, see :func:`replay`)."""
    r = replay(a, keep_ops=True, captures=captures)
    trace = a.trace
    ops, api = trace.gpu_ops, trace.api_calls
    included = [i for i, w in enumerate(r.windows) if w.after_ns is not None]
    if window is not None:
        if not 1 <= window <= len(r.windows):
            raise UsageError(f"--window {window}: the analysis has windows 1-{len(r.windows)}")
        if r.windows[window - 1].after_ns is None:
            raise UsageError(
                f"--window {window} is excluded from the replay: {r.windows[window - 1].excluded}"
            )
        i = window - 1
    elif included:
        i = max(included, key=lambda k: (r.windows[k].before_ns, -k))
    else:
        raise UsageError("no window can be replayed (each one lacks what the replay needs)")
    w = r.windows[i]
    g = r.graph
    index = _HostIndex(trace)
    # ranks replayed together: the ops of every included window of the window's group
    rv = rendezvous(a)
    last_of = rv.last_arrivals() if rv is not None else np.empty(0, dtype=np.int64)
    group = next(idx for idx in rank_groups(replay_windows(a)) if i in idx) if rv else [i]
    joint = [r.windows[k] for k in group if r.windows[k].after_ns is not None]
    local = {int(row): (x, k) for x in joint for k, row in enumerate(x.ops)}
    links: list[Link] = []
    cursor = w.end_ns
    shift = 0  # the walk's current rank's clock -> the window's
    on = ""  # "[rank N] " while the walk is on another rank

    def link(kind: LinkKind, name: str, start: int) -> None:
        nonlocal cursor
        start = max(w.start_ns, min(start + shift, cursor))
        if start < cursor:
            links.append(Link(kind, on + name, start, cursor))
        cursor = start

    def host(thread: int) -> int:
        """Host links back to the thread's last sync that waited for the GPU inside the
        window (then its wait link; returns the awaited op's row) or the window start."""
        waited = g.s_wait >= 0
        waited[waited] = ops["end"][g.s_wait[waited]] > g.s_start[waited]
        before = np.flatnonzero(
            (g.s_thread == thread) & waited & (g.s_end <= cursor - shift)
            & (g.s_end > w.start_ns - shift)
        )  # fmt: skip
        j = int(before[-1]) if before.size else -1
        anchor = int(g.s_end[j]) if j >= 0 else w.start_ns - shift
        for x, _, name in reversed(index.segments(thread, anchor, cursor - shift)):
            link(LinkKind.HOST, name, x)
        if j < 0:
            return -1
        link(LinkKind.SYNC, trace.strings[api["name"][g.s_row[j]]], int(ops["end"][g.s_wait[j]]))
        return int(g.s_wait[j])

    def step(row: int) -> tuple[int, Binding | None]:
        """An op's start and what bound it (None: nothing traced did): the
        replay's for the window's own ops, else (ops other threads launched, running in
        the window) as measured, the latest of its constraints."""
        x, k = local.get(row, (w, -1))
        if k >= 0:
            return int(x.op_start[k]), Binding(int(x.op_bind[k]))
        ends: list[tuple[int, Binding]] = []
        if g.pred[row] >= 0:
            ends.append((int(ops["end"][g.pred[row]]), Binding.STREAM_ORDER))
        if g.dep[row] >= 0:
            ends.append((int(ops["end"][g.dep[row]]), Binding.DEPENDENCY))
        if g.launch_row[row] >= 0:
            ends.append((int(api["end"][g.launch_row[row]]), Binding.LAUNCH))
        return int(ops["start"][row]), max(ends)[1] if ends else None

    k = int(np.argmax(w.op_end)) if w.ops.size else -1
    row = int(w.ops[k]) if k >= 0 else -1
    if k < 0 or int(w.op_end[k]) < w.end_ns:  # the window ends on a host thread
        thread = _end_thread(trace, w.range_row, w.rank, w.end_ns)
        row = host(thread) if thread >= 0 else -1
    while row >= 0 and cursor > w.start_ns:
        name = short_kernel_name(trace.strings[ops["name"][row]])
        start, b = step(row)
        peer = int(last_of[rv.inst[row]]) if rv is not None and rv.inst[row] >= 0 else -1
        if rv is not None and peer >= 0 and rv.arrival[peer] > rv.arrival[row]:
            # the collective waited for a later rank's arrival: the chain goes there
            off = rv.rank_off
            here, there = int(ops["rank"][row]), int(ops["rank"][peer])
            arrival = int(rv.arrival[peer]) + off.get(here, 0)
            link(LinkKind.GPU_OP, name, arrival)
            shift += off.get(here, 0) - off.get(there, 0)
            on = "" if there == w.rank else f"[rank {there}] "
            row = peer
            continue
        link(LinkKind.GPU_OP, name, start)
        nxt = -1
        if b == Binding.STREAM_ORDER and g.pred[row] >= 0:
            link(LinkKind.GPU_LATENCY, name, int(ops["end"][g.pred[row]]))
            nxt = int(g.pred[row])
        elif b == Binding.DEPENDENCY and g.dep[row] >= 0:
            dep = int(g.dep[row])
            waited = short_kernel_name(trace.strings[ops["name"][dep]])
            link(LinkKind.WAIT, waited, int(ops["end"][dep]))
            nxt = dep
        elif b == Binding.LAUNCH:
            lr = int(g.launch_row[row])
            call = trace.strings[api["name"][lr]]
            link(LinkKind.SUBMISSION, call, int(api["end"][lr]))
            link(LinkKind.LAUNCH, call, int(api["start"][lr]))
            nxt = host(int(api["thread"][lr]))
        row = nxt
    link(LinkKind.BEFORE_WINDOW if cursor > w.start_ns else LinkKind.HOST, "", w.start_ns)
    links.reverse()
    merged: list[Link] = []
    for lk in links:
        if merged and (merged[-1].kind, merged[-1].name) == (lk.kind, lk.name):
            merged[-1].end_ns = lk.end_ns
        else:
            merged.append(lk)
    total = max(1, w.end_ns - w.start_ns)
    for lk in merged:
        lk.share = (lk.end_ns - lk.start_ns) / total
    window_doc = CriticalWindow(
        index=i + 1,  # the window's number (Attribution.windows["index"], --window N)
        name=w.name,
        rank=w.rank,
        start_ns=w.start_ns,
        end_ns=w.end_ns,
        from_first_ns=w.start_ns - min(x.start_ns for x in r.windows),
    )
    return CriticalPath(window_doc, merged)
