# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3, autotestdict=False
"""Host attribution (docs/attribution.md, "Host attribution"): time on a host thread
charged to the innermost host activity there.

One pass over one thread's activities: in start order, they go through a heap
whose top is the innermost activity covering the current instant (latest start; ties: the
earliest end, then the lower kind, then the lower name rank), which cuts the thread's
timeline into segments of one innermost activity (or none: ``untraced``); each segment is
intersected with the query intervals open at that time and the overlap added to a hash
table keyed by (query id, label). O(n log n) for n activities; memory: the heap (the
nesting depth, plus activities that ended under a later-starting one), the open queries
and the distinct (query id, label) pairs.

A label is ``kind * n_names + name``; instants covered by no activity get the label
``untraced_kind * n_names`` (name 0, the empty string).
"""

import numpy as np

from libc.stdint cimport INT64_MAX, INT64_MIN, int8_t, int32_t, int64_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc


cdef struct Acts:
    const int64_t* start
    const int64_t* end
    const int8_t* kind
    const int32_t* name
    const int32_t* rank  # per string id: the rank of its text


cdef inline bint _inner(Acts* a, int64_t x, int64_t y) noexcept nogil:
    """Activity x is more inner than y: later start, then earlier end, kind, name rank."""
    if a.start[x] != a.start[y]:
        return a.start[x] > a.start[y]
    if a.end[x] != a.end[y]:
        return a.end[x] < a.end[y]
    if a.kind[x] != a.kind[y]:
        return a.kind[x] < a.kind[y]
    return a.rank[a.name[x]] < a.rank[a.name[y]]


cdef inline void _push(int64_t* h, Py_ssize_t n, int64_t x, Acts* a) noexcept nogil:
    """Push x onto the heap h[0:n] (innermost on top)."""
    cdef Py_ssize_t i = n, p
    while i > 0:
        p = (i - 1) >> 1
        if not _inner(a, x, h[p]):
            break
        h[i] = h[p]
        i = p
    h[i] = x


cdef inline void _pop(int64_t* h, Py_ssize_t n, Acts* a) noexcept nogil:
    """Remove the top of the heap h[0:n] (n >= 1); the heap is then h[0:n-1]."""
    cdef int64_t x = h[n - 1]
    cdef Py_ssize_t i = 0, c, m = n - 1
    while True:
        c = 2 * i + 1
        if c >= m:
            break
        if c + 1 < m and _inner(a, h[c + 1], h[c]):
            c += 1
        if not _inner(a, h[c], x):
            break
        h[i] = h[c]
        i = c
    if m > 0:
        h[i] = x


cdef struct Table:
    int64_t* keys  # -1: empty
    int64_t* vals
    Py_ssize_t cap  # a power of two
    Py_ssize_t used


cdef inline Py_ssize_t _slot(int64_t k, Py_ssize_t cap) noexcept nogil:
    cdef unsigned long long h = <unsigned long long>k * 0x9E3779B97F4A7C15ULL
    return <Py_ssize_t>((h >> 17) & <unsigned long long>(cap - 1))


cdef int _grow(Table* t) noexcept nogil:
    """Double the table; 0 on success, -1 when out of memory."""
    cdef Py_ssize_t cap = t.cap * 2, i, j
    cdef int64_t* keys = <int64_t*>malloc(cap * sizeof(int64_t))
    cdef int64_t* vals = <int64_t*>calloc(cap, sizeof(int64_t))
    if keys == NULL or vals == NULL:
        free(keys)
        free(vals)
        return -1
    for i in range(cap):
        keys[i] = -1
    for i in range(t.cap):
        if t.keys[i] >= 0:
            j = _slot(t.keys[i], cap)
            while keys[j] >= 0:
                j = (j + 1) & (cap - 1)
            keys[j] = t.keys[i]
            vals[j] = t.vals[i]
    free(t.keys)
    free(t.vals)
    t.keys = keys
    t.vals = vals
    t.cap = cap
    return 0


