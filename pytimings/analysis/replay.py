"""What fixing it buys: each window re-timed from its dependencies, with durations changed.

The replay keeps every measured duration and every dependency the timeline shows, and
re-derives start times (docs/replay.md):

- a GPU op starts at the latest of its stream predecessor's end, its launch call's end,
  and, where the op started right after an op on another stream of its device ended
  (within ``CAP_NS``) and nothing else explains its start, that op's end (an event wait
  the capture shows only by its effect); then the latency it was measured to have after
  that constraint. An op whose measured start lies more than ``CAP_NS`` (the contract's
  50 µs submission bound) after everything the trace shows it depends on waited for
  something the capture does not show: its window is excluded, not guessed (a graph's
  node is bounded instead, or waits for the edges its capture's event waits show:
  :func:`captured_edges`);
- a host thread keeps the order and durations of what it did, except that a call that
  waited for the GPU (stream/event/device synchronize, a blocking memcpy) ends when the
  awaited op ends in the replay, plus its own measured tail, and everything after it on
  that thread moves with it; in a whole-trace window, a thread that fell quiet while
  another thread of its process worked resumes no earlier than that thread's last act,
  replayed (:class:`Handoffs`: the wait is inferred by its effect);
- a what-if change scales durations: ``NAME=F`` the host activities (ranges, CUDA API
  calls, cpu_ops, ...) of that name with everything nested in them on their thread (GPU
  work keeps its durations), ``self:NAME=F`` only their self time (the instants where
  one is the innermost activity), ``kernel:GLOB=F`` the GPU ops whose name (or short
  name) matches, ``comm:GLOB=F`` the transfer part of matching comm ops (by name or
  collective kind; the wait for peers the contract estimates from several ranks is
  kept). ``F=0`` removes the time, so everything after it on the thread moves earlier.

With several ranks in one trace, the whole-trace windows (one per rank), or the n-th
``--by`` window of each rank, are replayed together on the ranks' aligned clocks, and the
n-th collective of a name on each rank is one rendezvous: each member ends no earlier than
the latest member's replayed arrival plus its own transfer time (duration minus the
contract's estimated wait), so a change on one rank moves the ranks it meets; members
outside the windows replayed together keep their measured arrival.

A window's replayed length is ``max(end of its range, end of the ops launched inside it)
- start``, both replayed; the saving is measured minus replayed length. Unchanged, the
replay reproduces each included window exactly (``fidelity``); changing only durations
makes nothing later, so a saving never exceeds the time removed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from pytimings._native import _intervals as iv
from pytimings._native import _optable
from pytimings._native._replay import replay as _replay
from pytimings.analysis.changes import Change, comm_hits, host_hits, kernel_hits, parse_changes
from pytimings.analysis.classes import COMM, string_mask
from pytimings.analysis.graph_capture import OWN, CapturedGraph, Captures, named, op_launchers
from pytimings.analysis.windows import Windows, range_windows, trace_windows
from pytimings.console.text import duration
from pytimings.errors import UsageError
from pytimings.ingest.links import event_waits, sync_waits
from pytimings.ingest.names import is_synchronizing, normalize_kernel_name, short_kernel_name
from pytimings.model.trace import OpKind, SyncKind, Trace

if TYPE_CHECKING:
    from pytimings.analysis.result import Attribution

I64 = npt.NDArray[np.int64]
NONE = np.iinfo(np.int64).min
CAP_NS = iv.LAUNCH_PICKUP_NS  # the contract's 50 µs bound: the latency a replay keeps
CROSS_THREAD_NOTE = (
    "a lower bound: several host threads launch the work, each kept in its measured order; "
    "a thread that falls quiet while another works is replayed as waiting for it, other "
    "waits between threads are not in the trace"
)
GRAPH_EDGES_NOTE = (
    "a lower bound for graph windows: a replayed graph's nodes wait on edges inside the graph "
    "the trace does not show; a node that started later than its stream and launch explain "
    "keeps its measured latency after them (as soon as possible: a change to another node "
    "of its graph does not move it, though it may in the graph); a capture of the graph "
    "that waits on events inside the stream capture (--capture) shows them"
)
COMM_WAIT_NOTE = (
    "an upper bound for comm changes: with one rank loaded, the wait for peers inside each "
    "collective is unknown and scaled as if it were transfer; load every rank's trace to "
    "keep the wait"
)
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
    by_launch_start: I64  # the launch start of each
    pos: I64  # each op's place in an order independent of the rows' order
    dep_read: npt.NDArray[np.bool_]  # per op: its dep is a recorded stream wait (else inferred)
    s_source: npt.NDArray[np.int8]  # per sync: index in DEPENDENCY_SOURCES, -1 waited for none
    # per op: a graph-replayed op that started later after everything the trace shows it
    # depends on than an op may (CAP_NS): it waited on an edge inside its graph the trace
    # does not show; it keeps that measured latency (GRAPH_EDGES_NOTE), not excluded
    graph_unread: npt.NDArray[np.bool_]


# what each dependency of a replayed window comes from (replay JSON ``dependencies``):
# recorded stream waits (event record -> stream wait event), cross-stream waits inferred
# by their effect, host synchronizes of an event or a stream whose record names the op
# waited for, host synchronizes whose op is inferred, collectives across ranks
DEPENDENCY_SOURCES = (
    "stream_wait", "inferred", "event_sync", "stream_sync", "sync_inferred", "collective",
)  # fmt: skip


def _latest_end_before(ends_sorted: I64, rows_sorted: I64, t: I64) -> I64:
    """Per time in ``t``: the row (of ``rows_sorted``, by end) with the latest end <= t."""
    at = np.searchsorted(ends_sorted, t, side="right") - 1
    return np.where(at >= 0, rows_sorted[np.maximum(at, 0)], -1)


def _node_ops(rows: I64, labels: list[str | None], node_labels: list[str | None]) -> I64 | None:
    """Per node of a captured graph (``node_labels``): the replayed op (of ``rows``, in start
    order, ``labels`` theirs) that ran it, the n-th node of a label being the n-th op of
    that label; None where the replay does not run the same labels or a label is unknown."""
    if (
        None in labels
        or None in node_labels
        or sorted(map(str, labels)) != sorted(map(str, node_labels))
    ):
        return None
    queue: dict[str | None, list[int]] = {}
    for r, label in zip(rows.tolist()[::-1], labels[::-1], strict=True):
        queue.setdefault(label, []).append(r)
    return np.asarray([queue[x].pop() for x in node_labels], dtype=np.int64)


def _replayed_joins(
    g: CapturedGraph, node_op: I64, start: I64, end: I64, stream: npt.NDArray[np.int32]
) -> tuple[tuple[int, int], ...]:
    """(waiting op, awaited op) per event wait of ``g`` whose replay (``node_op``) shows
    it; empty where one does not (the waiting op starts before the awaited op ends)."""
    edges = []
    for src, nxt in g.joins or ():
        src_op = int(node_op[src])
        later = node_op[nxt:]
        other = later[stream[later] != stream[src_op]]
        if not other.size or start[other[0]] < end[src_op]:
            return ()
        edges.append((int(other[0]), src_op))
    return tuple(edges)


def captured_edges(
    trace: Trace, launch_row: I64, captures: Captures
) -> tuple[I64, I64, npt.NDArray[np.bool_]]:
    """The edges the captures show inside the graphs the trace replays: (waiting op,
    awaited op) pairs, and per op whether its graph's edges were read. A replay (the ops of
    one graph launch) reads the event waits of the captured graph that ran its kernels
    (:func:`pytimings.analysis.graph_capture.capture_joins`): each wait makes the first node
    after it that runs on another stream than the awaited node wait for that node. Read
    only where every captured graph that ran the replay's kernels gives the same edges,
    and the replay shows each (the waiting op starts after the awaited op ends). A capture
    naming no kernel is paired by ops: a node is the op around its launch call, a replayed
    op the one op that launches its kernel outside graph replays (a cudagraph-trees warmup;
    ``launch_row``: each GPU op's launch call)."""
    ops = trace.gpu_ops
    read = np.zeros(len(ops), dtype=bool)
    waiting: list[int] = []
    awaited: list[int] = []
    forked = [g for g in captures.graphs if g.forked and g.joins]
    rows = np.flatnonzero((ops["graph"] >= 0) & (ops["correlation"] >= 0))
    if not forked or not rows.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), read
    order = rows[np.lexsort((ops["end"][rows], ops["start"][rows], ops["correlation"][rows],
                             ops["pid"][rows], ops["rank"][rows]))]  # fmt: skip
    key = np.stack([ops["rank"][order].astype(np.int64), ops["pid"][order],
                    ops["correlation"][order]])  # fmt: skip
    cut = np.flatnonzero(np.concatenate(([True], (key[:, 1:] != key[:, :-1]).any(axis=0))))
    start, end, stream = ops["start"], ops["end"], ops["stream"]
    launcher_of = (
        op_launchers(trace, launch_row, ops["graph"] >= 0)
        if not all(named(g) for g in forked)
        else {}
    )
    for a, b in zip(cut.tolist(), [*cut[1:].tolist(), order.size], strict=True):
        group = order[a:b]
        kinds, name_ids = ops["kind"][group].tolist(), ops["name"][group].tolist()
        # per op: its kind and kernel name (copies and memsets by kind), or its launcher
        by_name: list[str | None] = [
            f"{k} {normalize_kernel_name(trace.strings[i])}" if k == OpKind.KERNEL else f"{k}"
            for k, i in zip(kinds, name_ids, strict=True)
        ]
        by_op = [
            f"{k} {launcher_of[i]}" if i in launcher_of else None
            for k, i in zip(kinds, name_ids, strict=True)
        ]
        found: set[tuple[tuple[int, int], ...]] = set()
        for g in forked:
            node_op = (
                _node_ops(group, by_name, [
                    f"{k} {n}" if k == OpKind.KERNEL else f"{k}"
                    for k, n in zip(g.kinds, g.names, strict=True)
                ])
                if named(g)
                else _node_ops(group, by_op, [
                    f"{k} {captures.ops[o].name}" if o >= 0 else None
                    for k, o in zip(g.kinds, g.ops, strict=True)
                ])
            )  # fmt: skip
            if node_op is not None:
                found.add(_replayed_joins(g, node_op, start, end, stream))
        if len(found) == 1 and (edges_read := next(iter(found))):
            read[group] = True
            waiting += [w for w, _ in edges_read]
            awaited += [x for _, x in edges_read]
    return np.asarray(waiting, np.int64), np.asarray(awaited, np.int64), read


