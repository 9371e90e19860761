# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3, autotestdict=False
"""A compiled sortedness check, which lets the launch link (``pytimings.ingest.links``)
skip a sort of 10^7 correlation ids that are usually in order already. Typed memoryviews
only."""

def is_sorted_i64(const long long[::1] a) -> bool:
    """True when ``a`` is non-decreasing."""
    cdef Py_ssize_t i
    for i in range(1, a.shape[0]):
        if a[i] < a[i - 1]:
            return False
    return True