cdef inline int _add(Table* t, int64_t k, int64_t v) noexcept nogil:
    cdef Py_ssize_t j = _slot(k, t.cap)
    while t.keys[j] >= 0:
        if t.keys[j] == k:
            t.vals[j] += v
            return 0
        j = (j + 1) & (t.cap - 1)
    t.keys[j] = k
    t.vals[j] = v
    t.used += 1
    if 2 * t.used > t.cap:
        return _grow(t)
    return 0


def innermost_charges(const int64_t[::1] start,
                      const int64_t[::1] end, const int8_t[::1] kind,
                      const int32_t[::1] name, const int32_t[::1] name_rank,
                      const int64_t[::1] q_s, const int64_t[::1] q_e,
                      const int64_t[::1] q_id,
                      int64_t n_names, int8_t untraced_kind):
    """Charge each query interval ``[q_s, q_e)`` to the innermost activity at each of its
    instants; activities and queries are of one thread.

    Activities: columns ``start``, ``end``, ``kind``, ``name`` (string id, < n_names),
    sorted by start (ties in any order); ``name_rank``: per string id, the rank of its
    text (for ties). Activities of zero length cover nothing. Queries: sorted by start;
    ``q_id`` is the caller's id (several queries may share one). Returns ``(q_id, label,
    ns)`` arrays, one entry per distinct (query id, label) with ``ns > 0``, in no
    particular order; per query id, the charges sum to the total length of its queries.
    """
    cdef Py_ssize_t n = start.shape[0], nq = q_s.shape[0], i, j, k, lo
    cdef Py_ssize_t nh = 0, cap_h, na = 0, m = 0
    cdef int64_t r, t, nxt, ns_, top, act, lab, a, b
    cdef int bad = 0
    cdef Acts acts
    cdef Table tab
    if n_names < 1:
        raise ValueError("innermost_charges: n_names must be >= 1")
    if q_e.shape[0] != nq or q_id.shape[0] != nq:
        raise ValueError("innermost_charges: query columns differ in length")
    for i in range(1, nq):
        if q_s[i] < q_s[i - 1]:
            raise ValueError("innermost_charges: queries are not sorted by start")
    if end.shape[0] != n or kind.shape[0] != n or name.shape[0] != n:
        raise ValueError("innermost_charges: activity columns differ in length")
    for r in range(n):
        if r > 0 and start[r] < start[r - 1]:
            raise ValueError("innermost_charges: activities are not sorted by start")
        if name[r] < 0 or name[r] >= n_names or name[r] >= name_rank.shape[0]:
            raise ValueError("innermost_charges: a name id is out of range")
    active_arr = np.empty(nq, dtype=np.int64)
    cdef int64_t[::1] active = active_arr
    acts.start = &start[0] if start.shape[0] else NULL
    acts.end = &end[0] if end.shape[0] else NULL
    acts.kind = &kind[0] if kind.shape[0] else NULL
    acts.name = &name[0] if name.shape[0] else NULL
    acts.rank = &name_rank[0] if name_rank.shape[0] else NULL
    tab.cap = 64
    tab.used = 0
    tab.keys = <int64_t*>malloc(tab.cap * sizeof(int64_t))
    tab.vals = <int64_t*>calloc(tab.cap, sizeof(int64_t))
    cap_h = 64
    cdef int64_t* heap = <int64_t*>malloc(cap_h * sizeof(int64_t))
    cdef int64_t* grown
    if tab.keys == NULL or tab.vals == NULL or heap == NULL:
        free(tab.keys)
        free(tab.vals)
        free(heap)
        raise MemoryError()
    try:
        with nogil:
            for i in range(tab.cap):
                tab.keys[i] = -1
            k = 0  # the next query to open
            t = INT64_MIN
            while nq > 0:
                while nh > 0 and end[heap[0]] <= t:  # drop what ended
                    _pop(heap, nh, &acts)
                    nh -= 1
                ns_ = start[m] if m < n else INT64_MAX
                if nh > 0:
                    top = heap[0]
                    nxt = end[top] if end[top] < ns_ else ns_
                    act = top
                else:
                    nxt = ns_
                    act = -1
                if nxt > t:  # the segment [t, nxt): to the queries open in it
                    while k < nq and q_s[k] < nxt:
                        active[na] = k
                        na += 1
                        k += 1
                    lab = (kind[act] * n_names + name[act]) if act >= 0 else untraced_kind * n_names
                    j = 0
                    for lo in range(na):
                        a = q_s[active[lo]] if q_s[active[lo]] > t else t
                        b = q_e[active[lo]] if q_e[active[lo]] < nxt else nxt
                        if b > a and _add(&tab, q_id[active[lo]] * 6 * n_names + lab, b - a) < 0:
                            bad = 1
                            break
                        if q_e[active[lo]] > nxt:
                            active[j] = active[lo]
                            j += 1
                    na = j
                    if bad or (k >= nq and na == 0):
                        break
                t = nxt
                if t == INT64_MAX:
                    break
                while m < n and start[m] == t:
                    r = m
                    m += 1
                    if end[r] <= start[r]:
                        continue
                    if nh == cap_h:
                        grown = <int64_t*>realloc(heap, 2 * cap_h * sizeof(int64_t))
                        if grown == NULL:
                            bad = 1
                            break
                        heap = grown
                        cap_h *= 2
                    _push(heap, nh, r, &acts)
                    nh += 1
                if bad:
                    break
        if bad:
            raise MemoryError()
        out_q = np.empty(tab.used, dtype=np.int64)
        out_l = np.empty(tab.used, dtype=np.int64)
        out_v = np.empty(tab.used, dtype=np.int64)
        j = 0
        for i in range(tab.cap):
            if tab.keys[i] >= 0:
                out_q[j] = tab.keys[i] // (6 * n_names)
                out_l[j] = tab.keys[i] % (6 * n_names)
                out_v[j] = tab.vals[i]
                j += 1
        return out_q, out_l, out_v
    finally:
        free(tab.keys)
        free(tab.vals)
        free(heap)