def dependency_graph(trace: Trace, launch_row: I64, captures: Captures | None = None) -> Graph:
    """The dependency facts of ``trace``; ``captures``: graph captures (``--capture``)
    whose event waits give the edges inside the graphs it replays, with the trace's own."""
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
    ids = _optable.names_present(np.ascontiguousarray(ops["name"], np.int32), len(trace.strings))
    by_text = np.argsort(np.asarray([trace.strings[i] for i in ids.tolist()], dtype=object))
    rank_of = np.zeros(len(trace.strings), dtype=np.int64)  # per string id: its text's rank
    rank_of[ids[by_text]] = np.arange(ids.size)
    name_rank = rank_of[ops["name"]]
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
    caps = captures.copy() if captures is not None else Captures()
    caps.add(trace, OWN)
    g_waiting, g_awaited, edges_read = captured_edges(trace, launch_row, caps)
    waiting, awaited = np.concatenate((waiting, g_waiting)), np.concatenate((awaited, g_awaited))
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
    late_start = (best != NONE) & (lat > CAP_NS)
    # a graph's nodes wait on edges inside it that the replay cannot see (the capture's
    # event waits ran at capture time): such a node is bounded, not its window excluded
    # where a capture shows the graph's edges, a node late after them waited for the
    # graph's dispatch and for SMs its concurrent nodes held, not for an unseen edge: it
    # keeps that latency, exactly as a bound node does, and its window is exact
    in_graph = ops["graph"] >= 0
    graph_unread = late_start & in_graph & ~edges_read
    unexplained = late_start & ~in_graph
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
    # where the capture records what a synchronize waited for (a stream, an event), that
    # op, not the inference; a call whose op had ended before it began waited for nothing
    call, awaited, sync_kind = sync_waits(trace, launch_row)
    s_source = np.where(s_wait >= 0, DEPENDENCY_SOURCES.index("sync_inferred"), -1)
    if call.size and s_row.size:
        by_call = np.full(len(api), -1, dtype=np.int64)
        by_call[call] = awaited
        r = by_call[s_row]
        recorded = r >= 0
        r_end = end[np.maximum(r, 0)]
        s_wait = np.where(recorded, np.where((r_end > s_start) & (r_end <= s_end), r, -1), s_wait)
        kind_of = np.full(len(api), SyncKind.STREAM_SYNC, dtype=np.int8)
        kind_of[call] = sync_kind
        named = np.where(kind_of[s_row] == SyncKind.EVENT_SYNC, "event_sync", "stream_sync")
        src = np.asarray([DEPENDENCY_SOURCES.index(x) for x in named.tolist()], dtype=np.int64)
        s_source = np.where(recorded, np.where(s_wait >= 0, src, -1), s_source)
    # a trace with syncs but no GPU op (a CUPTI range-profiler capture) awaits nothing
    awaited_end = end[np.maximum(s_wait, 0)] if n else np.zeros(s_wait.size, dtype=np.int64)
    s_tail = np.where(s_wait >= 0, s_end - awaited_end, 0)
    linked = np.flatnonzero(has)
    by_launch = linked[np.lexsort((l_start[linked], thread[linked]))]
    return Graph(
        trace, launch_row, l_start, l_end, thread, pred, dep, dep_lat, lat, unexplained,
        s_row, api["thread"][s_row].astype(np.int32), s_start, s_end, s_wait, s_tail,
        by_launch, thread[by_launch].astype(np.int64) << 1, l_start[by_launch], pos, read,
        s_source.astype(np.int8), graph_unread,
    )  # fmt: skip


