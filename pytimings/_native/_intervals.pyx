# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3
"""Interval algebra for latency attribution (docs/attribution.md).

Outputs are views of buffers sized for the worst case: pages never written are never
resident, so a 10-million-op trace costs only the memory its results use.

Half-open integer-ns intervals ``[start, end)``. A *set* is a pair of int64 arrays of
disjoint, non-adjacent intervals sorted by start (what :func:`union` returns). Every
function is linear in its input after the caller's O(n log n) sort, plus a binary search
per query; each has a plain numpy/Python twin in ``tests/unit/intervals_twin.py``.

Label codes of :func:`sweep` and rows of :func:`partition_windows`:
0 compute, 1 comm_overlapped, 2 comm_exposed, 3 memory, then the idle split
4 host_bound, 5 launch_overhead, 6 device_wait, 7 idle_other.
"""

import numpy as np

from libc.stdint cimport INT64_MAX, INT64_MIN, int8_t, int32_t, int64_t, uint8_t

cdef int64_t NO_LAUNCH = INT64_MIN   # k_lstart value: k has no known launch call
cdef int64_t NEVER = INT64_MAX
NO_LAUNCH_NS = INT64_MIN             # the same marker, for callers
# launch_overhead ends this long after the launch call returns (the GPU picking the op up);
# the rest of the gap is device_wait (docs/attribution.md, the partition)
cdef int64_t PICKUP = 50000
LAUNCH_PICKUP_NS = PICKUP


cdef inline Py_ssize_t _first_ge(const int64_t[::1] a, int64_t x) noexcept nogil:
    """Index of the first element >= x in sorted ``a`` (len(a) when none)."""
    cdef Py_ssize_t lo = 0, hi = a.shape[0], mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline Py_ssize_t _first_gt(const int64_t[::1] a, int64_t x) noexcept nogil:
    """Index of the first element > x in sorted ``a`` (len(a) when none)."""
    cdef Py_ssize_t lo = 0, hi = a.shape[0], mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def union(const int64_t[::1] starts, const int64_t[::1] ends):
    """Union of intervals given sorted by start: a set. Empty intervals are dropped."""
    cdef Py_ssize_t n = starts.shape[0], i, k = 0
    if ends.shape[0] != n:
        raise ValueError("starts and ends differ in length")
    us_arr = np.empty(n, dtype=np.int64)
    ue_arr = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] us = us_arr, ue = ue_arr
    cdef int64_t s, e, cs = 0, ce = 0
    cdef bint open_ = False
    with nogil:
        for i in range(n):
            s = starts[i]
            e = ends[i]
            if e <= s:
                continue
            if i > 0 and s < starts[i - 1]:
                with gil:
                    raise ValueError("union: starts are not sorted")
            if not open_:
                cs = s
                ce = e
                open_ = True
            elif s <= ce:  # touching or overlapping: one interval
                if e > ce:
                    ce = e
            else:
                us[k] = cs
                ue[k] = ce
                k += 1
                cs = s
                ce = e
        if open_:
            us[k] = cs
            ue[k] = ce
            k += 1
    return us_arr[:k], ue_arr[:k]


def intersect(const int64_t[::1] a_s, const int64_t[::1] a_e,
              const int64_t[::1] b_s, const int64_t[::1] b_e):
    """Intersection of two sets (a set)."""
    cdef Py_ssize_t na = a_s.shape[0], nb = b_s.shape[0], i = 0, j = 0, k = 0
    out_s_arr = np.empty(na + nb, dtype=np.int64)
    out_e_arr = np.empty(na + nb, dtype=np.int64)
    cdef int64_t[::1] out_s = out_s_arr, out_e = out_e_arr
    cdef int64_t lo, hi
    with nogil:
        while i < na and j < nb:
            lo = a_s[i] if a_s[i] > b_s[j] else b_s[j]
            hi = a_e[i] if a_e[i] < b_e[j] else b_e[j]
            if lo < hi:
                out_s[k] = lo
                out_e[k] = hi
                k += 1
            if a_e[i] < b_e[j]:
                i += 1
            else:
                j += 1
    return out_s_arr[:k], out_e_arr[:k]


