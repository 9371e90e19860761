"""The kernel layer's findings on hand-made traces, every number worked out here from the
shapes, the kernel times and the hand GPU's peaks (docs/ops.md "Findings")."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from helpers.synth import make_trace

from pytimings.analysis.attribution import attribute
from pytimings.analysis.kernel_findings import cpu_compute, op_categories, ops_under_roofline
from pytimings.analysis.op_table import LazyOpTable
from pytimings.analysis.ops import GpuSpec
from pytimings.analysis.savings import add_savings
from pytimings.session import Analysis, Options

BF16 = "c10::BFloat16"
GPU = GpuSpec("hand", {"bf16": 1000.0}, 2.0)  # ridge point 500 FLOP/B
N = 2048  # mm: 2N^3 FLOPs over 3N^2 bf16 elements = 682.7 FLOP/B: compute-bound
MM = json.dumps([[[N, N], [N, N]], [BF16, BF16], ["", ""], None])
ADD = json.dumps([[[N, N], [N, N], []], [BF16, BF16, "Scalar"], ["", "", "1"], None])
MM_NS, ADD_NS = 80_000, 20_000


def _gpu_bound_trace():
    """A step [0, 342,020) of 4 aten::mm and one aten::add launched in its first 2 µs; the
    kernels run back to back from 2 µs to 342 µs; the host then waits in a device sync."""
    host_ops, api, ops = [], [], []
    for i in range(5):
        t = 1000 + 100 * i
        host_ops.append({"name": "aten::mm" if i < 4 else "aten::add", "start": t, "end": t + 50,
                         "args": MM if i < 4 else ADD})  # fmt: skip
        api.append({"start": t + 10, "end": t + 20, "correlation": i + 1})
        s = 2000 + MM_NS * i
        ops.append({"name": "sm90_gemm_bf16" if i < 4 else "elementwise_kernel", "start": s,
                    "end": s + (MM_NS if i < 4 else ADD_NS), "correlation": i + 1})  # fmt: skip
    api.append({"name": "cudaDeviceSynchronize", "start": 1600, "end": 342_010})
    ranges = [{"name": "step", "start": 0, "end": 342_020}]
    return make_trace(ops, api, ranges=ranges, host_ops=host_ops)


def _ops(a):
    """The op table over ``a`` for the GPU these tests name."""
    return LazyOpTable(a, GPU)


def test_categories_of_a_gpu_bound_step_with_the_gemm_rate():
    a = attribute(_gpu_bound_trace(), by="step")
    (f,) = op_categories(a, _ops(a))
    busy = 4 * MM_NS + ADD_NS  # 340 µs of the 342.02 µs step
    assert f.evidence["busy_ns"] == busy and f.evidence["window_ns"] == 342_020
    (gemm,) = f.evidence["categories"]  # elementwise: 5.9% < 10%, not named
    assert gemm["category"] == "gemm" and gemm["busy_ns"] == 4 * MM_NS
    rate = 4 * 2 * N**3 / (4 * MM_NS * 1e-9) / 1e12  # TFLOP/s
    assert gemm["rate"]["tflops_s"] == pytest.approx(rate)
    assert gemm["rate"]["peak_fraction"] == pytest.approx(rate / 1000)
    assert gemm["rate"]["modelled_share"] == 1.0
    assert f.title == (
        f"the GPU's busy time (0.34 ms, {100 * busy / 342_020:.1f}% of step time) by op "
        f"category: gemm {100 * 4 * MM_NS / busy:.1f}% (0.32 ms) at {rate / 10:.1f}% of bf16 "
        f"peak ({rate:.1f} TFLOP/s over 100.0% of its GPU time)"
    )
    assert f.loss_ns == 4 * MM_NS


def test_no_categories_finding_when_the_gpu_waits():
    tr = _gpu_bound_trace()
    tr.ranges = tr.ranges.with_columns(end=np.array([1_000_000], np.int64))  # 34% busy
    a = attribute(tr, by="step")
    assert op_categories(a, _ops(a)) == []


def test_ops_under_the_roofline_by_hand_and_their_replayed_saving():
    a = attribute(_gpu_bound_trace(), by="step")
    found = ops_under_roofline(a, _ops(a))
    assert [f.evidence["name"] for f in found] == ["aten::mm", "aten::add"]
    mm, add = (f.evidence for f in found)
    # mm: compute-bound (682.7 >= 500 FLOP/B) at 2N^3 / 80 us of the 1000 TFLOP/s peak
    frac = 2 * N**3 / (MM_NS * 1e-9) / 1000e12
    assert mm["bound"] == "compute" and mm["roofline_fraction"] == pytest.approx(frac)
    assert mm["at_roof_ns"] == 4 * round(MM_NS * frac)  # each kernel in integer ns
    assert mm["potential_ns"] == 4 * MM_NS - mm["at_roof_ns"] == found[0].loss_ns
    # add: N^2 FLOPs over 3N^2 bf16 elements (0.17 FLOP/B): memory-bound, its TB/s of 2
    tb_s = 3 * N * N * 2 / (ADD_NS * 1e-9) / 1e12
    assert add["bound"] == "memory" and add["roofline_fraction"] == pytest.approx(tb_s / 2)
    assert add["potential_ns"] == ADD_NS - round(ADD_NS * tb_s / 2)
    assert found[0].title.startswith(
        f"'aten::mm' [[{N}, {N}], [{N}, {N}]] (bf16, gemm): 4 calls, 0.32 ms of GPU time "
        f"({100 * 4 * MM_NS / (4 * MM_NS + ADD_NS):.1f}% of all), compute-bound at "
        f"{frac * 1000:.1f} TFLOP/s = {100 * frac:.1f}% of the hand's bf16 peak 1000 TFLOP/s"
    )
    fix = found[0].fix
    assert fix is not None and sorted(fix.scaled.tolist()) == [0, 1, 2, 3]
    # the kernels are queued ahead and the host waits for the last: running the GEMMs at
    # their roof ends the step as much earlier
    add_savings(a, found)
    assert found[0].saving_ns == mm["potential_ns"]
    assert found[1].saving_ns == add["potential_ns"]


def test_no_roofline_finding_without_a_known_gpu():
    a = attribute(_gpu_bound_trace(), by="step")  # the synthetic GPU is named "GPU"
    unnamed = LazyOpTable(a)
    assert unnamed.get().gpu is None and ops_under_roofline(a, unnamed) == []


BMM = json.dumps([[[8, 64, 64], [8, 64, 64]], ["float", "float"], ["", ""], None])


def test_a_compute_op_that_launches_nothing_while_the_gpu_idles():
    # GPU busy [1000, 4000) and [10000, 12000); aten::matmul > aten::bmm [5000, 9000)
    # launches nothing while the GPU idles; a second bmm [10500, 11500) while it is busy; a
    # third bmm launches its kernel (not on the host)
    host_ops = [
        {"name": "aten::add", "start": 100, "end": 200},
        {"name": "aten::matmul", "start": 4900, "end": 9100, "args": BMM},
        {"name": "aten::bmm", "start": 5000, "end": 9000, "args": BMM},
        {"name": "aten::bmm", "start": 9500, "end": 9700, "args": BMM},
        {"name": "aten::bmm", "start": 10500, "end": 11500, "args": BMM},
    ]
    api = [
        {"start": 110, "end": 120, "correlation": 1},
        {"start": 9510, "end": 9520, "correlation": 2},
    ]
    ops = [
        {"name": "elementwise_kernel", "start": 1000, "end": 4000, "correlation": 1},
        {"name": "sm90_gemm", "start": 10000, "end": 12000, "correlation": 2},
    ]
    a = attribute(make_trace(ops, api, host_ops=host_ops))
    (f,) = cpu_compute(a)
    e = f.evidence
    assert (e["name"], e["calls"], e["op_ns"]) == ("aten::bmm", 2, 4000 + 1000)
    assert e["gflop"] == pytest.approx(2 * 2 * 8 * 64**3 / 1e9)
    assert e["gpu_idle_ns"] == f.loss_ns == 4000  # [5000, 9000) in the idle [4000, 10000)
    assert f.title == (
        "cpu_op 'aten::bmm' launches no GPU work in 2 calls (5.0 µs of host time, "
        f"{e['gflop']:.3g} GFLOP by its shapes, 1.68 TFLOP/s): it computes on the host while "
        "its rank's GPUs idle 4.0 µs of it"
    )
    assert e["tflops_s"] == pytest.approx(e["gflop"] / 5000 * 1e6)


def _captured(launch_name: str, begin: bool, bmm_ns: int = 4000) -> Any:
    """A bmm [5000, 5000 + bmm_ns) while the GPU idles (busy [1000, 2000) and [10000,
    12000)), with a call ``launch_name`` inside that no GPU op follows, inside a stream
    capture on its thread when ``begin``."""
    host_ops = [{"name": "aten::bmm", "start": 5000, "end": 5000 + bmm_ns, "args": BMM}]
    api = [
        {"start": 110, "end": 120, "correlation": 1},
        {"start": 9900, "end": 9910, "correlation": 2},
        {"name": launch_name, "start": 5100, "end": 5110, "correlation": 7},
    ]
    if begin:
        api += [
            {"name": "cudaStreamBeginCapture", "start": 4000, "end": 4010, "correlation": 5},
            {"name": "cudaStreamEndCapture", "start": 9800, "end": 9810, "correlation": 6},
        ]
    ops = [
        {"name": "elementwise_kernel", "start": 1000, "end": 2000, "correlation": 1},
        {"name": "sm90_gemm", "start": 10000, "end": 12000, "correlation": 2},
    ]
    return attribute(make_trace(ops, api, host_ops=host_ops))


@pytest.mark.parametrize(
    ("launch_name", "begin"),
    [
        ("cudaLaunchKernel", False),  # a launch whose kernel is not in the trace: a launch
        ("hipLaunchKernel", True),
        ("cudaStreamGetCaptureInfo_v2", False),  # queries a capture: its launches recorded
        ("cudaStreamIsCapturing", True),  # no launch, but inside a capture: graph 0
    ],
)
def test_work_captured_into_a_graph_is_not_host_compute(launch_name: str, begin: bool) -> None:
    assert cpu_compute(_captured(launch_name, begin)) == []


def test_host_compute_needs_a_rate_a_cpu_reaches() -> None:
    # the same bmm with no evidence of a launch or a capture: host compute at 1.05 TFLOP/s
    (f,) = cpu_compute(_captured("cudaStreamIsCapturing", begin=False))
    assert f.evidence["tflops_s"] == pytest.approx(2 * 8 * 64**3 / 4000 / 1e3)
    # the same FLOPs in 40 ns claim 105 TFLOP/s: no CPU does that
    assert cpu_compute(_captured("cudaStreamIsCapturing", begin=False, bmm_ns=40)) == []


def test_findings_carry_the_kernel_layer():
    a = attribute(_gpu_bound_trace(), by="step")
    layers = {(f.layer, f.title.split(" ")[0]) for f in Analysis(a, Options(gpu=GPU)).findings}
    assert ("kernel", "the") in layers and ("kernel", "'aten::mm'") in layers
