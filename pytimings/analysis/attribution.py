"""Latency attribution: every nanosecond of a window labelled, per device and rank.

Implements ../shared/docs/attribution.md. The heavy lifting (unions, the label sweep, the
idle split, projection of launches onto ranges) is in the Cython kernels of
:mod:`pytimings.analysis._intervals`; this module selects rows, builds windows and
assembles results. Nothing here depends on the order of events in the trace.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Union

import numpy as np
import numpy.typing as npt

from pytimings.analysis import _intervals as iv
from pytimings.errors import UsageError
from pytimings.ingest._model import CopyKind, OpKind, Trace
from pytimings.ingest.links import launch_index, project, unlinked
from pytimings.table import Table

# The JSON document (Attribution.to_dict): the keys of the contract (schema, totals,
# windows) and per_window_stats, slowest, launch_latency, findings, collectives (several
# ranks); "ignored": events the partition could not use, by reason; "dropped": records
# the loaders could not turn into events (Trace.dropped), by reason. Both count, name ->
# number; a reason that did not occur is absent.
SCHEMA = "pytimings.attribution/1"
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
# op classes
COMPUTE, COMM, MEMORY = 0, 1, 2
CLASS_NAMES = ("compute", "comm", "memory")
NO_LAUNCH = iv.NO_LAUNCH_NS

_COMM_KERNEL = re.compile(
    r"nccl|allreduce|all_reduce|allgather|all_gather|reduce_scatter|reducescatter"
    r"|alltoall|all_to_all|cross_device_reduce",
    re.IGNORECASE,
)

Rule = Union[str, "re.Pattern[str]", Callable[[str], bool]]
I64 = npt.NDArray[np.int64]


# --------------------------------------------------------------------------- launches


@dataclass
class Launches:
    """For each GPU op: the row of its launch call in ``api_calls`` (-1 when unknown) and
    that call's start (``NO_LAUNCH`` when unknown); ``thread`` is derived on first use;
    ``unlinked`` counts the ops whose correlation id no launch call carries."""

    api_row: I64
    start: I64
    api_thread: npt.NDArray[np.int32]  # api_calls["thread"], to derive ``thread``
    unlinked: int = 0  # ops with a correlation id that no launch call carries

    @cached_property
    def thread(self) -> npt.NDArray[np.int32]:
        """The launch call's thread row per op (-1 when unknown)."""
        t = self.api_thread[np.maximum(self.api_row, 0)] if self.api_thread.size else None
        if t is None:
            return np.full(self.api_row.size, -1, dtype=np.int32)
        t[self.api_row < 0] = -1
        return t


def link_launches(trace: Trace) -> Launches:
    """Each GPU op's launch call (:func:`pytimings.ingest.links.launch_index`, the one
    implementation of the contract's link) and its start."""
    api = trace.api_calls
    api_row = launch_index(trace)
    n = api_row.size
    start = np.take(api["start"], np.maximum(api_row, 0)) if len(api) else np.empty(n, np.int64)
    start[api_row < 0] = NO_LAUNCH
    return Launches(
        api_row=api_row, start=start, api_thread=api["thread"], unlinked=unlinked(trace, api_row)
    )


# --------------------------------------------------------------------------- classes


def _string_mask(strings: Sequence[str], match: Callable[[str], bool]) -> npt.NDArray[np.bool_]:
    return np.fromiter((bool(match(s)) for s in strings), dtype=bool, count=len(strings))


def _rule_matcher(rule: Rule) -> Callable[[str], bool]:
    if callable(rule) and not isinstance(rule, (str, re.Pattern)):
        return rule
    try:
        pat = re.compile(rule) if isinstance(rule, str) else rule
    except re.error as exc:
        raise UsageError(f"rule {rule!r} is not a valid regular expression: {exc}") from None
    return lambda s: pat.search(s) is not None


