"""Links between tables of a Trace: each GPU op's launching API call.

The one implementation of the contract's link (docs/attribution.md), used by
``pytimings summary`` and ``pytimings analyze`` alike: the launch call of a GPU op is the
API call with the same correlation id in the same process (rank, pid) — CUPTI ids are per
process (synchronization records, which reuse the id of their call, are a table of their
own). When several calls share an id, the earliest (then the lowest
thread) is the launch. Any id links, however large; ops whose id matches no call are
counted (:func:`unlinked`), never dropped.

Written to hold few full-length temporaries: traces reach 10^7 ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings._native import _intervals as iv
from pytimings._native._kernels import is_sorted_i64, join_sorted
from pytimings.model.trace import SyncKind, Trace
from pytimings.table import Table

I64 = npt.NDArray[np.int64]


def _keys(trace: Trace, rows: I64 | None) -> tuple[I64, I64]:
    """Join keys (process, correlation) of the GPU ops and of the api_calls ``rows`` (None:
    every row, read in place)."""
    ops, api = trace.gpu_ops, trace.api_calls

    def of_api(c: str) -> npt.NDArray[Any]:
        col: npt.NDArray[Any] = api[c]
        return col if rows is None else col[rows]

    o_corr, a_corr = ops["correlation"], of_api("correlation")
    o_rank, a_rank, o_pid, a_pid = ops["rank"], of_api("rank"), ops["pid"], of_api("pid")
    r0, p0 = int(a_rank[0]), int(a_pid[0])
    if (
        np.all(a_rank == r0)
        and np.all(o_rank == r0)
        and np.all(a_pid == p0)
        and np.all(o_pid == p0)
    ):
        return o_corr.astype(np.int64, copy=False), a_corr.astype(np.int64, copy=False)
    o_grp = (o_rank.astype(np.int64) << 32) | (o_pid.astype(np.int64) & 0xFFFFFFFF)
    a_grp = (a_rank.astype(np.int64) << 32) | (a_pid.astype(np.int64) & 0xFFFFFFFF)
    groups = np.unique(np.concatenate([np.unique(o_grp), np.unique(a_grp)]))
    shift = 63 - max(1, (groups.size - 1).bit_length())
    o_code = np.searchsorted(groups, o_grp).astype(np.int64)
    a_code = np.searchsorted(groups, a_grp).astype(np.int64)
    del o_grp, a_grp
    if max(int(o_corr.max(initial=0)), int(a_corr.max(initial=0))) >= 1 << shift:
        # ids too wide to pack beside the process: pack their dense codes instead
        ids = np.unique(np.concatenate([o_corr, a_corr]))
        o_corr = np.searchsorted(ids, o_corr).astype(np.int64)
        a_corr = np.searchsorted(ids, a_corr).astype(np.int64)
    o_key = (o_code << shift) | np.maximum(o_corr, 0)
    a_key = (a_code << shift) | a_corr
    return o_key, a_key


def launch_index(trace: Trace) -> I64:
    """Per GPU op, the row of its launch call in ``trace.api_calls``, or -1. The calls'
    keys are sorted (usually they are in order already: no sort), then each op's key is
    looked up from where the previous op's was found (:func:`_kernels.join_sorted`), so ops
    in correlation order cost a step each and nothing of the ops' length is gathered."""
    ops, api = trace.gpu_ops, trace.api_calls
    if len(ops) == 0 or len(api) == 0:
        return np.full(len(ops), -1, dtype=np.int64)
    cand = api["correlation"] >= 0
    rows: I64 | None = None if cand.all() else np.flatnonzero(cand)  # None: every row
    del cand
    if rows is not None and rows.size == 0:
        return np.full(len(ops), -1, dtype=np.int64)
    o_key, a_key = _keys(trace, rows)
    order: I64 | None = None  # None: a_key is sorted already
    if not is_sorted_i64(np.ascontiguousarray(a_key)):
        order = np.argsort(a_key, kind="stable")
    ks = a_key if order is None else a_key[order]
    if ks.size > 1 and np.any(ks[1:] == ks[:-1]):  # shared ids: earliest, then lowest thread
        thread, start = api["thread"], api["start"]
        if rows is not None:
            thread, start = thread[rows], start[rows]
        order = np.lexsort((thread, start, a_key))
        del thread, start
        ks = a_key[order]
        first = np.ones(ks.size, dtype=bool)
        first[1:] = ks[1:] != ks[:-1]
        ks, order = ks[first], order[first]
        del first
    del a_key
    if order is not None:
        rows = order if rows is None else rows[order]
    del order
    out, _ = join_sorted(
        np.ascontiguousarray(ks),
        rows,
        np.ascontiguousarray(o_key),
        np.ascontiguousarray(ops["correlation"].astype(np.int64, copy=False)),
    )
    return out


