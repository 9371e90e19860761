"""The recorder on a real GPU with torch: event timing against torch.cuda.Event, GPU times on
the host clock, no synchronisation on the hot path, CUDA graph capture + replay.

Marked `gpu`: skipped without a GPU, failing instead when PYTIMINGS_REQUIRE_GPU=1."""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # imported first: its libcudart is the one we must share

from pytimings.model.recording import RecordFlag, Recording  # noqa: E402
from pytimings.record.recorder import Recorder  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _cuda() -> None:
    assert torch.cuda.is_available(), "torch sees no CUDA device"
    torch.cuda.init()


def rows(rec: Recording, name: str) -> dict[str, np.ndarray]:
    sel = np.array([rec.strings[i] for i in rec.records["name"]]) == name
    return {k: v[sel] for k, v in rec.records.items()}


def test_status_names_the_runtime_torch_loaded() -> None:
    import pytimings as pt

    assert pt.cuda_available()
    assert "device" in pt.cuda_status() and "already loaded" in pt.cuda_status()


def test_gpu_time_matches_torch_events() -> None:
    r = Recorder()
    s = torch.cuda.Stream()
    a = torch.randn(2048, 2048, device="cuda")
    with torch.cuda.stream(s):
        for _ in range(3):
            a @ a
    torch_ms = []
    for _ in range(20):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with r.region("matmul", kind="compute", stream=s), torch.cuda.stream(s):
            e0.record(s)
            a @ a
            e1.record(s)
        torch_ms.append((e0, e1))
    torch.cuda.synchronize()
    ref_ns = np.array([e0.elapsed_time(e1) * 1e6 for e0, e1 in torch_ms])
    m = rows(r.recording(), "matmul")
    assert np.all(m["flags"] & RecordFlag.GPU_RESOLVED)
    ours = m["gpu_end_ns"] - m["gpu_start_ns"]  # in issue order: one thread, sorted by start
    # our events bracket torch's: never shorter, longer by at most a few event slots
    assert np.all(ours >= ref_ns - 2_000)
    assert np.median(ours - ref_ns) < 20_000


def test_gpu_times_sit_on_the_host_clock() -> None:
    r = Recorder()
    s = torch.cuda.current_stream()
    x = torch.randn(1 << 20, device="cuda")
    for _ in range(10):
        torch.cuda.synchronize()
        with r.region("k", stream=s):
            x.mul_(1.0001)
        torch.cuda.synchronize()
        t_sync = time.monotonic_ns()
        rec = r.recording()
        k = rows(rec, "k")
        anchor = rec.meta["gpu_anchors"][-1]
        slack = anchor["uncertainty_ns"] + 20_000
        assert k["gpu_start_ns"][-1] >= k["start_ns"][-1] - slack  # launched before it ran
        assert k["gpu_end_ns"][-1] <= t_sync + slack  # done before synchronize returned
        r.clear()


def test_hot_path_does_not_wait_for_the_gpu() -> None:
    r = Recorder()
    s = torch.cuda.Stream()
    with r.region("warm", stream=s):
        pass
    r.flush()
    t0 = time.monotonic_ns()
    for _ in range(20):
        with r.region("sleep", stream=s), torch.cuda.stream(s):
            torch.cuda._sleep(20_000_000)  # ~10 ms of GPU time each
    host_ns = time.monotonic_ns() - t0
    r.flush()
    gpu = rows(r.recording(), "sleep")
    gpu_ns = int((gpu["gpu_end_ns"] - gpu["gpu_start_ns"]).sum())
    assert gpu_ns > 5 * host_ns, (gpu_ns, host_ns)  # the host ran far ahead of the GPU


def test_sample_every_on_gpu() -> None:
    r = Recorder()
    s = torch.cuda.current_stream()
    for _ in range(64):
        with r.region("sampled", stream=s, sample_every=16):
            pass
    m = rows(r.recording(), "sampled")
    assert int(np.count_nonzero(m["flags"] & RecordFlag.GPU_RESOLVED)) == 4


def test_graph_capture_then_replay() -> None:
    r = Recorder()
    s = torch.cuda.Stream()
    x = torch.ones(1024, device="cuda")
    with torch.cuda.stream(s):
        y = x * 2  # warm-up outside capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with pytest.warns(RuntimeWarning, match="graph capture"), torch.cuda.graph(g, stream=s):
        with r.region("captured", kind="compute", stream=torch.cuda.current_stream()):
            y = x * 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one notice only
        with torch.cuda.graph(torch.cuda.CUDAGraph(), stream=s):
            with r.region("captured", stream=torch.cuda.current_stream()):
                x * 3
    for i in range(3):
        x.fill_(i)
        with r.region("replay", stream=torch.cuda.current_stream()):
            g.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, x * 2)
    rec = r.recording()
    cap = rows(rec, "captured")
    assert len(cap["name"]) == 2 and np.all(cap["flags"] & RecordFlag.GRAPH_CAPTURE)
    assert not np.any(cap["flags"] & RecordFlag.GPU_TIMED)
    assert np.all(rows(rec, "replay")["flags"] & RecordFlag.GPU_RESOLVED)
    assert rec.meta["capture_fallbacks"] >= 2


def test_event_record_floor() -> None:
    from pytimings import _core

    floor = _core.event_record_floor_ns(torch.cuda.current_stream().cuda_stream, 2000)
    assert floor > 0
