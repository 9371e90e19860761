"""Saturation: the level where adding load stops adding throughput and only adds waiting.

A level is *past saturation* when its output token throughput is within
:data:`THROUGHPUT_TOL` (5%) above the previous level's (or below it) while its TTFT p50 is
at least :data:`TTFT_FACTOR` (2x) the previous level's: the engine serves no more tokens per
second, and the extra requests wait in its queue. ``loadgen --stop-at-saturation`` ends a
sweep after the first such level; ``compare`` and ``report`` flag each one. (The knee of
:func:`pytimings.serving.compare.sweep` is a different, earlier mark: where latency per
token starts to rise at all.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping

THROUGHPUT_TOL = 0.05
TTFT_FACTOR = 2.0
RULE = (
    f"output throughput at most +{THROUGHPUT_TOL:.0%} over the previous level while TTFT p50 "
    f">= {TTFT_FACTOR:g}x the previous level's"
)


def past_saturation(prev: Mapping[str, float], cur: Mapping[str, float]) -> bool:
    """``prev``/``cur``: a level's ``throughput`` (tok/s) and ``ttft_p50`` (ms)."""
    thr0, thr1 = prev["throughput"], cur["throughput"]
    t0, t1 = prev["ttft_p50"], cur["ttft_p50"]
    if not all(math.isfinite(x) for x in (thr0, thr1, t0, t1)) or thr0 <= 0 or t0 <= 0:
        return False
    return thr1 <= thr0 * (1 + THROUGHPUT_TOL) and t1 >= TTFT_FACTOR * t0
