"""Several ranks: the n-th collective of a name on each rank matched, clocks aligned by
collective ends, and each rank's arrival skew, wait and transfer; the straggler."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from pytimings.analysis.classes import COMM
from pytimings.model.trace import Trace
from pytimings.table import Table

I64 = npt.NDArray[np.int64]


@dataclass
class Collectives:
    """Per collective instance (n-th of a name) and rank, on aligned clocks."""

    table: Table  # name, index, rank, start_ns, end_ns, skew_ns, wait_ns, transfer_ns
    clock_offset_ns: dict[int, int]  # subtract from a rank's times to align it
    straggler: int | None
    last_counts: dict[int, int]  # rank -> instances it arrived last
    op: I64 = field(default_factory=lambda: np.empty(0, np.int64))  # gpu_ops row per table row


def _median_ns(values: I64) -> int:
    """The median of integer nanoseconds rounded to the nearest ns (halves up), exactly:
    no float, whose 53-bit mantissa would drop nanoseconds of offsets between epochs."""
    v = np.sort(values)
    mid = v.size // 2
    if v.size % 2:
        return int(v[mid])
    a, b = int(v[mid - 1]), int(v[mid])
    return a + (b - a + 1) // 2


def collectives(
    trace: Trace, classes: npt.NDArray[np.int8], ranks: Sequence[int]
) -> Collectives | None:
    """Arrival skew, wait and transfer of matching collectives across ranks (contract)."""
    ops = trace.gpu_ops
    if len(ranks) < 2:
        return None
    comm = np.flatnonzero((classes == COMM) & np.isin(ops["rank"], ranks))
    if comm.size == 0:
        return None
    # n-th op of each name on each rank, in start order (ties: end, correlation)
    name, rank = ops["name"][comm], ops["rank"][comm]
    order = np.lexsort((ops["correlation"][comm], ops["end"][comm], ops["start"][comm], name, rank))
    comm, name, rank = comm[order], name[order], rank[order]
    grp = np.ones(comm.size, dtype=bool)
    grp[1:] = (name[1:] != name[:-1]) | (rank[1:] != rank[:-1])
    gstart = np.flatnonzero(grp)
    index = np.arange(comm.size) - np.repeat(gstart, np.diff(np.append(gstart, comm.size)))
    start = ops["start"][comm]
    end = ops["end"][comm]
    # instance key (name, index); keep instances present on at least two ranks
    inst = (name.astype(np.int64) << 32) | index
    uniq, inv, cnt = np.unique(inst, return_inverse=True, return_counts=True)
    keep = cnt[inv] >= 2
    if not keep.any():
        return None
    comm, name, rank, index, start, end, inv = (
        a[keep] for a in (comm, name, rank, index, start, end, inv)
    )
    ref = int(rank.min())
    ref_end = np.full(uniq.size, np.iinfo(np.int64).min, dtype=np.int64)
    is_ref = rank == ref
    ref_end[inv[is_ref]] = end[is_ref]
    offsets: dict[int, int] = {}
    for r in np.unique(rank):
        m = (rank == r) & (ref_end[inv] != np.iinfo(np.int64).min)
        offsets[int(r)] = _median_ns(end[m] - ref_end[inv[m]]) if m.any() else 0
    off = np.fromiter((offsets[int(r)] for r in rank), dtype=np.int64, count=rank.size)
    a_start, a_end = start - off, end - off
    first = np.full(uniq.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, inv, a_start)
    last = np.full(uniq.size, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last, inv, a_start)
    dur = end - start
    skew = a_start - first[inv]
    wait = np.minimum(dur, last[inv] - a_start)
    transfer = dur - wait
    # straggler: the rank arriving last most often (ties in that count: lowest rank). An
    # instance has a last arriver only when one rank alone arrives latest, after the first:
    # ranks arriving together (zero skew, or a tie for last) blame nobody.
    is_last = a_start == last[inv]
    n_last = np.bincount(inv, weights=is_last, minlength=uniq.size)
    has_last = (n_last == 1) & (last > first)
    counted = is_last & has_last[inv]
    counts = {int(r): int(np.sum(counted & (rank == r))) for r in np.unique(rank)}
    straggler = max(sorted(counts), key=lambda r: counts[r]) if any(counts.values()) else None
    table = Table(
        {
            "name": np.asarray([trace.strings[i] for i in name], dtype=object),
            "index": index.astype(np.int64),
            "rank": rank.astype(np.int16),
            "start_ns": a_start,
            "end_ns": a_end,
            "skew_ns": skew,
            "wait_ns": wait,
            "transfer_ns": transfer,
        }
    )
    return Collectives(table, offsets, straggler, counts, comm.astype(np.int64))