# ---------------------------------------------------------------------------- host warp


@dataclass
class Handoffs:
    """Where one host thread waited for another, inferred by effect (the capture records no
    such wait): thread X falls quiet (no activity begins or ends for ``CAP_NS`` or more, from
    ``quiet_from``), another thread Y of its process acts and falls quiet in turn (its last
    boundary ``src_at`` inside X's quiet time, its own quiet time reaching past ``at``),
    and X resumes at ``at``: X waited for Y (PyTorch's main thread and its autograd thread,
    say). One row per handoff, by ``at``."""

    thread: npt.NDArray[np.int32]
    at: I64
    quiet_from: I64
    src: npt.NDArray[np.int32]
    src_at: I64

    def of(self, thread: int) -> I64:
        """The rows of the handoffs into ``thread``, by time."""
        return np.flatnonzero(self.thread == thread)


def thread_handoffs(trace: Trace) -> Handoffs:
    """Every handoff (:class:`Handoffs`) between the host threads of each process."""
    s, e, _, t = host_activities(trace)
    keep = t >= 0
    times = np.concatenate([s[keep], e[keep]])
    owner = np.concatenate([t[keep], t[keep]]).astype(np.int64)
    order = np.lexsort((times, owner))
    times, owner = times[order], owner[order]
    # each boundary's process (a thread the threads table lacks is one of its own)
    th = trace.threads
    known = owner < len(th)
    at_row = np.minimum(owner, max(len(th) - 1, 0))
    proc = np.where(
        known,
        (th["pid"][at_row].astype(np.int64) << 16) ^ th["rank"][at_row].astype(np.int64)
        if len(th)
        else 0,
        -1 - owner,
    )
    # each thread's boundaries, framed by its process's first and last (a thread is quiet
    # before it first acts and after it last acts)
    first = np.r_[True, owner[1:] != owner[:-1]] if owner.size else np.empty(0, dtype=bool)
    last = np.r_[owner[1:] != owner[:-1], True] if owner.size else np.empty(0, dtype=bool)
    p_ids, p_at = np.unique(proc, return_inverse=True)
    p_lo = np.full(p_ids.size, np.iinfo(np.int64).max, dtype=np.int64)
    p_hi = np.full(p_ids.size, NONE, dtype=np.int64)
    np.minimum.at(p_lo, p_at, times)
    np.maximum.at(p_hi, p_at, times)
    times = np.concatenate([times, p_lo[p_at[first]], p_hi[p_at[last]] + CAP_NS])
    owner = np.concatenate([owner, owner[first], owner[last]])
    proc = np.concatenate([proc, proc[first], proc[last]])
    order = np.lexsort((times, owner))
    times, owner, proc = times[order], owner[order], proc[order]
    # per thread, its quiet spans: consecutive boundaries CAP_NS or more apart
    same = owner[1:] == owner[:-1]
    long = same & (times[1:] - times[:-1] >= CAP_NS)
    q_thread, q_from, q_to = owner[:-1][long], times[:-1][long], times[1:][long]
    q_proc = proc[:-1][long]
    parts: list[tuple[I64, ...]] = []
    for x in np.unique(q_thread).tolist():
        mine = np.flatnonzero(q_thread == x)
        other = np.flatnonzero((q_thread != x) & (q_proc == q_proc[mine[0]]))
        if other.size == 0:
            continue
        other = other[np.argsort(q_from[other], kind="stable")]
        p, d = q_from[mine], q_to[mine]
        # the other threads' quiet span that began last inside X's, if it lasts past X's
        # resumption (that thread acted last before X resumed, then waited)
        last_in = np.searchsorted(q_from[other], d, side="left") - 1
        y = other[np.maximum(last_in, 0)]
        ok = (last_in >= 0) & (q_from[y] > p) & (q_to[y] > d)
        parts.append((q_thread[mine][ok], d[ok], p[ok], q_thread[y][ok], q_from[y][ok]))
    thread, at, quiet_from, src, src_at = (
        np.concatenate([pt[c] for pt in parts]) if parts else np.empty(0, dtype=np.int64)
        for c in range(5)
    )
    by_at = np.argsort(at, kind="stable")
    thread, at, quiet_from, src, src_at = (c[by_at] for c in (thread, at, quiet_from, src, src_at))
    return Handoffs(thread.astype(np.int32), at, quiet_from, src.astype(np.int32), src_at)


