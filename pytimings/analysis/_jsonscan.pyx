# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3, binding=True, autotestdict=False, auto_pickle=False
"""Streaming splitter for Chrome-trace (Kineto) JSON, and exact microsecond -> ns conversion.

The splitter does not parse JSON values. It tracks strings, escapes and bracket depth just
well enough to (1) cut the top-level ``traceEvents`` array into complete elements, (2) sort
each element by the value of its ``"cat"`` key into one buffer per class, and (3) keep the
rest of the document (the "skeleton": the root object with an empty ``traceEvents``). msgspec
then decodes, and so validates, every buffer and the skeleton: a document is accepted only if
all of them are valid JSON, which together means the whole document is. Memory stays bounded
by the chunk size because the caller decodes and frees the class buffers after every feed.

Inside an element only the characters "{}[]:, matter (a 256-entry table); at the end of a buffer an
incomplete element is not consumed and is scanned again with the next buffer.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.buffer cimport PyBUF_SIMPLE, PyObject_GetBuffer, PyBuffer_Release
from libc.stdint cimport int64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memchr, memcmp, memcpy

import numpy as np

# element classes (kept in sync with pytimings/ingest/kineto.py)
CLASS_GPU = 0     # kernel, gpu_memcpy, gpu_memset (and 2021-era Kernel/Memcpy/Memset)
CLASS_API = 1     # cuda_runtime, cuda_driver, cuda_sync (and Runtime)
CLASS_RANGE = 2   # user_annotation, gpu_user_annotation
CLASS_FLOW = 3    # ac2g (and the older async / async_cpu_to_gpu launch flows)
CLASS_NOCAT = 4   # elements without "cat": metadata (process/thread names), markers
CLASS_OTHER = 5   # everything else (cpu_op, python_function, ...): validated and counted

cdef enum:
    N_CLASSES = 6

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
    (b"kernel", CLASS_GPU), (b"gpu_memcpy", CLASS_GPU), (b"gpu_memset", CLASS_GPU),
    (b"Kernel", CLASS_GPU), (b"Memcpy", CLASS_GPU), (b"Memset", CLASS_GPU),
    (b"cuda_runtime", CLASS_API), (b"cuda_driver", CLASS_API), (b"cuda_sync", CLASS_API),
    (b"Runtime", CLASS_API),
    (b"user_annotation", CLASS_RANGE), (b"gpu_user_annotation", CLASS_RANGE),
    (b"ac2g", CLASS_FLOW), (b"async", CLASS_FLOW), (b"async_cpu_to_gpu", CLASS_FLOW),
)


class SplitError(ValueError):
    """Malformed document structure found by the splitter; ``offset`` is a byte offset."""

    def __init__(self, message, offset):
        super().__init__(message)
        self.offset = offset


cdef unsigned char SPECIAL[256]
for _c in (34, 123, 125, 91, 93, 58, 44):  # " { } [ ] : ,
    SPECIAL[_c] = 1


cdef inline Py_ssize_t _string_end(const char* p, Py_ssize_t j, Py_ssize_t n) noexcept nogil:
    """Index of the quote closing a string whose content starts at p[j]; -1 if not in p[:n].
    Short strings are scanned inline, long ones with memchr (vectorised in libc)."""
    cdef Py_ssize_t k, lim
    cdef const char* q
    cdef const char* b
    while True:
        lim = j + 16 if j + 16 < n else n
        k = j
        while k < lim and p[k] != 34 and p[k] != 92:
            k += 1
        if k < lim:
            if p[k] == 34:
                return k
            j = k + 2  # backslash: skip the escaped character
            continue
        if lim == n:
            return -1
        q = <const char*>memchr(p + k, 34, n - k)
        if q == NULL:
            return -1
        b = <const char*>memchr(p + k, 92, q - (p + k))
        if b == NULL:
            return q - p
        j = (b - p) + 2


cdef Py_ssize_t _elem_end(const char* p, Py_ssize_t i, Py_ssize_t n, Py_ssize_t* cat_s,
                          Py_ssize_t* cat_e) noexcept nogil:
    """End (exclusive) of the JSON object opening at p[i], or -1 when it is incomplete.
    Also finds the span of its top-level "cat" string value (cat_s = -1 when none)."""
    cdef int depth = 0
    cdef bint expect_key = False, key_is_cat = False, cat_pending = False
    cdef unsigned char c
    cdef Py_ssize_t j
    cat_s[0] = -1
    while i < n:
        c = <unsigned char>p[i]
        if not SPECIAL[c]:
            i += 1
            continue
        if c == 34:  # '"'
            j = _string_end(p, i + 1, n)
            if j < 0:
                return -1
            if depth == 1:
                if expect_key:
                    expect_key = False
                    key_is_cat = (j - i - 1 == 3 and p[i + 1] == 99 and p[i + 2] == 97
                                  and p[i + 3] == 116)  # "cat"
                elif cat_pending:
                    cat_s[0] = i + 1
                    cat_e[0] = j
                    cat_pending = False
            i = j + 1
            continue
        if c == 123 or c == 91:  # { [
            depth += 1
            if depth == 1:
                expect_key = True
        elif c == 125 or c == 93:  # } ]
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == 58:  # :
            if depth == 1 and key_is_cat:
                cat_pending = True
                key_is_cat = False
        elif depth == 1:  # ,
            expect_key = True
            cat_pending = False
        i += 1
    return -1


cdef class Splitter:
    """Feed the decompressed document in pieces; take the class buffers after each feed."""

    cdef public bytearray skeleton
    cdef public list skeleton_map      # [(offset in skeleton, offset in document)]
    cdef public dict other_counts      # cat bytes -> count, for CLASS_OTHER elements
    cdef public Py_ssize_t n_elements
    cdef public Py_ssize_t doc_base    # document offset of the next buffer's first byte
    cdef int mode, depth, arr_state
    cdef bint in_str, esc, is_key, key_ok, key_is_te, pending_te, expect_key, seen_te
    cdef int key_match
    cdef list bufs
    cdef int64_t* doc_start[N_CLASSES]
    cdef int64_t* index[N_CLASSES]
    cdef int64_t* buf_pos[N_CLASSES]
    cdef Py_ssize_t count[N_CLASSES]
    cdef Py_ssize_t cap[N_CLASSES]
    cdef list cat_names                # keeps the bytes that cat_ptr points into alive
    cdef const char* cat_ptr[32]
    cdef Py_ssize_t cat_len[32]
    cdef int cat_class[32]
    cdef int n_cats
    cdef char last_other[64]           # run-length count of the last CLASS_OTHER cat
    cdef Py_ssize_t last_other_len
    cdef Py_ssize_t last_other_n

    def __cinit__(self):
        cdef int c
        for c in range(N_CLASSES):
            self.doc_start[c] = NULL
            self.index[c] = NULL
            self.buf_pos[c] = NULL
            self.count[c] = 0
            self.cap[c] = 0
        self.skeleton = bytearray()
        self.skeleton_map = []
        self.other_counts = {}
        self.n_elements = 0
        self.doc_base = 0
        self.mode = M_BEFORE
        self.depth = 0
        self.in_str = self.esc = self.is_key = self.key_ok = False
        self.key_is_te = self.pending_te = self.expect_key = self.seen_te = False
        self.key_match = 0
        self.bufs = [bytearray(b"[") for c in range(N_CLASSES)]
        self.cat_names = [name for name, _ in _CATS]
        self.n_cats = len(_CATS)
        for c in range(self.n_cats):
            self.cat_ptr[c] = <const char*>self.cat_names[c]
            self.cat_len[c] = len(self.cat_names[c])
            self.cat_class[c] = _CATS[c][1]
        self.last_other_len = -1
        self.last_other_n = 0

    def __dealloc__(self):
        cdef int c
        for c in range(N_CLASSES):
            free(self.doc_start[c])
            free(self.index[c])
            free(self.buf_pos[c])

    @property
    def finished(self):
        """True once the root object has been closed."""
        return self.mode == M_AFTER

    @property
    def saw_events(self):
        return self.seen_te

    cdef int _classify(self, const char* s, Py_ssize_t n) noexcept:
        cdef int k
        for k in range(self.n_cats):
            if self.cat_len[k] == n and memcmp(self.cat_ptr[k], s, n) == 0:
                return self.cat_class[k]
        return CLASS_OTHER

    cdef int _count_other(self, const char* s, Py_ssize_t n) except -1:
        if n == self.last_other_len and memcmp(self.last_other, s, n) == 0:
            self.last_other_n += 1
            return 0
        self._flush_other()
        if n <= 64:
            memcpy(self.last_other, s, n)
            self.last_other_len = n
            self.last_other_n = 1
        else:
            key = s[:n]
            self.other_counts[key] = self.other_counts.get(key, 0) + 1
        return 0

    cdef int _flush_other(self) except -1:
        if self.last_other_n:
            key = self.last_other[:self.last_other_len]
            self.other_counts[key] = self.other_counts.get(key, 0) + self.last_other_n
        self.last_other_len = -1
        self.last_other_n = 0
        return 0

    def counts_of_other(self):
        """{cat bytes: count} of the CLASS_OTHER elements seen so far."""
        self._flush_other()
        return self.other_counts

    cdef int _emit(self, const char* p, Py_ssize_t start, Py_ssize_t end, int cls) except -1:
        cdef bytearray b = self.bufs[cls]
        cdef Py_ssize_t old = PyByteArray_GET_SIZE(b)
        cdef Py_ssize_t k = self.count[cls]
        cdef Py_ssize_t sep = 1 if k > 0 else 0
        cdef Py_ssize_t newcap
        if k == self.cap[cls]:
            newcap = 1024 if k == 0 else 2 * k
            self.doc_start[cls] = <int64_t*>realloc(self.doc_start[cls], newcap * sizeof(int64_t))
            self.index[cls] = <int64_t*>realloc(self.index[cls], newcap * sizeof(int64_t))
            self.buf_pos[cls] = <int64_t*>realloc(self.buf_pos[cls], newcap * sizeof(int64_t))
            if not self.doc_start[cls] or not self.index[cls] or not self.buf_pos[cls]:
                raise MemoryError()
            self.cap[cls] = newcap
        PyByteArray_Resize(b, old + sep + (end - start))
        cdef char* dst = PyByteArray_AS_STRING(b)
        if sep:
            dst[old] = b','
        memcpy(dst + old + sep, p + start, end - start)
        self.doc_start[cls][k] = self.doc_base + start
        self.index[cls][k] = self.n_elements
        self.buf_pos[cls][k] = old + sep
        self.count[cls] = k + 1
        self.n_elements += 1
        return 0

    def take(self, int cls):
        """(buffer as a JSON array, document offsets, element indices, buffer offsets); resets."""
        cdef Py_ssize_t k = self.count[cls]
        b = self.bufs[cls]
        b += b"]"
        doc = np.empty(k, dtype=np.int64)
        idx = np.empty(k, dtype=np.int64)
        pos = np.empty(k, dtype=np.int64)
        cdef int64_t[::1] d = doc
        cdef int64_t[::1] ix = idx
        cdef int64_t[::1] ps = pos
        cdef Py_ssize_t j
        for j in range(k):
            d[j] = self.doc_start[cls][j]
            ix[j] = self.index[cls][j]
            ps[j] = self.buf_pos[cls][j]
        self.bufs[cls] = bytearray(b"[")
        self.count[cls] = 0
        return b, doc, idx, pos

    def pending(self, int cls):
        """Number of elements waiting in a class buffer."""
        return self.count[cls]

    def pending_bytes(self, int cls):
        return PyByteArray_GET_SIZE(self.bufs[cls])

    def feed(self, buf, bint final):
        """Scan ``buf``; returns how many leading bytes were consumed (the rest is an
        incomplete element to pass again, followed by more data)."""
        cdef Py_buffer view
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            return self._feed(<const char*>view.buf, view.len, final)
        finally:
            PyBuffer_Release(&view)

    cdef Py_ssize_t _feed(self, const char* p, Py_ssize_t n, bint final) except -1:
        cdef Py_ssize_t i = 0, skel_from = 0, elem_start = 0, j, cat_s = -1, cat_e = -1
        cdef char c
        cdef bint incomplete = False
        cdef int cls
        cdef Py_ssize_t consumed
        while i < n:
            c = p[i]
            if self.mode == M_ARRAY:
                if c == b' ' or c == b'\n' or c == b'\r' or c == b'\t':
                    pass
                elif c == b'{':
                    if self.arr_state == A_ELEM:
                        raise SplitError(
                            f"missing ',' between traceEvents[{self.n_elements - 1}] and the "
                            "next event", self.doc_base + i)
                    elem_start = i
                    j = _elem_end(p, i, n, &cat_s, &cat_e)
                    if j < 0:
                        incomplete = True
                        break
                    if cat_s < 0:
                        cls = CLASS_NOCAT
                    else:
                        cls = self._classify(p + cat_s, cat_e - cat_s)
                        if cls == CLASS_OTHER:
                            self._count_other(p + cat_s, cat_e - cat_s)
                    self._emit(p, elem_start, j, cls)
                    self.arr_state = A_ELEM
                    i = j
                    continue
                elif c == b',':
                    if self.arr_state != A_ELEM:
                        raise SplitError("unexpected ',' in traceEvents", self.doc_base + i)
                    self.arr_state = A_COMMA
                elif c == b']':
                    if self.arr_state == A_COMMA:
                        raise SplitError("trailing ',' at the end of traceEvents",
                                         self.doc_base + i)
                    self.mode = M_ROOT
                    self.depth = 1
                    skel_from = i
                else:
                    raise SplitError(
                        f"traceEvents[{self.n_elements}] is not a JSON object",
                        self.doc_base + i)
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
                        raise SplitError("traceEvents is not an array", self.doc_base + i)
                    if self.seen_te:
                        raise SplitError("more than one traceEvents array", self.doc_base + i)
                    self.seen_te = True
                    self._skel(p, skel_from, i + 1)
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
                    raise SplitError("not a JSON object (a Kineto trace is an object with "
                                     "traceEvents)", self.doc_base + i)
                i += 1
                continue
            else:  # M_AFTER
                if not (c == b' ' or c == b'\n' or c == b'\r' or c == b'\t'):
                    raise SplitError("data after the end of the JSON document",
                                     self.doc_base + i)
                i += 1
                continue
        # end of buffer
        if incomplete:
            if final:
                raise SplitError(
                    f"the document ends inside traceEvents[{self.n_elements}] (truncated?)",
                    self.doc_base + elem_start)
            consumed = elem_start
        else:
            if self.mode != M_ARRAY:
                self._skel(p, skel_from, n)
            consumed = n
            if final and self.mode != M_AFTER:
                raise SplitError("the document ends before its JSON object is closed "
                                 "(truncated?)", self.doc_base + n)
        self.doc_base += consumed
        return consumed

    cdef int _skel(self, const char* p, Py_ssize_t start, Py_ssize_t end) except -1:
        if end <= start:
            return 0
        cdef Py_ssize_t old = PyByteArray_GET_SIZE(self.skeleton)
        self.skeleton_map.append((old, self.doc_base + start))
        PyByteArray_Resize(self.skeleton, old + end - start)
        memcpy(PyByteArray_AS_STRING(self.skeleton) + old, p + start, end - start)
        return 0
