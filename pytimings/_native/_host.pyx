# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3, autotestdict=False
"""Host attribution (docs/attribution.md, "Host attribution"): time on a host thread
charged to the innermost host activity there.

One pass over one thread's activities (:func:`thread_charges`): in start order, they go
through a heap whose top is the innermost activity covering the current instant (latest
start; ties: the earliest end, then the lower kind, then the lower name rank), which cuts
the thread's timeline into segments of one innermost activity (or none: ``untraced``);
each segment is intersected with the query intervals open at that time and the overlap
added to a hash table keyed by (query id, label). O(n log n) for n activities.

The activities are read in place from the trace's tables ("parts": ranges, API calls,
host_ops), in any row order: no sorted copy of them is made. The rows of the thread that
share an instant with a query are marked (1 bit per row), counted into 2**16 buckets of
start, and the buckets grouped into chunks of about ``chunk_rows`` rows; the sweep sorts
one chunk at a time (a radix sort of packed (start, row) keys, reading only the blocks of
rows whose starts reach the chunk), so its memory is the chunk, the heap (the activities
covering an instant; ended ones are dropped as they surface, and all at once whenever the
heap has doubled), the open queries and the distinct (query id, label) pairs.

A label is ``kind * n_names + name``; instants covered by no activity get the label
``untraced_kind * n_names`` (name 0, the empty string).
"""

import numpy as np

from libc.stdint cimport INT64_MAX, INT64_MIN, int8_t, int32_t, int64_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memset


cdef enum:
    N_KINDS = 6  # ActivityKind values 0..5
    HIST_BITS = 16  # the buckets of start that chunks are made of
    DIGIT_BITS = 11  # radix sort digits


cdef struct Act:  # an activity on the heap
    int64_t start
    int64_t end
    int64_t tie  # kind << 32 | the rank of its name's text
    int64_t label  # kind * n_names + name


cdef inline bint _inner(const Act* x, const Act* y) noexcept nogil:
    """x is more inner than y: later start, then earlier end, kind, name rank."""
    if x.start != y.start:
        return x.start > y.start
    if x.end != y.end:
        return x.end < y.end
    return x.tie < y.tie


cdef inline void _push(Act* h, Py_ssize_t n, Act x) noexcept nogil:
    """Push x onto the heap h[0:n] (innermost on top)."""
    cdef Py_ssize_t i = n, p
    while i > 0:
        p = (i - 1) >> 1
        if not _inner(&x, &h[p]):
            break
        h[i] = h[p]
        i = p
    h[i] = x


cdef inline void _sift_down(Act* h, Py_ssize_t m, Py_ssize_t i, Act x) noexcept nogil:
    """Put x at place i of the heap h[0:m] and move it down to where it belongs."""
    cdef Py_ssize_t c
    while True:
        c = 2 * i + 1
        if c >= m:
            break
        if c + 1 < m and _inner(&h[c + 1], &h[c]):
            c += 1
        if not _inner(&h[c], &x):
            break
        h[i] = h[c]
        i = c
    h[i] = x


cdef Py_ssize_t _compact(Act* h, Py_ssize_t n, int64_t t) noexcept nogil:
    """Drop the heap's entries that ended by ``t`` (they cover no later instant) and
    rebuild it; returns its new size. The top is unchanged: it is the innermost entry,
    and it has not ended."""
    cdef Py_ssize_t j = 0, i
    for i in range(n):
        if h[i].end > t:
            h[j] = h[i]
            j += 1
    i = j // 2 - 1
    while i >= 0:
        _sift_down(h, j, i, h[i])
        i -= 1
    return j


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


cdef struct Part:  # one table's columns (rows in any order)
    const int64_t* start
    const int64_t* end
    const int8_t* kind  # NULL: every row has const_kind
    const int32_t* name
    const int32_t* thread
    int8_t const_kind
    const int64_t* index  # the rows read, in this order (NULL: every row, in order)
    Py_ssize_t n  # how many rows are read
    int64_t off  # its first row id (ids: parts in order, rows in the order read)
    int64_t* bmin  # per block of block_rows rows: the least / greatest start kept there
    int64_t* bmax


