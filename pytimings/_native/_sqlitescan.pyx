# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3, binding=True, autotestdict=False, auto_pickle=False
"""Rowid-table b-trees of an SQLite file -> numpy columns, without sqlite3_step.

The reference is the file-format description at https://www.sqlite.org/fileformat2.html
(sections 1.6 "B-tree Pages", 2.1 "Record Format"). The file is read-only and is read in
two passes, both without the GIL:

1. Walk the interior pages (type 0x05) depth first in key order and list the leaf pages
   (type 0x0D) with their cell counts, so every output is allocated once at its exact size.
2. Decode each leaf cell: payload size and rowid varints, the record header (serial types)
   up to the last requested column, and the requested values. A payload that spills onto
   overflow pages is first gathered into a scratch buffer.

Every read is bounds-checked against its page (the usable part) and the file: a corrupt or
hostile file raises ValueError("page N: ...") and never reads outside the buffer nor past a
page's usable part (tests/unit/test_sqlitescan_asan.py checks this under AddressSanitizer).
Every page is used once: a b-tree that loops, or an overflow chain that loops, shares a page
with another chain or the b-tree, or has more or fewer pages than its payload needs
(ceil(spilled bytes / (usable - 4))), is an error too, not garbage. Every page's cells
must lie in its cell content area without overlapping (a cell pointed at twice would be a
duplicate row, and many pointers at one large cell a blow-up of the output), and its cells,
free blocks and fragmented bytes must fill that area exactly (a cell whose pointer is lost
would otherwise vanish uncounted): the bookkeeping ``PRAGMA integrity_check`` verifies. A
non-root leaf without cells is refused, as SQLite does.

A file truncated while it is scanned through an mmap faults with SIGBUS when a page past
its new end is touched: each pass runs under a SIGBUS guard (a handler that jumps back out
of the pass on this thread; a fault elsewhere goes to the handler there was before) and
becomes ValueError("... file was truncated while it was read"). A file rewritten in place
is caught by the checks above or by the caller comparing the file's identity afterwards.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyObject_GetBuffer, PyBuffer_Release
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcpy, memset

import numpy as np

# column kinds; a mask byte is MASK_VALUE, MASK_NULL or MASK_ABSENT (past the record's end)
cdef enum:
    K_INT = 0
    K_FLOAT = 1
    K_BYTES = 2
    MAX_DEPTH = 64     # SQLite itself gives up at 20 levels
    MAX_COLUMN = 32767  # SQLite's hard limit on columns in a table
    M_VALUE = 0
    M_NULL = 1
    M_ABSENT = 2

MASK_VALUE = M_VALUE
MASK_NULL = M_NULL
MASK_ABSENT = M_ABSENT

# error codes; the message templates are in _MESSAGES (indexed by code)
cdef enum:
    E_PAGE_NUMBER = 1
    E_PAGE_TYPE
    E_CELL_COUNT
    E_CELL_POINTER
    E_CELL
    E_VARINT
    E_PAYLOAD_SIZE
    E_HEADER
    E_SERIAL
    E_VALUE
    E_OVERFLOW_SHORT
    E_OVERFLOW_LONG
    E_DEPTH
    E_LOOP
    E_CHANGED
    E_NOMEM
    E_TYPE_INT
    E_TYPE_FLOAT
    E_TYPE_BYTES
    E_OVERFLOW_TWICE
    E_EMPTY_LEAF
    E_CONTENT
    E_OVERLAP
    E_FREEBLOCK
    E_ACCOUNT
    E_SIGBUS
    E_CONTENT_START

_MESSAGES = {
    E_PAGE_NUMBER: "page {page}: child or overflow page number {a} out of range",
    E_PAGE_TYPE: "page {page}: not a table b-tree page (type byte {a})",
    E_CELL_COUNT: "page {page}: cell count {a} does not fit the page",
    E_CELL_POINTER: "page {page}: cell pointer {a} out of range",
    E_CELL: "page {page}: cell at {a} runs off the page",
    E_VARINT: "page {page}: varint runs off the page",
    E_PAYLOAD_SIZE: "page {page}: payload size larger than the file",
    E_HEADER: "page {page}: record header size {a} out of range",
    E_SERIAL: "page {page}: reserved serial type {a}",
    E_VALUE: "page {page}: record value runs past the payload",
    E_OVERFLOW_SHORT: "page {page}: overflow chain too short",
    E_OVERFLOW_LONG: "page {page}: overflow chain too long",
    E_DEPTH: "page {page}: b-tree deeper than 64 levels",
    E_LOOP: "page {page}: child page {a} is already in the b-tree (a loop or shared subtree)",
    E_CHANGED: "page {page}: file changed during the scan",
    E_NOMEM: "out of memory",
    E_TYPE_INT: "column {a}, rowid {b}: {what} value in an integer column",
    E_TYPE_FLOAT: "column {a}, rowid {b}: {what} value in a float column",
    E_TYPE_BYTES: "column {a}, rowid {b}: {what} value in a text/blob column",
    E_OVERFLOW_TWICE: "page {page}: overflow page {a} is already in use (a loop or shared page)",
    E_EMPTY_LEAF: "page {page}: a leaf page without cells below the root (SQLite: malformed)",
    E_CONTENT: "page {page}: cell at {a} is outside the cell content area",
    E_OVERLAP: "page {page}: cell at {a} overlaps another cell (a cell used twice)",
    E_FREEBLOCK: "page {page}: free block at {a} is out of order or off the page",
    E_ACCOUNT: "page {page}: cells, free blocks and fragments cover {a} bytes of its {b}-byte "
               "content area (a cell lost or overlapping)",
    E_SIGBUS: "the file was truncated while it was read (SIGBUS)",
    E_CONTENT_START: "page {page}: cell content area start {a} is inside the header or past "
                     "the page",
}


cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* big-endian integer of serial type t (1..6) at p: 1, 2, 3, 4, 6 or 8 bytes, signed */
    static inline int64_t pyt_be_int(const uint8_t* p, uint64_t t) {
        uint64_t u; uint32_t w; uint16_t h;
        switch (t) {
        case 1: return (int8_t)p[0];
        case 2: memcpy(&h, p, 2); return (int16_t)__builtin_bswap16(h);
        case 3: return (int64_t)(((uint64_t)(int8_t)p[0] << 16) | ((uint64_t)p[1] << 8) | p[2]);
        case 4: memcpy(&w, p, 4); return (int32_t)__builtin_bswap32(w);
        case 5: memcpy(&h, p, 2); memcpy(&w, p + 2, 4);
                return (int64_t)(((uint64_t)(int16_t)__builtin_bswap16(h) << 32)
                                 | __builtin_bswap32(w));
        default: memcpy(&u, p, 8); return (int64_t)__builtin_bswap64(u);
        }
    }
    static inline double pyt_be_double(const uint8_t* p) {
        uint64_t u; double d;
        memcpy(&u, p, 8); u = __builtin_bswap64(u); memcpy(&d, &u, 8);
        return d;
    }
    static inline uint64_t pyt_bswap64(uint64_t u) { return __builtin_bswap64(u); }
    static inline uint32_t pyt_be32(const uint8_t* p) {
        uint32_t w; memcpy(&w, p, 4); return __builtin_bswap32(w);
    }

    /* SIGBUS guard: a truncated mmapped file faults on the pages past its new end. The
       handler jumps back into pyt_guarded on the faulting thread when that thread is in a
       guarded pass; otherwise it puts back the handler there was before and returns, so
       the fault repeats and goes there (the default action, faulthandler, ...). */
    #include <setjmp.h>
    #include <signal.h>
    static __thread sigjmp_buf* pyt_jump = NULL;
    static struct sigaction pyt_prev_bus;
    static void pyt_on_sigbus(int sig, siginfo_t* info, void* ctx) {
        sigjmp_buf* jb = pyt_jump;
        (void)sig; (void)info; (void)ctx;
        if (jb != NULL) {
            pyt_jump = NULL;
            siglongjmp(*jb, 1);
        }
        sigaction(SIGBUS, &pyt_prev_bus, NULL);
    }
    /* install the handler unless it is the one installed (called with the GIL held) */
    static int pyt_guard_install(void) {
        struct sigaction cur, sa;
        if (sigaction(SIGBUS, NULL, &cur) != 0) return -1;
        if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == pyt_on_sigbus) return 0;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = pyt_on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        pyt_prev_bus = cur;
        return sigaction(SIGBUS, &sa, NULL);
    }
    typedef int (*pyt_pass)(void*);
    /* fn(arg), or -2 when it faulted with SIGBUS (the signal mask is restored) */
    static int pyt_guarded(pyt_pass fn, void* arg) {
        sigjmp_buf jb;
        int rc;
        if (sigsetjmp(jb, 1)) {
            pyt_jump = NULL;
            return -2;
        }
        pyt_jump = &jb;
        rc = fn(arg);
        pyt_jump = NULL;
        return rc;
    }
    """
    ctypedef int (*pyt_pass)(void*) noexcept nogil
    int pyt_guard_install()
    int pyt_guarded(pyt_pass fn, void* arg) nogil
    int64_t pyt_be_int(const uint8_t* p, uint64_t t) noexcept nogil
    double pyt_be_double(const uint8_t* p) noexcept nogil
    uint32_t pyt_be32(const uint8_t* p) noexcept nogil
    uint64_t pyt_bswap64(uint64_t u) noexcept nogil