def overlap_lengths(const int64_t[::1] q_s, const int64_t[::1] q_e,
                    const int64_t[::1] u_s, const int64_t[::1] u_e):
    """For each query interval (any order), the length it shares with the set ``u``."""
    cdef Py_ssize_t n = q_s.shape[0], m = u_s.shape[0], i, j, lo_j, hi_j
    cum_arr = np.zeros(m + 1, dtype=np.int64)
    out_arr = np.zeros(n, dtype=np.int64)
    cdef int64_t[::1] cum = cum_arr, out = out_arr
    cdef int64_t a, b, tot
    with nogil:
        for j in range(m):
            cum[j + 1] = cum[j] + (u_e[j] - u_s[j])
        for i in range(n):
            a = q_s[i]
            b = q_e[i]
            if b <= a or m == 0:
                continue
            j = _first_gt(u_e, a)          # first set interval ending after a
            if j >= m or u_s[j] >= b:
                continue
            lo_j = j
            hi_j = _first_ge(u_s, b)       # set intervals [lo_j, hi_j) may overlap
            tot = cum[hi_j] - cum[lo_j]
            # trim the partial overlaps at both ends
            if u_s[lo_j] < a:
                tot -= a - u_s[lo_j]
            if u_e[hi_j - 1] > b:
                tot -= u_e[hi_j - 1] - b
            out[i] = tot
    return out_arr


def points_in_set(const int64_t[::1] points, const int64_t[::1] u_s, const int64_t[::1] u_e):
    """1 where a point lies inside an interval of the set ``u``, else 0."""
    cdef Py_ssize_t n = points.shape[0], m = u_s.shape[0], i, j
    out_arr = np.zeros(n, dtype=np.uint8)
    cdef uint8_t[::1] out = out_arr
    with nogil:
        for i in range(n):
            j = _first_gt(u_e, points[i])
            if j < m and u_s[j] <= points[i]:
                out[i] = 1
    return out_arr


def project(const int64_t[::1] points, const int64_t[::1] starts,
            const int64_t[::1] ends, const int64_t[::1] r_s, const int64_t[::1] r_e):
    """Projection of launches onto ranges (the NVTX "GPU projection").

    ``points`` (sorted) are launch-call starts, ``starts``/``ends`` the op each one
    launched. For each range ``[r_s, r_e)`` returns the number of points inside it, the
    earliest start, the latest end and the summed ``ends - starts`` of their ops (all 0
    when none), so ranges may overlap or nest.
    """
    cdef Py_ssize_t m = r_s.shape[0], i, j, lo, hi
    count_arr = np.zeros(m, dtype=np.int64)
    first_arr = np.zeros(m, dtype=np.int64)
    last_arr = np.zeros(m, dtype=np.int64)
    busy_arr = np.zeros(m, dtype=np.int64)
    cdef int64_t[::1] count = count_arr, first = first_arr, last = last_arr, busy = busy_arr
    cdef int64_t lo_v, hi_v, tot
    with nogil:
        for i in range(m):
            lo = _first_ge(points, r_s[i])
            hi = _first_ge(points, r_e[i])
            if hi <= lo:
                continue
            lo_v = starts[lo]
            hi_v = ends[lo]
            tot = 0
            for j in range(lo, hi):
                if starts[j] < lo_v:
                    lo_v = starts[j]
                if ends[j] > hi_v:
                    hi_v = ends[j]
                tot += ends[j] - starts[j]
            count[i] = hi - lo
            first[i] = lo_v
            last[i] = hi_v
            busy[i] = tot
    return count_arr, first_arr, last_arr, busy_arr


