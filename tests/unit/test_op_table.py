"""The per-op table: GPU ops charged to the innermost cpu_op around their launch call,
grouped per (op, shapes), categories whose busy split sums exactly to the busy time."""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np
import pytest
from helpers.synth import make_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimings._native import _optable
from pytimings.analysis.attribution import attribute
from pytimings.analysis.launches import link_launches
from pytimings.analysis.op_launch import GRAPH, NO_OP, id_spaces, launching_ops, nvtx_op, op_ids
from pytimings.analysis.op_table import op_table
from pytimings.analysis.partition import BUSY_LABELS
from pytimings.ingest.names import short_kernel_name
from pytimings.model.trace import ActivityKind, RangeKind
from pytimings.report.ops_text import render_ops

MM = json.dumps([[[8, 4], [4, 2]], ["float", "float"], ["", ""], [[4, 1], [2, 1]]])


def _trace():
    # thread 0: aten::linear [0, 100) > aten::mm [10, 60) launching k1 (launch at 20) and
    # k2 (launch at 40); aten::add [60, 90) launching k3; a launch at 95 inside only
    # aten::linear... which is the innermost there; a graph launch at 97 (k5, k6)
    host_ops = [
        {"name": "aten::linear", "start": 0, "end": 100},
        {"name": "aten::mm", "start": 10, "end": 60, "args": MM},
        {"name": "aten::add", "start": 60, "end": 90},
        {"name": "aten::mm", "start": 200, "end": 260, "args": MM},
    ]
    api = [
        {"start": 20, "end": 25, "correlation": 1},
        {"start": 40, "end": 45, "correlation": 2},
        {"start": 70, "end": 75, "correlation": 3},
        {"start": 95, "end": 96, "correlation": 4},
        {"start": 97, "end": 98, "correlation": 5, "name": "cudaGraphLaunch"},
        {"start": 210, "end": 215, "correlation": 6},
        {"start": 300, "end": 305, "correlation": 7},  # inside no op
    ]
    ops = [
        {"name": "sm90_gemm", "start": 1000, "end": 1100, "correlation": 1},
        {"name": "sm90_gemm", "start": 1050, "end": 1200, "correlation": 2},  # overlaps k1
        {"name": "elementwise_kernel", "start": 1200, "end": 1230, "correlation": 3},
        {"name": "reduce_kernel", "start": 1300, "end": 1310, "correlation": 4},
        {"name": "g1", "start": 1400, "end": 1420, "correlation": 5},
        {"name": "g2", "start": 1420, "end": 1450, "correlation": 5},
        {"name": "sm90_gemm", "start": 1500, "end": 1600, "correlation": 6},
        {"name": "sm90_gemm", "start": 1700, "end": 1710, "correlation": 7},
    ]
    return make_trace(ops, api, host_ops=host_ops)


def test_innermost_rows_picks_the_latest_start_that_encloses():
    s = np.array([0, 10, 12, 60], np.int64)
    e = np.array([100, 60, 15, 90], np.int64)
    g = np.zeros(4, np.int32)
    q_s = np.array([11, 13, 20, 61, 95, 120], np.int64)
    q_e = np.array([12, 14, 21, 62, 96, 121], np.int64)
    got = _optable.innermost_rows(s, e, g, None, q_s, q_e, np.zeros(6, np.int32))
    assert got.tolist() == [1, 2, 1, 3, 0, -1]
    keep = np.array([1, 0, 1, 1], np.uint8)  # without row 1: row 0 encloses 11..21
    got = _optable.innermost_rows(s, e, g, keep, q_s, q_e, np.zeros(6, np.int32))
    assert got.tolist() == [0, 2, 0, 3, 0, -1]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 30), st.integers(0, 30)), max_size=25),
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40), st.integers(0, 5)), max_size=15),
    st.sampled_from(["rows", "runs"]),
)
def test_innermost_rows_matches_brute_force(acts, queries, layout):
    # a few activities come in few sorted runs (merged on the fly, no sort); runs: sorted
    # by (thread, start) in at most 3 runs
    if layout == "runs":
        k = len(acts) // 3
        acts = sorted(acts[:k]) + sorted(acts[k : 2 * k]) + sorted(acts[2 * k :])
    a_g = np.array([a[0] for a in acts], np.int32)
    a_s = np.array([a[1] for a in acts], np.int64)
    a_e = a_s + np.array([a[2] for a in acts], np.int64)
    q_g = np.array([q[0] for q in queries], np.int32)
    q_s = np.array([q[1] for q in queries], np.int64)
    q_e = q_s + np.array([q[2] for q in queries], np.int64)
    keep = (np.arange(len(acts)) % 2 == 0).astype(np.uint8)
    got = _optable.innermost_rows(a_s, a_e, a_g, keep, q_s, q_e, q_g)
    # a sweep over both sorted, or an index of the activities searched per query: alike
    for method in ("sweep", "index"):
        assert (_optable.innermost_rows(a_s, a_e, a_g, keep, q_s, q_e, q_g, method) == got).all()
    for q in range(len(queries)):
        inside = [
            r
            for r in np.flatnonzero(keep).tolist()
            if a_g[r] == q_g[q] and a_s[r] <= q_s[q] and q_e[q] <= a_e[r]
        ]
        best = max(inside, key=lambda r: (a_s[r], -a_e[r], r), default=-1)
        assert got[q] == best


@pytest.mark.parametrize(
    ("first_start", "n"),
    [(0, 3000), (0, 30_000), (-(2**57), 30_000), (-(2**62), 3000), (-(2**57), 300_000)],
)
def test_innermost_rows_of_many_unsorted_activities(first_start, n):
    # more sorted runs than are merged: 3000 rows in random order sorted by insertion into
    # tens of segments; 30k: more segments than are merged, a bucket sort into int32 rows;
    # with one activity from -2**57 on, every other row in one bucket per thread (30k rows:
    # merge-sorted there; 300k: buckets this big make it sort packed keys instead); from
    # -2**62 (keys wider than 64 bits), lexsort
    rng = np.random.default_rng(7)
    a_g = rng.integers(0, 3, n).astype(np.int32)
    a_s = rng.integers(0, 2000, n).astype(np.int64)
    a_e = a_s + rng.integers(0, 300, n)
    a_s[0], a_e[0] = first_start, 2**62
    q_g = rng.integers(0, 3, 400).astype(np.int32)
    q_s = rng.integers(0, 2000, 400).astype(np.int64)
    q_e = q_s + rng.integers(0, 20, 400)
    keep = (rng.random(n) < 0.7).astype(np.uint8)
    got = _optable.innermost_rows(a_s, a_e, a_g, keep, q_s, q_e, q_g)
    assert (_optable.innermost_rows(a_s, a_e, a_g, keep, q_s, q_e, q_g, "index") == got).all()
    rows = np.arange(n)
    for q in range(400):
        inside = rows[(keep == 1) & (a_g == q_g[q]) & (a_s <= q_s[q]) & (a_e >= q_e[q])]
        want = -1
        if inside.size:  # the latest start, then the earliest end, then the later row
            want = inside[np.lexsort((-inside, a_e[inside], -a_s[inside]))[0]]
        assert got[q] == want


