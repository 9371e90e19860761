# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3, autotestdict=False
"""Group-by statistics in one pass: count, sum, max and percentiles per key.

The input is sorted by (key, value) once by the caller (``numpy.lexsort``); this kernel
then walks each run of equal keys exactly once. Percentiles use linear interpolation
between order statistics with numpy's formula (``numpy.quantile(..., method="linear")``,
including its lerp that is exact at both ends), so results agree with numpy bit for bit.
The Python twin is ``pytimings.analysis.grouped.grouped_stats_numpy``.

Also exact per-group integer sums and a hashing ``numpy.unique`` for keys with few distinct
values (the per-op table: one pass over 10^7 GPU ops instead of a sort).
"""

import numpy as np

from libc.math cimport floor
from libc.stdlib cimport free, malloc


cdef inline double _lerp(long long a, long long b, double t) noexcept nogil:
    # numpy's _lerp on integer order statistics: the difference is taken in integers, then
    # a + (b-a)*t, or b - (b-a)*(1-t) for t >= 0.5 (exact at both ends)
    cdef double d = <double>(b - a)
    if t >= 0.5:
        return <double>b - d * (1.0 - t)
    return <double>a + d * t


def grouped_stats_sorted(
    const long long[::1] keys,
    const long long[::1] values,
    const double[::1] qs,
):
    """Per run of equal ``keys``: (key, count, sum, max, quantiles[len(qs)]).

    ``keys`` must be non-decreasing and ``values`` non-decreasing within each key.
    Returns ``(keys, counts, sums, maxs, quantiles)`` as numpy arrays; sums are exact int64,
    ``quantiles`` has shape ``(ngroups, len(qs))``.
    """
    cdef Py_ssize_t n = keys.shape[0]
    if values.shape[0] != n:
        raise ValueError("keys and values differ in length")
    cdef Py_ssize_t nq = qs.shape[0]
    cdef Py_ssize_t j
    for j in range(nq):
        if not (0.0 <= qs[j] <= 1.0):
            raise ValueError("quantiles must lie in [0, 1]")
    cdef Py_ssize_t i, ngroups = 0
    for i in range(n):
        if i == 0 or keys[i] != keys[i - 1]:
            ngroups += 1
        elif values[i] < values[i - 1]:
            raise ValueError("values are not sorted within their key")
        if i > 0 and keys[i] < keys[i - 1]:
            raise ValueError("keys are not sorted")

    out_keys_a = np.empty(ngroups, dtype=np.int64)
    counts_a = np.empty(ngroups, dtype=np.int64)
    sums_a = np.empty(ngroups, dtype=np.int64)
    maxs_a = np.empty(ngroups, dtype=np.int64)
    quant_a = np.empty((ngroups, nq), dtype=np.float64)
    cdef long long[::1] out_keys = out_keys_a
    cdef long long[::1] counts = counts_a
    cdef long long[::1] sums = sums_a
    cdef long long[::1] maxs = maxs_a
    cdef double[:, ::1] quant = quant_a

    cdef Py_ssize_t g = 0, lo = 0, hi, m, below
    cdef long long s
    cdef double h, t
    with nogil:
        while lo < n:
            hi = lo + 1
            s = values[lo]
            while hi < n and keys[hi] == keys[lo]:
                s += values[hi]
                hi += 1
            m = hi - lo
            out_keys[g] = keys[lo]
            counts[g] = m
            sums[g] = s
            maxs[g] = values[hi - 1]
            for j in range(nq):
                h = qs[j] * <double>(m - 1)  # numpy's virtual index for method="linear"
                below = <Py_ssize_t>floor(h)
                if below >= m - 1:
                    quant[g, j] = <double>values[hi - 1]
                else:
                    t = h - <double>below
                    quant[g, j] = _lerp(values[lo + below], values[lo + below + 1], t)
            g += 1
            lo = hi
    return out_keys_a, counts_a, sums_a, maxs_a, quant_a


def group_sums(const long long[::1] group, const long long[::1] values, Py_ssize_t n):
    """Per group id in ``[0, n)``: the exact integer sum of its ``values``, in one pass."""
    cdef Py_ssize_t i
    if values.shape[0] != group.shape[0]:
        raise ValueError("group_sums: group and values differ in length")
    for i in range(group.shape[0]):
        if group[i] < 0 or group[i] >= n:
            raise ValueError("group_sums: a group id is out of range")
    out_arr = np.zeros(n, dtype=np.int64)
    cdef long long[::1] out = out_arr
    with nogil:
        for i in range(group.shape[0]):
            out[group[i]] += values[i]
    return out_arr


