"""Collectives: each communication op's achieved bandwidth (nccl-tests' algbw and busbw,
from the bytes and group size the trace records), and with several ranks the n-th collective
of a name on each rank matched, clocks aligned by collective ends, and each rank's arrival
skew, wait and transfer; the straggler."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from pytimings._native import _intervals as iv
from pytimings.analysis.classes import COMM, COMPUTE
from pytimings.model.comm import COLLECTIVES, bus_factor, collective_index
from pytimings.model.trace import OpKind, Trace
from pytimings.table import Table

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


@dataclass
class CommBandwidth:
    """Per communication op (``calls``) and per (rank, collective) (``summary``): bytes and
    nccl-tests' algbw = bytes / duration and busbw = algbw * bus factor (docs/collectives.md).
    NaN where the trace records no bytes (or, for busbw, no collective or group size)."""

    calls: Table  # row, rank, device, name, collective, bytes, group_size, start_ns, end_ns,
    # duration_ns, algbw_gbps, busbw_gbps
    summary: Table  # rank, collective, calls, sized_calls, bytes, sized_ns, algbw_gbps,
    # busbw_gbps, group_sizes

    def to_dicts(self) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for i in range(len(self.summary)):
            row = {c: self.summary[c][i] for c in self.summary.columns}
            out.append(
                {
                    k: (None if isinstance(v, float) and np.isnan(v) else _plain(v))
                    for k, v in row.items()
                }
            )
        return out


def _plain(v: object) -> object:
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def op_collectives(trace: Trace, rows: I64) -> npt.NDArray[np.int8]:
    """The collective of each op (an index into COLLECTIVES, -1 unknown): as the loader
    recorded it, else as the op's name says (NCCL kernels name theirs)."""
    ops = trace.gpu_ops
    coll: npt.NDArray[np.int8] = ops["collective"][rows].copy()
    unknown = coll < 0
    names = ops["name"][rows]
    for nid in np.unique(names[unknown]).tolist():
        coll[unknown & (names == nid)] = collective_index(trace.strings[nid])
    return coll


def collective_mask(trace: Trace, classes: npt.NDArray[np.int8]) -> npt.NDArray[np.bool_]:
    """The communication ops that can be collectives: comm ops that are not copies. A copy
    (a memcpy or memset record, or a kernel whose name says copy and names no collective,
    e.g. a ``direct_copy_kernel`` launched inside a comm range) moves data between two
    buffers; it is comm time, never a collective with an nccl-tests size."""
    ops = trace.gpu_ops
    copy_name = np.zeros(len(trace.strings) + 1, dtype=bool)
    names = ops["name"]
    for nid in np.unique(names[classes == COMM]).tolist():
        text = trace.strings[nid]
        copy_name[nid] = "copy" in text.lower() and collective_index(text) < 0
    is_copy = (ops["kind"] != OpKind.KERNEL) | copy_name[names]
    mask: npt.NDArray[np.bool_] = (classes == COMM) & ~is_copy
    return mask


def bus_factors(collective: npt.NDArray[np.int8], group: npt.NDArray[np.int16]) -> F64:
    """nccl-tests' busbw / algbw factor per op, NaN where the collective or the group size
    is unknown."""
    out = np.full(collective.size, np.nan)
    known = (collective >= 0) & (group > 0)
    key = (collective.astype(np.int64) << 16) | group.astype(np.int64)
    pairs, at = np.unique(key[known], return_inverse=True)
    factors = np.array([bus_factor(COLLECTIVES[k >> 16], k & 0xFFFF) for k in pairs.tolist()])
    out[known] = factors[at.reshape(-1)] if pairs.size else out[known]
    return out