def _jittered(rng, n, jitter, levels):
    # ``levels`` blocks one after another, each of n rows in time order with starts
    # jittered by up to ``jitter`` rows' worth (a launch call's latency varies)
    s = np.concatenate(
        [np.arange(n) * 10 - rng.integers(0, 10 * jitter + 1, n) for _ in range(levels)]
    )
    return s.astype(np.int64)


@pytest.mark.parametrize(
    ("jitter", "levels", "threads"),
    [(3, 1, 1), (30, 3, 1), (3, 2, 2), (200, 1, 1), (2000, 1, 1)],
)
def test_innermost_rows_of_nearly_sorted_activities(jitter, levels, threads):
    # rows nearly in (thread, start) order are sorted by insertion into segments merged on
    # the fly (one per level; a jitter of 200 rows: tens of them); a jitter of 2000 rows
    # makes more segments than are merged: the bucket sort instead
    rng = np.random.default_rng(jitter + levels)
    n = 4000 // levels
    a_s = _jittered(rng, n, jitter, levels)
    a_e = a_s + rng.integers(0, 400, a_s.size)
    a_g = (
        (rng.random(a_s.size) < 0.5).astype(np.int32)
        if threads == 2
        else np.zeros(a_s.size, np.int32)
    )
    if threads == 2:  # each thread's rows one after the other
        a_g = np.sort(a_g)
    keep = (rng.random(a_s.size) < 0.8).astype(np.uint8)
    q_s = _jittered(rng, 600, jitter, 1) * (n // 600)
    q_e = q_s + rng.integers(0, 30, q_s.size)
    q_g = rng.integers(0, threads, q_s.size).astype(np.int32)
    got = _optable.innermost_rows(a_s, a_e, a_g, keep, q_s, q_e, q_g)
    assert (_optable.innermost_rows(a_s, a_e, a_g, keep, q_s, q_e, q_g, "index") == got).all()
    rows = np.arange(a_s.size)
    for q in range(q_s.size):
        inside = rows[(keep == 1) & (a_g == q_g[q]) & (a_s <= q_s[q]) & (a_e >= q_e[q])]
        want = -1
        if inside.size:  # the latest start, then the earliest end, then the later row
            want = inside[np.lexsort((-inside, a_e[inside], -a_s[inside]))[0]]
        assert got[q] == want


def _brute_innermost(a_s, a_e, a_g, keep, q_s, q_e, q_g, q):
    rows = np.arange(a_s.size)
    inside = rows[(keep == 1) & (a_g == q_g[q]) & (a_s <= q_s[q]) & (a_e >= q_e[q])]
    # the sweep also needs the activity open at the query's start (it ends at or after it)
    inside = inside[a_e[inside] >= q_s[q]]
    if inside.size == 0:
        return -1
    return inside[np.lexsort((-inside, a_e[inside], -a_s[inside]))[0]]


def _per_op(api_row, q_s, q_e, q_g):
    # each GPU op's launch call's start, end and thread (an op with none: zeros, unread)
    at = np.maximum(api_row, 0)
    if q_s.size == 0:
        return np.zeros(at.size, np.int64), np.zeros(at.size, np.int64), np.zeros(at.size, np.int32)
    return q_s[at], q_e[at], q_g[at]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 60), st.integers(-3, 40)), max_size=40),
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 70), st.integers(0, 6)), max_size=30),
    st.lists(st.tuples(st.integers(-1, 29), st.booleans()), max_size=40),
    st.integers(2, 9),
)
def test_launching_rows_in_parts_match_one_part(acts, calls, ops, parts):
    # the launch calls cut into parts answered on threads at once (split_min=1: parts even
    # for a few calls) give one part's answers, which are the brute-force innermost ones;
    # activities straddle the parts' bounds, some end before they start
    a_g = np.array([a[0] for a in acts], np.int32)
    a_s = np.array([a[1] for a in acts], np.int64)
    a_e = a_s + np.array([a[2] for a in acts], np.int64)
    keep = (np.arange(len(acts)) % 3 != 1).astype(np.uint8)
    q_g = np.array([c[0] for c in calls], np.int32)
    q_s = np.array([c[1] for c in calls], np.int64)
    q_e = q_s + np.array([c[2] for c in calls], np.int64)
    api_row = np.array([min(o[0], len(calls) - 1) for o in ops], np.int64)
    graph = np.array([o[1] for o in ops], np.uint8)
    cols = (a_s, a_e, a_g, keep, *_per_op(api_row, q_s, q_e, q_g), api_row, graph, 0, 1, 2)
    one = _optable.launching_rows(*cols, method="sweep")
    for method in ("sweep", "index"):  # the calls in key ranges, or in row ranges
        many = _optable.launching_rows(*cols, parts=parts, split_min=1, method=method)
        assert one[0].tolist() == many[0].tolist()
        assert one[1].tolist() == many[1].tolist()
    assert (_optable.launching_rows(*cols, method="index")[0] == one[0]).all()
    for i in range(len(ops)):
        if graph[i] or api_row[i] < 0:
            assert one[0][i] == -1 and one[1][i] == (2 if graph[i] else 0)
            continue
        want = _brute_innermost(a_s, a_e, a_g, keep, q_s, q_e, q_g, int(api_row[i]))
        assert one[0][i] == want
        assert one[1][i] == (-1 if want >= 0 else 1)


@pytest.mark.parametrize(("parts", "threads"), [(2, 1), (3, 2), (8, 3)])
def test_launching_rows_in_parts_of_jittered_levels(parts, threads):
    # nesting levels one after another, launch calls whose starts jitter (the benchmark's
    # shape), on several host threads: each part sorts its own share
    rng = np.random.default_rng(parts)
    n = 20_000
    base = np.sort(rng.integers(0, 10 * n, n)).astype(np.int64)
    lq = base - rng.integers(0, 60, n)
    a_s = np.concatenate([lq - 5, lq - 9, lq - 14])
    a_e = np.concatenate([lq + 8, lq + 12, lq + 20])
    a_g = np.tile(rng.integers(0, threads, n).astype(np.int32), 3)
    keep = np.repeat(np.array([1, 0, 1], np.uint8), n)
    q_g = a_g[:n]
    api_row = rng.permutation(n).astype(np.int64)
    api_row[::97] = -1
    graph = (rng.random(n) < 0.01).astype(np.uint8)
    cols = (a_s, a_e, a_g, keep, *_per_op(api_row, lq, lq + 3, q_g), api_row, graph, 0, 1, 2)
    one = _optable.launching_rows(*cols)
    for method in ("sweep", "index"):
        many = _optable.launching_rows(*cols, parts=parts, split_min=1000, method=method)
        assert (one[0] == many[0]).all() and (one[1] == many[1]).all()
    for i in rng.choice(n, 300, replace=False).tolist():
        if graph[i] or api_row[i] < 0:
            continue
        want = _brute_innermost(a_s, a_e, a_g, keep, lq, lq + 3, q_g, int(api_row[i]))
        assert one[0][i] == want


