"""Bootstrap pieces shared by the A/B comparisons (``pytimings compare`` of serving runs and
``pytimings diff`` of traces): two-stage resampling weights and the direction-aware verdict;
and the Mann-Kendall trend test with Sen's slope (soak drift, memory growth).

Two-stage: draw the groups (rounds of a run, files of a side) with replacement, then the
members (requests, windows) of each drawn group with replacement; a member's weight is how
often it was drawn. With one group this is the plain bootstrap of the members.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


def two_stage_weights(
    groups: Sequence[npt.NDArray[np.intp]], n: int, rng: np.random.Generator
) -> tuple[I64, I64]:
    """One bootstrap replicate: (weight per member 0..n-1, weight per group).

    ``groups``: the member indices of each group (together a partition of 0..n-1).
    """
    w = np.zeros(n, np.int64)
    group_w = np.zeros(len(groups), np.int64)
    for g in rng.integers(0, len(groups), size=len(groups)):
        members = groups[g]
        group_w[g] += 1
        np.add.at(w, rng.choice(members, size=members.size, replace=True), 1)
    return w, group_w


def too_few(samples: str) -> str:
    """The verdict of a change without an interval: too few ``samples`` (windows, rounds)
    on a side to resample. Never better or worse."""
    return f"n/a (too few {samples})"


NO_INTERVAL = "n/a (no interval)"  # every replicate undefined (e.g. a baseline of 0)


def verdict(lo: float, hi: float, higher_is_better: bool) -> str:
    """``within noise`` when the 95% interval [lo, hi] of a change holds 0, ``n/a (no
    interval)`` when it is unknown, else ``better`` or ``worse`` by the direction that is
    an improvement."""
    if math.isnan(lo) or math.isnan(hi):
        return NO_INTERVAL
    if lo <= 0 <= hi:
        return "within noise"
    return "better" if (lo > 0) == higher_is_better else "worse"


def mann_kendall(y: npt.ArrayLike) -> tuple[int, float, float]:
    """``(S, Var S, two-sided p)`` of the Mann-Kendall test, ties corrected."""
    v = np.asarray(y, dtype=np.float64)
    n = v.size
    s = int(np.triu(np.sign(v[None, :] - v[:, None]), 1).sum())
    _, counts = np.unique(v, return_counts=True)
    t = counts[counts > 1].astype(np.float64)
    var = (n * (n - 1) * (2 * n + 5) - float(np.sum(t * (t - 1) * (2 * t + 5)))) / 18.0
    if var <= 0 or s == 0:
        return s, var, 1.0
    z = (s - math.copysign(1, s)) / math.sqrt(var)
    return s, var, math.erfc(abs(z) / math.sqrt(2))


def sen_slope(t: npt.ArrayLike, y: npt.ArrayLike) -> float:
    """Median of the pairwise slopes ``(y_j - y_i) / (t_j - t_i)``, ``t_j > t_i``."""
    tv, yv = np.asarray(t, np.float64), np.asarray(y, np.float64)
    i, j = np.triu_indices(tv.size, 1)
    dt = tv[j] - tv[i]
    keep = dt != 0
    if not keep.any():
        return math.nan
    return float(np.median((yv[j] - yv[i])[keep] / dt[keep]))
