# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3, binding=True, autotestdict=False, auto_pickle=False
"""Kineto (Chrome-trace) JSON -> the loader's columns, in one native pass.

``Scanner`` is fed the decompressed document in pieces. It parses every element of the
top-level ``traceEvents`` array completely (a validating JSON parser: strings, escapes,
numbers, literals, nesting, UTF-8), keeps the fields the model reads and writes them
straight into growable C arrays, one set of columns per table (GPU ops, API calls and sync
records, annotations, host activities, flows, ``[memory]`` events, metadata); everything
else in an element is validated and skipped. No Python object is made per event: names and
other strings are interned once in a C hash table (by their JSON text), and each decimal
time becomes integer ns exactly (``round(ts*1000)``, ``round((ts+dur)*1000)``, ties to
even) with integer arithmetic. The rest of the document (the "skeleton": the root
object with an empty ``traceEvents``) is kept for the caller, which decodes it once.

Why hand-written: no JSON library ships on PyPI as a C/C++ build dependency we could link
(simdjson's and yyjson's headers are not in any wheel), and a Python-level decoder builds an
object per event (the msgspec design this replaced spent ~2/3 of a load building and
converting them).

Rare spellings are left to the caller, which sees few distinct values: pid/tid and args
written as strings (ROCm: ``"stream": "0x0"``), and times the integer path does not take (a
sign, an exponent, more than 12 fraction digits, more than 4e15 us) are recorded as
"deferred" (row, string or text) and resolved in Python.

At the end of a buffer an incomplete element is not consumed: the caller passes it again
with more data. ``serve``/``submit``/``result`` run the scan on a helper thread that never
takes the GIL, so decompressing the next piece overlaps scanning this one.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memchr, memcmp, memcpy, memset

import json

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

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #if defined(__SSE2__)
    #include <emmintrin.h>
    /* bit k set where p[k] (k < 16) ends a run of plain string bytes: a quote, a backslash,
       a control character or a byte >= 0x80 (signed compare: those are negative) */
    static inline uint32_t pyt_str16(const char* p) {
        __m128i v = _mm_loadu_si128((const __m128i*)p);
        __m128i m = _mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                         _mm_cmpeq_epi8(v, _mm_set1_epi8(0x5C))),
            _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
        return (uint32_t)_mm_movemask_epi8(m);
    }
    /* bit k set where p[k] (k < 16) is JSON whitespace */
    static inline uint32_t pyt_ws16(const char* p) {
        __m128i v = _mm_loadu_si128((const __m128i*)p);
        __m128i m = _mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(0x20)),
                         _mm_cmpeq_epi8(v, _mm_set1_epi8(0x0A))),
            _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(0x0D)),
                         _mm_cmpeq_epi8(v, _mm_set1_epi8(0x09))));
        return (uint32_t)_mm_movemask_epi8(m);
    }
    #define PYT_HAVE_SIMD 1
    #else
    static inline uint32_t pyt_str16(const char* p) { return 0xFFFF; }
    static inline uint32_t pyt_ws16(const char* p) { return 0; }
    #define PYT_HAVE_SIMD 0
    #endif
    static inline int pyt_ctz32(uint32_t x) { return __builtin_ctz(x); }
    /* Growable arrays of PYT_MAP_MIN bytes or more are mappings of their own, so that
       freeing one (as each column is handed to numpy) gives its pages back to the system
       at once: out of malloc's heap, where the freed columns stayed resident behind later
       allocations and added the whole scan's size to the peak of a load. A capacity is a
       power of two times 4096: whether a block is mapped follows from its capacity. */
    #include <stdlib.h>
    #include <sys/mman.h>
    #define PYT_MAP_MIN ((Py_ssize_t)1 << 16)
    static char* pyt_map_grow(char* old, Py_ssize_t len, Py_ssize_t old_cap, Py_ssize_t cap) {
        void* d;
    #if defined(__linux__)
        if (old_cap >= PYT_MAP_MIN) {  /* moves the pages, copies nothing */
            d = mremap(old, (size_t)old_cap, (size_t)cap, MREMAP_MAYMOVE);
            return d == MAP_FAILED ? NULL : (char*)d;
        }
    #endif
        d = mmap(NULL, (size_t)cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (d == MAP_FAILED)
            return NULL;
        if (len)
            memcpy(d, old, (size_t)len);
        if (old_cap >= PYT_MAP_MIN)
            munmap(old, (size_t)old_cap);
        else
            free(old);
        return (char*)d;
    }
    static inline void pyt_map_free(char* data, Py_ssize_t cap) {
        if (cap >= PYT_MAP_MIN)
            munmap(data, (size_t)cap);
        else
            free(data);
    }
    /* eight bytes at a time (SWAR) */
    /* w: bytes p[0..7], p[0] the lowest (fewer than 8 available: zero-filled above them; a
       zero is no digit) */
    static inline uint64_t pyt_load8(const char* p, Py_ssize_t avail) {
        uint64_t w = 0;
        if (__builtin_expect(avail >= 8, 1)) {
            memcpy(&w, p, 8);
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
            w = __builtin_bswap64(w);
    #endif
        } else {
            for (Py_ssize_t k = avail - 1; k >= 0; k--)
                w = (w << 8) | (unsigned char)p[k];
        }
        return w;
    }
    """
    uint32_t pyt_str16(const char* p) noexcept nogil
    uint32_t pyt_ws16(const char* p) noexcept nogil
    int pyt_ctz32(uint32_t x) noexcept nogil
    Py_ssize_t PYT_MAP_MIN
    char* pyt_map_grow(char* old, Py_ssize_t len, Py_ssize_t old_cap, Py_ssize_t cap) noexcept nogil
    void pyt_map_free(char* data, Py_ssize_t cap) noexcept nogil
    bint PYT_HAVE_SIMD
    uint64_t pyt_load8(const char* p, Py_ssize_t avail) noexcept nogil


# element classes: the modelled ones (0-9) are one class per category (kept in sync with
# pytimings/ingest/kineto.py, which stores the class as the rows' "cat" code)
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

# the tables rows go to
cdef enum:
    G_GPU = 0     # kernel, memcpy, memset
    G_API = 1     # runtime, driver, sync
    G_RANGES = 2  # user_annotation
    G_HOST = 3    # cpu_op, python_function
    G_FLOW = 4    # flows ('s' and 'f')
    G_MEM = 5     # [memory] instant events
    G_META = 6    # 'M' events without cat
    N_GROUPS = 7
GROUP_GPU = G_GPU
GROUP_API = G_API
GROUP_RANGES = G_RANGES
GROUP_HOST = G_HOST
GROUP_FLOW = G_FLOW
GROUP_MEM = G_MEM
GROUP_META = G_META

# columns of a group (not all groups use all of them)
cdef enum:
    K_START = 0
    K_END = 1
    K_PID = 2
    K_TID = 3
    K_CORR = 4    # flows: id; memory: bytes
    K_DEV = 5     # memory: addr
    K_STREAM = 6  # memory: device type
    K_BYTES = 7   # memory: device id
    K_INDEX = 8
    K_A = 9       # memory: total allocated; API calls: a sync's wait_on_stream; GPU: graph node
    K_B = 10      # memory: total reserved; API calls: wait_on_cuda_event_record_corr_id
    K_NAME = 11   # int32 string ids; meta: name
    K_ARGS = 12   # int32: host op / comm kernel args text (+1; 0 none); meta: args.name id
    K_CAT = 13    # int8: class; flows: phase (0 's', 1 'f')
    K_EXT = 14    # cpu_ops and API calls: Kineto's "External id" (-1 absent)
    N_COLS = 15
cdef int COL_SIZE[N_COLS]
for _k in range(N_COLS):
    COL_SIZE[_k] = 8
COL_SIZE[K_NAME] = 4
COL_SIZE[K_ARGS] = 4
COL_SIZE[K_CAT] = 1
COLUMNS = ("start", "end", "pid", "tid", "correlation", "device", "stream", "bytes", "index",
           "a", "b", "name", "args", "cat", "external")
cdef int GROUP_OF[N_CLASSES]
for _k, _g in enumerate((G_GPU, G_GPU, G_GPU, G_API, G_API, G_API, G_RANGES, -1, G_HOST, G_HOST,
                         G_FLOW, -1, -1)):
    GROUP_OF[_k] = _g

# deferred values: how the caller resolves them
cdef enum:
    D_KEY = 0    # pid/tid written as a string or null: a stable key (numeric strings: their number)
    D_INT = 1    # an args field written as a string: int(text, 0), -1 when not a number
DEFER_KEY = D_KEY
DEFER_INT = D_INT

cdef enum:
    V_ABSENT = 0
    V_NULL = 1
    V_BOOL = 2
    V_INT = 3
    V_FLOAT = 4
    V_STR = 5
    V_OBJ = 6
    V_ARR = 7
_KIND_NAMES = ("absent", "null", "bool", "int", "float", "str", "object", "array")

# top-level keys
cdef enum:
    T_PH = 0
    T_CAT = 1
    T_NAME = 2
    T_PID = 3
    T_TID = 4
    T_TS = 5
    T_DUR = 6
    T_ID = 7
    T_ARGS = 8
    N_TOP = 9
# args keys
cdef enum:
    A_CORR = 0
    A_DEVICE = 1
    A_STREAM = 2
    A_BYTES = 3
    A_SIZE = 4
    A_DIMS = 5
    A_TYPES = 6
    A_CONCRETE = 7
    A_STRIDES = 8
    A_MEM_BYTES = 9
    A_MEM_ADDR = 10
    A_MEM_DTYPE = 11
    A_MEM_DEV = 12
    A_MEM_ALLOC = 13
    A_MEM_RESV = 14
    A_NAME = 15
    A_WAIT_STREAM = 16  # cuda_sync (newer Kineto): the stream the awaited event was recorded on
    A_WAIT_RECORD = 17  # ... and the correlation id of its cudaEventRecord call
    A_COLL = 18   # NCCL kernels (PyTorch 2.1+): the record_param_comms args of their call
    A_IN_NELEMS = 19
    A_OUT_NELEMS = 20
    A_DTYPE = 21
    A_GROUP = 22
    A_GRAPH_NODE = 23  # GPU ops (Kineto built with CUDA 12+): the CUPTI graph node, 0 outside
    A_EXT = 24  # cpu_ops: the op's id; API calls: the id of the innermost op open at the call
    A_EXT_2021 = 25  # API calls in 2021-era Kineto: "external id", lower case
    N_ARGS = 26
_TOP_KEYS = (b"ph", b"cat", b"name", b"pid", b"tid", b"ts", b"dur", b"id", b"args")
_ARG_KEYS = (b"correlation", b"device", b"stream", b"bytes", b"size", b"Input Dims",
             b"Input type", b"Concrete Inputs", b"Input Strides", b"Bytes", b"Addr",
             b"Device Type", b"Device Id", b"Total Allocated", b"Total Reserved", b"name",
             b"wait_on_stream", b"wait_on_cuda_event_record_corr_id", b"Collective name",
             b"In msg nelems", b"Out msg nelems", b"dtype", b"Group size", b"graph node id",
             b"External id", b"external id")