@pytest.mark.parametrize(
    ("parts", "threads"), [(1, (0, 64, 3, 200)), (3, (0, 64, 3, 200)), (2, (5, 10**8))]
)
def test_launching_rows_of_threads_interleaved_in_start_order(parts, threads):
    # a loader's tables: several threads' ops and calls in one start order (threads 0 and
    # 64 share a slot of the remembered places; ids 10**8 apart span more values than
    # there are rows), nested two deep around each call, some starts jittered
    rng = np.random.default_rng(parts + len(threads))
    n = 6000
    lq = np.sort(rng.integers(0, 40 * n, n)).astype(np.int64)
    q_g = np.asarray(threads, np.int32)[rng.integers(0, len(threads), n)]
    a_s = np.stack([lq - 9, lq - 4]).T.reshape(-1)  # outer, inner per call: start order
    a_e = np.stack([lq + 12, lq + 6]).T.reshape(-1) - rng.integers(0, 8, 2 * n)
    a_g = np.repeat(q_g, 2)
    jitter = rng.random(n) < 0.2
    q_s = lq - jitter * rng.integers(0, 3, n)
    api_row = np.arange(n, dtype=np.int64)
    api_row[::101] = -1
    cols = (a_s, a_e, a_g, None, *_per_op(api_row, q_s, q_s + 2, q_g), api_row,
            np.zeros(n, np.uint8), 0, 1, 2)  # fmt: skip
    got = _optable.launching_rows(*cols, parts=parts, split_min=1000, method="index")
    sweep = _optable.launching_rows(*cols, method="sweep")
    assert (got[0] == sweep[0]).all() and (got[1] == sweep[1]).all()
    for i in rng.choice(n, 400, replace=False).tolist():
        if api_row[i] < 0:
            assert got[0][i] == -1 and got[1][i] == 0
            continue
        want = _brute_innermost(a_s, a_e, a_g, np.ones(2 * n, np.uint8), q_s, q_s + 2, q_g, i)
        assert got[0][i] == want


def _by_id_case(seed, n=5000):
    # two id spaces (threads 0, 1: rank 0; threads 2, 3: rank 1, the same ids again), two
    # ops nested around each call; each call names its inner op's id as Kineto does
    rng = np.random.default_rng(seed)
    lq = np.arange(n, dtype=np.int64) * 40 + rng.integers(0, 10, n)  # ops of two calls apart
    q_g = rng.integers(0, 4, n).astype(np.int32)
    a_s = np.stack([lq - 9, lq - 4]).T.reshape(-1)
    a_e = np.stack([lq + 12, lq + 6]).T.reshape(-1)
    a_g = np.repeat(q_g, 2)
    a_id = np.empty(2 * n, np.int64)
    for space in (q_g < 2, q_g >= 2):  # ids from 1000 up in each space, in start order
        rows = np.flatnonzero(np.repeat(space, 2))
        a_id[rows] = 1000 + np.arange(rows.size)
    call_id = a_id[1::2].copy()
    api_row = np.arange(n, dtype=np.int64)
    api_row[::97] = -1
    graph = np.zeros(n, np.uint8)
    graph[5::89] = 1
    cols = (a_s, a_e, a_g, None, *_per_op(api_row, lq, lq + 2, q_g), api_row, graph, 0, 1, 2)
    return cols, a_id, call_id, np.array([0, 0, 1, 1], np.int32)


@pytest.mark.parametrize("parts", [1, 2, 5])
def test_launching_rows_by_id_match_the_intervals(parts):
    cols, a_id, call_id, space = _by_id_case(parts)
    want = _optable.launching_rows(*cols, method="sweep")
    got = _optable.launching_rows(*cols, parts=parts, split_min=500, a_id=a_id,
                                  call_id=call_id, space=space)  # fmt: skip
    assert (got[0] == want[0]).all() and (got[1] == want[1]).all()
    assert (got[1] == 2).sum() == (cols[8] == 1).sum() and (got[1] == 0).sum() > 0


def test_launching_rows_by_id_are_the_ids_op_where_it_is_on_the_thread_and_around():
    cols, a_id, call_id, space = _by_id_case(7)
    n = call_id.size
    asked = (cols[7] >= 0) & (cols[8] == 0)
    first = np.flatnonzero(asked)[:6]
    call_id[first[0]] = a_id[2 * first[0]]  # the outer op: the id wins (not searched)
    later = np.flatnonzero(cols[6] == cols[6][first[1]])
    later = later[later > first[-1]][0]
    call_id[first[1]] = a_id[2 * later + 1]  # an op of the call's thread not around it
    call_id[first[4]] = 10**9  # an id no op has
    call_id[first[5]] = -1  # none
    # a step-long op after all others on one call's thread, with that call's id: two ops
    # with one id, the later around the call but not innermost (that call is searched)
    # and one around everything on another thread of a call's id space, named by that call
    other = cols[6][first[3]] ^ 1
    cols = (np.append(cols[0], [0, 0]), np.append(cols[1], [10**9, 10**9]),
            np.append(cols[2], [cols[6][first[2]], other]).astype(np.int32), *cols[3:])  # fmt: skip
    a_id = np.append(a_id, [call_id[first[2]], 10**6])
    call_id[first[3]] = 10**6
    got, why = _optable.launching_rows(*cols, a_id=a_id, call_id=call_id, space=space)
    want, _ = _optable.launching_rows(*cols)
    assert want[first[2]] == 2 * first[2] + 1
    assert got[first[0]] == 2 * first[0] and want[first[0]] == 2 * first[0] + 1
    assert (got[first[1:]] == want[first[1:]]).all() and (want[first[1:]] >= 0).all()
    other = np.ones(n, bool)
    other[first[0]] = False
    assert (got[other] == want[other]).all() and (why[asked] == -1).all()
    # the other space's thread: its op of the same id is not this call's
    wrong = space.copy()
    wrong[:] = 0  # all four threads one space: every id twice, so all are searched
    got, _ = _optable.launching_rows(*cols, a_id=a_id, call_id=call_id, space=wrong)
    assert (got == want).all()


