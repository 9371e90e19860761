"""Host findings on GPU-bound traces: a thread that launches nothing while the GPUs are busy
waits (it does not limit the step) and ranks below what does; the GPU-bound finding says
the GPU is the bottleneck, how far ahead the host runs, and the step's length."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.synth import make_trace

from pytimings.analysis.attribution import attribute
from pytimings.analysis.findings import GPU_BOUND_SHARE, gpu_bound, host_windows
from pytimings.ingest import load
from pytimings.model.trace import ActivityKind
from pytimings.session import Analysis

MS = 1_000_000
US = 1_000
THREADS = (
    {"pid": 100, "tid": 100, "name": "python3"},
    {"pid": 100, "tid": 101, "name": "autograd"},
)


def _backward(kernels: int = 19, launcher: int = 1, steps: int = 3):
    """``steps`` 'ProfilerStep#i' ranges of 20 ms on the main thread, each with python
    'run_backward' over [1, 20) ms of it; thread ``launcher`` launches ``kernels`` kernels
    of 1 ms per step from 1 ms on (call 10 µs long, 100 µs before the kernel starts), back
    to back on the GPU. The windows do not overlap: each step's GPU work ends inside it."""
    ops, api, ranges, host_ops = [], [], [], []
    corr = 0
    for s in range(steps):
        t0 = s * 20 * MS
        ranges.append({"name": f"ProfilerStep#{s}", "start": t0, "end": t0 + 20 * MS})
        host_ops.append({"start": t0 + 1 * MS, "end": t0 + 20 * MS, "name": "run_backward",
                         "kind": ActivityKind.PYTHON})  # fmt: skip
        k = t0 + 1 * MS
        for _ in range(kernels):
            corr += 1
            api.append({"start": k - 100 * US, "end": k - 90 * US, "correlation": corr,
                        "thread": launcher})  # fmt: skip
            ops.append({"start": k, "end": k + 1 * MS, "correlation": corr,
                        "name": "gemm"})  # fmt: skip
            k += 1 * MS
    return make_trace(ops, api, ranges, threads=THREADS, host_ops=host_ops)


