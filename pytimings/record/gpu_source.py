"""The local GPUs of one vendor library, sampled by :class:`pytimings.record.telemetry.TelemetryLog`
(NVML in :mod:`pytimings.record.telemetry`, amdsmi in :mod:`pytimings.record.telemetry_amd`):
one read loop for both, so a metric a device lacks and a device that disappears are handled
alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytimings._core import now_ns
from pytimings.model.samples import TelemetryRow

__all__ = ["GpuSource", "NotSupported"]


class NotSupported(Exception):
    """A metric this device does not expose (dropped from its list at the first)."""


class GpuSource:
    """The local GPUs of one vendor library: ``handles`` (index -> device), ``static``
    metrics read at the first sample, ``gauges`` read at every one; :meth:`classify` names
    an exception of the library "unsupported" (the metric is dropped for that device),
    "lost" (one ``lost`` row, the device is sampled no more), "failed" (another error of the
    library, such as NVML's TIMEOUT or UNKNOWN: that read is missing from the sample and
    reported to ``read``'s ``failed``; the metric is read again at the next sample) or None
    (not the library's: raised)."""

    source = ""

    def __init__(self) -> None:
        self.handles: dict[int, Any] = {}
        self.static: list[tuple[str, Callable[[Any], float]]] = []
        self.gauges: list[tuple[str, Callable[[Any], float]]] = []
        self.supported: dict[int, set[str]] = {}
        self.first = True

    def classify(self, exc: Exception) -> str | None:
        raise NotImplementedError

    def read(self, failed: Callable[[str], None]) -> list[TelemetryRow]:
        """One sample of every device; ``failed(why)`` for each read that failed."""
        rows: list[TelemetryRow] = []
        t = now_ns()
        if not self.supported:
            names = {m for m, _ in self.gauges + self.static}
            self.supported = {i: set(names) for i in self.handles}
        for gpu, handle in list(self.handles.items()):
            reads = self.gauges + (self.static if self.first else [])
            for metric, fn in reads:
                if metric not in self.supported[gpu]:
                    continue
                try:
                    rows.append((t, gpu, metric, float(fn(handle))))
                except NotSupported:
                    self.supported[gpu].discard(metric)
                except Exception as exc:
                    why = self.classify(exc)
                    if why == "unsupported":
                        self.supported[gpu].discard(metric)
                    elif why == "lost":
                        rows.append((t, gpu, "lost", 1.0))
                        del self.handles[gpu]
                        break
                    elif why == "failed":
                        failed(f"GPU {gpu} {metric}: {type(exc).__name__}: {exc}")
                    else:
                        raise
        self.first = False
        return rows
