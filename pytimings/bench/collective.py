"""Collective benchmarks measured the way nccl-tests does, on torch.distributed.

Sizes follow nccl-tests: ``size`` is the bytes of the largest buffer of the operation
(all_gather: the gathered output; reduce_scatter: the input; all_to_all: each rank's whole
buffer) and ``count`` the elements nccl-tests prints (per rank for all_gather and
reduce_scatter, per peer for all_to_all). ``algbw = size / time`` and
``busbw = algbw * factor(n)`` with nccl-tests' factors, so numbers compare with its logs.

Timing is nccl-tests': warm-up, barrier, ``iters`` operations back to back, host clock until
the device is synchronised, divided by ``iters``; the reported time is the mean over ranks.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytimings._core import now_ns
from pytimings.bench.report import BenchReport, Column, add_fits
from pytimings.errors import UsageError
from pytimings.record import nccl
from pytimings.record.nccl import algbw_gbps


@dataclass(frozen=True)
class OpSpec:
    collective: str  # nccl-tests' operation whose size and bus factor conventions apply
    in_place: bool  # torch.distributed offers an in-place form
    out_of_place: bool  # ... and an out-of-place one

    def bus_factor(self, world_size: int) -> float:
        return nccl.bus_factor(self.collective, world_size)

    @property
    def per_rank_split(self) -> bool:
        return nccl.per_rank_split(self.collective)


OPS: dict[str, OpSpec] = {
    # torch.distributed.all_reduce and broadcast only work in place
    "all_reduce": OpSpec("all_reduce", True, False),
    "all_gather": OpSpec("all_gather", True, True),
    "reduce_scatter": OpSpec("reduce_scatter", True, True),
    # all_to_all_single needs distinct input and output tensors
    "all_to_all": OpSpec("all_to_all", False, True),
    "broadcast": OpSpec("broadcast", True, False),
    # sendrecv: every rank sends to rank+1 and receives from rank-1 at once
    "sendrecv": OpSpec("sendrecv", False, True),
}

DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8")


def op_spec(op: str) -> OpSpec:
    spec = OPS.get(op)
    if spec is None:
        raise UsageError(f"--op {op!r}: unknown operation; choose from {', '.join(OPS)}")
    return spec


def bus_factor(op: str, world_size: int) -> float:
    """nccl-tests' busbw/algbw factor for ``op`` on ``world_size`` ranks."""
    return op_spec(op).bus_factor(world_size)


def message_shape(op: str, size_bytes: int, world_size: int, elsize: int) -> tuple[int, int]:
    """(effective size in bytes, count as nccl-tests prints it), rounded down to whole
    elements (per rank where the op splits its buffer); count 0 means too small to run."""
    if op_spec(op).per_rank_split:
        count = size_bytes // (world_size * elsize)
        return count * world_size * elsize, count
    count = size_bytes // elsize
    return count * elsize, count


@dataclass
class SweepConfig:
    ops: tuple[str, ...]
    sizes: list[int]
    dtype: str
    warmup: int
    iters: int
    placements: tuple[bool, ...]  # in_place values to run, in order
    quiet: bool = False  # no progress lines on rank 0's stderr

    def validate(self) -> None:
        if not self.ops:
            raise UsageError("--op: name at least one operation")
        if self.dtype not in DTYPES:
            raise UsageError(f"--dtype {self.dtype!r}: choose from {', '.join(DTYPES)}")
        if self.iters < 1:
            raise UsageError(f"--iters {self.iters}: need at least one timed iteration")
        if self.warmup < 0:
            raise UsageError(f"--warmup {self.warmup}: must be 0 or more")
        for op in self.ops:
            if not self.runs(op):
                wanted = "in-place" if self.placements == (True,) else "out-of-place"
                raise UsageError(f"--op {op}: torch.distributed has no {wanted} form of it")

    def runs(self, op: str) -> list[bool]:
        """The placements of ``op`` that run: those asked for that torch.distributed offers."""
        spec = op_spec(op)
        return [p for p in self.placements if (spec.in_place if p else spec.out_of_place)]