def bandwidth(
    trace: Trace, classes: npt.NDArray[np.int8], scope: Table | None = None
) -> CommBandwidth:
    """Bytes, algbw and busbw of every collective (:func:`collective_mask`: the comm ops but
    copies) of the (rank, device) pairs of the table ``scope`` (the analysed windows), and
    their sums per (rank, collective): algbw = sum(bytes) / sum(duration) over the ops with
    bytes, busbw the same with each op's bytes times its bus factor over the ops with a known
    factor."""
    ops = trace.gpu_ops
    mask = collective_mask(trace, classes)
    if scope is not None:
        pairs = (scope["rank"].astype(np.int64) << 16) | (scope["device"].astype(np.int64) & 0xFFFF)
        mine = (ops["rank"].astype(np.int64) << 16) | (ops["device"].astype(np.int64) & 0xFFFF)
        mask &= np.isin(mine, pairs)
    rows = np.flatnonzero(mask)
    nbytes = ops["bytes"][rows].astype(np.int64)
    dur = (ops["end"][rows] - ops["start"][rows]).astype(np.int64)
    coll = op_collectives(trace, rows)
    group = ops["group_size"][rows]
    factor = bus_factors(coll, group)
    sized = (nbytes > 0) & (dur > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        algbw = np.where(sized, nbytes / np.where(dur > 0, dur, 1), np.nan)
    busbw = algbw * factor
    calls = Table(
        {
            "row": rows.astype(np.int64),
            "rank": ops["rank"][rows],
            "device": ops["device"][rows],
            "name": _names(trace.strings, ops["name"][rows]),
            "collective": np.asarray((*COLLECTIVES, ""), dtype=object)[coll],  # -1: ""
            "bytes": nbytes,
            "group_size": group,
            "start_ns": ops["start"][rows],
            "end_ns": ops["end"][rows],
            "duration_ns": dur,
            "algbw_gbps": algbw,
            "busbw_gbps": busbw,
        }
    )
    return CommBandwidth(calls, _summary(calls, coll, sized, factor))


def _names(strings: list[str], ids: npt.NDArray[np.int32]) -> npt.NDArray[np.object_]:
    """The strings of ``ids`` (each distinct id looked up once)."""
    uniq, inv = np.unique(ids, return_inverse=True)
    return np.asarray([strings[i] for i in uniq.tolist()], dtype=object)[inv.reshape(-1)]


def _summary(
    calls: Table, coll: npt.NDArray[np.int8], sized: npt.NDArray[np.bool_], factor: F64
) -> Table:
    key = (calls["rank"].astype(np.int64) << 8) | (coll.astype(np.int64) & 0xFF)
    keys, at = np.unique(key, return_inverse=True)
    at = at.reshape(-1)
    k = keys.size
    dur, nbytes = calls["duration_ns"], calls["bytes"]
    bus = ~np.isnan(factor) & sized

    def total(values: npt.ArrayLike, where: npt.NDArray[np.bool_]) -> F64:
        w = np.asarray(values, dtype=np.float64)[where]
        out: F64 = np.bincount(at[where], weights=w, minlength=k).astype(np.float64)
        return out

    sized_ns = total(dur, sized).astype(np.int64)
    sized_bytes = total(nbytes, sized).astype(np.int64)  # exact below 2^53 bytes
    bus_ns = total(dur, bus)
    moved = total(nbytes * np.nan_to_num(factor), bus)
    groups: list[list[int]] = [[] for _ in range(k)]
    g = calls["group_size"]
    pairs = np.unique((at.astype(np.int64) << 16) | (g.astype(np.int64) & 0xFFFF))
    for p in pairs.tolist():
        if p & 0xFFFF and (p & 0xFFFF) < 0x8000:  # a known (positive) group size
            groups[p >> 16].append(p & 0xFFFF)
    names = (*COLLECTIVES, "unknown")
    with np.errstate(invalid="ignore", divide="ignore"):
        cols = {
            "rank": keys >> 8,
            "collective": np.asarray([names[c] for c in (keys & 0xFF).astype(np.int8)], object),
            "calls": np.bincount(at, minlength=k),
            "sized_calls": np.bincount(at[sized], minlength=k),
            "bytes": sized_bytes,
            "sized_ns": sized_ns,
            "algbw_gbps": np.where(sized_ns > 0, sized_bytes / np.maximum(sized_ns, 1), np.nan),
            "busbw_gbps": np.where(bus_ns > 0, moved / np.maximum(bus_ns, 1), np.nan),
        }
    out = np.empty(k, dtype=object)
    for i, v in enumerate(groups):
        out[i] = v
    return Table({**cols, "group_sizes": out})


@dataclass
class Collectives:
    """Per collective instance (n-th of a name) and rank, on aligned clocks."""

    # name, index, rank, start_ns, end_ns, skew_ns, wait_ns, transfer_ns, bytes, busbw_gbps
    # (over the duration) and transfer_busbw_gbps (over the transfer: the wait left out)
    table: Table
    clock_offset_ns: dict[int, int]  # subtract from a rank's times to align it
    straggler: int | None
    last_counts: dict[int, int]  # rank -> instances it arrived last
    op: I64 = field(default_factory=lambda: np.empty(0, np.int64))  # gpu_ops row per table row
    # per rank, of the time these collectives are exposed (comm_exposed: no compute runs on
    # the device): how much is waiting for peers (inside a wait) and how much transfer
    exposed: dict[int, dict[str, int]] = field(default_factory=dict)


def _median_ns(values: I64) -> int:
    """The median of integer nanoseconds rounded to the nearest ns (halves up), exactly:
    no float, whose 53-bit mantissa would drop nanoseconds of offsets between epochs."""
    v = np.sort(values)
    mid = v.size // 2
    if v.size % 2:
        return int(v[mid])
    a, b = int(v[mid - 1]), int(v[mid])
    return a + (b - a + 1) // 2


Intervals = tuple[I64, I64]


def compute_under_comm(
    trace: Trace, classes: npt.NDArray[np.int8]
) -> dict[tuple[int, int], Intervals]:
    """Per (rank, device) with communication ops: the part of the compute ops' union that
    lies under the communication ops' union (what decides which comm time is exposed)."""
    ops = trace.gpu_ops
    out: dict[tuple[int, int], Intervals] = {}
    comm = np.flatnonzero(classes == COMM)
    keys = np.stack([ops["rank"][comm], ops["device"][comm]]).astype(np.int64)
    for r, d in np.unique(keys, axis=1).T.tolist():
        on = (ops["rank"] == r) & (ops["device"] == d)
        m_s, m_e = _union(ops, np.flatnonzero(on & (classes == COMM)))
        c_s, c_e = _union(ops, np.flatnonzero(on & (classes == COMPUTE)))
        out[(int(r), int(d))] = iv.intersect(m_s, m_e, c_s, c_e)
    return out


def _union(ops: Table, rows: I64) -> Intervals:
    rows = rows[np.argsort(ops["start"][rows], kind="stable")]
    return iv.union(ops["start"][rows], ops["end"][rows])


def _length(s: I64, e: I64) -> int:
    return int((e - s).sum())


def _exposed_split(
    trace: Trace, rows: I64, wait: I64, compute: dict[tuple[int, int], Intervals]
) -> dict[int, dict[str, int]]:
    """Per rank: of the union of the collectives ``rows`` on each of its devices, the part
    no compute op covers (exposed) and of that the part inside the waits ``[start, start +
    wait)``, on the rank's own clock (the contract's partition: comm_exposed = comm and not
    compute). ``compute``: per (rank, device), compute intervals (at least those under the
    communication ops)."""
    ops = trace.gpu_ops
    out: dict[int, dict[str, int]] = {}
    keys = np.stack([ops["rank"][rows], ops["device"][rows]]).astype(np.int64)
    none = (np.empty(0, np.int64), np.empty(0, np.int64))
    for r, d in np.unique(keys, axis=1).T.tolist():
        m = (keys[0] == r) & (keys[1] == d)
        sel, w = rows[m], wait[m]
        c_s, c_e = compute.get((int(r), int(d)), none)
        order = np.argsort(ops["start"][sel], kind="stable")
        sel, w = sel[order], w[order]
        a_s, a_e = iv.union(ops["start"][sel], ops["end"][sel])
        w_s, w_e = iv.union(ops["start"][sel], ops["start"][sel] + np.maximum(w, 0))
        exposed = _length(a_s, a_e) - _length(*iv.intersect(a_s, a_e, c_s, c_e))
        waiting = _length(w_s, w_e) - _length(*iv.intersect(w_s, w_e, c_s, c_e))
        acc = out.setdefault(int(r), {"exposed_ns": 0, "waiting_ns": 0, "transfer_ns": 0})
        acc["exposed_ns"] += exposed
        acc["waiting_ns"] += waiting
        acc["transfer_ns"] += exposed - waiting
    return out


def collectives(
    trace: Trace,
    classes: npt.NDArray[np.int8],
    ranks: Sequence[int],
    compute: dict[tuple[int, int], Intervals] | None = None,
) -> Collectives | None:
    """Arrival skew, wait and transfer of matching collectives across ranks (contract), and
    their exposed time split into waiting and transfer. ``compute``: the compute intervals
    under the communication ops per (rank, device) (:func:`compute_under_comm`), when
    ``trace`` holds only the communication ops (per-rank tasks); None: from ``trace``."""
    ops = trace.gpu_ops
    if len(ranks) < 2:
        return None
    comm = np.flatnonzero(collective_mask(trace, classes) & np.isin(ops["rank"], ranks))
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
    nbytes = ops["bytes"][comm].astype(np.int64)
    moved = nbytes * bus_factors(op_collectives(trace, comm), ops["group_size"][comm])
    with np.errstate(invalid="ignore", divide="ignore"):
        busbw = np.where((nbytes > 0) & (dur > 0), moved / np.where(dur > 0, dur, 1), np.nan)
        t_busbw = np.where(
            (nbytes > 0) & (transfer > 0), moved / np.where(transfer > 0, transfer, 1), np.nan
        )
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
            "bytes": nbytes,
            "busbw_gbps": busbw,
            "transfer_busbw_gbps": t_busbw,
        }
    )
    if compute is None:
        compute = compute_under_comm(trace, classes)
    exposed = _exposed_split(trace, comm, wait, compute)
    return Collectives(table, offsets, straggler, counts, comm.astype(np.int64), exposed)
