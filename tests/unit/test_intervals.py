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
    corr = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=np.int64)
    keep = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    chosen = np.flatnonzero(keep)
    order = chosen[np.argsort(starts[chosen], kind="stable")].astype(np.int64)
    return order, starts, ends, cls, lstart, corr


@settings(max_examples=200, deadline=None)
@given(rows())
def test_union_by_class_and_first_per_start(x):
    order, starts, ends, cls, lstart, corr = x
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
    order, starts, _ends, _, lstart, corr = ops
    segs = iv.sweep(*c, *m, *x)
    k_op = iv.first_per_start(order, starts, lstart, corr)
    got, gaps = iv.partition_windows(*w, *segs, k_op, starts, lstart, True)
    want, want_gaps = twin.partition_windows(*w, *segs, k_op, starts, lstart)
    np.testing.assert_array_equal(got, want)
    _eq(gaps, want_gaps)
    np.testing.assert_array_equal(got.sum(axis=1), w[1] - w[0])
    np.testing.assert_array_equal(iv.partition_windows(*w, *segs, k_op, starts, lstart), got)


def test_unsorted_input_is_an_error():
    with pytest.raises(ValueError, match="not sorted"):
        iv.union(np.array([5, 1], dtype=np.int64), np.array([6, 2], dtype=np.int64))


@pytest.mark.parametrize(
    ("lstart", "want"),
    [
        (twin.NO_LAUNCH, [0, 0, 0, 5]),  # no launch call known: idle_other
        (3, [0, 0, 5, 0]),  # submitted before the gap: device_wait
        (5, [0, 0, 5, 0]),  # submitted at the gap's start: still device_wait
        (7, [2, 3, 0, 0]),  # host_bound until the launch call, then launch_overhead
        (12, [5, 0, 0, 0]),  # launch call after the gap: all host_bound
    ],
)
def test_idle_split_cases(lstart, want):
    i64 = np.array
    w_s, w_e = i64([5], dtype=np.int64), i64([10], dtype=np.int64)
    segs = (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int8))
    starts, ls = i64([10], dtype=np.int64), i64([lstart], dtype=np.int64)
    k_op = i64([0], dtype=np.int64)
    for impl in (iv.partition_windows, lambda *a: twin.partition_windows(*a)[0]):
        np.testing.assert_array_equal(impl(w_s, w_e, *segs, k_op, starts, ls)[0, 4:], want)
