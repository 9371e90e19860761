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


cdef inline Py_ssize_t _first_ge_from(const long long* a, Py_ssize_t n, long long v,
                                      Py_ssize_t h) noexcept nogil:
    """The least i with a[i] >= v (n when none; a ascending), searched outwards from the
    hint h: keys that come in order are found in a step or two."""
    cdef Py_ssize_t lo, hi, mid, step = 1
    if h > n:
        h = n
    if h < n and a[h] < v:  # the answer is after h
        lo = h + 1
        hi = lo
        while hi < n and a[hi] < v:
            lo = hi + 1
            hi += step
            step <<= 1
        if hi > n:
            hi = n
    else:  # h is an answer: is an earlier one?
        hi = h
        lo = h - 1
        while lo >= 0 and a[lo] >= v:
            hi = lo
            lo -= step
            step <<= 1
        lo = lo + 1 if lo >= 0 else 0
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


def join_sorted(const long long[::1] keys, rows, const long long[::1] q_key,
                const long long[::1] q_id):
    """Per query ``i``: ``rows[j]`` (``j`` itself when ``rows`` is None) for the ``j`` with
    ``keys[j] == q_key[i]`` (``keys`` ascending and distinct), or -1 when none or when
    ``q_id[i] < 0``. Each search starts from the previous answer: queries in key order
    cost a step or two each. Returns (the rows, how many queries with ``q_id >= 0``
    found none)."""
    cdef Py_ssize_t n = keys.shape[0], nq = q_key.shape[0], i, h = 0
    cdef const long long[::1] rw
    cdef const long long* rp = NULL
    cdef const long long* kp = &keys[0] if n else NULL
    cdef long long missed = 0
    if q_id.shape[0] != nq:
        raise ValueError("join_sorted: query columns differ in length")
    if rows is not None:
        rw = rows
        if rw.shape[0] != n:
            raise ValueError("join_sorted: rows and keys differ in length")
        rp = &rw[0] if n else NULL
    out_arr = np.empty(nq, dtype=np.int64)
    cdef long long[::1] out = out_arr
    with nogil:
        for i in range(nq):
            if q_id[i] < 0:
                out[i] = -1
                continue
            h = _first_ge_from(kp, n, q_key[i], h)
            if h < n and kp[h] == q_key[i]:
                out[i] = rp[h] if rp != NULL else h
            else:
                out[i] = -1
                missed += 1
    return out_arr, missed
