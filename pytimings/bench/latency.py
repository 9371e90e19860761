"""Small-copy and event latency, with launch overhead reported apart from transfer time.

Three numbers per row: ``gpu_us``, the GPU time per operation with the stream held by a spin
kernel while a batch is enqueued (the transfer or event as the GPU sees it, no launch gaps);
``naive_us``, events around one operation on an idle stream (what a naive measurement reads:
launch processing included); ``launch_us``, the host time to enqueue one operation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from pytimings.bench.buffers import torch_arena
from pytimings.bench.report import BenchReport, Column, add_fits
from pytimings.bench.sizes import format_size
from pytimings.bench.system import require_cuda, system_header
from pytimings.bench.timing import GpuTimer, summarize

COLUMNS = [
    Column("path", "path"),
    Column("size_bytes", "size(B)"),
    Column("gpu_us", "gpu(µs)", ".3f"),
    Column("gpu_min_us", "min(µs)", ".3f"),
    Column("gpu_max_us", "max(µs)", ".3f"),
    Column("naive_us", "naive(µs)", ".3f"),
    Column("launch_us", "launch(µs)", ".3f"),
]


def _naive_us(torch: Any, op: Callable[[], None], samples: int) -> list[float]:
    times = []
    for k in range(samples + 1):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        op()
        end.record()
        end.synchronize()
        if k:
            times.append(start.elapsed_time(end) * 1e3)
    return times


def _row(
    torch: Any,
    timer: GpuTimer,
    path: str,
    size: int,
    op: Callable[[], None],
    batch: int,
    samples: int,
    warmup: int,
    naive_op: Callable[[], None] | None = None,
) -> tuple[dict[str, Any], int]:
    gpu, launch = [], []
    uncovered = 0
    for k in range(warmup + samples):
        bt = timer.time_batch(lambda _: op(), batch)  # the same operation, batch times
        if k >= warmup:
            gpu.append(bt.gpu_us / batch)
            launch.append(bt.host_enqueue_us / batch)
            uncovered += not bt.covered
    g = summarize(gpu)
    naive = summarize(_naive_us(torch, naive_op or op, samples))
    return {
        "path": path,
        "size_bytes": size,
        "gpu_us": g.median,
        "gpu_min_us": g.min,
        "gpu_max_us": g.max,
        "naive_us": naive.median,
        "launch_us": summarize(launch).median,
    }, uncovered


def latency_report(sizes: Sequence[int], batch: int, samples: int, warmup: int) -> BenchReport:
    torch = require_cuda("latency")
    header: dict[str, Any] = {
        "sizes": " ".join(format_size(s) for s in sizes),
        "samples": f"{samples} timed after {warmup} warm-up; median (min, max) of gpu_us",
        "batch": f"{batch} operations per spin-blocked batch",
        "gpu_us": "spin kernel holds the stream while the batch is enqueued; CUDA events "
        "around the batch / batch size: the GPU's time per operation",
        "naive_us": "CUDA events around one operation on an idle stream (includes launch)",
        "launch_us": "host time to enqueue one operation (launch overhead)",
        "placement": "cuda:0, pinned host buffers, one buffer per side (no rotation)",
        **system_header(devices=True),
    }
    report = BenchReport("latency", header, COLUMNS)
    timer = GpuTimer(torch, 0)
    uncovered = 0
    for path, src_dev, dst_dev in (
        ("h2d pinned", "cpu", "cuda:0"),
        ("d2h pinned", "cuda:0", "cpu"),
        ("d2d", "cuda:0", "cuda:0"),
    ):
        for n in sizes:
            src = torch_arena(torch, n, 0, src_dev, pinned=src_dev == "cpu").view(0)
            dst = torch_arena(torch, n, 0, dst_dev, pinned=dst_dev == "cpu").view(0)
            row, bad = _row(
                torch,
                timer,
                path,
                n,
                partial(dst.copy_, src, non_blocking=True),
                batch,
                samples,
                warmup,
            )
            report.rows.append(row)
            uncovered += bad
    add_fits(report, ["path"], y="gpu_us")

    events = [torch.cuda.Event(enable_timing=True) for _ in range(batch)]  # created up front
    turn = [0]

    def event() -> None:
        events[turn[0] % batch].record()
        turn[0] += 1

    def nothing() -> None:  # naive event row: two events back to back
        pass

    for path, op, naive in (
        ("event record", event, nothing),
        ("empty kernel", lambda: torch.cuda._sleep(0), None),
    ):
        row, bad = _row(torch, timer, path, 0, op, batch, samples, warmup, naive)
        report.rows.append(row)  # no size: no fit
        uncovered += bad
    if uncovered:
        report.notes.append(
            f"{uncovered} batch(es) ran without the spin kernel covering the "
            "enqueueing (host gaps may be included)"
        )
    return report
