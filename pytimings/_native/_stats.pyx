# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3, autotestdict=False
"""Group-by statistics in one pass: count, sum, max and percentiles per key.

The input is sorted by (key, value) once by the caller (``numpy.lexsort``); this kernel
then walks each run of equal keys exactly once. Percentiles use linear interpolation
between order statistics with numpy's formula (``numpy.quantile(..., method="linear")``,
including its lerp that is exact at both ends), so results agree with numpy bit for bit.
The Python twin is ``pytimings.analysis.grouped.grouped_stats_numpy``.
"""

import numpy as np

from libc.math cimport floor


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
