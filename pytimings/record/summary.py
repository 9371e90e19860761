"""``summary()``: per region name, how often it ran and how long it took on host and GPU.

One row per region name. Host time is ``end_ns - start_ns`` of every instance that is not a
mark; GPU time is ``gpu_end_ns - gpu_start_ns`` of the instances whose CUDA events were
resolved (``gpu_count`` of them); queue delay is ``gpu_start_ns - start_ns`` (how long after
the host entered the region the GPU started its work: the launch latency). Percentiles use
linear interpolation between order statistics (numpy's default) and are computed by the
Cython kernel in ``pytimings._native._stats``.

Column ``nbytes`` is the total over the instances that gave ``nbytes`` (``nbytes_count`` of
them), ``nbytes_per_call`` its mean. ``bandwidth_gbps`` is ``sum(nbytes) / sum(time)`` over
those instances, with the GPU time of an instance when it was timed and its host time when
it was host-only; bytes per ns is GB/s (1e9 bytes per second). A GPU-timed instance whose
GPU timing failed or is still pending has only its host (enqueue) time, which would inflate
the bandwidth: it is left out of every bandwidth column and counted in ``nbytes_untimed``.
Collectives recorded by :func:`pytimings.instrument_torch_distributed` also get
nccl-tests' ``algbw_gbps`` (same formula) and ``busbw_gbps`` (each instance's bytes times its
bus factor, over the same time); asynchronous calls were timed at enqueue only, so they get
no bandwidth. Records the recorder dropped (memory cap) are counted per name and in total,
and always printed, as are regions entered but never closed (``meta["open_regions"]``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from pytimings.analysis.grouped import grouped_stats
from pytimings.console.text import column_widths, duration, table
from pytimings.model.recording import NO_TIME, RecordFlag, Recording
from pytimings.record.distributed import comm_op_of
from pytimings.table import Table

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

QUANTILES = (0.5, 0.9, 0.99)
SCHEMA_ID = "pytimings.summary/1"

COLUMNS = (
    "name",
    "kind",
    "count",
    "dropped",
    "errors",
    "host_count",
    "host_total_ns",
    "host_mean_ns",
    "host_p50_ns",
    "host_p90_ns",
    "host_p99_ns",
    "host_max_ns",
    "gpu_count",
    "gpu_total_ns",
    "gpu_mean_ns",
    "gpu_p50_ns",
    "gpu_p90_ns",
    "gpu_p99_ns",
    "gpu_max_ns",
    "gpu_pending",
    "gpu_failed",
    "queue_p50_ns",
    "queue_p99_ns",
    "nbytes_count",
    "nbytes",
    "nbytes_per_call",
    "bandwidth_gbps",
    "algbw_gbps",
    "busbw_gbps",
    "nbytes_untimed",
)
INT_COLUMNS = frozenset(
    (
        "count",
        "dropped",
        "errors",
        "host_count",
        "host_total_ns",
        "gpu_count",
        "gpu_total_ns",
        "gpu_pending",
        "gpu_failed",
        "nbytes_count",
        "nbytes",
        "nbytes_untimed",
    )
)
FLOAT_COLUMNS = frozenset(COLUMNS[2:]) - INT_COLUMNS


def summary(source: Any = None) -> Summary:
    """Summarise a recording: the default recorder's (``None``), a ``Recorder``'s, a
    ``Recording``, or a file written by :func:`pytimings.save`.

    A recorder is flushed first (pending GPU events resolved); its records stay in it, so
    ``summary()`` followed by ``save()`` saves the same records.
    """
    from pytimings.record.storage import as_recording

    return Summary.from_recording(as_recording(source))


class Summary:
    """Per-region statistics; prints as an aligned table.

    ``table`` holds the columns in ``COLUMNS`` (times in ns, NaN where a statistic has no
    samples), one row per region name, largest total host time first.
    """

    def __init__(self, table: Table, dropped_total: int, meta: dict[str, Any]) -> None:
        self.table = table
        self.dropped_total = dropped_total
        self.meta = meta

    @classmethod
    def from_recording(cls, rec: Recording) -> Summary:
        return cls(_summarise(rec), int(sum(rec.dropped.values())), dict(rec.meta))

    # -- access ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.table)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self.table)):
            yield self._row(i)

    def __getitem__(self, name: str) -> dict[str, Any]:
        """The row of region ``name`` as a dict."""
        hits = np.flatnonzero(self.table["name"] == name)
        if len(hits) == 0:
            raise KeyError(name)
        return self._row(int(hits[0]))

    def _row(self, i: int) -> dict[str, Any]:
        row: dict[str, Any] = {}
        for c in COLUMNS:
            v = self.table[c][i]
            if c in INT_COLUMNS:
                row[c] = int(v)
            elif c in FLOAT_COLUMNS:
                row[c] = None if math.isnan(v) else float(v)
            else:
                row[c] = str(v)
        return row

    @property
    def total_count(self) -> int:
        return int(self.table["count"].sum()) if len(self.table) else 0

    # -- conversions -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"schema", "regions": [row, ...], "dropped_total"}`` (NaN -> None)."""
        return {
            "schema": SCHEMA_ID,
            "regions": list(self),
            "dropped_total": self.dropped_total,
        }

    def to_pandas(self) -> pd.DataFrame:
        return self.table.to_pandas()

    def to_arrow(self) -> pa.Table:
        return self.table.to_arrow()

    def __str__(self) -> str:
        return _format(self)

    def __repr__(self) -> str:
        return (
            f"Summary({len(self)} regions, {self.total_count} records, "
            f"{self.dropped_total} dropped)"
        )