cdef struct Stream:  # the kept activities in start order, one sorted chunk at a time
    Part* parts
    Py_ssize_t n_parts
    Py_ssize_t block_rows
    const uint64_t* kept  # 1 bit per row id
    int64_t lo  # the least kept start
    int shift  # the bucket of a start: (start - lo) >> shift
    const int64_t* cuts  # chunk c: the buckets cuts[c] .. cuts[c + 1] - 1
    Py_ssize_t n_chunks
    Py_ssize_t chunk  # the next chunk to load
    int id_bits
    uint64_t* keys  # buffers of a chunk's size
    uint64_t* tmp
    int64_t* ids
    int64_t* tmp_ids
    const uint64_t* cur_keys  # the loaded chunk, sorted
    const int64_t* cur_ids  # NULL: the ids are the keys' low id_bits
    Py_ssize_t m  # rows loaded
    Py_ssize_t pos  # the next one


cdef inline Py_ssize_t _row(const Part* pt, Py_ssize_t i) noexcept nogil:
    """The table row of the part's i-th row read."""
    return pt.index[i] if pt.index != NULL else i


cdef inline bint _bit(const uint64_t* bits, int64_t i) noexcept nogil:
    return (bits[i >> 6] >> (i & 63)) & 1


cdef void _radix(uint64_t* keys, uint64_t* tmp, int64_t* ids, int64_t* tmp_ids, Py_ssize_t m,
                 int lo_bit, int hi_bit, Stream* s) noexcept nogil:
    """Stable LSD radix sort of keys[0:m] (and ids with them, unless NULL) by their bits
    lo_bit .. hi_bit - 1; the sorted keys (and ids) are left in s.cur_keys (s.cur_ids)."""
    cdef Py_ssize_t cnt[1 << DIGIT_BITS]
    cdef Py_ssize_t i, t, c
    cdef int b = lo_bit
    cdef uint64_t d, mask = (1 << DIGIT_BITS) - 1
    cdef uint64_t* src = keys
    cdef uint64_t* dst = tmp
    cdef uint64_t* sw
    cdef int64_t* isrc = ids
    cdef int64_t* idst = tmp_ids
    cdef int64_t* isw
    while b < hi_bit and m > 1:
        memset(cnt, 0, sizeof(cnt))
        for i in range(m):
            cnt[(src[i] >> b) & mask] += 1
        if cnt[(src[0] >> b) & mask] != m:  # else one digit value: nothing moves
            t = 0
            for d in range(1 << DIGIT_BITS):
                c = cnt[d]
                cnt[d] = t
                t += c
            for i in range(m):
                d = (src[i] >> b) & mask
                dst[cnt[d]] = src[i]
                if isrc != NULL:
                    idst[cnt[d]] = isrc[i]
                cnt[d] += 1
            sw = src
            src = dst
            dst = sw
            isw = isrc
            isrc = idst
            idst = isw
        b += DIGIT_BITS
    s.cur_keys = src
    s.cur_ids = isrc


cdef void _load(Stream* s) noexcept nogil:
    """Load the next chunk's rows, sorted by (start, id) (s.m = 0: none left)."""
    cdef Py_ssize_t p, b, nb, r, r1, m = 0
    cdef int64_t c_lo, c_hi, bk, g
    cdef uint64_t base, rel, top = 0
    cdef Part* pt
    cdef int rel_bits = 0
    s.m = 0
    s.pos = 0
    if s.chunk >= s.n_chunks:
        return
    c_lo = s.cuts[s.chunk]
    c_hi = s.cuts[s.chunk + 1]
    base = <uint64_t>c_lo << s.shift
    s.chunk += 1
    for p in range(s.n_parts):
        pt = &s.parts[p]
        nb = (pt.n + s.block_rows - 1) // s.block_rows
        for b in range(nb):
            if pt.bmin[b] > pt.bmax[b]:
                continue  # nothing kept in the block
            if <int64_t>((<uint64_t>pt.bmax[b] - <uint64_t>s.lo) >> s.shift) < c_lo:
                continue
            if <int64_t>((<uint64_t>pt.bmin[b] - <uint64_t>s.lo) >> s.shift) >= c_hi:
                continue
            r1 = (b + 1) * s.block_rows
            if r1 > pt.n:
                r1 = pt.n
            for r in range(b * s.block_rows, r1):
                g = pt.off + r
                if not _bit(s.kept, g):
                    continue
                rel = <uint64_t>pt.start[_row(pt, r)] - <uint64_t>s.lo
                bk = <int64_t>(rel >> s.shift)
                if bk < c_lo or bk >= c_hi:
                    continue
                rel -= base
                if rel > top:
                    top = rel
                s.keys[m] = rel
                s.ids[m] = g
                m += 1
    while rel_bits < 64 and (top >> rel_bits) != 0:
        rel_bits += 1
    # filled in id order, and the sort is stable: ties in start stay in id order
    if rel_bits + s.id_bits <= 64:  # one key per row: (start - base, id)
        for r in range(m):
            s.keys[r] = (s.keys[r] << s.id_bits) | <uint64_t>s.ids[r]
        _radix(s.keys, s.tmp, NULL, NULL, m, s.id_bits, s.id_bits + rel_bits, s)
    else:
        _radix(s.keys, s.tmp, s.ids, s.tmp_ids, m, 0, rel_bits, s)
    s.m = m


