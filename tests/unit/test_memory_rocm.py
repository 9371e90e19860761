"""Device memory on ROCm: Kineto from PyTorch's ROCm builds writes ``Device Type`` 6 (c10's
HIP) on ``[memory]`` events and numbers the kernels' devices by HSA agent (CPU agents first:
the first GPU is 2 on a two-socket host), while the memory events and deviceProperties name
the HIP ordinal. A trace written here that way gets its GPU's capacity and memory finding."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytimings.analysis.memory import analyze_memory, memory_findings
from pytimings.ingest import load

GIB = 1 << 30


def _rocm_trace(tmp_path: Path, device_type: int, kernel_device: int) -> Path:
    events: list[dict[str, Any]] = []
    for i in range(3):
        t0 = 1000.0 + 100 * i
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 1,
                       "tid": 2, "ts": t0, "dur": 5.0,
                       "args": {"correlation": 10 + i}})  # fmt: skip
        events.append({"ph": "X", "cat": "kernel", "name": f"Cijk_gemm_{i}",
                       "pid": kernel_device, "tid": 0, "ts": t0 + 10, "dur": 50.0,
                       "args": {"correlation": 10 + i, "device": kernel_device,
                                "stream": 0}})  # fmt: skip
    allocated = 0
    for i, nbytes in enumerate((3 * GIB, 5 * GIB, -3 * GIB)):
        allocated += nbytes
        events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]",
                       "pid": 1, "tid": 2, "ts": 1001.0 + 100 * i,
                       "args": {"Addr": 1 << 40 if i != 1 else (1 << 40) + 8 * GIB,
                                "Bytes": nbytes, "Total Allocated": allocated,
                                "Total Reserved": 10 * GIB, "Device Type": device_type,
                                "Device Id": 0}})  # fmt: skip
    props = [{"id": d, "name": "AMD Instinct MI300X", "totalGlobalMem": 192 * GIB}
             for d in range(4)]  # fmt: skip
    path = tmp_path / "rocm.json"
    path.write_text(json.dumps({"traceEvents": events, "deviceProperties": props}))
    return path


def test_rocm_memory_is_the_gpu_whose_kernels_ran(tmp_path: Path) -> None:
    trace = load(_rocm_trace(tmp_path, device_type=6, kernel_device=2))
    result = analyze_memory(trace)
    (dev,) = result.devices
    assert (dev.device, dev.kernel_device) == (0, 2)
    assert dev.capacity_bytes == 192 * GIB and dev.peak_allocated_bytes == 8 * GIB
    (peak,) = [f for f in memory_findings(result) if ": peak " in f.title]
    assert peak.title.startswith("hip:0 (device 2 of the GPU ops): peak 8.0 GiB allocated")
    assert "of 192.0 GiB (4.2%)" in peak.title
    assert peak.evidence["headroom_bytes"] == 184 * GIB


@pytest.mark.parametrize(("device_type", "kernel_device", "tied"), [(1, 0, 0), (1, 2, None)])
def test_cuda_numbers_memory_and_kernels_alike(
    tmp_path: Path, device_type: int, kernel_device: int, tied: int | None
) -> None:
    # no agent offset on CUDA: an ordinal no GPU op ran on is not tied to another device
    result = analyze_memory(load(_rocm_trace(tmp_path, device_type, kernel_device)))
    (dev,) = result.devices
    assert dev.kernel_device == tied and dev.label == "cuda:0"
    assert dev.capacity_bytes == 192 * GIB
    assert any(f.title.startswith("cuda:0: peak 8.0 GiB") for f in memory_findings(result))
