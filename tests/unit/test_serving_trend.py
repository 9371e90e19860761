"""Mann-Kendall and Sen's slope against brute force, the permutation distribution and
known values; the false-positive rate on steady series near the nominal 5%."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from pytimings.model.samples import MemorySamples
from pytimings.serving.runfile import Level
from pytimings.serving.trend import (
    ALPHA,
    MIN_MEMORY_SPAN_S,
    drift,
    drift_cells,
    level_drift,
    mann_kendall,
    memory_drift,
    min_points,
    sen_slope,
)


def _s_brute(y: list[float]) -> int:
    return sum((y[j] > y[i]) - (y[j] < y[i]) for i in range(len(y)) for j in range(i + 1, len(y)))


def test_s_matches_brute_force_and_variance_the_permutations() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        y = rng.integers(0, 4, size=int(rng.integers(2, 25))).astype(float).tolist()  # ties
        assert mann_kendall(y)[0] == _s_brute(y)
    # Var S is the variance of S over every ordering of the values (ties included)
    y = [1.0, 1.0, 2.0, 3.0, 3.0, 3.0, 5.0]
    s_all = np.array([_s_brute(list(p)) for p in itertools.permutations(y)], np.float64)
    assert s_all.mean() == pytest.approx(0.0, abs=1e-9)
    assert mann_kendall(y)[1] == pytest.approx(s_all.var())


def test_known_values() -> None:
    # n = 5 increasing: S = 10, Var = 5*4*15/18, z = 9/sqrt(Var), p = 0.0275 (two-sided)
    s, var, p = mann_kendall([1, 2, 3, 4, 5])
    assert (s, var) == (10, pytest.approx(50 / 3))
    assert p == pytest.approx(math.erfc(9 / math.sqrt(50 / 3) / math.sqrt(2)))
    assert p == pytest.approx(0.0275, abs=5e-5)
    assert mann_kendall([3, 3, 3, 3])[2] == 1.0  # all tied: no evidence of anything
    assert mann_kendall([5, 4, 3, 2, 1])[0] == -10


def test_sen_slope_is_the_median_pairwise_slope() -> None:
    rng = np.random.default_rng(1)
    t = np.sort(rng.uniform(0, 10, 15))
    y = 3 * t + rng.normal(0, 0.1, 15)
    brute = np.median([(y[j] - y[i]) / (t[j] - t[i]) for i in range(15) for j in range(i + 1, 15)])
    assert sen_slope(t, y) == pytest.approx(brute)
    assert abs(sen_slope(t, y) - 3) < 0.1
    y[4] = 1e6  # one outlier moves the median little
    assert abs(sen_slope(t, y) - 3) < 0.5


def test_false_positive_rate_on_steady_series_is_near_nominal() -> None:
    rng = np.random.default_rng(2)
    runs, n = 2000, 30
    hits = sum(
        drift("x", np.arange(n) / 60, rng.normal(50, 5, n))["verdict"] == "drifting"  # type: ignore[index]
        for _ in range(runs)
    )
    # binomial sd at 5% of 2000: ~0.5%; the normal approximation is close at n = 30
    assert 0.035 <= hits / runs <= 0.065


def test_drift_entry_and_too_few_points() -> None:
    hours = np.arange(12) / 60  # one-minute intervals
    up = 100 + 60 * hours + np.random.default_rng(3).normal(0, 0.05, 12)  # +1 per interval
    d = drift("ttft_p99_ms", hours, up)
    assert d is not None and d["verdict"] == "drifting" and d["p_value"] < ALPHA
    assert d["slope_per_hour"] == pytest.approx(60, rel=0.05)
    with_gap = up.copy()
    with_gap[3] = np.nan
    d = drift("ttft_p99_ms", hours, with_gap)
    assert d is not None and (d["intervals"], d["missing"]) == (11, 1)
    assert drift("x", [0, 1, 2], [1, 2, 3]) is None


def test_min_points_is_where_the_test_can_first_reject() -> None:
    """Below it not even a strictly increasing series rejects (4 values: p = 0.089)."""
    n = min_points(ALPHA)
    assert mann_kendall(np.arange(n))[2] < ALPHA <= mann_kendall(np.arange(n - 1))[2]
    assert n == 5
    assert drift("x", np.arange(n - 1), np.arange(n - 1)) is None
    d = drift("x", np.arange(n), np.arange(n))
    assert d is not None and d["verdict"] == "drifting"


def _level(intervals: int) -> Level:
    ivs = [
        {"start_ns": i * 60 * 10**9, "end_ns": (i + 1) * 60 * 10**9, "completed": 10,
         "errors": {}, "output_throughput": 100.0 + i,
         **{f"{m}_ms": {"p50": 1.0 + i, "p99": 2.0 + i} for m in ("ttft", "tpot", "itl", "e2el")}}
        for i in range(intervals)
    ]  # fmt: skip
    return Level(concurrency=1, rate=None, rounds=[], summary={}, warmup={}, intervals=ivs)


def test_a_soak_too_short_for_the_test_says_so_and_what_it_needs() -> None:
    (row,) = level_drift(_level(3))
    assert row["verdict"] == "too short" and row["p_value"] is None
    assert row["why"] == "3 intervals with values; a drift test needs 5"
    assert "too short (3 intervals with values; a drift test needs 5)" in " ".join(
        drift_cells({"label": "a", "concurrency": 1, **row})
    )
    six = {r["metric"]: r["verdict"] for r in level_drift(_level(6))}
    assert six["ttft_p99_ms"] == "drifting" and six["error_rate"] == "stable"


def test_a_memory_trend_needs_ten_minutes_of_samples() -> None:
    """12 s of samples growing 0.2 MB/s used to read "drifting 720 MB/h"."""
    t = [int(i * 1e9) for i in range(13)]
    grow = MemorySamples(t, [2**30 + i * 200_000 for i in range(13)], [None] * 13)
    (row,) = memory_drift("engine", "e.pyt", grow)
    assert row["verdict"] == "too short" and row["slope_per_hour"] is None
    assert "the samples span 12 s; a trend per hour needs 10 min" in row["why"]
    slow = [int(i * 60e9) for i in range(13)]  # the same samples a minute apart: 12 min
    long = memory_drift("engine", "e.pyt", MemorySamples(slow, grow.rss_bytes, [None] * 13))
    assert [(r["metric"], r["verdict"]) for r in long] == [("rss_mb", "drifting")]
    assert MIN_MEMORY_SPAN_S == 600