FIELD_NAMES = tuple(k.decode() for k in _TOP_KEYS) + tuple(
    "args." + k.decode() for k in _ARG_KEYS)
# [memory] args in the order their problems are reported (as the loader always has)
cdef int MEM_FIELDS[6]
cdef int MEM_COLS[6]  # where they go: bytes, addr, device type, device id, allocated, reserved
for _k, (_f, _c) in enumerate(((A_MEM_BYTES, K_CORR), (A_MEM_ADDR, K_DEV), (A_MEM_DTYPE, K_STREAM),
                               (A_MEM_DEV, K_BYTES), (A_MEM_ALLOC, K_A), (A_MEM_RESV, K_B))):
    MEM_FIELDS[_k] = _f
    MEM_COLS[_k] = _c
MEM_FIELD_NAMES = tuple(k.decode() for k in _ARG_KEYS[A_MEM_BYTES:A_MEM_RESV + 1])

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

cdef enum:
    MAX_DEPTH = 1000
    MAX_KEY = 64  # longest key matched + 1 (wait_on_cuda_event_record_corr_id: 33 bytes)

cdef enum Mode:
    M_BEFORE = 0
    M_ROOT = 1
    M_ARRAY = 2
    M_AFTER = 3

cdef enum ArrState:
    S_OPEN = 0
    S_ELEM = 1
    S_COMMA = 2

cdef const char* TE = b"traceEvents"

# errors (messages in Scanner.error())
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
    E_SYNTAX = 13     # err_text: what
    E_DEEP = 14
    E_TYPE = 15       # err_field, err_kind: expected types / got
    E_BIG = 16        # err_field, err_text: the number
    E_NO_TS = 17
    E_NO_DUR = 18
    E_TS_NAN = 19     # err_text: the value
    E_DUR_NAN = 20
    E_NEG_DUR = 21    # err_text: dur
    E_MEM_ARGS = 22
    E_MEM_NOT_INT = 23  # err_field: index in MEM_FIELD_NAMES

# parse outcomes
cdef enum:
    P_OK = 0
    P_INCOMPLETE = 1
    P_FAIL = 2


_AT = "traceEvents[{idx}] (byte {elem}): "
_BAD = "invalid JSON at byte {off}: "
_MESSAGES = {
    E_NOMEM: _BAD + "out of memory",
    E_NOT_OBJECT: _BAD + "not a JSON object (a Kineto trace is an object with traceEvents)",
    E_TE_NOT_ARRAY: _BAD + "traceEvents is not an array",
    E_TE_TWICE: _BAD + "more than one traceEvents array",
    E_MISSING_COMMA: _BAD + "missing ',' between traceEvents[{prev}] and the next event",
    E_BAD_COMMA: _BAD + "unexpected ',' in traceEvents",
    E_TRAILING_COMMA: _BAD + "trailing ',' at the end of traceEvents",
    E_ELEM_NOT_OBJECT: _BAD + "traceEvents[{idx}] is not a JSON object",
    E_AFTER: _BAD + "data after the end of the JSON document",
    E_UTF8: _BAD + "traceEvents[{idx}] is not valid UTF-8",
    E_TRUNC_ELEM: _BAD + "the document ends inside traceEvents[{idx}] (truncated?)",
    E_TRUNC_DOC: _BAD + "the document ends before its JSON object is closed (truncated?)",
    E_SYNTAX: _BAD + "{what} in traceEvents[{idx}]",
    E_DEEP: "JSON nested too deeply in traceEvents (from byte {elem}): arrays/objects "
    "deeper than {depth} levels",
    E_TYPE: "bad event at byte {elem}: Expected `{what}`, got `{kind}` - at "
    "`traceEvents[{idx}].{field}`",
    E_BIG: _AT + "{field} {text} does not fit in 64 bits",
    E_NO_TS: _AT + "event has no ts",
    E_NO_DUR: _AT + "complete ('X') event has no dur",
    E_TS_NAN: _AT + "ts is not a number: {text40}",
    E_DUR_NAN: _AT + "dur is not a number: {text40}",
    E_NEG_DUR: _AT + "negative duration (dur={text})",
    E_MEM_ARGS: _AT + "a [memory] event without ts or args.Bytes",
    E_MEM_NOT_INT: _AT + "[memory] args field {mem_field} is not an integer",
}


class ScanError(ValueError):
    """A bad document. ``code`` says which problem, ``offset`` is a document byte offset,
    ``index`` the element (traceEvents[index]) or -1, ``element_offset`` where it starts;
    the message says it all in words."""

    def __init__(self, message, code, offset, index, element_offset):
        super().__init__(message)
        self.code = code
        self.offset = offset
        self.index = index
        self.element_offset = element_offset


# ---- UTF-8 ----------------------------------------------------------------------------
cdef Py_ssize_t _utf8_bad(const unsigned char* s, Py_ssize_t n) noexcept nogil:
    """Index of the first byte of an invalid UTF-8 sequence in s[:n], or -1 (RFC 3629:
    no overlong forms, no surrogates, nothing above U+10FFFF). ASCII runs are checked eight
    bytes at a time."""
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
    """Index of the first invalid UTF-8 byte, or -1 (the scanner's check, for tests)."""
    return _utf8_bad(<const unsigned char*>PyBytes_AS_STRING(data), len(data))


# ---- exact decimal microseconds -> ns ----------------------------------------------------
cdef enum:
    HALF = 500000000
    ONE = 1000000000
# integer microseconds above this take the exact fallback (keeps ts + dur within int64 ns)
cdef int64_t BIG_US = 4000000000000000


cdef const char* _data(object buf, Py_ssize_t* n) except NULL:
    """The bytes of a ``bytes`` or ``bytearray`` (the loader reads into reused bytearrays)."""
    if type(buf) is bytes:
        n[0] = PyBytes_GET_SIZE(buf)
        return PyBytes_AS_STRING(buf)
    if type(buf) is bytearray:
        n[0] = PyByteArray_GET_SIZE(buf)
        return PyByteArray_AS_STRING(buf)
    raise TypeError(f"expected bytes or bytearray, not {type(buf).__name__}")


cdef inline bint _digit(char c) noexcept nogil:
    return c >= 48 and c <= 57


cdef int64_t POW10[13]
POW10[0] = 1
for _k in range(1, 13):
    POW10[_k] = POW10[_k - 1] * 10


cdef int _parse_us(const char* s, Py_ssize_t n, int64_t* ns, int64_t* frac) noexcept nogil:
    """Decimal microseconds -> floor(value * 1000) and the next 9 digits (1e-9 ns units).

    0: done; 1: take the exact fallback; -1: not a JSON number.
    """
    cdef Py_ssize_t i = 0, start
    cdef int64_t ip = 0, f = 0
    cdef int fd = 0
    cdef unsigned char d
    if n <= 0:
        return -1
    if s[0] == b'-':
        return 1 if n > 1 and _digit(s[1]) else -1
    if not _digit(s[0]):
        return -1
    while i < n:
        d = <unsigned char>(s[i] - 48)
        if d > 9:
            break
        if i == 16:
            return 1  # 17 digits or more: beyond BIG_US
        ip = ip * 10 + d
        i += 1
    if ip > BIG_US:
        return 1
    if i < n and s[i] == b'.':
        i += 1
        start = i
        while i < n:
            d = <unsigned char>(s[i] - 48)
            if d > 9:
                break
            if fd < 12:
                f = f * 10 + d
                fd += 1
            elif d:
                return 1
            i += 1
    if i < n:
        return 1  # exponent
    f *= POW10[12 - fd]  # 12 fraction digits: 3 of ns, 9 below
    ns[0] = ip * 1000 + f // 1000000000
    frac[0] = f % 1000000000
    return 0


cdef inline int64_t _round(int64_t ns, int64_t frac) noexcept nogil:
    if frac > HALF or (frac == HALF and (ns & 1)):
        return ns + 1
    return ns


cdef inline int64_t _end_ns(int64_t a, int64_t fa, int64_t b, int64_t fb) noexcept nogil:
    cdef int64_t s = a + b, f = fa + fb
    if f >= ONE:
        s += 1
        f -= ONE
    return _round(s, f)


def exact_ns_fast(bytes ts, object dur):
    """The integer path alone (for tests): (start, end) or None when it defers."""
    cdef int64_t a = 0, fa = 0, b = 0, fb = 0
    if _parse_us(ts, len(ts), &a, &fa) != 0:
        return None
    if dur is None:
        return _round(a, fa), _round(a, fa)
    if _parse_us(dur, len(dur), &b, &fb) != 0:
        return None
    return _round(a, fa), _end_ns(a, fa, b, fb)


# ---- growable C arrays ---------------------------------------------------------------------
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
    if cap >= PYT_MAP_MIN:
        d = pyt_map_grow(g.data, g.len, g.cap, cap)
    else:
        d = <char*>realloc(g.data, cap)
    if d == NULL:
        return -1
    g.data = d
    g.cap = cap
    return 0


cdef inline int _append(Growable* g, const void* src, Py_ssize_t n) noexcept nogil:
    if g.len + n > g.cap and _reserve(g, n) < 0:
        return -1
    memcpy(g.data + g.len, src, n)
    g.len += n
    return 0


cdef inline int _push64(Growable* g, int64_t v) noexcept nogil:
    return _append(g, &v, 8)


cdef inline void _release(Growable* g) noexcept nogil:
    pyt_map_free(g.data, g.cap)
    g.data = NULL
    g.len = g.cap = 0


# ---- interned strings ----------------------------------------------------------------------
cdef struct Entry:
    Py_ssize_t off
    Py_ssize_t len
    uint64_t hash


cdef struct Intern:
    Growable arena     # the bytes of every distinct text
    Growable entries   # Entry per id
    Growable used      # 1 byte per id: used as a name (goes to the trace's string table)
    uint32_t* slots    # open addressing: 0 empty, else id + 1
    Py_ssize_t mask
    Py_ssize_t count


cdef inline uint64_t _hash(const char* s, Py_ssize_t n) noexcept nogil:
    cdef uint64_t h = <uint64_t>n * 0x9E3779B97F4A7C15ULL, w
    cdef Py_ssize_t i = 0
    while i + 8 <= n:
        memcpy(&w, s + i, 8)
        h = (h ^ w) * 0xBF58476D1CE4E5B9ULL
        h ^= h >> 31
        i += 8
    if i < n:
        w = 0
        memcpy(&w, s + i, n - i)
        h = (h ^ w) * 0x94D049BB133111EBULL
        h ^= h >> 29
    h *= 0xBF58476D1CE4E5B9ULL
    return h ^ (h >> 32)


cdef int _intern_init(Intern* t) noexcept nogil:
    memset(t, 0, sizeof(Intern))
    t.slots = <uint32_t*>calloc(1024, sizeof(uint32_t))
    if t.slots == NULL:
        return -1
    t.mask = 1023
    return 0


cdef void _intern_free(Intern* t) noexcept nogil:
    _release(&t.arena)
    _release(&t.entries)
    _release(&t.used)
    free(t.slots)
    t.slots = NULL