@dataclass
class HostChanges:
    """Per thread, disjoint intervals whose time is scaled by ``keep`` (< 1 removes time),
    with the time removed before each interval's start (``before``). With ``handoffs``,
    a thread that waited for another (:class:`Handoffs`) resumes no earlier than the
    other's replayed hand-off and no earlier than its own replayed quiet start."""

    start: dict[int, I64] = field(default_factory=dict)
    end: dict[int, I64] = field(default_factory=dict)
    keep: dict[int, npt.NDArray[np.float64]] = field(default_factory=dict)
    before: dict[int, npt.NDArray[np.float64]] = field(default_factory=dict)
    handoffs: Handoffs | None = None
    # per origin: each handoff's time removed at its resumption (NONE before the origin)
    _shift: dict[int, I64] = field(default_factory=dict)

    def add(self, thread: int, changes: Sequence[tuple[I64, I64, float]]) -> None:
        """Intervals of one thread, per change (starts, ends, factor): a change scales the
        union of its intervals; where changes overlap their factors multiply
        (``step=0.5,self:layer=0`` removes the layer's self time and halves the rest of
        the step)."""
        parts = [(a[b > a], b[b > a], k) for a, b, k in changes]
        parts = [p for p in parts if p[0].size]
        if not parts:
            return
        cuts = np.unique(np.concatenate([np.concatenate([a, b]) for a, b, _ in parts]))
        keep = np.ones(cuts.size - 1, dtype=np.float64)
        for a, b, k in parts:
            d = np.bincount(np.searchsorted(cuts, a), minlength=cuts.size) - np.bincount(
                np.searchsorted(cuts, b), minlength=cuts.size
            )
            keep[np.cumsum(d)[:-1] > 0] *= k
        sel = keep != 1.0
        self.start[thread] = cuts[:-1][sel]
        self.end[thread] = cuts[1:][sel]
        self.keep[thread] = keep[sel]
        lost = (self.end[thread] - self.start[thread]) * (1.0 - self.keep[thread])
        self.before[thread] = np.concatenate([[0.0], np.cumsum(lost)[:-1]])
        self._shift.clear()

    def _cum(self, thread: int, t: I64) -> npt.NDArray[np.float64]:
        s, e, f = self.start[thread], self.end[thread], self.keep[thread]
        at = np.searchsorted(s, t, side="right") - 1
        j = np.maximum(at, 0)
        inside = np.clip(t - s[j], 0, e[j] - s[j]) * (1.0 - f[j])
        out: npt.NDArray[np.float64] = np.where(at >= 0, self.before[thread][j] + inside, 0.0)
        return out

    def _own(self, thread: int, t: I64, origin: int) -> I64:
        """Time removed on ``thread`` itself between ``origin`` and each ``t``."""
        if thread not in self.start or self.start[thread].size == 0:
            return np.zeros(t.shape, dtype=np.int64)
        t = np.maximum(t, origin)
        r = self._cum(thread, t) - self._cum(thread, np.asarray([origin], dtype=np.int64))[0]
        out: I64 = np.rint(r).astype(np.int64)
        return out

    def removed(self, thread: int, t: I64, origin: int, across: bool = False) -> I64:
        """Time removed on ``thread`` between ``origin`` and each ``t``; ``across``: with
        what the threads it waited for (``handoffs`` after ``origin``) gained or lost."""
        own = self._own(thread, t, origin)
        h = self.handoffs
        if not across or h is None or not self.start:
            return own
        shift = self._shifts(origin)
        mine = h.of(thread)
        mine = mine[h.at[mine] > origin]
        k = np.searchsorted(h.at[mine], t, side="right") - 1
        sel = np.flatnonzero(k >= 0)
        if sel.size:
            e = mine[k[sel]]
            own[sel] = shift[e] + own[sel] - self._own(thread, h.at[e], origin)
        return own

    def _shifts(self, origin: int) -> I64:
        """Per handoff after ``origin``, the time removed at its resumption: the least of
        what its source thread had removed when it handed off and what the waiting thread
        had removed when it fell quiet plus its quiet time (it resumes no earlier than
        either, replayed)."""
        if origin in self._shift:
            return self._shift[origin]
        h = self.handoffs
        assert h is not None
        shift = np.full(h.at.size, NONE, dtype=np.int64)
        latest: dict[int, int] = {}  # per thread, its latest handoff done so far
        prev = np.full(h.at.size, -1, dtype=np.int64)  # the one into its thread before it

        def at_time(thread: int, t: int) -> int:
            j = latest.get(thread, -1)
            while j >= 0 and h.at[j] > t:  # rows by time: step back to one at or before t
                j = int(prev[j])
            one = np.asarray([t], dtype=np.int64)
            own = int(self._own(thread, one, origin)[0])
            if j < 0:
                return own
            return int(shift[j]) + own - int(self._own(thread, h.at[j : j + 1], origin)[0])

        for j in np.flatnonzero(h.at > origin).tolist():
            x = int(h.thread[j])
            prev[j] = latest.get(x, -1)
            waited = at_time(int(h.src[j]), int(h.src_at[j]))
            quiet = at_time(x, int(h.quiet_from[j])) + int(h.at[j] - h.quiet_from[j])
            shift[j] = min(waited, quiet)
            latest[x] = j
        self._shift[origin] = shift
        return shift


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


INT64_MAX = int(np.iinfo(np.int64).max)


def check_factors(trace: Trace, changes: Sequence[Change]) -> None:
    """Refuse (UsageError) a change whose name matches nothing in ``trace`` and a factor
    that would lengthen the trace's times past int64 nanoseconds (the durations it scales,
    summed, times the factor): such a replay would wrap around, not fail."""
    ops = trace.gpu_ops
    h_start, h_end, h_name, h_thread = host_activities(trace)
    growth = 0.0  # the most the changes can lengthen anything, in ns
    latest = max(
        [int(c.max()) for c in (ops["end"], h_end) if c.size] or [0]
    )  # the latest time the trace holds
    for ch in changes:
        if ch.on_host:
            hit = host_hits(trace, ch, h_name, h_thread)
            scaled = int(np.sum(np.maximum(h_end[hit] - h_start[hit], 0), dtype=np.float64))
        else:
            hit = kernel_hits(trace, ch) if ch.kind == "kernel" else comm_hits(trace, ch, None)
            scaled = int(np.sum(ops["end"][hit] - ops["start"][hit], dtype=np.float64))
        if ch.factor > 1 and scaled:
            growth += (ch.factor - 1) * scaled
            if latest + growth >= INT64_MAX:
                limit = (INT64_MAX - latest) / scaled + 1
                raise UsageError(
                    f"{ch.said}: the factor stretches {duration(scaled)} of "
                    f"matching time past what int64 nanoseconds hold (the trace ends at "
                    f"{latest} ns); give a factor below {limit:.3g}"
                )


def _self_time(on_s: I64, on_e: I64, on: I64, h: int, a: int, b: int) -> tuple[I64, I64]:
    """The instants of ``[a, b)`` (activity ``h``) outside every other activity that starts
    and ends inside it: its self time (``on_*``: the thread's activities by start)."""
    lo, hi = np.searchsorted(on_s, [a, b], side="left")
    cand = np.arange(lo, hi)
    cand = cand[(on_e[cand] <= b) & (on[cand] != h) & (on_e[cand] > on_s[cand])]
    if cand.size == 0:
        return np.asarray([a], dtype=np.int64), np.asarray([b], dtype=np.int64)
    cs, ce = iv.union(on_s[cand], on_e[cand])  # its children's union
    return np.concatenate([[a], ce]).astype(np.int64), np.concatenate([cs, [b]]).astype(np.int64)


