"""Recordings with real CUDA events: summary, save/load, Trace, torch.distributed over NCCL.

Marked ``gpu``: skipped without a GPU, failing when PYTIMINGS_REQUIRE_GPU=1 and none works.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def test_cuda_regions_flow_through_summary_storage_and_trace(tmp_path: Path) -> None:
    import torch

    from pytimings.ingest.recording import load_recording_trace
    from pytimings.model.trace import OpKind
    from pytimings.record import storage
    from pytimings.record.recorder import Recorder
    from pytimings.record.summary import summary

    assert torch.cuda.is_available(), "torch sees no CUDA device"
    rec = Recorder()
    s = torch.cuda.current_stream()
    a = torch.randn(2048, 2048, device="cuda")
    src = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(20):
        with rec.region("matmul", kind="compute", stream=s):
            a @ a
        with rec.region("d2d", kind="memory", stream=s, nbytes=src.nbytes):
            dst.copy_(src)
    with rec.region("host"):
        pass
    summ = summary(rec)
    mm, cp = summ["matmul"], summ["d2d"]
    assert mm["gpu_count"] == 20 and cp["gpu_count"] == 20
    assert summ["host"]["gpu_count"] == 0
    assert mm["gpu_p50_ns"] > 10_000  # a 2048^3 matmul takes tens of microseconds at least
    assert mm["queue_p50_ns"] is not None and mm["queue_p50_ns"] > -50_000  # anchor residual
    assert 10 < cp["bandwidth_gbps"] < 10_000  # device-to-device copy: GB/s, not TB/s
    path = storage.save(tmp_path / "gpu.pyt", rec)
    tr = load_recording_trace(path)
    kinds = tr.gpu_ops["kind"]
    assert int(np.count_nonzero(kinds == OpKind.KERNEL)) == 20
    assert int(np.count_nonzero(kinds == OpKind.MEMCPY)) == 20
    assert set(tr.gpu_ops["bytes"][kinds == OpKind.MEMCPY]) == {src.nbytes}
    assert len(tr.api_calls) == 40


def test_nccl_collective_is_gpu_timed(tmp_path: Path) -> None:
    import torch
    import torch.distributed as dist

    import pytimings
    from pytimings.record.summary import summary

    assert torch.cuda.is_available(), "torch sees no CUDA device"
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    try:
        pytimings.instrument_torch_distributed()
        t = torch.ones(1 << 20, device="cuda")
        rec = pytimings.default_recorder()
        rec.clear()
        for _ in range(5):
            dist.all_reduce(t)
        pytimings.uninstrument()
        row = summary(rec)["dist.all_reduce"]
        assert row["count"] == 5 and row["gpu_count"] == 5
        assert row["nbytes"] == 5 * t.nbytes
        assert row["algbw_gbps"] > 0
        assert row["busbw_gbps"] == 0.0  # one rank: nothing crosses a bus, factor 2(n-1)/n = 0
    finally:
        pytimings.uninstrument()
        dist.destroy_process_group()