# -- computation -------------------------------------------------------------------------------


def _summarise(rec: Recording) -> Table:
    r = rec.records
    strings = rec.strings
    name = r["name"].astype(np.int64)
    kind = r["kind"].astype(np.int64)
    flags = r["flags"].astype(np.int64)
    start = r["start_ns"].astype(np.int64)
    end = r["end_ns"].astype(np.int64)
    gstart = r["gpu_start_ns"].astype(np.int64)
    gend = r["gpu_end_ns"].astype(np.int64)
    nbytes = r["nbytes"].astype(np.int64)
    payload = r["payload"].astype(np.int64)

    # rows: every recorded name, plus names only seen in the dropped counts
    name_ids = {int(i) for i in np.unique(name)}
    string_id = {s: i for i, s in enumerate(strings)}
    extra: list[str] = []
    for dn in rec.dropped:
        if dn in string_id:
            name_ids.add(string_id[dn])
        else:
            extra.append(dn)
    ids = np.array(sorted(name_ids), dtype=np.int64)
    row_names = [strings[i] for i in ids] + extra
    nrows = len(row_names)
    pos = np.zeros(len(strings) + 1, dtype=np.int64)
    pos[ids] = np.arange(len(ids))

    cols: dict[str, npt.NDArray[Any]] = {
        c: np.zeros(nrows, dtype=np.int64) for c in INT_COLUMNS
    } | {c: np.full(nrows, np.nan) for c in FLOAT_COLUMNS}
    row = pos[name]  # row index of every record
    cols["count"] = np.bincount(row, minlength=nrows).astype(np.int64)
    cols["dropped"] = np.array([int(rec.dropped.get(n, 0)) for n in row_names], dtype=np.int64)
    cols["errors"] = np.bincount(
        row, weights=(flags & RecordFlag.ERROR) > 0, minlength=nrows
    ).astype(np.int64)

    # kind: the one kind a name was recorded with, else all of them joined by "|"
    kinds: list[set[str]] = [set() for _ in range(nrows)]
    if len(name):
        base = len(strings) + 1
        for pair in np.unique(row * base + kind).tolist():
            kinds[pair // base].add(strings[pair % base])
    kind_col = np.array(["|".join(sorted(k)) for k in kinds], dtype=object)

    def put(
        prefix: str, mask: npt.NDArray[np.bool_], values: npt.NDArray[np.int64], full: bool
    ) -> None:
        g = grouped_stats(row[mask], values[mask], QUANTILES if full else (0.5, 0.99))
        at = g.keys
        if full:
            cols[f"{prefix}_count"][at] = g.counts
            cols[f"{prefix}_total_ns"][at] = g.sums
            cols[f"{prefix}_mean_ns"][at] = g.sums / g.counts
            cols[f"{prefix}_max_ns"][at] = g.maxs
            for j, q in enumerate(QUANTILES):
                cols[f"{prefix}_p{round(q * 100)}_ns"][at] = g.quantiles[:, j]
        else:
            cols[f"{prefix}_p50_ns"][at] = g.quantiles[:, 0]
            cols[f"{prefix}_p99_ns"][at] = g.quantiles[:, 1]

    is_mark = (flags & RecordFlag.MARK) > 0
    host = end - start
    put("host", ~is_mark, host, True)

    resolved = ((flags & RecordFlag.GPU_RESOLVED) > 0) & (gstart != NO_TIME) & (gend != NO_TIME)
    gpu = np.where(resolved, gend - gstart, 0)
    put("gpu", resolved, gpu, True)
    put("queue", resolved, np.where(resolved, gstart - start, 0), False)
    failed = (flags & RecordFlag.GPU_FAILED) > 0
    pending = ((flags & RecordFlag.GPU_TIMED) > 0) & ~resolved & ~failed
    cols["gpu_pending"] = np.bincount(row, weights=pending, minlength=nrows).astype(np.int64)
    cols["gpu_failed"] = np.bincount(row, weights=failed, minlength=nrows).astype(np.int64)

    # bytes and bandwidth: the GPU time of an instance when it has one, its host time when it
    # was host-only; GPU-timed instances without a GPU time (failed, pending) have no honest
    # duration (host time is only the enqueue) and are counted instead
    has_bytes = (nbytes >= 0) & ~is_mark
    t = np.where(resolved, gpu, host)
    untimed = has_bytes & ((flags & RecordFlag.GPU_TIMED) > 0) & ~resolved
    cols["nbytes_untimed"] = np.bincount(row, weights=untimed, minlength=nrows).astype(np.int64)
    cols["nbytes_count"] = np.bincount(row, weights=has_bytes, minlength=nrows).astype(np.int64)
    np.add.at(cols["nbytes"], row[has_bytes], nbytes[has_bytes])
    with np.errstate(invalid="ignore", divide="ignore"):
        cols["nbytes_per_call"] = np.where(
            cols["nbytes_count"] > 0, cols["nbytes"] / np.maximum(cols["nbytes_count"], 1), np.nan
        )
    timed_bytes = has_bytes & ~untimed & (t > 0)
    bw_bytes = np.zeros(nrows, dtype=np.int64)
    bw_time = np.zeros(nrows, dtype=np.int64)
    np.add.at(bw_bytes, row[timed_bytes], nbytes[timed_bytes])
    np.add.at(bw_time, row[timed_bytes], t[timed_bytes])
    with np.errstate(invalid="ignore", divide="ignore"):
        cols["bandwidth_gbps"] = np.where(bw_time > 0, bw_bytes / np.maximum(bw_time, 1), np.nan)

    # collectives from the torch.distributed wrapper: nccl-tests algbw / busbw
    has_payload = (flags & RecordFlag.HAS_PAYLOAD) > 0
    for ri, rname in enumerate(row_names):
        op = comm_op_of(rname)
        if op is None:
            continue
        if op.asynchronous:  # host enqueue time only: no honest bandwidth
            cols["bandwidth_gbps"][ri] = np.nan
            continue
        sel = timed_bytes & has_payload & (row == ri)
        if not sel.any():
            continue
        sizes, which = np.unique(payload[sel], return_inverse=True)
        factors = np.array([op.bus_factor(int(n)) for n in sizes], dtype=np.float64)[which]
        total_t = float(t[sel].sum())
        cols["algbw_gbps"][ri] = float(nbytes[sel].sum()) / total_t
        cols["busbw_gbps"][ri] = float((nbytes[sel] * factors).sum()) / total_t

    order = np.lexsort((np.array(row_names, dtype=object).astype(str), -cols["host_total_ns"]))
    table = {"name": np.array(row_names, dtype=object), "kind": kind_col, **cols}
    return Table({c: table[c][order] for c in COLUMNS})


# -- printing ----------------------------------------------------------------------------------


def fmt_bytes(v: float) -> str:
    if math.isnan(v):
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.0f} B"