def _host_changes(trace: Trace, changes: Sequence[Change], across: bool) -> HostChanges:
    """Per thread, the intervals each host change scales: the whole extent of the
    activities it names (``inclusive``) or their self time (``self``); within one change
    the union of its activities' intervals, across changes the factors multiply.
    ``across``: whole-trace windows, whose threads may hand off to each other
    (:class:`Handoffs`)."""
    per: dict[int, list[tuple[I64, I64, float]]] = {}
    s_all, e_all, n_all, t_all = host_activities(trace)
    for ch in changes:
        if not ch.on_host:
            continue
        hit = np.flatnonzero(host_hits(trace, ch, n_all, t_all))
        for th in np.unique(t_all[hit]).tolist():
            mine = hit[t_all[hit] == th]
            if ch.kind == "inclusive":
                a, b = s_all[mine], np.maximum(e_all[mine], s_all[mine])
            else:
                on = np.flatnonzero(t_all == th)
                on = on[np.lexsort((-e_all[on], s_all[on]))]
                on_s, on_e = s_all[on], e_all[on]
                pieces = [
                    _self_time(on_s, on_e, on, h, int(s_all[h]), int(e_all[h]))
                    for h in mine.tolist()
                ]
                a = np.concatenate([p[0] for p in pieces])
                b = np.concatenate([p[1] for p in pieces])
            per.setdefault(th, []).append((a, b, ch.factor))
    hc = HostChanges(handoffs=thread_handoffs(trace) if per and across else None)
    for th, parts in per.items():
        hc.add(th, parts)
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
    guessed: bool = False  # a comm change on ops whose wait for peers is unknown
    graph_bound: bool = False  # graph nodes whose edges the trace does not show
    dependencies: dict[str, int] = field(default_factory=dict)  # by DEPENDENCY_SOURCES
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
    a, b = np.searchsorted(g.by_launch_start[lo:hi], [rs, re_], side="left")
    rows = g.by_launch[lo + a : lo + b]
    return np.sort(rows[ops["rank"][rows] == w.rank[i]])


def _ids(x: npt.NDArray[np.integer[Any]]) -> npt.NDArray[np.integer[Any]]:
    """The distinct values of a column of small ids (host thread rows, -1 among them),
    ascending, as ``np.unique``: one counting pass, no sort of the column."""
    if x.size == 0:
        return x[:0]
    lo, hi = int(x.min()), int(x.max())
    if hi - lo >= 1 << 24:
        return np.unique(x)
    return (np.flatnonzero(np.bincount(x - lo)) + lo).astype(x.dtype)


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


@dataclass
class Rendezvous:
    """Collectives across ranks, for a replay of all ranks at once: per GPU op its
    instance (the n-th collective of its name; -1 none), its measured arrival on the
    aligned clock, its wait for peers (the contract's "Several ranks") and the excess of
    its arrival gap over that wait (non-zero only where the wait is capped at the
    duration); per rank the clock offset (``Collectives.clock_offset_ns``)."""

    inst: I64
    arrival: I64
    wait: I64
    excess: I64
    n_inst: int
    rank_off: dict[int, int]

    def last_arrivals(self) -> I64:
        """Per instance, the member (GPU op row) that arrived last (ties: the lowest row)."""
        members = np.flatnonzero(self.inst >= 0)
        order = members[np.lexsort((-members, self.arrival[members], self.inst[members]))]
        last = np.full(self.n_inst, -1, dtype=np.int64)
        last[self.inst[order]] = order  # the last write of each instance: its latest arrival
        return last

    def offsets(self, ranks: npt.NDArray[Any]) -> I64:
        """The clock offset of each of ``ranks`` (0 for a rank without collectives)."""
        lut = np.zeros(max([*self.rank_off, int(ranks.max(initial=0))]) + 1, dtype=np.int64)
        for r, off in self.rank_off.items():
            lut[r] = off
        out: I64 = lut[ranks.astype(np.int64)]
        return out


def rendezvous(a: Attribution) -> Rendezvous | None:
    """The collectives of ``a`` matched across ranks (None: fewer than two ranks)."""
    c = a.collectives
    if c is None or c.op.size == 0:
        return None
    ops = a.trace.gpu_ops
    n, t = len(ops), c.table
    _, key = np.unique(np.stack([ops["name"][c.op], t["index"]]), axis=1, return_inverse=True)
    key = key.reshape(-1).astype(np.int64)
    last = np.full(int(key.max()) + 1, NONE, dtype=np.int64)
    np.maximum.at(last, key, t["start_ns"])
    inst, arrival = np.full(n, -1, dtype=np.int64), np.full(n, NONE, dtype=np.int64)
    wait, excess = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    inst[c.op] = key
    arrival[c.op] = t["start_ns"]
    wait[c.op] = t["wait_ns"]
    excess[c.op] = last[key] - t["start_ns"] - t["wait_ns"]
    return Rendezvous(inst, arrival, wait, excess, int(last.size), dict(c.clock_offset_ns))


@dataclass
class _Static:
    """What a group's replay computes from the graph and windows alone, whatever the
    durations, latencies and host changes: its ops (sorted rows), the positions among them
    of their predecessors, dependencies and sync waits, the order of its events, and per
    replayed window the positions of its ops, its host ends (threads, times) and the sync
    each comes after."""

    rows: I64
    pred_local: I64
    dep_local: I64
    wait_local: I64
    order: I64
    per_window: list[tuple[I64, npt.NDArray[np.int32], I64, I64]] = field(default_factory=list)


# one per graph, windows and rendezvous, kept across their replays (see replay_group)
ReplayMemo = dict[tuple[int, ...], _Static]


def replay_window(
    g: Graph, w: Windows, i: int, dur: I64, host: HostChanges, keep_ops: bool,
    lat: I64 | None = None, memo: ReplayMemo | None = None,
) -> WindowReplay:  # fmt: skip
    """One window replayed on its own (other ranks' collectives as measured)."""
    return replay_group(g, w, [i], dur, host, keep_ops, lat, memo=memo)[0]