def unlinked(trace: Trace, index: I64) -> int:
    """GPU ops that carry a correlation id but have no launch call in the trace."""
    return int(np.count_nonzero((index < 0) & (trace.gpu_ops["correlation"] >= 0)))


def project(
    trace: Trace, api_row: I64, rows: I64 | None = None, busy: bool = True
) -> tuple[I64, I64, I64, I64]:
    """The GPU projection of ranges (``rows`` of ``trace.ranges``, default all): per range,
    the GPU ops launched from inside it — launch call starting in ``[start, end)`` on the
    range's thread (an end before the start is taken as the start) — as their count,
    earliest start, latest end and busy time, the length of the union of their intervals
    (all 0 when none; ``busy=False``: not computed, left 0, for callers that need only the
    count and span). ``api_row`` is :func:`launch_index`. One implementation for
    ``summary`` and ``analyze --by``.

    Count and span: one compiled pass over the ops (:func:`_intervals.project_threads`),
    reading the launch calls through ``api_row`` in place; the ranges' boundaries on each
    thread cut its time into bins, each op lands in the bin of its launch, and each range
    reads its bins. The busy time sorts each thread's launches (:func:`_busy`)."""
    rg, ops, api = trace.ranges, trace.gpu_ops, trace.api_calls
    rows = np.arange(len(rg), dtype=np.int64) if rows is None else rows
    r_s = rg["start"][rows]
    r_e = np.maximum(rg["end"][rows], r_s)
    r_t = rg["thread"][rows]
    zero = np.zeros(rows.size, dtype=np.int64)
    if rows.size == 0 or len(ops) == 0 or len(api) == 0:
        return zero, zero.copy(), zero.copy(), zero.copy()
    on = np.flatnonzero(r_t >= 0)
    threads = np.unique(r_t[on])
    t_slot = np.full(int(threads.max(initial=-1)) + 1, -1, dtype=np.int32)
    t_slot[threads] = np.arange(threads.size, dtype=np.int32)
    slot = t_slot[r_t[on]].astype(np.int64)
    parts, q_lo, q_hi = [], zero.copy(), zero.copy()
    b_off = np.zeros(threads.size + 1, dtype=np.int64)
    for k in range(threads.size):
        mine = on[slot == k]
        bounds = np.unique(np.concatenate([r_s[mine], r_e[mine]]))
        base = int(b_off[k]) + k  # the slot's first bin
        q_lo[mine] = base + np.searchsorted(bounds, r_s[mine]) + 1
        q_hi[mine] = base + np.searchsorted(bounds, r_e[mine]) + 1
        b_off[k + 1] = b_off[k] + bounds.size
        parts.append(bounds)
    c = np.ascontiguousarray
    count, first, last = iv.project_threads(
        c(api_row.astype(np.int64, copy=False)),
        c(api["thread"].astype(np.int32, copy=False)),
        c(api["start"]),
        c(ops["start"]),
        c(ops["end"]),
        t_slot,
        np.concatenate(parts) if parts else np.empty(0, dtype=np.int64),
        b_off,
        q_lo,
        q_hi,
    )
    busy_ns = _busy(trace, api_row, r_s, r_e, r_t) if busy and count.any() else zero
    return count, first, last, busy_ns