def union_by_class(const int64_t[::1] order, const int64_t[::1] starts,
                   const int64_t[::1] ends, const int8_t[::1] cls):
    """Unions of the intervals of class 0, 1 and 2 (compute, comm, memory) in one pass.

    ``order`` lists the rows to use, sorted by start; rows are read in place (no gathered
    copies). Empty intervals are dropped. Returns ``(c_s, c_e, m_s, m_e, x_s, x_e)``.
    """
    cdef Py_ssize_t n = order.shape[0], i, k
    cdef int64_t r, s, e, prev = INT64_MIN
    cdef int8_t c
    outs = [np.empty(n + 1, dtype=np.int64) for _ in range(6)]
    cdef int64_t[::1] b0 = outs[0], b1 = outs[1], b2 = outs[2], b3 = outs[3], b4 = outs[4], b5 = outs[5]
    cdef int64_t* os_[3]
    cdef int64_t* oe[3]
    cdef Py_ssize_t cnt[3]
    cdef int64_t cur_s[3]
    cdef int64_t cur_e[3]
    cdef bint open_[3]
    cdef int bad = 0
    os_[0] = &b0[0]
    oe[0] = &b1[0]
    os_[1] = &b2[0]
    oe[1] = &b3[0]
    os_[2] = &b4[0]
    oe[2] = &b5[0]
    for k in range(3):
        cnt[k] = 0
        open_[k] = False
        cur_s[k] = 0
        cur_e[k] = 0
    with nogil:
        for i in range(n):
            r = order[i]
            s = starts[r]
            e = ends[r]
            if s < prev:
                bad = 1
                break
            prev = s
            if e <= s:
                continue
            c = cls[r]
            if c < 0 or c > 2:
                bad = 2
                break
            if open_[c] and s <= cur_e[c]:
                if e > cur_e[c]:
                    cur_e[c] = e
                continue
            if open_[c]:
                os_[c][cnt[c]] = cur_s[c]
                oe[c][cnt[c]] = cur_e[c]
                cnt[c] += 1
            open_[c] = True
            cur_s[c] = s
            cur_e[c] = e
        for k in range(3):
            if open_[k]:
                os_[k][cnt[k]] = cur_s[k]
                oe[k][cnt[k]] = cur_e[k]
                cnt[k] += 1
    if bad == 1:
        raise ValueError("union_by_class: order is not sorted by start")
    if bad == 2:
        raise ValueError("union_by_class: classes must be 0, 1 or 2")
    return (outs[0][:cnt[0]], outs[1][:cnt[0]], outs[2][:cnt[1]], outs[3][:cnt[1]],
            outs[4][:cnt[2]], outs[5][:cnt[2]])


def first_per_start(const int64_t[::1] order, const int64_t[::1] starts,
                    const int64_t[::1] lstart, const int64_t[::1] corr):
    """Candidates for the op that ends an idle gap.

    ``order`` lists the non-empty GPU ops of one device sorted by start; ``starts``,
    ``lstart`` (launch-call start, ``NO_LAUNCH`` when unknown) and ``corr`` are full
    columns read in place. Returns, per distinct start, the row of the op chosen among
    those starting there: earliest launch call first (unknown launches last), then
    lowest correlation id, then the first in ``order`` (the caller orders ties by content,
    so that the choice never depends on the input's row order).
    """
    cdef Py_ssize_t n = order.shape[0], i, k = -1
    out_arr = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] out = out_arr
    cdef int64_t best_l = 0, best_c = 0, best_r = 0, l, c, r, cur = 0
    with nogil:
        for i in range(n):
            r = order[i]
            l = lstart[r]
            if l == NO_LAUNCH:
                l = NEVER
            c = corr[r]
            if k < 0 or starts[r] != cur:
                if k >= 0 and starts[r] < cur:
                    with gil:
                        raise ValueError("first_per_start: order is not sorted by start")
                k += 1
                cur = starts[r]
                best_l = l
                best_c = c
                best_r = r
            elif l < best_l or (l == best_l and c < best_c):
                best_l = l
                best_c = c
                best_r = r
            out[k] = best_r
    return out_arr[:k + 1]