def _busy_share(a) -> float:
    """The GPU's busy share of python 'run_backward' time, computed here from the ops."""
    tr = a.trace
    ops = tr.gpu_ops
    busy = np.zeros(int(tr.host_ops["end"].max()) // US, dtype=bool)
    for s, e in zip(ops["start"].tolist(), ops["end"].tolist(), strict=True):
        busy[s // US : e // US] = True
    inside = np.zeros_like(busy)
    for s, e in zip(tr.host_ops["start"].tolist(), tr.host_ops["end"].tolist(), strict=True):
        inside[s // US : e // US] = True
    return float(busy[inside].mean())


def test_a_thread_waiting_while_the_gpu_is_busy_is_said_to_wait_and_ranked_last():
    a = attribute(_backward(18), by="ProfilerStep#*")
    (f,) = host_windows(a)
    e = f.evidence
    assert (e["kind"], e["name"]) == ("python", "run_backward")
    # the GPU runs 18 of the 19 ms of each run_backward: 94.7% < 95%
    assert abs(e["gpu_busy_share"] - 18 / 19) < 1e-12 and e["gpu_busy_share"] == _busy_share(a)
    assert not e["waiting"] and not e["gpu_bound"] and "waits" not in f.title
    # one more kernel fills the step: busy 19 of 19 ms
    a = attribute(_backward(), by="ProfilerStep#*")
    (f,) = host_windows(a)
    e = f.evidence
    assert e["gpu_busy_share"] == 1.0 == _busy_share(a) and e["launches"] == 0 and e["waiting"]
    assert e["activity_ns"] == 3 * 19 * MS and e["gpu_idle_ns"] == 0
    assert f.title.endswith(
        "; the thread waits there: it launches no GPU work in it and the GPUs are busy 100.0% "
        "of its 57.00 ms, so it does not limit the step (the GPU idles 0.0 µs of it)"
    )
    found = Analysis(a).findings
    layers = [x.layer for x in found]
    assert found[-1].title == f.title  # below everything, however large its share
    assert layers.index("hardware") < layers.index("host")
    assert any(x.title.startswith("the GPU is the bottleneck") for x in found)


def test_a_thread_that_launches_the_work_runs_ahead_of_a_busy_gpu():
    # the same steps, the kernels launched from the main thread inside run_backward: it
    # does not wait, and with the GPU busy all of that time it does not limit the step
    a = attribute(_backward(launcher=0), by="ProfilerStep#*")
    (f,) = host_windows(a)
    e = f.evidence
    # the first launch of each step (at 0.9 ms) comes before run_backward begins (1 ms)
    assert e["launches"] == 3 * 18 and not e["waiting"] and e["gpu_bound"]
    assert "waits" not in f.title
    assert f.title.endswith(
        "; the GPUs are busy 100.0% of its 57.00 ms (the thread launches 54 GPU ops in it), "
        "so it does not limit the step (the GPU idles 0.0 µs of it)"
    )
    assert Analysis(a).findings[-1].title == f.title
    # the GPU idle part of the time: the thread may limit it, no such claim
    (f,) = host_windows(attribute(_backward(18, launcher=0), by="ProfilerStep#*"))
    assert not f.evidence["gpu_bound"] and "does not limit" not in f.title


def test_a_spin_wait_range_without_child_ops_waits():
    """A range 'dispatch(F)' inside each 'step' (4 ms of its 5) with no child activity,
    while a 5 ms kernel launched just before it runs: the host spins on GPU counters."""
    ops, api, ranges = [], [], []
    for s in range(4):
        t0 = s * 6 * MS
        ranges.append({"name": "step", "start": t0, "end": t0 + 6 * MS})
        ranges.append({"name": "dispatch(F)", "start": t0 + MS, "end": t0 + 5 * MS, "depth": 1})
        api.append({"start": t0, "end": t0 + 10 * US, "correlation": s})
        ops.append({"start": t0 + 500 * US, "end": t0 + 5500 * US, "correlation": s,
                    "name": "dpsk::ep::internode::dispatch"})  # fmt: skip
    a = attribute(make_trace(ops, api, ranges), by="step")
    (f,) = host_windows(a)
    e = f.evidence
    assert (e["kind"], e["name"], e["share"]) == ("range", "dispatch(F)", 4 / 6)
    assert e["waiting"] and e["gpu_busy_share"] == 1.0 and e["activity_ns"] == 16 * MS
    assert "the thread waits there" in f.title
    assert Analysis(a).findings[-1].title == f.title


def test_the_gpu_bound_finding_says_the_step_is_the_gpus_period():
    a = attribute(_backward(), by="ProfilerStep#*")
    (f,) = gpu_bound(a)
    e = f.evidence
    # each window [0, 20) ms: the GPU busy [1, 20) ms, 95.0% of it
    assert e["min_busy_share"] == 19 / 20 >= GPU_BOUND_SHARE
    assert (e["busy_ns"], e["window_ns"], e["idle_ns"]) == (57 * MS, 60 * MS, 3 * MS)
    # every op starts 100 µs after its launch call began
    assert (
        e["launch_latency_p50_ns"] == 100 * US == Analysis(a).to_document()["launch_latency"]["p50"]
    )
    assert (e["window_p50_ns"], e["window_busy_p50_ns"]) == (20 * MS, 19 * MS)
    assert f.title == (
        "the GPU is the bottleneck: GPU 0 is busy 95.0% of ProfilerStep#* time (idle 3.00 ms "
        "in all: no host-side change saves more); the host runs 0.10 ms ahead of the GPU "
        "(launch latency p50); ProfilerStep#* p50 20.00 ms, the GPU busy 19.00 ms of it (p50): "
        "the step lasts as long as its GPU work"
    )
    # 18 kernels of 1 ms per 20 ms step: 90% busy, not GPU-bound
    assert gpu_bound(attribute(_backward(18), by="ProfilerStep#*")) == []


@pytest.mark.shared
def test_a_backward_range_on_a_gpu_bound_real_trace_is_not_blamed(shared_dir) -> None:
    """HTA's ns_resolution trace (V100, 5 ProfilerSteps): the main thread's
    '## backward ##' range holds 61% of the host time while the autograd thread feeds the
    GPU (the main thread launches 30 ops in it); the GPU is busy 98.8% of that range's
    time. The GPU-bound finding leads; the range is said not to limit the step, last."""
    path = shared_dir / "data/external/hta/ns_resolution_trace"
    a = attribute(load(next(path.glob("*.json.gz"))), by="ProfilerStep#*")
    found = Analysis(a).findings
    # 97.7% of the tiled steps (the overlapping v2 windows counted busy time twice: 98.2%)
    assert found[0].title.startswith("the GPU is the bottleneck: GPU 0 is busy 97.7%")
    f = found[-1]
    e = f.evidence
    assert (f.layer, e["name"], e["launches"]) == ("host", "## backward ##", 30)
    assert e["gpu_bound"] and not e["waiting"] and e["gpu_busy_share"] > 0.98
    assert "so it does not limit the step" in f.title