def _busy(trace: Trace, api_row: I64, r_s: I64, r_e: I64, r_t: npt.NDArray[Any]) -> I64:
    """Per range ``[r_s, r_e)`` on thread ``r_t``: the length of the union of the intervals
    of the GPU ops launched from inside it (the busy time of :func:`project`)."""
    ops, api = trace.gpu_ops, trace.api_calls
    out = np.zeros(r_s.size, dtype=np.int64)
    linked = np.flatnonzero(api_row >= 0)
    l_thread = api["thread"][api_row[linked]]
    l_start = api["start"][api_row[linked]]
    order = np.lexsort((l_start, l_thread))  # by thread, then launch start
    linked, l_thread, l_start = linked[order], l_thread[order], l_start[order]
    threads = np.unique(r_t[r_t >= 0])
    lo = np.searchsorted(l_thread, threads, side="left")
    hi = np.searchsorted(l_thread, threads, side="right")
    for t, a, b in zip(threads, lo, hi, strict=True):
        if a == b:
            continue
        sel = np.flatnonzero(r_t == t)
        mine = linked[a:b]
        points = l_start[a:b]
        lo_i = np.searchsorted(points, r_s[sel], side="left")
        hi_i = np.searchsorted(points, r_e[sel], side="left")
        out[sel] = union_lengths(lo_i, np.maximum(hi_i, lo_i), ops["start"][mine], ops["end"][mine])
    return out


def union_lengths(lo: I64, hi: I64, starts: I64, ends: I64) -> I64:
    """Per group ``i``, the length of the union of the intervals ``[starts[j], ends[j])`` for
    ``j`` in ``[lo[i], hi[i])`` (groups may overlap, e.g. nested ranges)."""
    n = hi - lo
    out = np.zeros(n.size, dtype=np.int64)
    total = int(n.sum())
    if total == 0:
        return out
    gid = np.repeat(np.arange(n.size, dtype=np.int64), n)
    idx = lo[gid] + np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
    base = int(starts[idx].min())
    s = starts[idx] - base
    e = np.maximum(ends[idx] - base, s)
    span = int(e.max()) + 1
    if span * n.size >= 2**62:  # keys would overflow: group by group
        for i in np.flatnonzero(n):
            m = gid == i
            order = np.argsort(s[m], kind="stable")
            us, ue = iv.union(s[m][order], e[m][order])
            out[i] = int((ue - us).sum())
        return out
    # each group's times shifted past the previous group's: one running maximum of the
    # ends serves every group, and each interval adds what it reaches past it
    ks, ke = s + gid * span, e + gid * span
    order = np.lexsort((ks, gid))
    ks, ke, gid = ks[order], ke[order], gid[order]
    reach = np.empty_like(ke)
    reach[0] = ks[0]
    reach[1:] = np.maximum.accumulate(ke)[:-1]
    add = np.maximum(ke - np.maximum(ks, reach), 0)
    out += np.bincount(gid, weights=add, minlength=n.size).astype(np.int64)
    return out


def event_waits(trace: Trace, launch_row: I64) -> tuple[I64, I64]:
    """The stream waits the capture records (nsys CUDA event and stream-wait-event
    records): per wait, the op that waits (the first op its stream submits after the
    ``cudaStreamWaitEvent`` call) and the op it waits for (the last op the recording stream
    submitted before the latest ``cudaEventRecord`` of that event before the wait). A wait
    on an event never recorded, or recorded before any op, is no dependency. Returns
    (waiting op rows, awaited op rows), in the order of the waits. Vectorised: every
    lookup is a binary search of all the waits at once in a lexicographically sorted table
    (:func:`_narrow`)."""
    syncs, events, api, ops = trace.syncs, trace.events, trace.api_calls, trace.gpu_ops
    none = np.empty(0, dtype=np.int64)
    waits = np.flatnonzero((syncs["kind"] == SyncKind.STREAM_WAIT_EVENT) & (syncs["event"] >= 0))
    if waits.size == 0 or len(events) == 0 or len(ops) == 0:
        return none, none
    call = _calls_by_id(api)
    w_at = call(syncs["rank"][waits], syncs["pid"][waits], syncs["correlation"][waits])
    waits, w_at = waits[w_at >= 0], w_at[w_at >= 0]
    r_at = call(events["rank"], events["pid"], events["correlation"])
    t = api["start"][w_at]
    w_rank = syncs["rank"][waits]
    # records of each (rank, pid, event) by their call's start (ties: record row)
    rec = np.flatnonzero(r_at >= 0)
    r_start = api["start"][r_at[rec]]
    r_cols = [events[c][rec] for c in ("rank", "pid", "event")]
    order = np.lexsort((rec, r_start, *r_cols[::-1]))
    rec, r_start, r_cols = rec[order], r_start[order], [c[order] for c in r_cols]
    lo, hi = _narrow(r_cols, [w_rank, syncs["pid"][waits], syncs["event"][waits]])
    at_rec = _search(r_start, lo, hi, t, right=False) - 1  # the latest record before t
    ok = at_rec >= lo  # else never recorded before the wait: nothing to wait for
    e = rec[np.where(ok, at_rec, 0)] if rec.size else np.zeros(waits.size, dtype=np.int64)
    # ops of each (rank, device, stream) by launch start
    linked = np.flatnonzero(launch_row >= 0)
    l_start = api["start"][launch_row[linked]]
    s_cols = [ops[c][linked] for c in ("rank", "device", "stream")]
    order = np.lexsort((l_start, *s_cols[::-1]))
    linked, l_start, s_cols = linked[order], l_start[order], [c[order] for c in s_cols]
    r_lo, r_hi = _narrow(s_cols, [w_rank, events["device"][e], events["stream"][e]])
    w_lo, w_hi = _narrow(s_cols, [w_rank, syncs["device"][waits], syncs["stream"][waits]])
    p = _search(l_start, r_lo, r_hi, api["start"][r_at[e]], right=False) - 1
    c = _search(l_start, w_lo, w_hi, t, right=True)
    ok &= (p >= r_lo) & (c < w_hi)  # recorded after an op, and something waits
    return linked[c[ok]].astype(np.int64), linked[p[ok]].astype(np.int64)


