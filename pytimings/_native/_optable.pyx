# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3, autotestdict=False
"""Per-op attribution kernels (:mod:`pytimings.analysis.op_launch`,
:mod:`pytimings.analysis.op_table`): each reads the GPU-op and host columns in place, one
compiled pass per question, so that the op table of 10^7 GPU ops allocates its outputs
(int32 rows where they fit) and 4 bytes per sorted row, not chains of 10^7-row temporaries
(on a VM, memory a process touches for the first time costs more than the arithmetic).

Orders are by ``(group, start, row)``: rows already in few sorted runs are merged in place
(no order at all); others are put in int32 rows, nearly sorted ones by insertion into a few
sorted segments merged on the fly (:func:`_near_order`: a row a few places out of order, a
launch call whose start jitters, moves back those places), the rest by a bucket sort
(:func:`_bucket_order`: a count and a placement pass over the top bits of the key, then each
small bucket sorted by key), which for fewer than 2**31 rows replaces one sort of packed
8-byte keys (kept for larger tables and keys wider than 64 bits).
"""

import threading

cimport cython

import numpy as np

from libc.stdint cimport INT32_MAX, INT64_MAX, INT64_MIN, int8_t, int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc


cdef inline int _bits(uint64_t span) noexcept nogil:
    """The bits that hold values in [0, span]."""
    cdef int b = 0
    while b < 64 and (span >> b) != 0:
        b += 1
    return b


cdef inline bint _out(const uint8_t* keep, uint8_t bit, Py_ssize_t r) noexcept nogil:
    """Row r is not kept: kept rows are those with ``keep[r] & bit`` nonzero (every row
    when ``keep`` is NULL)."""
    return keep != NULL and not (keep[r] & bit)


cdef struct KR:  # a row and its sort key
    uint64_t k
    int32_t r


cdef void _sort_kr(KR* a, KR* tmp, Py_ssize_t m) noexcept nogil:
    """Sort a[0:m] by key, stably: insertion sorts of 16-row runs, then bottom-up merges
    between ``a`` and ``tmp`` (m entries); the result is left in ``a``."""
    cdef Py_ssize_t i, j, lo, mid, hi, w = 16, x, y, o
    cdef KR v
    cdef KR* src = a
    cdef KR* dst = tmp
    cdef KR* sw
    lo = 0
    while lo < m:
        hi = lo + w if lo + w < m else m
        for i in range(lo + 1, hi):
            v = a[i]
            j = i
            while j > lo and a[j - 1].k > v.k:
                a[j] = a[j - 1]
                j -= 1
            a[j] = v
        lo += w
    while w < m:
        lo = 0
        while lo < m:
            mid = lo + w if lo + w < m else m
            hi = lo + 2 * w if lo + 2 * w < m else m
            x, y, o = lo, mid, lo
            while x < mid and y < hi:
                if src[y].k < src[x].k:
                    dst[o] = src[y]
                    y += 1
                else:
                    dst[o] = src[x]
                    x += 1
                o += 1
            while x < mid:
                dst[o] = src[x]
                x += 1
                o += 1
            while y < hi:
                dst[o] = src[y]
                y += 1
                o += 1
            lo += 2 * w
        sw = src
        src = dst
        dst = sw
        w *= 2
    if src != a:
        for i in range(m):
            a[i] = src[i]


cdef inline uint64_t _key(const int64_t* start, const int32_t* group, Py_ssize_t r,
                          int64_t s_lo, int64_t g_lo, int s_bits) noexcept nogil:
    cdef uint64_t k = <uint64_t>start[r] - <uint64_t>s_lo
    if group != NULL:
        k |= <uint64_t>(<int64_t>group[r] - g_lo) << s_bits
    return k


cdef bint _bucket_order(const int64_t* start, const int32_t* group, const uint8_t* keep,
                        uint8_t bit, Py_ssize_t n_all, Py_ssize_t n, int64_t s_lo, int64_t g_lo,
                        int s_bits, int g_bits, int32_t[::1] out) except -1:
    """``_order`` by a bucket sort into ``out`` (the n kept rows, int32: 4 bytes a row, the
    only memory of the size of the table), for fewer than 2**31 rows: the kept rows
    counted into about n / 8 buckets of their (group, start) key's top bits, placed bucket
    by bucket in row order, then each bucket sorted by key, stably (rows in a bucket stay in
    row order among equal keys). False when few buckets hold most rows."""
    cdef int kb = s_bits + g_bits, bb = _bits(<uint64_t>n) - 3, shift
    cdef Py_ssize_t r, b, nb, lo, hi, m, big = 0, i
    cdef int32_t c, t
    cdef uint64_t k
    cdef KR small[16]
    cdef KR v
    cdef KR* buf = NULL
    cdef KR* tmp = NULL
    if bb > kb:
        bb = kb
    if bb > 24:
        bb = 24
    if bb < 0:
        bb = 0
    shift = kb - bb
    nb = <Py_ssize_t>1 << bb
    count_arr = np.zeros(nb + 1, dtype=np.int32)
    cdef int32_t[::1] count = count_arr
    with nogil:
        for r in range(n_all):  # bucket sizes, at count[b + 1]
            if _out(keep, bit, r):
                continue
            k = _key(start, group, r, s_lo, g_lo, s_bits)
            b = <Py_ssize_t>(k >> shift) if shift < 64 else 0
            count[b + 1] += 1
        for b in range(nb):  # count[b + 1]: where bucket b starts
            if count[b + 1] > big:
                big = count[b + 1]
            count[b + 1] += count[b]
        for r in range(n_all):  # afterwards count[b]: where bucket b ends
            if _out(keep, bit, r):
                continue
            k = _key(start, group, r, s_lo, g_lo, s_bits)
            b = <Py_ssize_t>(k >> shift) if shift < 64 else 0
            out[count[b]] = <int32_t>r
            count[b] += 1
    if big > 65536 and big > n >> 3:
        return False  # few buckets hold most rows: the caller sorts keys instead
    if big > 16:
        buf = <KR*>malloc(2 * big * sizeof(KR))
        if buf == NULL:
            raise MemoryError()
        tmp = buf + big
    with nogil:
        lo = 0
        for b in range(nb):
            hi = count[b]
            m = hi - lo
            if m > 16:
                for i in range(m):
                    buf[i].r = out[lo + i]
                    buf[i].k = _key(start, group, out[lo + i], s_lo, g_lo, s_bits)
                _sort_kr(buf, tmp, m)
                for i in range(m):
                    out[lo + i] = buf[i].r
            elif m > 1:  # an insertion sort, stable
                for i in range(m):
                    small[i].r = out[lo + i]
                    small[i].k = _key(start, group, out[lo + i], s_lo, g_lo, s_bits)
                    t = <int32_t>i
                    while t > 0 and small[t - 1].k > small[t].k:
                        v = small[t]
                        small[t] = small[t - 1]
                        small[t - 1] = v
                        t -= 1
                for i in range(m):
                    out[lo + i] = small[i].r
            lo = hi
    free(buf)
    return True


cdef enum:
    _MAX_RUNS = 64  # more runs (or sorted segments) than this: one sort instead
    _LAG = 64  # a row sorted this many places back begins a new sorted segment (a power of 2)


cdef struct Keys:  # (group, start) packed: (group - g_lo) << s_bits | (start - s_lo)
    int64_t s_lo
    int64_t g_lo
    int s_bits


cdef inline bint _after(const int64_t* s_ring, const int32_t* g_ring, Py_ssize_t i,
                        int64_t s, int32_t g) noexcept nogil:
    """The row at place i (its start and group in the rings) sorts after (g, s)."""
    i &= _LAG - 1
    return g_ring[i] > g or (g_ring[i] == g and s_ring[i] > s)


cdef Py_ssize_t _near_order(const int64_t* start, const int32_t* group, const uint8_t* keep,
                            uint8_t bit, Py_ssize_t n_all, int32_t* out, int64_t* bounds) noexcept nogil:
    """The kept rows into ``out`` in segments of consecutive kept rows, each sorted by
    (group, start, row) by insertion: a row goes fewer than _LAG places back among its
    segment's rows (compared with the last _LAG placed, kept in rings), else it begins the
    next segment. Rows nearly in that order (a loader's table in time order; launch calls
    whose starts jitter by a few calls; nesting levels one after another) are sorted in one
    pass of a few comparisons a row. Returns the number of segments (their starts in
    ``bounds``, then the end), or -1 past _MAX_RUNS."""
    cdef Py_ssize_t r, i, first, n = 0, lo = 0, ns = 0
    cdef int64_t s
    cdef int32_t g = 0
    cdef int64_t s_ring[_LAG]  # the start and group of the row at place i of out (one of
    cdef int32_t g_ring[_LAG]  # the last _LAG) at [i % _LAG]
    bounds[0] = 0
    for r in range(n_all):
        if _out(keep, bit, r):
            continue
        s = start[r]
        if group != NULL:
            g = group[r]
        i = n
        if n > lo and _after(s_ring, g_ring, n - 1, s, g):  # out of order: insert it
            first = n - _LAG + 1  # the first place r may take
            if first > lo and _after(s_ring, g_ring, first - 1, s, g):
                ns += 1
                if ns == _MAX_RUNS:
                    return -1
                bounds[ns] = lo = n
            else:
                if first < lo:
                    first = lo
                while i > first and _after(s_ring, g_ring, i - 1, s, g):
                    out[i] = out[i - 1]
                    s_ring[i & (_LAG - 1)] = s_ring[(i - 1) & (_LAG - 1)]
                    g_ring[i & (_LAG - 1)] = g_ring[(i - 1) & (_LAG - 1)]
                    i -= 1
        out[i] = <int32_t>r
        s_ring[i & (_LAG - 1)] = s
        g_ring[i & (_LAG - 1)] = g
        n += 1
    bounds[ns + 1] = n
    return ns + 1 if n else 0


cdef bint _by_group(const int32_t* group, const int32_t* rows, Py_ssize_t n,
                    int32_t* out) noexcept nogil:
    """``rows[0:n]`` (in (start, row) order) put stably by group into ``out``: (group,
    start, row) order, in a count and a placement pass. False (``out`` untouched) where
    the groups span more values than there are rows (or memory is short)."""
    cdef Py_ssize_t i, span
    cdef int32_t g_lo = INT32_MAX, g_hi = -INT32_MAX - 1
    cdef int64_t* at
    cdef int64_t c, run = 0
    for i in range(n):
        if group[rows[i]] < g_lo:
            g_lo = group[rows[i]]
        if group[rows[i]] > g_hi:
            g_hi = group[rows[i]]
    if n == 0 or <int64_t>g_hi - g_lo >= n:
        return n == 0
    span = <Py_ssize_t>(<int64_t>g_hi - g_lo + 1)
    at = <int64_t*>calloc(span, sizeof(int64_t))
    if at == NULL:
        return False
    for i in range(n):
        at[group[rows[i]] - g_lo] += 1
    for i in range(span):  # each group's first place
        c = at[i]
        at[i] = run
        run += c
    for i in range(n):
        out[at[group[rows[i]] - g_lo]] = rows[i]
        at[group[rows[i]] - g_lo] += 1
    free(at)
    return True


