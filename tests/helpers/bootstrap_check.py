"""The bootstrap's false-positive rate: how often same-distribution samples get a verdict,
and the binomial band a rate near 5% keeps to."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from pytimings.analysis.diff import Sample, compare, groups_of, replicate_weights

F64 = npt.NDArray[np.float64]


def false_positives(
    draw: Callable[[np.random.Generator], tuple[F64, F64]], reps: int = 200, resamples: int = 400
) -> int:
    """How many of ``reps`` same-distribution pairs ``draw(rng) -> (a, b)`` get a verdict
    other than 'within noise' (fixed seed)."""
    rng = np.random.default_rng(12345)
    hits = 0
    for _ in range(reps):
        a, b = draw(rng)
        sa, sb = Sample(a[:, None], groups_of([len(a)])), Sample(b[:, None], groups_of([len(b)]))
        wa = replicate_weights(sa.groups, sa.n, resamples, rng)
        wb = replicate_weights(sb.groups, sb.n, resamples, rng)
        hits += compare(["x"], sa, sb, wa, wb)[0]["verdict"] != "within noise"
    return hits


def binomial_band(reps: int = 200, p: float = 0.05) -> tuple[int, int]:
    """The smallest and largest counts whose binomial tail at rate ``p`` is >= 0.5%."""
    pmf = [math.comb(reps, k) * p**k * (1 - p) ** (reps - k) for k in range(reps + 1)]
    cdf = np.cumsum(pmf)
    lo = int(np.searchsorted(cdf, 0.005))  # P(X < lo) < 0.5%
    hi = int(np.searchsorted(cdf, 0.995))  # P(X > hi) < 0.5%
    return lo, hi