def sweep(const int64_t[::1] c_s, const int64_t[::1] c_e,
          const int64_t[::1] m_s, const int64_t[::1] m_e,
          const int64_t[::1] x_s, const int64_t[::1] x_e):
    """Label the timeline from the sets C (compute), M (comm) and X (memory).

    Returns the busy segments ``(start, end, label)``: sorted, disjoint, adjacent ones of
    equal label merged; label 0 compute (C, not M), 1 comm_overlapped (C and M),
    2 comm_exposed (M, not C), 3 memory (X only). Everything else is idle.
    """
    cdef Py_ssize_t nc = c_s.shape[0], nm = m_s.shape[0], nx = x_s.shape[0]
    cdef Py_ssize_t cap = 2 * (nc + nm + nx) + 1, k = 0
    cdef Py_ssize_t ic = 0, im = 0, ix = 0
    cdef bint inc = False, inm = False, inx = False
    cdef int64_t t, nt, seg_start = 0
    cdef int8_t lab, cur = -1
    ss_arr = np.empty(cap, dtype=np.int64)
    se_arr = np.empty(cap, dtype=np.int64)
    sl_arr = np.empty(cap, dtype=np.int8)
    cdef int64_t[::1] ss = ss_arr, se = se_arr
    cdef int8_t[::1] sl = sl_arr
    with nogil:
        while True:
            t = NEVER
            if ic < nc:
                nt = c_e[ic] if inc else c_s[ic]
                if nt < t:
                    t = nt
            if im < nm:
                nt = m_e[im] if inm else m_s[im]
                if nt < t:
                    t = nt
            if ix < nx:
                nt = x_e[ix] if inx else x_s[ix]
                if nt < t:
                    t = nt
            if t == NEVER:
                break
            if ic < nc and (c_e[ic] if inc else c_s[ic]) == t:
                if inc:
                    ic += 1
                inc = not inc
            if im < nm and (m_e[im] if inm else m_s[im]) == t:
                if inm:
                    im += 1
                inm = not inm
            if ix < nx and (x_e[ix] if inx else x_s[ix]) == t:
                if inx:
                    ix += 1
                inx = not inx
            if inc:
                lab = 1 if inm else 0
            elif inm:
                lab = 2
            elif inx:
                lab = 3
            else:
                lab = -1
            if lab != cur:
                if cur >= 0 and t > seg_start:
                    if k > 0 and sl[k - 1] == cur and se[k - 1] == seg_start:
                        se[k - 1] = t
                    else:
                        ss[k] = seg_start
                        se[k] = t
                        sl[k] = cur
                        k += 1
                cur = lab
                seg_start = t
    return ss_arr[:k], se_arr[:k], sl_arr[:k]


cdef inline Py_ssize_t _first_op_at_or_after(const int64_t[::1] k_op, const int64_t[::1] starts,
                                             int64_t x) noexcept nogil:
    """Index into ``k_op`` (rows sorted by distinct start) of the first op starting >= x."""
    cdef Py_ssize_t lo = 0, hi = k_op.shape[0], mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if starts[k_op[mid]] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline int64_t _split_gap(int64_t g0, int64_t g1, int64_t ls, int64_t le,
                               int64_t[:, ::1] out, Py_ssize_t w) noexcept nogil:
    """Add the idle gap [g0, g1) to row ``w`` split per the contract, given the start and
    end of the launch call of the op that ends it; returns the end of its host_bound part.
    ``[g0, a)`` host_bound, ``[a, b)`` launch_overhead, ``[b, g1)`` device_wait with
    ``a = min(g1, ls)``, ``b = max(a, min(g1, le + PICKUP))``."""
    cdef int64_t a, b
    if ls == NO_LAUNCH:
        out[w, 7] += g1 - g0
        return g0
    if ls > g0:
        a = ls if ls < g1 else g1
        b = le + PICKUP if le < g1 - PICKUP else g1
        if b < a:
            b = a
        out[w, 4] += a - g0
        out[w, 5] += b - a
        out[w, 6] += g1 - b
        return a
    out[w, 6] += g1 - g0
    return g0


def _grow(arr, Py_ssize_t used, Py_ssize_t cap):
    """A larger buffer holding ``arr[:used]``; untouched pages cost no memory."""
    out = np.empty(cap, dtype=arr.dtype)
    out[:used] = arr[:used]
    return out