def _normalise_rules(rules: Mapping[str, Rule | Iterable[Rule]] | None) -> dict[str, list[Rule]]:
    out: dict[str, list[Rule]] = {}
    for label, value in (rules or {}).items():
        if label not in CLASS_NAMES:
            raise UsageError(f"rules: unknown class {label!r}; classes: {', '.join(CLASS_NAMES)}")
        if isinstance(value, (str, re.Pattern)) or callable(value):
            out[label] = [value]
        else:
            out[label] = list(value)
    return out


def _comm_ranges_mask(trace: Trace, launches: Launches) -> npt.NDArray[np.bool_]:
    """Ops launched from inside any range whose category is 'comm' on the launch thread."""
    rg = trace.ranges
    n = len(trace.gpu_ops)
    inside = np.zeros(n, dtype=bool)
    comm_cat = _string_mask(trace.strings, lambda s: s.lower() == "comm")
    sel = np.flatnonzero(comm_cat[rg["category"]] & (rg["thread"] >= 0))
    if sel.size == 0:
        return inside
    threads = rg["thread"][sel]
    for t in np.unique(threads):
        rows = sel[threads == t]
        starts = rg["start"][rows]
        order = np.argsort(starts, kind="stable")
        ends = np.maximum(rg["end"][rows], starts)
        us, ue = iv.union(starts[order], ends[order])
        ops = np.flatnonzero(launches.thread == t)
        inside[ops] = iv.points_in_set(launches.start[ops], us, ue).astype(bool)
    return inside


def _any_rule(matchers: Sequence[Callable[[str], bool]]) -> Callable[[str], bool]:
    return lambda s: any(m(s) for m in matchers)


def classify(
    trace: Trace,
    launches: Launches | None = None,
    rules: Mapping[str, Rule | Iterable[Rule]] | None = None,
) -> npt.NDArray[np.int8]:
    """The class of each GPU op: 0 compute, 1 comm, 2 memory (contract + user rules).

    User rules (a regex searched in the op name, or a callable on the name) override the
    built-in rules; when rules for several classes match, comm wins over memory over
    compute.
    """
    ops = trace.gpu_ops
    launches = launches if launches is not None else link_launches(trace)
    user = _normalise_rules(rules)
    kind = ops["kind"]
    names = ops["name"]
    is_kernel = kind == OpKind.KERNEL
    cls = np.where(is_kernel, COMPUTE, MEMORY).astype(np.int8)
    comm_name = _string_mask(trace.strings, lambda s: _COMM_KERNEL.search(s) is not None)
    cls[is_kernel & comm_name[names]] = COMM
    cls[(kind == OpKind.MEMCPY) & (ops["copy_kind"] == CopyKind.PTOP)] = COMM
    cls[_comm_ranges_mask(trace, launches)] = COMM
    for label in ("compute", "memory", "comm"):  # later wins
        if label in user:
            lut = _string_mask(trace.strings, _any_rule([_rule_matcher(r) for r in user[label]]))
            cls[lut[names]] = CLASS_NAMES.index(label)
    return cls


# --------------------------------------------------------------------------- windows


@dataclass
class _Windows:
    name: list[str]
    start: I64
    end: I64
    rank: npt.NDArray[np.int16]
    thread: npt.NDArray[np.int32]  # -1 for the whole-trace window
    range_row: I64  # row in trace.ranges, -1 for the whole-trace window


