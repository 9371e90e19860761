# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
"""The replay loop of pytimings.analysis.replay: re-time one window's GPU ops and host
syncs from their dependencies, in an order where every dependency comes first.

Events are processed in ``order``: ``0 <= e < n`` is GPU op ``e``, ``e < 0`` is sync call
``-e - 1``, ``e >= n`` the completion of collective op ``e - n`` (after every member's
arrival: see below). An op starts at the latest of its stream predecessor's end, its cross-stream
dependency's end plus the latency observed after it, and its launch call's end (warped by
the host's gains) plus its submission delay, then its own latency ``lat`` after that; it
runs for ``dur``. A sync call that waited for op ``k`` ends ``tail`` after ``k`` ends (or
after its own start, if later), and everything after it on its thread moves by the same
amount: ``gain`` is how much earlier the thread runs from then on.

A collective op (``c_inst[e] >= 0``, one instance across ranks) arrives when it starts:
its instance's latest arrival, on the aligned clock (``start - c_off``), is kept; at its
completion it ends no earlier than that latest arrival (back on its rank's clock, less
``c_excess``, the measured part of the gap the contract's wait does not cover) plus its
transfer time, and no earlier than its own start plus that transfer. ``inst_fixed``: per
instance the latest aligned arrival of members outside this replay (or NONE).
"""

from libc.stdint cimport int64_t

import numpy as np

cdef int64_t NONE = -(2**63)


def replay(
    const int64_t[::1] order,
    const int64_t[::1] end0,
    # per op
    const int64_t[::1] dur,
    const int64_t[::1] lat,
    const int64_t[::1] pred,
    const int64_t[::1] pred_end_fixed,
    const int64_t[::1] dep,
    const int64_t[::1] dep_end_fixed,
    const int64_t[::1] dep_lat,
    const int64_t[::1] launch_ready,
    const int64_t[::1] launch_sync,
    const int64_t[::1] start_fixed,
    # per sync
    const int64_t[::1] s_start_w,
    const int64_t[::1] s_end_w,
    const int64_t[::1] s_prev,
    const int64_t[::1] s_wait,
    const int64_t[::1] s_wait_end_fixed,
    const int64_t[::1] s_tail,
    # per op: its collective instance (-1 none), rank clock offset, excess, transfer
    const int64_t[::1] c_inst,
    const int64_t[::1] c_off,
    const int64_t[::1] c_excess,
    const int64_t[::1] c_transfer,
    const int64_t[::1] inst_fixed,
):
    """Returns (op start, op end, op binding, sync end, sync gain): binding is 0 stream
    predecessor, 1 cross-stream dependency, 2 launch, 3 fixed start. ``end0``: the
    measured ends, what an op not yet replayed is taken to end at."""
    cdef Py_ssize_t n = dur.shape[0], m = s_start_w.shape[0], i, e, j, k
    start_a = np.empty(n, np.int64)
    end_a = np.array(end0, dtype=np.int64)
    bind_a = np.empty(n, np.int8)
    s_end_a = np.empty(m, np.int64)
    gain_a = np.zeros(m, np.int64)
    inst_a = np.array(inst_fixed, dtype=np.int64)
    cdef int64_t[::1] start = start_a, end = end_a, s_end = s_end_a, gain = gain_a
    cdef int64_t[::1] inst_last = inst_a
    cdef signed char[::1] bind = bind_a
    cdef int64_t v, best, g, s0, w
    cdef signed char b
    with nogil:
        for i in range(order.shape[0]):
            e = order[i]
            if e >= n:  # a collective's completion
                k = e - n
                v = start[k] + c_transfer[k]
                w = inst_last[c_inst[k]]
                if w != NONE and w + c_off[k] - c_excess[k] + c_transfer[k] > v:
                    v = w + c_off[k] - c_excess[k] + c_transfer[k]
                end[k] = v
            elif e >= 0:
                if start_fixed[e] != NONE:
                    start[e] = start_fixed[e]
                    end[e] = start[e] + dur[e]
                    bind[e] = 3
                    continue
                best = NONE
                b = 3
                k = pred[e]
                v = end[k] if k >= 0 else pred_end_fixed[e]
                if v != NONE:
                    best = v
                    b = 0
                k = dep[e]
                v = end[k] if k >= 0 else dep_end_fixed[e]
                if v != NONE:
                    v = v + dep_lat[e]
                    if v > best:
                        best = v
                        b = 1
                if launch_ready[e] != NONE:
                    j = launch_sync[e]
                    g = gain[j] if j >= 0 else 0
                    v = launch_ready[e] - g
                    if v > best:
                        best = v
                        b = 2
                start[e] = best + lat[e]
                end[e] = start[e] + dur[e]
                bind[e] = b
                k = c_inst[e]
                if k >= 0 and (inst_last[k] == NONE or start[e] - c_off[e] > inst_last[k]):
                    inst_last[k] = start[e] - c_off[e]
            else:
                j = -e - 1
                g = gain[s_prev[j]] if s_prev[j] >= 0 else 0
                s0 = s_start_w[j] - g
                k = s_wait[j]
                w = end[k] if k >= 0 else s_wait_end_fixed[j]
                if w == NONE:  # waited for nothing: a plain host activity
                    s_end[j] = s_end_w[j] - g
                else:
                    s_end[j] = (w if w > s0 else s0) + s_tail[j]
                gain[j] = s_end_w[j] - s_end[j]
    return start_a, end_a, bind_a, s_end_a, gain_a
