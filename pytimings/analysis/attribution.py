"""Latency attribution: every nanosecond of a window labelled, per device and rank.

:func:`attribute` implements the contract (docs/attribution.md): it links launches
(:mod:`.launches`), classifies ops (:mod:`.classes`), builds windows (:mod:`.windows`),
partitions each (rank, device) (:mod:`.partition`, over the Cython kernels of
:mod:`pytimings._native._intervals`), matches collectives across ranks
(:mod:`.collectives`) and returns an :class:`~.result.Attribution`. Nothing here depends on
the order of events in the trace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings._native import _intervals as iv
from pytimings.analysis.classes import Rule, check_comm_glob, classify
from pytimings.analysis.collectives import collectives
from pytimings.analysis.graphs import graph_use
from pytimings.analysis.host import host_attribution, range_host_windows, thread_host_windows
from pytimings.analysis.launches import Launches, link_launches
from pytimings.analysis.partition import LABELS, Gaps, concat, device_rows, device_timeline
from pytimings.analysis.result import SCHEMA, Attribution, LaunchLatency
from pytimings.analysis.windows import (
    no_windows,
    range_windows,
    trace_windows,
    window_numbers,
)
from pytimings.errors import UsageError
from pytimings.model.trace import Trace
from pytimings.table import Table

__all__ = ["LABELS", "SCHEMA", "Attribution", "attribute", "distinct", "selected"]
I64 = npt.NDArray[np.int64]


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
    # compared as Python ints: a value outside the column's dtype (--device 32768 on int16)
    # is simply not in the trace
    w = sorted({int(x) for x in wanted})
    present = set(have.tolist())
    missing = [x for x in w if x not in present]
    if missing:
        raise UsageError(
            f"{what} {', '.join(map(str, missing))} not in the trace; "
            f"it has {what}s {', '.join(map(str, have)) or 'none'}"
        )
    return np.asarray(w, dtype=have.dtype)


def selected(
    trace: Trace, ranks: Sequence[int] | None, devices: Sequence[int] | None
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """The ranks and devices ``--rank``/``--device`` select (all by default); one the
    trace lacks is a UsageError."""
    ops = trace.gpu_ops
    rank_sel = _select(ops["rank"] if len(ops) else _host_ranks(trace), ranks, "rank")
    in_ranks = ops["rank"] == rank_sel[0] if rank_sel.size == 1 else np.isin(ops["rank"], rank_sel)
    return rank_sel, _select(ops["device"][in_ranks], devices, "device")


def attribute(
    trace: Trace,
    by: str | None = None,
    devices: Sequence[int] | None = None,
    ranks: Sequence[int] | None = None,
    rules: Mapping[str, Rule | Iterable[Rule]] | None = None,
    comm_kernels: Sequence[str] = (),
) -> Attribution:
    """Attribute each window's time on each device to the eight labels of the contract.

    ``by``: a range name or glob; one window per instance (else one whole-trace window per
    rank). ``devices``/``ranks`` restrict what is reported. ``rules`` add classification
    rules: ``{"comm": [regex or callable(name) -> bool, ...], "memory": ..., ...}``.
    ``comm_kernels``: globs of kernel names that are communication (``--comm-kernel``;
    any case, full or short name), on top of the contract's names.
    """
    if isinstance(comm_kernels, str):  # one glob, not its characters
        comm_kernels = (comm_kernels,)
    for g in comm_kernels:  # a bad glob is an error even on a trace with no GPU ops
        check_comm_glob(g, "comm_kernels")
    ops = trace.gpu_ops
    # no GPU ops and no --by: the host view of each thread over the whole trace
    threads_view = len(ops) == 0 and by is None
    if threads_view and _host_ranks(trace).size == 0:
        raise UsageError(
            "the trace has no GPU ops (kernels, memcpys, memsets) and no host activity "
            "(ranges, API calls, cpu ops, OS calls): nothing to attribute"
        )
    rank_sel, dev_sel = selected(trace, ranks, devices)
    launches = link_launches(trace)
    classes = classify(trace, launches, rules, comm_kernels)
    if by is not None:
        win = range_windows(trace, launches, by, rank_sel)
    elif threads_view:
        win = no_windows()
    else:
        win = trace_windows(trace, launches, rank_sel)
    cols: dict[str, list[Any]] = {
        c: []
        for c in (
            "index",  # the window's number (window_numbers), filled in below
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
    lat_parts: list[tuple[I64, I64]] = []
    orders: dict[tuple[int, int], I64] = {}
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
                launches.end,
                True,
            )
            orders[(int(r), int(d))] = tl.order  # the op table's busy split reads it
            del tl
            k = wsel.size
            cols["index"].append(wsel)  # for now: the window's place in win
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
            lat_parts.append(_device_latency(trace, launches, int(r), int(d)))
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
    tie = table["index"]  # the window's place in win (its entries share it)
    if by is not None and len(win.range_row):
        # windows tiled to one extent: their ranges' own start and end decide, not their
        # rows (ranges alike in both stay in row order: their windows are alike too)
        rs, re = trace.ranges["start"][win.range_row], trace.ranges["end"][win.range_row]
        order = np.lexsort((np.arange(rs.size), re, rs))
        place = np.empty_like(order)
        place[order] = np.arange(order.size)
        tie = place[tie]
    table = table.with_columns(
        index=window_numbers(
            table["start_ns"], table["rank"], table["end_ns"], th, tie, by is not None
        )
    )
    # a row order independent of event order: by start, rank, device, end, name, thread,
    # number (windows alike in all the rest: their ranges' own extents)
    order = (
        np.lexsort(
            (
                table["index"],
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
    gaps.window_row = inverse[gaps.window_row] if len(gaps.window_row) else gaps.window_row
    if len(gap_parts) > 1 or len(table) > 1:  # gaps in window order, then time order
        g_order = np.lexsort((gaps.g0, gaps.window_row))
        gaps = Gaps(*(getattr(gaps, f)[g_order] for f in Gaps.__dataclass_fields__))
    total = sum(table[f"{x}_ns"] for x in LABELS)
    if not np.array_equal(total, table["window_ns"]):  # the invariant, checked on every input
        raise AssertionError("attribution labels do not sum to the window lengths")
    hw = (
        range_host_windows(trace, win)
        if by is not None
        else thread_host_windows(trace, rank_sel)
        if threads_view
        else None
    )
    host = host_attribution(trace, launches, gaps, table["host_bound_ns"], hw)
    ignored = {
        "GPU ops ending before they start": int(np.sum(ops["end"] < ops["start"])),
        "ranges ending before they start (taken as zero-length)": int(
            np.sum(trace.ranges["end"] < trace.ranges["start"])
        ),
    }
    return Attribution(
        ignored={k: v for k, v in ignored.items() if v},
        comm_kernels=tuple(comm_kernels),
        trace=trace,
        by=by,
        windows=table,
        gaps=gaps,
        launches=launches,
        classes=classes,
        launch_latency=LaunchLatency(*(concat([p[i] for p in lat_parts]) for i in range(2))),
        collectives=collectives(trace, classes, [int(r) for r in rank_sel]),
        window_range_rows=rr,
        graphs=graph_use(
            trace, launches, zip(table["rank"].tolist(), table["device"].tolist(), strict=True)
        ),
        host=host,
        device_orders=orders,
    )


def _host_ranks(trace: Trace) -> npt.NDArray[np.int16]:
    """The ranks of a trace with no GPU ops: those of its host activities (ranges on host
    threads, API calls, host_ops)."""
    rg = trace.ranges
    parts = [rg["rank"][rg["thread"] >= 0], trace.api_calls["rank"], trace.host_ops["rank"]]
    return np.concatenate([np.asarray(p, dtype=np.int16) for p in parts])


def _device_latency(trace: Trace, launches: Launches, rank: int, device: int) -> tuple[I64, I64]:
    """Launch latency of the ops of one device: (latency, op row)."""
    ops = trace.gpu_ops
    rows = device_rows(ops, launches.api_row >= 0, rank, device)
    return ops["start"][rows] - launches.start[rows], rows