# content size of the serial types held in one header byte (0..127; 10 and 11 are reserved),
# R_SERIAL for a reserved type and for a byte that starts a longer varint (128..255); and
# for the integer types 1..6 the right shift that sign-extends a big-endian 8-byte load to
# the value
cdef enum:
    R_SERIAL = 0x80
cdef uint8_t SIZE[256]
SIZE[:] = ([0, 1, 2, 3, 4, 6, 8, 8, 0, 0, R_SERIAL, R_SERIAL]
           + [(t - 12) >> 1 for t in range(12, 128)] + [R_SERIAL] * 128)
cdef uint8_t SHIFT[7]
SHIFT[:] = [0, 56, 48, 40, 32, 16, 0]


cdef struct Err:
    int code
    int64_t page
    int64_t a
    int64_t b
    int what   # for type errors: 7 float, 12 blob, 13 text


cdef struct Out:
    # one requested column
    int kind
    int64_t* ival       # K_INT values; K_BYTES offsets (n + 1)
    double* fval        # K_FLOAT values
    uint8_t* mask
    int64_t nmask       # rows whose mask byte is not MASK_VALUE
    uint8_t* data       # K_BYTES contents (malloc)
    int64_t dlen
    int64_t dcap
    int64_t col         # the column's index in the table (for messages)


