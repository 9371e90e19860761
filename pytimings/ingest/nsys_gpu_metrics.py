"""GPU metrics of Nsight Systems exports captured with ``nsys profile --gpu-metrics-devices``:
the hardware counters nsys samples per GPU (SM active, SM issue, tensor active, DRAM read and
write bandwidth, GPC/SYS clocks, PCIe and NVLink throughput) at ``--gpu-metrics-frequency``.

The export holds them in two tables (docs/telemetry.md cites the sources):

- ``GPU_METRICS(timestamp, typeId, metricId, value)``: one row per sample and metric;
  ``timestamp`` is on the export's clock (ns, the clock of its CUPTI activities; samples
  taken before the session started have negative times), ``typeId``'s low byte is the GPU
  (``typeId & 0xFF``, as NVIDIA's ``gpu_metric_util_map`` recipe reads it);
- ``TARGET_INFO_GPU_METRICS(typeId, sourceId, typeName, metricId, metricName)``: the name of
  each (typeId, metricId), e.g. ``SMs Active [Throughput %]``, ``GPC Clock Frequency [MHz]``.

Metric names vary with the GPU generation (and the ``--gpu-metrics-set``); the ones of
:data:`NAMES` (name pattern including its unit) get a short name, every other metric keeps
its own name. NVIDIA documents a bug of some nsys versions writing unsigned values as signed:
negative values are left out and counted (``negative_values``).

Reading costs nothing for an export without the tables (one look at its schema), and is
separate from :func:`pytimings.ingest.nsys.load_nsys`: the event model is unchanged.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pytimings._native._kernels import is_sorted_i64
from pytimings.errors import TraceFormatError
from pytimings.ingest._sqlite import SqliteFile, connect_ro

__all__ = ["NAMES", "GpuMetrics", "read_gpu_metrics"]

SAMPLES = "GPU_METRICS"
INFO = "TARGET_INFO_GPU_METRICS"
# short name <- metricName (anchored, with its unit): the documented names across generations
NAMES: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern)
    for name, pattern in (
        ("sm_active_pct", r"SMs? Active \[Throughput %\]"),
        ("sm_issue_pct", r"SM Issue \[Throughput %\]"),
        ("tensor_active_pct", r"Tensor (Pipe )?Active \[Throughput %\]"),
        ("dram_read_pct", r"DRAM Read (Bandwidth|Throughput) \[Throughput %\]"),
        ("dram_write_pct", r"DRAM Write (Bandwidth|Throughput) \[Throughput %\]"),
        ("gpc_clock_mhz", r"GPC Clock Frequency \[MHz\]"),
        ("sys_clock_mhz", r"SYS Clock Frequency \[MHz\]"),
        ("pcie_rx_pct", r"PCIe RX Throughput \[Throughput %\]"),
        ("pcie_tx_pct", r"PCIe TX Throughput \[Throughput %\]"),
        ("nvlink_rx_pct", r"NVLink RX (Bandwidth|Responses User Data) \[Throughput %\]"),
        ("nvlink_tx_pct", r"NVLink TX (Bandwidth|Responses User Data) \[Throughput %\]"),
    )
}


@dataclass(frozen=True)
class GpuMetrics:
    """The samples in time order (columns) and what was left out."""

    t_ns: npt.NDArray[np.int64]
    gpu: npt.NDArray[np.int32]
    code: npt.NDArray[np.int32]  # index into labels
    labels: tuple[str, ...]  # a short name of NAMES, else nsys's metricName ("metric N": none)
    value: npt.NDArray[np.float64]
    negative_values: int  # samples left out: a negative value (written signed by nsys)

    @property
    def metric(self) -> npt.NDArray[np.object_]:
        """Each sample's metric name."""
        out: npt.NDArray[np.object_] = np.array(self.labels or [""], dtype=object)[self.code]
        return out


