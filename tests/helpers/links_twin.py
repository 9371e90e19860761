"""The recorded stream waits as the Python loop of the first implementation computed them
(one wait at a time, bisection per record list): the reference the vectorised
``pytimings.ingest.links.event_waits`` is tested against."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.model.trace import SyncKind, Trace
from pytimings.table import Table

I64 = npt.NDArray[np.int64]


def event_waits(trace: Trace, launch_row: I64) -> tuple[I64, I64]:
    """The stream waits the capture records (nsys CUDA event and stream-wait-event
    records): per wait, the op that waits (the first op its stream submits after the
    ``cudaStreamWaitEvent`` call) and the op it waits for (the last op the recording stream
    submitted before the latest ``cudaEventRecord`` of that event before the wait). A wait
    on an event never recorded, or recorded before any op, is no dependency. Returns
    (waiting op rows, awaited op rows)."""
    syncs, events, api, ops = trace.syncs, trace.events, trace.api_calls, trace.gpu_ops
    none = np.empty(0, dtype=np.int64)
    waits = np.flatnonzero((syncs["kind"] == SyncKind.STREAM_WAIT_EVENT) & (syncs["event"] >= 0))
    if waits.size == 0 or len(events) == 0 or len(ops) == 0:
        return none, none
    call = _calls_by_id(api)
    w_at = call(syncs["rank"][waits], syncs["pid"][waits], syncs["correlation"][waits])
    r_at = call(events["rank"], events["pid"], events["correlation"])
    has = launch_row >= 0
    l_start = np.where(has, api["start"][np.maximum(launch_row, 0)], np.iinfo(np.int64).min)
    # ops of each (rank, device, stream) by launch start
    linked = np.flatnonzero(has)
    streams: dict[tuple[int, int, int], tuple[I64, I64]] = {}
    key = np.stack([ops["rank"][linked], ops["device"][linked], ops["stream"][linked]], axis=1)
    order = np.lexsort((l_start[linked], key[:, 2], key[:, 1], key[:, 0]))
    linked, key = linked[order], key[order]
    cut = np.flatnonzero(np.any(key[1:] != key[:-1], axis=1)) + 1
    for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(linked)], strict=True):
        if hi > lo:
            rows = linked[lo:hi]
            streams[tuple(int(v) for v in key[lo])] = (l_start[rows], rows)  # type: ignore[index]
    # records of each (rank, pid, event) by their call's start
    rec: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
    for i in np.flatnonzero(r_at >= 0).tolist():
        k = (int(events["rank"][i]), int(events["pid"][i]), int(events["event"][i]))
        rec.setdefault(k, []).append((int(api["start"][r_at[i]]), i))
    for v in rec.values():
        v.sort()
    waiting, awaited = [], []
    for j, at in zip(waits.tolist(), w_at.tolist(), strict=True):
        if at < 0:
            continue
        t = int(api["start"][at])
        k = (int(syncs["rank"][j]), int(syncs["pid"][j]), int(syncs["event"][j]))
        records = rec.get(k, [])
        at_rec = bisect.bisect_left(records, (t, -1)) - 1  # the latest record before t
        if at_rec < 0:
            continue  # never recorded before the wait: nothing to wait for
        e = records[at_rec][1]
        r_stream = streams.get((k[0], int(events["device"][e]), int(events["stream"][e])))
        w_stream = streams.get((k[0], int(syncs["device"][j]), int(syncs["stream"][j])))
        if r_stream is None or w_stream is None:
            continue
        p = int(np.searchsorted(r_stream[0], int(api["start"][r_at[e]]))) - 1
        c = int(np.searchsorted(w_stream[0], t, side="right"))
        if p >= 0 and c < len(w_stream[1]):  # recorded after an op, and something waits
            awaited.append(int(r_stream[1][p]))
            waiting.append(int(w_stream[1][c]))
    return np.asarray(waiting, dtype=np.int64), np.asarray(awaited, dtype=np.int64)


def _calls_by_id(api: Table) -> Callable[[Any, Any, Any], I64]:
    """A lookup: per (rank, pid, correlation id), the row of the earliest such API call."""
    ok = np.flatnonzero(api["correlation"] >= 0)
    order = np.lexsort((api["start"][ok], api["correlation"][ok], api["pid"][ok], api["rank"][ok]))
    rows = ok[order]
    cols = [api[c][rows].astype(np.int64) for c in ("rank", "pid", "correlation")]

    def find(rank: Any, pid: Any, corr: Any) -> I64:
        out = np.full(len(corr), -1, dtype=np.int64)
        queries = zip(np.asarray(rank), np.asarray(pid), np.asarray(corr), strict=True)
        for i, q in enumerate(queries):
            lo, hi = 0, len(rows)
            for col, v in zip(cols, q, strict=True):  # narrow by rank, then pid, then id
                seg = col[lo:hi]
                lo, hi = (
                    lo + int(np.searchsorted(seg, v)),
                    lo + int(np.searchsorted(seg, v, "right")),
                )
            if hi > lo:
                out[i] = rows[lo]
        return out

    return find