cdef inline int64_t _peek(Stream* s) noexcept nogil:
    """The next row id in (start, id) order, or -1 when none is left."""
    if s.pos >= s.m:
        _load(s)
        if s.m == 0:
            return -1
    if s.cur_ids != NULL:
        return s.cur_ids[s.pos]
    return <int64_t>(s.cur_keys[s.pos] & ((<uint64_t>1 << s.id_bits) - 1))


cdef inline Part* _locate(Stream* s, int64_t g, Py_ssize_t* row) noexcept nogil:
    cdef Py_ssize_t p = 0
    while p + 1 < s.n_parts and g >= s.parts[p + 1].off:
        p += 1
    row[0] = _row(&s.parts[p], g - s.parts[p].off)
    return &s.parts[p]


cdef inline Py_ssize_t _first_ending_after(const int64_t* ue, Py_ssize_t nu, int64_t a,
                                           Py_ssize_t h) noexcept nogil:
    """The least i with ue[i] > a (nu when none; ue ascending), searched from the hint
    h outwards (rows near in time are found in a few steps)."""
    cdef Py_ssize_t lo, hi, mid, step = 1
    if h > nu:
        h = nu
    if h < nu and ue[h] <= a:  # the answer is after h
        lo = h + 1
        hi = lo
        while hi < nu and ue[hi] <= a:
            lo = hi + 1
            hi += step
            step <<= 1
        if hi > nu:
            hi = nu
    else:  # h is an answer: is an earlier one?
        hi = h
        lo = h - 1
        while lo >= 0 and ue[lo] > a:
            hi = lo
            lo -= step
            step <<= 1
        lo = lo + 1 if lo >= 0 else 0
    while lo < hi:
        mid = (lo + hi) >> 1
        if ue[mid] <= a:
            lo = mid + 1
        else:
            hi = mid
    return lo


def names_used(list names, Py_ssize_t n_names):
    """1 for each string id < n_names that one of the int32 columns ``names`` holds."""
    cdef const int32_t[::1] nm
    cdef Py_ssize_t i, n
    cdef int32_t x
    cdef bint bad = 0
    out_arr = np.zeros(n_names, dtype=np.uint8)
    cdef unsigned char[::1] out = out_arr
    for col in names:
        nm = col
        n = nm.shape[0]
        with nogil:
            for i in range(n):
                x = nm[i]
                if x < 0 or x >= n_names:
                    bad = 1
                    break
                out[x] = 1
        if bad:
            raise ValueError("names_used: a name id is out of range")
    return out_arr


