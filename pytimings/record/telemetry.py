"""GPU telemetry over a run: power, the energy counter, clocks, temperature, utilisation,
memory used and clock-event (throttle) reasons of every local NVIDIA GPU, read through NVML
(``nvidia-ml-py``, extra "telemetry"), so that a GPU that throttles or sits at its power cap
is seen beside the timeline and energy per token can be computed.

::

    pytimings.sample_telemetry()                    # one sample of every GPU, now
    stop = pytimings.sample_telemetry(every_s=0.1)  # one now, then every 100 ms (daemon thread)
    ...
    stop()                                          # one last sample, then the thread ends

The thread is :class:`pytimings.record.memory.Sampler` (the memory samples' machinery): it
never touches the recorder; a sample costs one NVML call per metric and GPU on that thread.
Samples land in a :class:`TelemetryLog` (by default the process-wide :func:`default_log`);
``pytimings.save`` writes it as the "telemetry" table: ``t_ns`` int64 (``pytimings.now_ns``,
the recorder's clock), ``gpu`` int32 (NVML index), ``metric`` string (:data:`METRICS`),
``value`` float64. A metric a GPU does not expose is left out (never a zero); a GPU that
stops answering (NVML "GPU is lost") gets one ``lost`` row at the time it was found lost and
is sampled no more: the run goes on. Any other NVML error (TIMEOUT, UNKNOWN) leaves that read
out of its sample, which is counted in the log's ``failures`` (the first said on stderr; the
table's metadata "failures" keeps the count) and sampling goes on: the sampler never dies
silently, and never leaves ``sample_telemetry(every_s=...)`` waiting. Without
``nvidia-ml-py`` or an NVIDIA driver, or with no GPU, the first sample prints one line saying
so on stderr and the log stays empty.
``PYTIMINGS_NVML`` names the NVML library to load instead of ``libnvidia-ml.so.1`` (the tests'
fake NVML, tests/native/fake_nvml.c). Without NVML, AMD GPUs are read through ``amdsmi``
(:mod:`pytimings.record.telemetry_amd`; the line then names why neither works).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from pytimings.errors import install_hint
from pytimings.model.samples import TelemetryRow, TelemetrySamples
from pytimings.record.gpu_source import GpuSource, NotSupported
from pytimings.record.memory import RowLog, Sampler, check_period

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "METRICS",
    "GpuSource",
    "NotSupported",
    "TelemetryLog",
    "default_log",
    "sample_telemetry",
]

ENV_LIBRARY = "PYTIMINGS_NVML"
# metric -> unit; every one is a gauge except energy_j (a counter since the driver loaded)
METRICS: dict[str, str] = {
    "power_w": "W",
    "power_limit_w": "W (enforced power limit)",
    "energy_j": "J (the device's total-energy counter)",
    "sm_clock_mhz": "MHz",
    "sm_clock_max_mhz": "MHz (the device's max SM clock)",
    "mem_clock_mhz": "MHz",
    "temperature_c": "degrees C",
    "util_gpu_pct": "% of the sample period a kernel ran",
    "util_mem_pct": "% of the sample period device memory was read or written",
    "memory_used_bytes": "bytes",
    "pcie_tx_bytes_s": "bytes/s",
    "pcie_rx_bytes_s": "bytes/s",
    "clocks_event_reasons": "bit mask (NVML clocks-event reasons)",
    "throttle_status": "AMD's throttle status (amdsmi gpu metrics; not NVML's reason bits)",
    "lost": "1: the GPU stopped answering here; no samples after",
}


class _Nvml(GpuSource):
    """The local NVIDIA GPUs through pynvml; a metric a device does not support is dropped
    from that device's list at its first NotSupported."""

    source = "nvml"

    def __init__(self) -> None:
        super().__init__()
        import pynvml

        self.nv = pynvml
        library = os.environ.get(ENV_LIBRARY)
        if library and pynvml.nvmlLib is None:
            from ctypes import CDLL

            pynvml.nvmlLib = CDLL(library)
        pynvml.nvmlInit()
        nv = pynvml
        self.handles = {i: nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())}
        sm, mem = nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM
        tx, rx = nv.NVML_PCIE_UTIL_TX_BYTES, nv.NVML_PCIE_UTIL_RX_BYTES
        self.static = [
            ("sm_clock_max_mhz", lambda h: nv.nvmlDeviceGetMaxClockInfo(h, sm)),
        ]
        # clocks-event reasons last: a sample of one device is read in this order
        self.gauges = [
            ("power_w", lambda h: nv.nvmlDeviceGetPowerUsage(h) / 1e3),
            ("power_limit_w", lambda h: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3),
            ("energy_j", lambda h: nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3),
            ("sm_clock_mhz", lambda h: nv.nvmlDeviceGetClockInfo(h, sm)),
            ("mem_clock_mhz", lambda h: nv.nvmlDeviceGetClockInfo(h, mem)),
            ("temperature_c", lambda h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
            ("util_gpu_pct", lambda h: nv.nvmlDeviceGetUtilizationRates(h).gpu),
            ("util_mem_pct", lambda h: nv.nvmlDeviceGetUtilizationRates(h).memory),
            ("memory_used_bytes", lambda h: nv.nvmlDeviceGetMemoryInfo(h).used),
            ("pcie_tx_bytes_s", lambda h: nv.nvmlDeviceGetPcieThroughput(h, tx) * 1e3),
            ("pcie_rx_bytes_s", lambda h: nv.nvmlDeviceGetPcieThroughput(h, rx) * 1e3),
            ("clocks_event_reasons", nv.nvmlDeviceGetCurrentClocksEventReasons),
        ]

    def classify(self, exc: Exception) -> str | None:
        if isinstance(exc, self.nv.NVMLError_NotSupported):
            return "unsupported"
        if isinstance(exc, self.nv.NVMLError_GpuIsLost):
            return "lost"
        if isinstance(exc, self.nv.NVMLError):
            return "failed"
        return None


def _open_nvml() -> GpuSource | str:
    """NVML, or the one line saying why there is none."""
    try:
        import pynvml
    except ImportError:
        return f"nvidia-ml-py is not installed ({install_hint('telemetry')})"
    try:
        nvml = _Nvml()
    except (pynvml.NVMLError, OSError) as exc:
        return f"NVML unavailable ({exc})"
    if not nvml.handles:
        return "NVML sees no GPU"
    return nvml


def _open_gpus() -> GpuSource | str:
    """The local GPUs: NVIDIA's through NVML, else AMD's through amdsmi; else one line
    saying why neither."""
    from pytimings.record.telemetry_amd import open_amdsmi

    nvml = _open_nvml()
    if not isinstance(nvml, str):
        return nvml
    amd = open_amdsmi()
    return amd if not isinstance(amd, str) else f"{nvml}; {amd}"


class TelemetryLog(RowLog[TelemetryRow]):
    """Thread-safe list of telemetry rows; the GPUs are opened at the first sample."""

    source = "nvml"

    def __init__(self, open_source: Callable[[], GpuSource | str] = _open_gpus) -> None:
        super().__init__()
        self._open = open_source
        self._source: GpuSource | str | None = None
        self.failures = 0  # samples (scrapes, for DCGM) with a read that failed
        self.last_failure: str | None = None

    def failed(self, why: str) -> None:
        """Count a sample that failed; the first is said on stderr (sampling goes on)."""
        with self._lock:
            self.failures += 1
            self.last_failure = why
            first = self.failures == 1
        if first:
            print(
                f"pytimings telemetry: a sample failed ({why}); counted, sampling goes on",
                file=sys.stderr,
            )

    @property
    def unavailable(self) -> str | None:
        """Why there are no samples (None: sampling works, or was never tried)."""
        return self._source if isinstance(self._source, str) else None

    def sample(self) -> None:
        """One sample of every GPU now (the first opens NVML; without it, one line)."""
        with self._lock:
            if self._source is None:
                self._source = self._open()
                if isinstance(self._source, str):
                    print(f"pytimings telemetry: no samples: {self._source}", file=sys.stderr)
                else:
                    self.source = self._source.source  # "nvml" or "amdsmi"
            source = self._source
        if isinstance(source, str):
            return
        failed: list[str] = []
        self._add(source.read(failed.append))
        if failed:
            more = f" and {len(failed) - 1} more reads" if len(failed) > 1 else ""
            self.failed(failed[0] + more)

    def samples(self) -> TelemetrySamples:
        return TelemetrySamples.from_rows(self._sorted(), self.source)

    def to_arrow(self) -> pa.Table:
        import pyarrow as pa

        samples = self.samples()
        return pa.table(  # read back by pytimings.ingest.recording_file.telemetry_from_arrow
            {
                "t_ns": pa.array(samples.t_ns, pa.int64()),
                "gpu": pa.array(samples.gpu, pa.int32()),
                "metric": pa.array(samples.metric, pa.string()).dictionary_encode(),
                "value": pa.array(samples.value, pa.float64()),
            },
            metadata={"source": samples.source, "failures": str(self.failures)},
        )


_DEFAULT = TelemetryLog()


def default_log() -> TelemetryLog:
    """The process-wide log ``sample_telemetry`` writes to unless given another."""
    return _DEFAULT


def sample_telemetry(
    every_s: float | None = None, *, log: TelemetryLog | None = None
) -> Sampler | None:
    """One telemetry sample now; with ``every_s`` (0.1 is the CLI's default), also one every
    ``every_s`` seconds from a daemon thread until the returned Sampler is called."""
    target = _DEFAULT if log is None else log
    if every_s is None:
        target.sample()
        return None
    check_period(f"sample_telemetry(every_s={every_s})", every_s)
    return Sampler(target, every_s, name="pytimings-telemetry")


def default_telemetry_table() -> pa.Table | None:
    """The default log as the "telemetry" table ``pytimings.save`` writes (None: empty)."""
    return _DEFAULT.to_arrow() if len(_DEFAULT) else None
