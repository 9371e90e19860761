"""Where an op's achieved rate sits under the roofline of its GPU.

Achieved TFLOP/s and TB/s are the per-call FLOPs and bytes over the mean kernel time. The
arithmetic intensity I = FLOPs / byte places the op: at or above the ridge point
peak FLOP/s ÷ peak B/s it is ``compute``-bound (attainable = peak FLOP/s), below it
``memory``-bound (attainable = I·peak B/s). The fraction is achieved FLOP/s over attainable,
which for a memory-bound op equals achieved TB/s over peak TB/s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pytimings.analysis.ops.gpus import GpuSpec


@dataclass(frozen=True)
class Roofline:
    """One op's place under the roofline (None where the inputs do not say)."""

    tflops_s: float | None
    tb_s: float | None
    intensity: float | None
    bound: str | None
    fraction: float | None


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x) and x >= 0


def roofline(
    gflops: float | None,
    nbytes: float | None,
    mean_kernel_ns: float,
    dtype: str | None,
    gpu: GpuSpec | None,
) -> Roofline:
    """Achieved rates, intensity, bound and fraction of the roofline for one op and shape.

    Rates need a positive kernel time; intensity needs FLOPs and a positive byte count;
    bound and fraction need those and the GPU's peak for ``dtype`` (an op of no FLOPs
    only the GPU's bandwidth).
    """
    timed = math.isfinite(mean_kernel_ns) and mean_kernel_ns > 0
    has_flops, has_bytes = _finite(gflops), _finite(nbytes)
    tflops_s = gflops * 1e6 / mean_kernel_ns if timed and has_flops and gflops is not None else None
    tb_s = nbytes / mean_kernel_ns / 1e3 if timed and has_bytes and nbytes is not None else None
    intensity = None
    if has_flops and has_bytes and gflops is not None and nbytes is not None and nbytes > 0:
        intensity = gflops * 1e9 / nbytes
    if intensity is None or gpu is None or tflops_s is None or tb_s is None:
        return Roofline(tflops_s, tb_s, intensity, None, None)
    # memory-bound, the fraction is achieved TB/s over peak TB/s: the same as achieved
    # FLOP/s over I x peak B/s, and defined for an op that moves bytes and computes nothing
    # (a copy, a fill: I = 0, memory-bound whatever its dtype's compute peak)
    memory = Roofline(tflops_s, tb_s, intensity, "memory", tb_s / gpu.peak_tb_s)
    if intensity == 0:
        return memory
    peak = gpu.peak_tflops.get(dtype) if dtype is not None else None
    if peak is None:
        return Roofline(tflops_s, tb_s, intensity, None, None)
    ridge = peak / gpu.peak_tb_s  # FLOPs per byte where the two roofs meet
    if intensity >= ridge:
        return Roofline(tflops_s, tb_s, intensity, "compute", tflops_s / peak)
    return memory
