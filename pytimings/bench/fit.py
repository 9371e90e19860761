"""The alpha-beta (latency-bandwidth) model of a transfer: ``time = alpha + bytes / beta``.

Fitted by least squares of time on bytes over a size sweep, with the latency constrained to
be >= 0 (a negative fixed cost is not a cost: when the free fit's intercept is below 0, the
line goes through the origin and the free intercept is kept to be said); reported with the
benchmark's rows (alpha, beta, r2) so the fixed and per-byte costs of a path can be read off.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AlphaBeta:
    alpha_us: float  # fixed cost per transfer
    beta_gbps: float  # asymptotic bandwidth, 1 GB/s = 1e9 bytes/s; inf when slope is not > 0
    r2: float  # coefficient of determination of the fit (1 = perfect)
    n_points: int
    # the unconstrained fit's negative intercept, when alpha was held at 0 (else None)
    free_alpha_us: float | None = None


def fit_alpha_beta(nbytes: Sequence[float], time_us: Sequence[float]) -> AlphaBeta | None:
    """Least squares of ``time_us`` on ``nbytes``; None with fewer than two distinct sizes."""
    x = np.asarray(nbytes, dtype=np.float64)
    y = np.asarray(time_us, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError("nbytes and time_us differ in length")
    if np.unique(x).size < 2:
        return None
    design = np.column_stack([np.ones_like(x), x])
    (alpha, slope), *_ = np.linalg.lstsq(design, y, rcond=None)
    free_alpha = None
    if alpha < 0:  # the constrained optimum lies on alpha = 0: least squares through 0
        free_alpha, alpha, slope = float(alpha), 0.0, float(x @ y / (x @ x))
    residual = float(np.sum((y - (alpha + slope * x)) ** 2))
    total = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - residual / total if total > 0 else 1.0
    # slope is microseconds per byte; bytes/us = 1e-3 GB/s
    beta = 1e-3 / float(slope) if slope > 0 else math.inf
    return AlphaBeta(float(alpha), beta, r2, int(x.size), free_alpha)
