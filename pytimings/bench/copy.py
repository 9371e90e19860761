"""Copy bandwidth: host memory, host<->device (pinned and pageable), device-local (copy engine
and an SM kernel) and peer matrices, measured the way nvbandwidth does (see timing.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytimings.bench.buffers import Arena, batch_size, host_arena, torch_arena
from pytimings.bench.report import BenchReport, Column, add_fits
from pytimings.bench.sizes import format_size
from pytimings.bench.system import system_header, torch_or_none
from pytimings.bench.timing import GpuTimer, summarize, time_host_batch
from pytimings.errors import install_hint

SPIN = "spin kernel + CUDA events around a batch"
NO_SPIN = "CUDA events around a batch, no spin (pageable copies block the host)"
HOST = "host monotonic clock around a batch"
REFERENCE = "plain torch copy_ with events around each copy, no spin, no rotation"

COLUMNS = [
    Column("path", "path"),
    Column("engine", "engine"),
    Column("size_bytes", "size(B)"),
    Column("time_us", "time(µs)", ".2f"),
    Column("min_us", "min(µs)", ".2f"),
    Column("max_us", "max(µs)", ".2f"),
    Column("gbps", "GB/s", ".2f"),
    Column("method", "method"),
]


@dataclass(frozen=True)
class CopyPath:
    """One row family: how to make source and destination arenas, and the copy call."""

    path: str
    engine: str
    method: str
    make: Callable[[int], tuple[Arena, Arena]]
    copy: Callable[[Any, Any], None]


def host_paths(torch: Any, rotate: int, pinned: bool) -> list[CopyPath]:
    paths = [
        CopyPath(
            "host numpy copyto (pageable)",
            "CPU",
            HOST,
            lambda n: (host_arena(n, rotate), host_arena(n, rotate)),
            lambda dst, src: np.copyto(dst, src),
        )
    ]
    if torch is not None:
        paths.append(
            CopyPath(
                "host torch copy_ (pageable)",
                "CPU",
                HOST,
                lambda n: (
                    torch_arena(torch, n, rotate, "cpu"),
                    torch_arena(torch, n, rotate, "cpu"),
                ),
                lambda dst, src: dst.copy_(src),
            )
        )
    if pinned:
        paths.append(
            CopyPath(
                "host torch copy_ (pinned)",
                "CPU",
                HOST,
                lambda n: (
                    torch_arena(torch, n, rotate, "cpu", True),
                    torch_arena(torch, n, rotate, "cpu", True),
                ),
                lambda dst, src: dst.copy_(src),
            )
        )
    return paths


def gpu_paths(torch: Any, rotate: int) -> list[CopyPath]:
    def arenas(
        src: str, dst: str, src_pinned: bool = False, dst_pinned: bool = False
    ) -> Callable[[int], tuple[Arena, Arena]]:
        return lambda n: (
            torch_arena(torch, n, rotate, src, src_pinned),
            torch_arena(torch, n, rotate, dst, dst_pinned),
        )

    def ce(dst: Any, src: Any) -> None:
        dst.copy_(src, non_blocking=True)

    def sm(dst: Any, src: Any) -> None:  # an elementwise kernel: every byte read and written
        torch.add(src.view(torch.int32), 0, out=dst.view(torch.int32))

    return [
        CopyPath("h2d pinned", "CE", SPIN, arenas("cpu", "cuda:0", src_pinned=True), ce),
        CopyPath("h2d pageable", "CE", NO_SPIN, arenas("cpu", "cuda:0"), ce),
        CopyPath("d2h pinned", "CE", SPIN, arenas("cuda:0", "cpu", dst_pinned=True), ce),
        CopyPath("d2h pageable", "CE", NO_SPIN, arenas("cuda:0", "cpu"), ce),
        CopyPath("d2d", "CE", SPIN, arenas("cuda:0", "cuda:0"), ce),
        CopyPath("d2d", "SM", SPIN, arenas("cuda:0", "cuda:0"), sm),
    ]


def measure_path(
    p: CopyPath, nbytes: int, samples: int, warmup: int, timer: GpuTimer | None
) -> tuple[dict[str, Any], int]:
    """One row (median, min, max over samples) and how many samples the spin did not cover."""
    src, dst = p.make(nbytes)
    batch = batch_size(nbytes)
    counter = [0]

    def one(_: int) -> None:
        k = counter[0]
        counter[0] += 1
        p.copy(dst.view(k), src.view(k))

    per_op: list[float] = []
    uncovered = 0
    for k in range(warmup + samples):
        if timer is None:
            us = time_host_batch(one, batch)
            covered = True
        else:
            bt = timer.time_batch(one, batch, spin=p.method == SPIN)
            us, covered = bt.gpu_us, bt.covered or p.method != SPIN
        if k >= warmup:
            per_op.append(us / batch)
            uncovered += not covered
    s = summarize(per_op)
    return {
        "path": p.path,
        "engine": p.engine,
        "size_bytes": nbytes,
        "time_us": s.median,
        "min_us": s.min,
        "max_us": s.max,
        "gbps": nbytes / (s.median * 1e3),
        "method": p.method,
    }, uncovered


def reference_row(torch: Any, p: CopyPath, nbytes: int, samples: int) -> dict[str, Any]:
    """The same copy as a user would time it: events around one copy_, no spin, one buffer."""
    src, dst = p.make(nbytes)
    a, b = src.view(0), dst.view(0)
    times = []
    for k in range(samples + 1):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        b.copy_(a, non_blocking=True)
        end.record()
        end.synchronize()
        if k:
            times.append(start.elapsed_time(end) * 1e3)
    s = summarize(times)
    return {
        "path": p.path,
        "engine": "CE reference",
        "size_bytes": nbytes,
        "time_us": s.median,
        "min_us": s.min,
        "max_us": s.max,
        "gbps": nbytes / (s.median * 1e3),
        "method": REFERENCE,
    }


def copy_report(
    sizes: Sequence[int], rotate: int, samples: int, warmup: int, peer_size: int | None
) -> tuple[BenchReport, str | None]:
    """Every row this machine can run, and why GPU rows did not run (None if they did)."""
    torch = torch_or_none()
    gpu = torch is not None and torch.cuda.is_available()
    header: dict[str, Any] = {
        "sizes": " ".join(format_size(s) for s in sizes),
        "samples": f"{samples} timed after {warmup} warm-up, per row: median (min, max)",
        "batch": "copies per sample: 256 MiB of traffic, clamped to 2..128",
        "rotation": f"buffers rotate through >= {format_size(rotate)} per side",
        "method": f"GPU: {SPIN} (nvbandwidth's method); pageable: {NO_SPIN}; host: {HOST}",
        "bandwidth": "GB/s = bytes copied / time, 1 GB = 1e9 bytes (device-local read+write "
        "traffic is twice this)",
        **system_header(devices=gpu),
    }
    report = BenchReport("copy", header, COLUMNS)
    uncovered = 0
    for p in host_paths(torch, rotate, pinned=gpu):
        for n in sizes:
            row, _ = measure_path(p, n, samples, warmup, None)
            report.rows.append(row)
    missing = None
    references: list[dict[str, Any]] = []
    if gpu:
        uncovered, references = _gpu_rows(torch, report, sizes, rotate, samples, warmup, peer_size)
    else:
        why = (
            "none is visible"
            if torch is not None
            else f"torch is not installed ({install_hint('torch')})"
        )
        missing = (
            "copy: host rows ran; the GPU rows (h2d, d2h, d2d, peer) need a CUDA GPU and "
            f"torch with CUDA; {why}"
        )
        report.header["gpu"] = "none visible: GPU rows not run"
    if uncovered:
        report.notes.append(
            f"{uncovered} sample(s) ran without the spin kernel covering the "
            "enqueueing (host gaps may be included)"
        )
    add_fits(report, ["path", "engine"])
    report.rows += references  # one size each: no fit
    return report, missing


def _gpu_rows(
    torch: Any,
    report: BenchReport,
    sizes: Sequence[int],
    rotate: int,
    samples: int,
    warmup: int,
    peer_size: int | None,
) -> tuple[int, list[dict[str, Any]]]:
    from pytimings.bench.peer import CudaPeerDevices, peer_benchmark

    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0))
    report.header["l2_bytes"] = l2
    if rotate < 2 * l2:
        report.notes.append(
            f"--rotate {rotate} is under twice the L2 ({l2} bytes): small "
            "device-side copies may be served from L2"
        )
    report.header["placement"] = "host and device-local rows on cuda:0"
    timer = GpuTimer(torch, 0)
    uncovered = 0
    paths = gpu_paths(torch, rotate)
    for p in paths:
        for n in sizes:
            if p.engine == "SM" and n % 4:
                report.notes.append(f"SM copy skipped at {n} bytes (needs a multiple of 4)")
                continue
            row, bad = measure_path(p, n, samples, warmup, timer)
            uncovered += bad
            report.rows.append(row)
    largest = max(sizes)
    references = []
    for p in paths:
        if p.engine == "CE" and p.method == SPIN:
            ref = reference_row(torch, p, largest, samples)
            ours = next(
                r
                for r in report.rows
                if r["path"] == p.path and r["engine"] == "CE" and r["size_bytes"] == largest
            )
            references.append(ref)
            report.notes.append(
                f"{p.path} at {format_size(largest)}: {ours['gbps']:.2f} GB/s "
                f"= {ours['gbps'] / ref['gbps']:.1%} of same-run plain torch "
                f"copy_ ({ref['gbps']:.2f} GB/s)"
            )
    peer = peer_benchmark(
        CudaPeerDevices(torch, rotate), peer_size or largest, sizes, samples, warmup
    )
    report.matrices += peer.matrices
    report.rows += peer.rows
    report.notes += peer.notes
    report.header["peer"] = (
        peer.notes[0]
        if not peer.matrices
        else "cudaMemcpyPeerAsync, every ordered pair; sweep on 0->1"
    )
    return uncovered, references