cdef int _intern_grow(Intern* t) noexcept nogil:
    cdef Py_ssize_t size = (t.mask + 1) * 2, k, j
    cdef uint32_t* s = <uint32_t*>calloc(size, sizeof(uint32_t))
    cdef Entry* e = <Entry*>t.entries.data
    if s == NULL:
        return -1
    for k in range(t.count):
        j = e[k].hash & (size - 1)
        while s[j]:
            j = (j + 1) & (size - 1)
        s[j] = <uint32_t>(k + 1)
    free(t.slots)
    t.slots = s
    t.mask = size - 1
    return 0


cdef void _intern_clear(Intern* t) noexcept nogil:
    """Forget every text (the memory is kept for the next use)."""
    memset(t.slots, 0, (t.mask + 1) * sizeof(uint32_t))
    t.arena.len = t.entries.len = t.used.len = 0
    t.count = 0


cdef inline Py_ssize_t _intern(Intern* t, const char* s, Py_ssize_t n, bint name) noexcept nogil:
    """The id of text s[:n] (a new one when first seen), or -1 out of memory."""
    return _intern_h(t, s, n, _hash(s, n), name)


cdef Py_ssize_t _intern_h(Intern* t, const char* s, Py_ssize_t n, uint64_t h,
                          bint name) noexcept nogil:
    """``_intern`` with the text's hash known."""
    cdef Py_ssize_t j = h & t.mask, k
    cdef Entry* e = <Entry*>t.entries.data
    cdef Entry ne
    cdef char one = 1
    while t.slots[j]:
        k = t.slots[j] - 1
        if e[k].hash == h and e[k].len == n and memcmp(t.arena.data + e[k].off, s, n) == 0:
            if name:
                t.used.data[k] = 1
            return k
        j = (j + 1) & t.mask
    k = t.count
    ne.off = t.arena.len
    ne.len = n
    ne.hash = h
    if _append(&t.arena, s, n) < 0 or _append(&t.entries, &ne, sizeof(Entry)) < 0:
        return -1
    one = 1 if name else 0
    if _append(&t.used, &one, 1) < 0:
        return -1
    t.slots[j] = <uint32_t>(k + 1)
    t.count += 1
    if t.count * 2 > t.mask and _intern_grow(t) < 0:
        return -1
    return k


cdef list _intern_texts(Intern* t, bint names_only):
    """The texts as Python str (JSON string contents decoded; None where unused)."""
    cdef Entry* e = <Entry*>t.entries.data
    cdef Py_ssize_t k
    cdef const char* s
    out = []
    for k in range(t.count):
        if names_only and not t.used.data[k]:
            out.append(None)
            continue
        s = t.arena.data + e[k].off
        if memchr(s, 92, e[k].len) == NULL:
            out.append(PyUnicode_DecodeUTF8(s, e[k].len, "surrogatepass"))
        else:
            out.append(json.loads(b'"' + s[:e[k].len] + b'"'))
    return out


# ---- parsing ---------------------------------------------------------------------------------
cdef struct Val:
    int kind
    Py_ssize_t s      # the value's JSON text p[s:e] (strings: with their quotes)
    Py_ssize_t e
    bint esc          # strings: some escape inside
    bint big          # integers: beyond int64
    int64_t i         # integers: the value
    uint64_t us_ip    # numbers: the value of the digits before any '.' (when at most 18)
    Py_ssize_t us_dot  #   where they end
    Py_ssize_t us_fe  #   where the fraction digits end (us_dot without a fraction)


cdef struct Parse:
    const char* p
    Py_ssize_t n
    Py_ssize_t pos
    int err           # 0, E_SYNTAX, E_UTF8, E_DEEP (with P_FAIL)
    Py_ssize_t at     # where
    const char* what  # E_SYNTAX: what is wrong


cdef inline void _ws(Parse* P) noexcept nogil:
    cdef const char* p = P.p
    cdef Py_ssize_t i = P.pos, n = P.n
    cdef uint32_t m
    cdef char c
    # most runs are empty or one space: bytes above ' ' are never whitespace
    if i < n and <unsigned char>p[i] > 32:
        return
    if i + 1 < n and p[i] == 32 and <unsigned char>p[i + 1] > 32:
        P.pos = i + 1
        return
    if PYT_HAVE_SIMD:
        while i + 16 <= n:
            m = pyt_ws16(p + i)
            if m != 0xFFFF:
                P.pos = i + pyt_ctz32(~m)
                return
            i += 16
    while i < n:
        c = p[i]
        if c != 32 and c != 10 and c != 13 and c != 9:
            break
        i += 1
    P.pos = i


cdef inline int _bad(Parse* P, Py_ssize_t at, const char* what) noexcept nogil:
    if at >= P.n:
        return P_INCOMPLETE
    P.err = E_SYNTAX
    P.at = at
    P.what = what
    return P_FAIL


cdef inline int _string(Parse* P, Val* v) noexcept nogil:
    """The string opening at P.pos (a quote) -> v (its span with quotes); validated."""
    cdef const char* p = P.p
    cdef Py_ssize_t n = P.n, i = P.pos + 1, h, bad
    cdef uint32_t m
    cdef unsigned char c
    cdef bint high = False
    v.kind = V_STR
    v.s = P.pos
    v.esc = False
    while True:
        if PYT_HAVE_SIMD:
            while i + 16 <= n:
                m = pyt_str16(p + i)
                if m:
                    i += pyt_ctz32(m)
                    break
                i += 16
        if i >= n:
            return P_INCOMPLETE
        c = <unsigned char>p[i]
        if c == 34:
            break
        if c == 92:
            v.esc = True
            if i + 1 >= n:
                return P_INCOMPLETE
            c = <unsigned char>p[i + 1]
            if c == 117:  # \uXXXX
                if i + 6 > n:
                    return P_INCOMPLETE
                for h in range(i + 2, i + 6):
                    c = <unsigned char>p[h]
                    if not (_digit(c) or (97 <= (c | 32) <= 102)):
                        return _bad(P, h, "bad \\u escape")
                i += 6
            elif c == 34 or c == 92 or c == 47 or c == 98 or c == 102 or c == 110 \
                    or c == 114 or c == 116:
                i += 2
            else:
                return _bad(P, i + 1, "bad escape")
            continue
        if c < 0x20:
            return _bad(P, i, "control character in a string")
        if c >= 0x80:
            high = True
        i += 1
    v.e = i + 1
    if high:
        bad = _utf8_bad(<const unsigned char*>(p + v.s + 1), i - v.s - 1)
        if bad >= 0:
            P.err = E_UTF8
            P.at = v.s + 1 + bad
            return P_FAIL
    P.pos = i + 1
    return P_OK


cdef inline Py_ssize_t _digit_run(Parse* P, Py_ssize_t i) noexcept nogil:
    """The end of the one or more digits at p[i]; -P_INCOMPLETE or -P_FAIL."""
    cdef const char* p = P.p
    cdef Py_ssize_t n = P.n
    if i >= n:
        return -P_INCOMPLETE
    if not _digit(p[i]):
        return -_bad(P, i, "bad number")
    while i < n and _digit(p[i]):
        i += 1
    return i


cdef inline int _number(Parse* P, Val* v) noexcept nogil:
    """The number at P.pos -> v: its span and kind, an integer's value, and where the parts
    of the text are (for ``_us``)."""
    cdef const char* p = P.p
    cdef Py_ssize_t n = P.n, i = P.pos, start
    cdef bint neg = False
    cdef uint64_t acc = 0, lim
    cdef int d
    v.s = i
    v.kind = V_INT
    v.big = False
    if p[i] == 45:
        neg = True
        i += 1
        if i >= n:
            return P_INCOMPLETE
    if not _digit(p[i]):
        return _bad(P, i, "bad number")
    if p[i] == 48:
        i += 1
    else:
        start = i
        while i < n:
            d = <unsigned char>p[i] - 48
            if d < 0 or d > 9:
                break
            acc = acc * 10 + <uint64_t>d
            i += 1
        if i - start > 18:  # may not fit: again, with the bound
            lim = 9223372036854775808ULL if neg else 9223372036854775807ULL
            acc = 0
            for start in range(start, i):
                d = p[start] - 48
                if not v.big and acc <= (lim - d) // 10:
                    acc = acc * 10 + d
                else:
                    v.big = True
    v.us_dot = i
    if i < n and p[i] == 46:
        v.kind = V_FLOAT
        i = _digit_run(P, i + 1)
        if i < 0:
            return <int>-i
    v.us_fe = i
    if i < n and (p[i] == 101 or p[i] == 69):
        v.kind = V_FLOAT
        i += 1
        if i < n and (p[i] == 43 or p[i] == 45):
            i += 1
        i = _digit_run(P, i)
        if i < 0:
            return <int>-i
    if i >= n:
        return P_INCOMPLETE  # the number may go on in the next piece
    v.e = i
    if v.kind == V_INT and not v.big:
        v.i = -<int64_t>acc if neg else <int64_t>acc
    v.us_ip = acc
    P.pos = i
    return P_OK


cdef int _literal(Parse* P, Val* v) noexcept nogil:
    cdef const char* p = P.p
    cdef Py_ssize_t i = P.pos, n = P.n, k, m
    cdef const char* word
    cdef char c = p[i]
    if c == 116:
        word = b"true"
        m = 4
        v.kind = V_BOOL
    elif c == 102:
        word = b"false"
        m = 5
        v.kind = V_BOOL
    elif c == 110:
        word = b"null"
        m = 4
        v.kind = V_NULL
    else:
        return _bad(P, i, "not a JSON value")
    for k in range(m):
        if i + k >= n:
            return P_INCOMPLETE
        if p[i + k] != word[k]:
            return _bad(P, i + k, "not a JSON value")
    v.s = i
    v.e = i + m
    P.pos = i + m
    return P_OK


cdef inline int _member_key(Parse* P, Val* key) noexcept nogil:
    """A member's key at P.pos and its ':' (P.pos after them and the whitespace)."""
    cdef int r
    if P.pos >= P.n:
        return P_INCOMPLETE
    if P.p[P.pos] != 34:
        return _bad(P, P.pos, "expected a key")
    r = _string(P, key)
    if r:
        return r
    if P.pos >= P.n or P.p[P.pos] != 58:  # (most keys are followed by ':' at once)
        _ws(P)
        if P.pos >= P.n:
            return P_INCOMPLETE
        if P.p[P.pos] != 58:
            return _bad(P, P.pos, "expected ':'")
    P.pos += 1
    _ws(P)
    return P_OK