def world_from_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) as torchrun sets them; errors if not launched so."""
    size = os.environ.get("WORLD_SIZE")
    if size is None:
        raise UsageError(
            "collective: not launched by torchrun (WORLD_SIZE is unset); run "
            "`torchrun --nproc-per-node N $(which pytimings) bench collective ...` with N >= 2"
        )
    if not size.isdigit() or int(size) < 2:
        raise UsageError(
            f"collective: world size {size}: a collective needs at least 2 processes "
            "(torchrun --nproc-per-node 2 or more)"
        )
    return int(os.environ["RANK"]), int(size), int(os.environ.get("LOCAL_RANK", "0"))


class _Buffers:
    """Tensors for one op, size and placement; ``call`` runs the op once, ``fill`` writes a
    known pattern and ``check`` compares the output with what the op must produce from it."""

    def __init__(
        self,
        torch: Any,
        dist: Any,
        op: str,
        count: int,
        world: int,
        rank: int,
        in_place: bool,
        dtype: Any,
        device: Any,
    ) -> None:
        def buf(n: int) -> Any:
            return torch.zeros(n, dtype=dtype, device=device)

        def chunks(values: Any) -> Any:  # one value per rank-sized chunk, small enough for int8
            return (values % 61).repeat_interleave(count).to(dtype=dtype, device=device)

        ranks = torch.arange(world, dtype=torch.int64)
        self.call: Callable[[], None]
        self._fill: list[tuple[Any, Any]]  # (tensor, pattern) in order
        if op == "all_reduce":
            t = buf(count)
            self.call = lambda: dist.all_reduce(t)
            self._fill, self.out, self.expected = [(t, 1)], t, world
        elif op == "broadcast":
            t = buf(count)
            self.call = lambda: dist.broadcast(t, 0)
            self._fill, self.out, self.expected = [(t, int(rank == 0))], t, 1
        elif op == "all_gather":
            gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
            out = buf(count * world)
            inp = out.narrow(0, rank * count, count) if in_place else buf(count)
            self.call = lambda: gather(out, inp)
            self._fill = [(out, 0), (inp, rank % 61 + 1)]
            self.out, self.expected = out, chunks(ranks) + 1
        elif op == "reduce_scatter":
            scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
            inp = buf(count * world)
            out = inp.narrow(0, rank * count, count) if in_place else buf(count)
            self.call = lambda: scatter(out, inp)
            self._fill, self.out, self.expected = [(inp, 1)], out, world
        elif op == "all_to_all":
            inp, out = buf(count * world), buf(count * world)
            self.call = lambda: dist.all_to_all_single(out, inp)
            self._fill = [(inp, chunks(rank * world + ranks))]
            self.out, self.expected = out, chunks(ranks * world + rank)
        elif op == "sendrecv":
            send, recv = buf(count), buf(count)

            def sendrecv() -> None:
                ops = [
                    dist.P2POp(dist.isend, send, (rank + 1) % world),
                    dist.P2POp(dist.irecv, recv, (rank - 1) % world),
                ]
                for work in dist.batch_isend_irecv(ops):
                    work.wait()

            self.call = sendrecv
            self._fill = [(send, rank % 61 + 1)]
            self.out, self.expected = recv, (rank - 1) % world % 61 + 1
        else:  # pragma: no cover - op_spec() rejected it already
            raise UsageError(f"--op {op!r}: unknown operation")

    def fill(self) -> None:
        for tensor, pattern in self._fill:
            if isinstance(pattern, int):
                tensor.fill_(pattern)
            else:
                tensor.copy_(pattern)

    def check(self, torch: Any) -> bool:
        expected = torch.as_tensor(self.expected, dtype=torch.float64).to(self.out.device)
        return bool(
            torch.allclose(
                self.out.double(), expected.expand_as(self.out.double()), rtol=1e-2, atol=0
            )
        )


# buffers of one message's size a rank holds at once (all_to_all: input, output and the
# expected result it is checked against), the most of any op
BUFFERS_PER_MESSAGE = 3


def check_memory(cfg: SweepConfig, torch: Any, device: Any, world: int) -> None:
    """Refuse, before any rank allocates, a sweep whose largest message does not fit: on
    the CPU (gloo) the local ranks share the host's memory; on a GPU each rank has its
    device. ``-e 1G`` on gloo used to be killed for memory after minutes of silence."""
    from pytimings.bench.sizes import format_size

    def gib(n: float) -> str:
        return f"{n / 2**30:.1f} GiB"

    if not cfg.sizes:
        return
    largest = max(cfg.sizes)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        ranks, where = 1, f"free on cuda:{device.index}"
    else:
        free = _host_available()
        if free is None:
            return  # the system does not say: nothing to check against
        ranks = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        where = f"available on this host for its {ranks} local ranks"
    per_size = BUFFERS_PER_MESSAGE * ranks
    if per_size * largest > 0.9 * free:
        fits = [s for s in cfg.sizes if per_size * s <= 0.9 * free]
        most = f"the largest size that fits is {format_size(max(fits))}" if fits else "none fits"
        raise UsageError(
            f"-e/--maxbytes {format_size(largest)}: needs about {gib(per_size * largest)} "
            f"({ranks} rank(s) x {BUFFERS_PER_MESSAGE} buffers of the message), "
            f"{gib(free)} {where}; {most}"
        )


def _host_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def run_sweep(
    cfg: SweepConfig, torch: Any, dist: Any, device: Any
) -> tuple[list[dict[str, Any]], list[str]]:
    """Time every op, size and placement; every rank returns the same rows, plus notes."""
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for op in cfg.ops:
        skipped = [p for p in cfg.placements if p not in cfg.runs(op)]
        if skipped:
            notes.append(
                f"{op}: torch.distributed has no "
                f"{'in-place' if skipped[0] else 'out-of-place'} form; not run"
            )
        _sweep_op(op, cfg, torch, dist, device, rows, notes)
    return rows, notes


def _sweep_op(
    op: str,
    cfg: SweepConfig,
    torch: Any,
    dist: Any,
    device: Any,
    rows: list[dict[str, Any]],
    notes: list[str],
) -> None:
    spec = op_spec(op)
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, cfg.dtype)
    elsize = torch.empty((), dtype=dtype).element_size()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    shapes = [(s, *message_shape(op, s, world, elsize)) for s in cfg.sizes]
    unit = "rank" if spec.per_rank_split else "message"
    too_small = [s for s, _, count in shapes if count == 0]
    if too_small:
        notes.append(
            f"{op}: skipped {len(too_small)} size(s) below one {cfg.dtype} element "
            f"per {unit}: {too_small}"
        )
    rounded = [s for s, size, count in shapes if count and size != s]
    if rounded:
        notes.append(
            f"{op}: {len(rounded)} size(s) rounded down to whole elements per {unit} "
            f"as nccl-tests does (size_bytes is what ran): {rounded}"
        )
    seen: set[int] = set()
    for _, size, count in shapes:
        if count == 0 or size in seen:
            continue
        seen.add(size)
        for in_place in cfg.runs(op):
            bufs = _Buffers(torch, dist, op, count, world, rank, in_place, dtype, device)
            for _ in range(cfg.warmup):
                bufs.call()
            sync()
            dist.barrier()
            t0 = now_ns()
            for _ in range(cfg.iters):
                bufs.call()
            sync()
            mine_us = (now_ns() - t0) / 1e3 / cfg.iters
            stats = torch.tensor([mine_us], dtype=torch.float64, device=device)
            slowest = stats.clone()
            dist.all_reduce(stats)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            time_us = float(stats.item()) / world
            bufs.fill()  # one untimed run checked against the expected result
            bufs.call()
            sync()
            valid = torch.tensor([int(bufs.check(torch))], dtype=torch.int32, device=device)
            dist.all_reduce(valid, op=dist.ReduceOp.MIN)
            algbw = algbw_gbps(size, time_us)
            if rank == 0 and not cfg.quiet:  # progress, on a terminal or not
                print(
                    f"collective {op} {size} B {'in' if in_place else 'out-of'}-place: "
                    f"{time_us:.2f} us, busbw {algbw * spec.bus_factor(world):.3f} GB/s",
                    file=sys.stderr,
                    flush=True,
                )
            rows.append(
                {
                    "op": op,
                    "size_bytes": size,
                    "count": count,
                    "dtype": cfg.dtype,
                    "in_place": in_place,
                    "time_us": time_us,
                    "max_rank_time_us": float(slowest.item()),
                    "algbw_gbps": algbw,
                    "busbw_gbps": algbw * spec.bus_factor(world),
                    "valid": bool(valid.item()),
                }
            )


def _describe_sizes(sizes: list[int]) -> str:
    from pytimings.bench.sizes import format_size

    return f"{len(sizes)} requested: " + " ".join(format_size(s) for s in sizes)


def collective_report(
    cfg: SweepConfig, backend: str, record_env: list[str] | None = None
) -> BenchReport | None:
    """Initialise the process group, run the sweep, tear down; the report on rank 0 only."""
    import platform

    import torch
    import torch.distributed as dist

    from pytimings.bench.system import require_cuda, system_header

    cfg.validate()
    rank, world, local_rank = world_from_env()
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        require_cuda("collective --backend nccl")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        where = f"{platform.node()} cuda:{local_rank} {torch.cuda.get_device_name(local_rank)}"
    elif backend == "gloo":
        device = torch.device("cpu")
        where = f"{platform.node()} cpu"
    else:
        raise UsageError(f"--backend {backend!r}: choose auto, nccl or gloo")
    check_memory(cfg, torch, device, world)
    if backend == "nccl":  # bound to its device up front: barriers use it, no guessing
        dist.init_process_group(backend=backend, device_id=device)
    else:
        dist.init_process_group(backend=backend)
    try:
        rows, notes = run_sweep(cfg, torch, dist, device)
        ranks: list[Any] = [None] * world
        dist.all_gather_object(ranks, where)
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    header: dict[str, Any] = {
        "ops": list(cfg.ops),
        "world_size": world,
        "backend": backend,
        "dtype": cfg.dtype,
        "sizes": _describe_sizes(cfg.sizes),
        "warmup_iters": cfg.warmup,
        "iters": cfg.iters,
        "placements": ["in-place" if p else "out-of-place" for p in cfg.placements],
        "method": (
            "nccl-tests: warm-up, barrier, iters ops back to back timed by the host clock "
            "until the device is synchronised, / iters; time = mean over ranks "
            "(max_rank_time_us = slowest rank); algbw = size/time; busbw = algbw * "
            f"factor for n={world}: "
            + ", ".join(f"{op} {OPS[op].bus_factor(world):.4g}" for op in cfg.ops)
        ),
        "validation": "after timing, one run per size and placement on a known pattern, "
        "checked on every rank (valid = all ranks got the expected result)",
        "ranks": ranks,
        **system_header(devices=backend == "nccl"),
    }
    if record_env:
        header["env"] = {k: os.environ.get(k) for k in record_env}
    report = BenchReport("collective", header, COLUMNS, rows, notes=notes)
    add_fits(report, ["op", "in_place"])
    return report


COLUMNS = [
    Column("op", "op"),
    Column("size_bytes", "size(B)"),
    Column("count", "count"),
    Column("dtype", "type"),
    Column("in_place", "in-place"),
    Column("time_us", "time(µs)", ".2f"),
    Column("max_rank_time_us", "slowest(µs)", ".2f"),
    Column("algbw_gbps", "algbw(GB/s)", ".3f"),
    Column("busbw_gbps", "busbw(GB/s)", ".3f"),
    Column("valid", "valid"),
]
