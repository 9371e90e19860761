"""The eight labels of one (rank, device): busy segments from the unions of compute, comm
and memory ops, and the idle gaps split by the op that ends them and its launch call."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pytimings._native import _intervals as iv
from pytimings.analysis.launches import Launches
from pytimings.model.trace import Trace
from pytimings.table import Table

LABELS: tuple[str, ...] = (
    "compute",
    "comm_overlapped",
    "comm_exposed",
    "memory",
    "host_bound",
    "launch_overhead",
    "device_wait",
    "idle_other",
)
BUSY_LABELS = LABELS[:4]  # the GPU runs something
IDLE_LABELS = LABELS[4:]  # the idle split
I64 = npt.NDArray[np.int64]


@dataclass
class DeviceTimeline:
    """The labelled timeline of one (rank, device): busy segments and gap-ending ops."""

    rank: int
    device: int
    seg_start: I64
    seg_end: I64
    seg_label: npt.NDArray[np.int8]
    k_op: I64  # per distinct start of a non-empty op: the gpu_ops row that ends gaps there
    order: I64  # the device's non-empty ops by start (:func:`device_order`)


def device_rows(ops: Table, mask: npt.NDArray[np.bool_], rank: int, device: int) -> I64:
    """Rows of the ops of (rank, device) where ``mask`` holds; a column every op shares
    (one rank, one GPU) is not compared."""
    if not (ops["rank"] == rank).all():
        mask &= ops["rank"] == rank
    if not (ops["device"] == device).all():
        mask &= ops["device"] == device
    return np.flatnonzero(mask)


def _by_start(trace: Trace, rows: I64) -> I64:
    """``rows`` of gpu_ops by start; ops starting together by end, stream and name, so that
    which of them ends an idle gap never depends on the order the rows came in."""
    ops = trace.gpu_ops
    order = rows[np.argsort(ops["start"][rows], kind="stable")]
    s = ops["start"][order]
    tie = np.flatnonzero(s[1:] == s[:-1])
    if len(tie) == 0:
        return order
    at = np.union1d(tie, tie + 1)  # positions in ``order`` inside groups of equal start
    sub = order[at]
    ids, inv = np.unique(ops["name"][sub], return_inverse=True)
    by_text = np.argsort([trace.strings[i] for i in ids.tolist()], kind="stable")
    name_rank = np.argsort(by_text)[inv.reshape(-1)]  # each op's name's rank as text
    # start first: each group keeps its positions, its members are reordered among them
    order[at] = sub[np.lexsort((name_rank, ops["stream"][sub], ops["end"][sub], s[at]))]
    return order


def device_order(trace: Trace, rank: int, device: int) -> I64:
    """The rows of the non-empty GPU ops of (rank, device) by start (ties: :func:`_by_start`)."""
    ops = trace.gpu_ops
    return _by_start(trace, device_rows(ops, ops["end"] > ops["start"], rank, device))


def device_timeline(
    trace: Trace, classes: npt.NDArray[np.int8], launches: Launches, rank: int, device: int
) -> DeviceTimeline:
    ops = trace.gpu_ops
    start, end = ops["start"], ops["end"]
    order = device_order(trace, rank, device)
    seg_s, seg_e, seg_l = iv.sweep(*iv.union_by_class(order, start, end, classes))
    k_op = iv.first_per_start(order, start, launches.start, ops["correlation"])
    return DeviceTimeline(rank, device, seg_s, seg_e, seg_l, k_op, order)


@dataclass
class Gaps:
    """The idle gaps of the reported windows that have a host_bound part: row of
    ``Attribution.windows``, ``[g0, g1)``, the end of the host_bound part and the op that
    ends the gap."""

    window_row: I64
    g0: I64
    g1: I64
    host_bound_end: I64
    op: I64

    def launch_overhead_ns(self, launches: Launches) -> I64:
        """Per gap, its ``launch_overhead`` part: from the end of its host_bound part (the
        launch call's start) to ``LAUNCH_PICKUP_NS`` after the call returned, at most to the
        gap's end (the rest is device_wait). Every gap with launch_overhead is here: its
        launch call starts after the gap begins, so its host_bound part is not empty."""
        picked_up = launches.end[self.op] + iv.LAUNCH_PICKUP_NS
        end = np.minimum(self.g1, np.maximum(self.host_bound_end, picked_up))
        out: I64 = end - self.host_bound_end
        return out

    @classmethod
    def concat(cls, parts: Sequence[Gaps]) -> Gaps:
        if not parts:
            z = np.empty(0, dtype=np.int64)
            return cls(z, z, z, z, z)
        return cls(*(concat([getattr(p, f) for p in parts]) for f in cls.__dataclass_fields__))


def concat(parts: Sequence[I64]) -> I64:
    """Concatenate, without a copy for a single part."""
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