cdef struct Want:
    int col             # the record slot
    Out* out
    int64_t* ival       # out.ival for a b'i' column (its integers are decoded inline), or NULL


cdef struct Scan:
    const uint8_t* file
    int64_t nbytes
    int64_t npages
    int64_t page_size
    int64_t usable
    # the requested columns but the rowid alias, by record slot: slot want[k].col (ascending)
    # goes to want[k].out; the header pass leaves slot j's serial type in typ[j] and the
    # offset of its value in the payload in off[j] (0 <= j <= maxcol)
    Want* want
    int nwant
    uint64_t* typ
    uint64_t* off
    int maxcol
    int rowid_out       # outs index fed by the rowid, or -1
    Out* outs
    int nout
    uint32_t* leaves    # leaf page numbers in key order
    uint32_t* counts    # their cell counts
    int64_t nleaves
    int64_t nrows
    uint8_t* seen       # one bit per page: in the b-tree or an overflow chain already
    uint8_t* scratch    # payloads with overflow pages are gathered here
    int64_t scap
    int64_t root
    int32_t* coff       # the cells of the page being checked: offset and size
    int32_t* csize
    uint8_t* claim      # one byte per byte of a page, for pages whose cells are not in order
    Err err


cdef inline int _fail(Scan* s, int code, int64_t page, int64_t a) noexcept nogil:
    s.err.code = code
    s.err.page = page
    s.err.a = a
    return -1


cdef inline bint _reuse(Scan* s, int64_t pgno) noexcept nogil:
    """Mark page pgno (1..npages) as used; true when it already was: a b-tree loop, an
    overflow chain that loops or that shares a page with another chain or the b-tree."""
    cdef uint8_t bit = <uint8_t>(1 << (pgno & 7))
    if s.seen[pgno >> 3] & bit:
        return True
    s.seen[pgno >> 3] |= bit
    return False


cdef inline const uint8_t* _varint(const uint8_t* p, const uint8_t* end,
                                   uint64_t* v) noexcept nogil:
    """Read a varint from p (not past end); NULL when it runs off."""
    cdef uint64_t x = 0
    cdef int i
    if p < end and p[0] < 0x80:
        v[0] = p[0]
        return p + 1
    for i in range(8):
        if p >= end:
            return NULL
        x = (x << 7) | (p[0] & 0x7F)
        if p[0] < 0x80:
            v[0] = x
            return p + 1
        p += 1
    if p >= end:
        return NULL
    v[0] = (x << 8) | p[0]
    return p + 1


cdef inline const uint8_t* _page(Scan* s, int64_t pgno) noexcept nogil:
    return s.file + (pgno - 1) * s.page_size


cdef inline int64_t _be16(const uint8_t* p) noexcept nogil:
    return (<int64_t>p[0] << 8) | p[1]


cdef inline const uint8_t* _cell_head(const uint8_t* p, const uint8_t* end, uint64_t* plen,
                                      uint64_t* key) noexcept nogil:
    """The payload size and rowid varints of the leaf cell at p (< end); the payload's
    first byte, or NULL when they run off the page."""
    if p[0] < 0x80:
        plen[0] = p[0]
        p += 1
    else:
        p = _varint(p, end, plen)
        if p == NULL:
            return NULL
    if p < end and p[0] < 0x80:
        key[0] = p[0]
        return p + 1
    return _varint(p, end, key)


cdef inline int64_t _local(uint64_t plen, int64_t x, int64_t m, int64_t u) noexcept nogil:
    """Bytes of a payload of plen bytes stored on the leaf itself (fileformat2 1.6), plus
    the 4-byte first overflow page number when it spills."""
    cdef int64_t k
    if <int64_t>plen <= x:
        return <int64_t>plen
    k = m + ((<int64_t>plen - m) % (u - 4))
    return (k if k <= x else m) + 4


