"""The Cython interval kernels equal their plain-Python twins (style: every native
function has a Python twin)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import intervals_twin as twin
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimings._native import _intervals as iv

times = st.integers(min_value=0, max_value=60)


@st.composite
def intervals(draw, max_size=12):
    n = draw(st.integers(0, max_size))
    s = draw(st.lists(times, min_size=n, max_size=n))
    ln = draw(st.lists(st.integers(0, 15), min_size=n, max_size=n))
    s = np.sort(np.array(s, dtype=np.int64))
    return s, s + np.array(ln, dtype=np.int64)


@st.composite
def sets(draw):
    return iv.union(*draw(intervals()))


def _eq(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=False):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@settings(max_examples=150, deadline=None)
@given(intervals())
def test_union(x):
    _eq(iv.union(*x), twin.union(*x))


@settings(max_examples=150, deadline=None)
@given(sets(), sets())
def test_intersect(a, b):
    _eq(iv.intersect(*a, *b), twin.intersect(*a, *b))


@settings(max_examples=150, deadline=None)
@given(intervals(), sets())
def test_overlap_lengths_and_points(q, u):
    np.testing.assert_array_equal(iv.overlap_lengths(*q, *u), twin.overlap_lengths(*q, *u))
    np.testing.assert_array_equal(iv.points_in_set(q[0], *u), twin.points_in_set(q[0], *u))


@settings(max_examples=150, deadline=None)
@given(intervals(), intervals(), st.randoms(use_true_random=False))
def test_project(points, ranges, rnd):
    p = points[0]
    starts = np.array([rnd.randint(0, 90) for _ in p], dtype=np.int64)
    ends = starts + np.array([rnd.randint(0, 20) for _ in p], dtype=np.int64)
    _eq(iv.project(p, starts, ends, *ranges), twin.project(p, starts, ends, *ranges))


@st.composite
def rows(draw, max_size=14):
    """Random op columns and an order of some rows sorted by start."""
    n = draw(st.integers(0, max_size))
    starts = np.array(draw(st.lists(times, min_size=n, max_size=n)), dtype=np.int64)
    ends = starts + np.array(
        draw(st.lists(st.integers(0, 15), min_size=n, max_size=n)), dtype=np.int64
    )
    cls = np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), dtype=np.int8)
    lstart = np.array(
        draw(
            st.lists(st.one_of(st.just(twin.NO_LAUNCH), st.integers(0, 75)), min_size=n, max_size=n)
        ),
        dtype=np.int64,
    )
    # launch call ends: just after the start, or shifted back by the pickup bound so that
    # the 50 µs bound falls inside these small gaps (device_wait after launch_overhead)
    shift = st.one_of(st.integers(0, 3), st.integers(-twin.PICKUP - 5, -twin.PICKUP + 70))
    lend = lstart + np.array(draw(st.lists(shift, min_size=n, max_size=n)), dtype=np.int64)
    lend[lstart == twin.NO_LAUNCH] = 0
    corr = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=np.int64)
    keep = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    chosen = np.flatnonzero(keep)
    order = chosen[np.argsort(starts[chosen], kind="stable")].astype(np.int64)
    return order, starts, ends, cls, lstart, lend, corr


@settings(max_examples=200, deadline=None)
@given(rows())
def test_union_by_class_and_first_per_start(x):
    order, starts, ends, cls, lstart, _, corr = x
    _eq(iv.union_by_class(order, starts, ends, cls), twin.union_by_class(order, starts, ends, cls))
    np.testing.assert_array_equal(
        iv.first_per_start(order, starts, lstart, corr),
        twin.first_per_start(order, starts, lstart, corr),
    )


@settings(max_examples=150, deadline=None)
@given(sets(), sets(), sets())
def test_sweep(c, m, x):
    _eq(iv.sweep(*c, *m, *x), twin.sweep(*c, *m, *x))


@settings(max_examples=200, deadline=None)
@given(sets(), sets(), sets(), intervals(max_size=4), rows())
def test_partition_windows(c, m, x, w, ops):
    order, starts, _ends, _, lstart, lend, corr = ops
    segs = iv.sweep(*c, *m, *x)
    k_op = iv.first_per_start(order, starts, lstart, corr)
    got, gaps = iv.partition_windows(*w, *segs, k_op, starts, lstart, lend, True)
    want, want_gaps = twin.partition_windows(*w, *segs, k_op, starts, lstart, lend)
    np.testing.assert_array_equal(got, want)
    _eq(gaps, want_gaps)
    np.testing.assert_array_equal(got.sum(axis=1), w[1] - w[0])
    np.testing.assert_array_equal(iv.partition_windows(*w, *segs, k_op, starts, lstart, lend), got)


def test_unsorted_input_is_an_error():
    with pytest.raises(ValueError, match="not sorted"):
        iv.union(np.array([5, 1], dtype=np.int64), np.array([6, 2], dtype=np.int64))


US = 1000  # ns
P = twin.PICKUP


@pytest.mark.parametrize(
    ("call", "want"),
    [
        ((twin.NO_LAUNCH, 0), [0, 0, 0, 5]),  # no launch call known: idle_other
        ((3, 4), [0, 0, 5, 0]),  # submitted before the gap: device_wait
        ((5, 6), [0, 0, 5, 0]),  # submitted at the gap's start: still device_wait
        ((7, 8), [2, 3, 0, 0]),  # host_bound until the launch call, then launch_overhead
        ((12, 13), [5, 0, 0, 0]),  # launch call after the gap: all host_bound
        # a gap [5, 10) ns ending 50 µs after the call returned: the bound cuts it
        ((6, 5 - P), [1, 0, 4, 0]),  # call ended > 50 µs before 6: none is overhead
        ((6, 7 - P + 2), [1, 3, 1, 0]),  # overhead [6, 9), then device_wait [9, 10)
        ((6, 10 - P), [1, 4, 0, 0]),  # the bound falls exactly at g1
    ],
)
def test_idle_split_cases(call, want):
    i64 = np.array
    w_s, w_e = i64([5], dtype=np.int64), i64([10], dtype=np.int64)
    segs = (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int8))
    starts = i64([10], dtype=np.int64)
    ls, le = i64([call[0]], dtype=np.int64), i64([call[1]], dtype=np.int64)
    k_op = i64([0], dtype=np.int64)
    for impl in (iv.partition_windows, lambda *a: twin.partition_windows(*a)[0]):
        np.testing.assert_array_equal(impl(w_s, w_e, *segs, k_op, starts, ls, le)[0, 4:], want)


@pytest.mark.parametrize(
    ("call_end_us", "want_us"),
    [
        (30, [10, 70, 20, 0]),  # 30 + 50 = 80 < g1 = 100: device_wait [80, 100)
        (49, [10, 89, 1, 0]),  # 49 + 50 = 99: one µs of device_wait
        (50, [10, 90, 0, 0]),  # 50 + 50 = 100 = g1: the whole rest is overhead
        (70, [10, 90, 0, 0]),  # the call returned 30 µs before the op: all overhead
    ],
)
def test_pickup_bound_at_microsecond_scale(call_end_us, want_us):
    """A gap [0, 100) µs; the op's launch call starts at 10 µs and ends at call_end_us."""
    i64 = np.array
    w_s, w_e = i64([0], dtype=np.int64), i64([100 * US], dtype=np.int64)
    segs = (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int8))
    starts = i64([100 * US], dtype=np.int64)
    ls, le = i64([10 * US], dtype=np.int64), i64([call_end_us * US], dtype=np.int64)
    k_op = i64([0], dtype=np.int64)
    want = [v * US for v in want_us]
    for impl in (iv.partition_windows, lambda *a: twin.partition_windows(*a)[0]):
        np.testing.assert_array_equal(impl(w_s, w_e, *segs, k_op, starts, ls, le)[0, 4:], want)
    assert iv.LAUNCH_PICKUP_NS == P