def test_op_ids_leave_the_correlation_ids_older_kineto_wrote_there():
    # pid 100: ids naming ops (the outer aten::linear for the first call: the id wins, the
    # intervals would say aten::mm); pid 200: each call's "External id" is its own
    # correlation id, naming no op (the intervals decide)
    host_ops = [
        {"name": "aten::linear", "start": 0, "end": 100, "external": 1},
        {"name": "aten::mm", "start": 10, "end": 60, "external": 2},
        {"name": "aten::linear", "start": 0, "end": 100, "thread": 1, "pid": 200, "external": 13},
        {"name": "aten::mm", "start": 10, "end": 60, "thread": 1, "pid": 200, "external": 14},
    ]
    api = [
        {"start": 20, "end": 25, "correlation": 11, "external": 1},
        {"start": 40, "end": 45, "correlation": 12, "external": 2},
        {"start": 20, "end": 25, "correlation": 13, "thread": 1, "pid": 200, "external": 13},
        {"start": 40, "end": 45, "correlation": 14, "thread": 1, "pid": 200, "external": 14},
    ]
    ops = [
        {"start": 100 * k, "end": 100 * k + 50, "correlation": 11 + k, "pid": 100 + 100 * (k > 1)}
        for k in range(4)
    ]
    threads = ({"pid": 100, "tid": 100, "name": "a"}, {"pid": 200, "tid": 200, "name": "b"})
    tr = make_trace(ops, api, host_ops=host_ops, threads=threads)
    space = id_spaces(tr)
    assert space.tolist() == [0, 1]
    assert op_ids(tr, space).tolist() == [1, 2, -1, -1]
    assert launching_ops(tr, link_launches(tr)).op_row.tolist() == [0, 1, 3, 3]
    assert launching_ops(tr, link_launches(tr), by_id=False).op_row.tolist() == [1, 1, 3, 3]
    ext = tr.api_calls["external"]
    ext[0] = 11  # half of pid 100's calls: still ids
    assert op_ids(tr, space).tolist() == [11, 2, -1, -1]
    ext[1] = 12  # all of them: no ids anywhere
    assert op_ids(tr, space) is None


def test_launching_rows_by_sparse_ids_are_all_searched():
    cols, a_id, call_id, space = _by_id_case(3, n=200)
    call_id[0], a_id[0] = 5 << 40, 5 << 40  # one id far from the others: no table
    want, _ = _optable.launching_rows(*cols)
    call_id[1:] = a_id[0::2][1:]  # every call names its outer op
    got, _ = _optable.launching_rows(*cols, a_id=a_id, call_id=call_id, space=space)
    assert (got == want).all()
    with pytest.raises(ValueError, match="id space is negative"):
        _optable.launching_rows(*cols, a_id=a_id, call_id=call_id, space=space - 1)
    with pytest.raises(ValueError, match="past the end of call_id"):
        _optable.launching_rows(*cols, a_id=a_id, call_id=call_id[:10], space=space)


@pytest.mark.parametrize("parts", [2, 3, 8])
def test_launching_rows_in_parts_under_one_long_activity(parts):
    # a step-long op around everything (a profiler step) on each thread, and short ops one
    # after another inside it: every part's top ops hang off the long one, which starts in
    # the first part; a call between two short ops is charged to the long one
    n = 4000
    lo = np.arange(n, dtype=np.int64) * 10
    a_s = np.concatenate([[0, 0], lo, lo])
    a_e = np.concatenate([[10 * n, 10 * n], lo + 6, lo + 6])
    a_g = np.concatenate([[0, 1], np.zeros(n, np.int32), np.ones(n, np.int32)]).astype(np.int32)
    q_s = np.concatenate([lo + 1, lo + 7])  # inside a short op, then between two
    q_g = np.tile((np.arange(n) % 2).astype(np.int32), 2)
    api_row = np.arange(2 * n, dtype=np.int64)
    cols = (a_s, a_e, a_g, None, q_s, q_s + 1, q_g, api_row, np.zeros(2 * n, np.uint8), 0, 1, 2)
    got, _ = _optable.launching_rows(*cols, parts=parts, split_min=1)
    short = 2 + np.arange(n) + n * q_g[:n]  # the short op on the call's own thread
    assert got[:n].tolist() == short.tolist()
    assert got[n:].tolist() == q_g[n:].tolist()  # the long op of the call's thread
    sweep, _ = _optable.launching_rows(*cols, method="sweep")
    assert (sweep == got).all()


def test_launching_rows_in_parts_when_a_thread_cannot_start(monkeypatch):
    # the second part's thread starts, the third's cannot: the started one is joined and
    # the caller gets the start's error (no hang, no partial answer)
    rng = np.random.default_rng(3)
    s = np.sort(rng.integers(0, 10_000, 3000)).astype(np.int64)
    g = np.zeros(3000, np.int32)
    cols = (s - 5, s + 9, g, None, s, s + 2, g, np.arange(3000, dtype=np.int64),
            np.zeros(3000, np.uint8), 0, 1, 2)  # fmt: skip
    start, calls = threading.Thread.start, []

    def second_fails(self):
        calls.append(self)
        if len(calls) == 2:
            raise RuntimeError("can't start new thread")
        start(self)

    monkeypatch.setattr(threading.Thread, "start", second_fails)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        _optable.launching_rows(*cols, parts=3, split_min=1)
    assert len(calls) == 2 and not calls[0].is_alive()


def test_busy_split_refuses_no_parts():
    z = np.zeros(1, np.int64)
    with pytest.raises(ValueError, match="parts"):
        _optable.busy_split(z, z, np.zeros(1, np.int8), z, 1, z, parts=0)


@pytest.mark.parametrize("parts", [1, 3])
def test_busy_split_refuses_an_order_not_by_start_or_out_of_range(parts):
    s = np.arange(0, 600, 2, dtype=np.int64)
    e, cat, pts = s + 1, np.zeros(s.size, np.int8), np.array([0, 700], np.int64)
    order = np.arange(s.size, dtype=np.int64)
    for i in (1, 100, 299):  # inside a part, at a cut (300 ops in 3 parts), at the end
        swapped = order.copy()
        swapped[[i - 1, i]] = swapped[[i, i - 1]]
        with pytest.raises(ValueError, match="not by start"):
            _optable.busy_split(s, e, cat, swapped, 1, pts, parts=parts, split_min=1)
    with pytest.raises(ValueError, match="out of range"):
        _optable.busy_split(s, e, cat, np.append(order, s.size), 1, pts, parts=parts,
                            split_min=1)  # fmt: skip


def test_innermost_rows_refuses_an_unknown_method():
    z, g = np.zeros(1, np.int64), np.zeros(1, np.int32)
    with pytest.raises(ValueError, match="method must be"):
        _optable.innermost_rows(z, z, g, None, z, z, g, "bisect")


