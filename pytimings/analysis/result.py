"""What :func:`pytimings.attribute` returns: the windows table with every label, the gaps
and launches behind it, launch latency and collectives, as plain data (the session,
:mod:`pytimings.session`, adds findings, ops, replay and the JSON document)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.analysis.collectives import Collectives, CommBandwidth, bandwidth
from pytimings.analysis.host import HostAttribution, charge_lists, summed
from pytimings.analysis.launches import Launches
from pytimings.analysis.memory import MemoryResult, analyze_memory, native_host_bound
from pytimings.analysis.partition import LABELS, Gaps
from pytimings.model.trace import Trace
from pytimings.table import Table

# The JSON document (pytimings.session.Analysis.to_document, from Attribution.document):
# the keys of the contract (schema, totals, windows with their host_bound_by_activity /
# host_bound_by_range lists, host_windows, host_totals) and per_window_stats, slowest,
# launch_latency, graphs (per rank and device: graph launches, the ops they ran, launch
# calls by name), findings, collectives (several ranks), comm_bandwidth (per rank and
# collective: bytes, algbw, busbw); "ignored": events the partition could not use, by
# reason; "dropped": records the loaders could not turn into events (Trace.dropped), by
# reason. Both count, name -> number; a reason that did not occur is absent.
# "comm_kernels": the users' comm-kernel globs (--comm-kernel, pytimings.toml) the
# classification included.
SCHEMA = "pytimings.attribution/3"
I64 = npt.NDArray[np.int64]


def _known(values: npt.NDArray[np.float64]) -> dict[str, float]:
    return percentiles(values[~np.isnan(values)])


def percentiles(values: npt.ArrayLike) -> dict[str, float]:
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

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = percentiles(self.latency_ns)
        out.update(
            total_ns=int(self.latency_ns[self.latency_ns > 0].sum()),
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
    # per (rank, device) with graph-replayed ops (:func:`pytimings.analysis.graphs.graph_use`)
    graphs: list[dict[str, Any]] = field(default_factory=list)
    # what the host was doing: host_bound charges per windows row, the --by host windows
    host: HostAttribution = field(default_factory=HostAttribution.empty)
    # events the partition could not use, by reason (counted, never silently dropped)
    ignored: dict[str, int] = field(default_factory=dict)
    comm_kernels: tuple[str, ...] = ()  # users' comm-kernel globs the classes include
    # per (rank, device) analysed: its non-empty GPU ops by start, as the partition sorted
    # them (partition.device_order; the op table's busy split reads them, not sorting again)
    device_orders: dict[tuple[int, int], I64] = field(
        default_factory=dict, repr=False, compare=False
    )
    _memory: MemoryResult | None = field(default=None, repr=False)
    _bandwidth: CommBandwidth | None = field(default=None, repr=False)

    @property
    def memory(self) -> MemoryResult:
        """The device memory layer (:mod:`pytimings.analysis.memory`), computed once."""
        if self._memory is None:
            bound = native_host_bound(self.windows, self.host.bound_by_activity, self.trace.strings)
            self._memory = analyze_memory(self.trace, self.by, bound)
        return self._memory

    @property
    def comm_bandwidth(self) -> CommBandwidth:
        """Bytes, algbw and busbw of each communication op and per (rank, collective), on
        the ranks and devices analysed (those of the windows)."""
        if self._bandwidth is None:
            self._bandwidth = bandwidth(self.trace, self.classes, self.windows)
        return self._bandwidth

    @property
    def totals(self) -> dict[str, int]:
        """Sum over all window entries of ``window_ns`` and each ``<label>_ns``."""
        return {c: int(self.windows[c].sum()) for c in ("window_ns", *(f"{x}_ns" for x in LABELS))}

    def per_window_stats(
        self, rows: npt.NDArray[np.intp] | None = None
    ) -> dict[str, dict[str, float]]:
        """Per label (and window_ns): count, mean, p50, p90, p99, max over window entries
        (``rows``: those rows of ``windows`` only)."""
        return {
            c: percentiles(self.windows[c] if rows is None else self.windows[c][rows])
            for c in ("window_ns", *(f"{x}_ns" for x in LABELS))
        }

    def payloads(self) -> npt.NDArray[np.float64]:
        """Per windows row: the payload of the range it is an instance of (NaN: none, or a
        whole-trace window); the window's ``index`` is its number."""
        rr = self.window_range_rows
        out = np.full(len(self.windows), np.nan)
        has = rr >= 0
        out[has] = self.trace.ranges["payload"][rr[has]]
        return out

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

    def _lists(self, charges: Table, n_rows: int) -> list[list[dict[str, Any]]]:
        return charge_lists(charges, n_rows, self.trace.strings)

    def host_windows(self) -> list[dict[str, Any]]:
        """The JSON ``host_windows``: per --by range instance, its own extent on its thread
        charged to the innermost host activity (``by_activity``)."""
        hw = self.host.windows
        lists = self._lists(self.host.by_activity, len(hw))
        keys = ("name", "start_ns", "end_ns", "rank", "window_ns")
        return [
            {**{k: (hw[k][i] if k == "name" else int(hw[k][i])) for k in keys}, "by_activity": v}
            for i, v in enumerate(lists)
        ]

    def document(self, findings: list[dict[str, Any]]) -> dict[str, Any]:
        """The attribution's keys of the ``pytimings.attribution/3`` document, in its
        order, with ``findings`` (:meth:`pytimings.session.Analysis.to_document`, the
        document's one producer, gives them and adds the session's other parts)."""
        n = len(self.windows)
        by_act = self._lists(self.host.bound_by_activity, n)
        by_rng = self._lists(self.host.bound_by_range, n)
        strings = self.trace.strings
        payloads = [None if np.isnan(p) else float(p) for p in self.payloads().tolist()]
        doc: dict[str, Any] = {
            "schema": SCHEMA,
            "by": self.by,
            "comm_kernels": list(self.comm_kernels),
            "totals": {
                **self.totals,
                "host_bound_by_activity": self._lists(
                    summed(self.host.bound_by_activity, strings), 1
                )[0],
                "host_bound_by_range": self._lists(summed(self.host.bound_by_range, strings), 1)[0],
            },
            "windows": [
                {
                    **self._row(i),
                    "payload": payloads[i],
                    "host_bound_by_activity": by_act[i],
                    "host_bound_by_range": by_rng[i],
                }
                for i in range(n)
            ],
            "host_windows": self.host_windows(),
            "host_totals": {
                "window_ns": int(self.host.windows["window_ns"].sum()),
                "by_activity": self._lists(summed(self.host.by_activity, strings), 1)[0],
            },
            "per_window_stats": self.per_window_stats(),
            "memory": self.memory.to_dict(),
            "slowest": self.slowest(5),
            "launch_latency": {
                **self.launch_latency.summary(),
                "unlinked_ops": self.launches.unlinked,
            },
            "graphs": self.graphs,
            "comm_bandwidth": self.comm_bandwidth.to_dicts(),
            "findings": findings,
            "ignored": self.ignored,
            "dropped": {k: int(v) for k, v in sorted(self.trace.dropped.items()) if v},
        }
        if self.collectives is not None:
            c = self.collectives
            doc["collectives"] = {
                "straggler": c.straggler,
                "last_counts": {str(k): v for k, v in c.last_counts.items()},
                "clock_offset_ns": {str(k): v for k, v in c.clock_offset_ns.items()},
                "skew_ns": percentiles(c.table["skew_ns"]),
                "wait_ns": percentiles(c.table["wait_ns"]),
                "transfer_ns": percentiles(c.table["transfer_ns"]),
                # busbw of the instances with bytes and a known bus factor, over their whole
                # duration and over their transfer time (the wait for peers left out)
                "busbw_gbps": _known(c.table["busbw_gbps"]),
                "transfer_busbw_gbps": _known(c.table["transfer_busbw_gbps"]),
                # per rank: their exposed time, of it waiting for peers and transfer
                "exposed": {str(r): v for r, v in sorted(c.exposed.items())},
            }
        return doc
