"""Host attribution (docs/attribution.md): time on a host thread charged to the innermost
host activity there, over the compiled sweep of :mod:`pytimings._native._host`.

Host activities are the ranges on host threads, every API call and the ``host_ops`` rows
(cpu_op, python, os), each with its :class:`~pytimings.model.trace.ActivityKind`. Charges
come back as a table ``(row, kind, name, ns)``: per row (a window entry, a host window),
every (kind, name) charged, largest first (ties: kind order, then name text), summing to
the length of that row's query intervals.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings._native import _host
from pytimings.analysis.launches import Launches
from pytimings.analysis.partition import Gaps
from pytimings.analysis.windows import Windows
from pytimings.arrays import unique
from pytimings.ingest.names import op_name_ids
from pytimings.model.trace import ACTIVITY_KIND_NAMES, ActivityKind, StringTable, Trace
from pytimings.table import Table

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
CHARGE_SCHEMA = {"row": np.int64, "kind": np.int8, "name": np.int32, "ns": np.int64}


@dataclass
class HostActivities:
    """One thread's host activities: the rows of the trace's ranges, API calls and
    host_ops on that thread (kind: :class:`~pytimings.model.trace.ActivityKind`), read in
    place by the compiled sweep (:func:`pytimings._native._host.thread_charges`: no sorted
    or gathered copy). ``name_rank``: per string id, the rank of its text (for ties)."""

    parts: tuple[tuple[Table, int | None], ...]  # (table, its rows' kind; None: a column)
    rows: tuple[I64 | None, ...]  # per table: the rows on the thread (None: read them all)
    thread: int
    name_rank: I32
    n_names: int
    # per table, each row's name id by the one name rule (op_range_parts: an emit_nvtx
    # range is charged to its op's name)
    names: tuple[I32, ...]

    @classmethod
    def per_thread(
        cls, trace: Trace, q_s: I64, q_e: I64, q_thread: I32
    ) -> Iterator[tuple[int, HostActivities]]:
        """Per thread of the queries ``[q_s, q_e)`` on ``q_thread``: its activities (with
        one thread, every row is read and those of other threads skipped; with several,
        each table's rows are grouped by thread once, so each sweep reads its own)."""
        parts: tuple[tuple[Table, int | None], ...] = (
            (trace.ranges, int(ActivityKind.RANGE)),
            (trace.api_calls, int(ActivityKind.CUDA_API)),
            (trace.host_ops, None),  # kind per row
        )
        canon = op_name_ids(trace.strings)
        names = tuple(np.ascontiguousarray(canon[t["name"]]) for t, _ in parts)
        n_names = len(trace.strings)
        seen = _host.names_used(list(names), n_names)
        by_text = sorted(np.flatnonzero(seen).tolist(), key=trace.strings.__getitem__)
        rank = np.zeros(n_names, dtype=np.int32)
        rank[by_text] = np.arange(len(by_text), dtype=np.int32)
        threads = unique(q_thread).tolist()
        if len(threads) == 1:
            yield threads[0], cls(parts, (None,) * len(parts), threads[0], rank, n_names, names)
            return
        groups = []
        for table, _ in parts:
            by_th = np.argsort(table["thread"], kind="stable")
            cut = np.searchsorted(table["thread"][by_th], [*threads, threads[-1] + 1])
            groups.append((by_th, cut))
        for i, t in enumerate(threads):
            rows = tuple(o[c[i] : c[i + 1]] for o, c in groups)
            yield t, cls(parts, rows, t, rank, n_names, names)

    def charge(self, q_s: I64, q_e: I64, q_row: I64, ranges_only: bool = False) -> Table:
        """Each query ``[q_s, q_e)`` of this thread charged to the innermost activity
        (``ranges_only``: the innermost range) at each instant, summed per ``q_row``."""
        c = np.ascontiguousarray
        q_order = np.argsort(q_s, kind="stable")
        rows, label, ns = _host.thread_charges(
            [c(t["start"]) for t, _ in self.parts],
            [c(t["end"]) for t, _ in self.parts],
            [c(t["kind"]) if k is None else None for t, k in self.parts],
            list(self.names),
            [c(t["thread"]) for t, _ in self.parts],
            np.array([-1 if k is None else k for _, k in self.parts], dtype=np.int8),
            self.thread,
            int(ActivityKind.RANGE) if ranges_only else -1,
            self.name_rank,
            c(q_s[q_order]),
            c(q_e[q_order]),
            c(q_row[q_order]),
            self.n_names,
            ActivityKind.UNTRACED,
            rows=list(self.rows),
        )
        return Table(
            {
                "row": rows,
                "kind": (label // self.n_names).astype(np.int8),
                "name": (label % self.n_names).astype(np.int32),
                "ns": ns,
            }
        )


def interval_charges(trace: Trace, q_s: I64, q_e: I64, q_thread: I32, q_row: I64) -> Table:
    """The queries ``[q_s, q_e)``, each on its thread ``q_thread``, charged to the innermost
    host activity at each instant and summed per ``q_row`` (ordered as :func:`combined`):
    the contract's charges for any set of intervals, such as some of the gaps' host_bound
    parts."""
    if q_s.size == 0:
        return empty_charges()
    got: list[Table] = []
    rank = np.zeros(0, dtype=np.int32)
    for t, acts in HostActivities.per_thread(trace, q_s, q_e, q_thread):
        m = np.flatnonzero(q_thread == t)
        got.append(acts.charge(q_s[m], q_e[m], q_row[m]))
        rank = acts.name_rank
    return combined(got, rank)


def combined(parts: Sequence[Table], name_rank: I32) -> Table:
    """Charges (of several threads) summed per (row, kind, name) and ordered: by row, then
    largest first (ties: kind order, then name text)."""
    if not parts:
        return empty_charges()
    c = Table({k: np.concatenate([p[k] for p in parts]) for k in CHARGE_SCHEMA})
    if len(parts) > 1 and len(c):
        n = max(int(name_rank.size), 1)
        key = (c["row"] * 6 + c["kind"]) * n + c["name"]
        uniq, inv = np.unique(key, return_inverse=True)
        ns = np.zeros(uniq.size, dtype=np.int64)
        np.add.at(ns, inv.reshape(-1), c["ns"])
        c = Table(
            {
                "row": uniq // (6 * n),
                "kind": (uniq // n % 6).astype(np.int8),
                "name": (uniq % n).astype(np.int32),
                "ns": ns,
            }
        )
    order = np.lexsort((name_rank[c["name"]], c["kind"], -c["ns"], c["row"]))
    return c.take(order)


def empty_charges() -> Table:
    return Table.empty(CHARGE_SCHEMA)


def summed(charges: Table, strings: list[str], rows: I64 | None = None) -> Table:
    """The charges of ``rows`` (all when None) summed per (kind, name), as row 0, largest
    first (ties: kind order, then name text)."""
    c = charges if rows is None else charges.take(np.flatnonzero(np.isin(charges["row"], rows)))
    if len(c) == 0:
        return empty_charges()
    key = c["kind"].astype(np.int64) << 32 | c["name"].astype(np.int64)
    uniq, inv = np.unique(key, return_inverse=True)
    ns = np.zeros(uniq.size, dtype=np.int64)
    np.add.at(ns, inv.reshape(-1), c["ns"])
    kind, name = (uniq >> 32).astype(np.int8), (uniq & 0xFFFFFFFF).astype(np.int32)
    order = sorted(range(uniq.size), key=lambda i: (-ns[i], kind[i], strings[name[i]]))
    return Table(
        {
            "row": np.zeros(uniq.size, dtype=np.int64),
            "kind": kind[order],
            "name": name[order],
            "ns": ns[order],
        }
    )


def charge_lists(charges: Table, n_rows: int, strings: list[str]) -> list[list[dict[str, Any]]]:
    """Per row ``0..n_rows-1``: its charges as ``{"kind", "name", "ns"}`` dicts."""
    bounds = np.searchsorted(charges["row"], np.arange(n_rows + 1))
    kinds, names, ns = (charges[c].tolist() for c in ("kind", "name", "ns"))
    return [
        [
            {"kind": ACTIVITY_KIND_NAMES[kinds[j]], "name": strings[names[j]], "ns": ns[j]}
            for j in range(int(bounds[i]), int(bounds[i + 1]))
        ]
        for i in range(n_rows)
    ]


HOST_WINDOW_SCHEMA = {
    "name": object,
    "start_ns": np.int64,
    "end_ns": np.int64,
    "rank": np.int16,
    "thread": np.int32,
    "window_ns": np.int64,
}


@dataclass
class HostAttribution:
    """What the host was doing: the host_bound time of each window entry (row of
    ``Attribution.windows``) charged to the innermost activity and to the innermost range
    on the launching thread, and the host windows (one per ``--by`` range instance, its
    own extent on its thread) with their charges (row of ``windows``)."""

    bound_by_activity: Table
    bound_by_range: Table
    windows: Table
    by_activity: Table

    @classmethod
    def empty(cls) -> HostAttribution:
        return cls(
            empty_charges(), empty_charges(), Table.empty(HOST_WINDOW_SCHEMA), empty_charges()
        )

    def _charges(self) -> tuple[Table, Table, Table]:
        return self.bound_by_activity, self.bound_by_range, self.by_activity

    def compact(self, strings: list[str]) -> tuple[HostAttribution, list[str]]:
        """The same charges with names renumbered into the returned list of the names used
        (what a per-rank task sends back instead of its whole string table)."""
        used = np.unique(np.concatenate([t["name"] for t in self._charges()]))
        a, r, w = (
            t.with_columns(name=np.searchsorted(used, t["name"]).astype(np.int32))
            for t in self._charges()
        )
        return HostAttribution(a, r, self.windows, w), [strings[i] for i in used.tolist()]


def _reindexed(t: Table, rows: I64, names: I32) -> Table:
    """Charges with rows and names replaced through the maps, sorted by row again (each
    row's order kept)."""
    t = t.with_columns(row=rows[t["row"]], name=names[t["name"]])
    return t.take(np.argsort(t["row"], kind="stable"))


def merge_host(
    parts: Sequence[tuple[HostAttribution, list[str], int]],
    strings: StringTable,
    window_order: I64,
) -> HostAttribution:
    """Per-rank host attributions (each with its names and its number of window rows, in
    the order their windows were concatenated) as one: names interned into ``strings``,
    window rows through ``window_order`` (the concatenated windows were taken in that
    order), host windows concatenated and ordered as :func:`host_attribution` does."""
    if not parts:
        return HostAttribution.empty()
    w_new = np.empty_like(window_order)
    w_new[window_order] = np.arange(window_order.size)
    hw = Table({c: np.concatenate([p[0].windows[c] for p in parts]) for c in HOST_WINDOW_SCHEMA})
    hw_order = (
        np.lexsort((hw["thread"], hw["name"].astype(str), hw["end_ns"], hw["rank"], hw["start_ns"]))
        if len(hw)
        else np.empty(0, dtype=np.int64)
    )
    h_new = np.empty_like(hw_order)
    h_new[hw_order] = np.arange(hw_order.size)
    out: list[list[Table]] = [[], [], []]
    w0 = h0 = 0
    for host, names, n in parts:
        ids = strings.intern_many(names)
        k = len(host.windows)
        maps = (w_new[w0 : w0 + n], w_new[w0 : w0 + n], h_new[h0 : h0 + k])
        for dst, t, m in zip(out, host._charges(), maps, strict=True):
            dst.append(_reindexed(t, m, ids))
        w0 += n
        h0 += k
    a, r, w = (Table({c: np.concatenate([t[c] for t in ts]) for c in CHARGE_SCHEMA}) for ts in out)
    a, r, w = (t.take(np.argsort(t["row"], kind="stable")) for t in (a, r, w))
    return HostAttribution(a, r, hw.take(hw_order), w)


def range_host_windows(trace: Trace, win: Windows) -> Table:
    """One host window per range window of ``win``: the range's own [start, end) on its
    thread, in an order independent of the input's (start, rank, end, name, thread)."""
    rg = trace.ranges
    rows = win.range_row
    start = rg["start"][rows]
    end = np.maximum(rg["end"][rows], start)
    return _host_window_table(np.asarray(win.name, dtype=object), start, end, win.rank, win.thread)


def thread_host_windows(trace: Trace, ranks: npt.NDArray[np.int16]) -> Table:
    """One host window per host thread of the ``ranks`` that has any host activity (a
    range, an API call, a host_ops row): from its first activity's start to its last
    one's end, named after the thread (``tid N`` when it has no name)."""
    th = trace.threads
    lo = np.full(len(th), np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(len(th), np.iinfo(np.int64).min, dtype=np.int64)
    for t in (trace.ranges, trace.api_calls, trace.host_ops):
        on = np.flatnonzero(t["thread"] >= 0)
        np.minimum.at(lo, t["thread"][on], t["start"][on])
        np.maximum.at(hi, t["thread"][on], np.maximum(t["end"][on], t["start"][on]))
    rows = np.flatnonzero((lo <= hi) & np.isin(th["rank"], ranks))
    names = [trace.strings[int(th["name"][i])] or f"tid {int(th['tid'][i])}" for i in rows]
    return _host_window_table(
        np.asarray(names, dtype=object),
        lo[rows],
        hi[rows],
        th["rank"][rows].astype(np.int16),
        rows.astype(np.int32),
    )


def _host_window_table(
    name: npt.NDArray[Any], start: I64, end: I64, rank: npt.NDArray[np.int16], thread: I32
) -> Table:
    """Host windows in an order independent of the input's (start, rank, end, name,
    thread)."""
    order = np.lexsort((thread, name.astype(str), end, rank, start)) if start.size else start
    return Table(
        {
            "name": name[order],
            "start_ns": start[order],
            "end_ns": end[order],
            "rank": rank[order],
            "thread": thread[order],
            "window_ns": (end - start)[order],
        }
    )


def _sums(charges: Table, n_rows: int) -> I64:
    out = np.zeros(n_rows, dtype=np.int64)
    np.add.at(out, charges["row"], charges["ns"])
    return out


def host_attribution(
    trace: Trace,
    launches: Launches,
    gaps: Gaps,
    host_bound_ns: I64,
    host_windows: Table | None,
) -> HostAttribution:
    """The contract's host attribution of the ``gaps`` (their host_bound parts, per window
    entry with ``host_bound_ns``) and of the ``host_windows`` (:func:`range_host_windows`,
    :func:`thread_host_windows`; None: none). Checks that every list sums to its
    host_bound_ns / window_ns."""
    hw = Table.empty(HOST_WINDOW_SCHEMA) if host_windows is None else host_windows
    g_thread = (launches.thread[gaps.op] if gaps.op.size else np.empty(0)).astype(np.int32)
    hw_th = hw["thread"]
    if g_thread.size + hw_th.size == 0:
        return HostAttribution(empty_charges(), empty_charges(), hw, empty_charges())
    got: list[list[Table]] = [[], [], []]
    n_win = host_bound_ns.size
    rank = np.zeros(0, dtype=np.int32)
    hw_rows = np.arange(len(hw), dtype=np.int64)
    for t, acts in HostActivities.per_thread(
        trace,
        np.concatenate([gaps.g0, hw["start_ns"]]),
        np.concatenate([gaps.host_bound_end, hw["end_ns"]]),
        np.concatenate([g_thread, hw_th]).astype(np.int32),
    ):
        g = np.flatnonzero(g_thread == t)
        h = np.flatnonzero(hw_th == t)
        # one sweep for the gaps (rows of the windows) and the host windows (rows after them)
        both = acts.charge(
            np.concatenate([gaps.g0[g], hw["start_ns"][h]]),
            np.concatenate([gaps.host_bound_end[g], hw["end_ns"][h]]),
            np.concatenate([gaps.window_row[g], n_win + hw_rows[h]]),
        )
        of_gaps = both["row"] < n_win
        got[0].append(both.take(np.flatnonzero(of_gaps)))
        of_hw = both.take(np.flatnonzero(~of_gaps))
        got[2].append(of_hw.with_columns(row=of_hw["row"] - n_win))
        q = (gaps.g0[g], gaps.host_bound_end[g], gaps.window_row[g])
        got[1].append(acts.charge(*q, ranges_only=True))
        rank = acts.name_rank
    out = HostAttribution(
        bound_by_activity=combined(got[0], rank),
        bound_by_range=combined(got[1], rank),
        windows=hw,
        by_activity=combined(got[2], rank),
    )
    n = host_bound_ns.size
    for c in (out.bound_by_activity, out.bound_by_range):
        if not np.array_equal(_sums(c, n), host_bound_ns):  # checked on every input
            raise AssertionError("host_bound charges do not sum to host_bound_ns")
    if not np.array_equal(_sums(out.by_activity, len(hw)), hw["window_ns"]):
        raise AssertionError("host window charges do not sum to the host windows")
    return out