cdef int _value(Parse* P, Val* v, int depth) noexcept nogil:
    """One JSON value at P.pos (whitespace skipped) -> v (kind and span; containers are
    validated, nothing in them kept). ``depth``: nesting of the enclosing containers."""
    cdef const char* p = P.p
    cdef char stk[MAX_DEPTH + 1]
    cdef int sp = 0, r
    cdef Val tmp
    cdef char c
    cdef bint want_value = True
    v.s = P.pos
    if P.pos >= P.n:
        return P_INCOMPLETE
    c = p[P.pos]
    if c == 34:
        return _string(P, v)
    if c == 45 or _digit(c):
        return _number(P, v)
    if c != 123 and c != 91:
        return _literal(P, v)
    v.kind = V_OBJ if c == 123 else V_ARR
    while True:
        if want_value:
            if P.pos >= P.n:
                return P_INCOMPLETE
            c = p[P.pos]
            if c == 123 or c == 91:
                if depth + sp + 1 > MAX_DEPTH:
                    P.err = E_DEEP
                    P.at = P.pos
                    return P_FAIL
                stk[sp] = c
                sp += 1
                P.pos += 1
                _ws(P)
                if P.pos >= P.n:
                    return P_INCOMPLETE
                if p[P.pos] == c + 2:  # empty: '{' + 2 is '}', '[' + 2 is ']'
                    P.pos += 1
                    sp -= 1
                    want_value = False
                    if sp == 0:
                        break
                    continue
                if c == 123:
                    r = _member_key(P, &tmp)
                    if r:
                        return r
                continue
            if c == 34:
                r = _string(P, &tmp)
            elif c == 45 or _digit(c):
                r = _number(P, &tmp)
            else:
                r = _literal(P, &tmp)
            if r:
                return r
            want_value = False
            continue
        # after a value inside a container
        _ws(P)
        if P.pos >= P.n:
            return P_INCOMPLETE
        c = p[P.pos]
        if c == 44:
            P.pos += 1
            _ws(P)
            if stk[sp - 1] == 123:
                r = _member_key(P, &tmp)
                if r:
                    return r
            want_value = True
            continue
        if (c == 125 and stk[sp - 1] == 123) or (c == 93 and stk[sp - 1] == 91):
            P.pos += 1
            sp -= 1
            if sp == 0:
                break
            continue
        return _bad(P, P.pos, "expected ',' or the end of an object/array")
    v.e = P.pos
    return P_OK


cdef inline int _val(Parse* P, Val* v, int depth) noexcept nogil:
    """_value, with strings and numbers (most values) parsed here."""
    cdef char c
    if P.pos >= P.n:
        return P_INCOMPLETE
    c = P.p[P.pos]
    if c == 34:
        return _string(P, v)
    if c == 45 or _digit(c):
        return _number(P, v)
    return _value(P, v, depth)


cdef Py_ssize_t _unescape(const char* s, Py_ssize_t n, char* out, Py_ssize_t cap) noexcept nogil:
    """The JSON string content s[:n] with its escapes decoded into out (at most cap bytes),
    its length; -1 when it does not fit, an escape is malformed or \\u names a character
    beyond ASCII (no key or category matched here has one)."""
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
                return -1
        else:
            i += 1
        if k == cap:
            return -1
        out[k] = c
        k += 1
    return k


cdef inline int _us(const char* p, Val* v, int64_t* ns, int64_t* frac) noexcept nogil:
    """_parse_us of value v (the same conditions, the same result), from what its number
    parse kept where it can: no sign, no exponent, at most 16 integer digits."""
    cdef Py_ssize_t i, fd = 0
    cdef int64_t f = 0
    if v.kind == V_STR:
        return -1
    if (v.kind != V_INT and v.kind != V_FLOAT) or p[v.s] == b'-' or v.us_fe != v.e \
            or v.us_dot - v.s > 16 or v.us_ip > <uint64_t>BIG_US:
        return _parse_us(p + v.s, v.e - v.s, ns, frac)
    for i in range(v.us_dot + 1, v.us_fe):
        if fd < 12:
            f = f * 10 + (p[i] - 48)
            fd += 1
        elif p[i] != b'0':
            return 1
    f *= POW10[12 - fd]  # 12 fraction digits: 3 of ns, 9 below
    ns[0] = <int64_t>v.us_ip * 1000 + f // 1000000000
    frac[0] = f % 1000000000
    return 0


cdef inline bint _keyish(int kd) noexcept nogil:
    """Whether a value of this kind may be an int | str | null field."""
    return kd == V_ABSENT or kd == V_NULL or kd == V_INT or kd == V_STR


cdef inline void _reset(Val* v, int n) noexcept nogil:
    cdef int k
    for k in range(n):
        v[k].kind = V_ABSENT


cdef inline bint _str_is(const char* p, Val* v, const char* lit, Py_ssize_t m) noexcept nogil:
    """Whether string value v decodes to the ASCII text lit[:m]."""
    cdef char buf[32]
    cdef Py_ssize_t n = v.e - v.s - 2, k
    if v.kind != V_STR:
        return False
    if not v.esc:
        return n == m and memcmp(p + v.s + 1, lit, m) == 0
    k = _unescape(p + v.s + 1, n, buf, 32)
    return k == m and memcmp(buf, lit, m) == 0


cdef struct Elem:
    Val top[N_TOP]
    Val args[N_ARGS]


cdef inline int _match(const char* s, Py_ssize_t n, Py_ssize_t avail, bint esc,
                       const char** keys, const uint64_t* heads,
                       const uint32_t* by_len) noexcept nogil:
    """Which of ``keys`` the key text s[:n] is (-1: none); ``avail``: the bytes readable at
    s (at least n); ``by_len[m]``: bit k set when keys[k] has m bytes; ``heads[k]``: its
    first 8 bytes (zero-filled), compared as one word."""
    cdef char buf[MAX_KEY]
    cdef int k
    cdef uint32_t cand
    cdef uint64_t head
    if esc:
        n = _unescape(s, n, buf, MAX_KEY)
        if n < 0:
            return -1
        s = buf
        avail = n
    if n >= MAX_KEY:
        return -1
    cand = by_len[n]
    if not cand:
        return -1
    head = pyt_load8(s, avail)
    if n < 8:
        head &= ((<uint64_t>1) << (8 * n)) - 1
    while cand:
        k = pyt_ctz32(cand)
        cand &= cand - 1
        if heads[k] == head and (n <= 8 or memcmp(keys[k] + 8, s + 8, n - 8) == 0):
            return k
    return -1