def touching(const int64_t[::1] start, const int64_t[::1] end, const int32_t[::1] thread,
             const int64_t[::1] u_off, const int64_t[::1] u_s, const int64_t[::1] u_e):
    """1 where the activity ``[start, end)`` on ``thread`` shares an instant with the set
    ``u_s[u_off[t]:u_off[t + 1]]``, ``u_e[...]`` of its thread t (sorted, disjoint), else
    0; threads < 0 or >= len(u_off) - 1 have none. Only these activities can be innermost
    at an instant of the set. A binary search per activity, no sort."""
    cdef Py_ssize_t n = start.shape[0], nt = u_off.shape[0] - 1, i, lo, hi, mid
    cdef int64_t a, b
    cdef int32_t t
    out_arr = np.zeros(n, dtype=np.uint8)
    cdef unsigned char[::1] out = out_arr
    with nogil:
        for i in range(n):
            t = thread[i]
            a = start[i]
            b = end[i]
            if t < 0 or t >= nt or b <= a:
                continue
            lo = u_off[t]
            hi = u_off[t + 1]
            while lo < hi:  # the first interval of the set ending after a
                mid = (lo + hi) >> 1
                if u_e[mid] <= a:
                    lo = mid + 1
                else:
                    hi = mid
            if lo < u_off[t + 1] and u_s[lo] < b:
                out[i] = 1
    return out_arr


cdef struct Parts:
    Py_ssize_t n  # number of parts
    const int64_t** start
    const int64_t** end
    const int8_t** kind  # NULL: the part's constant kind
    const int32_t** name
    const unsigned char** mask  # NULL: every row (or the part's row index)
    const int64_t** index  # NULL: rows in table order
    int8_t* const_kind
    int64_t* rows  # per part: its table length
    int64_t* off  # per part: its first id in the id space (off[n]: the total)


cdef void _free_parts(Parts* p) noexcept:
    free(p.start)
    free(p.end)
    free(p.kind)
    free(p.name)
    free(p.mask)
    free(p.index)
    free(p.const_kind)
    free(p.rows)
    free(p.off)