def _search(col: npt.NDArray[Any], lo: I64, hi: I64, v: npt.NDArray[Any], right: bool) -> I64:
    """Per query ``i``: ``lo[i]`` plus ``np.searchsorted(col[lo[i]:hi[i]], v[i], side)``
    (each slice sorted), for all queries at once: one vectorised bisection."""
    lo, hi = lo.copy(), hi.copy()
    while True:
        todo = np.flatnonzero(lo < hi)
        if todo.size == 0:
            return lo
        mid = (lo[todo] + hi[todo]) >> 1
        go = col[mid] <= v[todo] if right else col[mid] < v[todo]
        lo[todo[go]] = mid[go] + 1
        hi[todo[~go]] = mid[~go]


def _narrow(cols: list[npt.NDArray[Any]], keys: list[npt.NDArray[Any]]) -> tuple[I64, I64]:
    """Per query: the slice ``[lo, hi)`` of the rows of ``cols`` (sorted
    lexicographically) equal to its ``keys``, narrowed column by column (empty when none)."""
    n = len(keys[0])
    lo = np.zeros(n, dtype=np.int64)
    hi = np.full(n, len(cols[0]), dtype=np.int64)
    for col, v in zip(cols, keys, strict=True):
        lo, hi = _search(col, lo, hi, v, right=False), _search(col, lo, hi, v, right=True)
    return lo, hi


def _calls_by_id(api: Table) -> Callable[[Any, Any, Any], I64]:
    """A lookup: per (rank, pid, correlation id), the row of the earliest such API call."""
    ok = np.flatnonzero(api["correlation"] >= 0)
    order = np.lexsort((api["start"][ok], api["correlation"][ok], api["pid"][ok], api["rank"][ok]))
    rows = ok[order]
    cols = [api[c][rows] for c in ("rank", "pid", "correlation")]

    def find(rank: Any, pid: Any, corr: Any) -> I64:
        if rows.size == 0:
            return np.full(len(corr), -1, dtype=np.int64)
        lo, hi = _narrow(cols, [np.asarray(rank), np.asarray(pid), np.asarray(corr)])
        return np.where(hi > lo, rows[np.minimum(lo, rows.size - 1)], -1)

    return find


