# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3, autotestdict=False
"""Compiled analysis kernels (interval algebra, statistics). Typed memoryviews only."""

def is_sorted_i64(const long long[::1] a) -> bool:
    """True when ``a`` is non-decreasing."""
    cdef Py_ssize_t i
    for i in range(1, a.shape[0]):
        if a[i] < a[i - 1]:
            return False
    return True