def _trace_windows(trace: Trace, launches: Launches, ranks: npt.NDArray[np.int16]) -> _Windows:
    """One whole-trace window per rank (API calls that launch nothing don't count)."""
    ops, rg, api = trace.gpu_ops, trace.ranges, trace.api_calls
    launching = np.zeros(len(api), dtype=bool)
    launching[launches.api_row[launches.api_row >= 0]] = True
    launching = np.flatnonzero(launching)
    starts, ends = [], []
    for r in ranks:
        lo, hi = [], []
        for col_s, col_e, mask in (
            (ops["start"], ops["end"], ops["rank"] == r),
            (rg["start"], rg["end"], rg["rank"] == r),
            (api["start"][launching], api["end"][launching], api["rank"][launching] == r),
        ):
            if mask.any():
                lo.append(int(col_s[mask].min()))
                hi.append(int(max(col_e[mask].max(), col_s[mask].max())))
        starts.append(min(lo))
        ends.append(max(hi))
    k = len(ranks)
    return _Windows(
        name=["trace"] * k,
        start=np.asarray(starts, dtype=np.int64),
        end=np.asarray(ends, dtype=np.int64),
        rank=np.asarray(ranks, dtype=np.int16),
        thread=np.full(k, -1, dtype=np.int32),
        range_row=np.full(k, -1, dtype=np.int64),
    )


def range_names(trace: Trace) -> list[str]:
    ids = np.unique(trace.ranges["name"])
    return sorted({trace.strings[i] for i in ids})


def _range_windows(
    trace: Trace, launches: Launches, pattern: str, ranks: npt.NDArray[np.int16]
) -> _Windows:
    """One window per instance of the ranges named ``pattern``: that exact name when the
    trace has it (names may hold ``[``, ``*``, ``?``), else a glob."""
    rg = trace.ranges
    names = range_names(trace)
    if pattern in names:
        matched = [pattern]
    else:
        matched = [s for s in names if fnmatch.fnmatchcase(s, pattern)]
    if not matched:
        close = difflib.get_close_matches(pattern, names, n=5, cutoff=0.0)
        hint = (
            f"; closest range names: {', '.join(close)}" if close else "; the trace has no ranges"
        )
        raise UsageError(f"--by {pattern!r} matches no range{hint}")
    ids = _string_mask(trace.strings, lambda s: s in set(matched))
    rows = np.flatnonzero(ids[rg["name"]] & np.isin(rg["rank"], ranks))
    r_s = rg["start"][rows]
    r_e = np.maximum(rg["end"][rows], r_s)
    r_t = rg["thread"][rows]
    count, _, last, _ = project(trace, launches.api_row, rows)
    w_end = np.where(count > 0, np.maximum(last, r_e), r_e)
    return _Windows(
        name=[trace.strings[i] for i in rg["name"][rows]],
        start=r_s,
        end=w_end,
        rank=rg["rank"][rows].astype(np.int16),
        thread=r_t.astype(np.int32),
        range_row=rows.astype(np.int64),
    )


# --------------------------------------------------------------------------- partition


@dataclass
class DeviceTimeline:
    """The labelled timeline of one (rank, device): busy segments and gap-ending ops."""

    rank: int
    device: int
    seg_start: I64
    seg_end: I64
    seg_label: npt.NDArray[np.int8]
    k_op: I64  # per distinct start of a non-empty op: the gpu_ops row that ends gaps there


def _device_rows(ops: Table, mask: npt.NDArray[np.bool_], rank: int, device: int) -> I64:
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


def device_timeline(
    trace: Trace, classes: npt.NDArray[np.int8], launches: Launches, rank: int, device: int
) -> DeviceTimeline:
    ops = trace.gpu_ops
    start, end = ops["start"], ops["end"]
    rows = _device_rows(ops, end > start, rank, device)
    order = _by_start(trace, rows)
    del rows
    seg_s, seg_e, seg_l = iv.sweep(*iv.union_by_class(order, start, end, classes))
    k_op = iv.first_per_start(order, start, launches.start, ops["correlation"])
    return DeviceTimeline(rank, device, seg_s, seg_e, seg_l, k_op)


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

    @classmethod
    def concat(cls, parts: Sequence[Gaps]) -> Gaps:
        if not parts:
            z = np.empty(0, dtype=np.int64)
            return cls(z, z, z, z, z)
        return cls(*(_cat([getattr(p, f) for p in parts]) for f in cls.__dataclass_fields__))


# --------------------------------------------------------------------------- collectives