cdef int _parts(Parts* p, list starts, list ends, list kinds, list names, list keeps,
                const int8_t[::1] const_kind) except -1:
    """Raw pointers to the parts' columns (the caller's lists keep them alive)."""
    cdef Py_ssize_t n = len(starts), i, j
    cdef const int64_t[::1] s, e, ix
    cdef const int8_t[::1] k
    cdef const int32_t[::1] nm
    cdef const unsigned char[::1] mk
    if len(ends) != n or len(kinds) != n or len(names) != n or len(keeps) != n \
            or const_kind.shape[0] != n:
        raise ValueError("sorted_rows: part lists differ in length")
    p.n = n
    p.start = <const int64_t**>calloc(n + 1, sizeof(void*))
    p.end = <const int64_t**>calloc(n + 1, sizeof(void*))
    p.kind = <const int8_t**>calloc(n + 1, sizeof(void*))
    p.name = <const int32_t**>calloc(n + 1, sizeof(void*))
    p.mask = <const unsigned char**>calloc(n + 1, sizeof(void*))
    p.index = <const int64_t**>calloc(n + 1, sizeof(void*))
    p.const_kind = <int8_t*>calloc(n + 1, sizeof(int8_t))
    p.rows = <int64_t*>calloc(n + 1, sizeof(int64_t))
    p.off = <int64_t*>calloc(n + 1, sizeof(int64_t))
    if (p.start == NULL or p.end == NULL or p.kind == NULL or p.name == NULL
            or p.mask == NULL or p.index == NULL or p.const_kind == NULL or p.rows == NULL
            or p.off == NULL):
        raise MemoryError()
    for i in range(n):
        s = starts[i]
        e = ends[i]
        nm = names[i]
        if e.shape[0] != s.shape[0] or nm.shape[0] != s.shape[0]:
            raise ValueError("sorted_rows: a part's columns differ in length")
        p.rows[i] = s.shape[0]
        if s.shape[0]:
            p.start[i] = &s[0]
            p.end[i] = &e[0]
            p.name[i] = &nm[0]
        p.const_kind[i] = const_kind[i]
        if kinds[i] is not None:
            k = kinds[i]
            if k.shape[0] != s.shape[0]:
                raise ValueError("sorted_rows: a part's kind column differs in length")
            if s.shape[0]:
                p.kind[i] = &k[0]
        keep = keeps[i]
        p.off[i + 1] = p.off[i] + s.shape[0]
        if keep is None:
            continue
        if keep.dtype == np.bool_:
            keep = keep.view(np.uint8)
        if keep.dtype == np.uint8:
            mk = keep
            if mk.shape[0] != s.shape[0]:
                raise ValueError("sorted_rows: a mask differs in length from its part")
            if mk.shape[0]:
                p.mask[i] = &mk[0]
        else:
            ix = keep
            for j in range(ix.shape[0]):
                if ix[j] < 0 or ix[j] >= s.shape[0]:
                    raise ValueError("sorted_rows: a row index is out of range")
            p.off[i + 1] = p.off[i] + ix.shape[0]
            if ix.shape[0]:
                p.index[i] = &ix[0]
    return 0


def sorted_rows(list starts, list ends, list kinds, list names, list keeps,
                const int8_t[::1] const_kind):
    """The kept rows of several tables ("parts") as four columns (start, end, kind, name)
    sorted by start, ties in part order then row order: what a stable argsort of the
    concatenated kept rows gives, without the concatenated copies.

    Per part: ``starts``/``ends`` int64, ``names`` int32, ``kinds`` int8 (None: every row
    has the part's ``const_kind``), ``keeps`` the rows kept: a uint8 mask, an int64 row
    index (its order kept), or None (every row). When the span of the kept starts and the
    number of rows fit in 64 bits together, the order is one sort of packed (start, row)
    keys; otherwise a stable argsort of the starts."""
    cdef Parts p
    cdef Py_ssize_t i, j, nk = 0
    cdef int64_t lo = INT64_MAX, hi = INT64_MIN, r, x, total
    cdef int bits, span_bits
    cdef const int64_t* ps
    p.start = NULL; p.end = NULL; p.kind = NULL; p.name = NULL; p.mask = NULL
    p.index = NULL; p.const_kind = NULL; p.rows = NULL; p.off = NULL
    try:
        _parts(&p, starts, ends, kinds, names, keeps, const_kind)
        total = p.off[p.n]
        with nogil:  # the kept rows: how many, and their starts' span
            for i in range(p.n):
                ps = p.start[i]
                for j in range(p.off[i + 1] - p.off[i]):
                    if p.mask[i] != NULL and not p.mask[i][j]:
                        continue
                    r = p.index[i][j] if p.index[i] != NULL else j
                    x = ps[r]
                    nk += 1
                    if x < lo:
                        lo = x
                    if x > hi:
                        hi = x
        bits = 1
        while bits < 63 and (<int64_t>1 << bits) < total:
            bits += 1
        span_bits = 0
        if nk:
            while span_bits < 64 and ((<uint64_t>hi - <uint64_t>lo) >> span_bits) != 0:
                span_bits += 1
        ids_arr = np.empty(nk, dtype=np.int64)
        if nk and span_bits + bits <= 64:
            keys_arr = ids_arr.view(np.uint64)
            _fill_ids(&p, ids_arr, lo, bits)
            keys_arr.sort(kind="stable")
            _unpack(keys_arr, bits)
        elif nk:
            _fill_ids(&p, ids_arr, 0, 0)  # the ids alone, then by start
            keyed = _gather_start(&p, ids_arr)
            ids_arr = ids_arr[np.argsort(keyed, kind="stable")]
            del keyed
        return _gather(&p, ids_arr)
    finally:
        _free_parts(&p)