def short_names(info: list[tuple[int, int, str]]) -> dict[tuple[int, int], str]:
    """(typeId, metricId) -> the metric's name in the samples: the first metricId of a
    typeId matching a pattern of NAMES gets its short name, every other its own name."""
    out: dict[tuple[int, int], str] = {}
    taken: set[tuple[int, str]] = set()
    for type_id, metric_id, name in sorted(info):
        short = next((s for s, p in NAMES.items() if p.fullmatch(name.strip())), None)
        if short is not None and (type_id, short) not in taken:
            taken.add((type_id, short))
            out[type_id, metric_id] = short
        else:
            out[type_id, metric_id] = name
    return out


def read_gpu_metrics(path: str | os.PathLike[str]) -> GpuMetrics | None:
    """The GPU metrics of the nsys export at ``path`` (None: it has no GPU_METRICS table).
    Raises TraceFormatError for tables it cannot read."""
    path = os.fspath(path)
    try:
        with SqliteFile(path) as f:
            if not f.has(SAMPLES):
                return None
            need = {"timestamp", "typeId", "metricId", "value"}
            missing = sorted(need - set(f.columns(SAMPLES)))
            if missing:
                raise TraceFormatError(path, f"table {SAMPLES} lacks column(s) {missing}")
            cols = f.read(SAMPLES, {"timestamp": "i", "typeId": "i", "metricId": "i", "value": "f"})
            info: list[tuple[int, int, str]] = []
            if f.has(INFO) and {"typeId", "metricId", "metricName"} <= set(f.columns(INFO)):
                db = connect_ro(path)
                try:
                    rows = db.execute(f'SELECT typeId, metricId, metricName FROM "{INFO}"')
                    info = [(int(t), int(m), str(n)) for t, m, n in rows.fetchall()]
                finally:
                    db.close()
            f.check_unchanged()
    except (sqlite3.Error, OSError, ValueError, TypeError) as exc:
        msg = " ".join(str(exc).split()) or type(exc).__name__
        raise TraceFormatError(path, f"unreadable GPU metrics ({msg})") from None
    if any(c.mask is not None for c in cols.values()):
        raise TraceFormatError(path, f"table {SAMPLES} has a row with a NULL field")
    t, type_id = cols["timestamp"].values, cols["typeId"].values
    metric_id, value = cols["metricId"].values, cols["value"].values
    names = short_names(info)
    # (typeId, metricId) -> a code: the named ones, then any the info table lacks (one binary
    # search per row into a few dozen keys, no sort of the rows)
    key = (type_id << 32) | (metric_id & 0xFFFFFFFF)
    known = np.unique(np.array([(ty << 32) | (me & 0xFFFFFFFF) for ty, me in names], np.int64))
    pos = np.minimum(np.searchsorted(known, key), max(len(known) - 1, 0))
    hit = known[pos] == key if len(known) else np.zeros(len(key), dtype=bool)
    keys = np.union1d(known, np.unique(key[~hit])) if not hit.all() else known
    per_key = [
        names.get((int(k) >> 32, int(k) & 0xFFFFFFFF), f"metric {int(k) & 0xFFFFFFFF}")
        for k in keys.tolist()
    ]
    labels = tuple(sorted(set(per_key)))  # one code per name: the GPUs' typeIds share it
    to_label = np.array([labels.index(n) for n in per_key] or [0], dtype=np.int32)
    code = to_label[np.searchsorted(keys, key)]
    keep = value >= 0
    dropped = int(len(keep) - np.count_nonzero(keep))
    if dropped:
        t, type_id, code, value = t[keep], type_id[keep], code[keep], value[keep]
    if not is_sorted_i64(t):
        order = np.argsort(t, kind="stable")
        t, type_id, code, value = t[order], type_id[order], code[order], value[order]
    return GpuMetrics(
        t,
        (type_id & 0xFF).astype(np.int32),
        code,
        labels,
        value.astype(np.float64, copy=False),
        dropped,
    )
