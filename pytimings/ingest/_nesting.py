"""Nesting depth of ranges on their threads, vectorised (no Python loop per range).

Used by every loader that produces ranges (NVTX push/pop and start/end, annotations).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def nesting_depth(
    thread: npt.ArrayLike, start: npt.ArrayLike, end: npt.ArrayLike
) -> npt.NDArray[np.int16]:
    """For each range, how many ranges of its thread are open when it starts.

    Ranges are ordered by (start, longer first, input order); a range ``j`` before ``i``
    encloses ``i`` unless it ended at or before ``i`` starts. For properly nested ranges
    (NVTX push/pop) this is the push/pop stack depth, 0 = outermost; for overlapping
    ranges (start/end) it counts the ranges still open.
    """
    th = np.asarray(thread, dtype=np.int64)
    s = np.asarray(start, dtype=np.int64)
    e = np.asarray(end, dtype=np.int64)
    n = len(s)
    if n == 0:
        return np.empty(0, dtype=np.int16)
    # dense ranks of all instants, so that (thread group, instant) packs into one int64
    instants = np.unique(np.concatenate([s, e]))
    m = len(instants) + 1
    rs = np.searchsorted(instants, s).astype(np.int64)
    re = np.searchsorted(instants, e).astype(np.int64)
    _, g = np.unique(th, return_inverse=True)
    g = g.reshape(-1).astype(np.int64) * m
    order = np.lexsort((np.arange(n), -re, rs, g))
    key_s = (g + rs)[order]  # sorted
    q = np.empty(n, dtype=np.int64)
    q[order] = np.arange(n)
    group_start = np.searchsorted(key_s, g, side="left")
    ends = np.sort(g + re)
    ended = np.searchsorted(ends, g + rs, side="right") - np.searchsorted(ends, g, side="left")
    # zero-length ranges at the same instant sort after longer ones and must not count as
    # ended-before for the ranges ahead of them in that order
    zero = np.sort((g + rs)[s == e])
    zcount = np.searchsorted(zero, g + rs, side="right") - np.searchsorted(
        zero, g + rs, side="left"
    )
    block_end = np.searchsorted(key_s, g + rs, side="right")
    after = np.minimum(zcount, block_end - q - 1)
    # a zero-length range counted itself among the ranges ended by its start
    depth: npt.NDArray[np.int64] = (q - group_start) - ended + after + (s == e)
    if int(depth.max()) > np.iinfo(np.int16).max:
        raise ValueError(f"ranges nest {int(depth.max())} deep; the model holds depths < 32768")
    return depth.astype(np.int16)
