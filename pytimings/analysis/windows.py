"""The windows the partition is computed over: one whole-trace window per rank, or one per
instance of a named range (``--by``), extended to the end of the GPU work launched inside
it (the contract's GPU projection) and tiled on its thread (contract version 3: the
windows of one ``--by`` selection on one thread never overlap)."""

from __future__ import annotations

import difflib
import fnmatch
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.analysis.launches import Launches
from pytimings.errors import UsageError
from pytimings.ingest.links import project
from pytimings.ingest.names import range_label
from pytimings.model.trace import Trace

I64 = npt.NDArray[np.int64]


@dataclass
class Windows:
    """The windows to partition, one per row: name, [start, end), rank, the thread and
    trace.ranges row of the range it came from (-1 for a whole-trace window)."""

    name: list[str]
    start: I64
    end: I64
    rank: npt.NDArray[np.int16]
    thread: npt.NDArray[np.int32]  # -1 for the whole-trace window
    range_row: I64  # row in trace.ranges, -1 for the whole-trace window


def no_windows() -> Windows:
    """No window to partition (a trace with no GPU ops analysed without ``--by``)."""
    return Windows(
        name=[],
        start=np.empty(0, np.int64),
        end=np.empty(0, np.int64),
        rank=np.empty(0, np.int16),
        thread=np.empty(0, np.int32),
        range_row=np.empty(0, np.int64),
    )


def trace_windows(trace: Trace, launches: Launches, ranks: npt.NDArray[np.int16]) -> Windows:
    """One whole-trace window per rank (API calls that launch nothing don't count)."""
    ops, rg, api = trace.gpu_ops, trace.ranges, trace.api_calls
    launching = np.zeros(len(api), dtype=bool)
    launching[launches.api_row[launches.api_row >= 0]] = True
    launching = np.flatnonzero(launching)
    starts, ends = [], []
    for r in ranks:
        lo, hi = [], []
        for col_s, col_e, mask in (
            (ops["start"], ops["end"], ops["rank"] == r),
            (rg["start"], rg["end"], rg["rank"] == r),
            (api["start"][launching], api["end"][launching], api["rank"][launching] == r),
        ):
            if mask.any():
                lo.append(int(col_s[mask].min()))
                hi.append(int(max(col_e[mask].max(), col_s[mask].max())))
        starts.append(min(lo))
        ends.append(max(hi))
    k = len(ranks)
    return Windows(
        name=["trace"] * k,
        start=np.asarray(starts, dtype=np.int64),
        end=np.asarray(ends, dtype=np.int64),
        rank=np.asarray(ranks, dtype=np.int16),
        thread=np.full(k, -1, dtype=np.int32),
        range_row=np.full(k, -1, dtype=np.int64),
    )


def _range_pairs(trace: Trace) -> tuple[I64, list[str], list[str]]:
    """The distinct (domain, name) pairs of the ranges: each range's pair index, and per
    pair its name and its label as ``summary`` prints it (``domain:name``)."""
    rg = trace.ranges
    key = (rg["domain"].astype(np.int64) << 32) | rg["name"].astype(np.int64)
    uniq, inv = np.unique(key, return_inverse=True)
    bare = [trace.strings[int(k) & 0xFFFFFFFF] for k in uniq]
    labels = [range_label(trace.strings[int(k) >> 32], b) for k, b in zip(uniq, bare, strict=True)]
    return inv.reshape(-1).astype(np.int64), bare, labels


def _matching(pattern: str, bare: list[str], labels: list[str]) -> list[int]:
    """The pairs ``pattern`` names: an exact range name (names may hold ``[``, ``*``,
    ``?`` or ``:``), else an exact ``domain:name`` label, else a glob over both."""
    for names in (bare, labels):
        if pattern in names:
            return [i for i, n in enumerate(names) if n == pattern]
    return [
        i
        for i, (b, lab) in enumerate(zip(bare, labels, strict=True))
        if fnmatch.fnmatchcase(b, pattern) or fnmatch.fnmatchcase(lab, pattern)
    ]