cdef inline Py_ssize_t _slot(unsigned long long k, Py_ssize_t cap) noexcept nogil:
    return <Py_ssize_t>(((k * 0x9E3779B97F4A7C15ULL) >> 17) & <unsigned long long>(cap - 1))


def factorize(const long long[::1] keys, bint inverse=True):
    """``numpy.unique(keys, return_inverse=True)`` for keys >= 0 with few distinct values,
    by hashing instead of sorting every key: (sorted distinct keys, each key's index into
    them; empty without ``inverse``)."""
    cdef Py_ssize_t n = keys.shape[0], i, j, cap = 1024, used = 0, nu
    cdef long long k
    cdef long long* tab = NULL
    cdef long long* code = NULL
    cdef long long* grown_t
    cdef long long* grown_c
    for i in range(n):
        if keys[i] < 0:
            raise ValueError("factorize: keys must be >= 0")
    inv_arr = np.empty(n if inverse else 0, dtype=np.int64)
    cdef long long[::1] inv = inv_arr
    tab = <long long*>malloc(cap * sizeof(long long))
    code = <long long*>malloc(cap * sizeof(long long))
    if tab == NULL or code == NULL:
        free(tab)
        free(code)
        raise MemoryError()
    try:
        for j in range(cap):
            tab[j] = -1
        with nogil:
            for i in range(n):
                k = keys[i]
                j = _slot(k, cap)
                while tab[j] >= 0 and tab[j] != k:
                    j = (j + 1) & (cap - 1)
                if tab[j] < 0:
                    tab[j] = k
                    code[j] = used
                    used += 1
                    if 2 * used > cap:  # grow: rehash every key
                        grown_t = <long long*>malloc(2 * cap * sizeof(long long))
                        grown_c = <long long*>malloc(2 * cap * sizeof(long long))
                        if grown_t == NULL or grown_c == NULL:
                            free(grown_t)
                            free(grown_c)
                            used = -1
                            break
                        for j in range(2 * cap):
                            grown_t[j] = -1
                        for j in range(cap):
                            if tab[j] >= 0:
                                nu = _slot(tab[j], 2 * cap)
                                while grown_t[nu] >= 0:
                                    nu = (nu + 1) & (2 * cap - 1)
                                grown_t[nu] = tab[j]
                                grown_c[nu] = code[j]
                        free(tab)
                        free(code)
                        tab, code, cap = grown_t, grown_c, 2 * cap
                        j = _slot(k, cap)
                        while tab[j] != k:
                            j = (j + 1) & (cap - 1)
                if inverse:
                    inv[i] = code[j]
        if used < 0:
            raise MemoryError()
        first_arr = np.empty(used, dtype=np.int64)  # distinct keys by first appearance
        for j in range(cap):
            if tab[j] >= 0:
                first_arr[code[j]] = tab[j]
    finally:
        free(tab)
        free(code)
    order = np.argsort(first_arr, kind="stable")
    uniq = first_arr[order]
    if not inverse:
        return uniq, inv_arr
    rank_arr = np.empty(used, dtype=np.int64)
    rank_arr[order] = np.arange(used, dtype=np.int64)
    cdef const long long[::1] rank = rank_arr
    with nogil:  # codes by first appearance -> indices into the sorted keys, in place
        for i in range(n):
            inv[i] = rank[inv[i]]
    return uniq, inv_arr


def distinct_counts(const long long[::1] item, const long long[::1] group, Py_ssize_t n_items,
                    Py_ssize_t n_groups):
    """Per group id in ``[0, n_groups)``: how many distinct ``item`` values (in ``[0,
    n_items)``) it has, each item counted in the group of its first appearance."""
    cdef Py_ssize_t i
    if item.shape[0] != group.shape[0]:
        raise ValueError("distinct_counts: item and group differ in length")
    for i in range(item.shape[0]):
        if item[i] < 0 or item[i] >= n_items or group[i] < 0 or group[i] >= n_groups:
            raise ValueError("distinct_counts: an item or group id is out of range")
    out_arr = np.zeros(n_groups, dtype=np.int64)
    seen_arr = np.zeros(n_items, dtype=np.uint8)
    cdef long long[::1] out = out_arr
    cdef unsigned char[::1] seen = seen_arr
    with nogil:
        for i in range(item.shape[0]):
            if not seen[item[i]]:
                seen[item[i]] = 1
                out[group[i]] += 1
    return out_arr