def test_launching_rows_refuses_no_parts():
    z, g = np.zeros(1, np.int64), np.zeros(1, np.int32)
    with pytest.raises(ValueError, match="parts"):
        _optable.launching_rows(z, z, g, None, z, z, g, z, np.zeros(1, np.uint8), 0, 1, 2,
                                parts=0)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40), st.integers(-2, 20)), max_size=30),
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 50)), max_size=30),
)
def test_contains_point_matches_brute_force(acts, points):
    a_g = np.array([a[0] for a in acts], np.int32)
    a_s = np.array([a[1] for a in acts], np.int64)
    a_e = a_s + np.array([a[2] for a in acts], np.int64)
    p_g = np.array([p[0] for p in points], np.int32)
    p_t = np.array([p[1] for p in points], np.int64)
    a_keep = (np.arange(len(acts)) % 4 != 3).astype(np.uint8)
    p_keep = (np.arange(len(points)) % 3 != 2).astype(np.uint8)
    got = _optable.contains_point(a_s, a_e, a_g, a_keep, p_t, p_g, p_keep)
    for r in range(len(acts)):
        want = a_keep[r] and any(
            p_keep[j] and p_g[j] == a_g[r] and a_s[r] <= p_t[j] < a_e[r] for j in range(len(points))
        )
        assert got[r] == int(bool(want))


@pytest.mark.parametrize(("jitter", "levels"), [(3, 1), (30, 3), (200, 1), (2000, 1)])
def test_busy_split_of_nearly_sorted_ops(jitter, levels):
    # the unions read off a timeline, in one part and in three
    rng = np.random.default_rng(jitter * levels)
    s = _jittered(rng, 3000 // levels, jitter, levels) + 10 * jitter
    e = s + rng.integers(0, 25, s.size)
    cat = rng.integers(0, 4, s.size).astype(np.int8)
    pts = np.array([0, 5000, 17000, 40000], np.int64)
    order = np.argsort(s, kind="stable")
    got = _optable.busy_split(s, e, cat, order, 4, pts)
    in_parts = _optable.busy_split(s, e, cat, order, 4, pts, parts=3, split_min=100)
    assert (in_parts == got).all()
    for k in range(4):
        line = np.zeros(40000, dtype=bool)
        for i in np.flatnonzero(cat <= k).tolist():
            line[s[i] : e[i]] = True
        assert got[k].tolist() == [int(line[:p].sum()) for p in pts.tolist()]


def test_ops_rows_calls_and_attribution():
    t = op_table(attribute(_trace()))
    mm = [r for r in t.ops if r["name"] == "aten::mm"]
    assert len(mm) == 1  # two calls, one shape: one row
    assert mm[0]["calls"] == 2 and mm[0]["kernel_ns"] == 100 + 150 + 100
    assert mm[0]["input_dims"] == [[8, 4], [4, 2]] and mm[0]["input_types"] == ["float", "float"]
    assert mm[0]["gflops"] is not None and abs(mm[0]["gflops"] - 2 * 8 * 4 * 2 / 1e9) < 1e-15
    by_name = {r["name"]: r for r in t.ops}
    assert by_name["aten::add"]["kernel_ns"] == 30
    assert by_name["aten::linear"]["kernel_ns"] == 10  # the launch at 95: linear innermost
    a = t.attribution
    total = 100 + 150 + 30 + 10 + 20 + 30 + 100 + 10
    assert a["kernel_ns"] == total
    assert a["attributed_ns"] == 100 + 150 + 30 + 10 + 100
    assert a["graph_kernel_ns"] == 50 and a["graph_attributed_ns"] == 0
    why = {u["reason"]: u["kernel_ns"] for u in a["unattributed"]}
    assert why == {GRAPH: 50, NO_OP: 10}
    assert a["attributed_ns"] + sum(why.values()) == a["kernel_ns"]


def test_categories_busy_split_sums_exactly_to_the_busy_time():
    t = op_table(attribute(_trace()))
    busy = sum(c["busy_ns"] for c in t.categories)
    # union of the GPU ops: [1000,1230) [1300,1310) [1400,1450) [1500,1600) [1700,1710)
    assert busy == 230 + 10 + 50 + 100 + 10 == t.attribution["busy_ns"]
    assert abs(sum(c["share"] for c in t.categories) - 1) < 1e-12
    gemm = next(c for c in t.categories if c["category"] == "gemm")
    # the reduce kernel aten::linear launched is a gemm op's (linear is a GEMM family)
    assert gemm["kernel_ns"] == 100 + 150 + 100 + 10 + 10
    assert gemm["busy_ns"] == 200 + 10 + 100 + 10
    for w in t.window_categories:
        assert sum(c["busy_ns"] for c in w) == busy  # one window: the whole trace


def test_an_op_running_into_a_window_from_before_it_makes_it_busy():
    # a kernel launched before the step [1240, 1250) runs [1150, 1320): no window reports
    # it (it starts before the step), yet the step's busy time is its 10 ns there
    tr = _trace()
    tr = make_trace(
        [*({"name": tr.strings[int(n)], "start": int(s), "end": int(e), "correlation": int(c)}
           for n, s, e, c in zip(tr.gpu_ops["name"], tr.gpu_ops["start"], tr.gpu_ops["end"],
                                 tr.gpu_ops["correlation"], strict=True)),
         {"name": "sm90_gemm", "start": 1150, "end": 1320, "correlation": 99}],
        [{"start": 5, "end": 6, "correlation": 99}],
        ranges=[{"name": "step", "start": 1240, "end": 1250}],
    )  # fmt: skip
    a = attribute(tr, by="step")
    t = op_table(a)
    busy = sum(int(a.windows[f"{x}_ns"][0]) for x in BUSY_LABELS)
    assert sum(c["busy_ns"] for c in t.window_categories[0]) == busy > 0
    assert sum(c["kernel_ns"] for c in t.window_categories[0]) < busy  # not reported


def test_nvtx_emit_text():
    t = nvtx_op("aten::mm, seq = 12, op_id = 3, sizes = [[8, 4], [4, 2]], input_op_ids = [(1, 0)]")
    assert t.name == "aten::mm" and t.input_dims == [[8, 4], [4, 2]]
    assert nvtx_op("decode_step").name == "decode_step"


def test_without_cpu_ops_or_op_ranges_each_gpu_op_is_charged_to_its_own_name():
    tr = _trace()
    tr.host_ops["kind"][:] = ActivityKind.PYTHON  # no cpu_op: NVTX ranges (none here)
    t = op_table(attribute(tr))
    a = t.attribution
    # all but the graph-replayed ops (no capture to match: those stay unattributed)
    assert a["source"] == "nvtx" and [u["code"] for u in a["unattributed"]] == ["graph_no_capture"]
    graph_ns = a["unattributed"][0]["kernel_ns"]
    assert a["attributed_ns"] == a["kernel_ns"] - graph_ns > 0
    assert a["charged_by"] == {"op": 0, "graph_capture": 0, "kernel_name": a["attributed_ns"]}
    ops = tr.gpu_ops
    want: dict[str, int] = {}
    graph = link_launches(tr).graph
    for n, s, e, g in zip(ops["name"], ops["start"], ops["end"], graph, strict=True):
        if g:
            continue
        key = f"(no op) {short_kernel_name(tr.strings[int(n)])}"
        want[key] = want.get(key, 0) + int(e - s)
    assert {r["name"]: r["kernel_ns"] for r in t.ops} == want


def test_nsight_ops_outside_every_op_range_are_charged_to_their_kernels_name():
    # Nsight: one NVTX range around the first launch; the second launch has none around it
    ops = [
        {
            "name": "nvjet_sm90_tst_128x64_64x4_1x2_h_bz_NNT",
            "start": 100,
            "end": 300,
            "correlation": 1,
        },
        {
            "name": "nvjet_sm90_tst_128x64_64x4_1x2_h_bz_NNT",
            "start": 300,
            "end": 450,
            "correlation": 2,
        },
        {"name": "elementwise_kernel", "start": 450, "end": 500, "correlation": 3},
    ]
    api = [
        {"start": 10, "end": 12, "correlation": 1},
        {"start": 40, "end": 42, "correlation": 2},
        {"start": 50, "end": 52, "correlation": 3},
    ]
    ranges = [{"name": "bench_iter", "start": 5, "end": 20, "kind": RangeKind.NVTX_PUSHPOP}]
    t = op_table(attribute(make_trace(ops, api, ranges=ranges)))
    a = t.attribution
    assert a["charged_by"] == {"op": 200, "graph_capture": 0, "kernel_name": 150 + 50}
    rows = {r["name"]: r for r in t.ops}
    assert rows["bench_iter"]["kernel_ns"] == 200
    assert rows["(no op) nvjet_sm90_tst_128x64_64x4_1x2_h_bz_NNT"]["kernel_ns"] == 150
    assert (
        rows["(no op) nvjet_sm90_tst_128x64_64x4_1x2_h_bz_NNT"]["category"] == "gemm"
    )  # its kernel's category
    assert a["unattributed"] == []
    text = render_ops(t, 10)
    assert "the kernel's own name (no op range around the launch" in text


def test_kineto_record_shapes_args_load_interned(tmp_path):
    args = {"Input Dims": [[8, 4], [4, 2]], "Input type": ["float", "float"], "External id": 1}
    ev = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": 10,
            "dur": 50,
            "args": {**args, "External id": i},
        }
        for i in range(3)
    ] + [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::add",
            "pid": 1,
            "tid": 1,
            "ts": 70,
            "dur": 5,
            "args": {"External id": 9},
        },
    ]
    p = tmp_path / "t.json"
    p.write_text(
        json.dumps(
            {"traceEvents": ev, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}
        )
    )
    from pytimings.ingest.kineto import load_kineto

    tr = load_kineto(str(p))
    ids = tr.host_ops["args"]
    mm = tr.host_ops["name"] == tr.strings.index("aten::mm")
    assert len(set(ids[mm].tolist())) == 1 and ids[~mm].tolist() == [0]  # one text, shared
    dims, types, concrete, strides = json.loads(tr.strings[int(ids[mm][0])])
    assert dims == [[8, 4], [4, 2]] and types == ["float", "float"]
    assert concrete is None and strides is None


