# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3, autotestdict=False
"""Small compiled loops for the loaders: a sortedness check, which lets the launch link
(``pytimings.ingest.links``) skip a sort of 10^7 correlation ids that are usually in order
already, and the open-range count behind ``pytimings.ingest._nesting``. Typed memoryviews
only."""

from libc.stdlib cimport malloc, free

import numpy as np


def is_sorted_i64(const long long[::1] a) -> bool:
    """True when ``a`` is non-decreasing."""
    cdef Py_ssize_t i
    for i in range(1, a.shape[0]):
        if a[i] < a[i - 1]:
            return False
    return True


def open_ranges(
    const long long[::1] end,
    const long long[::1] start,
    const long long[::1] order,
    const long long[::1] group,
):
    """For each range, the number of ranges before it in ``order`` (within its run of equal
    ``group`` values along ``order``) that are still open when it starts (end > start).

    ``order`` must visit each group's ranges by start; a min-heap of open ends makes this
    O(n log depth). Returns int64 counts indexed like the inputs.
    """
    cdef Py_ssize_t n = order.shape[0], k, i, size = 0, pos, child
    cdef long long s, e, last
    if end.shape[0] != n or start.shape[0] != n or group.shape[0] != n:
        raise ValueError("open_ranges: arrays differ in length")
    out = np.empty(n, dtype=np.int64)
    cdef long long[::1] o = out
    if n == 0:
        return out
    cdef long long *heap = <long long *>malloc(n * sizeof(long long))
    if heap == NULL:
        raise MemoryError()
    with nogil:
        for k in range(n):
            i = order[k]
            if k and group[i] != group[order[k - 1]]:
                size = 0
            s = start[i]
            while size and heap[0] <= s:  # pop every range that ended by s
                size -= 1
                last = heap[size]
                pos = 0
                while True:
                    child = 2 * pos + 1
                    if child >= size:
                        break
                    if child + 1 < size and heap[child + 1] < heap[child]:
                        child += 1
                    if heap[child] >= last:
                        break
                    heap[pos] = heap[child]
                    pos = child
                heap[pos] = last
            o[i] = size
            e = end[i]
            pos = size  # push e
            size += 1
            while pos:
                child = (pos - 1) // 2  # the parent
                if heap[child] <= e:
                    break
                heap[pos] = heap[child]
                pos = child
            heap[pos] = e
    free(heap)
    return out