def _last_before(key: I64, t: I64, rows: I64, q_key: I64, q_t: I64) -> I64:
    """Per query (``q_key``, ``q_t``): the row of ``rows`` with the same key and the latest
    ``t`` strictly before ``q_t`` (ties: the later in ``rows``' order), or -1."""
    n = key.size
    if n == 0 or q_key.size == 0:
        return np.full(q_key.size, -1, dtype=np.int64)
    k = np.concatenate([key, q_key])
    tt = np.concatenate([t, q_t])
    is_q = np.concatenate([np.zeros(n, np.int8), np.ones(q_key.size, np.int8)])
    # at one time a query comes before the rows: strictly before
    order = np.lexsort((-is_q, tt, k))
    pos = np.where(is_q[order] == 0, np.arange(order.size), -1)
    last = np.maximum.accumulate(pos)
    q_at = np.flatnonzero(is_q[order] == 1)
    src = last[q_at]
    ok = src >= 0
    src_row = np.where(ok, order[np.maximum(src, 0)], 0)
    ok &= k[src_row] == k[order[q_at]]
    out = np.full(q_key.size, -1, dtype=np.int64)
    q_index = order[q_at] - n
    out[q_index[ok]] = rows[src_row[ok]]
    return out


def _stream_key(rank: Any, device: Any, stream: Any) -> I64:
    return (
        (np.asarray(rank, dtype=np.int64) << 48)
        | ((np.asarray(device, dtype=np.int64) & 0xFFFF) << 32)
        | (np.asarray(stream, dtype=np.int64) & 0xFFFFFFFF)
    )


def sync_waits(trace: Trace, launch_row: I64) -> tuple[I64, I64, npt.NDArray[np.int8]]:
    """The GPU op each host synchronization the capture records waited for: a stream
    synchronize, the last op its stream submitted before the call; an event synchronize,
    the op its event marks (the recording stream's last op submitted before the latest
    record of the event before the call). Returns (rows of the calls in
    ``trace.api_calls``, awaited op rows, the records' SyncKind); calls whose stream or
    event had nothing before them are left out. Device synchronizes wait for every
    stream: not listed here."""
    syncs, events, api, ops = trace.syncs, trace.events, trace.api_calls, trace.gpu_ops
    none = np.empty(0, dtype=np.int64)
    kind = syncs["kind"]
    rows = np.flatnonzero(
        ((kind == SyncKind.STREAM_SYNC) & (syncs["stream"] >= 0))
        | ((kind == SyncKind.EVENT_SYNC) & (syncs["event"] >= 0))
    )
    if rows.size == 0 or len(ops) == 0:
        return none, none, np.empty(0, dtype=np.int8)
    call = _calls_by_id(api)(syncs["rank"][rows], syncs["pid"][rows], syncs["correlation"][rows])
    rows, call = rows[call >= 0], call[call >= 0]
    has = np.flatnonzero(launch_row >= 0)
    o_key = _stream_key(ops["rank"][has], ops["device"][has], ops["stream"][has])
    o_t = api["start"][launch_row[has]]
    t = api["start"][call]
    # stream synchronizes: that stream's last op submitted before the call
    stream_key = _stream_key(syncs["rank"][rows], syncs["device"][rows], syncs["stream"][rows])
    # event synchronizes: the stream and time of the event's latest record before the call
    ev = kind[rows] == SyncKind.EVENT_SYNC
    if ev.any() and len(events):
        r_call = _calls_by_id(api)(events["rank"], events["pid"], events["correlation"])
        ok = np.flatnonzero(r_call >= 0)
        q = np.flatnonzero(ev)
        j = rows[q]
        # (rank, pid, event) of the records and of the waits, as dense codes
        both = np.concatenate(
            [
                np.stack([events[c][ok].astype(np.int64) for c in ("rank", "pid", "event")]),
                np.stack([syncs[c][j].astype(np.int64) for c in ("rank", "pid", "event")]),
            ],
            axis=1,
        )
        code = np.unique(both, axis=1, return_inverse=True)[1].reshape(-1).astype(np.int64)
        rec = _last_before(code[: ok.size], api["start"][r_call[ok]], ok, code[ok.size :], t[q])
        found = rec >= 0
        r = np.maximum(rec, 0)
        stream_key[q] = np.where(
            found, _stream_key(events["rank"][r], events["device"][r], events["stream"][r]), -1
        )
        t = t.copy()
        t[q] = np.where(found, api["start"][r_call[r]], t[q])
    elif ev.any():
        stream_key[ev] = -1
    awaited = _last_before(o_key, o_t, has, stream_key, t)
    awaited[stream_key < 0] = -1
    keep = awaited >= 0
    return call[keep], awaited[keep], kind[rows][keep]