@dataclass
class Collectives:
    """Per collective instance (n-th of a name) and rank, on aligned clocks."""

    table: Table  # name, index, rank, start_ns, end_ns, skew_ns, wait_ns, transfer_ns
    clock_offset_ns: dict[int, int]  # subtract from a rank's times to align it
    straggler: int | None
    last_counts: dict[int, int]  # rank -> instances it arrived last


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
    return Collectives(table, offsets, straggler, counts)


# --------------------------------------------------------------------------- results


def _pct(values: npt.ArrayLike) -> dict[str, float]:
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {"count": 0, "mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {
        "count": int(v.size),
        "mean": float(v.mean()),
        "p50": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "max": float(v.max()),
    }


@dataclass
class LaunchLatency:
    """``op.start - launch.start`` for every op with a known launch call."""

    latency_ns: I64
    op: I64  # gpu_ops row of each latency
    in_host_bound_ns: I64  # part of [launch.start, op.start) inside host_bound gaps

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = _pct(self.latency_ns)
        total = int(self.latency_ns[self.latency_ns > 0].sum())
        hb = int(self.in_host_bound_ns.sum())
        out.update(
            total_ns=total,
            in_host_bound_ns=hb,
            in_host_bound_share=(hb / total) if total else 0.0,
            negative=int(np.sum(self.latency_ns < 0)),
        )
        return out


@dataclass
class Attribution:
    """What :func:`attribute` returns; see the contract for every number."""

    trace: Trace
    by: str | None
    windows: Table
    gaps: Gaps
    launches: Launches
    classes: npt.NDArray[np.int8]
    launch_latency: LaunchLatency
    collectives: Collectives | None
    window_range_rows: I64  # per windows row: the row in trace.ranges it came from (-1: trace)
    # events the partition could not use, by reason (counted, never silently dropped)
    ignored: dict[str, int] = field(default_factory=dict)
    _findings: list[Any] | None = field(default=None, repr=False)

    @property
    def totals(self) -> dict[str, int]:
        """Sum over all window entries of ``window_ns`` and each ``<label>_ns``."""
        return {c: int(self.windows[c].sum()) for c in ("window_ns", *(f"{x}_ns" for x in LABELS))}

    def per_window_stats(self) -> dict[str, dict[str, float]]:
        """Per label (and window_ns): count, mean, p50, p90, p99, max over window entries."""
        return {c: _pct(self.windows[c]) for c in ("window_ns", *(f"{x}_ns" for x in LABELS))}

    def dominant(self, row: int) -> str:
        vals = [int(self.windows[f"{x}_ns"][row]) for x in LABELS]
        return LABELS[int(np.argmax(vals))]

    def slowest(self, n: int = 5) -> list[dict[str, Any]]:
        """The ``n`` longest window entries (ties: earliest), with their dominant label."""
        w = self.windows
        order = np.lexsort((w["device"], w["rank"], w["start_ns"], -w["window_ns"]))[:n]
        out = []
        for i in order:
            row = self._row(int(i))
            row["row"] = int(i)  # in .windows
            row["dominant"] = self.dominant(int(i))
            row["dominant_ns"] = row[f"{row['dominant']}_ns"]
            out.append(row)
        return out

    def _row(self, i: int) -> dict[str, Any]:
        w = self.windows
        return {c: (w[c][i] if c == "name" else int(w[c][i])) for c in w.columns}

    def findings(self) -> list[Any]:
        """Ranked biggest losses with their evidence (:mod:`pytimings.analysis.findings`)."""
        if self._findings is None:
            from pytimings.analysis.findings import find

            self._findings = find(self)
        return self._findings

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schema": SCHEMA,
            "by": self.by,
            "totals": self.totals,
            "windows": [self._row(i) for i in range(len(self.windows))],
            "per_window_stats": self.per_window_stats(),
            "slowest": self.slowest(5),
            "launch_latency": {
                **self.launch_latency.summary(),
                "unlinked_ops": self.launches.unlinked,
            },
            "findings": [f.to_dict() for f in self.findings()],
            "ignored": self.ignored,
            "dropped": {k: int(v) for k, v in sorted(self.trace.dropped.items()) if v},
        }
        if self.collectives is not None:
            c = self.collectives
            doc["collectives"] = {
                "straggler": c.straggler,
                "last_counts": {str(k): v for k, v in c.last_counts.items()},
                "clock_offset_ns": {str(k): v for k, v in c.clock_offset_ns.items()},
                "skew_ns": _pct(c.table["skew_ns"]),
                "wait_ns": _pct(c.table["wait_ns"]),
                "transfer_ns": _pct(c.table["transfer_ns"]),
            }
        return doc

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