def fmt_num(v: float) -> str:
    if math.isnan(v):
        return "-"
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.3g}"


# (group, header, column, formatter); groups shown only when they hold data
_LAYOUT: list[tuple[str, str, str, Any]] = [
    ("", "name", "name", str),
    ("", "kind", "kind", str),
    ("", "count", "count", str),
    ("host", "mean", "host_mean_ns", duration),
    ("host", "p50", "host_p50_ns", duration),
    ("host", "p90", "host_p90_ns", duration),
    ("host", "p99", "host_p99_ns", duration),
    ("host", "max", "host_max_ns", duration),
    ("gpu", "n", "gpu_count", str),
    ("gpu", "mean", "gpu_mean_ns", duration),
    ("gpu", "p50", "gpu_p50_ns", duration),
    ("gpu", "p90", "gpu_p90_ns", duration),
    ("gpu", "p99", "gpu_p99_ns", duration),
    ("gpu", "max", "gpu_max_ns", duration),
    ("gpu", "pending", "gpu_pending", str),
    ("gpu", "failed", "gpu_failed", str),
    ("queue", "p50", "queue_p50_ns", duration),
    ("queue", "p99", "queue_p99_ns", duration),
    ("bytes", "per call", "nbytes_per_call", fmt_bytes),
    ("bytes", "GB/s", "bandwidth_gbps", fmt_num),
    ("bytes", "untimed", "nbytes_untimed", str),
    ("comm", "algbw", "algbw_gbps", fmt_num),
    ("comm", "busbw", "busbw_gbps", fmt_num),
    ("", "errors", "errors", str),
    ("", "dropped", "dropped", str),
]
_SHOWN_WHEN = {  # column -> shown only when this column has data (always shown if absent)
    "gpu_count": "gpu_count",
    "gpu_mean_ns": "gpu_count",
    "gpu_p50_ns": "gpu_count",
    "gpu_p90_ns": "gpu_count",
    "gpu_p99_ns": "gpu_count",
    "gpu_max_ns": "gpu_count",
    "queue_p50_ns": "gpu_count",
    "queue_p99_ns": "gpu_count",
    "gpu_pending": "gpu_pending",
    "gpu_failed": "gpu_failed",
    "nbytes_per_call": "nbytes_count",
    "bandwidth_gbps": "nbytes_count",
    "algbw_gbps": "algbw_gbps",
    "busbw_gbps": "algbw_gbps",
    "nbytes_untimed": "nbytes_untimed",
    "errors": "errors",
}