def _excluded(g: Graph, w: Windows, i: int) -> tuple[WindowReplay, I64]:
    """The window's entry, with the reason it cannot be replayed (if so), and its ops."""
    trace, ops = g.trace, g.trace.gpu_ops
    w_s, w_e = int(w.start[i]), int(w.end[i])
    rr = int(w.range_row[i])
    out = WindowReplay(w.name[i], int(w.rank[i]), w_s, w_e, None, range_row=rr)
    rows = _window_ops(g, w, i)
    out.graph_bound = bool(np.any(g.graph_unread[rows]))
    if np.any(g.launch_row[rows] < 0):
        out.excluded = f"{int(np.sum(g.launch_row[rows] < 0))} GPU ops without a launch call"
    elif np.any(g.unexplained[rows]):
        worst = rows[np.argmax(np.where(g.unexplained[rows], g.lat[rows], -1))]
        out.excluded = (
            f"op {short_kernel_name(trace.strings[ops['name'][worst]])!r} started "
            f"{duration(g.lat[worst])} after everything the capture shows it waits for"
        )
    return out, rows


def replay_group(
    g: Graph, w: Windows, idx: Sequence[int], dur: I64, host: HostChanges, keep_ops: bool,
    lat: I64 | None = None, rv: Rendezvous | None = None,
    memo: ReplayMemo | None = None,
) -> list[WindowReplay]:  # fmt: skip
    """Windows ``idx`` (of different ranks when ``rv`` is given: their collectives meet)
    replayed in one pass, each from its own ops and host threads. ``memo``: a dict kept
    across replays of the same graph, windows and ``rv`` (one per fix, say), in which the
    group's fix-independent work is kept after the first."""
    trace = g.trace
    lat = g.lat if lat is None else lat
    ops = trace.gpu_ops
    outs, parts, origin = [], [], {}
    for i in idx:
        out, rows = _excluded(g, w, i)
        outs.append(out)
        if out.excluded is not None:
            continue
        # the host side starts where the range does: a tiled window (contract v3) may
        # start later, at the previous window's end, while its host work began earlier
        h_s = out.start_ns
        if w.thread[i] >= 0:
            h_s = min(h_s, int(trace.ranges["start"][out.range_row]))
        threads = _ids(g.thread[rows]) if w.thread[i] < 0 else np.asarray([w.thread[i]])
        for th in threads.tolist():
            origin[int(th)] = h_s
        parts.append((out, i, rows, threads, h_s))
    if not parts:
        return outs
    static = memo.get(tuple(idx)) if memo is not None else None
    rows = np.sort(np.concatenate([p[2] for p in parts])) if static is None else static.rows
    n = rows.size
    # syncs of each window's threads inside the window
    sm = np.zeros(g.s_row.size, dtype=bool)
    for out, _, _, threads, h_s in parts:
        sm |= np.isin(g.s_thread, threads) & (g.s_start >= h_s) & (g.s_start < out.end_ns)
    srows = np.flatnonzero(sm)
    m = srows.size
    s_local = np.full(g.s_row.size, -1, dtype=np.int64)
    s_local[srows] = np.arange(m)

    # whole-trace windows replay every thread of their rank: one that waited for another
    # moves with it (HostChanges.handoffs)
    across = all(w.thread[i] < 0 for i in idx)

    def warp(thread: npt.NDArray[np.int32], t: I64) -> I64:
        """Host times with the changed host time taken out (before sync gains)."""
        outw: I64 = t.copy()
        for th in _ids(thread).tolist():
            sel = thread == th
            outw[sel] = t[sel] - host.removed(th, t[sel], origin.get(th, 0), across)
        return outw

    # the sync each launch (and each sync) comes after on its thread
    def last_sync(thread: npt.NDArray[np.int32], t: I64) -> I64:
        res = np.full(t.size, -1, dtype=np.int64)
        for th in _ids(thread).tolist():
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
    pred_local = _position(rows, pred) if static is None else static.pred_local
    pred_fixed = np.where((pred >= 0) & (pred_local < 0), ops["end"][np.maximum(pred, 0)], NONE)
    dep_local = _position(rows, dep) if static is None else static.dep_local
    dep_fixed = np.where((dep >= 0) & (dep_local < 0), ops["end"][np.maximum(dep, 0)], NONE)
    st, se = g.s_start[srows], g.s_end[srows]
    s_thread = g.s_thread[srows]
    s_prev = np.full(m, -1, dtype=np.int64)
    if m > 1:
        same = s_thread[1:] == s_thread[:-1]
        s_prev[1:][same] = np.arange(m - 1)[same]
    wait = g.s_wait[srows]
    wait_local = _position(rows, wait) if static is None else static.wait_local
    wait_fixed = np.where((wait >= 0) & (wait_local < 0), ops["end"][np.maximum(wait, 0)], NONE)
    # collectives meeting across the windows' ranks; times aligned across ranks
    c_inst = np.full(n, -1, dtype=np.int64)
    c_off = c_excess = c_transfer = np.zeros(n, dtype=np.int64)
    inst_fixed = done = np.empty(0, dtype=np.int64)
    s_off = np.zeros(m, dtype=np.int64)
    c_key = np.empty(0, dtype=np.int64)
    if rv is not None and len({p[0].rank for p in parts}) > 1:
        c_inst = rv.inst[rows]
        o_off = rv.offsets(ops["rank"][rows])
        s_off = rv.offsets(trace.api_calls["rank"][g.s_row[srows]])
        c_off = o_off
        c_excess = rv.excess[rows]
        c_transfer = np.maximum(dur[rows] - rv.wait[rows], 0)
        # members outside this replay arrive as measured
        outside = np.ones(len(ops), dtype=bool)
        outside[rows] = False
        outside &= rv.inst >= 0
        inst_fixed = np.full(rv.n_inst, NONE, dtype=np.int64)
        np.maximum.at(inst_fixed, rv.inst[outside], rv.arrival[outside])
        done = np.flatnonzero(c_inst >= 0)
        last = inst_fixed.copy()
        np.maximum.at(last, c_inst[done], rv.arrival[rows[done]])
        c_key = last[c_inst[done]]
    else:
        o_off = np.zeros(n, dtype=np.int64)
    # order: ops by max(start, launch start), syncs by end (first on ties: a launch that
    # starts as a sync ends comes after it), collectives' completions at their instance's
    # latest measured arrival, after the ops there; all on the aligned clock
    if static is None:
        key = np.concatenate(
            [np.maximum(ops["start"][rows], g.launch_start[rows]) - o_off, se - s_off, c_key]
        )
        kind = np.concatenate(
            [np.ones(n, np.int8), np.zeros(m, np.int8), np.full(done.size, 2, np.int8)]
        )
        ev = np.concatenate([np.arange(n), -np.arange(m) - 1, n + done]).astype(np.int64)
        tie = np.concatenate([g.pos[rows], np.arange(m), g.pos[rows[done]]])
        order = ev[np.lexsort((tie, kind, key))]
    else:
        order = static.order
    start, end, bind, _, gain = _replay(
        order, ops["end"][rows], dur[rows], lat[rows], pred_local, pred_fixed, dep_local,
        dep_fixed, g.dep_lat[rows], ready, l_sync, np.full(n, NONE, dtype=np.int64),
        warp(s_thread, st), warp(s_thread, se), s_prev, wait_local, wait_fixed, g.s_tail[srows],
        c_inst, c_off, c_excess, c_transfer, inst_fixed,
    )  # fmt: skip
    if static is None:
        static = _Static(rows, pred_local, dep_local, wait_local, order)
        for out, i, mine, _, _ in parts:
            # the window's host end: its range's end, or (whole trace) each thread's last
            # range or launch call; and the sync each comes after
            if w.thread[i] >= 0:
                h_thread = np.asarray([w.thread[i]], dtype=np.int32)
                h_end = np.asarray(
                    [max(int(trace.ranges["end"][out.range_row]), origin[int(w.thread[i])])],
                    dtype=np.int64,
                )
            else:
                h_thread, h_end = _host_ends(g, out.rank)
            at = np.searchsorted(rows, np.sort(mine))
            static.per_window.append((at, h_thread, h_end, last_sync(h_thread, h_end)))
        if memo is not None:
            memo[tuple(idx)] = static
    for (out, _, _, threads, _), (at, h_thread, h_end, j) in zip(
        parts, static.per_window, strict=True
    ):
        # the window's host end, replayed
        gains = np.where(j >= 0, gain[np.maximum(j, 0)], 0) if m else np.zeros(j.size, np.int64)
        host_end = warp(h_thread, h_end) - gains
        out.replayed_end_ns = max(
            int(host_end.max(initial=out.start_ns)), int(end[at].max()) if at.size else out.start_ns
        )
        out.threads = int(np.union1d(threads, h_thread).size)
        mine_s = np.flatnonzero(np.isin(s_thread, threads))
        has_dep = dep[at] >= 0
        src = np.concatenate([
            np.where(g.dep_read[rows[at]], 0, 1)[has_dep],
            g.s_source[srows[mine_s]][g.s_source[srows[mine_s]] >= 0],
            np.full(int(np.sum(c_inst[at] >= 0)), DEPENDENCY_SOURCES.index("collective")),
        ]).astype(np.int64)  # fmt: skip
        counts = np.bincount(src, minlength=len(DEPENDENCY_SOURCES))
        out.dependencies = dict(zip(DEPENDENCY_SOURCES, map(int, counts), strict=True))
        if keep_ops:
            out.ops, out.op_start, out.op_end, out.op_bind = rows[at], start[at], end[at], bind[at]
    return outs