def partition_windows(const int64_t[::1] w_s, const int64_t[::1] w_e,
                      const int64_t[::1] s_s, const int64_t[::1] s_e, const int8_t[::1] s_l,
                      const int64_t[::1] k_op, const int64_t[::1] starts,
                      const int64_t[::1] lstart, const int64_t[::1] lend,
                      bint want_gaps=False):
    """The eight-label partition of each window ``[w_s, w_e)`` of one device.

    ``s_*`` are the busy segments from :func:`sweep`; ``k_op`` comes from
    :func:`first_per_start` and indexes the full ``starts``/``lstart``/``lend`` columns
    (``lend``: the launch call's end, read only where ``lstart`` is known). Returns an
    int64 array ``[n_windows, 8]`` whose rows sum to the window lengths; with
    ``want_gaps`` also the idle gaps that have a host_bound part, as arrays
    ``(window, g0, g1, host_bound_end, op)`` (``op``: the row that ends the gap).
    Cost: a binary search per window and per gap plus the segments each window covers.
    """
    cdef Py_ssize_t nw = w_s.shape[0], ns = s_s.shape[0], nk = k_op.shape[0]
    cdef Py_ssize_t w, i, ng = 0, cap_g = 0, j
    cdef int64_t cur, a, b, hb, ls, le
    out_arr = np.zeros((nw, 8), dtype=np.int64)
    cdef int64_t[:, ::1] out = out_arr
    bufs = [np.empty(0, dtype=np.int64) for _ in range(5)]
    cdef int64_t[::1] gw = bufs[0], g0v = bufs[1], g1v = bufs[2], ghv = bufs[3], gkv = bufs[4]
    for w in range(nw):
        if w_e[w] < w_s[w]:
            raise ValueError(f"window {w} ends before it starts")
        # gaps in this window <= the segments it overlaps + 1
        j = _first_ge(s_s, w_e[w]) - _first_gt(s_e, w_s[w]) + 1
        if want_gaps and ng + j + 1 > cap_g:
            cap_g = 2 * (ng + j + 1)
            bufs = [_grow(x, ng, cap_g) for x in bufs]
            gw = bufs[0]
            g0v = bufs[1]
            g1v = bufs[2]
            ghv = bufs[3]
            gkv = bufs[4]
        with nogil:
            cur = w_s[w]
            i = _first_gt(s_e, cur)
            while cur < w_e[w]:
                if i < ns and s_s[i] < w_e[w]:
                    a = s_s[i] if s_s[i] > cur else cur
                    b = s_e[i] if s_e[i] < w_e[w] else w_e[w]
                else:
                    a = w_e[w]
                    b = w_e[w]
                if a > cur:  # an idle gap [cur, a)
                    j = _first_op_at_or_after(k_op, starts, a)
                    ls = lstart[k_op[j]] if j < nk else NO_LAUNCH
                    le = lend[k_op[j]] if j < nk else NO_LAUNCH
                    hb = _split_gap(cur, a, ls, le, out, w)
                    if want_gaps and hb > cur:
                        gw[ng] = w
                        g0v[ng] = cur
                        g1v[ng] = a
                        ghv[ng] = hb
                        gkv[ng] = k_op[j]
                        ng += 1
                if b > a:
                    out[w, s_l[i]] += b - a
                cur = b if b > a else a
                i += 1
    if want_gaps:
        return out_arr, tuple(x[:ng] for x in bufs)
    return out_arr


cdef inline Py_ssize_t _bin_of(const int64_t* b, Py_ssize_t nb, int64_t p,
                               Py_ssize_t h) noexcept nogil:
    """The number of boundaries ``b[0:nb]`` (ascending) that are <= p, tried first at the
    hint ``h`` (launches come in time order, so consecutive ops mostly share a bin)."""
    cdef Py_ssize_t lo = 0, hi = nb, mid
    if (h == 0 or b[h - 1] <= p) and (h == nb or p < b[h]):
        return h
    while lo < hi:
        mid = (lo + hi) >> 1
        if b[mid] <= p:
            lo = mid + 1
        else:
            hi = mid
    return lo


