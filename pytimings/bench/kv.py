"""KV-cache transfer patterns: moving N paged blocks (scattered in a block pool, as vLLM-style
engines keep them) against one contiguous copy of the same bytes, device-local, to a peer
GPU, and offloaded to / reloaded from pinned host memory.

A "block" here is one layer's K (or V) for ``block_size`` tokens: ``block_size * kv_heads *
head_dim * itemsize`` bytes; moving N blocks of a model moves ``2 * layers * N`` of them.
Patterns: one contiguous copy (the floor), one copy per block (``cudaMemcpyAsync`` each, as
engines' swap_blocks do), and gather/scatter kernels (``index_select``/``index_copy_``) with
one bulk copy. Per-block overhead = (pattern time - contiguous time) / blocks moved.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from pytimings.bench.report import BenchReport, Column, add_fits
from pytimings.bench.system import require_cuda, system_header
from pytimings.bench.timing import GpuTimer, summarize
from pytimings.errors import UsageError

DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2", "int8", "uint8")
SPIN_MAX_OPS = 512  # more launches than this cannot all wait behind one spin kernel
SEED = 0

COLUMNS = [
    Column("path", "path"),
    Column("pattern", "pattern"),
    Column("blocks", "blocks"),
    Column("size_bytes", "size(B)"),
    Column("time_us", "time(µs)", ".1f"),
    Column("min_us", "min(µs)", ".1f"),
    Column("max_us", "max(µs)", ".1f"),
    Column("gbps", "GB/s", ".2f"),
    Column("per_block_overhead_us", "per-block(µs)", ".3f"),
    Column("method", "method"),
]


@dataclass(frozen=True)
class KVShape:
    layers: int
    kv_heads: int
    head_dim: int
    dtype: str
    block_size: int

    def validate(self) -> None:
        for name in ("layers", "kv_heads", "head_dim", "block_size"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be >= 1")
        if self.dtype not in DTYPES:
            raise UsageError(f"--dtype {self.dtype!r}: choose from {', '.join(DTYPES)}")

    def block_elems(self) -> int:
        return self.block_size * self.kv_heads * self.head_dim


Op = Callable[[], None]


def _patterns(
    torch: Any, cache: Any, ids: Any, packed: Any, dst: Any, stage: Any, direction: str
) -> dict[str, list[Op]]:
    """The operations of each pattern for one block count. ``cache`` [L, 2, pool, E] holds
    the paged blocks; ``dst`` [L, 2, n, E] is where they go (or come from, for reload);
    ``packed`` and ``stage`` are contiguous buffers on the cache's device."""
    planes = [(lay, kv) for lay in range(cache.shape[0]) for kv in range(2)]
    blocks = list(enumerate(ids.tolist()))
    flat_dst = dst.reshape(-1)
    flat_packed = packed.reshape(-1)[: dst.numel()]
    staged = stage.reshape(-1)[: dst.numel()].view(dst.shape)
    if direction == "reload":  # host -> device, blocks scattered into the pool
        return {
            "contiguous copy": [partial(flat_packed.copy_, flat_dst, non_blocking=True)],
            "per-block copies": [
                partial(cache[lay, kv, b].copy_, dst[lay, kv, i], non_blocking=True)
                for lay, kv in planes
                for i, b in blocks
            ],
            "copy + scatter kernel": [
                partial(staged.reshape(-1).copy_, flat_dst, non_blocking=True),
                *[
                    partial(cache[lay, kv].index_copy_, 0, ids, staged[lay, kv])
                    for lay, kv in planes
                ],
            ],
        }
    patterns: dict[str, list[Op]] = {
        "contiguous copy": [partial(flat_dst.copy_, flat_packed, non_blocking=True)],
        "per-block copies": [
            partial(dst[lay, kv, i].copy_, cache[lay, kv, b], non_blocking=True)
            for lay, kv in planes
            for i, b in blocks
        ],
    }
    if direction == "local":
        patterns["gather kernel"] = [
            partial(torch.index_select, cache[lay, kv], 0, ids, out=dst[lay, kv])
            for lay, kv in planes
        ]
    else:  # peer or offload: gather on the source device, then one bulk copy
        patterns["gather kernel + copy"] = [
            *[
                partial(torch.index_select, cache[lay, kv], 0, ids, out=staged[lay, kv])
                for lay, kv in planes
            ],
            partial(flat_dst.copy_, staged.reshape(-1), non_blocking=True),
        ]
    return patterns