@dataclass(frozen=True)
class ExcludedWindow:
    """A window the replay could not include, and why (``index``: 1-based, the replay's)."""

    index: int
    name: str
    start_ns: int
    rank: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class WindowDependencies:
    """An included window's dependencies by source (DEPENDENCY_SOURCES)."""

    name: str
    start_ns: int
    rank: int
    dependencies: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "start_ns": self.start_ns, "rank": self.rank,
                "dependencies": dict(self.dependencies)}  # fmt: skip


@dataclass(frozen=True)
class Fidelity:
    """How well the unchanged replay reproduces the windows (the ``replay`` document):
    ``windows`` included, their largest and median relative error (None: none included),
    the excluded ones, the dependencies used in all and per included window."""

    windows: int
    max_error: float | None
    median_error: float | None
    excluded: list[ExcludedWindow]
    dependencies: dict[str, int]
    per_window: list[WindowDependencies]

    def to_dict(self) -> dict[str, Any]:
        return {
            "windows": self.windows,
            "max_error": self.max_error,
            "median_error": self.median_error,
            "excluded": [e.to_dict() for e in self.excluded],
            "dependencies": dict(self.dependencies),
            "per_window": [w.to_dict() for w in self.per_window],
        }


@dataclass(frozen=True)
class WhatIfWindow:
    """One included window before and after the changes (``before_ns``: its unchanged
    replay) and how far its saving can be trusted (``bound``, :func:`_bound`)."""

    index: int
    name: str
    start_ns: int
    rank: int
    before_ns: int
    after_ns: int
    bound: str

    @property
    def exact(self) -> bool:
        return self.bound == "exact"

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "start_ns": self.start_ns,
                "rank": self.rank, "before_ns": self.before_ns, "after_ns": self.after_ns,
                "exact": self.exact, "bound": self.bound}  # fmt: skip


@dataclass(frozen=True)
class WhatIf:
    """The ``what_if`` document: the changes as parsed, per window before/after, the
    windows the replay excludes, a note on the bounds, the total saving."""

    changes: list[Change]
    windows: list[WhatIfWindow]
    excluded: list[ExcludedWindow]
    note: str | None

    @property
    def spec(self) -> str:
        return ",".join(c.text for c in self.changes)

    @property
    def total_saving_ns(self) -> int:
        return int(sum(w.before_ns - w.after_ns for w in self.windows))

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "changes": [c.doc() for c in self.changes],
            "windows": [w.to_dict() for w in self.windows],
            "excluded": [e.to_dict() for e in self.excluded],
            "note": self.note,
            "total_saving_ns": self.total_saving_ns,
        }


@dataclass
class Replay:
    """Every window of an analysis replayed, once unchanged and once per change."""

    windows: list[WindowReplay]
    changes: list[Change]
    graph: Graph  # what the windows were replayed over (measured once per analysis)

    def fidelity(self) -> Fidelity:
        errs = [
            abs(w.after_ns - w.before_ns) / max(1, w.before_ns)
            for w in self.windows
            if w.after_ns is not None
        ]
        included = [w for w in self.windows if w.after_ns is not None]
        return Fidelity(
            windows=len(errs),
            max_error=max(errs) if errs else None,
            median_error=float(np.median(errs)) if errs else None,
            excluded=self.excluded(),
            dependencies={
                k: sum(w.dependencies.get(k, 0) for w in included) for k in DEPENDENCY_SOURCES
            },
            per_window=[
                WindowDependencies(w.name, w.start_ns, w.rank, w.dependencies) for w in included
            ],
        )

    def excluded(self) -> list[ExcludedWindow]:
        return [
            ExcludedWindow(i, w.name, w.start_ns, w.rank, w.excluded)
            for i, w in enumerate(self.windows, 1)
            if w.excluded is not None
        ]


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


