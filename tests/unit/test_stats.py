"""The shared bootstrap pieces (pytimings.stats) and diff's threshold parsing."""

from __future__ import annotations

import numpy as np
import pytest

from pytimings.analysis.diff import (
    Sample,
    groups_of,
    parse_thresholds,
    replicate_weights,
    widening,
)
from pytimings.errors import UsageError
from pytimings.stats import two_stage_weights, verdict


def test_two_stage_draws_whole_groups_then_members_within_them() -> None:
    rng = np.random.default_rng(0)
    groups = groups_of([3, 0, 5, 2])  # the empty file is left out
    assert [g.tolist() for g in groups] == [[0, 1, 2], [3, 4, 5, 6, 7], [8, 9]]
    for _ in range(50):
        w, gw = two_stage_weights(groups, 10, rng)
        assert gw.sum() == 3
        # each drawn group contributes exactly its size in member draws, from its members
        drawn = [int(k) * g.size for k, g in zip(gw, groups, strict=True)]
        assert [int(w[g].sum()) for g in groups] == drawn


def test_replicate_weights_average_to_the_point_mean() -> None:
    """Weights keep rows summing to 1 and center on the uniform (point) weights; widened
    around the point mean (as compare does), the variance of a replicated mean is the
    unbiased one, s^2 / n."""
    rng = np.random.default_rng(1)
    w = replicate_weights(groups_of([8]), 8, 4000, rng)
    assert w is not None and np.allclose(w.sum(axis=1), 1)
    assert np.allclose(w.mean(axis=0), 1 / 8, atol=0.01)
    x = np.arange(8.0) ** 2
    c = widening(Sample(x[:, None], groups_of([8])))
    widened = x.mean() + c * (w @ x - x.mean())
    assert np.var(widened) == pytest.approx(np.var(x, ddof=1) / 8, rel=0.1)
    assert replicate_weights(groups_of([1]), 1, 100, rng) is None


def test_verdict_is_direction_aware() -> None:
    assert verdict(1.0, 2.0, higher_is_better=False) == "worse"
    assert verdict(-2.0, -1.0, higher_is_better=False) == "better"
    assert verdict(1.0, 2.0, higher_is_better=True) == "better"
    assert verdict(-1.0, 2.0, higher_is_better=False) == "within noise"
    # no interval: never "within noise" (nor better or worse), it was not measured
    assert verdict(float("nan"), 1.0, higher_is_better=False) == "n/a (no interval)"


def test_thresholds_split_on_commas_after_a_unit_only() -> None:
    """Kernel names hold '<', '>' and commas; a spec ends at its unit."""
    th = parse_thresholds("gemm<float, 4>>+5%, window<-2.5ms,kernA>300ns")
    assert [(t.name, t.above, t.value, t.pct) for t in th] == [
        ("gemm<float, 4>", True, 5.0, True),
        ("window", False, -2.5e6, False),
        ("kernA", True, 300.0, False),
    ]
    for bad in ("window>5", "window=5%", ">5%", "window>+5%,"):
        with pytest.raises(UsageError, match="--fail-on"):
            parse_thresholds(bad)
