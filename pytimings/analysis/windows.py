"""The windows the partition is computed over: one whole-trace window per rank, or one per
instance of a named range (``--by``), extended to the end of the GPU work launched inside
it (the contract's GPU projection)."""

from __future__ import annotations

import difflib
import fnmatch
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pytimings.analysis.classes import string_mask
from pytimings.analysis.launches import Launches
from pytimings.errors import UsageError
from pytimings.ingest.links import project
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


def range_names(trace: Trace) -> list[str]:
    ids = np.unique(trace.ranges["name"])
    return sorted({trace.strings[i] for i in ids})


def range_windows(
    trace: Trace, launches: Launches, pattern: str, ranks: npt.NDArray[np.int16]
) -> Windows:
    """One window per instance of the ranges named ``pattern``: that exact name when the
    trace has it (names may hold ``[``, ``*``, ``?``), else a glob."""
    rg = trace.ranges
    names = range_names(trace)
    if pattern in names:
        matched = [pattern]
    else:
        matched = [s for s in names if fnmatch.fnmatchcase(s, pattern)]
    if not matched:
        close = difflib.get_close_matches(pattern, names, n=5, cutoff=0.0)
        hint = (
            f"; closest range names: {', '.join(close)}" if close else "; the trace has no ranges"
        )
        raise UsageError(f"--by {pattern!r} matches no range{hint}")
    ids = string_mask(trace.strings, lambda s: s in set(matched))
    rows = np.flatnonzero(ids[rg["name"]] & np.isin(rg["rank"], ranks))
    r_s = rg["start"][rows]
    r_e = np.maximum(rg["end"][rows], r_s)
    r_t = rg["thread"][rows]
    count, _, last, _ = project(trace, launches.api_row, rows)
    w_end = np.where(count > 0, np.maximum(last, r_e), r_e)
    return Windows(
        name=[trace.strings[i] for i in rg["name"][rows]],
        start=r_s,
        end=w_end,
        rank=rg["rank"][rows].astype(np.int16),
        thread=r_t.astype(np.int32),
        range_row=rows.astype(np.int64),
    )
