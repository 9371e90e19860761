"""Nesting depth of ranges on their threads (no Python loop per range).

Used by every loader that produces ranges (NVTX push/pop and start/end, annotations).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pytimings._native._kernels import open_ranges


def nesting_depth(
    thread: npt.ArrayLike, start: npt.ArrayLike, end: npt.ArrayLike
) -> npt.NDArray[np.int32]:
    """For each range, how many ranges of its thread are open when it starts.

    Ranges are ordered by (start, longer first, input order); a range ``j`` before ``i``
    encloses ``i`` unless it ended at or before ``i`` starts. For properly nested ranges
    (NVTX push/pop) this is the push/pop stack depth, 0 = outermost; for overlapping
    ranges (start/end) it counts the ranges still open.
    """
    th = np.ascontiguousarray(thread, dtype=np.int64)
    s = np.ascontiguousarray(start, dtype=np.int64)
    e = np.ascontiguousarray(end, dtype=np.int64)
    n = len(s)
    if n == 0:
        return np.empty(0, dtype=np.int32)
    # loaders usually hand ranges over in start order already: then no sort is needed
    step = s[1:] - s[:-1]
    if bool(np.all((step > 0) | ((step == 0) & (e[1:] <= e[:-1])))):
        order = np.arange(n, dtype=np.int64)
    else:
        order = np.lexsort((-e, s))  # stable: input order breaks the remaining ties
    if int(th.min()) != int(th.max()):
        order = order[np.argsort(th[order], kind="stable")]
    depth = open_ranges(e, s, order, th)
    return depth.astype(np.int32)  # n ranges nest at most n - 1 deep: int32 always holds it
