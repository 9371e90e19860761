"""The GPU ops a result reports: those that start in a reported window, on its rank and
device (what ``--rank``, ``--device`` and ``--by`` select), per window or all at once."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from pytimings.analysis.result import Attribution

I64 = npt.NDArray[np.int64]


def reported(a: Attribution, rows: I64) -> I64:
    """The given gpu_ops rows that start in a reported window (on its rank and device),
    each once, in row order: what ``--rank``, ``--device`` and ``--by`` select."""
    hit = np.zeros(len(a.trace.gpu_ops), dtype=bool)  # a mask, not np.unique: no sort/hash
    for part in per_window(a, rows):
        hit[part] = True
    return np.flatnonzero(hit)


def per_window(a: Attribution, rows: I64) -> list[I64]:
    """For each window entry, the given gpu_ops rows on its (rank, device) that start in
    it: one sort per device and two binary searches per window."""
    ops, w = a.trace.gpu_ops, a.windows
    out: list[I64] = [rows[:0]] * len(w)
    for r, d in {(int(r), int(d)) for r, d in zip(w["rank"], w["device"], strict=True)}:
        mine = rows[(ops["rank"][rows] == r) & (ops["device"][rows] == d)]
        mine = mine[np.argsort(ops["start"][mine], kind="stable")]
        st = ops["start"][mine]
        for i in np.flatnonzero((w["rank"] == r) & (w["device"] == d)):
            lo, hi = np.searchsorted(st, [w["start_ns"][i], w["end_ns"][i]])
            out[i] = mine[lo:hi]
    return out