def project_threads(const int64_t[::1] api_row, const int32_t[::1] api_thread,
                    const int64_t[::1] api_start, const int64_t[::1] op_start,
                    const int64_t[::1] op_end, const int32_t[::1] t_slot,
                    const int64_t[::1] b, const int64_t[::1] b_off,
                    const int64_t[::1] q_lo, const int64_t[::1] q_hi):
    """Projection of launches onto ranges in one pass over the ops, read in place.

    Op ``i`` is launched by API call ``api_row[i]`` (< 0: none), on thread
    ``api_thread[row]`` at ``api_start[row]``. Each thread with ranges has a slot ``s =
    t_slot[thread]`` (< 0, or a thread outside ``t_slot``: none) and the ascending distinct
    boundaries ``b[b_off[s]:b_off[s + 1]]`` of its ranges; they cut its time into bins (bin
    ``k`` of the slot: launches with ``k`` boundaries at or before them), numbered across
    slots from ``b_off[s] + s``. Per bin: the ops launched in it, their least start and
    greatest end. Range ``j`` covers the bins ``[q_lo[j], q_hi[j])`` (its launches: start
    <= launch < end). Returns per range (count, earliest start, latest end), all 0 when
    it launched nothing; ranges may overlap or nest (a segment tree answers each)."""
    cdef Py_ssize_t n = api_row.shape[0], n_slots = b_off.shape[0] - 1, m = q_lo.shape[0]
    cdef Py_ssize_t n_t = t_slot.shape[0], i, s, k, nb, size, lo, hi, g
    cdef Py_ssize_t n_api = api_thread.shape[0]
    cdef int64_t r, c, mn, mx
    cdef int32_t t
    cdef const int64_t* bp = &b[0] if b.shape[0] else NULL
    cdef bint bad = 0
    if (api_start.shape[0] != n_api or op_start.shape[0] != n or op_end.shape[0] != n
            or q_hi.shape[0] != m or n_slots < 0):
        raise ValueError("project_threads: columns differ in length")
    if b_off[0] != 0 or b_off[n_slots] != b.shape[0]:
        raise ValueError("project_threads: b_off does not cut b")
    for s in range(n_slots):
        if b_off[s + 1] < b_off[s]:
            raise ValueError("project_threads: b_off does not cut b")
    for i in range(n_t):
        if t_slot[i] >= n_slots:
            raise ValueError("project_threads: a thread's slot is out of range")
    size = b.shape[0] + n_slots  # bins in all
    for i in range(m):
        if q_lo[i] < 0 or q_hi[i] > size or q_hi[i] < q_lo[i]:
            raise ValueError("project_threads: a range's bins are out of bounds")
    count_arr = np.zeros(m, dtype=np.int64)
    first_arr = np.zeros(m, dtype=np.int64)
    last_arr = np.zeros(m, dtype=np.int64)
    cdef int64_t[::1] count = count_arr, first = first_arr, last = last_arr
    if m == 0 or size == 0:
        return count_arr, first_arr, last_arr
    # per bin (leaves of the trees at size + bin): count, least start, greatest end
    cnt_arr = np.zeros(size + 1, dtype=np.int64)
    mn_arr = np.full(2 * size, INT64_MAX, dtype=np.int64)
    mx_arr = np.full(2 * size, INT64_MIN, dtype=np.int64)
    hint_arr = np.zeros(n_slots + 1, dtype=np.int64)
    cdef int64_t[::1] cnt = cnt_arr, tmn = mn_arr, tmx = mx_arr, hint = hint_arr
    with nogil:
        for i in range(n):
            r = api_row[i]
            if r < 0:
                continue
            if r >= n_api:
                bad = 1
                break
            t = api_thread[r]
            if t < 0 or t >= n_t:
                continue
            s = t_slot[t]
            if s < 0:
                continue
            nb = b_off[s + 1] - b_off[s]
            k = _bin_of(bp + b_off[s], nb, api_start[r], hint[s])
            hint[s] = k
            g = b_off[s] + s + k
            cnt[g + 1] += 1
            if op_start[i] < tmn[size + g]:
                tmn[size + g] = op_start[i]
            if op_end[i] > tmx[size + g]:
                tmx[size + g] = op_end[i]
    if bad:
        raise ValueError("project_threads: an API row is out of range")
    with nogil:
        for g in range(size):  # prefix counts: cnt[g] = ops in the bins before g
            cnt[g + 1] += cnt[g]
        for g in range(size - 1, 0, -1):
            tmn[g] = tmn[2 * g] if tmn[2 * g] < tmn[2 * g + 1] else tmn[2 * g + 1]
            tmx[g] = tmx[2 * g] if tmx[2 * g] > tmx[2 * g + 1] else tmx[2 * g + 1]
        for i in range(m):
            c = cnt[q_hi[i]] - cnt[q_lo[i]]
            if c == 0:
                continue
            mn = INT64_MAX
            mx = INT64_MIN
            lo = q_lo[i] + size
            hi = q_hi[i] + size
            while lo < hi:  # the bottom-up walk of a segment tree over [lo, hi)
                if lo & 1:
                    if tmn[lo] < mn:
                        mn = tmn[lo]
                    if tmx[lo] > mx:
                        mx = tmx[lo]
                    lo += 1
                if hi & 1:
                    hi -= 1
                    if tmn[hi] < mn:
                        mn = tmn[hi]
                    if tmx[hi] > mx:
                        mx = tmx[hi]
                lo >>= 1
                hi >>= 1
            count[i] = c
            first[i] = mn
            last[i] = mx
    return count_arr, first_arr, last_arr