cdef int _fill_ids(Parts* p, int64_t[::1] out, int64_t lo, int bits) except -1:
    """Per kept row in part then row order: its id (its part's offset plus its position
    there), packed below ``start - lo`` when ``bits`` > 0."""
    cdef Py_ssize_t i, j, q = 0
    cdef int64_t r
    with nogil:
        for i in range(p.n):
            for j in range(p.off[i + 1] - p.off[i]):
                if p.mask[i] != NULL and not p.mask[i][j]:
                    continue
                if bits:
                    r = p.index[i][j] if p.index[i] != NULL else j
                    out[q] = <int64_t>(((<uint64_t>p.start[i][r] - <uint64_t>lo) << bits)
                                       | <uint64_t>(p.off[i] + j))
                else:
                    out[q] = p.off[i] + j
                q += 1
    return 0


cdef int _unpack(uint64_t[::1] keys, int bits) except -1:
    """Packed keys to their ids, in place."""
    cdef Py_ssize_t i
    cdef uint64_t m = (<uint64_t>1 << bits) - 1
    with nogil:
        for i in range(keys.shape[0]):
            keys[i] &= m
    return 0


cdef inline void _locate(Parts* p, int64_t g, Py_ssize_t* part, int64_t* row) noexcept nogil:
    cdef Py_ssize_t i = 0
    while g >= p.off[i + 1]:
        i += 1
    part[0] = i
    row[0] = p.index[i][g - p.off[i]] if p.index[i] != NULL else g - p.off[i]


cdef object _gather_start(Parts* p, const int64_t[::1] ids):
    out_arr = np.empty(ids.shape[0], dtype=np.int64)
    cdef int64_t[::1] out = out_arr
    cdef Py_ssize_t i, part
    cdef int64_t row
    with nogil:
        for i in range(ids.shape[0]):
            _locate(p, ids[i], &part, &row)
            out[i] = p.start[part][row]
    return out_arr


cdef object _gather(Parts* p, const int64_t[::1] ids):
    cdef Py_ssize_t n = ids.shape[0], i, part
    cdef int64_t row
    s_arr = np.empty(n, dtype=np.int64)
    e_arr = np.empty(n, dtype=np.int64)
    k_arr = np.empty(n, dtype=np.int8)
    n_arr = np.empty(n, dtype=np.int32)
    cdef int64_t[::1] s = s_arr, e = e_arr
    cdef int8_t[::1] k = k_arr
    cdef int32_t[::1] nm = n_arr
    with nogil:
        for i in range(n):
            _locate(p, ids[i], &part, &row)
            s[i] = p.start[part][row]
            e[i] = p.end[part][row]
            k[i] = p.kind[part][row] if p.kind[part] != NULL else p.const_kind[part]
            nm[i] = p.name[part][row]
    return s_arr, e_arr, k_arr, n_arr
