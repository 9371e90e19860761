"""Plausible event times, checked by every trace loader before a trace is built.

A time at or beyond ±2^62 ns (about ±146 years) is a corrupt field, not a capture: strictly
within that bound any ``end - start`` and any window over the trace stays inside int64, so
later arithmetic (durations, windows, shares) cannot wrap.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["TIME_LIMIT_NS", "implausible_time"]

TIME_LIMIT_NS = 1 << 62


def implausible_time(
    start: npt.NDArray[np.int64], end: npt.NDArray[np.int64]
) -> tuple[int, str, int] | None:
    """The first row whose start or end is not strictly within ±2^62 ns, as (row, 'start'
    or 'end', value); None when every time is plausible."""
    for column, values in (("start", start), ("end", end)):
        # two reductions; the row is looked for only when there is one
        if len(values) and not (-TIME_LIMIT_NS < values.min() and values.max() < TIME_LIMIT_NS):
            row = int(np.flatnonzero((values <= -TIME_LIMIT_NS) | (values >= TIME_LIMIT_NS))[0])
            return row, column, int(values[row])
    return None
