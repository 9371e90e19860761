"""A fake ``amdsmi`` (the AMD SMI Python bindings) for the telemetry tests: the documented
calls the sampler makes, answering from :data:`SCRIPT`, which a test sets. Put this folder on
sys.path (before any real amdsmi) and ``import amdsmi``.

SCRIPT: ``{"gpus": n, "lost_after": {gpu: samples}, "no_energy": [gpu, ...]}``; sample k
(counted per GPU at each power read) of GPU g answers power ``100 + 10 g + k`` W, an energy
accumulator of ``ENERGY_STEP * (k + 1)`` counts of ``RESOLUTION_UJ`` µJ, GFX clock 1500 MHz
(max 2100), MEM 1300, hotspot 60 + k °C, gfx activity 50, umc 20, VRAM used 1024 MB,
throttle status 0; a GPU past ``lost_after`` raises an AmdSmiLibraryException (not found)."""

from __future__ import annotations

import enum
from typing import Any

SCRIPT: dict[str, Any] = {"gpus": 1}
RESOLUTION_UJ = 15.3
ENERGY_STEP = 1_000_000
calls: dict[int, int] = {}  # power reads per GPU


class AmdSmiException(Exception):
    pass


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        super().__init__(f"AMDSMI error {err_code}")
        self.err_code = err_code

    def get_error_code(self) -> int:
        return self.err_code


class AmdSmiRetCode(enum.IntEnum):
    STATUS_SUCCESS = 0
    STATUS_NOT_SUPPORTED = 2
    STATUS_NOT_FOUND = 31


class AmdSmiInitFlags(enum.IntEnum):
    INIT_AMD_GPUS = 2


class AmdSmiClkType(enum.IntEnum):
    GFX = 0
    MEM = 4


class AmdSmiTemperatureType(enum.IntEnum):
    EDGE = 0
    HOTSPOT = 1


class AmdSmiTemperatureMetric(enum.IntEnum):
    CURRENT = 0


def amdsmi_init(flags: int = 0) -> None:
    calls.clear()


def amdsmi_get_processor_handles() -> list[int]:
    return list(range(int(SCRIPT["gpus"])))


def _check(h: int, new_sample: bool = False) -> int:
    """The index of GPU h's current sample (a power read starts the next one)."""
    k = calls.get(h, 0) if new_sample else calls.get(h, 1) - 1
    if k >= SCRIPT.get("lost_after", {}).get(h, 1 << 30):
        raise AmdSmiLibraryException(AmdSmiRetCode.STATUS_NOT_FOUND)
    if new_sample:
        calls[h] = k + 1
    return k


def amdsmi_get_power_info(h: int) -> dict[str, Any]:
    k = _check(h, new_sample=True)
    return {"current_socket_power": 100 + 10 * h + k, "average_socket_power": "N/A",
            "gfx_voltage": 800, "soc_voltage": 900, "mem_voltage": 1100}  # fmt: skip


def amdsmi_get_energy_count(h: int) -> dict[str, Any]:
    k = _check(h)
    if h in SCRIPT.get("no_energy", []):
        raise AmdSmiLibraryException(AmdSmiRetCode.STATUS_NOT_SUPPORTED)
    return {"energy_accumulator": ENERGY_STEP * (k + 1), "counter_resolution": RESOLUTION_UJ,
            "timestamp": k}  # fmt: skip


def amdsmi_get_clock_info(h: int, clk: int) -> dict[str, Any]:
    _check(h)
    if clk == AmdSmiClkType.GFX:
        return {"clk": 1500, "min_clk": 500, "max_clk": 2100, "clk_locked": False}
    return {"clk": 1300, "min_clk": 900, "max_clk": 1300, "clk_locked": False}


def amdsmi_get_temp_metric(h: int, kind: int, metric: int) -> int:
    return 60 + _check(h)


def amdsmi_get_gpu_activity(h: int) -> dict[str, Any]:
    _check(h)
    return {"gfx_activity": 50, "umc_activity": 20, "mm_activity": "N/A"}


def amdsmi_get_gpu_vram_usage(h: int) -> dict[str, Any]:
    _check(h)
    return {"vram_total": 196608, "vram_used": 1024}


def amdsmi_get_gpu_metrics_info(h: int) -> dict[str, Any]:
    _check(h)
    return {"throttle_status": 0, "temperature_hotspot": 60}