def range_rows(
    trace: Trace, pattern: str, ranks: npt.NDArray[np.int16] | Sequence[int], flag: str = "--by"
) -> I64:
    """The trace.ranges rows on ``ranks`` of the ranges ``pattern`` names
    (:func:`_matching`), with or without their NVTX domain prefix; none named: a
    UsageError naming ``flag`` (the option the user typed) with the closest names."""
    pair, bare, labels = _range_pairs(trace)
    matched = _matching(pattern, bare, labels)
    if not matched:
        names = sorted(set(bare) | set(labels))
        close = difflib.get_close_matches(pattern, names, n=5, cutoff=0.0)
        hint = (
            f"; closest range names: {', '.join(close)}" if close else "; the trace has no ranges"
        )
        raise UsageError(f"{flag} {pattern!r} matches no range{hint}")
    hit = np.zeros(len(bare), dtype=bool)
    hit[matched] = True
    return np.flatnonzero(hit[pair] & np.isin(trace.ranges["rank"], np.asarray(ranks)))


def range_windows(
    trace: Trace, launches: Launches, pattern: str, ranks: npt.NDArray[np.int16]
) -> Windows:
    """One window per instance of the ranges ``pattern`` names (:func:`range_rows`)."""
    rg = trace.ranges
    rows = range_rows(trace, pattern, ranks)
    r_s = rg["start"][rows]
    r_e = np.maximum(rg["end"][rows], r_s)
    r_t = rg["thread"][rows]
    count, _, last, _ = project(trace, launches.api_row, rows, busy=False)
    w_end = np.where(count > 0, np.maximum(last, r_e), r_e)
    names = [trace.strings[i] for i in rg["name"][rows]]
    w_start, w_end = tiled(r_s, w_end, rg["rank"][rows], r_t, names)
    return Windows(
        name=names,
        start=w_start,
        end=w_end,
        rank=rg["rank"][rows].astype(np.int16),
        thread=r_t.astype(np.int32),
        range_row=rows.astype(np.int64),
    )


def tiled(
    start: I64, end: I64, rank: npt.NDArray[Any], thread: npt.NDArray[Any], names: list[str]
) -> tuple[I64, I64]:
    """The windows ``[start, end)`` tiled per (rank, thread): in start order (ties: end,
    name), each starts at the later of its own start and the previous window's end (after
    that window's own clipping); one left with no length gets ``[that end, that end)``.
    Tiled ends are then the running maximum of the ends. Returns (start, end) in the
    input's order."""
    out_s, out_e = start.copy(), end.copy()
    if start.size < 2:
        return out_s, out_e
    name_rank = np.unique(np.asarray(names, dtype=object).astype(str), return_inverse=True)[1]
    order = np.lexsort((name_rank.reshape(-1), end, start, thread, rank))
    s, e = start[order], end[order]
    group = (
        np.flatnonzero(
            (rank[order][1:] != rank[order][:-1]) | (thread[order][1:] != thread[order][:-1])
        )
        + 1
    )
    bounds = np.concatenate([[0], group, [order.size]])
    for lo, hi in itertools.pairwise(bounds.tolist()):
        e_t = np.maximum.accumulate(e[lo:hi])
        s_t = s[lo:hi].copy()
        s_t[1:] = np.maximum(s_t[1:], e_t[:-1])
        out_s[order[lo:hi]] = s_t
        out_e[order[lo:hi]] = e_t
    return out_s, out_e


def window_numbers(
    start: I64,
    rank: npt.NDArray[Any],
    end: I64,
    thread: npt.NDArray[Any],
    tie: npt.NDArray[Any],
    by_range: bool,
) -> I64:
    """Per window entry (one per window and device), the 1-based number of its window: the
    one numbering every output and ``--window N`` use. ``--by`` windows in start order
    (ties: rank, end, thread, then ``tie``, the windows' order before sorting), whole-trace
    windows by rank; the entries of one window share every key, and its number."""
    keys = (tie, thread, end, rank, start) if by_range else (tie, rank)
    order = np.lexsort(keys)
    out = np.empty(order.size, dtype=np.int64)
    if order.size == 0:
        return out
    k = np.stack([np.asarray(c, dtype=np.int64)[order] for c in keys])
    first = np.ones(order.size, dtype=bool)
    first[1:] = np.any(k[:, 1:] != k[:, :-1], axis=0)
    out[order] = np.cumsum(first)
    return out
