"""The partition of a window drawn as labelled segments (for timeline lanes)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pytimings._native import _intervals as iv
from pytimings.analysis.partition import device_timeline
from pytimings.analysis.result import Attribution
from pytimings.errors import UsageError

I64 = npt.NDArray[np.int64]


def label_segments(
    a: Attribution, rank: int, device: int, window: tuple[int, int] | None = None
) -> tuple[I64, I64, npt.NDArray[np.int8]]:
    """A window of one (rank, device) cut into labelled segments (label index into
    ``LABELS``), in time order; their lengths per label equal the partition of that window.
    ``window`` defaults to the whole-trace window of a ``by=None`` attribution."""
    if window is None:
        w = a.windows
        row = np.flatnonzero((w["rank"] == rank) & (w["device"] == device))
        if a.by is not None or row.size != 1:
            raise UsageError(f"no whole-trace window for rank {rank} device {device}")
        ws, we = int(w["start_ns"][row[0]]), int(w["end_ns"][row[0]])
    else:
        ws, we = window
    tl = device_timeline(a.trace, a.classes, a.launches, rank, device)
    keep = (tl.seg_end > ws) & (tl.seg_start < we)
    s = np.clip(tl.seg_start[keep], ws, we)
    e = np.clip(tl.seg_end[keep], ws, we)
    # pieces: the busy segments and the gaps between them (each its own window)
    bounds = np.concatenate([[ws], np.ravel(np.column_stack([s, e])), [we]])
    g_s, g_e = bounds[0::2], bounds[1::2]
    gap = g_e > g_s
    p_s = np.concatenate([s, g_s[gap]])
    p_e = np.concatenate([e, g_e[gap]])
    order = np.argsort(p_s, kind="stable")
    p_s, p_e = np.ascontiguousarray(p_s[order]), np.ascontiguousarray(p_e[order])
    part = iv.partition_windows(
        p_s,
        p_e,
        tl.seg_start,
        tl.seg_end,
        tl.seg_label,
        tl.k_op,
        a.trace.gpu_ops["start"],
        a.launches.start,
        a.launches.end,
    )
    # a piece is one label, or a gap cut into host_bound, launch_overhead, device_wait in
    # that time order (the order of LABELS): each non-zero part follows the previous one
    rows, cols = np.nonzero(part)
    lens = part[rows, cols]
    before = np.cumsum(lens) - lens
    first = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]]) if rows.size else rows
    before -= np.repeat(before[first], np.diff(np.r_[first, rows.size]))
    out_s = p_s[rows] + before
    return out_s, out_s + lens, cols.astype(np.int8)