cdef int _layout(Scan* s, const uint8_t* pg, int64_t pgno, int64_t hdr, int64_t hsize,
                 int64_t ncells) noexcept nogil:
    """The cells s.coff/s.csize[:ncells] of page pgno (a page header of hsize bytes at hdr)
    lie in its cell content area without overlapping, and with its free blocks and
    fragmented bytes fill that area exactly (fileformat2 1.6; integrity_check's checks)."""
    cdef int64_t u = s.usable, content = _be16(pg + hdr + 5), covered = 0
    cdef int64_t i, a, b, prev = s.usable, fb, size, last
    cdef bint ordered = True
    if content == 0:
        content = 65536
    if content < hdr + hsize + 2 * ncells or content > u:
        return _fail(s, E_CONTENT_START, pgno, content)
    for i in range(ncells):
        a = s.coff[i]
        b = a + s.csize[i]
        if a < content or b > u:
            return _fail(s, E_CONTENT, pgno, a)
        if b > prev:
            ordered = False
        prev = a
        covered += s.csize[i]
    if not ordered:  # SQLite writes cells from the page's end down: rare, checked bytewise
        if s.claim == NULL:
            s.claim = <uint8_t*>malloc(<size_t>u)
            if s.claim == NULL:
                return _fail(s, E_NOMEM, pgno, 0)
        memset(s.claim, 0, <size_t>u)
        for i in range(ncells):
            for a in range(s.coff[i], s.coff[i] + s.csize[i]):
                if s.claim[a]:
                    return _fail(s, E_OVERLAP, pgno, s.coff[i])
                s.claim[a] = 1
    fb = _be16(pg + hdr + 1)
    last = content
    while fb != 0:
        if fb < last or fb + 4 > u:
            return _fail(s, E_FREEBLOCK, pgno, fb)
        size = _be16(pg + fb + 2)
        if size < 4 or fb + size > u:
            return _fail(s, E_FREEBLOCK, pgno, fb)
        covered += size
        last = fb + size
        fb = _be16(pg + fb)
    covered += pg[hdr + 7]
    if covered != u - content:
        s.err.b = u - content
        return _fail(s, E_ACCOUNT, pgno, covered)
    return 0


cdef int _interior_layout(Scan* s, const uint8_t* pg, int64_t pgno, int64_t hdr,
                          int64_t ncells) noexcept nogil:
    """_layout for an interior page: each cell is a 4-byte child page number and a rowid."""
    cdef int64_t i, off
    cdef uint64_t key
    cdef const uint8_t* p
    for i in range(ncells):
        off = _be16(pg + hdr + 12 + 2 * i)
        if off < hdr + 12 + 2 * ncells or off + 4 >= s.usable:
            return _fail(s, E_CELL_POINTER, pgno, off)
        p = _varint(pg + off + 4, pg + s.usable, &key)
        if p == NULL:
            return _fail(s, E_VARINT, pgno, 0)
        s.coff[i] = <int32_t>off
        s.csize[i] = <int32_t>(p - (pg + off))
    return _layout(s, pg, pgno, hdr, 12, ncells)


