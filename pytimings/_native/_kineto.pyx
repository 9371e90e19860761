# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3, binding=True, autotestdict=False, auto_pickle=False
"""Kineto events (msgspec Structs) -> column arrays, with exact microsecond -> ns times.

Times: Kineto writes ``ts``/``dur`` in microseconds as decimal text ("5219341043348.053",
"1712195495519695.812"). A float64 holds 1.7e15 us only to 0.25 us and 1.7e18 ns only to
256 ns, so ``round(ts * 1000)`` on floats drifts. The events are decoded with ``ts``/``dur``
as ``msgspec.Raw`` (the number's own text) and converted here with integer arithmetic:
``start = round(ts * 1000)``, ``end = round((ts + dur) * 1000)``, both on the exact decimal
values, ties to even (Python's ``round``). Text this fast path does not take (a sign, an
exponent, more than 12 fraction digits, more than 4e15 us) goes to an exact ``Decimal``
fallback given by the caller.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyObject_GetBuffer, PyBuffer_Release
from cpython.unicode cimport PyUnicode_GET_LENGTH, PyUnicode_READ_CHAR
from libc.stdint cimport int64_t

import numpy as np

cdef enum:
    HALF = 500000000
    ONE = 1000000000
# integer microseconds above this take the exact fallback (keeps ts + dur within int64 ns)
cdef int64_t BIG_US = 4000000000000000
NO_VALUE = -1


class RowError(ValueError):
    """A bad event; ``index`` is its position in the list given to the converter."""

    def __init__(self, message, index):
        super().__init__(message)
        self.index = index


cdef inline bint _digit(char c) noexcept nogil:
    return c >= 48 and c <= 57


cdef int _parse_us(const char* s, Py_ssize_t n, int64_t* ns, int64_t* frac) noexcept nogil:
    """Decimal microseconds -> floor(value * 1000) and the next 9 digits (1e-9 ns units).

    0: done; 1: take the exact fallback; -1: not a JSON number.
    """
    cdef Py_ssize_t i = 0
    cdef int64_t ip = 0, f3 = 0, f9 = 0
    cdef int fd = 0
    if n <= 0:
        return -1
    if s[0] == b'-':
        return 1 if n > 1 and _digit(s[1]) else -1
    if not _digit(s[0]):
        return -1
    while i < n and _digit(s[i]):
        ip = ip * 10 + (s[i] - 48)
        if ip > BIG_US:
            return 1
        i += 1
    if i < n and s[i] == b'.':
        i += 1
        while i < n and _digit(s[i]):
            if fd < 3:
                f3 = f3 * 10 + (s[i] - 48)
            elif fd < 12:
                f9 = f9 * 10 + (s[i] - 48)
            elif s[i] != 48:
                return 1
            fd += 1
            i += 1
    if i < n:
        return 1  # exponent
    while fd < 3:
        f3 *= 10
        fd += 1
    while fd < 12:
        f9 *= 10
        fd += 1
    ns[0] = ip * 1000 + f3
    frac[0] = f9
    return 0


cdef inline int64_t _round(int64_t ns, int64_t frac) noexcept nogil:
    if frac > HALF or (frac == HALF and (ns & 1)):
        return ns + 1
    return ns


cdef int _raw_parse(object raw, int64_t* ns, int64_t* frac) except -2:
    cdef Py_buffer view
    cdef int r
    PyObject_GetBuffer(raw, &view, PyBUF_SIMPLE)
    r = _parse_us(<const char*>view.buf, view.len, ns, frac)
    PyBuffer_Release(&view)
    return r


cdef int _times(object ts, object dur, object exact, int64_t* start, int64_t* end,
                Py_ssize_t i) except -1:
    """start/end ns of one event; dur None means an instant (end = start). An empty Raw
    is a missing field."""
    cdef int64_t a = 0, fa = 0, b = 0, fb = 0, s, f
    cdef int r1, r2 = 0
    if len(ts) == 0:
        raise RowError("event has no ts", i)
    if dur is not None and len(dur) == 0:
        raise RowError("complete ('X') event has no dur", i)
    r1 = _raw_parse(ts, &a, &fa)
    if dur is not None:
        r2 = _raw_parse(dur, &b, &fb)
    if r1 < 0:
        raise RowError(f"ts is not a number: {bytes(ts)[:40]!r}", i)
    if r2 < 0:
        raise RowError(f"dur is not a number: {bytes(dur)[:40]!r}", i)
    if r1 or r2:
        st, en = exact(bytes(ts), None if dur is None else bytes(dur))
        if en < st:
            raise RowError(f"negative duration (dur={bytes(dur).decode()})", i)
        start[0] = st
        end[0] = en
        return 0
    start[0] = _round(a, fa)
    if dur is None:
        end[0] = start[0]
        return 0
    s = a + b
    f = fa + fb
    if f >= ONE:
        s += 1
        f -= ONE
    end[0] = _round(s, f)
    return 0


def exact_ns_fast(bytes ts, object dur):
    """The fast path alone (for tests): (start, end) or None when it defers to the fallback."""
    cdef int64_t a = 0, fa = 0, b = 0, fb = 0, s, f
    if _parse_us(ts, len(ts), &a, &fa) != 0:
        return None
    if dur is None:
        return _round(a, fa), _round(a, fa)
    if _parse_us(dur, len(dur), &b, &fb) != 0:
        return None
    s = a + b
    f = fa + fb
    if f >= ONE:
        s += 1
        f -= ONE
    return _round(a, fa), _round(s, f)


cdef inline int64_t _key(object v, dict keys) except? -7:
    """pid/tid -> int64: ints as they are, numeric strings as numbers, other strings (and
    None) as stable negative ids (``keys`` remembers them)."""
    if type(v) is int:
        return v
    k = keys.get(v)
    if k is not None:
        return k
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        k = int(v)
    else:
        k = -1000 - len(keys)
    keys[v] = k
    return k


cdef inline int64_t _opt(object v) except? -7:
    if v is None:
        return NO_VALUE
    if type(v) is int:
        return v
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return NO_VALUE
    return NO_VALUE


cdef inline int _intern(object s, dict ids, list strings) except -1:
    i = ids.get(s)
    if i is None:
        i = len(strings)
        ids[s] = i
        strings.append(s)
    return i


def event_rows(list evs, int cat, dict ids, list strings, dict keys, object exact,
               const int64_t[::1] index):
    """Columns of complete ('X') events of one category (code ``cat``): GPU ops, API calls,
    ranges or host events (these have ``args`` None). ``index``: each event's position in
    traceEvents (kept as a column).

    Returns (columns dict, {ph: count} of events that are not 'X').
    """
    cdef Py_ssize_t n = len(evs), i, k = 0
    st = np.empty(n, dtype=np.int64)
    en = np.empty(n, dtype=np.int64)
    nm = np.empty(n, dtype=np.int32)
    cc = np.empty(n, dtype=np.int8)
    pd = np.empty(n, dtype=np.int64)
    td = np.empty(n, dtype=np.int64)
    co = np.empty(n, dtype=np.int64)
    dv = np.empty(n, dtype=np.int64)
    sm = np.empty(n, dtype=np.int64)
    nb = np.empty(n, dtype=np.int64)
    ix = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] vst = st, ven = en, vpd = pd, vtd = td, vco = co, vdv = dv, vsm = sm
    cdef int64_t[::1] vnb = nb, vix = ix
    cdef int[::1] vnm = nm
    cdef signed char[::1] vcc = cc
    cdef int64_t s0 = 0, e0 = 0
    skipped = {}
    for i in range(n):
        ev = evs[i]
        ph = ev.ph
        if not (PyUnicode_GET_LENGTH(ph) == 1 and PyUnicode_READ_CHAR(ph, 0) == 88):  # X
            skipped[ph] = skipped.get(ph, 0) + 1
            continue
        _times(ev.ts, ev.dur, exact, &s0, &e0, i)
        if e0 < s0:
            raise RowError(f"negative duration (dur={bytes(ev.dur).decode()})", i)
        vst[k] = s0
        ven[k] = e0
        vnm[k] = _intern(ev.name, ids, strings)
        vcc[k] = cat
        vpd[k] = _key(ev.pid, keys)
        vtd[k] = _key(ev.tid, keys)
        a = ev.args
        if a is None:
            vco[k] = vdv[k] = vsm[k] = vnb[k] = NO_VALUE
        else:
            vco[k] = _opt(a.correlation)
            vdv[k] = _opt(a.device)
            vsm[k] = _opt(a.stream)
            vnb[k] = _opt(a.bytes) if a.bytes is not None else _opt(a.size)
        vix[k] = index[i]
        k += 1
    cols = {"start": st[:k], "end": en[:k], "name": nm[:k], "cat": cc[:k], "pid": pd[:k],
            "tid": td[:k], "correlation": co[:k], "device": dv[:k], "stream": sm[:k],
            "bytes": nb[:k], "index": ix[:k]}
    return cols, skipped


def flow_rows(list evs, dict keys, object exact):
    """Columns of flow events: phase (0 start 's', 1 end 'f'), id, pid, tid, ts ns.

    Returns (columns dict, {ph: count} of other phases)."""
    cdef Py_ssize_t n = len(evs), i, k = 0
    ph = np.empty(n, dtype=np.int8)
    fid = np.empty(n, dtype=np.int64)
    pd = np.empty(n, dtype=np.int64)
    td = np.empty(n, dtype=np.int64)
    ts = np.empty(n, dtype=np.int64)
    cdef signed char[::1] vph = ph
    cdef int64_t[::1] vid = fid, vpd = pd, vtd = td, vts = ts
    cdef int64_t s0 = 0, e0 = 0
    skipped = {}
    for i in range(n):
        ev = evs[i]
        p = ev.ph
        if p == "s":
            vph[k] = 0
        elif p == "f":
            vph[k] = 1
        else:
            skipped[p] = skipped.get(p, 0) + 1
            continue
        _times(ev.ts, None, exact, &s0, &e0, i)
        vts[k] = s0
        vid[k] = _opt(ev.id)
        vpd[k] = _key(ev.pid, keys)
        vtd[k] = _key(ev.tid, keys)
        k += 1
    return {"phase": ph[:k], "id": fid[:k], "pid": pd[:k], "tid": td[:k], "ts": ts[:k]}, skipped
