"""AMD GPU telemetry through the ``amdsmi`` Python package (ROCm's AMD SMI bindings; extra
"telemetry-amd"), the same metrics as NVML where amdsmi exposes them, read by
:class:`pytimings.record.telemetry.TelemetryLog` when NVML finds no GPU:

=====================  =====================================================================
metric                 amdsmi call (documented Python API)
=====================  =====================================================================
``power_w``            ``amdsmi_get_power_info``: ``current_socket_power`` (W), else
                       ``average_socket_power``
``energy_j``           ``amdsmi_get_energy_count``: ``energy_accumulator`` (older: ``power``)
                       times ``counter_resolution`` (µJ)
``sm_clock_mhz``       ``amdsmi_get_clock_info(h, AmdSmiClkType.GFX)``: ``clk`` (MHz)
``sm_clock_max_mhz``   the same: ``max_clk`` (read once)
``mem_clock_mhz``      ``amdsmi_get_clock_info(h, AmdSmiClkType.MEM)``: ``clk``
``temperature_c``      ``amdsmi_get_temp_metric(h, HOTSPOT, CURRENT)``
``util_gpu_pct``       ``amdsmi_get_gpu_activity``: ``gfx_activity`` (%)
``util_mem_pct``       the same: ``umc_activity`` (%)
``memory_used_bytes``  ``amdsmi_get_gpu_vram_usage``: ``vram_used`` (MB)
``throttle_status``    ``amdsmi_get_gpu_metrics_info``: ``throttle_status`` (AMD's own flag,
                       not NVML's clocks-event bits: no reason names, no throttle shares)
=====================  =====================================================================

A value amdsmi reports as ``"N/A"``, or a call failing with ``AMDSMI_STATUS_NOT_SUPPORTED``,
drops that metric for that device; any other ``AmdSmiLibraryException`` from a device counts
it lost (one ``lost`` row, sampled no more; the run goes on). No power limit is read (so
no ``power_at_cap`` finding for AMD GPUs).
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

from pytimings.errors import install_hint
from pytimings.record.gpu_source import GpuSource, NotSupported

__all__ = ["open_amdsmi"]

NOT_SUPPORTED = 2  # AMDSMI_STATUS_NOT_SUPPORTED (amdsmi.h), where AmdSmiRetCode lacks it


def _num(d: Any, *keys: str) -> float:
    """The first of ``keys`` holding a number in amdsmi's dict ``d``; NotSupported if none."""
    for k in keys:
        v = d.get(k) if isinstance(d, dict) else None
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
    raise NotSupported(keys[0])


class _Amdsmi(GpuSource):
    source = "amdsmi"

    def __init__(self, amd: Any) -> None:
        super().__init__()
        self.amd = amd
        flags = getattr(getattr(amd, "AmdSmiInitFlags", None), "INIT_AMD_GPUS", None)
        amd.amdsmi_init() if flags is None else amd.amdsmi_init(flags)
        self.handles = dict(enumerate(amd.amdsmi_get_processor_handles()))
        gfx, mem = amd.AmdSmiClkType.GFX, amd.AmdSmiClkType.MEM
        hot, now = amd.AmdSmiTemperatureType.HOTSPOT, amd.AmdSmiTemperatureMetric.CURRENT
        codes = getattr(amd, "AmdSmiRetCode", None)
        self.not_supported = int(getattr(codes, "STATUS_NOT_SUPPORTED", NOT_SUPPORTED))

        def energy(h: Any) -> float:
            e = amd.amdsmi_get_energy_count(h)
            return _num(e, "energy_accumulator", "power") * _num(e, "counter_resolution") / 1e6

        self.static = [
            ("sm_clock_max_mhz", lambda h: _num(amd.amdsmi_get_clock_info(h, gfx), "max_clk")),
        ]
        self.gauges = [
            ("power_w", lambda h: _num(amd.amdsmi_get_power_info(h), "current_socket_power",
                                       "average_socket_power")),
            ("energy_j", energy),
            ("sm_clock_mhz", lambda h: _num(amd.amdsmi_get_clock_info(h, gfx), "clk")),
            ("mem_clock_mhz", lambda h: _num(amd.amdsmi_get_clock_info(h, mem), "clk")),
            ("temperature_c", lambda h: _num({"t": amd.amdsmi_get_temp_metric(h, hot, now)}, "t")),
            ("util_gpu_pct", lambda h: _num(amd.amdsmi_get_gpu_activity(h), "gfx_activity")),
            ("util_mem_pct", lambda h: _num(amd.amdsmi_get_gpu_activity(h), "umc_activity")),
            ("memory_used_bytes",
             lambda h: _num(amd.amdsmi_get_gpu_vram_usage(h), "vram_used") * (1 << 20)),
            ("throttle_status",
             lambda h: _num(amd.amdsmi_get_gpu_metrics_info(h), "throttle_status")),
        ]  # fmt: skip

    def classify(self, exc: Exception) -> str | None:
        if not isinstance(exc, self.amd.AmdSmiLibraryException):
            return None
        code = exc.get_error_code() if hasattr(exc, "get_error_code") else exc.err_code
        return "unsupported" if int(code) == self.not_supported else "lost"


def open_amdsmi() -> GpuSource | str:
    """amdsmi's GPUs, or the one line saying why there are none."""
    try:  # amdsmi loads libamd_smi.so when imported, printing why it cannot on stdout
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            import amdsmi
    except ImportError:
        return f"amdsmi is not installed (AMD GPUs: {install_hint('telemetry-amd')})"
    except Exception as exc:  # amdsmi 7 raises KeyError('libamd_smi.so') without ROCm
        return f"amdsmi cannot load its library, ROCm's libamd_smi.so ({type(exc).__name__} {exc})"
    try:
        source = _Amdsmi(amdsmi)
    except (amdsmi.AmdSmiException, OSError) as exc:
        return f"amdsmi unavailable ({exc})"
    if not source.handles:
        return "amdsmi sees no GPU"
    return source