cdef int _leaf_layout(Scan* s, const uint8_t* pg, int64_t pgno, int64_t hdr,
                      int64_t ncells) noexcept nogil:
    """_layout for a leaf page, every cell's size read first (for a page whose cells are
    not in SQLite's order, before any of its cells is decoded)."""
    cdef int64_t i, off, u = s.usable, x = s.usable - 35, m = ((s.usable - 12) * 32 // 255) - 23
    cdef uint64_t plen, key
    cdef const uint8_t* p
    for i in range(ncells):
        off = _be16(pg + hdr + 8 + 2 * i)
        if off < hdr + 8 + 2 * ncells or off >= u:
            return _fail(s, E_CELL_POINTER, pgno, off)
        p = _cell_head(pg + off, pg + u, &plen, &key)
        if p == NULL:
            return _fail(s, E_VARINT, pgno, 0)
        s.coff[i] = <int32_t>off
        s.csize[i] = <int32_t>max(4, (p - (pg + off)) + _local(plen, x, m, u))
    return _layout(s, pg, pgno, hdr, 8, ncells)


cdef int _walk(Scan* s, int64_t root) noexcept nogil:
    """Pass 1: list the leaves under root in key order, with their cell counts."""
    cdef int64_t stack_page[MAX_DEPTH]
    cdef int64_t stack_next[MAX_DEPTH]   # next child to visit; ncells means the right-most
    cdef int64_t stack_cells[MAX_DEPTH]
    cdef int depth = 0
    cdef int64_t pgno = root, ncells, child, off, hdr
    cdef const uint8_t* pg
    cdef const uint8_t* h
    cdef uint8_t kind
    while True:
        # visit pgno: a leaf is listed, an interior page is pushed
        if pgno < 1 or pgno > s.npages:
            return _fail(s, E_PAGE_NUMBER, stack_page[depth - 1] if depth else root, pgno)
        if _reuse(s, pgno):
            return _fail(s, E_LOOP, stack_page[depth - 1] if depth else root, pgno)
        pg = _page(s, pgno)
        hdr = 100 if pgno == 1 else 0
        h = pg + hdr
        kind = h[0]
        ncells = (<int64_t>h[3] << 8) | h[4]
        if kind == 0x0D:
            if hdr + 8 + 2 * ncells > s.usable:
                return _fail(s, E_CELL_COUNT, pgno, ncells)
            if ncells == 0 and pgno != root:
                return _fail(s, E_EMPTY_LEAF, pgno, 0)
            s.leaves[s.nleaves] = <uint32_t>pgno
            s.counts[s.nleaves] = <uint32_t>ncells
            s.nleaves += 1
            s.nrows += ncells
        elif kind == 0x05:
            if hdr + 12 + 2 * ncells > s.usable:
                return _fail(s, E_CELL_COUNT, pgno, ncells)
            if depth == MAX_DEPTH:
                return _fail(s, E_DEPTH, pgno, 0)
            if _interior_layout(s, pg, pgno, hdr, ncells) < 0:
                return -1
            stack_page[depth] = pgno
            stack_next[depth] = 0
            stack_cells[depth] = ncells
            depth += 1
        else:
            return _fail(s, E_PAGE_TYPE, pgno, kind)
        # the next page: the top frame's next child, popping finished frames
        while True:
            if depth == 0:
                return 0
            pgno = stack_page[depth - 1]
            pg = _page(s, pgno)
            hdr = 100 if pgno == 1 else 0
            if stack_next[depth - 1] < stack_cells[depth - 1]:
                off = (<int64_t>pg[hdr + 12 + 2 * stack_next[depth - 1]] << 8) \
                    | pg[hdr + 13 + 2 * stack_next[depth - 1]]
                if off < hdr + 12 + 2 * stack_cells[depth - 1] or off + 4 > s.usable:
                    return _fail(s, E_CELL_POINTER, pgno, off)
                child = pyt_be32(pg + off)
                stack_next[depth - 1] += 1
                pgno = child
                break
            if stack_next[depth - 1] == stack_cells[depth - 1]:
                child = pyt_be32(pg + hdr + 8)
                stack_next[depth - 1] += 1
                pgno = child
                break
            depth -= 1


cdef int _grow_bytes(Out* o, int64_t need) noexcept nogil:
    cdef int64_t cap = o.dcap * 2 if o.dcap else 4096
    cdef uint8_t* p
    while cap < o.dlen + need:
        cap *= 2
    p = <uint8_t*>realloc(o.data, <size_t>cap)
    if p == NULL:
        return -1
    o.data = p
    o.dcap = cap
    return 0


cdef inline int _type_error(Scan* s, int code, Out* o, int64_t rowid, uint64_t t) noexcept nogil:
    s.err.code = code
    s.err.a = o.col
    s.err.b = rowid
    s.err.what = 7 if t == 7 else (<int>(t & 1) + 12 if t >= 12 else 1)
    return -1


cdef int _absent(Out* o, int64_t r) noexcept nogil:
    """Row r has no value for o: the record ends before the column (it was added later by
    ALTER TABLE ADD COLUMN; SQLite reads its DEFAULT)."""
    o.mask[r] = M_ABSENT
    o.nmask += 1
    if o.kind == K_BYTES:
        o.ival[r + 1] = o.dlen
    elif o.kind == K_FLOAT:
        o.fval[r] = 0.0
    else:
        o.ival[r] = 0
    return 0


cdef int _value(Scan* s, Out* o, const uint8_t* v, uint64_t t, uint64_t size, int64_t rowid,
                int64_t r, int64_t pgno) noexcept nogil:
    """Store the value of serial type t at v (size bytes, in bounds) as row r of o: every
    case but the common one (an integer in an int64 column), which _record does inline."""
    if o.kind == K_INT:
        if t >= 1 and t <= 6:
            o.ival[r] = pyt_be_int(v, t)
        elif t == 0:
            o.ival[r] = 0
            o.mask[r] = M_NULL
            o.nmask += 1
        elif t == 8 or t == 9:
            o.ival[r] = <int64_t>t - 8
        else:
            return _type_error(s, E_TYPE_INT, o, rowid, t)
    elif o.kind == K_FLOAT:
        if t == 7:
            o.fval[r] = pyt_be_double(v)
        elif t >= 1 and t <= 6:
            o.fval[r] = <double>pyt_be_int(v, t)
        elif t == 0:
            o.fval[r] = 0.0
            o.mask[r] = M_NULL
            o.nmask += 1
        elif t == 8 or t == 9:
            o.fval[r] = <double>(<int64_t>t - 8)
        else:
            return _type_error(s, E_TYPE_FLOAT, o, rowid, t)
    else:
        if t >= 12:
            if size:  # not memcpy(NULL, v, 0): data is NULL until the first non-empty value
                if o.dlen + <int64_t>size > o.dcap and _grow_bytes(o, size) < 0:
                    return _fail(s, E_NOMEM, pgno, 0)
                memcpy(o.data + o.dlen, v, size)
                o.dlen += size
        elif t == 0:
            o.mask[r] = M_NULL
            o.nmask += 1
        else:
            return _type_error(s, E_TYPE_BYTES, o, rowid, t)
        o.ival[r + 1] = o.dlen
    return 0


cdef inline int _record(Scan* s, const uint8_t* pay, int64_t plen, const uint8_t* lim,
                        int64_t rowid, int64_t r, int64_t pgno) noexcept nogil:
    """Decode the record pay[:plen] (rowid, output row r) into the requested columns.
    Bytes up to lim may be read (not used) past the payload: an 8-byte load decodes any
    integer without branching on its width.

    Two passes: the header's serial types up to the last requested slot (sizes summed into
    each value's offset), then the requested values. A fault found in the header is
    reported after the values before it are stored, as a single pass would: a type error
    in an earlier column comes first."""
    cdef uint64_t hsize, t, size, u, body, flags
    cdef int64_t nj
    cdef const uint8_t* hp
    cdef const uint8_t* hend
    cdef const uint8_t* v
    cdef int j, ncol = s.maxcol + 1, rc = 0
    cdef uint64_t* typ = s.typ
    cdef uint64_t* off = s.off
    cdef const Want* w
    cdef const Want* wend
    if plen > 0 and pay[0] < 0x80:
        hsize = pay[0]
        hp = pay + 1
    else:
        hp = _varint(pay, pay + plen, &hsize)
        if hp == NULL:
            return _fail(s, E_VARINT, pgno, 0)
    if hsize > <uint64_t>plen or hsize < <uint64_t>(hp - pay):
        return _fail(s, E_HEADER, pgno, <int64_t>hsize)
    hend = pay + hsize
    body = hsize
    # the common header: one byte per slot, each a valid type; else (a type of 2+ bytes, a
    # reserved one, values past the payload) the header is read again with every check
    nj = min(<int64_t>ncol, hend - hp)
    flags = 0
    for j in range(nj):
        t = hp[j]
        size = SIZE[t]
        flags |= size
        typ[j] = t
        off[j] = body
        body += size
    if flags & R_SERIAL == 0 and body <= <uint64_t>plen:
        j = <int>nj
    else:
        body = hsize
        j = 0
        while j < ncol and hp < hend:
            t = hp[0]
            if t < 0x80:
                hp += 1
            else:
                hp = _varint(hp, hend, &t)
                if hp == NULL:
                    rc = _fail(s, E_HEADER, pgno, <int64_t>hsize)
                    break
            if t < 0x80:  # a varint of 2+ bytes may hold a small type too
                size = SIZE[t]
                if size == R_SERIAL:
                    rc = _fail(s, E_SERIAL, pgno, <int64_t>t)
                    break
            else:
                size = (t - 12) >> 1
            typ[j] = t
            off[j] = body
            body += size  # no wrap: size < 2^63, body <= plen
            if body > <uint64_t>plen:
                rc = _fail(s, E_VALUE, pgno, 0)
                break
            j += 1
    w = s.want
    wend = w + s.nwant
    while w < wend:
        if w.col >= j:
            if rc < 0:
                break
            _absent(w.out, r)
        else:
            t = typ[w.col]
            v = pay + off[w.col]
            if w.ival != NULL and t - 1 < 6 and v + 8 <= lim:
                memcpy(&u, v, 8)
                w.ival[r] = (<int64_t>pyt_bswap64(u)) >> SHIFT[t]
            elif w.ival != NULL and t - 8 < 2:  # the constants 0 and 1
                w.ival[r] = <int64_t>t - 8
            elif _value(s, w.out, v, t, (t - 12) >> 1 if t >= 12 else SIZE[t], rowid, r,
                        pgno) < 0:
                return -1
        w += 1
    return rc


cdef int _gather(Scan* s, const uint8_t* local, int64_t nlocal, int64_t plen,
                 int64_t pgno) noexcept nogil:
    """Copy a payload of plen bytes (nlocal on the leaf, the rest on the overflow chain whose
    first page number follows the local part) into s.scratch."""
    cdef int64_t got = nlocal, take, ovf, per = s.usable - 4
    cdef const uint8_t* op
    cdef uint8_t* p
    if plen > s.scap:
        p = <uint8_t*>realloc(s.scratch, <size_t>plen + 8)  # 8: see _record's lim
        if p == NULL:
            return _fail(s, E_NOMEM, pgno, 0)
        s.scratch = p
        s.scap = plen
    memcpy(s.scratch, local, nlocal)
    ovf = pyt_be32(local + nlocal)
    while got < plen:
        if ovf == 0:
            return _fail(s, E_OVERFLOW_SHORT, pgno, 0)
        if ovf > s.npages:
            return _fail(s, E_PAGE_NUMBER, pgno, ovf)
        if _reuse(s, ovf):
            return _fail(s, E_OVERFLOW_TWICE, pgno, ovf)
        op = _page(s, ovf)
        take = plen - got
        if take > per:
            take = per
        memcpy(s.scratch + got, op + 4, take)
        got += take
        pgno = ovf
        ovf = pyt_be32(op)
    if ovf != 0:
        return _fail(s, E_OVERFLOW_LONG, pgno, 0)
    return 0


cdef int _leaves(Scan* s) noexcept nogil:
    """Pass 2: decode every cell of every listed leaf."""
    cdef int64_t li, ci, ncells, off, hdr, pgno, r = 0, nlocal, m, k, size, prev
    cdef int64_t u = s.usable, x = s.usable - 35
    cdef bint checked
    cdef int64_t maxpay = (s.npages + 1) * s.usable
    cdef uint64_t plen, key
    cdef const uint8_t* pg
    cdef const uint8_t* end
    cdef const uint8_t* p
    cdef const uint8_t* pay
    cdef const uint8_t* lim
    cdef int64_t* rowids = s.outs[s.rowid_out].ival if s.rowid_out >= 0 else NULL
    m = ((u - 12) * 32 // 255) - 23
    for li in range(s.nleaves):
        pgno = s.leaves[li]
        ncells = s.counts[li]
        pg = _page(s, pgno)
        end = pg + u
        hdr = 100 if pgno == 1 else 0
        if pg[hdr] != 0x0D or ((<int64_t>pg[hdr + 3] << 8) | pg[hdr + 4]) != ncells \
                or r + ncells > s.nrows:
            return _fail(s, E_CHANGED, pgno, 0)
        # cells in SQLite's order (each below the one before) cannot overlap, so they are
        # decoded as they come; at the first out of order, the whole page is checked first
        checked = False
        prev = u
        for ci in range(ncells):
            off = (<int64_t>pg[hdr + 8 + 2 * ci] << 8) | pg[hdr + 9 + 2 * ci]
            if off < hdr + 8 + 2 * ncells or off >= u:
                return _fail(s, E_CELL_POINTER, pgno, off)
            p = _cell_head(pg + off, end, &plen, &key)
            if p == NULL:
                return _fail(s, E_VARINT, pgno, 0)
            if not checked:
                size = max(4, (p - (pg + off)) + _local(plen, x, m, u))
                if off + size > prev:
                    if _leaf_layout(s, pg, pgno, hdr, ncells) < 0:
                        return -1
                    checked = True
                s.coff[ci] = <int32_t>off
                s.csize[ci] = <int32_t>size
                prev = off
            if rowids != NULL:
                rowids[r] = <int64_t>key
            if plen > <uint64_t>maxpay:
                return _fail(s, E_PAYLOAD_SIZE, pgno, 0)
            if <int64_t>plen <= x:
                if <int64_t>plen > end - p:
                    return _fail(s, E_CELL, pgno, off)
                # lim = the page's usable end, not the file's: the 8-byte loads of the last
                # values on a page stay out of its reserved bytes and the next page
                pay = p
                lim = end
            else:
                k = m + ((<int64_t>plen - m) % (u - 4))
                nlocal = k if k <= x else m
                if nlocal + 4 > end - p:
                    return _fail(s, E_CELL, pgno, off)
                if _gather(s, p, nlocal, <int64_t>plen, pgno) < 0:
                    return -1
                pay = s.scratch
                lim = s.scratch + s.scap + 8
            # one call site: the compiler inlines the decoder into this loop
            if _record(s, pay, <int64_t>plen, lim, <int64_t>key, r, pgno) < 0:
                return -1
            r += 1
        if not checked and _layout(s, pg, pgno, hdr, 8, ncells) < 0:
            return -1
    return 0


cdef int _walk_pass(void* arg) noexcept nogil:
    cdef Scan* s = <Scan*>arg
    return _walk(s, s.root)


cdef int _leaves_pass(void* arg) noexcept nogil:
    return _leaves(<Scan*>arg)


cdef int _raise(Scan* s, int rc) except -1:
    """The error of a pass that returned rc < 0 (-2: it faulted, see pyt_guarded)."""
    cdef int code = E_SIGBUS if rc == -2 else s.err.code
    if code == E_NOMEM:
        raise MemoryError()
    what = {1: "INTEGER", 7: "REAL", 12: "BLOB", 13: "TEXT"}.get(s.err.what, "?")
    raise ValueError(_MESSAGES[code].format(page=s.err.page, a=s.err.a, b=s.err.b, what=what))


def scan_table(buf, int page_size, int usable_size, int root_page, list columns,
               bytes kinds, int rowid_alias):
    """Read columns of the rowid table whose b-tree root is root_page, in key (rowid) order.

    buf: the whole file (bytes, mmap, any buffer); pages are page_size bytes, numbered from
    1, of which the first usable_size hold content. columns: record indexes (table column
    order); kinds: one byte per column, b'i' int64, b'f' float64, b'b' text/blob bytes.
    rowid_alias: the index of the table's INTEGER PRIMARY KEY column (its value is the
    rowid) or -1.

    Returns one (values, data, mask) per column. values: int64 or float64 array of n rows
    (0 where NULL), or for b'b' int64 offsets (n + 1) into data, the concatenated bytes
    (None for the numeric kinds). mask: None when every row has a value, else uint8 per
    row, MASK_VALUE, MASK_NULL or MASK_ABSENT (the record ends before the column: a column
    added later by ALTER TABLE, whose value is its DEFAULT). Raises ValueError on a corrupt
    file, or on a value of the wrong type ("column 3, rowid 12: TEXT value in an integer
    column"; an integer in a b'f' column is converted).
    """
    cdef Scan s
    cdef Py_buffer view
    cdef int i, j, nout = len(columns), rc
    cdef int64_t n, col
    cdef Out* o
    cdef int64_t[::1] iv
    cdef double[::1] fv
    cdef uint8_t[::1] mv
    if len(kinds) != nout:
        raise ValueError("kinds must give one kind per column")
    if page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
        raise ValueError(f"page size {page_size} is not a power of two in 512..65536")
    if usable_size < 480 or usable_size > page_size:
        raise ValueError(f"usable size {usable_size} out of range")
    for col in columns:
        if col < 0 or col > MAX_COLUMN:
            raise ValueError(f"column index {col} out of range")
    if len(set(columns)) != nout:
        raise ValueError("a column is requested twice")
    for i in range(nout):
        if kinds[i] not in b"ifb":
            raise ValueError(f"unknown column kind {chr(kinds[i])!r}")
        if columns[i] == rowid_alias and kinds[i] != ord("i"):
            raise ValueError("the INTEGER PRIMARY KEY column must be read as b'i'")

    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    s.file = <const uint8_t*>view.buf
    s.nbytes = view.len
    s.npages = view.len // page_size
    s.page_size = page_size
    s.usable = usable_size
    s.maxcol = -1
    s.rowid_out = -1
    s.nout = nout
    s.nleaves = 0
    s.nrows = 0
    s.scratch = NULL
    s.seen = NULL
    s.scap = 0
    s.err.code = 0
    s.want = NULL
    s.nwant = 0
    s.typ = NULL
    s.off = NULL
    s.leaves = NULL
    s.counts = NULL
    s.root = root_page
    s.coff = NULL
    s.csize = NULL
    s.claim = NULL
    s.outs = <Out*>malloc(sizeof(Out) * (nout + 1))
    keep = []
    try:
        if s.outs == NULL:
            raise MemoryError()
        for i in range(nout):
            s.outs[i].data = NULL
            s.outs[i].dlen = 0
            s.outs[i].dcap = 0
            s.outs[i].nmask = 0
            s.outs[i].col = columns[i]
            s.outs[i].kind = K_INT if kinds[i] == ord("i") else (
                K_FLOAT if kinds[i] == ord("f") else K_BYTES)
            if columns[i] == rowid_alias:
                s.rowid_out = i
            elif columns[i] > s.maxcol:
                s.maxcol = columns[i]
        s.want = <Want*>malloc(sizeof(Want) * (nout + 1))
        s.typ = <uint64_t*>malloc(sizeof(uint64_t) * (s.maxcol + 1))
        s.off = <uint64_t*>malloc(sizeof(uint64_t) * (s.maxcol + 1))
        s.leaves = <uint32_t*>malloc(sizeof(uint32_t) * (s.npages + 1))
        s.counts = <uint32_t*>malloc(sizeof(uint32_t) * (s.npages + 1))
        s.seen = <uint8_t*>calloc((s.npages >> 3) + 1, 1)
        s.coff = <int32_t*>malloc(sizeof(int32_t) * (usable_size // 2))
        s.csize = <int32_t*>malloc(sizeof(int32_t) * (usable_size // 2))
        if s.want == NULL or s.typ == NULL or s.off == NULL or s.leaves == NULL \
                or s.counts == NULL or s.seen == NULL or s.coff == NULL or s.csize == NULL:
            raise MemoryError()
        if pyt_guard_install() != 0:
            raise OSError("cannot install the SIGBUS guard")

        with nogil:
            rc = pyt_guarded(_walk_pass, &s)
        if rc < 0:
            _raise(&s, rc)
        n = s.nrows
        for i in range(nout):
            o = &s.outs[i]
            if o.kind == K_FLOAT:
                vals = np.empty(n, dtype=np.float64)
                fv = vals
                o.fval = &fv[0] if n else NULL
            else:
                vals = np.empty(n + 1 if o.kind == K_BYTES else n, dtype=np.int64)
                iv = vals
                o.ival = &iv[0] if len(vals) else NULL
                if o.kind == K_BYTES:
                    iv[0] = 0
            mask = np.zeros(n, dtype=np.uint8)   # calloc: pages untouched unless written
            mv = mask
            o.mask = &mv[0] if n else NULL
            keep.append((vals, mask))
        for i in sorted(range(nout), key=columns.__getitem__):
            if i != s.rowid_out:
                s.want[s.nwant].col = columns[i]
                s.want[s.nwant].out = &s.outs[i]
                s.want[s.nwant].ival = s.outs[i].ival if s.outs[i].kind == K_INT else NULL
                s.nwant += 1
        with nogil:
            rc = pyt_guarded(_leaves_pass, &s)
        if rc < 0:
            _raise(&s, rc)
        out = []
        for i in range(nout):
            o = &s.outs[i]
            vals, mask = keep[i]
            data = None
            if o.kind == K_BYTES:
                data = PyBytes_FromStringAndSize(<char*>o.data, o.dlen) if o.dlen else b""
            out.append((vals, data, mask if o.nmask else None))
        return out
    finally:
        PyBuffer_Release(&view)
        if s.outs != NULL:
            for i in range(nout):
                free(s.outs[i].data)
            free(s.outs)
        free(s.want)
        free(s.typ)
        free(s.off)
        free(s.leaves)
        free(s.counts)
        free(s.seen)
        free(s.scratch)
        free(s.coff)
        free(s.csize)
        free(s.claim)