def test_a_copy_over_a_link_claims_no_hbm_roofline():
    # aten::copy_ of 2 MiB bf16: host-to-device (over PCIe, not HBM: no bound) and, of
    # another shape, device-to-device (HBM: memory-bound, 4 MiB moved in 10 us = 0.42 TB/s
    # of the GPU's 2 TB/s)
    from pytimings.analysis.ops import GpuSpec
    from pytimings.model.trace import CopyKind, OpKind

    def cp(m: int, n: int) -> str:
        return json.dumps([[[m, n], [m, n]], ["c10::BFloat16"] * 2, ["", ""], None])

    host_ops = [
        {"name": "aten::copy_", "start": 0, "end": 50, "args": cp(1024, 1024)},
        {"name": "aten::copy_", "start": 100, "end": 150, "args": cp(512, 2048)},
    ]
    api = [
        {"start": 10, "end": 20, "correlation": 1, "name": "cudaMemcpyAsync"},
        {"start": 110, "end": 120, "correlation": 2, "name": "cudaMemcpyAsync"},
    ]
    ops = [
        {"name": "memcpy", "kind": OpKind.MEMCPY, "copy_kind": kind, "bytes": 2 << 20,
         "start": 1000 + 20_000 * i, "end": 11_000 + 20_000 * i, "correlation": i + 1}
        for i, kind in enumerate((CopyKind.HTOD, CopyKind.DTOD))
    ]  # fmt: skip
    t = op_table(
        attribute(make_trace(ops, api, host_ops=host_ops)), GpuSpec("g", {"bf16": 1000.0}, 2.0)
    )
    by_dims = {r["input_dims"][0][0]: r for r in t.ops}
    htod, dtod = by_dims[1024], by_dims[512]
    assert htod["category"] == dtod["category"] == "memcpy"
    assert (htod["bound"], htod["roofline_fraction"]) == (None, None)
    assert htod["tb_s"] == pytest.approx(4 * 2**20 / 10_000 / 1e3)  # the rate stays
    assert dtod["bound"] == "memory"
    assert dtod["roofline_fraction"] == pytest.approx(4 * 2**20 / 10_000 / 1e3 / 2.0)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2**62), max_size=200), st.integers(1, 5000))
