"""One table of API concepts for CUDA runtime, driver and HIP spellings; vendor words; the
``domain:name`` label of ranges (pytimings.ingest.names)."""

from __future__ import annotations

import pytest

from pytimings.ingest.names import (
    api_concept,
    api_stem,
    is_graph_launch,
    is_synchronizing,
    range_label,
    vendor,
)


@pytest.mark.parametrize(
    ("names", "concept"),
    [
        (("cudaGraphLaunch", "cudaGraphLaunch_v10000", "hipGraphLaunch", "cuGraphLaunch",
          "cudaGraphLaunch_ptsz", "cuGraphLaunch_ptsz_v10000"), "graph_launch"),
        (("cudaLaunchKernel_v7000", "hipLaunchKernel", "cudaLaunchKernelExC_v11060",
          "hipExtModuleLaunchKernel", "cuLaunchKernel", "hipModuleLaunchKernel"), "kernel_launch"),
        (("cudaStreamSynchronize_v3020", "hipStreamSynchronize", "cuStreamSynchronize"),
         "stream_synchronize"),
        (("cudaEventSynchronize", "hipEventSynchronize"), "event_synchronize"),
        (("cudaDeviceSynchronize", "hipDeviceSynchronize", "cuCtxSynchronize"),
         "device_synchronize"),
        (("cudaMemcpyAsync_v3020", "hipMemcpyAsync", "cuMemcpyDtoHAsync_v2",
          "cudaMemcpy2DAsync", "hipMemcpyAsync_spt"), "memcpy_async"),
        (("cudaMemcpy", "cudaMemcpy_v3020", "hipMemcpy", "hipMemcpyWithStream", "cuMemcpyDtoH_v2",
          "cudaMemcpyToSymbol", "cudaMemcpyPeer"), "memcpy"),
        (("cudaMemsetAsync", "hipMemsetAsync"), "memset_async"),
        (("cudaStreamWaitEvent", "hipStreamWaitEvent"), "stream_wait_event"),
        (("cudaGetDeviceProperties", "hipGetDevicePropertiesR0600", "cudaEventRecord",
          "cudaGraphLaunchFoo", "aten::mm", ""), None),
    ],
)  # fmt: skip
def test_cuda_and_hip_spellings_map_to_one_concept(names: tuple[str, ...], concept: str) -> None:
    assert [api_concept(n) for n in names] == [concept] * len(names)


def test_stems_and_graph_launches() -> None:
    assert api_stem("cudaLaunchKernel_ptsz_v7000") == "LaunchKernel"
    assert api_stem("hipGetDevicePropertiesR0600") == "GetDevicePropertiesR0600"
    assert is_graph_launch("hipGraphLaunch") and is_graph_launch("cudaGraphLaunch_v10000")
    assert not is_graph_launch("cudaGraphInstantiate")


def test_synchronizing_calls_and_cpu_ops() -> None:
    waits = [
        "cudaStreamSynchronize_v3020", "hipStreamSynchronize", "cudaEventSynchronize",
        "hipDeviceSynchronize", "cuCtxSynchronize", "cudaMemcpy", "hipMemcpyWithStream",
        "cuMemcpyDtoH_v2", "aten::_local_scalar_dense", "aten::item",
    ]  # fmt: skip
    assert all(is_synchronizing(n) for n in waits)
    free = [
        "cudaMemcpyAsync", "hipMemcpyAsync", "cudaLaunchKernel", "hipGraphLaunch",
        "cudaStreamWaitEvent", "cudaMemsetAsync", "aten::mm", "aten::copy_", "",
    ]  # fmt: skip
    assert not any(is_synchronizing(n) for n in free)


def test_vendor_from_the_traces_own_names() -> None:
    assert vendor(["hipLaunchKernel"], []) == "HIP"
    assert vendor([], ["AMD Instinct MI300X"]) == "HIP"
    assert vendor([], ["AMD Radeon Graphics"]) == "HIP"
    assert vendor(["cudaLaunchKernel"], ["NVIDIA H200"]) == "CUDA"
    assert vendor([], []) == "CUDA"


def test_range_label() -> None:
    assert range_label("probe", "decode_step") == "probe:decode_step"
    assert range_label("", "decode_step") == "decode_step"