def _has_data(col: npt.NDArray[Any]) -> bool:
    if col.dtype.kind == "f":
        return bool(np.any(~np.isnan(col)))
    return bool(np.any(col != 0))


def _format(s: Summary) -> str:
    t = s.table
    layout = [
        spec
        for spec in _LAYOUT
        if spec[2] not in _SHOWN_WHEN or (len(t) and _has_data(t[_SHOWN_WHEN[spec[2]]]))
    ]
    headers = [h for _, h, _, _ in layout]
    columns = [[fmt(v) for v in t[col]] for _, _, col, fmt in layout]
    rows = [[c[r] for c in columns] for r in range(len(t))]
    widths = column_widths([headers, *rows])

    # group header: each group's name centred over its columns
    group_line: list[str] = []
    i = 0
    while i < len(layout):
        g = layout[i][0]
        j = i
        while j < len(layout) and layout[j][0] == g:
            j += 1
        span = sum(widths[i:j]) + 2 * (j - i - 1)
        group_line.append(f" {g} ".center(span, "-") if g else " " * span)
        i = j
    lines = ["  ".join(group_line).rstrip()]
    lines += table(headers, rows, "ll" + "r" * (len(layout) - 2), underline=False)
    kept = s.total_count
    dropped_names = [f"{n} {d}" for n, d in zip(t["name"], t["dropped"], strict=True) if d]
    tail = f"records: {kept} kept, {s.dropped_total} dropped"
    if s.dropped_total:
        tail += " (recorder memory cap: " + ", ".join(dropped_names) + ")"
    lines.append(tail)
    open_regions = s.meta.get("open_regions") or {}
    if open_regions:
        lines.append(
            "regions entered, never closed (no record): "
            + ", ".join(f"{n} {c}" for n, c in sorted(open_regions.items()))
        )
    return "\n".join(lines)