def thread_charges(list starts, list ends, list kinds, list names, list threads,
                   const int8_t[::1] const_kind, int32_t thread, int only_kind,
                   const int32_t[::1] name_rank,
                   const int64_t[::1] q_s, const int64_t[::1] q_e, const int64_t[::1] q_id,
                   int64_t n_names, int8_t untraced_kind,
                   Py_ssize_t chunk_rows=1 << 20, Py_ssize_t block_rows=4096, list rows=None):
    """Charge each query interval ``[q_s, q_e)`` of ``thread`` to the innermost activity on
    that thread at each of its instants.

    Activities: the rows of one or more tables ("parts", rows in any order), each given
    as columns ``starts``/``ends`` (int64), ``names`` (int32 string ids < n_names),
    ``threads`` (int32) and ``kinds`` (int8 ActivityKind; None: every row of the part has
    its ``const_kind``); only rows on ``thread`` (>= 0) are read, and with ``only_kind``
    >= 0 only those of that kind. Activities of zero length cover nothing. ``name_rank``:
    per string id, the rank of its text (for ties; distinct per id). Queries: sorted by
    start; ``q_id`` is the caller's id (several queries may share one). Returns ``(q_id,
    label, ns)`` arrays, one entry per distinct (query id, label) with ``ns > 0``, in no
    particular order; per query id, the charges sum to the total length of its queries.
    ``rows``: per part, None (every row) or an int64 index of the rows to read (those of
    the thread, say: each part is then read once per thread through its own rows).
    ``chunk_rows``/``block_rows``: the sizes of the sorted chunks and of the row blocks
    they are read through (any values >= 1 give the same result)."""
    cdef Py_ssize_t n_parts = len(starts), nq = q_s.shape[0], i, j, k, lo, r, b, nb
    cdef Py_ssize_t nh = 0, cap_h = 64, compact_at = 64, na = 0, nu = 0, hint, total = 0
    cdef Py_ssize_t n_kept = 0, cap = 0, c_rows, n_chunks, r1
    cdef int64_t t, nxt, ns_, lab, a, e, g, s_lo = INT64_MAX, s_hi = INT64_MIN
    cdef int bad = 0, span_bits = 0, shift, id_bits = 1
    cdef int8_t kd
    cdef int32_t nm
    cdef Part* pt
    cdef Act x
    cdef Table tab
    cdef Stream st
    cdef const int64_t[::1] mv64
    cdef const int32_t[::1] mv32
    cdef const int8_t[::1] mv8
    cdef const int64_t[::1] mvi
    cdef Py_ssize_t q
    if n_names < 1:
        raise ValueError("thread_charges: n_names must be >= 1")
    if chunk_rows < 1 or block_rows < 1:
        raise ValueError("thread_charges: chunk_rows and block_rows must be >= 1")
    if untraced_kind < 0 or untraced_kind >= N_KINDS:
        raise ValueError("thread_charges: untraced_kind is not a kind")
    if (len(ends) != n_parts or len(kinds) != n_parts or len(names) != n_parts
            or len(threads) != n_parts or const_kind.shape[0] != n_parts
            or (rows is not None and len(rows) != n_parts)):
        raise ValueError("thread_charges: part lists differ in length")
    if q_e.shape[0] != nq or q_id.shape[0] != nq:
        raise ValueError("thread_charges: query columns differ in length")
    for i in range(1, nq):
        if q_s[i] < q_s[i - 1]:
            raise ValueError("thread_charges: queries are not sorted by start")
    if nq == 0:
        return (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64),
                np.empty(0, dtype=np.int64))
    alive = []  # the memoryviews whose buffers the parts point into
    cdef Part* parts = <Part*>calloc(n_parts + 1, sizeof(Part))
    cdef int64_t* us = <int64_t*>malloc(nq * sizeof(int64_t))
    cdef int64_t* ue = <int64_t*>malloc(nq * sizeof(int64_t))
    cdef int64_t* cuts = NULL
    cdef int64_t* counts = NULL
    cdef uint64_t* kept = NULL
    cdef Act* heap = NULL
    cdef Act* grown
    cdef int64_t* active = NULL
    st.keys = NULL
    st.tmp = NULL
    st.ids = NULL
    st.tmp_ids = NULL
    tab.keys = NULL
    tab.vals = NULL
    try:
        if parts == NULL or us == NULL or ue == NULL:
            raise MemoryError()
        for i in range(nq):  # the union of the queries: only activities meeting it count
            if q_e[i] <= q_s[i]:
                continue
            if nu and q_s[i] <= ue[nu - 1]:
                if q_e[i] > ue[nu - 1]:
                    ue[nu - 1] = q_e[i]
            else:
                us[nu] = q_s[i]
                ue[nu] = q_e[i]
                nu += 1
        for i in range(n_parts):
            pt = &parts[i]
            mv64 = starts[i]
            alive.append(mv64)
            pt.n = mv64.shape[0]
            pt.start = &mv64[0] if pt.n else NULL
            mv64 = ends[i]
            alive.append(mv64)
            if mv64.shape[0] != pt.n:
                raise ValueError("thread_charges: a part's columns differ in length")
            pt.end = &mv64[0] if pt.n else NULL
            mv32 = names[i]
            alive.append(mv32)
            if mv32.shape[0] != pt.n:
                raise ValueError("thread_charges: a part's columns differ in length")
            pt.name = &mv32[0] if pt.n else NULL
            mv32 = threads[i]
            alive.append(mv32)
            if mv32.shape[0] != pt.n:
                raise ValueError("thread_charges: a part's columns differ in length")
            pt.thread = &mv32[0] if pt.n else NULL
            pt.const_kind = const_kind[i]
            if kinds[i] is not None:
                mv8 = kinds[i]
                alive.append(mv8)
                if mv8.shape[0] != pt.n:
                    raise ValueError("thread_charges: a part's columns differ in length")
                pt.kind = &mv8[0] if pt.n else NULL
            elif const_kind[i] < 0 or const_kind[i] >= N_KINDS:
                raise ValueError("thread_charges: a part's kind is not a kind")
            if rows is not None and rows[i] is not None:
                mvi = rows[i]
                alive.append(mvi)
                for j in range(mvi.shape[0]):
                    if mvi[j] < 0 or mvi[j] >= pt.n:
                        raise ValueError("thread_charges: a row index is out of range")
                pt.index = &mvi[0] if mvi.shape[0] else NULL
                pt.n = mvi.shape[0]
            pt.off = total
            total += pt.n
            nb = (pt.n + block_rows - 1) // block_rows
            pt.bmin = <int64_t*>malloc((nb + 1) * sizeof(int64_t))
            pt.bmax = <int64_t*>malloc((nb + 1) * sizeof(int64_t))
            if pt.bmin == NULL or pt.bmax == NULL:
                raise MemoryError()
        kept = <uint64_t*>calloc(total // 64 + 1, sizeof(uint64_t))
        if kept == NULL:
            raise MemoryError()
        with nogil:  # mark the rows that can be innermost at a query's instant
            for i in range(n_parts):
                pt = &parts[i]
                nb = (pt.n + block_rows - 1) // block_rows
                for b in range(nb):
                    pt.bmin[b] = INT64_MAX
                    pt.bmax[b] = INT64_MIN
                if thread < 0 or (pt.kind == NULL and only_kind >= 0
                                  and pt.const_kind != only_kind):
                    continue
                hint = 0
                for b in range(nb):
                    r1 = (b + 1) * block_rows if (b + 1) * block_rows < pt.n else pt.n
                    for r in range(b * block_rows, r1):
                        q = _row(pt, r)
                        if pt.thread[q] != thread:
                            continue
                        a = pt.start[q]
                        e = pt.end[q]
                        kd = pt.kind[q] if pt.kind != NULL else pt.const_kind
                        nm = pt.name[q]
                        if kd < 0 or kd >= N_KINDS:
                            bad = 2
                            break
                        if nm < 0 or nm >= n_names or nm >= name_rank.shape[0]:
                            bad = 3
                            break
                        if e <= a or (only_kind >= 0 and kd != only_kind):
                            continue
                        hint = _first_ending_after(ue, nu, a, hint)
                        if hint >= nu or us[hint] >= e:
                            continue
                        g = pt.off + r
                        kept[g >> 6] |= <uint64_t>1 << (g & 63)
                        n_kept += 1
                        if a < s_lo:
                            s_lo = a
                        if a > s_hi:
                            s_hi = a
                        if a < pt.bmin[b]:
                            pt.bmin[b] = a
                        if a > pt.bmax[b]:
                            pt.bmax[b] = a
                    if bad:
                        break
                if bad:
                    break
        if bad == 2:
            raise ValueError("thread_charges: an activity's kind is not a kind")
        if bad == 3:
            raise ValueError("thread_charges: a name id is out of range")
        if n_kept:
            while span_bits < 64 and ((<uint64_t>s_hi - <uint64_t>s_lo) >> span_bits) != 0:
                span_bits += 1
        shift = span_bits - HIST_BITS if span_bits > HIST_BITS else 0
        while id_bits < 63 and (<int64_t>1 << id_bits) < total:
            id_bits += 1
        counts = <int64_t*>calloc((1 << HIST_BITS) + 1, sizeof(int64_t))
        cuts = <int64_t*>malloc(((1 << HIST_BITS) + 2) * sizeof(int64_t))
        if counts == NULL or cuts == NULL:
            raise MemoryError()
        with nogil:  # the kept rows per bucket of start, grouped into chunks
            if n_kept:
                for i in range(n_parts):
                    pt = &parts[i]
                    for r in range(pt.n):
                        g = pt.off + r
                        if _bit(kept, g):
                            counts[(<uint64_t>pt.start[_row(pt, r)] - <uint64_t>s_lo) >> shift] += 1
            n_chunks = 0
            cuts[0] = 0
            c_rows = 0
            for j in range(1 << HIST_BITS):
                if c_rows and c_rows + counts[j] > chunk_rows:
                    n_chunks += 1
                    cuts[n_chunks] = j
                    if c_rows > cap:
                        cap = c_rows
                    c_rows = 0
                c_rows += counts[j]
            if c_rows:
                n_chunks += 1
                cuts[n_chunks] = 1 << HIST_BITS
                if c_rows > cap:
                    cap = c_rows
        st.parts = parts
        st.n_parts = n_parts
        st.block_rows = block_rows
        st.kept = kept
        st.lo = s_lo
        st.shift = shift
        st.cuts = cuts
        st.n_chunks = n_chunks
        st.chunk = 0
        st.id_bits = id_bits
        st.m = 0
        st.pos = 0
        st.cur_keys = NULL
        st.cur_ids = NULL
        st.keys = <uint64_t*>malloc((cap + 1) * sizeof(uint64_t))
        st.tmp = <uint64_t*>malloc((cap + 1) * sizeof(uint64_t))
        st.ids = <int64_t*>malloc((cap + 1) * sizeof(int64_t))
        st.tmp_ids = <int64_t*>malloc((cap + 1) * sizeof(int64_t))
        active = <int64_t*>malloc(nq * sizeof(int64_t))
        heap = <Act*>malloc(cap_h * sizeof(Act))
        tab.cap = 64
        tab.used = 0
        tab.keys = <int64_t*>malloc(tab.cap * sizeof(int64_t))
        tab.vals = <int64_t*>calloc(tab.cap, sizeof(int64_t))
        if (st.keys == NULL or st.tmp == NULL or st.ids == NULL or st.tmp_ids == NULL
                or active == NULL or heap == NULL or tab.keys == NULL or tab.vals == NULL):
            raise MemoryError()
        with nogil:
            for i in range(tab.cap):
                tab.keys[i] = -1
            g = _peek(&st)
            ns_ = INT64_MAX if g < 0 else _locate(&st, g, &r).start[r]
            k = 0  # the next query to open
            t = INT64_MIN
            while True:
                while nh > 0 and heap[0].end <= t:  # drop what ended
                    nh -= 1
                    if nh > 0:
                        _sift_down(heap, nh, 0, heap[nh])
                if nh > 0:
                    nxt = heap[0].end if heap[0].end < ns_ else ns_
                    lab = heap[0].label
                else:
                    nxt = ns_
                    lab = untraced_kind * n_names
                if nxt > t:  # the segment [t, nxt): to the queries open in it
                    while k < nq and q_s[k] < nxt:
                        active[na] = k
                        na += 1
                        k += 1
                    j = 0
                    for lo in range(na):
                        a = q_s[active[lo]] if q_s[active[lo]] > t else t
                        e = q_e[active[lo]] if q_e[active[lo]] < nxt else nxt
                        if e > a and _add(&tab, q_id[active[lo]] * N_KINDS * n_names + lab,
                                          e - a) < 0:
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
                while ns_ == t:  # push what starts now
                    pt = _locate(&st, g, &r)
                    kd = pt.kind[r] if pt.kind != NULL else pt.const_kind
                    x.start = t
                    x.end = pt.end[r]
                    x.tie = (<int64_t>kd << 32) + name_rank[pt.name[r]]
                    x.label = kd * n_names + pt.name[r]
                    st.pos += 1
                    g = _peek(&st)
                    ns_ = INT64_MAX if g < 0 else _locate(&st, g, &r).start[r]
                    if nh >= compact_at:  # ended entries buried under later starts
                        nh = _compact(heap, nh, t)
                        compact_at = 2 * nh if 2 * nh > 64 else 64
                    if nh == cap_h:
                        grown = <Act*>realloc(heap, 2 * cap_h * sizeof(Act))
                        if grown == NULL:
                            bad = 1
                            break
                        heap = grown
                        cap_h *= 2
                    _push(heap, nh, x)
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
                out_q[j] = tab.keys[i] // (N_KINDS * n_names)
                out_l[j] = tab.keys[i] % (N_KINDS * n_names)
                out_v[j] = tab.vals[i]
                j += 1
        return out_q, out_l, out_v
    finally:
        if parts != NULL:
            for i in range(n_parts):
                free(parts[i].bmin)
                free(parts[i].bmax)
        free(parts)
        free(us)
        free(ue)
        free(kept)
        free(counts)
        free(cuts)
        free(st.keys)
        free(st.tmp)
        free(st.ids)
        free(st.tmp_ids)
        free(active)
        free(heap)
        free(tab.keys)
        free(tab.vals)