cdef object _order(const int64_t[::1] start, const int32_t* group, const uint8_t* keep,
                   uint8_t bit, Py_ssize_t n_all, int64_t* bounds, Py_ssize_t* n_seg, Keys* kb,
                   object buf=None):
    """The rows ``r`` (:func:`_out` not) in segments
    each ordered by (``group[r]`` when given, ``start[r]``, r), ``n_seg`` of them (their
    starts in ``bounds``, then the end; more than one only where the packed keys ``kb``
    fit, set then): an int32 array, sorted by insertion into few segments
    (:func:`_near_order`), or where the groups interleave (several threads' rows in start
    order) by start alone and then stably by group (:func:`_by_group`), or else by a
    bucket sort (:func:`_bucket_order`) when the rows
    and the (group, start) keys fit, else an int64 array: one sort of packed (group, start,
    row) keys where they fit in 64 bits, else a stable argsort of packed (group, start)
    keys (16 more bytes a row), else numpy's lexsort. ``buf``: an int32 array of at least
    as many places as kept rows that the int32 orders are written to (None: one of
    ``n_all`` places, of which those of the kept rows are touched)."""
    cdef Py_ssize_t r, n = 0, i = 0, k = -1
    cdef int64_t s_lo = INT64_MAX, s_hi = INT64_MIN
    cdef int64_t g_lo = INT64_MAX, g_hi = INT64_MIN
    cdef int p_bits, s_bits, g_bits = 0
    cdef uint64_t m
    cdef int32_t[::1] out, by_start
    cdef bint done = False
    if 0 < n_all < INT32_MAX:
        out_arr = np.empty(n_all, dtype=np.int32) if buf is None else buf
        out = out_arr
        with nogil:
            k = _near_order(&start[0], group, keep, bit, n_all, &out[0], bounds)
        if 0 <= k <= 1:
            n_seg[0] = k
            return out_arr[: bounds[k]]
        if k < 0 and group != NULL:  # rows of several groups interleaved in start order
            # (a loader's table of several threads): ordered by start alone, then stably
            # by group
            by_start_arr = np.empty(n_all, dtype=np.int32)  # only the kept rows' places
            by_start = by_start_arr
            with nogil:
                k = _near_order(&start[0], NULL, keep, bit, n_all, &by_start[0], bounds)
                done = 0 <= k <= 1 and _by_group(group, &by_start[0], bounds[k], &out[0])
            if done:
                n_seg[0] = k
                return out_arr[: bounds[k]]
            k = -1
    with nogil:
        for r in range(n_all):
            if _out(keep, bit, r):
                continue
            n += 1
            if start[r] < s_lo:
                s_lo = start[r]
            if start[r] > s_hi:
                s_hi = start[r]
            if group != NULL:
                if group[r] < g_lo:
                    g_lo = group[r]
                if group[r] > g_hi:
                    g_hi = group[r]
    n_seg[0] = 1 if n else 0
    if n == 0:
        bounds[0] = bounds[1] = 0
        return np.empty(0, dtype=np.int64)
    p_bits = _bits(<uint64_t>(n_all - 1))
    s_bits = _bits(<uint64_t>s_hi - <uint64_t>s_lo)
    if group != NULL:
        g_bits = _bits(<uint64_t>(g_hi - g_lo))
    kb.s_lo, kb.g_lo, kb.s_bits = s_lo, g_lo, s_bits
    if s_bits + g_bits <= 64 and k > 1:
        n_seg[0] = k
        return out_arr[:n]
    bounds[0], bounds[1] = 0, n
    if s_bits + g_bits <= 64 and n_all < INT32_MAX:
        if _bucket_order(&start[0], group, keep, bit, n_all, n, s_lo, g_lo, s_bits, g_bits, out):
            return out_arr[:n]
    if s_bits + g_bits > 64:
        rows = np.arange(n_all) if keep == NULL else np.flatnonzero(
            np.asarray(<const uint8_t[:n_all]>keep) & bit)
        s_col = np.asarray(start)[rows]
        if group == NULL:
            return rows[np.argsort(s_col, kind="stable")]
        g_col = np.asarray(<const int32_t[:n_all]>group)[rows]
        return rows[np.lexsort((s_col, g_col))]
    cdef bint packed = p_bits + s_bits + g_bits <= 64  # else a stable argsort keeps ties
    keys_arr = np.empty(n, dtype=np.uint64)
    cdef uint64_t[::1] keys = keys_arr
    with nogil:
        for r in range(n_all):
            if _out(keep, bit, r):
                continue
            m = <uint64_t>start[r] - <uint64_t>s_lo
            if group != NULL:
                m |= <uint64_t>(<int64_t>group[r] - g_lo) << s_bits
            keys[i] = (m << p_bits) | <uint64_t>r if packed else m
            i += 1
    if not packed:
        pos_arr = np.argsort(keys_arr, kind="stable")
        if keep == NULL:
            return pos_arr
        pos_to_row = np.flatnonzero(np.asarray(<const uint8_t[:n_all]>keep) & bit)
        return pos_to_row[pos_arr]
    keys_arr.sort(kind="stable")  # distinct keys: any sort gives this order
    m = (<uint64_t>1 << p_bits) - 1
    with nogil:
        for i in range(n):
            keys[i] = keys[i] & m
    return keys_arr.view(np.int64)


cdef const void* _data(object col, Py_ssize_t n, object dtype, str what) except? NULL:
    """The data of an optional C-contiguous column of ``n`` values of ``dtype`` (a uint8
    mask, an int32 column; None: NULL)."""
    cdef const uint8_t[::1] b
    if col is None:
        return NULL
    if col.dtype != dtype or col.shape != (n,):
        raise ValueError(f"{what}: expected {n} values of {np.dtype(dtype)}")
    b = col.view(np.uint8)
    return &b[0] if n else NULL


# Rows in (group, start, row) order ((start, row) without a group), merged on the fly from
# a few runs: runs of consecutive kept rows already in that order, read in place (no sorted
# copy), or the sorted segments of an order (:func:`_order`). ``head``: the next row (-1:
# none).
cdef struct Runs:
    const int64_t* order  # the order (int64 or int32 rows; both NULL: runs in place)
    const int32_t* order32
    const int64_t* start
    const int32_t* group  # NULL: one group
    const uint8_t* keep  # runs in place: the kept rows (NULL: all)
    uint8_t bit  # kept: keep[r] & bit nonzero
    Keys kb  # the packed keys the runs are merged by (when more than one)
    Py_ssize_t n_runs
    int64_t pos[_MAX_RUNS]  # per run: its next row (in place) or place in the order
    int64_t stop[_MAX_RUNS]  # per run: the row (place) after it
    uint64_t key[_MAX_RUNS]  # per run: its next row's key
    Py_ssize_t heap[_MAX_RUNS]  # live runs, the least (key, run) on top
    Py_ssize_t n_heap
    int64_t head


cdef inline int64_t _next_row(const Runs* m, Py_ssize_t t) noexcept nogil:
    if m.order32 != NULL:
        return m.order32[m.pos[t]]
    if m.order != NULL:
        return m.order[m.pos[t]]
    return m.pos[t]


