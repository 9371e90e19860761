"""Sorted-unique helpers that keep numpy.ma out of the process.

``np.unique(a)`` (without ``return_*``) asks ``np.ma.is_masked``, which imports numpy.ma on
first use: 10-20 ms per process, more than a whole Kineto trace's attribution. Load and
analysis paths use these instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


def unique(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Sorted unique values of ``a`` (flattened), as ``np.unique(a)``."""
    v = np.sort(a, axis=None)
    return v[first_of_runs(v)]


def first_of_runs(v: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """True where a sorted array's value differs from the one before."""
    first = np.ones(len(v), dtype=bool)
    first[1:] = v[1:] != v[:-1]
    return first