def distinct(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Sorted distinct values of a small-integer column (ranks, devices), in O(n)."""
    if values.size == 0:
        return values[:0]
    lo = int(values.min())
    seen = np.bincount((values - lo).astype(np.intp), minlength=1)
    return (np.flatnonzero(seen) + lo).astype(values.dtype)


def _select(values: npt.NDArray[Any], wanted: Sequence[int] | None, what: str) -> npt.NDArray[Any]:
    have = distinct(values)
    if wanted is None:
        return have
    w = np.asarray(sorted(set(int(x) for x in wanted)), dtype=have.dtype)
    missing = np.setdiff1d(w, have)
    if missing.size:
        raise UsageError(
            f"{what} {', '.join(map(str, missing))} not in the trace; "
            f"it has {what}s {', '.join(map(str, have)) or 'none'}"
        )
    return w


def attribute(
    trace: Trace,
    by: str | None = None,
    devices: Sequence[int] | None = None,
    ranks: Sequence[int] | None = None,
    rules: Mapping[str, Rule | Iterable[Rule]] | None = None,
) -> Attribution:
    """Attribute each window's time on each device to the eight labels of the contract.

    ``by``: a range name or glob; one window per instance (else one whole-trace window per
    rank). ``devices``/``ranks`` restrict what is reported. ``rules`` add classification
    rules: ``{"comm": [regex or callable(name) -> bool, ...], "memory": ..., ...}``.
    """
    ops = trace.gpu_ops
    if len(ops) == 0:
        raise UsageError("the trace has no GPU ops (kernels, memcpys, memsets) to attribute")
    rank_sel = _select(ops["rank"], ranks, "rank")
    in_ranks = ops["rank"] == rank_sel[0] if rank_sel.size == 1 else np.isin(ops["rank"], rank_sel)
    dev_sel = _select(ops["device"][in_ranks], devices, "device")
    del in_ranks
    launches = link_launches(trace)
    classes = classify(trace, launches, rules)
    win = (
        _range_windows(trace, launches, by, rank_sel)
        if by is not None
        else _trace_windows(trace, launches, rank_sel)
    )
    cols: dict[str, list[Any]] = {
        c: []
        for c in (
            "name",
            "start_ns",
            "end_ns",
            "device",
            "rank",
            "window_ns",
            *(f"{x}_ns" for x in LABELS),
        )
    }
    extra_rr: list[I64] = []
    extra_th: list[npt.NDArray[np.int32]] = []
    gap_parts: list[Gaps] = []
    lat_parts: list[tuple[I64, I64, I64]] = []
    row0 = 0
    names = np.asarray(win.name, dtype=object)
    for r in rank_sel:
        wsel = np.flatnonzero(win.rank == r)
        if wsel.size == 0:
            continue
        w_s = np.ascontiguousarray(win.start[wsel])
        w_e = np.ascontiguousarray(win.end[wsel])
        rank_devs = distinct(ops["device"][ops["rank"] == r])
        for d in rank_devs[np.isin(rank_devs, dev_sel)]:
            tl = device_timeline(trace, classes, launches, int(r), int(d))
            part, (gw, g0, g1, gh, gop) = iv.partition_windows(
                w_s,
                w_e,
                tl.seg_start,
                tl.seg_end,
                tl.seg_label,
                tl.k_op,
                ops["start"],
                launches.start,
                True,
            )
            del tl
            k = wsel.size
            cols["name"].append(names[wsel])
            cols["start_ns"].append(w_s)
            cols["end_ns"].append(w_e)
            cols["device"].append(np.full(k, d, dtype=np.int16))
            cols["rank"].append(np.full(k, r, dtype=np.int16))
            cols["window_ns"].append(w_e - w_s)
            for j, lab in enumerate(LABELS):
                cols[f"{lab}_ns"].append(part[:, j])
            extra_rr.append(win.range_row[wsel])
            extra_th.append(win.thread[wsel])
            gap_parts.append(Gaps(gw + row0, g0, g1, gh, gop))
            order = np.argsort(g0, kind="stable")
            lat_parts.append(
                _device_latency(trace, launches, int(r), int(d), iv.union(g0[order], gh[order]))
            )
            row0 += k
    dtypes = {"name": object, "device": np.int16, "rank": np.int16}
    table = Table(
        {
            c: (
                np.concatenate(v).astype(dtypes.get(c, np.int64))
                if v
                else np.empty(0, dtypes.get(c, np.int64))
            )
            for c, v in cols.items()
        }
    )
    rr = np.concatenate(extra_rr) if extra_rr else np.empty(0, np.int64)
    th = np.concatenate(extra_th) if extra_th else np.empty(0, np.int32)
    # a row order independent of event order: by start, rank, device, end, name, thread
    order = (
        np.lexsort(
            (
                th,
                table["name"].astype(str),
                table["end_ns"],
                table["device"],
                table["rank"],
                table["start_ns"],
            )
        )
        if len(table)
        else np.empty(0, dtype=np.int64)
    )
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size)
    table = table.take(order)
    rr = rr[order]
    gaps = Gaps.concat(gap_parts)
    gaps.window_row = inverse[gaps.window_row]
    if len(gap_parts) > 1 or len(table) > 1:  # gaps in window order, then time order
        g_order = np.lexsort((gaps.g0, gaps.window_row))
        gaps = Gaps(*(getattr(gaps, f)[g_order] for f in Gaps.__dataclass_fields__))
    total = sum(table[f"{x}_ns"] for x in LABELS)
    if not np.array_equal(total, table["window_ns"]):  # the invariant, checked on every input
        raise AssertionError("attribution labels do not sum to the window lengths")
    ignored = {
        "GPU ops ending before they start": int(np.sum(ops["end"] < ops["start"])),
        "ranges ending before they start (taken as zero-length)": int(
            np.sum(trace.ranges["end"] < trace.ranges["start"])
        ),
    }
    return Attribution(
        ignored={k: v for k, v in ignored.items() if v},
        trace=trace,
        by=by,
        windows=table,
        gaps=gaps,
        launches=launches,
        classes=classes,
        launch_latency=LaunchLatency(*(_cat([p[i] for p in lat_parts]) for i in range(3))),
        collectives=collectives(trace, classes, [int(r) for r in rank_sel]),
        window_range_rows=rr,
    )


def _cat(parts: Sequence[I64]) -> I64:
    """Concatenate, without a copy for a single part."""
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _device_latency(
    trace: Trace, launches: Launches, rank: int, device: int, host_bound: tuple[I64, I64]
) -> tuple[I64, I64, I64]:
    """Launch latency of the ops of one device: (latency, op row, part in host_bound)."""
    ops = trace.gpu_ops
    rows = _device_rows(ops, launches.api_row >= 0, rank, device)
    ls = launches.start[rows]
    os_ = ops["start"][rows]
    in_hb = iv.overlap_lengths(ls, os_, *host_bound)
    np.subtract(os_, ls, out=os_)
    return os_, rows, in_hb
