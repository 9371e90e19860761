"""The Cython interval kernels equal their plain-Python twins (style: every native
function has a Python twin)."""

from __future__ import annotations

import intervals_twin as twin
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimings.analysis import _intervals as iv

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
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@settings(max_examples=150, deadline=None)
@given(intervals())
def test_union(x):
    _eq(iv.union(*x), twin.union(*x))


@settings(max_examples=150, deadline=None)
@given(sets(), sets())
def test_intersect_and_difference(a, b):
    _eq(iv.intersect(*a, *b), twin.intersect(*a, *b))
    _eq(iv.difference(*a, *b), twin.difference(*a, *b))


@settings(max_examples=150, deadline=None)
@given(intervals(), sets())
def test_overlap_lengths_and_points(q, u):
    np.testing.assert_array_equal(iv.overlap_lengths(*q, *u), twin.overlap_lengths(*q, *u))
    np.testing.assert_array_equal(iv.points_in_set(q[0], *u), twin.points_in_set(q[0], *u))


@settings(max_examples=150, deadline=None)
@given(intervals(), intervals(), st.randoms(use_true_random=False))
def test_project(points, ranges, rnd):
    p = points[0]
    values = np.array([rnd.randint(0, 90) for _ in p], dtype=np.int64)
    _eq(iv.project(p, values, *ranges), twin.project(p, values, *ranges))


@settings(max_examples=150, deadline=None)
@given(intervals(), st.randoms(use_true_random=False))
def test_first_per_start(x, rnd):
    s = x[0]
    ls = np.array([rnd.choice([twin.NO_LAUNCH, rnd.randint(0, 5)]) for _ in s], dtype=np.int64)
    corr = np.array([rnd.randint(0, 3) for _ in s], dtype=np.int64)
    _eq(iv.first_per_start(s, ls, corr), twin.first_per_start(s, ls, corr))


@settings(max_examples=150, deadline=None)
@given(sets(), sets(), sets())
def test_sweep(c, m, x):
    _eq(iv.sweep(*c, *m, *x), twin.sweep(*c, *m, *x))


@settings(max_examples=150, deadline=None)
@given(sets(), sets(), sets(), intervals(max_size=4), st.randoms(use_true_random=False))
def test_partition_windows(c, m, x, w, rnd):
    segs = iv.sweep(*c, *m, *x)
    ops = twin.union(*x)[0]  # any sorted starts will do as gap-ending candidates
    ls = np.array([rnd.choice([twin.NO_LAUNCH, rnd.randint(0, 70)]) for _ in ops], dtype=np.int64)
    got = iv.partition_windows(*w, *segs, ops, ls)
    np.testing.assert_array_equal(got, twin.partition_windows(*w, *segs, ops, ls))
    np.testing.assert_array_equal(got.sum(axis=1), w[1] - w[0])
    got2, gaps = iv.partition_windows(*w, *segs, ops, ls, True)
    np.testing.assert_array_equal(got, got2)
    gw, g0, g1, gh, gk = gaps
    idle = np.zeros(len(w[0]), dtype=np.int64)
    np.add.at(idle, gw, g1 - g0)
    np.testing.assert_array_equal(idle, got[:, 4:].sum(axis=1))
    hb = np.zeros(len(w[0]), dtype=np.int64)
    np.add.at(hb, gw, gh - g0)
    np.testing.assert_array_equal(hb, got[:, 4])


def test_unsorted_input_is_an_error():
    with pytest.raises(ValueError, match="not sorted"):
        iv.union(np.array([5, 1], dtype=np.int64), np.array([6, 2], dtype=np.int64))