def test_grouping_kernels_match_numpy(values, spread):
    from pytimings._native import _stats

    keys = np.array(values, np.int64) % spread  # few distinct keys, or many (grows the table)
    uniq, inv = _stats.factorize(keys)
    want_u, want_inv = np.unique(keys, return_inverse=True)
    assert uniq.tolist() == want_u.tolist() and inv.tolist() == want_inv.reshape(-1).tolist()
    assert _stats.factorize(keys, False)[0].tolist() == want_u.tolist()
    vals = np.array(values, np.int64) >> 10  # sums past 2**53 (float would round), < 2**63
    n = max(int(uniq.size), 1)
    want_sums = [sum(int(v) for v, i in zip(vals, inv, strict=True) if i == g) for g in range(n)]
    assert _stats.group_sums(inv, vals, n).tolist() == want_sums
    items = keys % 7
    first: dict[int, int] = {}  # each item counted in the group of its first appearance
    for x, i in zip(items.tolist(), inv.tolist(), strict=True):
        first.setdefault(x, i)
    want_calls = [sum(1 for g in first.values() if g == grp) for grp in range(n)]
    assert _stats.distinct_counts(items, inv, 7, n).tolist() == want_calls
    with pytest.raises(ValueError, match="out of range"):
        _stats.group_sums(np.array([1]), np.array([1]), 1)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 15), st.integers(0, 4)), max_size=40),
    st.lists(st.integers(0, 80), min_size=1, max_size=8),
)
def test_busy_split_unions_match_a_timeline(ops, points):
    # per category k and point p: the ns before p covered by an op of category <= k, read
    # off a boolean timeline (category 5 and above: not counted; the mask drops odd rows)
    s = np.array([o[0] for o in ops], np.int64)
    e = s + np.array([o[1] for o in ops], np.int64)
    cat = np.array([o[2] * 2 % 7 for o in ops], np.int8)  # 0, 2, 4, 6, 1: some absent
    keep = (np.arange(len(ops)) % 2 == 0).astype(np.uint8)
    pts = np.array(sorted(points), np.int64)
    kept = np.flatnonzero(keep)
    order = kept[np.argsort(s[kept], kind="stable")]
    got = _optable.busy_split(s, e, cat, order, 5, pts)
    assert got.shape == (5, pts.size)
    # ops starting together in any order: the same integers
    rev = kept[np.lexsort((-kept, s[kept]))]
    assert (_optable.busy_split(s, e, cat, rev, 5, pts) == got).all()
    # the order cut into parts on threads (split_min=1: parts even for a few ops; ops
    # straddle the cuts and are clipped to each part): the same integers
    for parts in (2, 3, 8):
        assert (
            _optable.busy_split(s, e, cat, order, 5, pts, parts=parts, split_min=1) == got
        ).all()
    for k in range(5):
        line = np.zeros(100, dtype=bool)
        for i in range(len(ops)):
            if keep[i] and cat[i] <= k:
                line[s[i] : e[i]] = True
        assert got[k].tolist() == [int(line[:p].sum()) for p in pts.tolist()]


@pytest.mark.parametrize(("parts", "n_win"), [(1, 3), (3, 3), (8, 1), (3, 0)])
def test_op_categories_sums_match_numpy_in_any_parts(parts, n_win):
    # each op's category and table row, and the sums over the selected ops, computed with
    # numpy; in parts (split_min=1: row ranges even for a few ops) the same integers
    rng = np.random.default_rng(parts * 10 + n_win)
    n, n_cat, n_texts, n_names, n_reasons = 500, 12, 6, 5, 4
    start = rng.integers(0, 10_000, n).astype(np.int64)
    end = start + rng.integers(0, 300, n)
    kind = rng.integers(0, 3, n).astype(np.int8)  # 0 kernel, 1 memcpy, 2 memset
    name = rng.integers(0, n_names, n).astype(np.int32)
    sel = (rng.random(n) < 0.8).astype(np.uint8)
    win = rng.integers(-1, n_win, n).astype(np.int32) if n_win else None
    text = rng.integers(-1, n_texts, n).astype(np.int32)
    text_cat = np.array([0, 3, n_cat, 5, n_cat, 1], np.int8)  # n_cat: by the kernel name
    text_place = np.array([2, -1, 0, 1, 3, 4], np.int64)
    name_cat = np.array([0, 2, 4, 6, 11], np.int8)
    reason = np.where(text >= 0, -1, rng.integers(0, n_reasons, n)).astype(np.int8)
    graph = (rng.random(n) < 0.2).astype(np.uint8)
    cat, row, cells, tot, sums, r_ops, r_ns = _optable.op_categories(
        start, end, kind, name, sel, win, max(n_win, 1), text, text_cat, text_place, name_cat,
        reason, n_reasons, graph, 1, 2, 8, 9, n_cat, parts=parts, split_min=1,
    )  # fmt: skip
    by_text = np.where((text >= 0) & (text_cat[text] < n_cat), text_cat[text], name_cat[name])
    want_cat = np.where(kind == 1, 8, np.where(kind == 2, 9, by_text))
    assert cat.tolist() == want_cat.tolist()
    assert row.tolist() == np.where(text >= 0, text_place[text], -1).tolist()
    d, s = end - start, sel == 1
    assert (
        tot.tolist() == np.bincount(want_cat[s], weights=d[s], minlength=n_cat).astype(int).tolist()
    )
    charged, g = s & (text >= 0), s & (graph == 1)
    assert sums.tolist() == [d[s].sum(), d[charged].sum(), d[g].sum(), d[g & (text >= 0)].sum()]
    why = s & (reason >= 0)
    assert r_ops.tolist() == np.bincount(reason[why], minlength=n_reasons).tolist()
    assert (
        r_ns.tolist()
        == np.bincount(reason[why], weights=d[why], minlength=n_reasons).astype(int).tolist()
    )
    if win is not None:
        w = s & (win >= 0)
        want = np.zeros((n_win, n_cat), np.int64)
        np.add.at(want, (win[w], want_cat[w]), d[w])
        assert cells.tolist() == want.tolist()
    bad = text.copy()
    bad[-1] = n_texts  # out of range, in the last part
    with pytest.raises(ValueError, match="out of range"):
        _optable.op_categories(
            start, end, kind, name, sel, win, max(n_win, 1), bad, text_cat, text_place,
            name_cat, reason, n_reasons, graph, 1, 2, 8, 9, n_cat, parts=parts, split_min=1,
        )  # fmt: skip


