"""Samples taken beside a trace, as every layer reads them: GPU telemetry (a recording's
"telemetry" table, a DCGM exporter's scrapes, an Nsight export's GPU metrics) and memory (a
recording's "memory" table).

The recorder writes them (:mod:`pytimings.record.telemetry`, :mod:`pytimings.record.memory`),
:mod:`pytimings.ingest.recording_file` reads them back from a recording, and the analysis
(:mod:`pytimings.analysis.hardware`, :mod:`pytimings.analysis.window_telemetry`), serving's
trends and the reports take them from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = ["MAX_GPU_INDEX", "MemoryRow", "MemorySamples", "TelemetryRow", "TelemetrySamples"]

TelemetryRow = tuple[int, int, str, float]  # t_ns, gpu, metric, value
MemoryRow = tuple[int, int, int | None]  # t_ns, rss_bytes, cuda_allocated_bytes (None: none)
# GPU indexes a sample may carry: [0, MAX_GPU_INDEX) (NVML and DCGM count a host's GPUs from
# 0; DCGM's own limit is 32): a larger one is no GPU, and would size per-GPU tables
MAX_GPU_INDEX = 1024


@dataclass(frozen=True)
class MemorySamples:
    """Samples in time order: ns, resident bytes, CUDA-allocated bytes (None: none)."""

    t_ns: list[int]
    rss_bytes: list[int]
    cuda_allocated_bytes: list[int | None]

    @classmethod
    def from_rows(cls, rows: list[MemoryRow]) -> MemorySamples:
        return cls([row[0] for row in rows], [row[1] for row in rows], [row[2] for row in rows])


@dataclass(frozen=True)
class TelemetrySamples:
    """Telemetry rows in time order (columns), and where they came from. ``codes`` (int32
    indices into ``names``, which ``metric`` spells out) where the samples came with them:
    many (an Nsight export's millions of GPU metric samples) are then selected by integer."""

    t_ns: np.ndarray  # int64
    gpu: np.ndarray  # int32
    metric: np.ndarray  # object (str)
    value: np.ndarray  # float64
    source: str  # "nvml" | "amdsmi" | "dcgm" | "nsys_gpu_metrics"
    codes: np.ndarray | None = None  # int32: metric[i] == names[codes[i]]
    names: tuple[str, ...] = ()

    @classmethod
    def from_rows(cls, rows: list[TelemetryRow], source: str) -> TelemetrySamples:
        return cls(
            np.array([row[0] for row in rows], np.int64),
            np.array([row[1] for row in rows], np.int32),
            np.array([row[2] for row in rows], object),
            np.array([row[3] for row in rows], np.float64),
            source,
        )

    def series(self, gpu: int, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(t_ns, value) of one metric of one GPU, in time order."""
        if self.codes is None:
            wanted = (self.gpu == gpu) & (self.metric == metric)
            return self.t_ns[wanted], self.value[wanted]
        if metric not in self.names:
            return self.t_ns[:0], self.value[:0]
        times, values, keys = self._by_series
        key = gpu * len(self.names) + self.names.index(metric)
        lo, hi = np.searchsorted(keys, key, "left"), np.searchsorted(keys, key, "right")
        return times[lo:hi], values[lo:hi]

    @cached_property
    def _by_series(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """With codes: the rows grouped by (gpu, metric), in time order within a group (one
        stable sort, so each series is a slice)."""
        assert self.codes is not None
        key = self.gpu.astype(np.int64) * len(self.names) + self.codes
        order = np.argsort(key, kind="stable")
        return self.t_ns[order], self.value[order], key[order]

    def metrics(self) -> list[str]:
        """The metrics sampled, sorted."""
        if self.codes is None:
            return sorted({str(name) for name in self.metric})
        present = np.flatnonzero(np.bincount(self.codes, minlength=len(self.names)))
        return sorted(self.names[code] for code in present.tolist())

    def gpus(self) -> list[int]:
        """The GPU indexes sampled, sorted."""
        return [int(gpu) for gpu in np.unique(self.gpu)]