cdef inline bint _before(const Runs* m, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return m.key[a] < m.key[b] or (m.key[a] == m.key[b] and a < b)  # earlier runs: lower rows


cdef void _sift(Runs* m) noexcept nogil:
    """Restore the heap after its top's row changed."""
    cdef Py_ssize_t i = 0, c, t = m.heap[0]
    while True:
        c = 2 * i + 1
        if c >= m.n_heap:
            break
        if c + 1 < m.n_heap and _before(m, m.heap[c + 1], m.heap[c]):
            c += 1
        if not _before(m, m.heap[c], t):
            break
        m.heap[i] = m.heap[c]
        i = c
    m.heap[i] = t


cdef inline void _advance(Runs* m) noexcept nogil:
    """Move past ``head``."""
    cdef Py_ssize_t t = m.heap[0]
    cdef int64_t r = m.pos[t] + 1
    if m.order32 == NULL and m.order == NULL:
        while r < m.stop[t] and _out(m.keep, m.bit, r):
            r += 1
    if r < m.stop[t]:
        m.pos[t] = r
        r = _next_row(m, t)
        if m.n_heap == 1:
            m.head = r
            return
        m.key[t] = _key(m.start, m.group, r, m.kb.s_lo, m.kb.g_lo, m.kb.s_bits)
    else:
        m.n_heap -= 1
        if m.n_heap == 0:
            m.head = -1
            return
        m.heap[0] = m.heap[m.n_heap]
    _sift(m)
    m.head = _next_row(m, m.heap[0])


cdef void _heap_init(Runs* m) noexcept nogil:
    """The heap of the runs (each not empty)."""
    cdef Py_ssize_t k, r
    m.n_heap = 0
    m.head = -1
    for k in range(m.n_runs):  # insert each run by sifting up (keys: where several)
        if m.n_runs > 1:
            m.key[k] = _key(m.start, m.group, _next_row(m, k), m.kb.s_lo, m.kb.g_lo,
                            m.kb.s_bits)
        r = m.n_heap
        m.n_heap += 1
        while r > 0 and _before(m, k, m.heap[(r - 1) >> 1]):
            m.heap[r] = m.heap[(r - 1) >> 1]
            r = (r - 1) >> 1
        m.heap[r] = k
    if m.n_heap:
        m.head = _next_row(m, m.heap[0])


cdef bint _runs(Runs* m, const int64_t* start, const int32_t* group, const uint8_t* keep,
                uint8_t bit, Py_ssize_t n_all) noexcept nogil:
    """Set ``m`` up over the kept rows in place; False when they come in more than
    _MAX_RUNS sorted runs (or in several whose packed keys do not fit)."""
    cdef Py_ssize_t r
    cdef int64_t prev = -1, s_hi = INT64_MIN, g_hi = INT64_MIN
    m.order, m.order32, m.start, m.group, m.keep, m.bit, m.n_runs = (
        NULL, NULL, start, group, keep, bit, 0)
    m.kb.s_lo = m.kb.g_lo = INT64_MAX
    for r in range(n_all):
        if _out(keep, bit, r):
            continue
        if prev < 0 or (group != NULL and group[r] < group[prev]) or (
                (group == NULL or group[r] == group[prev]) and start[r] < start[prev]):
            if m.n_runs == _MAX_RUNS:
                return False
            if m.n_runs:
                m.stop[m.n_runs - 1] = r
            m.pos[m.n_runs] = r
            m.n_runs += 1
        prev = r
        if start[r] < m.kb.s_lo:
            m.kb.s_lo = start[r]
        if start[r] > s_hi:
            s_hi = start[r]
        if group != NULL and group[r] < m.kb.g_lo:
            m.kb.g_lo = group[r]
        if group != NULL and group[r] > g_hi:
            g_hi = group[r]
    if m.n_runs:
        m.stop[m.n_runs - 1] = n_all
        m.kb.s_bits = _bits(<uint64_t>s_hi - <uint64_t>m.kb.s_lo)
        if m.n_runs > 1 and group != NULL and (
                m.kb.s_bits + _bits(<uint64_t>(g_hi - m.kb.g_lo)) > 64):
            return False
    _heap_init(m)
    return True


cdef object _stream(Runs* m, const int64_t[::1] start, const int32_t* group,
                    const uint8_t* keep, uint8_t bit, object buf=None):
    """Set ``m`` up to give the kept rows in (group, start, row) order (``group`` NULL:
    (start, row)): merged from their sorted runs in place when they come in few (returns
    None), else from the segments of their order (returned: the caller holds it while
    reading; written to ``buf`` where it is int32, see :func:`_order`)."""
    cdef Py_ssize_t n = start.shape[0], n_seg, k
    cdef bint merged = False
    cdef int64_t bounds[_MAX_RUNS + 1]
    cdef const int64_t[::1] o
    cdef const int32_t[::1] o32
    m.head, m.n_heap = -1, 0
    if n:
        with nogil:
            merged = _runs(m, &start[0], group, keep, bit, n)
    if merged:
        return None
    order = _order(start, group, keep, bit, n, bounds, &n_seg, &m.kb, buf)
    m.order, m.order32, m.keep, m.n_runs = NULL, NULL, NULL, n_seg
    for k in range(n_seg):
        m.pos[k], m.stop[k] = bounds[k], bounds[k + 1]
    if n_seg and order.dtype == np.int32:
        o32 = order
        m.order32 = &o32[0]
    elif n_seg:
        o = order
        m.order = &o[0]
    _heap_init(m)
    return order


cdef inline bint _inner_step(const int64_t* a_start, const int64_t* a_end, int64_t y,
                             int64_t* best, int64_t qe) noexcept nogil:
    """One step down the activities open at a query's start, innermost first, for a query
    to ``qe``: False once y starts earlier than the best found so far (none after it is
    more inner); else y becomes the best where it holds the query and ends earlier (the
    latest start, then the earliest end, then the later row)."""
    if best[0] >= 0 and a_start[y] != a_start[best[0]]:
        return False
    if a_end[y] >= qe and (best[0] < 0 or a_end[y] < a_end[best[0]]):
        best[0] = y
    return True


cdef int _found(const int64_t[::1] a_start, const int64_t[::1] a_end,
                const int32_t[::1] a_thread, const uint8_t* keep, uint8_t a_bit,
                const int64_t[::1] q_start, const int64_t[::1] q_end,
                const int32_t[::1] q_thread, const uint8_t* need, uint8_t q_bit,
                object found_arr) except -1:
    """Per query row (read where ``need & q_bit``; every row when ``need`` is NULL): the
    innermost activity kept (``keep & a_bit``) enclosing it on its thread, or -1, into
    ``found_arr`` (int32 when the activity rows fit, else int64; other rows untouched).
    One pass over both in (thread, start) order with a stack of the open activities: O(n +
    q) for nested activities (activities that overlap without nesting are searched past).
    Both come through :func:`_stream`: rows in few sorted runs (a loader's table in time
    order, or nesting levels one after another) are merged, not sorted. A query's answer
    depends only on the kept activities enclosing it (those that do not are popped or
    searched past), so any kept set that holds those gives the same answer."""
    cdef Py_ssize_t na = a_start.shape[0], nq = q_start.shape[0]
    cdef Py_ssize_t top = 0, cap = 64, j
    cdef int64_t g, x, qs, qe, q, best
    cdef int64_t* stack
    cdef int64_t* grown
    cdef Runs m, mq
    # held while the streams read them
    a_order = _stream(&m, a_start, &a_thread[0] if na else NULL, keep, a_bit)
    q_order = _stream(&mq, q_start, &q_thread[0] if nq else NULL, need, q_bit)
    cdef int64_t[::1] f64
    cdef int32_t[::1] f32
    cdef int64_t* p64 = NULL
    cdef int32_t* p32 = NULL
    if nq and found_arr.dtype == np.int64:
        f64 = found_arr
        p64 = &f64[0]
    elif nq:
        f32 = found_arr
        p32 = &f32[0]
    stack = <int64_t*>malloc(cap * sizeof(int64_t))
    if stack == NULL:
        raise MemoryError()
    with nogil:
        g = INT64_MIN
        x = m.head  # the next activity
        while mq.head >= 0:
            q = mq.head
            _advance(&mq)
            qs = q_start[q]
            qe = q_end[q] if q_end[q] > qs else qs  # an activity open at qs, to qe
            if q_thread[q] != g:  # a new thread: skip earlier threads' activities
                g = q_thread[q]
                top = 0
                while x >= 0 and a_thread[x] < g:
                    _advance(&m)
                    x = m.head
            while x >= 0 and a_thread[x] == g and a_start[x] <= qs:
                while top > 0 and a_end[stack[top - 1]] < a_start[x]:
                    top -= 1  # ended before this one starts: no later query is inside
                if top == cap:
                    grown = <int64_t*>realloc(stack, 2 * cap * sizeof(int64_t))
                    if grown == NULL:
                        top = -1
                        break
                    stack = grown
                    cap *= 2
                stack[top] = x
                top += 1
                _advance(&m)
                x = m.head
            if top < 0:
                break
            while top > 0 and a_end[stack[top - 1]] < qs:
                top -= 1  # ended before this query (queries come in start order)
            best = -1
            j = top - 1
            while j >= 0 and _inner_step(&a_start[0], &a_end[0], stack[j], &best, qe):
                j -= 1
            if p64 != NULL:
                p64[q] = best
            else:
                p32[q] = <int32_t>best
    free(stack)
    if top < 0:
        raise MemoryError()
    return 0


cdef object _found_rows(Py_ssize_t na, Py_ssize_t nq):
    """The answers' array: int32 when the activity rows fit, else int64."""
    return np.empty(nq, dtype=np.int64 if na >= INT32_MAX else np.int32)


cdef enum:
    _MAX_PARTS = 8  # a part's activities are marked by one bit of a byte
    _THREAD_SLOTS = 64  # threads whose previous query's place is remembered (a power of 2)
    _SAMPLE = 4096  # the rows sampled for the parts' bounds


cdef inline bint _below(int32_t t, int64_t s, int32_t pt, int64_t ps) noexcept nogil:
    """(t, s) sorts before (pt, ps)."""
    return t < pt or (t == pt and s < ps)


cdef inline int _part(int32_t t, int64_t s, const int32_t* pt, const int64_t* ps,
                      int n_piv) noexcept nogil:
    """The part of key (t, s): the bounds (ascending) at or below it."""
    cdef int k = 0
    while k < n_piv and not _below(t, s, pt[k], ps[k]):
        k += 1
    return k


cdef int _n_parts(int parts, Py_ssize_t n, Py_ssize_t split_min) noexcept nogil:
    """The parts to cut ``n`` items into: ``parts`` at most, at most 8 (_MAX_PARTS), at
    most one per ``split_min`` items, at least 1."""
    if parts > _MAX_PARTS:
        parts = _MAX_PARTS
    if parts > n // split_min:
        parts = <int>(n // split_min)
    return parts if parts > 1 else 1


cdef int _on_threads(object target, list arg_lists) except -1:
    """``target(*args, errors)`` for each of ``arg_lists`` at once: the first on this
    thread, each other on its own; an error a part appends to ``errors`` is raised here
    (the first). The started threads are joined in any case (one that cannot start raises
    its error after them)."""
    errors = []
    threads = [threading.Thread(target=target, name="pytimings-optable", args=(*a, errors))
               for a in arg_lists[1:]]
    started = []
    try:
        for t in threads:
            t.start()
            started.append(t)
        target(*arg_lists[0], errors)
    finally:
        for t in started:
            t.join()
    if errors:
        raise errors[0]
    return 0


cdef inline bint _at_or_before(const int64_t* a_start, const int32_t* a_thread,
                               const int32_t* rows, Py_ssize_t p, int32_t t,
                               int64_t s) noexcept nogil:
    """The activity at place p of an index sorts at or before (t, s)."""
    cdef int32_t r = rows[p]
    return not _below(t, s, a_thread[r], a_start[r])


cdef Py_ssize_t _last_at_or_before(const int64_t* a_start, const int32_t* a_thread,
                                   const int32_t* rows, Py_ssize_t n, Py_ssize_t f,
                                   int32_t t, int64_t s) noexcept nogil:
    """The last place of the index ``rows[0:n]`` whose activity sorts at or before (t, s)
    (-1: none), by a galloping search from place f (the previous query's of the same
    thread; -1: none): a query near that one is found in a few steps, any other in
    O(log n)."""
    cdef Py_ssize_t lo, hi, step = 1, mid
    if f >= 0 and not _at_or_before(a_start, a_thread, rows, f, t, s):
        hi = f  # back from f
        lo = hi - 1
        while lo >= 0 and not _at_or_before(a_start, a_thread, rows, lo, t, s):
            hi = lo
            step *= 2
            lo = hi - step
        if lo < -1:
            lo = -1
    else:  # forward from f
        lo = f
        hi = lo + 1
        while hi < n and _at_or_before(a_start, a_thread, rows, hi, t, s):
            lo = hi
            step *= 2
            hi = lo + step
        if hi > n:
            hi = n
    while hi - lo > 1:  # lo: at or before (or -1); hi: after (or n)
        mid = lo + (hi - lo) // 2
        if _at_or_before(a_start, a_thread, rows, mid, t, s):
            lo = mid
        else:
            hi = mid
    return lo


cdef struct Calls:  # launching_rows' GPU ops: which are queried, and each one's reason
    const int64_t* api_row  # its launch call's row (-1: none); NULL: every row is queried
    const uint8_t* graph  # run by a graph replay
    int8_t* reason
    int no_launch, no_op, graph_code


@cython.auto_pickle(False)
cdef class _CallsJob:
    """The GPU ops of one launching_rows call (or none: innermost_rows), shared by the
    index's parts."""
    cdef Calls c


cdef _CallsJob _asks_all():
    """Every query row asked, no reasons (innermost_rows)."""
    cdef _CallsJob job = _CallsJob()
    job.c.api_row, job.c.graph, job.c.reason = NULL, NULL, NULL
    return job


cdef inline bint _asked(const Calls* c, Py_ssize_t i) noexcept nogil:
    """Whether row i is queried (a launch call, and not run by a graph); where not, its
    reason is set."""
    if c.api_row == NULL or (c.api_row[i] >= 0 and not c.graph[i]):
        return True
    c.reason[i] = c.graph_code if c.graph[i] else c.no_launch
    return False


cdef inline void _answered(const Calls* c, Py_ssize_t i, int64_t best) noexcept nogil:
    """A queried row's reason from its answer: none where found, else no op around."""
    if c.api_row != NULL:
        c.reason[i] = -1 if best >= 0 else c.no_op


def _index_part(int part, const int64_t[::1] a_start, const int64_t[::1] a_end,
                const int32_t[::1] a_thread, const int32_t[::1] rows,
                const int32_t[::1] parent, const int64_t[::1] q_start,
                const int64_t[::1] q_end, const int32_t[::1] q_thread, _CallsJob job,
                int32_t[::1] found, Py_ssize_t r0, Py_ssize_t r1, list errors):
    """The queries of rows [r0, r1) (those ``job`` asks; the others -1, with their
    reasons) answered from the index (:func:`_indexed`), on its own thread; an error goes
    to ``errors``."""
    cdef Py_ssize_t n = rows.shape[0], i, p, y, j
    cdef int32_t t
    cdef int64_t best
    cdef int64_t qs, qe
    cdef int32_t last_t[_THREAD_SLOTS]  # per slot: a thread and the place its previous
    cdef Py_ssize_t last_p[_THREAD_SLOTS]  # query was found at (calls of several threads
    # interleave: each searches from its own thread's place)
    cdef const Calls* c = &job.c
    cdef const int64_t* s0 = &a_start[0] if a_start.shape[0] else NULL
    cdef const int32_t* t0 = &a_thread[0] if a_thread.shape[0] else NULL
    cdef const int32_t* ix = &rows[0] if n else NULL
    for j in range(_THREAD_SLOTS):
        last_t[j], last_p[j] = -1, -1
    try:
        with nogil:
            for i in range(r0, r1):
                best = -1
                if _asked(c, i):
                    t = q_thread[i]
                    qs = q_start[i]
                    qe = q_end[i] if q_end[i] > qs else qs  # an activity open at qs, to qe
                    j = t & (_THREAD_SLOTS - 1)
                    p = _last_at_or_before(s0, t0, ix, n, last_p[j] if last_t[j] == t else -1,
                                           t, qs)
                    last_t[j], last_p[j] = t, p
                    if p >= 0 and a_thread[rows[p]] == t:
                        y = p  # up the chain of the activities open there, innermost first
                        while y >= 0 and _inner_step(s0, &a_end[0], rows[y], &best, qe):
                            y = parent[y]
                    _answered(c, i, best)
                found[i] = <int32_t>best
    except BaseException as e:  # re-raised on the caller's thread
        errors.append(e)


cdef inline void _parents(const int64_t* a_start, const int64_t* a_end,
                          const int32_t* a_thread, const int32_t* rows, int32_t* parent,
                          Py_ssize_t q, Py_ssize_t first) noexcept nogil:
    """The parent of the activity at place q of an index: the place of the activity on
    top of the sweep's stack when it is pushed (the chain from place q - 1, past what ended
    before it starts; -1: none, or the chain leaves the places from ``first`` on)."""
    cdef Py_ssize_t cur = -1
    if q > first and a_thread[rows[q - 1]] == a_thread[rows[q]]:
        cur = q - 1
        while cur >= first and a_end[rows[cur]] < a_start[rows[q]]:
            cur = parent[cur]
        if cur < first:
            cur = -1
    parent[q] = <int32_t>cur


def _index_mark(int part, const int64_t[::1] a_start, const int32_t[::1] a_thread, a_keep,
                uint8_t[::1] bits, const int32_t[::1] piv_t, const int64_t[::1] piv_s,
                int n_parts, int64_t[::1] count, list errors):
    """:func:`_indexed`'s first pass over a share of the activity rows (on its own
    thread): each kept row's part (the one its (thread, start) falls in) as a bit, and
    the rows counted per part."""
    cdef Py_ssize_t na = a_start.shape[0], r, r0, r1
    cdef int n_piv = piv_t.shape[0], k
    cdef const uint8_t* keep = <const uint8_t*>_data(a_keep, na, np.uint8, "launching_rows")
    try:
        with nogil:
            r0, r1 = part * na // n_parts, (part + 1) * na // n_parts
            for r in range(r0, r1):
                if keep != NULL and not keep[r]:
                    bits[r] = 0
                    continue
                k = _part(a_thread[r], a_start[r], &piv_t[0] if n_piv else NULL,
                          &piv_s[0] if n_piv else NULL, n_piv)
                bits[r] = <uint8_t>(1 << k)
                count[k] += 1
    except BaseException as e:  # re-raised on the caller's thread
        errors.append(e)


def _index_build(int part, const int64_t[::1] a_start, const int64_t[::1] a_end,
                 const int32_t[::1] a_thread, bits, int bit, int32_t[::1] rows,
                 int32_t[::1] parent, Py_ssize_t first, Py_ssize_t stop, list errors):
    """One part of :func:`_indexed`'s index (on its own thread): the activities of
    ``bits & bit`` (``bits`` None: all) in (thread, start, row) order at places [first,
    stop), each with its parent within the part (the part's first places keep -1 until
    the caller links them to the parts before). Where they must be ordered, their sorted
    segments are put in the part's places of ``parent`` (no other memory), merged into
    ``rows``, and the parents found after."""
    cdef Py_ssize_t na = a_start.shape[0], q = first
    cdef Runs m
    cdef bint later = False  # the parents after the merge (its segments are in parent)
    cdef const uint8_t* bp = <const uint8_t*>_data(bits, na, np.uint8, "launching_rows")
    try:
        order = _stream(&m, a_start, &a_thread[0] if na else NULL, bp, <uint8_t>bit,
                        np.asarray(parent)[first:stop])  # held while read
        later = order is not None and order.dtype == np.int32
        with nogil:
            while m.head >= 0 and q < stop:
                rows[q] = <int32_t>m.head
                _advance(&m)
                if not later:
                    _parents(&a_start[0], &a_end[0], &a_thread[0], &rows[0], &parent[0], q,
                             first)
                q += 1
        if q != stop or m.head >= 0:
            raise AssertionError("launching_rows: a part of the index lost its count")
        del order
        if later:
            with nogil:
                for q in range(first, stop):
                    _parents(&a_start[0], &a_end[0], &a_thread[0], &rows[0], &parent[0], q,
                             first)
    except BaseException as e:  # re-raised on the caller's thread
        errors.append(e)


cdef int _indexed(const int64_t[::1] a_start, const int64_t[::1] a_end,
                  const int32_t[::1] a_thread, a_keep, Py_ssize_t n_kept,
                  const int64_t[::1] q_start, const int64_t[::1] q_end,
                  const int32_t[::1] q_thread, _CallsJob job, int parts,
                  object found_arr) except -1:
    """:func:`_found`'s answers (int32 ``found_arr``: fewer than 2**31 activity rows) from
    an index of the ``n_kept`` kept activities instead of a sweep: their rows in (thread,
    start, row) order (:func:`_stream`) and each one's parent, the place of the activity
    on top of the sweep's stack when it was pushed (so that the stack at any instant is the
    chain of parents from the last activity started). Each query, in row order (no sort of
    the queries), is found by a galloping search from the place of the previous one of its
    thread (launch calls of several threads interleave) and answered up its chain. On
    ``parts`` threads: the activities cut at (thread, start) quantiles of a sample, each
    part's placed and linked within the part at once, then the parts' first activities
    linked to the open ones before them (a few: once one has no parent there, none after
    it has), then the queries in row ranges."""
    cdef Py_ssize_t na = a_start.shape[0], nq = q_start.shape[0], r, step, q, k
    cdef Py_ssize_t off[_MAX_PARTS + 1]  # per part: its first place in the index
    cdef int n_piv = 0
    rows_arr = np.empty(n_kept, dtype=np.int32)
    parent_arr = np.empty(n_kept, dtype=np.int32)
    cdef int32_t[::1] rows = rows_arr, parent = parent_arr
    cdef const uint8_t* keep = <const uint8_t*>_data(a_keep, na, np.uint8, "launching_rows")
    if parts > 1 and n_kept >= 2 * parts:  # the parts' bounds, distinct and ascending
        step = na // _SAMPLE if na >= 2 * _SAMPLE else 1
        sample = np.arange(0, na, step) if keep == NULL else np.flatnonzero(
            np.asarray(<const uint8_t[:na]>keep)[::step]) * step
        sample = sample[np.lexsort((np.asarray(a_start)[sample], np.asarray(a_thread)[sample]))]
        piv_t_arr = np.empty(parts - 1, dtype=np.int32)
        piv_s_arr = np.empty(parts - 1, dtype=np.int64)
        for k in range(1, parts):
            r = sample[k * sample.size // parts]
            if n_piv == 0 or _below(piv_t_arr[n_piv - 1], piv_s_arr[n_piv - 1], a_thread[r],
                                    a_start[r]):
                piv_t_arr[n_piv] = a_thread[r]
                piv_s_arr[n_piv] = a_start[r]
                n_piv += 1
    if n_piv == 0:
        _on_threads(_index_build, [(0, a_start, a_end, a_thread, a_keep, 0xFF, rows_arr,
                                    parent_arr, 0, n_kept)])
    else:
        bits_arr = np.empty(na, dtype=np.uint8)
        counts = np.zeros((n_piv + 1, n_piv + 1), dtype=np.int64)  # per share, per part
        _on_threads(_index_mark, [
            (k, a_start, a_thread, a_keep, bits_arr, piv_t_arr[:n_piv], piv_s_arr[:n_piv],
             n_piv + 1, counts[k]) for k in range(n_piv + 1)])
        offs = np.concatenate([[0], np.cumsum(counts.sum(axis=0))]).tolist()
        _on_threads(_index_build, [
            (k, a_start, a_end, a_thread, bits_arr, 1 << k, rows_arr, parent_arr, offs[k],
             offs[k + 1]) for k in range(n_piv + 1)])
        for k in range(n_piv + 2):
            off[k] = offs[k]
        with nogil:  # the parts' first activities: their parents in the parts before
            for k in range(1, n_piv + 1):
                for q in range(off[k], off[k + 1]):
                    if parent[q] >= 0:
                        continue  # inside an activity of its own part
                    _parents(&a_start[0], &a_end[0], &a_thread[0], &rows[0], &parent[0], q, 0)
                    if parent[q] < 0:
                        break  # nothing before the part is open any more
    _on_threads(_index_part, [
        (k, a_start, a_end, a_thread, rows_arr, parent_arr, q_start, q_end, q_thread, job,
         found_arr, k * nq // parts, (k + 1) * nq // parts) for k in range(parts)])
    return 0


cdef Py_ssize_t _n_kept(const uint8_t* keep, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i, k = 0
    if keep == NULL:
        return n
    for i in range(n):
        k += keep[i] != 0
    return k


cdef bint _use_index(str method, Py_ssize_t na) except -1:
    """Whether to answer from an index (:func:`_indexed`, on threads) rather than by a
    sweep over both sorted (:func:`_found`, on one thread): ``method`` "index" or
    "sweep"; "auto": the index, which needs no sort of the queries, up to 2**31 activity
    rows (its int32 places), the sweep past them."""
    if method not in ("auto", "index", "sweep"):
        raise ValueError(f"method must be 'auto', 'index' or 'sweep', not {method!r}")
    return method != "sweep" and na < INT32_MAX


def innermost_rows(const int64_t[::1] a_start, const int64_t[::1] a_end,
                   const int32_t[::1] a_thread, a_keep, const int64_t[::1] q_start,
                   const int64_t[::1] q_end, const int32_t[::1] q_thread,
                   str method="auto"):
    """Per query ``[q_start, q_end]`` on its thread: the row of the innermost kept activity
    (``a_keep``: a uint8 mask, None: all) enclosing it there (``start <= q_start``,
    ``max(q_start, q_end) <= end``; innermost: the latest start, then the earliest end,
    then the later row), or -1; int32 when the activity rows fit, else int64. ``method``:
    see :func:`_use_index` (the answers are the same)."""
    cdef Py_ssize_t na = a_start.shape[0], nq = q_start.shape[0]
    if a_end.shape[0] != na or a_thread.shape[0] != na:
        raise ValueError("innermost_rows: activity columns differ in length")
    if q_end.shape[0] != nq or q_thread.shape[0] != nq:
        raise ValueError("innermost_rows: query columns differ in length")
    cdef const uint8_t* keep = <const uint8_t*>_data(a_keep, na, np.uint8, "innermost_rows")
    found_arr = _found_rows(na, nq)
    if _use_index(method, na):
        _indexed(a_start, a_end, a_thread, a_keep, _n_kept(keep, na), q_start, q_end,
                 q_thread, _asks_all(), 1, found_arr)
    else:
        _found(a_start, a_end, a_thread, keep, 0xFF, q_start, q_end, q_thread, NULL, 0xFF,
               found_arr)
    return found_arr


cdef enum:
    _ID_SLACK = 4  # an id table may hold this many slots per activity with an id ...
    _ID_SLOTS_MIN = 1 << 20  # ... or this many, whichever is more


@cython.auto_pickle(False)
cdef class _IdJoin:
    """launching_rows' join by id: per id space (a thread's ``space``), its lowest id,
    highest id and first slot; per slot, the kept activity row with that id (-1 none, -2
    several: those calls go to the index)."""
    cdef object table_arr, lo_arr, hi_arr, base_arr
    cdef const int32_t* table
    cdef const int64_t* lo
    cdef const int64_t* hi
    cdef const int64_t* base


cdef inline Py_ssize_t _kept_space(const int64_t* ids, const int32_t* thread,
                                   const uint8_t* keep, const int32_t* space, Py_ssize_t nt,
                                   Py_ssize_t a) noexcept nogil:
    """Activity ``a``'s id space; -1 where it has no id, no thread of the table or is not
    kept."""
    cdef int32_t t = thread[a]
    if ids[a] < 0 or t < 0 or t >= nt or (keep != NULL and not keep[a]):
        return -1
    return space[t]


cdef _IdJoin _id_join(const int64_t[::1] a_id, const int32_t[::1] a_thread,
                      const uint8_t* keep, const int32_t[::1] space):
    """The id table of the kept activities, or None where it cannot serve: no ids, 2**31
    rows or more (its int32 slots), or ids so sparse that the table would pass
    max(_ID_SLACK * activities with an id, _ID_SLOTS_MIN) slots."""
    cdef Py_ssize_t na = a_id.shape[0], nt = space.shape[0], a, g, n_sp = 0, n_ids = 0
    cdef int64_t v, total = 0, limit
    if na >= INT32_MAX:
        return None
    if nt:
        n_sp = int(np.asarray(space).max()) + 1
    if n_sp <= 0:
        return None
    j = _IdJoin()
    j.lo_arr = np.full(n_sp, INT64_MAX, dtype=np.int64)
    j.hi_arr = np.full(n_sp, -1, dtype=np.int64)
    j.base_arr = np.zeros(n_sp, dtype=np.int64)
    cdef int64_t[::1] lo = j.lo_arr, hi = j.hi_arr, base = j.base_arr
    with nogil:
        for a in range(na):
            g = _kept_space(&a_id[0], &a_thread[0], keep, &space[0], nt, a)
            if g < 0:
                continue
            v = a_id[a]
            if v < lo[g]:
                lo[g] = v
            if v > hi[g]:
                hi[g] = v
            n_ids += 1
    limit = max(_ID_SLACK * n_ids, _ID_SLOTS_MIN)
    for g in range(n_sp):
        base[g] = total
        if hi[g] >= 0:
            if hi[g] - lo[g] >= limit - total:
                return None
            total += hi[g] - lo[g] + 1
    if n_ids == 0:
        return None
    j.table_arr = np.full(total, -1, dtype=np.int32)
    cdef int32_t[::1] table = j.table_arr
    with nogil:
        for a in range(na):
            g = _kept_space(&a_id[0], &a_thread[0], keep, &space[0], nt, a)
            if g < 0:
                continue
            v = base[g] + a_id[a] - lo[g]
            table[v] = <int32_t>a if table[v] == -1 else -2
    j.table = &table[0]
    j.lo, j.hi, j.base = &lo[0], &hi[0], &base[0]
    return j


def _joined_part(int part, _IdJoin j, const int64_t[::1] a_start, const int64_t[::1] a_end,
                 const int32_t[::1] a_thread, const int32_t[::1] space,
                 const int64_t[::1] call_id, const int64_t[::1] q_start,
                 const int64_t[::1] q_end, const int32_t[::1] q_thread, _CallsJob job,
                 int32_t[::1] found, uint8_t[::1] left, Py_ssize_t r0, Py_ssize_t r1,
                 list errors):
    """GPU-op rows [r0, r1) answered by their launch call's id (those ``job`` asks): the
    activity with that id in the call's id space, where it is on the call's thread and
    encloses the call (as :func:`innermost_rows` encloses); the asked rows it cannot answer
    are marked in ``left``, the rows not asked get -1 and their reasons."""
    cdef Py_ssize_t i, nt = space.shape[0]
    cdef int64_t v, qs, qe
    cdef int32_t t, a, g
    cdef const Calls* c = &job.c
    try:
        with nogil:
            for i in range(r0, r1):
                found[i] = -1
                if not _asked(c, i):
                    continue
                v, t = call_id[c.api_row[i]], q_thread[i]
                a = -1
                if v >= 0 and 0 <= t < nt:
                    g = space[t]
                    if j.lo[g] <= v <= j.hi[g]:
                        a = j.table[j.base[g] + v - j.lo[g]]
                if a >= 0:
                    qs = q_start[i]
                    qe = q_end[i] if q_end[i] > qs else qs
                    if a_thread[a] == t and a_start[a] <= qs and qe <= a_end[a]:
                        found[i] = a
                        c.reason[i] = -1
                        continue
                left[i] = 1
    except BaseException as e:  # re-raised on the caller's thread
        errors.append(e)


cdef object _by_id(const int64_t[::1] a_start, const int64_t[::1] a_end,
                   const int32_t[::1] a_thread, const uint8_t* keep,
                   const int64_t[::1] q_start, const int64_t[::1] q_end,
                   const int32_t[::1] q_thread, _CallsJob job, a_id, call_id, space,
                   int parts, object found_arr):
    """launching_rows' answers by id, on ``parts`` threads: the GPU-op rows left for the
    index (int64), or None where the ids cannot serve (then nothing is written)."""
    cdef Py_ssize_t na = a_start.shape[0], n = q_start.shape[0], k
    if call_id is None or space is None:
        raise ValueError("launching_rows: a_id needs call_id and space")
    cdef const int64_t[::1] ids = a_id, calls = call_id
    cdef const int32_t[::1] sp = space
    if ids.shape[0] != na:
        raise ValueError("launching_rows: a_id differs in length from the activities")
    if sp.shape[0] and np.asarray(sp).min() < 0:
        raise ValueError("launching_rows: a thread's id space is negative")
    if n and job.c.api_row != NULL:  # the call rows the ops name must be in call_id
        rows = np.asarray(<const int64_t[:n]>job.c.api_row)
        if rows.max() >= calls.shape[0]:
            raise ValueError("launching_rows: an api_row is past the end of call_id")
    if found_arr.dtype != np.int32:
        return None
    j = _id_join(ids, a_thread, keep, sp)
    if j is None:
        return None
    left_arr = np.zeros(n, dtype=np.uint8)
    _on_threads(_joined_part, [
        (k, j, a_start, a_end, a_thread, sp, calls, q_start, q_end, q_thread, job, found_arr,
         left_arr, k * n // parts, (k + 1) * n // parts) for k in range(parts)])
    return np.flatnonzero(left_arr)


def launching_rows(const int64_t[::1] a_start, const int64_t[::1] a_end,
                   const int32_t[::1] a_thread, a_keep,
                   const int64_t[::1] q_start, const int64_t[::1] q_end,
                   const int32_t[::1] q_thread, const int64_t[::1] api_row,
                   const uint8_t[::1] graph, int no_launch, int no_op, int graph_code,
                   int parts=1, Py_ssize_t split_min=1 << 18, str method="auto",
                   a_id=None, call_id=None, space=None):
    """Per GPU op (``q_start``, ``q_end``, ``q_thread``: its launch call's; ``api_row``:
    that call's row, -1: none; ``graph``: run by a graph replay): the row of the innermost
    kept activity (``a_keep``: a uint8 mask, None: all) enclosing its launch call on the
    call's thread (as :func:`innermost_rows`), -1 for graph-replayed ops and where none
    (int32 when the activity rows fit, else int64); and its reason code (-1 where found;
    ``graph_code``, ``no_op`` with a launch call, else ``no_launch``). Only the ops with a
    launch call and not run by a graph are queried, from an index of the activities on
    ``parts`` threads at once (at most 8; one part per ``split_min`` GPU ops at most), each
    part asking and answering its own rows' ops, or by a sweep on one (``method``: see
    :func:`_use_index`), with the same answers.

    With ids (``a_id``: int64 per activity, -1 none; ``call_id``: per API call row, the id
    of the activity the call names; ``space``: int32 per thread row, whose ids it shares),
    an op is first answered by its call's id (:func:`_joined_part`), and only the rest from
    the index, which is not built when none is left."""
    cdef Py_ssize_t na = a_start.shape[0], n = api_row.shape[0], i
    cdef const uint8_t* keep = <const uint8_t*>_data(a_keep, na, np.uint8, "launching_rows")
    if a_end.shape[0] != na or a_thread.shape[0] != na:
        raise ValueError("launching_rows: activity columns differ in length")
    if (q_start.shape[0] != n or q_end.shape[0] != n or q_thread.shape[0] != n
            or graph.shape[0] != n):
        raise ValueError("launching_rows: the GPU-op columns differ in length")
    if parts < 1 or split_min < 1:
        raise ValueError("launching_rows: parts and split_min must be >= 1")
    op_row_arr = _found_rows(na, n)  # the answers, in place; int32 where the rows fit
    reason_arr = np.empty(n, dtype=np.int8)
    cdef int8_t[::1] reason = reason_arr
    cdef _CallsJob job = _CallsJob()
    cdef Calls* c = &job.c
    c.api_row, c.graph, c.reason = NULL, NULL, NULL
    if n:
        c.api_row, c.graph, c.reason = &api_row[0], &graph[0], &reason[0]
    c.no_launch, c.no_op, c.graph_code = no_launch, no_op, graph_code
    if a_id is not None:
        left = _by_id(a_start, a_end, a_thread, keep, q_start, q_end, q_thread, job, a_id,
                      call_id, space, _n_parts(parts, n, split_min), op_row_arr)
        if left is not None:
            if left.size:  # the rest, from the index
                take = lambda col: np.ascontiguousarray(np.asarray(col)[left])
                rows, why = launching_rows(
                    a_start, a_end, a_thread, a_keep, take(q_start), take(q_end),
                    take(q_thread), take(api_row), take(graph), no_launch, no_op,
                    graph_code, parts, split_min, method)
                op_row_arr[left] = rows
                reason_arr[left] = why
            return op_row_arr, reason_arr
    if _use_index(method, na):  # the parts ask and answer their rows' ops
        _indexed(a_start, a_end, a_thread, a_keep, _n_kept(keep, na), q_start, q_end,
                 q_thread, job, _n_parts(parts, n, split_min), op_row_arr)
        return op_row_arr, reason_arr
    need_arr = np.empty(n, dtype=np.uint8)
    cdef uint8_t[::1] need = need_arr
    with nogil:
        for i in range(n):
            need[i] = _asked(c, i)
    _found(a_start, a_end, a_thread, keep, 0xFF, q_start, q_end, q_thread,
           &need[0] if n else NULL, 0xFF, op_row_arr)
    cdef int64_t[::1] o64
    cdef int32_t[::1] o32
    cdef int64_t* q64 = NULL
    cdef int32_t* q32 = NULL
    if n and op_row_arr.dtype == np.int64:
        o64 = op_row_arr
        q64 = &o64[0]
    elif n:
        o32 = op_row_arr
        q32 = &o32[0]
    with nogil:
        for i in range(n):
            if not need[i] and q64 != NULL:
                q64[i] = -1
            elif not need[i]:
                q32[i] = -1
            else:
                _answered(c, i, q64[i] if q64 != NULL else q32[i])
    return op_row_arr, reason_arr


def contains_point(const int64_t[::1] a_start, const int64_t[::1] a_end,
                   const int32_t[::1] a_thread, a_keep, const int64_t[::1] p_at,
                   const int32_t[::1] p_thread, p_keep):
    """Per activity row: 1 where it is kept (``a_keep``: a uint8 mask, None: all) and a
    kept point (``p_keep``) of its thread lies in ``[start, end)``, else 0. One pass over
    both in (thread, start) order (:func:`_stream`: rows in few sorted runs are merged,
    not sorted): the first point at or after an activity's start only moves forward."""
    cdef Py_ssize_t na = a_start.shape[0], n_p = p_at.shape[0]
    cdef int64_t x, y
    cdef Runs m, mp
    if a_end.shape[0] != na or a_thread.shape[0] != na:
        raise ValueError("contains_point: activity columns differ in length")
    if p_thread.shape[0] != n_p:
        raise ValueError("contains_point: point columns differ in length")
    cdef const uint8_t* ak = <const uint8_t*>_data(a_keep, na, np.uint8, "contains_point")
    cdef const uint8_t* pk = <const uint8_t*>_data(p_keep, n_p, np.uint8, "contains_point")
    out_arr = np.zeros(na, dtype=np.uint8)
    cdef uint8_t[::1] out = out_arr
    # held while the streams read them
    a_order = _stream(&m, a_start, &a_thread[0] if na else NULL, ak, 0xFF)
    p_order = _stream(&mp, p_at, &p_thread[0] if n_p else NULL, pk, 0xFF)
    with nogil:
        y = mp.head
        while m.head >= 0:
            x = m.head
            _advance(&m)
            while y >= 0 and _below(p_thread[y], p_at[y], a_thread[x], a_start[x]):
                _advance(&mp)
                y = mp.head
            if y >= 0 and p_thread[y] == a_thread[x] and p_at[y] < a_end[x]:
                out[x] = 1
    return out_arr


def names_present(const int32_t[::1] name, Py_ssize_t n_names):
    """The distinct ids in ``name`` (each in ``[0, n_names)``), ascending."""
    cdef Py_ssize_t i, n = name.shape[0]
    cdef bint bad = False
    seen_arr = np.zeros(n_names, dtype=np.uint8)
    cdef uint8_t[::1] seen = seen_arr
    with nogil:
        for i in range(n):
            if name[i] < 0 or name[i] >= n_names:
                bad = True
                break
            seen[name[i]] = 1
    if bad:
        raise ValueError("names_present: a name id is out of range")
    return np.flatnonzero(seen_arr)


def window_index(const int64_t[::1] start, keep, const int64_t[::1] ws,
                 const int64_t[::1] we, const int64_t[::1] wid, int32_t[::1] out):
    """For each kept op (``keep``: uint8 mask, None: all) whose start lies in one of the
    windows ``[ws, we)`` (sorted by start, disjoint, none empty): ``out`` = that window's
    ``wid``; other entries of ``out`` are left as they are. Ops nearly in time order find
    their window where the previous op's was, others by a binary search."""
    cdef Py_ssize_t n = start.shape[0], m = ws.shape[0], i, lo = 0, hi, mid
    cdef const uint8_t* kp = <const uint8_t*>_data(keep, n, np.uint8, "window_index")
    cdef int64_t s
    if out.shape[0] != n or we.shape[0] != m or wid.shape[0] != m:
        raise ValueError("window_index: columns differ in length")
    for i in range(m):
        if we[i] <= ws[i] or (i and ws[i] < we[i - 1]):
            raise ValueError("window_index: windows must be sorted, disjoint and not empty")
    if m == 0:
        return
    with nogil:
        for i in range(n):
            if kp != NULL and not kp[i]:
                continue
            s = start[i]
            if s < ws[0] or s >= we[m - 1]:
                continue
            if s >= ws[lo] and (lo + 1 == m or s < ws[lo + 1]):
                hi = lo + 1  # the previous op's window
            else:
                lo = 0
                hi = m  # the last window starting at or before s is lo
            while hi - lo > 1:
                mid = (lo + hi) >> 1
                if ws[mid] <= s:
                    lo = mid
                else:
                    hi = mid
            if s < we[lo]:
                out[i] = <int32_t>wid[lo]


cdef struct Hash:
    int64_t* keys  # -1: empty
    int32_t* code
    Py_ssize_t cap  # a power of two
    Py_ssize_t used
    int64_t last  # the key added last (-1: none) and its code: runs of one key look up once
    int32_t last_code


cdef inline Py_ssize_t _slot(int64_t k, Py_ssize_t cap) noexcept nogil:
    return <Py_ssize_t>(((<uint64_t>k * <uint64_t>0x9E3779B97F4A7C15) >> 17)
                        & <uint64_t>(cap - 1))


cdef void _hash_free(Hash* h) noexcept nogil:
    free(h.keys)
    free(h.code)
    h.keys = NULL
    h.code = NULL


cdef int _hash_init(Hash* h) except -1:
    cdef Py_ssize_t j
    h.cap = 1024
    h.used = 0
    h.last = -1
    h.keys = <int64_t*>malloc(h.cap * sizeof(int64_t))
    h.code = <int32_t*>malloc(h.cap * sizeof(int32_t))
    if h.keys == NULL or h.code == NULL:
        _hash_free(h)
        raise MemoryError()
    for j in range(h.cap):
        h.keys[j] = -1
    return 0


cdef int32_t _hash_add(Hash* h, int64_t k) noexcept nogil:
    """The code of key ``k`` >= 0 (the number of keys before it on first sight); -1: out
    of memory."""
    cdef Py_ssize_t j, nj, c
    cdef int64_t* nk
    cdef int32_t* nc
    if k == h.last:
        return h.last_code
    j = _slot(k, h.cap)
    while h.keys[j] >= 0 and h.keys[j] != k:
        j = (j + 1) & (h.cap - 1)
    h.last = k
    if h.keys[j] == k:
        h.last_code = h.code[j]
        return h.code[j]
    h.keys[j] = k
    h.code[j] = <int32_t>h.used
    h.last_code = h.code[j]
    h.used += 1
    if 2 * h.used > h.cap:  # grow: rehash every key
        nk = <int64_t*>malloc(2 * h.cap * sizeof(int64_t))
        nc = <int32_t*>malloc(2 * h.cap * sizeof(int32_t))
        if nk == NULL or nc == NULL:
            free(nk)
            free(nc)
            return -1
        for c in range(2 * h.cap):
            nk[c] = -1
        for c in range(h.cap):
            if h.keys[c] >= 0:
                nj = _slot(h.keys[c], 2 * h.cap)
                while nk[nj] >= 0:
                    nj = (nj + 1) & (2 * h.cap - 1)
                nk[nj] = h.keys[c]
                nc[nj] = h.code[c]
        free(h.keys)
        free(h.code)
        h.keys, h.code, h.cap = nk, nc, 2 * h.cap
    return <int32_t>(h.used - 1)


cdef object _hash_keys(Hash* h):
    """The keys by code (first sight)."""
    cdef Py_ssize_t j
    out_arr = np.empty(h.used, dtype=np.int64)
    cdef int64_t[::1] out = out_arr
    for j in range(h.cap):
        if h.keys[j] >= 0:
            out[h.code[j]] = h.keys[j]
    return out_arr


ctypedef fused row_t:  # launching-op rows: int32 where they fit (launching_rows)
    int32_t
    int64_t


cdef struct GpuCols:  # the GPU-op columns the op texts' totals read
    const int64_t* start
    const int64_t* end
    const int8_t* kind
    const int8_t* copy_kind
    const int32_t* name
    int memcpy_kind
    int dtod


cdef inline bint _tally(const GpuCols* g, int32_t t, Py_ssize_t i, int64_t* kernel,
                        uint8_t* link, Hash* pairs) noexcept nogil:
    """GPU op i counted in op text t: its ns, whether it is a copy over a link (a memcpy
    not device to device), its ``t << 32 | kernel name`` pair; False: out of memory."""
    kernel[t] += g.end[i] - g.start[i]
    if g.kind[i] == g.memcpy_kind and g.copy_kind[i] != g.dtod:
        link[t] = 1
    return _hash_add(pairs, (<int64_t>t << 32) | <int64_t>g.name[i]) >= 0


cdef GpuCols _gpu_cols(const int64_t[::1] start, const int64_t[::1] end,
                       const int8_t[::1] kind, const int8_t[::1] copy_kind,
                       const int32_t[::1] name, int memcpy_kind, int dtod) except *:
    cdef Py_ssize_t n = start.shape[0]
    cdef GpuCols g
    if end.shape[0] != n or kind.shape[0] != n or copy_kind.shape[0] != n or name.shape[0] != n:
        raise ValueError("GPU-op columns differ in length")
    g.start = &start[0] if n else NULL
    g.end = &end[0] if n else NULL
    g.kind = &kind[0] if n else NULL
    g.copy_kind = &copy_kind[0] if n else NULL
    g.name = &name[0] if n else NULL
    g.memcpy_kind, g.dtod = memcpy_kind, dtod
    return g


cdef bint _grow(int64_t** kernel, int64_t** calls, uint8_t** link, Py_ssize_t* cap,
                Py_ssize_t need) noexcept nogil:
    """Room for per-text totals past ``need`` (zeroed); False: out of memory (the old
    buffers stay, for the caller to free)."""
    cdef Py_ssize_t c = cap[0], j
    cdef int64_t* k2
    cdef int64_t* c2
    cdef uint8_t* l2
    while c <= need:
        c = 2 * c if c else 64
    k2 = <int64_t*>realloc(kernel[0], c * sizeof(int64_t))
    if k2 != NULL:
        kernel[0] = k2
    c2 = <int64_t*>realloc(calls[0], c * sizeof(int64_t))
    if c2 != NULL:
        calls[0] = c2
    l2 = <uint8_t*>realloc(link[0], c)
    if l2 != NULL:
        link[0] = l2
    if k2 == NULL or c2 == NULL or l2 == NULL:
        return False
    for j in range(cap[0], c):
        k2[j] = c2[j] = l2[j] = 0
    cap[0] = c
    return True


cdef enum:  # what stops launcher_texts' pass over a part
    _BAD_ROW = 1  # a launching-op row out of range
    _BAD_ID = 2  # a negative name or args id
    _NO_MEMORY = 3


cdef struct TextPart:  # one part of launcher_texts: its op texts by first sight
    Hash h  # op key -> its code in the part
    Hash hp  # (code << 32 | kernel name) pairs
    int64_t* kernel  # per code, grown with the keys
    int64_t* calls
    uint8_t* link
    Py_ssize_t cap
    uint8_t* seen  # a bit per launching op the part has counted
    int bad  # 0, or what stopped the pass (_BAD_ROW, _BAD_ID, _NO_MEMORY)


cdef void _texts_pass(TextPart* tp, const uint8_t* sel, const row_t* op_row,
                      const int32_t* name, const int32_t* ap, Py_ssize_t nt,
                      const GpuCols* g, int32_t* text, Py_ssize_t r0,
                      Py_ssize_t r1) noexcept nogil:
    """The GPU ops of rows [r0, r1) into ``tp``: each one's code in ``text`` (-1: not
    selected or no launching op), its op's key ``name << 32 | args`` coded by first
    sight, and per code the kernel ns, distinct launching ops, copies over a link and
    kernel-name pairs; stops at the first bad row (``tp.bad``)."""
    cdef Py_ssize_t i
    cdef int64_t r, key
    cdef int32_t c
    for i in range(r0, r1):
        r = op_row[i]
        if not sel[i] or r < 0:
            text[i] = -1
            continue
        if r >= nt:
            tp.bad = _BAD_ROW
            return
        key = <int64_t>name[r] << 32
        if ap != NULL:
            key |= <int64_t>ap[r]
        if key < 0:
            tp.bad = _BAD_ID
            return
        c = _hash_add(&tp.h, key)
        if c < 0 or (c >= tp.cap and not _grow(&tp.kernel, &tp.calls, &tp.link, &tp.cap, c)):
            tp.bad = _NO_MEMORY
            return
        text[i] = c
        if not tp.seen[r >> 3] & (1 << (r & 7)):
            tp.seen[r >> 3] |= 1 << (r & 7)
            tp.calls[c] += 1
        if not _tally(g, c, i, tp.kernel, tp.link, &tp.hp):
            tp.bad = _NO_MEMORY
            return


@cython.auto_pickle(False)
cdef class _TextsJob:
    """The GPU-op columns of one launcher_texts call, shared by its parts' threads."""
    cdef GpuCols g


def _texts_part(int part, const uint8_t[::1] sel, const row_t[::1] op_row,
                const int32_t[::1] name, args, _TextsJob job, int32_t[::1] text,
                Py_ssize_t r0, Py_ssize_t r1, list out, list errors):
    """One part of :func:`launcher_texts` (on its own thread): rows [r0, r1), its codes
    in ``text`` and ``out[part]``: its keys by code, per code kernel ns, calls and links,
    its pairs and its bitset of launching ops counted."""
    cdef Py_ssize_t nt = name.shape[0], k
    cdef TextPart tp
    cdef const int32_t* ap
    cdef uint8_t[::1] seen
    tp.kernel, tp.calls, tp.link, tp.cap, tp.seen, tp.bad = NULL, NULL, NULL, 0, NULL, 0
    tp.h.keys = tp.h.code = tp.hp.keys = tp.hp.code = NULL
    try:
        ap = <const int32_t*>_data(args, nt, np.int32, "launcher_texts: args")
        seen_arr = np.zeros(((nt + 7) >> 3) or 1, dtype=np.uint8)  # a bit per launching op
        seen = seen_arr
        tp.seen = &seen[0]
        _hash_init(&tp.h)
        _hash_init(&tp.hp)
        if r1 > r0:
            with nogil:
                _texts_pass(&tp, &sel[0], &op_row[0], &name[0] if nt else NULL, ap, nt,
                            &job.g, &text[0], r0, r1)
        if tp.bad == _BAD_ROW:
            raise ValueError("launcher_texts: a launching-op row is out of range")
        if tp.bad == _BAD_ID:
            raise ValueError("launcher_texts: a name or args id is negative")
        if tp.bad == _NO_MEMORY:
            raise MemoryError()
        keys = _hash_keys(&tp.h)
        k = keys.shape[0]
        out[part] = (
            keys,
            np.asarray(<int64_t[:k]>tp.kernel).copy() if k else np.zeros(0, np.int64),
            np.asarray(<int64_t[:k]>tp.calls).copy() if k else np.zeros(0, np.int64),
            np.asarray(<uint8_t[:k]>tp.link).copy() if k else np.zeros(0, np.uint8),
            _hash_keys(&tp.hp),
            seen_arr,
        )
    except BaseException as e:  # re-raised on the caller's thread
        errors.append(e)
    finally:
        _hash_free(&tp.h)
        _hash_free(&tp.hp)
        free(tp.kernel)
        free(tp.calls)
        free(tp.link)


def _texts_code(int part, int32_t[::1] text, const int32_t[::1] code, Py_ssize_t r0,
                Py_ssize_t r1, list errors):
    """A part's codes in ``text`` (rows [r0, r1)) renumbered by ``code``, in place."""
    cdef Py_ssize_t i
    with nogil:
        for i in range(r0, r1):
            if text[i] >= 0:
                text[i] = code[text[i]]


def launcher_texts(const uint8_t[::1] sel, const row_t[::1] op_row, const int32_t[::1] name,
                   args, const int64_t[::1] start, const int64_t[::1] end,
                   const int8_t[::1] kind, const int8_t[::1] copy_kind,
                   const int32_t[::1] op_name, int memcpy_kind, int dtod, int parts=1,
                   Py_ssize_t split_min=1 << 18):
    """Per GPU op selected (``sel``) with a launching op (``op_row`` >= 0, a row of the
    launching table, whose ``name`` and ``args`` (None: no args) columns are given): the
    index of its op's key ``name << 32 | args`` among the distinct keys, ascending (as
    ``numpy.unique``), else -1; those keys; and per key (op text), over its GPU ops (their
    ``start``, ``end``, ``kind``, ``copy_kind`` and kernel name ``op_name``): kernel ns,
    distinct launching ops (calls), whether a copy over a link (a memcpy that is not device
    to device) is among them, and the distinct ``text << 32 | kernel name`` pairs, in no
    order. With ``parts`` > 1 (at most 8; one part per ``split_min`` ops at most) the ops
    are cut into row ranges on threads, each with its own keys and totals, merged at the
    end: a launching op whose GPU ops fall in several parts is counted once."""
    cdef Py_ssize_t n = op_row.shape[0], k
    if sel.shape[0] != n or start.shape[0] != n:
        raise ValueError("launcher_texts: columns differ in length")
    if parts < 1 or split_min < 1:
        raise ValueError("launcher_texts: parts and split_min must be >= 1")
    cdef _TextsJob job = _TextsJob()
    job.g = _gpu_cols(start, end, kind, copy_kind, op_name, memcpy_kind, dtod)
    text_arr = np.empty(n, dtype=np.int32)
    parts = _n_parts(parts, n, split_min)
    cuts = [k * n // parts for k in range(parts + 1)]
    out = [None] * parts
    _on_threads(_texts_part, [(k, sel, op_row, name, args, job, text_arr, cuts[k],
                               cuts[k + 1], out) for k in range(parts)])
    keys = np.unique(np.concatenate([o[0] for o in out]))  # the op texts, ascending
    n_keys = keys.shape[0]
    kernel_arr = np.zeros(n_keys, dtype=np.int64)
    calls_arr = np.zeros(n_keys, dtype=np.int64)
    link_arr = np.zeros(n_keys, dtype=bool)
    codes, pairs = [], []
    for k, (part_keys, kernel, calls, link, part_pairs, _) in enumerate(out):
        code = np.searchsorted(keys, part_keys).astype(np.int32)  # distinct in a part
        kernel_arr[code] += kernel
        calls_arr[code] += calls
        link_arr[code] |= link.view(bool)
        pairs.append((code[part_pairs >> 32].astype(np.int64) << 32) | (part_pairs & 0xFFFFFFFF))
        codes.append(code)
    _on_threads(_texts_code, [(k, text_arr, codes[k], cuts[k], cuts[k + 1])
                              for k in range(parts)])
    pairs_arr = pairs[0]
    if parts > 1:
        pairs_arr = np.unique(np.concatenate(pairs))
        counted = out[0][5]
        for k in range(1, parts):  # launching ops counted in an earlier part too: once
            seen = out[k][5]
            again = np.flatnonzero(seen & counted)
            if again.size:
                bits = np.unpackbits(seen[again] & counted[again], bitorder="little")
                rows = (again.repeat(8) * 8 + np.tile(np.arange(8), again.size))[bits > 0]
                op_key = np.asarray(name)[rows].astype(np.int64) << 32
                if args is not None:
                    op_key |= np.asarray(args)[rows]
                np.subtract.at(calls_arr, np.searchsorted(keys, op_key), 1)
            counted = counted | seen
    return keys, text_arr, kernel_arr, calls_arr, link_arr, pairs_arr


def text_totals(const int64_t[::1] rows, const int32_t[::1] text, Py_ssize_t n_texts,
                const int64_t[::1] start, const int64_t[::1] end, const int8_t[::1] kind,
                const int8_t[::1] copy_kind, const int32_t[::1] op_name, int memcpy_kind,
                int dtod):
    """Per op text in ``[0, n_texts)``, over the GPU ops ``rows`` (each of ``text[row]``):
    kernel ns, whether a copy over a link is among them, and the distinct ``text << 32 |
    kernel name`` pairs, in no order (:func:`launcher_texts`' totals, for ops charged
    otherwise: graph replays matched to captures)."""
    cdef Py_ssize_t n = text.shape[0], i, j
    cdef GpuCols g = _gpu_cols(start, end, kind, copy_kind, op_name, memcpy_kind, dtod)
    cdef Hash hp
    cdef bint oom = False, bad = False
    if start.shape[0] != n:
        raise ValueError("text_totals: columns differ in length")
    kernel_arr = np.zeros(n_texts, dtype=np.int64)
    link_arr = np.zeros(n_texts, dtype=np.uint8)
    cdef int64_t[::1] kernel = kernel_arr
    cdef uint8_t[::1] link = link_arr
    _hash_init(&hp)
    try:
        with nogil:
            for j in range(rows.shape[0]):
                i = rows[j]
                if not 0 <= i < n or not 0 <= text[i] < n_texts:
                    bad = True
                    break
                if not _tally(&g, text[i], i, &kernel[0], &link[0], &hp):
                    oom = True
                    break
        if bad:
            raise ValueError("text_totals: a row or text is out of range")
        if oom:
            raise MemoryError()
        pairs = _hash_keys(&hp)
    finally:
        _hash_free(&hp)
    return kernel_arr, link_arr.view(bool), pairs


cdef struct CatCols:  # what op_categories reads per GPU op, and its per-op outputs
    const int64_t* start
    const int64_t* end
    const int8_t* kind
    const int32_t* name
    const uint8_t* sel
    const int32_t* win  # NULL: no window sums
    const int32_t* text
    const int8_t* text_cat
    const int64_t* text_place
    const int8_t* name_cat
    const int8_t* reason
    const uint8_t* graph
    Py_ssize_t n_win, nt, nn, n_reasons
    int memcpy_kind, memset_kind, memcpy_cat, memset_cat, n_cat
    int8_t* cat
    int32_t* row32  # the table rows: int32, or int64 (the other NULL)
    int64_t* row64


cdef bint _categorize(const CatCols* g, Py_ssize_t r0, Py_ssize_t r1, int64_t* cells,
                      int64_t* tot, int64_t* sums, int64_t* r_ops,
                      int64_t* r_ns) noexcept nogil:
    """:func:`op_categories` over the GPU ops of rows [r0, r1), its sums added to the
    given ones; False where a text, name, reason or window is out of range."""
    cdef Py_ssize_t i
    cdef int64_t d
    cdef int8_t c
    cdef int32_t t
    cdef int n_cat = g.n_cat
    for i in range(r0, r1):
        t = g.text[i]
        if (t >= g.nt or g.name[i] < 0 or g.name[i] >= g.nn or g.reason[i] >= g.n_reasons
                or (g.win != NULL and g.win[i] >= g.n_win)):
            return False
        if g.row32 != NULL:
            g.row32[i] = <int32_t>g.text_place[t] if t >= 0 else -1
        else:
            g.row64[i] = g.text_place[t] if t >= 0 else -1
        if g.kind[i] == g.memcpy_kind:
            c = g.memcpy_cat
        elif g.kind[i] == g.memset_kind:
            c = g.memset_cat
        elif t >= 0 and g.text_cat[t] < n_cat:
            c = g.text_cat[t]
        else:
            c = g.name_cat[g.name[i]]
        g.cat[i] = c
        if not g.sel[i]:
            continue
        d = g.end[i] - g.start[i]
        if g.win != NULL and g.win[i] >= 0:
            cells[g.win[i] * n_cat + (c if c < n_cat else n_cat - 1)] += d
        tot[c] += d
        sums[0] += d
        if t >= 0:
            sums[1] += d
        if g.graph[i]:
            sums[2] += d
            if t >= 0:
                sums[3] += d
        if g.reason[i] >= 0:
            r_ops[g.reason[i]] += 1
            r_ns[g.reason[i]] += d
    return True


@cython.auto_pickle(False)
cdef class _CatJob:
    """The columns of one op_categories call, shared by its parts' threads."""
    cdef CatCols g


def _categories_part(int part, _CatJob job, Py_ssize_t r0, Py_ssize_t r1,
                     int64_t[::1] cells, int64_t[::1] tot, int64_t[::1] sums,
                     int64_t[::1] r_ops, int64_t[::1] r_ns, uint8_t[::1] bad, list errors):
    """One part of :func:`op_categories` (on its own thread): rows [r0, r1), summed into
    its own totals; ``bad[part]`` set where a value is out of range."""
    cdef int64_t* cp = &cells[0] if cells.shape[0] else NULL
    try:
        with nogil:
            if not _categorize(&job.g, r0, r1, cp, &tot[0], &sums[0],
                               &r_ops[0] if r_ops.shape[0] else NULL,
                               &r_ns[0] if r_ns.shape[0] else NULL):
                bad[part] = 1
    except BaseException as e:  # re-raised on the caller's thread
        errors.append(e)


def op_categories(const int64_t[::1] start, const int64_t[::1] end, const int8_t[::1] kind,
                  const int32_t[::1] name, const uint8_t[::1] sel, win, Py_ssize_t n_win,
                  const int32_t[::1] text, const int8_t[::1] text_cat,
                  const int64_t[::1] text_place, const int8_t[::1] name_cat,
                  const int8_t[::1] reason, Py_ssize_t n_reasons, const uint8_t[::1] graph,
                  int memcpy_kind, int memset_kind, int memcpy_cat, int memset_cat,
                  int n_cat, int parts=1, Py_ssize_t split_min=1 << 18):
    """Per GPU op its category (a memcpy or memset by its kind; a charged op (``text``
    >= 0) by its text's category when known (``text_cat`` < ``n_cat``); else by its kernel
    name, ``name_cat``) and its row in the table (``text_place``, -1; int32 when the
    texts fit, else int64); and over the
    selected ops (``sel``): kernel ns per (window (``win``, int32, -1: none; None: not
    summed), category) and per category, the kernel ns in all, charged, graph-replayed and
    graph-replayed charged, and per reason code in ``[0, n_reasons)`` ops and kernel ns.
    With ``parts`` > 1 (at most 8; one part per ``split_min`` ops at most, and only while
    each part's window sums are small beside the ops) the ops are cut into row ranges on
    threads, each with its own sums, added at the end."""
    cdef Py_ssize_t n = start.shape[0], k
    cdef const int32_t* wp = <const int32_t*>_data(win, start.shape[0], np.int32,
                                                   "op_categories: win")
    cdef Py_ssize_t nt = text_cat.shape[0], nn = name_cat.shape[0]
    if (end.shape[0] != n or kind.shape[0] != n or name.shape[0] != n or sel.shape[0] != n
            or text.shape[0] != n or reason.shape[0] != n or graph.shape[0] != n):
        raise ValueError("op_categories: columns differ in length")
    if text_place.shape[0] != nt:
        raise ValueError("op_categories: text_cat and text_place differ in length")
    if parts < 1 or split_min < 1:
        raise ValueError("op_categories: parts and split_min must be >= 1")
    cat_arr = np.empty(n, dtype=np.int8)
    wide = nt >= INT32_MAX  # table rows as int32 where they fit
    row_arr = np.empty(n, dtype=np.int64 if wide else np.int32)
    cdef int64_t[::1] r64
    cdef int32_t[::1] r32
    cdef int8_t[::1] cat = cat_arr
    cdef _CatJob job = _CatJob()
    cdef CatCols* g = &job.g
    g.start = g.end = NULL
    g.kind = NULL
    g.name = g.text = NULL
    g.sel = g.graph = NULL
    g.reason = g.cat = NULL
    g.row32 = NULL
    g.row64 = NULL
    if n:
        g.start, g.end, g.kind, g.name, g.sel = &start[0], &end[0], &kind[0], &name[0], &sel[0]
        g.text, g.reason, g.graph, g.cat = &text[0], &reason[0], &graph[0], &cat[0]
    g.win = wp
    g.text_cat = &text_cat[0] if nt else NULL
    g.text_place = &text_place[0] if nt else NULL
    g.name_cat = &name_cat[0] if nn else NULL
    g.n_win, g.nt, g.nn, g.n_reasons = n_win, nt, nn, n_reasons
    g.memcpy_kind, g.memset_kind, g.memcpy_cat, g.memset_cat, g.n_cat = (
        memcpy_kind, memset_kind, memcpy_cat, memset_cat, n_cat)
    if n and wide:
        r64 = row_arr
        job.g.row64 = &r64[0]
    elif n:
        r32 = row_arr
        job.g.row32 = &r32[0]
    n_cells = (n_win if wp != NULL else 0) * n_cat
    parts = _n_parts(parts, n, split_min)
    if parts > 1 and n_cells * parts > n // 4:  # the parts' window sums would weigh
        parts = 1
    cells_arr = np.zeros((parts, n_cells), dtype=np.int64)
    tot_arr = np.zeros((parts, n_cat), dtype=np.int64)
    sums_arr = np.zeros((parts, 4), dtype=np.int64)
    r_ops_arr = np.zeros((parts, n_reasons), dtype=np.int64)
    r_ns_arr = np.zeros((parts, n_reasons), dtype=np.int64)
    bad_arr = np.zeros(parts, dtype=np.uint8)
    _on_threads(_categories_part, [
        (k, job, k * n // parts, (k + 1) * n // parts, cells_arr[k], tot_arr[k], sums_arr[k],
         r_ops_arr[k], r_ns_arr[k], bad_arr) for k in range(parts)])
    if bad_arr.any():
        raise ValueError("op_categories: a text, name, reason or window is out of range")
    return (cat_arr, row_arr, cells_arr.sum(axis=0).reshape(-1, n_cat), tot_arr.sum(axis=0),
            sums_arr.sum(axis=0), r_ops_arr.sum(axis=0), r_ns_arr.sum(axis=0))


cdef void _add_piece(int64_t* f, const int64_t* points, Py_ssize_t nq, Py_ssize_t* at,
                     int64_t* covered, int64_t ps, int64_t pe) noexcept nogil:
    """A union's next piece [ps, pe) (after the ones before it, ``covered`` ns in all) that
    reaches the point at ``at``: ``f`` at the points up to pe (from ``at`` on) is the
    length of the union before them."""
    cdef Py_ssize_t p = at[0]
    while p < nq and points[p] <= ps:
        f[p] = covered[0]
        p += 1
    while p < nq and points[p] < pe:
        f[p] = covered[0] + points[p] - ps
        p += 1
    at[0] = p
    covered[0] += pe - ps


cdef void _busy_sweep(const int64_t* start, const int64_t* end, const int8_t* cat,
                      const int64_t* order, Py_ssize_t i0, Py_ssize_t i1, int n_cat,
                      const int8_t* dense, Py_ssize_t n_live, const int64_t* reach,
                      int64_t lo, int64_t hi, int64_t* f, Py_ssize_t stride,
                      const int64_t* pts, Py_ssize_t nq, int64_t* covered) noexcept nogil:
    """:func:`busy_split`'s pass over the ops ``order[i0:i1]`` (by start, each at or after
    ``lo``) clipped to [lo, hi], after the earlier ops, of which those of categories <= k
    reach ``reach[k]`` (per live category: the latest end): per live category k,
    ``f[k * stride + i]`` for the points ``pts[0:nq]`` (each in [lo, hi)), the length of
    the union of categories <= k within [lo, that point), and ``covered[k]`` the length of
    that union within [lo, hi]."""
    cdef int64_t o_s[128]  # per live category: the open piece [o_s, o_e) of its union
    cdef int64_t o_e[128]  # (none: both INT64_MIN, so that the next op closes nothing)
    cdef Py_ssize_t at[128]  # per category: its next point
    cdef int64_t nxt[128]  # and that point (INT64_MAX: none)
    cdef Py_ssize_t k, p, i, r
    cdef int64_t s, e, oe
    cdef int64_t next_pt = pts[0] if nq else INT64_MAX  # pts[at[k]] for every k at first
    for k in range(n_live):
        # the earlier ops that reach past lo: one piece from lo (each holds lo)
        e = reach[k] if reach[k] < hi else hi
        o_s[k] = lo if e > lo else INT64_MIN
        o_e[k] = e if e > lo else INT64_MIN
        covered[k] = at[k] = 0
        nxt[k] = next_pt
    for i in range(i0, i1):
        r = order[i]
        s = start[r]
        e = end[r] if end[r] < hi else hi
        if e <= s or cat[r] < 0 or cat[r] >= n_cat:
            continue
        for k in range(dense[cat[r]], n_live):
            oe = o_e[k]
            if s > oe:  # a new piece from s (the open one is done)
                if oe <= nxt[k]:  # no point inside the piece or after it
                    covered[k] += oe - o_s[k]
                else:
                    _add_piece(f + k * stride, pts, nq, &at[k], &covered[k], o_s[k], oe)
                    nxt[k] = pts[at[k]] if at[k] < nq else INT64_MAX
                o_s[k] = s
                o_e[k] = e
            elif e > oe:
                o_e[k] = e
            else:  # inside the open piece, so inside those above it (they hold it)
                break
    for k in range(n_live):
        if o_e[k] > o_s[k]:
            _add_piece(f + k * stride, pts, nq, &at[k], &covered[k], o_s[k], o_e[k])
        for p in range(at[k], nq):
            f[k * stride + p] = covered[k]


def _busy_reach(int part, const int64_t[::1] start, const int64_t[::1] end,
                const int8_t[::1] cat, const int64_t[::1] order, Py_ssize_t i0, Py_ssize_t i1,
                int n_cat, int64_t[::1] reach, uint8_t[::1] bad, list errors):
    """:func:`busy_split`'s first pass over ``order[i0:i1]`` (on its own thread): per
    category the latest end of its non-empty ops (``reach``, INT64_MIN: none); ``bad[0]``
    set where a row is out of range, ``bad[1]`` where the order is not by start (checked
    from ``i0 - 1``)."""
    cdef Py_ssize_t n = start.shape[0], i, r
    cdef int64_t prev = INT64_MIN
    cdef int8_t c
    try:
        with nogil:
            for i in range(n_cat):
                reach[i] = INT64_MIN
            for i in range(i0 - 1 if i0 > 0 else 0, i1):
                r = order[i]
                if r < 0 or r >= n:
                    bad[0] = 1
                    break
                if start[r] < prev:
                    bad[1] = 1
                    break
                prev = start[r]
                c = cat[r]
                if i >= i0 and end[r] > start[r] and 0 <= c < n_cat and end[r] > reach[c]:
                    reach[c] = end[r]
    except BaseException as e:  # re-raised on the caller's thread
        errors.append(e)


def _busy_part(int part, const int64_t[::1] start, const int64_t[::1] end,
               const int8_t[::1] cat, const int64_t[::1] order, Py_ssize_t i0, Py_ssize_t i1,
               int n_cat, const int8_t[::1] dense, const int64_t[::1] reach, int64_t lo,
               int64_t hi, int64_t[:, ::1] f, Py_ssize_t p0, Py_ssize_t p1,
               const int64_t[::1] points, int64_t[::1] covered, list errors):
    """One part of :func:`busy_split` (on its own thread): the ops ``order[i0:i1]``
    clipped to [lo, hi], after the earlier ones that reach ``reach``, and the points
    ``points[p0:p1]``; an error goes to ``errors``."""
    cdef bint some = i1 > i0  # else no op is read
    try:
        with nogil:
            _busy_sweep(&start[0] if some else NULL, &end[0] if some else NULL,
                        &cat[0] if some else NULL, &order[0] if some else NULL, i0, i1, n_cat,
                        &dense[0], f.shape[0], &reach[0], lo, hi,
                        &f[0, p0] if f.shape[0] and p1 > p0 else NULL, f.shape[1],
                        &points[p0] if p1 > p0 else NULL, p1 - p0, &covered[0])
    except BaseException as e:  # re-raised on the caller's thread
        errors.append(e)


def busy_split(const int64_t[::1] start, const int64_t[::1] end, const int8_t[::1] cat,
               const int64_t[::1] order, int n_cat, const int64_t[::1] points, int parts=1,
               Py_ssize_t split_min=1 << 18):
    """Over the ops ``order`` (rows by start, as the partition sorts a device's ops; those
    empty or of a category outside [0, ``n_cat``) are passed over; ``n_cat`` at most
    127): per category k and per point of ``points`` (ascending), the length of the union
    of the ops of categories <= k before that point, shape ``(n_cat, points)``, in one
    pass over the order (the unions of the categories present, all at once). With
    ``parts`` > 1 (at most 8; one part per ``split_min`` ops at most) the order is cut
    into equal parts, each on its own thread: a first pass finds per part and category
    the latest end (and checks the order), then each part sweeps its ops clipped to its
    span, from the pieces the earlier parts' ops reach into it; a point's lengths are its
    part's plus the whole unions of the parts before (the same integers as one part)."""
    cdef Py_ssize_t n = start.shape[0], no = order.shape[0], nq = points.shape[0], i, k, j
    cdef Py_ssize_t n_live = 0
    cdef bint seen[128]
    if end.shape[0] != n or cat.shape[0] != n:
        raise ValueError("busy_split: columns differ in length")
    if not 0 <= n_cat <= 127:
        raise ValueError("busy_split: at most 127 categories")
    if parts < 1 or split_min < 1:
        raise ValueError("busy_split: parts and split_min must be >= 1")
    for i in range(1, nq):
        if points[i] < points[i - 1]:
            raise ValueError("busy_split: points are not sorted")
    parts = _n_parts(parts, no, split_min)
    cuts = [j * no // parts for j in range(parts + 1)]  # the parts' places in the order
    reach_arr = np.empty((parts, n_cat if n_cat else 1), dtype=np.int64)
    bad_arr = np.zeros(2, dtype=np.uint8)
    _on_threads(_busy_reach, [
        (j, start, end, cat, order, cuts[j], cuts[j + 1], n_cat, reach_arr[j], bad_arr)
        for j in range(parts)])
    if bad_arr[0]:
        raise ValueError("busy_split: a row of the order is out of range")
    if bad_arr[1]:
        raise ValueError("busy_split: the order is not by start")
    for k in range(n_cat):
        seen[k] = bool((reach_arr[:, k] > INT64_MIN).any())
    dense_arr = np.zeros(128, dtype=np.int8)
    cdef int8_t[::1] dense = dense_arr  # per category: its index among the present ones
    for k in range(n_cat):
        dense[k] = n_live
        n_live += seen[k]
    live = [k for k in range(n_cat) if seen[k]]
    # per part and live category k: the latest end of the earlier parts' ops of
    # categories <= k (what reaches into the part)
    reach_live = np.maximum.accumulate(reach_arr[:, live], axis=1) if live else np.empty(
        (parts, 0), dtype=np.int64)
    before = np.full((parts, max(n_live, 1)), INT64_MIN, dtype=np.int64)
    if parts > 1 and n_live:
        before[1:, :n_live] = np.maximum.accumulate(reach_live[:-1], axis=0)
    # part j spans [its first op's start, the next part's): part 0 from the start of time
    clip = [INT64_MIN] + [int(start[order[cuts[j]]]) for j in range(1, parts)] + [INT64_MAX]
    p_cut = [0] + [int(np.searchsorted(points, clip[j])) for j in range(1, parts)] + [nq]
    live_arr = np.zeros((n_live, nq), dtype=np.int64)
    covered_arr = np.zeros((parts, max(n_live, 1)), dtype=np.int64)
    _on_threads(_busy_part, [
        (j, start, end, cat, order, cuts[j], cuts[j + 1], n_cat, dense_arr, before[j],
         clip[j], clip[j + 1], live_arr, p_cut[j], p_cut[j + 1], points, covered_arr[j])
        for j in range(parts)])
    for j in range(1, parts):  # a part's lengths start where the parts before it end
        live_arr[:, p_cut[j]:p_cut[j + 1]] += covered_arr[:j, :n_live].sum(axis=0)[:, None]
    out_arr = np.zeros((n_cat, nq), dtype=np.int64)
    for k in range(n_cat):  # an absent category's union is the one below it
        if dense[k] + seen[k] > 0:
            out_arr[k] = live_arr[dense[k] + seen[k] - 1]
    return out_arr