@pytest.mark.parametrize(
    ("parts", "with_args", "wide"),
    [(1, True, False), (2, True, False), (3, False, False), (8, True, True)],
)
def test_launcher_texts_match_numpy_in_any_parts(parts, with_args, wide):
    # per GPU op the rank of its op's key among the distinct keys, and per key the kernel
    # ns, the distinct launching ops, copies over a link and the distinct (text, kernel)
    # pairs, computed with numpy; in row ranges (split_min=1) the same, a launching op
    # whose GPU ops fall in several parts counted once
    rng = np.random.default_rng(parts * 2 + with_args)
    n, nt = 600, 40
    op_row = rng.integers(-1, nt, n).astype(np.int64 if wide else np.int32)
    op_row[: n // 2] = np.repeat(np.arange(5), n // 10)  # long runs across the cuts
    sel = (rng.random(n) < 0.85).astype(np.uint8)
    name = rng.integers(0, 4, nt).astype(np.int32)
    args = rng.integers(0, 3, nt).astype(np.int32) if with_args else None
    start = rng.integers(0, 10_000, n).astype(np.int64)
    end = start + rng.integers(0, 500, n)
    kind = rng.integers(0, 3, n).astype(np.int8)  # 1: memcpy
    copy_kind = rng.integers(0, 3, n).astype(np.int8)  # 2: device to device
    op_name = rng.integers(0, 6, n).astype(np.int32)
    keys, text, kernel, calls, link, pairs = _optable.launcher_texts(
        sel, op_row, name, args, start, end, kind, copy_kind, op_name, 1, 2,
        parts=parts, split_min=1,
    )  # fmt: skip
    on = (sel == 1) & (op_row >= 0)
    rows = op_row[on].astype(np.int64)
    key_of = (name[rows].astype(np.int64) << 32) | (args[rows] if with_args else 0)
    want_keys, want_text = np.unique(key_of, return_inverse=True)
    assert keys.tolist() == want_keys.tolist()
    assert text[on].tolist() == want_text.tolist() and (text[~on] == -1).all()
    d = (end - start)[on]
    assert (
        kernel.tolist()
        == np.bincount(want_text, weights=d, minlength=keys.size).astype(int).tolist()
    )
    distinct = np.unique(np.stack([want_text, rows]), axis=1)[0]
    assert calls.tolist() == np.bincount(distinct, minlength=keys.size).tolist()
    over = (kind[on] == 1) & (copy_kind[on] != 2)
    assert link.tolist() == (np.bincount(want_text[over], minlength=keys.size) > 0).tolist()
    want_pairs = np.unique((want_text.astype(np.int64) << 32) | op_name[on])
    assert sorted(pairs.tolist()) == want_pairs.tolist()
    bad = op_row.copy()
    bad[-1] = nt  # out of range, in the last part
    with pytest.raises(ValueError, match="out of range"):
        _optable.launcher_texts(
            np.ones(n, np.uint8), bad, name, args, start, end, kind, copy_kind, op_name, 1, 2,
            parts=parts, split_min=1,
        )  # fmt: skip


@pytest.mark.parametrize("in_order", [True, False])
def test_window_index_matches_searchsorted(in_order):
    # ops in time order (each found where the previous one's window was) or shuffled (a
    # binary search each): the window holding each kept op's start, else untouched
    rng = np.random.default_rng(int(in_order))
    edges = np.sort(rng.choice(10_000, 61, replace=False)).astype(np.int64)
    ws, we = edges[:-1:2].copy(), edges[1::2].copy()  # 30 disjoint windows, gaps between
    wid = rng.permutation(30).astype(np.int64)
    start = rng.integers(-100, 10_100, 5000).astype(np.int64)
    if in_order:
        start.sort()
    keep = (rng.random(5000) < 0.9).astype(np.uint8)
    out = np.full(5000, -7, np.int32)
    _optable.window_index(start, keep, ws, we, wid, out)
    at = np.searchsorted(ws, start, side="right") - 1
    inside = (keep == 1) & (at >= 0) & (start < we[np.maximum(at, 0)])
    assert out.tolist() == np.where(inside, wid[np.maximum(at, 0)], -7).tolist()


def _args(dims: list[Any], types: list[str]) -> str:
    return json.dumps([dims, types, [""] * len(dims), None])


def test_kernels_are_charged_to_the_op_of_interest_around_their_launcher():
    # ROCm-style: SDPA dispatches to _flash_attention_forward (dims in another layout);
    # convolution calls miopen_convolution and adds the bias outside it; linear > addmm and
    # matmul > bmm keep their GEMM op (matmul's layout copy is an op of its own)
    q = [2, 8, 128, 64]
    bf = ["c10::BFloat16"] * 3
    host = [
        {"name": "aten::_scaled_dot_product_flash_attention", "start": 0, "end": 100,
         "args": _args([q, q, q], bf)},
        {"name": "aten::_flash_attention_forward", "start": 10, "end": 90,
         "args": _args([[2, 128, 8, 64]] * 3, bf)},
        {"name": "aten::convolution", "start": 200, "end": 300,
         "args": _args([[1, 3, 64, 64], [16, 3, 3, 3], [16]], ["float"] * 3)},
        {"name": "aten::miopen_convolution", "start": 210, "end": 250,
         "args": _args([[1, 3, 64, 64], [16, 3, 3, 3]], ["float"] * 2)},
        {"name": "aten::add_", "start": 260, "end": 290,
         "args": _args([[1, 16, 62, 62], [1, 16, 1, 1]], ["float"] * 2)},
        {"name": "aten::linear", "start": 400, "end": 500,
         "args": _args([[8, 64], [32, 64], [32]], ["float"] * 3)},
        {"name": "aten::addmm", "start": 410, "end": 490,
         "args": _args([[32], [8, 64], [64, 32]], ["float"] * 3)},
        {"name": "aten::matmul", "start": 600, "end": 700,
         "args": _args([[4, 8, 16], [16, 8]], ["float"] * 2)},
        {"name": "aten::copy_", "start": 610, "end": 640, "args": _args([[4, 8, 16]], ["float"])},
        {"name": "aten::bmm", "start": 650, "end": 690,
         "args": _args([[4, 8, 16], [4, 16, 8]], ["float"] * 2)},
    ]  # fmt: skip
    launches = [20, 220, 270, 420, 620, 660]  # in flash fwd, miopen, add_, addmm, copy_, bmm
    names = ["flash_fwd", "miopen_conv", "add_bias", "gemm_addmm", "copy_kernel", "gemm_bmm"]
    api = [{"start": t, "end": t + 5, "correlation": i + 1} for i, t in enumerate(launches)]
    ops = [
        {"name": n, "start": 1000 + 100 * i, "end": 1000 + 100 * i + 10 * (i + 1),
         "correlation": i + 1}
        for i, n in enumerate(names)
    ]  # fmt: skip
    t = op_table(attribute(make_trace(ops, api, host_ops=host)))
    rows = {r["name"]: r for r in t.ops}
    assert set(rows) == {
        "aten::_scaled_dot_product_flash_attention", "aten::convolution", "aten::addmm",
        "aten::copy_", "aten::bmm",
    }  # fmt: skip
    sdpa, conv = rows["aten::_scaled_dot_product_flash_attention"], rows["aten::convolution"]
    assert (sdpa["kernel_ns"], sdpa["input_dims"]) == (10, [q, q, q])  # the outer op's shapes
    assert sdpa["launcher"] == [
        {"name": "aten::_flash_attention_forward", "kernel_ns": 10, "calls": 1}
    ]
    assert sdpa["gflops"] == pytest.approx(4 * 2 * 8 * 128 * 128 * 64 / 1e9)
    assert conv["kernel_ns"] == 20 + 30 and conv["calls"] == 1
    assert [x["name"] for x in conv["launcher"]] == ["aten::add_", "aten::miopen_convolution"]
    assert rows["aten::addmm"]["kernel_ns"] == 40 and rows["aten::bmm"]["kernel_ns"] == 60
    assert rows["aten::copy_"]["kernel_ns"] == 50
    text = render_ops(t, 10)
    assert "launcher" in text and "aten::add_, aten::miopen_convolution" in text
