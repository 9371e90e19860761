# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3, binding=True, autotestdict=False, auto_pickle=False
"""Streaming splitter for Chrome-trace (Kineto) JSON, and exact microsecond -> ns conversion.

The splitter does not parse JSON values. It tracks strings, escapes and bracket depth just
well enough to (1) cut the top-level ``traceEvents`` array into complete elements, (2) sort
each element by the value of its ``"cat"`` key into one buffer per class, and (3) keep the
rest of the document (the "skeleton": the root object with an empty ``traceEvents``). msgspec
then decodes, and so validates, every buffer and the skeleton: a document is accepted only if
all of them are valid JSON, which together means the whole document is. Memory stays bounded
by the chunk size because the caller decodes and frees the class buffers after every feed.

Inside an element only the bytes "{}[]:,\\ matter; they are found 64 at a time (SSE2) and
visited in order. At the end of a buffer an incomplete element is not consumed and is scanned
again with the next buffer.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.buffer cimport PyBUF_SIMPLE, PyObject_GetBuffer, PyBuffer_Release
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memchr, memcmp, memcpy, memset

import numpy as np


cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_mutex_init(pthread_mutex_t*, const void*)
    int pthread_mutex_destroy(pthread_mutex_t*)
    int pthread_mutex_lock(pthread_mutex_t*)
    int pthread_mutex_unlock(pthread_mutex_t*)
    int pthread_cond_init(pthread_cond_t*, const void*)
    int pthread_cond_destroy(pthread_cond_t*)
    int pthread_cond_wait(pthread_cond_t*, pthread_mutex_t*)
    int pthread_cond_broadcast(pthread_cond_t*)

# element classes (kept in sync with pytimings/ingest/kineto.py); the modelled ones (0-9)
# are one class per category so that the decoder need not decode "cat"
cdef enum:
    C_KERNEL = 0       # kernel (2021-era: Kernel)
    C_MEMCPY = 1       # gpu_memcpy (Memcpy)
    C_MEMSET = 2       # gpu_memset (Memset)
    C_RUNTIME = 3      # cuda_runtime (Runtime); also HIP calls on ROCm
    C_DRIVER = 4       # cuda_driver
    C_SYNC = 5         # cuda_sync
    C_ANNOTATION = 6   # user_annotation
    C_GPU_ANNOTATION = 7  # gpu_user_annotation (validated and counted: not ranges)
    C_CPU_OP = 8       # cpu_op (2021-era: Operator)
    C_PYTHON = 9       # python_function
    C_FLOW = 10        # ac2g (and the older async / async_cpu_to_gpu launch flows)
    C_NOCAT = 11       # elements without "cat": metadata (process/thread names), markers
    C_OTHER = 12       # everything else (cpu_instant_event, overhead, ...): validated, counted
    N_CLASSES = 13
CLASS_KERNEL = C_KERNEL
CLASS_MEMCPY = C_MEMCPY
CLASS_MEMSET = C_MEMSET
CLASS_RUNTIME = C_RUNTIME
CLASS_DRIVER = C_DRIVER
CLASS_SYNC = C_SYNC
CLASS_ANNOTATION = C_ANNOTATION
CLASS_GPU_ANNOTATION = C_GPU_ANNOTATION
CLASS_CPU_OP = C_CPU_OP
CLASS_PYTHON = C_PYTHON
CLASS_FLOW = C_FLOW
CLASS_NOCAT = C_NOCAT
CLASS_OTHER = C_OTHER
N_CLASS = N_CLASSES

cdef enum Mode:
    M_BEFORE = 0
    M_ROOT = 1
    M_ARRAY = 2
    M_AFTER = 3

cdef enum ArrState:
    A_OPEN = 0
    A_ELEM = 1
    A_COMMA = 2

cdef const char* TE = b"traceEvents"

# (cat, class) table compared with memcmp; order does not matter
_CATS = (
    (b"kernel", C_KERNEL), (b"gpu_memcpy", C_MEMCPY), (b"gpu_memset", C_MEMSET),
    (b"Kernel", C_KERNEL), (b"Memcpy", C_MEMCPY), (b"Memset", C_MEMSET),
    (b"cuda_runtime", C_RUNTIME), (b"cuda_driver", C_DRIVER), (b"cuda_sync", C_SYNC),
    (b"Runtime", C_RUNTIME),
    (b"user_annotation", C_ANNOTATION), (b"gpu_user_annotation", C_GPU_ANNOTATION),
    (b"cpu_op", C_CPU_OP), (b"Operator", C_CPU_OP), (b"python_function", C_PYTHON),
    (b"ac2g", C_FLOW), (b"async", C_FLOW), (b"async_cpu_to_gpu", C_FLOW),
)


class SplitError(ValueError):
    """Malformed document structure found by the splitter; ``offset`` is a byte offset."""

    def __init__(self, message, offset):
        super().__init__(message)
        self.offset = offset


cdef unsigned char SPECIAL[256]  # the bytes the splitter looks at inside an element
for _c in (34, 123, 125, 91, 93, 58, 44, 92):  # " { } [ ] : , \\
    SPECIAL[_c] = 1


cdef Py_ssize_t _utf8_bad(const unsigned char* s, Py_ssize_t n) noexcept nogil:
    """Index of the first byte of an invalid UTF-8 sequence in s[:n], or -1 (RFC 3629:
    no overlong forms, no surrogates, nothing above U+10FFFF). ASCII runs are checked eight
    bytes at a time. msgspec does not check the values it skips, so the splitter does."""
    cdef Py_ssize_t i = 0
    cdef uint64_t w
    cdef unsigned char c, c1
    while i < n:
        while i + 8 <= n:
            memcpy(&w, s + i, 8)
            if w & 0x8080808080808080ULL:
                break
            i += 8
        if i >= n:
            break
        c = s[i]
        if c < 0x80:
            i += 1
            continue
        if c < 0xC2:
            return i
        if c < 0xE0:
            if i + 1 >= n or (s[i + 1] & 0xC0) != 0x80:
                return i
            i += 2
            continue
        if c < 0xF0:
            if i + 2 >= n:
                return i
            c1 = s[i + 1]
            if (c1 & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80:
                return i
            if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 >= 0xA0):
                return i
            i += 3
            continue
        if c < 0xF5:
            if i + 3 >= n:
                return i
            c1 = s[i + 1]
            if ((c1 & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80
                    or (s[i + 3] & 0xC0) != 0x80):
                return i
            if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 >= 0x90):
                return i
            i += 4
            continue
        return i
    return -1


def utf8_bad(bytes data):
    """Index of the first invalid UTF-8 byte, or -1 (the splitter's check, for tests)."""
    return _utf8_bad(<const unsigned char*>PyBytes_AS_STRING(data), len(data))


cdef extern from *:
    """
    #include <stdint.h>
    #if defined(__SSE2__)
    #include <emmintrin.h>
    /* bit k set where p[k] (k < 16) is one of " { } [ ] : , or a backslash; high: bytes >= 0x80 */
    static inline uint32_t pyt_special16(const char* p, uint32_t* high) {
        __m128i v = _mm_loadu_si128((const __m128i*)p);
        __m128i lo = _mm_or_si128(v, _mm_set1_epi8(0x20));  /* [ -> {, ] -> } */
        __m128i m = _mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(lo, _mm_set1_epi8('{')),
                         _mm_cmpeq_epi8(lo, _mm_set1_epi8('}'))),
            _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                             _mm_cmpeq_epi8(v, _mm_set1_epi8(':'))),
                _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(',')),
                             _mm_cmpeq_epi8(v, _mm_set1_epi8(0x5C)))));
        *high = (uint32_t)_mm_movemask_epi8(v);
        return (uint32_t)_mm_movemask_epi8(m);
    }
    #define PYT_HAVE_SIMD 1
    #else
    static inline uint32_t pyt_special16(const char* p, uint32_t* high) { *high = 0; return 0; }
    #define PYT_HAVE_SIMD 0
    #endif
    static inline int pyt_ctz64(uint64_t x) { return __builtin_ctzll(x); }
    """
    uint32_t pyt_special16(const char* p, uint32_t* high) noexcept nogil
    int pyt_ctz64(uint64_t x) noexcept nogil
    bint PYT_HAVE_SIMD


cdef struct Blocks:
    # bit k of mask: p[base + k] is special and not yet visited (k < 64)
    const char* p
    Py_ssize_t n
    Py_ssize_t base
    uint64_t mask
    bint high       # some byte >= 0x80 seen in the blocks so far


cdef inline void _block_at(Blocks* b, Py_ssize_t pos) noexcept nogil:
    """Load the 64-byte block starting at pos (fewer at the end of the buffer)."""
    cdef uint64_t m = 0
    cdef uint32_t h0, h1, h2, h3
    cdef Py_ssize_t k, lim
    b.base = pos
    if PYT_HAVE_SIMD and b.n - pos >= 64:
        m = (<uint64_t>pyt_special16(b.p + pos, &h0)
             | (<uint64_t>pyt_special16(b.p + pos + 16, &h1) << 16)
             | (<uint64_t>pyt_special16(b.p + pos + 32, &h2) << 32)
             | (<uint64_t>pyt_special16(b.p + pos + 48, &h3) << 48))
        if h0 | h1 | h2 | h3:
            b.high = True
    else:
        lim = b.n - pos if b.n - pos < 64 else 64
        for k in range(lim):
            if SPECIAL[<unsigned char>b.p[pos + k]]:
                m |= (<uint64_t>1) << k
            if <unsigned char>b.p[pos + k] >= 0x80:
                b.high = True
    b.mask = m


cdef inline Py_ssize_t _next_special(Blocks* b) noexcept nogil:
    """Index of the next unvisited special byte, or -1 at the end of the buffer."""
    cdef Py_ssize_t k
    while b.mask == 0:
        if b.base + 64 >= b.n:
            return -1
        _block_at(b, b.base + 64)
    k = pyt_ctz64(b.mask)
    b.mask &= b.mask - 1
    return b.base + k


cdef inline void _skip_escaped(Blocks* b, Py_ssize_t k) noexcept nogil:
    """Forget the byte after the backslash at k (escaped, whatever it is)."""
    cdef Py_ssize_t e = k + 1
    if e >= b.n:
        return
    if <unsigned char>b.p[e] >= 0x80:
        b.high = True
    if e < b.base + 64:
        b.mask &= ~((<uint64_t>1) << (e - b.base))
    else:
        _block_at(b, e + 1)


cdef Py_ssize_t _unescape(const char* s, Py_ssize_t n, char* out, Py_ssize_t cap) noexcept nogil:
    """The JSON string content s[:n] with its escapes decoded into out (at most cap bytes),
    its length; -1 when it does not fit, an escape is malformed or \\u names a character
    beyond ASCII (no key or category the splitter sorts by has one)."""
    cdef Py_ssize_t i = 0, k = 0, h
    cdef int v
    cdef char c, e
    while i < n:
        c = s[i]
        if c == 92:
            if i + 1 >= n:
                return -1
            e = s[i + 1]
            i += 2
            if e == b'u':
                if i + 4 > n:
                    return -1
                v = 0
                for h in range(i, i + 4):
                    c = s[h]
                    if c >= 48 and c <= 57:
                        v = v * 16 + (c - 48)
                    elif (c | 32) >= 97 and (c | 32) <= 102:
                        v = v * 16 + ((c | 32) - 87)
                    else:
                        return -1
                if v == 0 or v >= 0x80:
                    return -1
                c = <char>v
                i += 4
            elif e == b'"' or e == 92 or e == b'/':
                c = e
            else:
                return -1  # \b \f \n \r \t: in no key or category sorted by
        else:
            i += 1
        if k == cap:
            return -1
        out[k] = c
        k += 1
    return k


cdef bint _is_cat_key(const char* s, Py_ssize_t n) noexcept nogil:
    """Whether the key text s[:n] is "cat", spelled plainly or with escapes."""
    cdef char buf[3]
    if n == 3:
        return s[0] == 99 and s[1] == 97 and s[2] == 116
    return n > 3 and memchr(s, 92, n) != NULL and _unescape(s, n, buf, 3) == 3 \
        and buf[0] == 99 and buf[1] == 97 and buf[2] == 116


cdef Py_ssize_t _elem_end(const char* p, Py_ssize_t i, Py_ssize_t n, Py_ssize_t* cat_s,
                          Py_ssize_t* cat_e, bint* high) noexcept nogil:
    """End (exclusive) of the JSON object opening at p[i], or -1 when it is incomplete.
    Also finds the span of its top-level "cat" string value (cat_s = -1 when none), and
    whether any byte of it is >= 0x80 (``high``; may also be set by bytes just after it).

    The special bytes are found 64 at a time (SSE2 compares where the compiler has them,
    a table otherwise) and visited in order; inside a string only '"' and '\\' matter."""
    cdef int depth = 0
    cdef bint expect_key = False, key_is_cat = False, cat_pending = False
    cdef unsigned char c
    cdef Py_ssize_t j, s
    cdef Blocks b
    b.p = p
    b.n = n
    b.high = False
    cat_s[0] = -1
    _block_at(&b, i)
    while True:
        i = _next_special(&b)
        if i < 0:
            return -1
        c = <unsigned char>p[i]
        if c == 34:  # '"': find the closing quote
            s = i + 1
            while True:
                j = _next_special(&b)
                if j < 0:
                    return -1
                if p[j] == 34:
                    break
                if p[j] == 92:
                    _skip_escaped(&b, j)
            if depth == 1:
                if expect_key:
                    expect_key = False
                    key_is_cat = _is_cat_key(p + s, j - s)
                elif cat_pending:
                    cat_s[0] = s
                    cat_e[0] = j
                    cat_pending = False
            continue
        if c == 123 or c == 91:  # { [
            depth += 1
            if depth == 1:
                expect_key = True
        elif c == 125 or c == 93:  # } ]
            depth -= 1
            if depth == 0:
                high[0] = b.high
                return i + 1
        elif c == 58:  # :
            if depth == 1 and key_is_cat:
                cat_pending = True
                key_is_cat = False
        elif c == 44:  # ,
            if depth == 1:
                expect_key = True
                cat_pending = False
        # a backslash outside a string: invalid JSON, left to the decoder


cdef enum Err:
    E_NONE = 0
    E_NOMEM = 1
    E_NOT_OBJECT = 2
    E_TE_NOT_ARRAY = 3
    E_TE_TWICE = 4
    E_MISSING_COMMA = 5
    E_BAD_COMMA = 6
    E_TRAILING_COMMA = 7
    E_ELEM_NOT_OBJECT = 8
    E_AFTER = 9
    E_TRUNC_ELEM = 10
    E_TRUNC_DOC = 11
    E_UTF8 = 12


cdef struct Growable:
    char* data
    Py_ssize_t len
    Py_ssize_t cap


cdef int _reserve(Growable* g, Py_ssize_t extra) noexcept nogil:
    cdef Py_ssize_t want = g.len + extra, cap = g.cap
    cdef char* d
    if want <= cap:
        return 0
    if cap < 4096:
        cap = 4096
    while cap < want:
        cap *= 2
    d = <char*>realloc(g.data, cap)
    if d == NULL:
        return -1
    g.data = d
    g.cap = cap
    return 0


cdef int _append(Growable* g, const void* src, Py_ssize_t n) noexcept nogil:
    if _reserve(g, n) < 0:
        return -1
    memcpy(g.data + g.len, src, n)
    g.len += n
    return 0


cdef class Splitter:
    """Feed the decompressed document in pieces; take the class buffers after each feed.

    ``feed`` scans without the GIL (all its buffers are C memory), so a reader thread can
    split the next piece while the main thread decodes this one.
    """

    cdef public Py_ssize_t n_elements
    cdef public Py_ssize_t doc_base    # document offset of the next buffer's first byte
    cdef int mode, depth, arr_state
    cdef bint in_str, esc, is_key, key_ok, key_is_te, pending_te, expect_key, seen_te
    cdef int key_match
    cdef Growable skel
    cdef Growable skel_map             # int64 pairs (offset in skeleton, offset in document)
    cdef Growable bufs[N_CLASSES]      # "[" + elements joined by ","
    cdef Growable meta[N_CLASSES]      # int64 triples (document offset, index, buffer offset)
    cdef Py_ssize_t count[N_CLASSES]
    cdef list cat_names                # keeps the bytes that cat_ptr points into alive
    cdef const char* cat_ptr[32]
    cdef Py_ssize_t cat_len[32]
    cdef int cat_class[32]
    cdef int n_cats
    cdef char other_name[64][64]       # counts of CLASS_OTHER cats (first 64 distinct)
    cdef Py_ssize_t other_len[64]
    cdef Py_ssize_t other_n[64]
    cdef int n_other
    cdef Py_ssize_t other_overflow
    cdef int last_other
    cdef dict other_counts
    cdef int err
    cdef Py_ssize_t err_offset
    # the helper thread (serve/submit/result/close): it never takes the GIL
    cdef pthread_mutex_t mu
    cdef pthread_cond_t cv
    cdef bint job_pending, quit, busy
    cdef const char* job_p
    cdef Py_ssize_t job_n, job_used
    cdef bint job_final
    cdef bytes job_buf                 # keeps the submitted buffer alive

    def __cinit__(self):
        cdef int c
        pthread_mutex_init(&self.mu, NULL)
        pthread_cond_init(&self.cv, NULL)
        self.job_pending = self.quit = self.busy = False
        memset(&self.skel, 0, sizeof(Growable))
        memset(&self.skel_map, 0, sizeof(Growable))
        for c in range(N_CLASSES):
            memset(&self.bufs[c], 0, sizeof(Growable))
            memset(&self.meta[c], 0, sizeof(Growable))
            self.count[c] = 0
            if _append(&self.bufs[c], b"[", 1) < 0:
                raise MemoryError()
        self.n_elements = 0
        self.doc_base = 0
        self.mode = M_BEFORE
        self.depth = 0
        self.in_str = self.esc = self.is_key = self.key_ok = False
        self.key_is_te = self.pending_te = self.expect_key = self.seen_te = False
        self.key_match = 0
        self.cat_names = [name for name, _ in _CATS]
        self.n_cats = len(_CATS)
        for c in range(self.n_cats):
            self.cat_ptr[c] = <const char*>self.cat_names[c]
            self.cat_len[c] = len(self.cat_names[c])
            self.cat_class[c] = _CATS[c][1]
        self.n_other = 0
        self.other_overflow = 0
        self.last_other = -1
        self.other_counts = {}
        self.err = E_NONE
        self.err_offset = 0

    def __dealloc__(self):
        cdef int c
        pthread_cond_destroy(&self.cv)
        pthread_mutex_destroy(&self.mu)
        free(self.skel.data)
        free(self.skel_map.data)
        for c in range(N_CLASSES):
            free(self.bufs[c].data)
            free(self.meta[c].data)

    @property
    def finished(self):
        """True once the root object has been closed."""
        return self.mode == M_AFTER

    @property
    def saw_events(self):
        return self.seen_te

    @property
    def skeleton(self):
        """The document without the traceEvents elements."""
        return PyBytes_FromStringAndSize(self.skel.data, self.skel.len)

    @property
    def skeleton_map(self):
        """[(offset in skeleton, offset in document)] for each piece of the skeleton."""
        cdef int64_t* m = <int64_t*>self.skel_map.data
        cdef Py_ssize_t k
        return [(m[2 * k], m[2 * k + 1]) for k in range(self.skel_map.len // 16)]

    cdef int _classify(self, const char* s, Py_ssize_t n) noexcept nogil:
        cdef int k
        cdef char buf[64]
        cdef Py_ssize_t m
        if n and memchr(s, 92, n) != NULL:  # escapes ("k\u0065rnel"): classify the text
            m = _unescape(s, n, buf, 64)
            if m < 0:
                return C_OTHER
            return self._classify(buf, m)
        for k in range(self.n_cats):
            if self.cat_len[k] == n and s[0] == self.cat_ptr[k][0] and \
                    memcmp(self.cat_ptr[k], s, n) == 0:
                return self.cat_class[k]
        return C_OTHER

    cdef void _count_other(self, const char* s, Py_ssize_t n) noexcept nogil:
        cdef int k = self.last_other
        if k >= 0 and self.other_len[k] == n and memcmp(self.other_name[k], s, n) == 0:
            self.other_n[k] += 1
            return
        for k in range(self.n_other):
            if self.other_len[k] == n and memcmp(self.other_name[k], s, n) == 0:
                self.other_n[k] += 1
                self.last_other = k
                return
        if self.n_other == 64 or n > 64:
            self.other_overflow += 1
            return
        k = self.n_other
        memcpy(self.other_name[k], s, n)
        self.other_len[k] = n
        self.other_n[k] = 1
        self.n_other += 1
        self.last_other = k

    def counts_of_other(self):
        """{cat bytes: count} of the CLASS_OTHER elements seen so far (cats beyond the
        first 64 distinct ones, or longer than 64 bytes, are counted under b"")."""
        cdef int k
        for k in range(self.n_other):
            key = self.other_name[k][:self.other_len[k]]
            self.other_counts[key] = self.other_counts.get(key, 0) + self.other_n[k]
        if self.other_overflow:
            self.other_counts[b""] = self.other_counts.get(b"", 0) + self.other_overflow
        self.n_other = 0
        self.other_overflow = 0
        self.last_other = -1
        return self.other_counts

    cdef int _emit(self, const char* p, Py_ssize_t start, Py_ssize_t end, int cls,
                   bint high) noexcept nogil:
        """Copy one element into its class buffer; -1 on error (self.err set if not memory).
        ``high``: the element may hold bytes >= 0x80 (else it is ASCII, valid UTF-8)."""
        cdef Growable* b = &self.bufs[cls]
        cdef Py_ssize_t bad
        cdef int64_t m[3]
        if _reserve(b, end - start + 1) < 0:
            return -1
        if self.count[cls] > 0:
            b.data[b.len] = 44  # ','
            b.len += 1
        m[0] = self.doc_base + start
        m[1] = self.n_elements
        m[2] = b.len
        memcpy(b.data + b.len, p + start, end - start)
        bad = _utf8_bad(<const unsigned char*>(b.data + b.len), end - start) if high else -1
        if bad >= 0:
            return self._fail(E_UTF8, start + bad)
        b.len += end - start
        if _append(&self.meta[cls], m, sizeof(m)) < 0:
            return -1
        self.count[cls] += 1
        self.n_elements += 1
        return 0

    cdef int _skel_add(self, const char* p, Py_ssize_t start, Py_ssize_t end) noexcept nogil:
        cdef int64_t m[2]
        if end <= start:
            return 0
        m[0] = self.skel.len
        m[1] = self.doc_base + start
        if _append(&self.skel_map, m, sizeof(m)) < 0:
            return -1
        return _append(&self.skel, p + start, end - start)

    def take(self, int cls):
        """(buffer as a JSON array, document offsets, element indices, buffer offsets); resets."""
        cdef Growable* b = &self.bufs[cls]
        cdef Py_ssize_t k = self.count[cls], j
        self._check_idle()
        out = PyBytes_FromStringAndSize(NULL, b.len + 1)
        cdef char* o = PyBytes_AS_STRING(out)
        memcpy(o, b.data, b.len)
        o[b.len] = 93  # ']'
        doc = np.empty(k, dtype=np.int64)
        idx = np.empty(k, dtype=np.int64)
        pos = np.empty(k, dtype=np.int64)
        cdef int64_t[::1] d = doc
        cdef int64_t[::1] ix = idx
        cdef int64_t[::1] ps = pos
        cdef int64_t* m = <int64_t*>self.meta[cls].data
        for j in range(k):
            d[j] = m[3 * j]
            ix[j] = m[3 * j + 1]
            ps[j] = m[3 * j + 2]
        b.len = 1
        self.meta[cls].len = 0
        self.count[cls] = 0
        return out, doc, idx, pos

    def pending(self, int cls):
        """Number of elements waiting in a class buffer."""
        self._check_idle()
        return self.count[cls]

    def feed(self, bytes buf, bint final):
        """Scan ``buf`` (without the GIL); returns how many leading bytes were consumed
        (the rest is an incomplete element to pass again, followed by more data)."""
        cdef const char* p = PyBytes_AS_STRING(buf)
        cdef Py_ssize_t n = len(buf), used
        self._check_idle()
        with nogil:
            used = self._scan(p, n, final)
        if used < 0:
            raise SplitError(self._message(), self.err_offset)
        return used

    # ---- splitting on a helper thread ------------------------------------------------
    # A thread that splits while the caller decodes must not need the GIL: handing a
    # piece over from a thread that does (the GIL comes back only after the holder's
    # switch interval, 5 ms, longer than decoding a piece) serialises the two threads.
    # ``serve`` (the helper thread's target) releases the GIL once and waits on a C
    # condition variable; ``submit`` hands it a buffer, ``result`` waits for its ``feed``
    # result, ``close`` ends ``serve``.

    def serve(self):
        """Split submitted buffers until ``close`` (run it on a helper thread)."""
        with nogil:
            self._serve()

    cdef void _serve(self) noexcept nogil:
        cdef Py_ssize_t used
        pthread_mutex_lock(&self.mu)
        while True:
            while not self.quit and not self.job_pending:
                pthread_cond_wait(&self.cv, &self.mu)
            if self.quit:
                break
            pthread_mutex_unlock(&self.mu)
            used = self._scan(self.job_p, self.job_n, self.job_final)
            pthread_mutex_lock(&self.mu)
            self.job_used = used
            self.job_pending = False
            pthread_cond_broadcast(&self.cv)
        pthread_mutex_unlock(&self.mu)

    cdef _check_idle(self):
        if self.busy:
            raise RuntimeError("the splitter is busy with a submitted buffer")

    def submit(self, bytes buf, bint final):
        """Give ``buf`` to the thread running ``serve``; returns at once."""
        self._check_idle()
        self.job_buf = buf
        self.job_p = PyBytes_AS_STRING(buf)
        self.job_n = len(buf)
        self.job_final = final
        self.busy = True
        with nogil:
            pthread_mutex_lock(&self.mu)
            self.job_pending = True
            pthread_cond_broadcast(&self.cv)
            pthread_mutex_unlock(&self.mu)

    def result(self):
        """Wait for the submitted buffer; what ``feed`` would have returned or raised."""
        if not self.busy:
            raise RuntimeError("nothing was submitted")
        with nogil:
            pthread_mutex_lock(&self.mu)
            while self.job_pending:
                pthread_cond_wait(&self.cv, &self.mu)
            pthread_mutex_unlock(&self.mu)
        self.busy = False
        self.job_buf = None
        if self.job_used < 0:
            raise SplitError(self._message(), self.err_offset)
        return self.job_used

    def close(self):
        """Make ``serve`` return (after the buffer it is splitting, if any)."""
        with nogil:
            pthread_mutex_lock(&self.mu)
            self.quit = True
            pthread_cond_broadcast(&self.cv)
            pthread_mutex_unlock(&self.mu)

    cdef str _message(self):
        e = self.err
        if e == E_NOMEM:
            return "out of memory"
        if e == E_NOT_OBJECT:
            return "not a JSON object (a Kineto trace is an object with traceEvents)"
        if e == E_TE_NOT_ARRAY:
            return "traceEvents is not an array"
        if e == E_TE_TWICE:
            return "more than one traceEvents array"
        if e == E_MISSING_COMMA:
            return f"missing ',' between traceEvents[{self.n_elements - 1}] and the next event"
        if e == E_BAD_COMMA:
            return "unexpected ',' in traceEvents"
        if e == E_TRAILING_COMMA:
            return "trailing ',' at the end of traceEvents"
        if e == E_ELEM_NOT_OBJECT:
            return f"traceEvents[{self.n_elements}] is not a JSON object"
        if e == E_AFTER:
            return "data after the end of the JSON document"
        if e == E_UTF8:
            return f"traceEvents[{self.n_elements}] is not valid UTF-8"
        if e == E_TRUNC_ELEM:
            return f"the document ends inside traceEvents[{self.n_elements}] (truncated?)"
        return "the document ends before its JSON object is closed (truncated?)"

    cdef Py_ssize_t _fail(self, int code, Py_ssize_t at) noexcept nogil:
        self.err = code
        self.err_offset = self.doc_base + at
        return -1

    cdef Py_ssize_t _scan(self, const char* p, Py_ssize_t n, bint final) noexcept nogil:
        cdef Py_ssize_t i = 0, skel_from = 0, elem_start = 0, j, cat_s = -1, cat_e = -1
        cdef char c
        cdef bint incomplete = False, high = False
        cdef int cls
        cdef Py_ssize_t consumed
        while i < n:
            c = p[i]
            if self.mode == M_ARRAY:
                if c == b' ' or c == b'\n' or c == b'\r' or c == b'\t':
                    pass
                elif c == b'{':
                    if self.arr_state == A_ELEM:
                        return self._fail(E_MISSING_COMMA, i)
                    elem_start = i
                    j = _elem_end(p, i, n, &cat_s, &cat_e, &high)
                    if j < 0:
                        incomplete = True
                        break
                    if cat_s < 0:
                        cls = C_NOCAT
                    else:
                        cls = self._classify(p + cat_s, cat_e - cat_s)
                        if cls == C_OTHER:
                            self._count_other(p + cat_s, cat_e - cat_s)
                    if self._emit(p, elem_start, j, cls, high) < 0:
                        return -1 if self.err else self._fail(E_NOMEM, i)
                    self.arr_state = A_ELEM
                    i = j
                    continue
                elif c == b',':
                    if self.arr_state != A_ELEM:
                        return self._fail(E_BAD_COMMA, i)
                    self.arr_state = A_COMMA
                elif c == b']':
                    if self.arr_state == A_COMMA:
                        return self._fail(E_TRAILING_COMMA, i)
                    self.mode = M_ROOT
                    self.depth = 1
                    skel_from = i
                else:
                    return self._fail(E_ELEM_NOT_OBJECT, i)
                i += 1
                continue
            elif self.mode == M_ROOT:
                if self.in_str:
                    if self.esc:
                        self.esc = False
                    elif c == b'\\':
                        self.esc = True
                        self.key_ok = False
                    elif c == b'"':
                        self.in_str = False
                        if self.is_key:
                            self.key_is_te = self.key_ok and self.key_match == 11
                    elif self.is_key and self.key_ok:
                        if self.key_match < 11 and c == TE[self.key_match]:
                            self.key_match += 1
                        else:
                            self.key_ok = False
                elif c == b' ' or c == b'\n' or c == b'\r' or c == b'\t':
                    pass
                elif self.pending_te:
                    self.pending_te = False
                    if c != b'[':
                        return self._fail(E_TE_NOT_ARRAY, i)
                    if self.seen_te:
                        return self._fail(E_TE_TWICE, i)
                    self.seen_te = True
                    if self._skel_add(p, skel_from, i + 1) < 0:
                        return self._fail(E_NOMEM, i)
                    self.mode = M_ARRAY
                    self.arr_state = A_OPEN
                    self.depth = 2
                elif c == b'"':
                    self.in_str = True
                    self.is_key = self.depth == 1 and self.expect_key
                    self.expect_key = False
                    self.key_match = 0
                    self.key_ok = True
                elif c == b':':
                    if self.depth == 1 and self.key_is_te:
                        self.pending_te = True
                    self.key_is_te = False
                elif c == b'{' or c == b'[':
                    self.depth += 1
                elif c == b'}' or c == b']':
                    self.depth -= 1
                    if self.depth == 0:
                        self.mode = M_AFTER
                elif c == b',' and self.depth == 1:
                    self.expect_key = True
                i += 1
                continue
            elif self.mode == M_BEFORE:
                if c == b'{':
                    self.mode = M_ROOT
                    self.depth = 1
                    self.expect_key = True
                elif not (c == b' ' or c == b'\n' or c == b'\r' or c == b'\t'):
                    return self._fail(E_NOT_OBJECT, i)
                i += 1
                continue
            else:  # M_AFTER
                if not (c == b' ' or c == b'\n' or c == b'\r' or c == b'\t'):
                    return self._fail(E_AFTER, i)
                i += 1
                continue
        # end of buffer
        if incomplete:
            if final:
                return self._fail(E_TRUNC_ELEM, elem_start)
            consumed = elem_start
        else:
            if self.mode != M_ARRAY:
                if self._skel_add(p, skel_from, n) < 0:
                    return self._fail(E_NOMEM, n)
            consumed = n
            if final and self.mode != M_AFTER:
                return self._fail(E_TRUNC_DOC, n)
        self.doc_base += consumed
        return consumed