def _runner(ops: list[Op]) -> Callable[[int], None]:
    return lambda i: ops[i]()


def kv_report(
    shape: KVShape, block_counts: Sequence[int], samples: int, warmup: int
) -> BenchReport:
    shape.validate()
    torch = require_cuda("kv")
    dtype = getattr(torch, shape.dtype)
    itemsize = torch.empty((), dtype=dtype).element_size()
    block_bytes = shape.block_elems() * itemsize
    most = max(block_counts)
    pool = 2 * most
    header: dict[str, Any] = {
        "shape": f"layers={shape.layers} kv_heads={shape.kv_heads} head_dim={shape.head_dim} "
        f"dtype={shape.dtype} block_size={shape.block_size}",
        "block": f"one layer's K or V of one block = {block_bytes} bytes; N blocks move "
        f"2*layers*N of them",
        "blocks": " ".join(str(n) for n in block_counts),
        "pool": f"{pool} blocks per layer and K/V on cuda:0; the N moved are a random "
        f"permutation (seed {SEED}) of the pool",
        "samples": f"{samples} timed after {warmup} warm-up; median (min, max)",
        "method": f"CUDA events around each pattern; spin kernel holds the stream when the "
        f"pattern has <= {SPIN_MAX_OPS} operations (else launches are included)",
        **system_header(devices=True),
    }
    report = BenchReport("kv", header, COLUMNS)

    def alloc(device: str, blocks: int, pinned: bool = False) -> Any:
        return torch.empty(
            (shape.layers, 2, blocks, shape.block_elems()),
            dtype=dtype,
            device=device,
            pin_memory=pinned,
        )

    cache = alloc("cuda:0", pool)
    cache.view(torch.uint8).fill_(1)
    packed = alloc("cuda:0", most)
    stage = alloc("cuda:0", most)
    paths: list[tuple[str, str, Any]] = [("device-local", "local", alloc("cuda:0", most))]
    if torch.cuda.device_count() > 1:
        paths.append(("peer cuda:0->cuda:1", "peer", alloc("cuda:1", most)))
    else:
        report.notes.append("peer path needs two GPUs; found 1")
    host = alloc("cpu", most, pinned=True)
    paths += [
        ("offload to pinned host", "offload", host),
        ("reload from pinned host", "reload", host),
    ]
    gen = torch.Generator().manual_seed(SEED)
    timer = GpuTimer(torch, 0)
    uncovered = 0
    for n in block_counts:
        ids = torch.randperm(pool, generator=gen)[:n].to(cache.device)
        moved = 2 * shape.layers * n
        for label, direction, full_dst in paths:
            dst = full_dst.reshape(-1)[: moved * shape.block_elems()].view(
                shape.layers, 2, n, shape.block_elems()
            )
            base_us: float | None = None
            for pattern, ops in _patterns(torch, cache, ids, packed, dst, stage, direction).items():
                spin = len(ops) <= SPIN_MAX_OPS
                times = []
                for k in range(warmup + samples):
                    bt = timer.time_batch(_runner(ops), len(ops), spin=spin)
                    if k >= warmup:
                        times.append(bt.gpu_us)
                        uncovered += spin and not bt.covered
                s = summarize(times)
                if base_us is None:
                    base_us = s.median
                nbytes = moved * block_bytes
                report.rows.append(
                    {
                        "path": label,
                        "pattern": pattern,
                        "blocks": n,
                        "size_bytes": nbytes,
                        "time_us": s.median,
                        "min_us": s.min,
                        "max_us": s.max,
                        "gbps": nbytes / (s.median * 1e3),
                        "per_block_overhead_us": None
                        if pattern == "contiguous copy"
                        else (s.median - base_us) / moved,
                        "method": "spin + events" if spin else "events, launches included",
                    }
                )
    if uncovered:
        report.notes.append(
            f"{uncovered} sample(s) ran without the spin kernel covering the "
            "enqueueing (host gaps may be included)"
        )
    report.notes.append(
        "per-block copies are enqueued from Python (a few us each on the "
        "host); engines that loop in C++ launch faster"
    )
    add_fits(report, ["path", "pattern"])
    return report