cdef class Scanner:
    """Feed the decompressed document in pieces (``feed``, or ``submit``/``result`` with
    ``serve`` on a helper thread); then take the columns, strings and counts."""

    cdef public Py_ssize_t n_elements
    cdef public Py_ssize_t doc_base    # document offset of the next buffer's first byte
    cdef int mode, depth, arr_state
    cdef bint in_str, esc, is_key, key_ok, key_is_te, pending_te, expect_key, seen_te
    cdef int key_match
    cdef Growable skel
    cdef Growable skel_map             # int64 pairs (offset in skeleton, offset in document)
    cdef Growable cols[N_GROUPS][N_COLS]
    cdef Py_ssize_t rows[N_GROUPS]
    cdef Growable deferred[N_GROUPS]   # int64 (column, row, string id or -1, how)
    cdef Growable times                # int64 (group, row, ts off, ts len, dur off, dur len)
    cdef Growable time_text            # the texts of deferred times
    cdef Growable counts               # int64 (class, string id, n): non-X phases, other cats
    cdef Py_ssize_t count[N_CLASSES]
    cdef Growable optext               # scratch: a cpu_op's args text
    cdef Intern strs                   # JSON string contents (names, ph, cat, pid, ...)
    cdef Intern ops                    # cpu_op args texts ("[dims,types,concrete,strides]")
    cdef Py_ssize_t last_count
    cdef Py_ssize_t elem_offset        # document offset of the element being committed
    cdef Py_ssize_t buf_n              # the length of the buffer being scanned
    cdef list cat_names                # keeps the bytes that cat_ptr points into alive
    cdef const char* cat_ptr[32]
    cdef uint64_t cat_head[32]
    cdef uint32_t cat_by_len[MAX_KEY]
    cdef int cat_class[32]
    cdef int n_cats
    cdef list key_names
    cdef const char* top_ptr[N_TOP]
    cdef uint32_t top_by_len[MAX_KEY]
    cdef uint64_t top_head[N_TOP]
    cdef const char* arg_ptr[N_ARGS]
    cdef uint32_t arg_by_len[MAX_KEY]
    cdef uint64_t arg_head[N_ARGS]
    cdef int err, err_field, err_kind
    cdef Py_ssize_t err_offset, err_index, err_elem
    cdef const char* err_what
    cdef char err_text[64]
    cdef Py_ssize_t err_text_len
    # the first problem of a flow (raised only if the flows are needed)
    cdef int flow_err, flow_err_field, flow_err_kind
    cdef const char* flow_err_what
    cdef Py_ssize_t flow_err_index, flow_err_elem
    cdef char flow_err_text[64]
    cdef Py_ssize_t flow_err_text_len
    # the helper thread (serve/submit/result/close): it never takes the GIL
    cdef pthread_mutex_t mu
    cdef pthread_cond_t cv
    cdef bint job_pending, quit, busy
    cdef const char* job_p
    cdef Py_ssize_t job_n, job_used
    cdef bint job_final
    cdef object job_buf                # keeps the submitted buffer alive
    cdef Py_ssize_t spec_base          # element mode (begin_elements): where it started; else -1

    def __cinit__(self):
        cdef int c, g
        pthread_mutex_init(&self.mu, NULL)
        pthread_cond_init(&self.cv, NULL)
        self.job_pending = self.quit = self.busy = False
        memset(&self.skel, 0, sizeof(Growable))
        memset(&self.skel_map, 0, sizeof(Growable))
        memset(self.cols, 0, sizeof(self.cols))
        memset(self.deferred, 0, sizeof(self.deferred))
        memset(&self.times, 0, sizeof(Growable))
        memset(&self.time_text, 0, sizeof(Growable))
        memset(&self.counts, 0, sizeof(Growable))
        memset(&self.optext, 0, sizeof(Growable))
        for g in range(N_GROUPS):
            self.rows[g] = 0
        for c in range(N_CLASSES):
            self.count[c] = 0
        if _intern_init(&self.strs) < 0 or _intern_init(&self.ops) < 0:
            raise MemoryError()
        self.last_count = -1
        self.n_elements = 0
        self.doc_base = 0
        self.mode = M_BEFORE
        self.depth = 0
        self.in_str = self.esc = self.is_key = self.key_ok = False
        self.key_is_te = self.pending_te = self.expect_key = self.seen_te = False
        self.key_match = 0
        self.cat_names = [name for name, _ in _CATS]
        self.n_cats = len(_CATS)
        memset(self.cat_by_len, 0, sizeof(self.cat_by_len))
        for c in range(self.n_cats):
            self.cat_ptr[c] = <const char*>self.cat_names[c]
            self.cat_by_len[len(self.cat_names[c])] |= (<uint32_t>1) << c
            self.cat_head[c] = pyt_load8(self.cat_ptr[c], len(self.cat_names[c]))
            self.cat_class[c] = _CATS[c][1]
        self.key_names = [*_TOP_KEYS, *_ARG_KEYS]
        memset(self.top_by_len, 0, sizeof(self.top_by_len))
        memset(self.arg_by_len, 0, sizeof(self.arg_by_len))
        for c in range(N_TOP):
            self.top_ptr[c] = <const char*>self.key_names[c]
            self.top_by_len[len(self.key_names[c])] |= (<uint32_t>1) << c
            self.top_head[c] = pyt_load8(self.top_ptr[c], len(self.key_names[c]))
        for c in range(N_ARGS):
            self.arg_ptr[c] = <const char*>self.key_names[N_TOP + c]
            self.arg_by_len[len(self.key_names[N_TOP + c])] |= (<uint32_t>1) << c
            self.arg_head[c] = pyt_load8(self.arg_ptr[c], len(self.key_names[N_TOP + c]))
        self.err = E_NONE
        self.flow_err = E_NONE
        self.err_offset = 0
        self.err_index = self.err_elem = -1
        self.spec_base = -1

    def __dealloc__(self):
        cdef int g, k
        pthread_cond_destroy(&self.cv)
        pthread_mutex_destroy(&self.mu)
        _release(&self.skel)
        _release(&self.skel_map)
        for g in range(N_GROUPS):
            for k in range(N_COLS):
                _release(&self.cols[g][k])
            _release(&self.deferred[g])
        _release(&self.times)
        _release(&self.time_text)
        _release(&self.counts)
        _release(&self.optext)
        _intern_free(&self.strs)
        _intern_free(&self.ops)

    # ---- results ------------------------------------------------------------------------
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

    def class_count(self, int cls):
        """How many elements of a class were seen."""
        return self.count[cls]

    def columns(self, int group, tuple names):
        """The named columns of a group as numpy arrays (each C array freed once copied)."""
        cdef Py_ssize_t n = self.rows[group]
        cdef Growable* g
        cdef int k
        self._check_idle()
        out = {}
        for name in names:
            k = COLUMNS.index(name)
            g = &self.cols[group][k]
            if g.len != n * COL_SIZE[k]:
                raise ValueError(f"group {group} has no column {name}")
            dt = np.int64 if COL_SIZE[k] == 8 else (np.int32 if COL_SIZE[k] == 4 else np.int8)
            a = np.empty(n, dtype=dt)
            if n:
                memcpy(<char*><Py_ssize_t>a.ctypes.data, g.data, n * COL_SIZE[k])
            _release(g)
            out[name] = a
        return out

    def deferred_values(self, int group):
        """The values of a group the caller resolves, as an (n, 5) array of rows (column
        number in COLUMNS, row, string id or -1 for null/absent, DEFER_KEY or DEFER_INT,
        element byte offset)."""
        cdef Growable* g = &self.deferred[group]
        a = np.frombuffer(PyBytes_FromStringAndSize(g.data, g.len), dtype=np.int64)
        _release(g)
        return a.reshape(-1, 5)

    def deferred_times(self):
        """[(group, row, ts text, dur text or None, element byte offset)] of the times the
        caller converts."""
        cdef int64_t* m = <int64_t*>self.times.data
        cdef Py_ssize_t k, j
        t = PyBytes_FromStringAndSize(self.time_text.data, self.time_text.len)
        out = []
        for k in range(self.times.len // 56):
            r = [m[7 * k + j] for j in range(7)]
            out.append((r[0], r[1], t[r[2]:r[2] + r[3]],
                        None if r[5] < 0 else t[r[4]:r[4] + r[5]], r[6]))
        return out

    def strings(self):
        """Every interned text as str, in id order (None for those never used as a name)."""
        return _intern_texts(&self.strs, True)

    def texts(self, list ids):
        """The texts of some string ids."""
        cdef Entry* e = <Entry*>self.strs.entries.data
        cdef Py_ssize_t k
        cdef const char* s
        out = []
        for k in ids:
            s = self.strs.arena.data + e[k].off
            if memchr(s, 92, e[k].len) == NULL:
                out.append(PyUnicode_DecodeUTF8(s, e[k].len, "surrogatepass"))
            else:
                out.append(json.loads(b'"' + s[:e[k].len] + b'"'))
        return out

    def op_args(self):
        """The args texts (cpu_ops', NCCL kernels'), in id order (the rows' args column is
        id + 1)."""
        cdef Entry* e = <Entry*>self.ops.entries.data
        cdef Py_ssize_t k
        return [PyUnicode_DecodeUTF8(self.ops.arena.data + e[k].off, e[k].len, NULL)
                for k in range(self.ops.count)]

    def counted(self):
        """[(class, string id, n)]: events of modelled classes that are not complete ('X'),
        by ph; cat-less non-metadata events by ph; other categories by cat (string id -1:
        no ph)."""
        cdef int64_t* m = <int64_t*>self.counts.data
        cdef Py_ssize_t k
        return [(m[3 * k], m[3 * k + 1], m[3 * k + 2]) for k in range(self.counts.len // 24)]

    def flow_problem(self):
        """The first problem with a flow event, as a ScanError, or None."""
        if self.flow_err == E_NONE:
            return None
        return self._error(self.flow_err, -1, self.flow_err_index, self.flow_err_elem,
                           self.flow_err_field, self.flow_err_kind,
                           self.flow_err_text[:self.flow_err_text_len], self.flow_err_what)

    def feed(self, object buf, bint final, Py_ssize_t hi=-1):
        """Scan ``buf[:hi]`` (bytes or bytearray, without the GIL; ``hi`` -1: to the end);
        returns how many leading bytes were consumed (the rest is an incomplete element to
        pass again, followed by more data)."""
        cdef Py_ssize_t n, used
        cdef const char* p = _data(buf, &n)
        if 0 <= hi <= n:
            n = hi
        elif hi >= 0:
            raise ValueError(f"bad end {hi} of {n} bytes")
        self._check_idle()
        with nogil:
            used = self._scan(p, n, final)
        if used < 0:
            raise self._scan_error()
        return used

    # ---- scanning on a helper thread ------------------------------------------------
    # A thread that scans while the caller decompresses must not need the GIL: ``serve``
    # (the helper thread's target) releases it once and waits on a C condition variable;
    # ``submit`` hands it a buffer, ``result`` waits for its ``feed`` result, ``close``
    # ends ``serve``.

    def serve(self):
        """Scan submitted buffers until ``close`` (run it on a helper thread)."""
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
            raise RuntimeError("the scanner is busy with a submitted buffer")

    def submit(self, object buf, bint final, Py_ssize_t lo=0, Py_ssize_t hi=-1):
        """Give ``buf[lo:hi]`` (bytes or bytearray, no copy; ``hi`` -1: to the end) to the
        thread running ``serve``; returns at once. A bytearray must not change until
        ``result`` returns."""
        cdef Py_ssize_t n
        cdef const char* p = _data(buf, &n)
        self._check_idle()
        if hi < 0:
            hi = n
        if not 0 <= lo <= hi <= n:
            raise ValueError(f"bad range {lo}:{hi} of {n} bytes")
        self.job_buf = buf
        self.job_p = p + lo
        self.job_n = hi - lo
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
            raise self._scan_error()
        return self.job_used

    def close(self):
        """Make ``serve`` return (after the buffer it is scanning, if any)."""
        with nogil:
            pthread_mutex_lock(&self.mu)
            self.quit = True
            pthread_cond_broadcast(&self.cv)
            pthread_mutex_unlock(&self.mu)

    # ---- scanning traceEvents in pieces on several scanners ---------------------------
    # The loader cuts the decompressed document at guessed element boundaries (``split_point``)
    # and scans each piece from a guess on its own scanner, in "element mode"
    # (``begin_elements``: the state the sequential scan has right after a ',' between two
    # traceEvents elements), at the same time as the pieces before it. The sequential
    # scanner then takes the pieces in document order: a piece's results are ``absorb``ed
    # only when (1) the sequential scanner, having taken everything before the piece, is in
    # exactly that state at exactly the piece's first byte (mode M_ARRAY, after a ',', all
    # bytes before consumed), and (2) the piece scanned without any error, consumed every
    # byte and ended in that state again (after a ','; never having closed the array). Why
    # that equals the sequential scan, whatever the bytes (valid JSON or not, a right guess
    # or not): in M_ARRAY mode ``_scan`` is a function of (mode, arr_state) and the bytes
    # alone, elements are parsed whole (a piece boundary between elements changes nothing,
    # as the 1 MiB feed boundaries change nothing), and a commit reads the accumulated state
    # only through things ``_absorb`` translates: string ids (a piece has its own intern
    # tables, emptied per piece, whose ids are in first-occurrence order; interning them
    # into the sequential tables in id order gives the ids the sequential scan gives, and
    # their "used as a name" flags are or-ed), row numbers (offset), element numbers
    # (offset), ``counts`` (merged in order), and the first flow problem (which stops the
    # flow rows: a piece with flow events after one is refused). A wrong guess (inside a
    # string, inside args' nested arrays, before traceEvents) makes the piece fail (2) or the
    # piece after it fail (1); so does any error: the piece is then scanned sequentially,
    # which reports the error exactly as a sequential load does. (A proper suffix of an
    # object that starts at an inner '{' has more closing than opening brackets, so it cannot
    # parse as complete elements up to the next boundary; either way (1) decides, not this.)

    def begin_elements(self, Py_ssize_t base):
        """Forget everything and scan from document offset ``base`` in element mode (as if
        right after a ',' between two traceEvents elements; see ``absorb``)."""
        cdef int g, k
        self._check_idle()
        for g in range(N_GROUPS):
            for k in range(N_COLS):
                self.cols[g][k].len = 0
            self.deferred[g].len = 0
            self.rows[g] = 0
        self.times.len = self.time_text.len = self.counts.len = 0
        self.skel.len = self.skel_map.len = 0
        for k in range(N_CLASSES):
            self.count[k] = 0
        _intern_clear(&self.strs)
        _intern_clear(&self.ops)
        self.last_count = -1
        self.n_elements = 0
        self.doc_base = self.spec_base = base
        self.mode = M_ARRAY
        self.arr_state = S_COMMA
        self.depth = 2
        self.in_str = self.esc = self.is_key = self.key_ok = False
        self.key_is_te = self.pending_te = self.expect_key = False
        self.seen_te = True
        self.err = self.flow_err = E_NONE

    def absorb(self, Scanner other, Py_ssize_t end):
        """Append the results of ``other`` (scanned in element mode from this scanner's
        current offset up to document offset ``end``) as if this scanner had scanned those
        bytes itself; False (nothing changed) when that cannot be proved (see above)."""
        cdef int r
        self._check_idle()
        other._check_idle()
        if not (self.mode == M_ARRAY and self.arr_state == S_COMMA and self.err == E_NONE
                and other.spec_base >= 0 and other.spec_base == self.doc_base
                and other.doc_base == end and other.err == E_NONE
                and other.mode == M_ARRAY and other.arr_state == S_COMMA):
            return False
        if self.flow_err != E_NONE and other.count[C_FLOW] > 0:
            return False  # the sequential scan keeps no flow rows after its first problem
        with nogil:
            r = self._absorb(other)
        if r < 0:
            raise MemoryError()
        other.spec_base = -1  # absorbed once
        return True

    cdef int _absorb(self, Scanner o) noexcept nogil:
        cdef Py_ssize_t ns = o.strs.count, no = o.ops.count, k, j, n, m, base
        cdef int g, c
        cdef int* smap = <int*>malloc((ns + 1) * sizeof(int))
        cdef int* omap = <int*>malloc((no + 1) * sizeof(int))
        cdef Entry* e
        cdef Py_ssize_t sid
        cdef Growable* src
        cdef Growable* dst
        cdef int64_t* s64
        cdef int64_t* d64
        cdef int* s32
        cdef int* d32
        cdef int64_t* rec
        cdef int64_t* cm
        cdef int64_t row_base[N_GROUPS]
        if smap == NULL or omap == NULL:
            free(smap)
            free(omap)
            return -1
        e = <Entry*>o.strs.entries.data
        for k in range(ns):
            sid = _intern_h(&self.strs, o.strs.arena.data + e[k].off, e[k].len, e[k].hash,
                            o.strs.used.data[k])
            if sid < 0:
                free(smap)
                free(omap)
                return -1
            smap[k] = <int>sid
        e = <Entry*>o.ops.entries.data
        for k in range(no):
            sid = _intern_h(&self.ops, o.ops.arena.data + e[k].off, e[k].len, e[k].hash, True)
            if sid < 0:
                free(smap)
                free(omap)
                return -1
            omap[k] = <int>sid
        for g in range(N_GROUPS):
            row_base[g] = self.rows[g]
            n = o.rows[g]
            for c in range(N_COLS):
                src = &o.cols[g][c]
                if src.len == 0:
                    continue
                dst = &self.cols[g][c]
                if _reserve(dst, src.len) < 0:
                    free(smap)
                    free(omap)
                    return -1
                if c == K_INDEX:
                    s64 = <int64_t*>src.data
                    d64 = <int64_t*>(dst.data + dst.len)
                    for j in range(n):
                        d64[j] = s64[j] + self.n_elements
                elif c == K_NAME or c == K_ARGS:
                    s32 = <int*>src.data
                    d32 = <int*>(dst.data + dst.len)
                    if c == K_NAME or g == G_META:  # string ids (or -1)
                        for j in range(n):
                            d32[j] = smap[s32[j]] if s32[j] >= 0 else s32[j]
                    else:  # args texts: 1 + id, 0 none
                        for j in range(n):
                            d32[j] = omap[s32[j] - 1] + 1 if s32[j] > 0 else s32[j]
                else:
                    memcpy(dst.data + dst.len, src.data, src.len)
                dst.len += src.len
                src.len = 0
            src = &o.deferred[g]
            dst = &self.deferred[g]
            m = dst.len
            if src.len and _append(dst, src.data, src.len) < 0:
                free(smap)
                free(omap)
                return -1
            rec = <int64_t*>(dst.data + m)
            for j in range(src.len // 40):
                rec[5 * j + 1] += row_base[g]
                if rec[5 * j + 2] >= 0:
                    rec[5 * j + 2] = smap[rec[5 * j + 2]]
            src.len = 0
        base = self.time_text.len
        if o.time_text.len and _append(&self.time_text, o.time_text.data, o.time_text.len) < 0:
            free(smap)
            free(omap)
            return -1
        m = self.times.len
        if o.times.len and _append(&self.times, o.times.data, o.times.len) < 0:
            free(smap)
            free(omap)
            return -1
        rec = <int64_t*>(self.times.data + m)
        for j in range(o.times.len // 56):
            rec[7 * j + 1] += row_base[rec[7 * j]]
            rec[7 * j + 2] += base
            rec[7 * j + 4] += base
        rec = <int64_t*>o.counts.data
        for j in range(o.counts.len // 24):
            cm = <int64_t*>self.counts.data
            sid = smap[rec[3 * j + 1]] if rec[3 * j + 1] >= 0 else -1
            for k in range(self.counts.len // 24):
                if cm[3 * k] == rec[3 * j] and cm[3 * k + 1] == sid:
                    cm[3 * k + 2] += rec[3 * j + 2]
                    break
            else:
                if self._count(<int>rec[3 * j], sid) < 0:
                    free(smap)
                    free(omap)
                    return -1
                cm = <int64_t*>self.counts.data
                cm[self.counts.len // 8 - 1] = rec[3 * j + 2]
        free(smap)
        free(omap)
        for c in range(N_CLASSES):
            self.count[c] += o.count[c]
        if self.flow_err == E_NONE and o.flow_err != E_NONE:
            self.flow_err = o.flow_err
            self.flow_err_field = o.flow_err_field
            self.flow_err_kind = o.flow_err_kind
            self.flow_err_what = o.flow_err_what
            self.flow_err_index = o.flow_err_index + self.n_elements
            self.flow_err_elem = o.flow_err_elem
            memcpy(self.flow_err_text, o.flow_err_text, o.flow_err_text_len)
            self.flow_err_text_len = o.flow_err_text_len
        for g in range(N_GROUPS):
            self.rows[g] += o.rows[g]
        self.n_elements += o.n_elements
        self.doc_base = o.doc_base
        o.times.len = o.time_text.len = o.counts.len = 0
        return 0

    # ---- errors ---------------------------------------------------------------------
    cdef object _scan_error(self):
        return self._error(self.err, self.err_offset, self.err_index, self.err_elem,
                           self.err_field, self.err_kind, self.err_text[:self.err_text_len],
                           self.err_what)

    cdef object _error(self, int e, Py_ssize_t off, Py_ssize_t idx, Py_ssize_t elem,
                       int field, int kind, bytes text, const char* what):
        msg = _MESSAGES.get(e, "invalid JSON at byte {off}: error {code}").format(
            off=off, idx=idx, prev=idx - 1, elem=elem, code=e, depth=MAX_DEPTH,
            field=FIELD_NAMES[field] if 0 <= field < len(FIELD_NAMES) else "?",
            mem_field=MEM_FIELD_NAMES[field] if 0 <= field < len(MEM_FIELD_NAMES) else "?",
            kind=_KIND_NAMES[kind], what=(<bytes>what).decode() if what != NULL else "",
            text=text.decode(errors="replace"), text40=repr(text[:40]))
        return ScanError(msg, e, off, idx, elem)

    cdef Py_ssize_t _fail(self, int code, Py_ssize_t at) noexcept nogil:
        self.err = code
        self.err_offset = self.doc_base + at
        self.err_index = self.n_elements
        return -1

    cdef int _efail(self, int code, int field, int kind, const char* what, const char* p,
                    Val* v, Py_ssize_t elem) noexcept nogil:
        """An event's problem (its field, its value's kind, its text)."""
        cdef Py_ssize_t m = 0
        self.err = code
        self.err_field = field
        self.err_kind = kind
        self.err_what = what
        self.err_index = self.n_elements
        self.err_elem = self.doc_base + elem
        self.err_offset = self.err_elem
        if v != NULL:
            m = v.e - v.s
            if m > 63:
                m = 63
            memcpy(self.err_text, p + v.s, m)
        self.err_text_len = m
        return -1

    cdef int _flow_fail(self, int code, int field, int kind, const char* what, const char* p,
                        Val* v, Py_ssize_t elem) noexcept nogil:
        cdef Py_ssize_t m = 0
        if self.flow_err == E_NONE:
            self.flow_err = code
            self.flow_err_what = what
            self.flow_err_field = field
            self.flow_err_kind = kind
            self.flow_err_index = self.n_elements
            self.flow_err_elem = self.doc_base + elem
            if v != NULL:
                m = v.e - v.s
                if m > 63:
                    m = 63
                memcpy(self.flow_err_text, p + v.s, m)
            self.flow_err_text_len = m
        return 0

    # ---- one element ----------------------------------------------------------------
    cdef int _parse_element(self, Parse* P, Elem* E) noexcept nogil:
        """The object at P.pos -> E (the fields kept; the rest validated and skipped)."""
        cdef int r
        _reset(E.top, N_TOP)
        r = self._members(P, E, False)
        if E.top[T_ARGS].kind == V_ABSENT:
            _reset(E.args, N_ARGS)  # (a member "args" resets them when it is seen)
        return r

    cdef int _members(self, Parse* P, Elem* E, bint args) noexcept nogil:
        """The members of the object at P.pos: those with a key of E.top (``args``: of
        E.args) into it, an object ``args`` of the top level into E.args."""
        cdef const char* p = P.p
        cdef Val key, tmp
        cdef Val* vals = &E.top[0]
        cdef int r, k
        if args:
            vals = &E.args[0]
        P.pos += 1
        _ws(P)
        if P.pos >= P.n:
            return P_INCOMPLETE
        if p[P.pos] == 125:
            P.pos += 1
            return P_OK
        while True:
            r = _member_key(P, &key)
            if r:
                return r
            if P.pos >= P.n:
                return P_INCOMPLETE
            if args:
                k = _match(p + key.s + 1, key.e - key.s - 2, P.n - key.s - 1, key.esc,
                           self.arg_ptr, self.arg_head, self.arg_by_len)
            else:
                k = _match(p + key.s + 1, key.e - key.s - 2, P.n - key.s - 1, key.esc,
                           self.top_ptr, self.top_head, self.top_by_len)
            if not args and k == T_ARGS:
                _reset(E.args, N_ARGS)  # the last args wins, as in a dict
            if not args and k == T_ARGS and p[P.pos] == 123:
                E.top[T_ARGS].kind = V_OBJ
                E.top[T_ARGS].s = P.pos
                r = self._members(P, E, True)
                E.top[T_ARGS].e = P.pos
            else:
                r = _val(P, &vals[k] if k >= 0 else &tmp, 2 if args else 1)
            if r:
                return r
            if P.pos >= P.n or p[P.pos] != 44:  # (most values are followed by ',' at once)
                _ws(P)
                if P.pos >= P.n:
                    return P_INCOMPLETE
            if p[P.pos] == 44:
                P.pos += 1
                _ws(P)
                if P.pos >= P.n:
                    return P_INCOMPLETE
                continue
            if p[P.pos] == 125:
                P.pos += 1
                return P_OK
            return _bad(P, P.pos, "expected ',' or '}'")

    cdef inline int _classify(self, const char* s, Py_ssize_t n, Py_ssize_t avail,
                              bint esc) noexcept nogil:
        """The class of a cat text s[:n] (its escapes decoded first); ``avail``: the bytes
        readable at s."""
        cdef int k = _match(s, n, avail, esc, self.cat_ptr, self.cat_head, self.cat_by_len)
        return C_OTHER if k < 0 else self.cat_class[k]

    cdef int _count(self, int cls, Py_ssize_t sid) noexcept nogil:
        cdef int64_t* m = <int64_t*>self.counts.data
        cdef Py_ssize_t k = self.last_count, n = self.counts.len // 24
        cdef int64_t rec[3]
        if k >= 0 and m[3 * k] == cls and m[3 * k + 1] == sid:
            m[3 * k + 2] += 1
            return 0
        for k in range(n):
            if m[3 * k] == cls and m[3 * k + 1] == sid:
                m[3 * k + 2] += 1
                self.last_count = k
                return 0
        rec[0] = cls
        rec[1] = sid
        rec[2] = 1
        self.last_count = n
        return _append(&self.counts, rec, 24)

    cdef inline Py_ssize_t _sid(self, const char* p, Val* v, bint name) noexcept nogil:
        """The string id of string value v (its content), or -1 when not a string."""
        if v.kind != V_STR:
            return -1
        return _intern(&self.strs, p + v.s + 1, v.e - v.s - 2, name)

    cdef int _defer(self, int group, int col, Py_ssize_t row, Py_ssize_t sid,
                    int how) noexcept nogil:
        cdef int64_t rec[5]
        rec[0] = col
        rec[1] = row
        rec[2] = sid
        rec[3] = how
        rec[4] = self.elem_offset
        return _append(&self.deferred[group], rec, 40)

    cdef int _defer_time(self, int group, Py_ssize_t row, const char* p, Val* ts,
                         Val* dur) noexcept nogil:
        cdef int64_t rec[7]
        rec[0] = group
        rec[1] = row
        rec[6] = self.elem_offset
        rec[2] = self.time_text.len
        rec[3] = ts.e - ts.s
        if _append(&self.time_text, p + ts.s, ts.e - ts.s) < 0:
            return -1
        rec[4] = self.time_text.len
        rec[5] = -1
        if dur != NULL:
            rec[5] = dur.e - dur.s
            if _append(&self.time_text, p + dur.s, dur.e - dur.s) < 0:
                return -1
        return _append(&self.times, rec, 56)

    cdef inline int _put64(self, int group, int col, int64_t v) noexcept nogil:
        return _push64(&self.cols[group][col], v)

    cdef inline int _put32(self, int group, int col, int v) noexcept nogil:
        return _append(&self.cols[group][col], &v, 4)

    cdef inline int _put8(self, int group, int col, signed char v) noexcept nogil:
        return _append(&self.cols[group][col], &v, 1)

    cdef int _key(self, int group, int col, Py_ssize_t row, const char* p, Val* v,
                  int field, Py_ssize_t elem) noexcept nogil:
        """pid/tid: an integer as it is; a string or null resolved later (DEFER_KEY)."""
        cdef Py_ssize_t sid = -1
        if v.kind == V_INT:
            if v.big:
                return self._efail(E_BIG, field, 0, NULL, p, v, elem)
            return self._put64(group, col, v.i)
        if v.kind == V_STR:
            sid = self._sid(p, v, False)
            if sid < 0:
                return -1
        if self._defer(group, col, row, sid, D_KEY) < 0:
            return -1
        return self._put64(group, col, 0)

    cdef int _pid_tid(self, int group, Py_ssize_t row, const char* p, Elem* E,
                      Py_ssize_t elem) noexcept nogil:
        if self._key(group, K_PID, row, p, &E.top[T_PID], T_PID, elem) < 0:
            return -1
        return self._key(group, K_TID, row, p, &E.top[T_TID], T_TID, elem)

    cdef int _opt(self, int group, int col, Py_ssize_t row, const char* p, Val* v,
                  int field, Py_ssize_t elem) noexcept nogil:
        """An args integer: -1 when absent or null; a string resolved later (DEFER_INT)."""
        cdef Py_ssize_t sid
        if v.kind == V_INT:
            if v.big:
                return self._efail(E_BIG, field, 0, NULL, p, v, elem)
            return self._put64(group, col, v.i)
        if v.kind == V_STR:
            sid = self._sid(p, v, False)
            if sid < 0 or self._defer(group, col, row, sid, D_INT) < 0:
                return -1
        return self._put64(group, col, -1)

    cdef int _check_types(self, int cls, const char* p, Elem* E, Py_ssize_t elem) noexcept nogil:
        """The field types the loader requires (0, or -1 with the problem set)."""
        cdef int k, f, kd
        kd = E.top[T_PH].kind
        if kd != V_ABSENT and kd != V_STR:
            return self._efail(E_TYPE, T_PH, kd, b"str", p, NULL, elem)
        kd = E.top[T_NAME].kind
        if kd != V_ABSENT and kd != V_STR:
            return self._efail(E_TYPE, T_NAME, kd, b"str", p, NULL, elem)
        for f in range(T_PID, T_TID + 1):
            kd = E.top[f].kind
            if not _keyish(kd):
                return self._efail(E_TYPE, f, kd, b"int | str | null", p, NULL, elem)
        if cls == C_PYTHON:
            return 0  # its args are not read
        kd = E.top[T_ARGS].kind
        if kd != V_ABSENT and kd != V_NULL and kd != V_OBJ:
            return self._efail(E_TYPE, T_ARGS, kd, b"object | null", p, NULL, elem)
        if cls <= C_ANNOTATION and kd == V_OBJ:
            for k in range(A_CORR, A_SIZE + 1):
                kd = E.args[k].kind
                if not _keyish(kd):
                    return self._efail(E_TYPE, N_TOP + k, kd, b"int | str | null", p, NULL,
                                       elem)
        return 0

    cdef int _times(self, int group, Py_ssize_t row, const char* p, Elem* E, bint instant,
                    Py_ssize_t elem, int64_t* start, int64_t* end) noexcept nogil:
        """Exact start/end ns of an event into start/end; 1 when deferred (the caller
        converts it), -1 on a problem."""
        cdef Val* ts = &E.top[T_TS]
        cdef Val* dur = &E.top[T_DUR]
        cdef int64_t a = 0, fa = 0, b = 0, fb = 0
        cdef int r1, r2 = 0
        if ts.kind == V_ABSENT:
            return self._efail(E_NO_TS, T_TS, 0, NULL, p, NULL, elem)
        if not instant and dur.kind == V_ABSENT:
            return self._efail(E_NO_DUR, T_DUR, 0, NULL, p, NULL, elem)
        r1 = _us(p, ts, &a, &fa)
        if not instant:
            r2 = _us(p, dur, &b, &fb)
        if r1 < 0:
            return self._efail(E_TS_NAN, T_TS, 0, NULL, p, ts, elem)
        if r2 < 0:
            return self._efail(E_DUR_NAN, T_DUR, 0, NULL, p, dur, elem)
        if r1 or r2:
            if self._defer_time(group, row, p, ts, NULL if instant else dur) < 0:
                return -1
            start[0] = end[0] = 0
            return 1
        start[0] = _round(a, fa)
        if instant:
            end[0] = start[0]
            return 0
        end[0] = _end_ns(a, fa, b, fb)
        if end[0] < start[0]:
            return self._efail(E_NEG_DUR, T_DUR, 0, NULL, p, dur, elem)
        return 0

    cdef int _commit(self, const char* p, Elem* E, Py_ssize_t elem) noexcept nogil:
        """Write one parsed element into its columns (0), or set the problem (-1)."""
        cdef int cls, group, r, k
        cdef Val* cat = &E.top[T_CAT]
        cdef Val* v
        cdef Py_ssize_t row, sid
        cdef int64_t start = 0, end = 0
        self.elem_offset = self.doc_base + elem
        if cat.kind == V_STR:
            cls = self._classify(p + cat.s + 1, cat.e - cat.s - 2, self.buf_n - cat.s - 1,
                                 cat.esc)
        else:
            cls = C_NOCAT
        self.count[cls] += 1
        if cls == C_NOCAT or cls == C_OTHER:
            if cls == C_NOCAT and self._check_types(C_NOCAT, p, E, elem) < 0:
                return -1
            if _str_is(p, &E.top[T_NAME], b"[memory]", 8):
                return self._memory(p, E, elem)
            if cls == C_OTHER:
                sid = self._sid(p, cat, False)
                return -1 if sid < 0 else self._count(C_OTHER, sid)
            if _str_is(p, &E.top[T_PH], b"M", 1):
                return self._meta(p, E, elem)
            return self._count_ph(C_NOCAT, p, E)
        if cls == C_GPU_ANNOTATION:
            return 0
        if cls == C_FLOW:
            return self._flow(p, E, elem)
        if self._check_types(cls, p, E, elem) < 0:
            return -1
        if not _str_is(p, &E.top[T_PH], b"X", 1):
            return self._count_ph(cls, p, E)
        group = GROUP_OF[cls]
        row = self.rows[group]
        r = self._times(group, row, p, E, False, elem, &start, &end)
        if r < 0:
            return -1
        if self._put64(group, K_START, start) < 0 or self._put64(group, K_END, end) < 0:
            return -1
        v = &E.top[T_NAME]
        sid = self._sid(p, v, True) if v.kind == V_STR else _intern(&self.strs, b"", 0, True)
        if sid < 0 or self._put32(group, K_NAME, <int>sid) < 0:
            return -1
        if self._put8(group, K_CAT, <signed char>cls) < 0:
            return -1
        if self._pid_tid(group, row, p, E, elem) < 0:
            return -1
        if self._put64(group, K_INDEX, self.n_elements) < 0:
            return -1
        if group == G_HOST:
            sid = self._args_text(p, E, A_DIMS, A_STRIDES) if cls == C_CPU_OP else 0
            if sid < 0 or self._put32(group, K_ARGS, <int>sid) < 0:
                return -1
            if cls != C_CPU_OP:  # a python_function's args are not read
                if self._put64(group, K_EXT, -1) < 0:
                    return -1
            elif self._opt(group, K_EXT, row, p, &E.args[A_EXT], N_TOP + A_EXT, elem) < 0:
                return -1
        else:
            if group == G_GPU:
                sid = self._args_text(p, E, A_COLL, A_GROUP) if cls == C_KERNEL else 0
                if sid < 0 or self._put32(group, K_ARGS, <int>sid) < 0:
                    return -1
            if self._opt(group, K_CORR, row, p, &E.args[A_CORR], N_TOP + A_CORR, elem) < 0:
                return -1
            if self._opt(group, K_DEV, row, p, &E.args[A_DEVICE], N_TOP + A_DEVICE, elem) < 0:
                return -1
            if self._opt(group, K_STREAM, row, p, &E.args[A_STREAM], N_TOP + A_STREAM,
                         elem) < 0:
                return -1
            k = A_BYTES
            if E.args[A_BYTES].kind == V_ABSENT or E.args[A_BYTES].kind == V_NULL:
                k = A_SIZE
            if self._opt(group, K_BYTES, row, p, &E.args[k], N_TOP + k, elem) < 0:
                return -1
            if group == G_GPU and self._opt(group, K_A, row, p, &E.args[A_GRAPH_NODE],
                                            N_TOP + A_GRAPH_NODE, elem) < 0:
                return -1
            if group == G_API:
                k = A_EXT if E.args[A_EXT].kind != V_ABSENT else A_EXT_2021
            if group == G_API and (
                self._opt(group, K_A, row, p, &E.args[A_WAIT_STREAM], N_TOP + A_WAIT_STREAM,
                          elem) < 0
                or self._opt(group, K_B, row, p, &E.args[A_WAIT_RECORD], N_TOP + A_WAIT_RECORD,
                             elem) < 0
                or self._opt(group, K_EXT, row, p, &E.args[k], N_TOP + k, elem) < 0
            ):
                return -1
        self.rows[group] += 1
        return 0

    cdef int _count_ph(self, int cls, const char* p, Elem* E) noexcept nogil:
        cdef Py_ssize_t sid = -1
        if E.top[T_PH].kind == V_STR:
            sid = self._sid(p, &E.top[T_PH], False)
            if sid < 0:
                return -1
        return self._count(cls, sid)

    cdef Py_ssize_t _args_text(self, const char* p, Elem* E, int first, int last) noexcept nogil:
        """1 + the id of the JSON text "[v_first,...,v_last]" of args first..last (absent
        ones null): a cpu_op's [Input Dims,Input type,Concrete Inputs,Input Strides], an
        NCCL kernel's [Collective name,In/Out msg nelems,dtype,Group size]; 0 when it has
        none of them."""
        cdef Growable* g = &self.optext
        cdef Val* v
        cdef int k
        cdef bint some = False
        cdef Py_ssize_t sid
        if E.top[T_ARGS].kind != V_OBJ:
            return 0
        for k in range(first, last + 1):
            if E.args[k].kind != V_ABSENT:
                some = True
        if not some:
            return 0
        g.len = 0
        if _append(g, b"[", 1) < 0:
            return -1
        for k in range(first, last + 1):
            v = &E.args[k]
            if k > first and _append(g, b",", 1) < 0:
                return -1
            if v.kind == V_ABSENT:
                if _append(g, b"null", 4) < 0:
                    return -1
            elif _append(g, p + v.s, v.e - v.s) < 0:
                return -1
        if _append(g, b"]", 1) < 0:
            return -1
        sid = _intern(&self.ops, g.data, g.len, True)
        return -1 if sid < 0 else sid + 1

    cdef int _flow(self, const char* p, Elem* E, Py_ssize_t elem) noexcept nogil:
        """A flow's row (phase, id, pid, tid, ts); a problem with one is kept for later:
        flows are read only when some GPU op or API call lacks args.correlation."""
        cdef signed char phase
        cdef int kd, f
        cdef Py_ssize_t row = self.rows[G_FLOW]
        cdef int64_t start = 0, end = 0
        cdef int r
        if self.flow_err != E_NONE:
            return 0
        kd = E.top[T_PH].kind
        if kd != V_ABSENT and kd != V_STR:
            return self._flow_fail(E_TYPE, T_PH, kd, b"str", p, NULL, elem)
        for f in range(T_PID, T_ID + 1):  # pid, tid, ts, dur, id
            kd = E.top[f].kind
            if f == T_TS or f == T_DUR:
                continue
            if not _keyish(kd):
                return self._flow_fail(E_TYPE, f, kd, b"int | str | null", p, NULL, elem)
            if kd == V_INT and E.top[f].big:
                return self._flow_fail(E_BIG, f, 0, NULL, p, &E.top[f], elem)
        if _str_is(p, &E.top[T_PH], b"s", 1):
            phase = 0
        elif _str_is(p, &E.top[T_PH], b"f", 1):
            phase = 1
        else:
            return 0
        # a problem with the time is the flows' too (the error slot is restored)
        r = self._times(G_FLOW, row, p, E, True, elem, &start, &end)
        if r < 0:
            self._flow_fail(self.err, self.err_field, 0, NULL, p, NULL, elem)
            memcpy(self.flow_err_text, self.err_text, self.err_text_len)
            self.flow_err_text_len = self.err_text_len
            self.err = E_NONE
            return 0
        if self._put64(G_FLOW, K_START, start) < 0 or self._put8(G_FLOW, K_CAT, phase) < 0:
            return -1
        if self._put64(G_FLOW, K_INDEX, self.n_elements) < 0:
            return -1
        if self._opt(G_FLOW, K_CORR, row, p, &E.top[T_ID], T_ID, elem) < 0:
            return -1
        if self._pid_tid(G_FLOW, row, p, E, elem) < 0:
            return -1
        self.rows[G_FLOW] += 1
        return 0

    cdef int _memory(self, const char* p, Elem* E, Py_ssize_t elem) noexcept nogil:
        """A [memory] instant event (profile_memory=True): its row, or the problem."""
        cdef int k, kd, f
        cdef Py_ssize_t row = self.rows[G_MEM]
        cdef int64_t start = 0, end = 0
        cdef Val* v
        for f in range(T_PID, T_TID + 1):
            kd = E.top[f].kind
            if not _keyish(kd):
                return self._efail(E_TYPE, f, kd, b"int | str | null", p, NULL, elem)
        if E.top[T_ARGS].kind != V_OBJ or E.top[T_TS].kind == V_ABSENT:
            return self._efail(E_MEM_ARGS, T_ARGS, 0, NULL, p, NULL, elem)
        for k in range(6):
            kd = E.args[MEM_FIELDS[k]].kind
            if kd == V_BOOL or kd == V_OBJ or kd == V_ARR:
                return self._efail(E_MEM_ARGS, T_ARGS, 0, NULL, p, NULL, elem)
        kd = E.args[A_MEM_BYTES].kind
        if kd == V_ABSENT or kd == V_NULL:
            return self._efail(E_MEM_ARGS, T_ARGS, 0, NULL, p, NULL, elem)
        for k in range(6):
            v = &E.args[MEM_FIELDS[k]]
            if v.kind != V_ABSENT and v.kind != V_INT:
                return self._efail(E_MEM_NOT_INT, k, 0, NULL, p, NULL, elem)
            if v.kind == V_INT and v.big:
                return self._efail(E_BIG, N_TOP + MEM_FIELDS[k], 0, NULL, p, v, elem)
        if self._times(G_MEM, row, p, E, True, elem, &start, &end) < 0:
            return -1
        if self._put64(G_MEM, K_START, start) < 0:
            return -1
        if self._put64(G_MEM, K_INDEX, self.n_elements) < 0:
            return -1
        for k in range(6):
            v = &E.args[MEM_FIELDS[k]]
            if self._put64(G_MEM, MEM_COLS[k], v.i if v.kind == V_INT else -1) < 0:
                return -1
        if self._pid_tid(G_MEM, row, p, E, elem) < 0:
            return -1
        self.rows[G_MEM] += 1
        return 0

    cdef int _meta(self, const char* p, Elem* E, Py_ssize_t elem) noexcept nogil:
        """An 'M' event (process_name, thread_name, ...): its name, pid, tid, args.name."""
        cdef Py_ssize_t row = self.rows[G_META], sid
        cdef Val* v = &E.top[T_NAME]
        sid = self._sid(p, v, False) if v.kind == V_STR else _intern(&self.strs, b"", 0, False)
        if sid < 0 or self._put32(G_META, K_NAME, <int>sid) < 0:
            return -1
        sid = -1
        if E.top[T_ARGS].kind == V_OBJ and E.args[A_NAME].kind == V_STR:
            sid = self._sid(p, &E.args[A_NAME], False)
            if sid < 0:
                return -1
        if self._put32(G_META, K_ARGS, <int>sid) < 0:
            return -1
        if self._pid_tid(G_META, row, p, E, elem) < 0:
            return -1
        self.rows[G_META] += 1
        return 0

    # ---- the document ---------------------------------------------------------------
    cdef int _skel_add(self, const char* p, Py_ssize_t start, Py_ssize_t end) noexcept nogil:
        cdef int64_t m[2]
        if end <= start:
            return 0
        m[0] = self.skel.len
        m[1] = self.doc_base + start
        if _append(&self.skel_map, m, sizeof(m)) < 0:
            return -1
        return _append(&self.skel, p + start, end - start)

    cdef Py_ssize_t _scan(self, const char* p, Py_ssize_t n, bint final) noexcept nogil:
        cdef Py_ssize_t i = 0, skel_from = 0, elem_start = 0
        cdef char c
        cdef bint incomplete = False
        cdef int r
        cdef Parse P
        cdef Elem E
        cdef Py_ssize_t consumed
        P.p = p
        P.n = n
        self.buf_n = n
        while i < n:
            c = p[i]
            if self.mode == M_ARRAY:
                if c == b' ' or c == b'\n' or c == b'\r' or c == b'\t':
                    pass
                elif c == b'{':
                    if self.arr_state == S_ELEM:
                        return self._fail(E_MISSING_COMMA, i)
                    elem_start = i
                    P.pos = i
                    P.err = E_NONE
                    P.what = NULL
                    r = self._parse_element(&P, &E)
                    if r == P_INCOMPLETE:
                        incomplete = True
                        break
                    if r == P_FAIL:
                        self.err_elem = self.doc_base + elem_start
                        self.err_what = P.what
                        return self._fail(P.err, P.at)
                    if self._commit(p, &E, elem_start) < 0:
                        return -1 if self.err else self._fail(E_NOMEM, i)
                    self.n_elements += 1
                    self.arr_state = S_ELEM
                    i = P.pos
                    continue
                elif c == b',':
                    if self.arr_state != S_ELEM:
                        return self._fail(E_BAD_COMMA, i)
                    self.arr_state = S_COMMA
                elif c == b']':
                    if self.arr_state == S_COMMA:
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
                    self.arr_state = S_OPEN
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


cdef inline bint _is_ws(char c) noexcept nogil:
    return c == b' ' or c == b'\n' or c == b'\r' or c == b'\t'


def split_point(object data, Py_ssize_t lo=1, Py_ssize_t hi=-1):
    """The last guessed element boundary in ``data[lo:hi]`` (bytes or bytearray; ``hi``
    -1: to the end), or -1: the offset just after a raw newline whose nearest
    non-whitespace bytes are a ',' before it and a '{' after it (Kineto writes
    ``  },\n  {``). In valid JSON no raw newline is inside a string, so such
    a place is between two values; whether it is between two traceEvents elements is only
    a guess, which ``Scanner.absorb`` verifies."""
    cdef Py_ssize_t n, j, k, m, found = -1
    cdef const char* p = _data(data, &n)
    if hi < 0 or hi > n:
        hi = n
    n = hi
    if lo < 0:
        lo = 0
    if lo >= n or memchr(p + lo, 10, n - lo) == NULL:
        return -1
    with nogil:
        j = hi - 1
        while j >= lo:
            if p[j] != b'\n':
                j -= 1
                continue
            k = j + 1
            while k < n and _is_ws(p[k]):
                k += 1
            m = j - 1
            while m >= lo and _is_ws(p[m]):
                m -= 1
            if k < n and p[k] == b'{' and m >= lo and p[m] == b',':
                found = j + 1
                break
            # every newline in the whitespace run around j has the same neighbours
            j = m - 1
    return found


def check_json(bytes data):
    """None when ``data`` is one valid JSON value (whitespace around it allowed), else
    (byte offset, problem)."""
    cdef Parse P
    cdef Val v
    cdef int r
    P.p = PyBytes_AS_STRING(data)
    P.n = len(data)
    P.pos = 0
    P.err = E_NONE
    P.what = NULL
    _ws(&P)
    r = _value(&P, &v, 0)
    if r == P_INCOMPLETE:
        return len(data), "the document ends early"
    if r == P_FAIL:
        if P.err == E_DEEP:
            return P.at, f"nested deeper than {MAX_DEPTH} levels"
        if P.err == E_UTF8:
            return P.at, "not valid UTF-8"
        return P.at, (<bytes>P.what).decode()
    _ws(&P)
    if P.pos != P.n:
        return P.pos, "data after the value"
    return None