def _comm_waits(a: Attribution) -> I64:
    """Per GPU op, the wait for peers inside it the contract estimates from several ranks
    (``Several ranks``); -1 where unknown (one rank, or no match on another rank)."""
    ops = a.trace.gpu_ops
    wait = np.full(len(ops), -1, dtype=np.int64)
    c = a.collectives
    if c is not None and c.op.size:
        wait[c.op] = c.table["wait_ns"]
    return wait


def changed_durations(
    a: Attribution, changes: Sequence[Change]
) -> tuple[I64, npt.NDArray[np.bool_]]:
    """Per GPU op, its duration with the ``kernel`` and ``comm`` changes applied, and
    whether the change is a guess: a comm op whose wait for peers is unknown (only its
    rank is loaded) counts its whole duration as transfer."""
    trace = a.trace
    ops = trace.gpu_ops
    dur = (ops["end"] - ops["start"]).astype(np.int64)
    guessed = np.zeros(len(ops), dtype=bool)
    waits: I64 | None = None
    for ch in changes:
        if ch.kind == "kernel":
            hit = kernel_hits(trace, ch)
            dur[hit] = np.rint(dur[hit] * ch.factor).astype(np.int64)
        elif ch.kind == "comm":
            hit = comm_hits(trace, ch, a.classes == COMM)
            waits = _comm_waits(a) if waits is None else waits
            known = waits >= 0
            w = np.where(known, np.minimum(waits, dur), 0)
            dur[hit] = w[hit] + np.rint((dur[hit] - w[hit]) * ch.factor).astype(np.int64)
            guessed |= hit & ~known
    return dur, guessed


def rank_groups(w: Windows) -> list[list[int]]:
    """The windows replayed together: per (name, n), the n-th window of that name on each
    rank (in start order); whole-trace windows: one per rank, all together."""
    seen: dict[tuple[str, int], int] = {}
    groups: dict[tuple[str, int], list[int]] = {}
    for i, (name, rank) in enumerate(zip(w.name, w.rank.tolist(), strict=True)):
        n = seen.get((name, rank), 0)
        seen[(name, rank)] = n + 1
        groups.setdefault((name, n), []).append(i)
    return list(groups.values())


def replay_all(
    g: Graph, w: Windows, dur: I64, host: HostChanges, keep_ops: bool,
    lat: I64 | None = None, rv: Rendezvous | None = None,
    memo: ReplayMemo | None = None,
) -> list[WindowReplay]:  # fmt: skip
    """Every window of ``w`` replayed, in ``w``'s order. With ``rv`` (several ranks), the
    windows of several ranks are replayed together, meeting at their collectives: the
    whole-trace windows, or the n-th ``--by`` window of each rank (:func:`rank_groups`).
    ``memo``: see :func:`replay_group` (one per graph, windows and ``rv``)."""
    if rv is None:
        return [replay_window(g, w, i, dur, host, keep_ops, lat, memo) for i in range(len(w.name))]
    out: list[WindowReplay | None] = [None] * len(w.name)
    for idx in rank_groups(w):
        group = replay_group(g, w, idx, dur, host, keep_ops, lat, rv, memo)
        for i, wr in zip(idx, group, strict=True):
            out[i] = wr
    return [x for x in out if x is not None]


def replay(
    a: Attribution,
    changes: Sequence[Change] = (),
    keep_ops: bool = False,
    graph: Graph | None = None,
    captures: Captures | None = None,
) -> Replay:
    """Replay every window of ``a`` (its ``--by`` windows, else one per rank) with
    ``changes`` applied (none: the fidelity check); ``graph``: one an earlier replay of
    ``a`` built; ``captures``: graph captures (``--capture``) showing its graphs' edges."""
    trace = a.trace
    if any(ch.factor > 1 for ch in changes):
        check_factors(trace, changes)
    g = dependency_graph(trace, a.launches.api_row, captures) if graph is None else graph
    dur, guessed = changed_durations(a, changes)
    host = _host_changes(trace, changes, a.by is None)
    w = replay_windows(a)
    done = replay_all(g, w, dur, host, keep_ops, rv=rendezvous(a))
    out = Replay(done, list(changes), g)
    if guessed.any():
        for k, wr in enumerate(out.windows):
            wr.guessed = bool(guessed[_window_ops(g, w, k)].any())
    return out


def _bound(w: WindowReplay) -> str:
    """How far a window's replayed saving can be trusted: ``exact``, a ``lower bound``
    (several host threads, CROSS_THREAD_NOTE; graph nodes whose edges the trace does not
    show, GRAPH_EDGES_NOTE), an ``upper bound`` (a comm change whose wait for peers is
    unknown, COMM_WAIT_NOTE), or an ``estimate`` (both)."""
    lower = w.threads > 1 or w.graph_bound
    return ("exact", "lower bound", "upper bound", "estimate")[lower + 2 * w.guessed]


def what_if(
    a: Attribution, changes: Sequence[Change] | str, captures: Captures | None = None
) -> WhatIf:
    """The windows before and after ``changes``, and how exact each saving is
    (``captures``: see :func:`replay`)."""
    if isinstance(changes, str):
        changes = parse_changes(changes)
    base = replay(a, captures=captures)
    new = replay(a, changes, graph=base.graph)
    rows: list[WhatIfWindow] = []
    for i, (b, n) in enumerate(zip(base.windows, new.windows, strict=True), 1):
        if b.after_ns is None or n.after_ns is None:
            continue
        rows.append(WhatIfWindow(i, b.name, b.start_ns, b.rank, b.after_ns, n.after_ns, _bound(n)))
    notes = [
        note
        for note, hit in (
            (CROSS_THREAD_NOTE, any(w.threads > 1 for w in new.windows if w.after_ns is not None)),
            (COMM_WAIT_NOTE, any(w.guessed for w in new.windows if w.after_ns is not None)),
            (GRAPH_EDGES_NOTE, any(w.graph_bound for w in new.windows if w.after_ns is not None)),
        )
        if hit
    ]
    return WhatIf(list(changes), rows, base.excluded(), "; ".join(notes) if notes else None)
