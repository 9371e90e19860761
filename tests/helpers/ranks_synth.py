"""Synthetic per-rank pytimings recordings of a data-parallel decode loop, for many-rank
tests and benches/bench_many_ranks.py.

Each step on each rank: a ``decode_step`` region; ``kernels`` compute regions back to back
on one stream (durations random per rank and step, rank ``straggler`` 30% slower); then an
``allreduce`` region (kind ``comm``) on a second stream that starts when the rank's compute
ends and ends when the last rank has arrived plus a transfer time, the same instant on every
rank. Each rank's clock is offset by ``rank * 1 ms + 12345 ns``. Randomness is shared
(``seed``), so the files of one set agree with each other.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pytimings.model.recording import NO_TIME, RECORD_SCHEMA, RecordFlag, Recording
from pytimings.record import storage

STRINGS = ["", "decode_step", "gemm", "attn", "allreduce", "compute", "comm", "host"]
STREAM_COMPUTE, STREAM_COMM = 0x7F00_1000, 0x7F00_2000


def rank_recording(
    rank: int, n_ranks: int, ops: int, kernels: int = 8, seed: int = 7, straggler: int = 3
) -> Recording:
    steps = max(1, ops // (kernels + 1))
    rng = np.random.default_rng(seed)
    dur = rng.integers(10_000, 40_000, size=(steps, n_ranks, kernels), dtype=np.int64)
    dur[:, straggler % n_ranks, :] = dur[:, straggler % n_ranks, :] * 13 // 10
    transfer = rng.integers(20_000, 30_000, size=steps, dtype=np.int64)
    step_ns = 5_000 + kernels * 60_000 + 60_000
    t0 = np.arange(steps, dtype=np.int64) * step_ns
    gpu_first = t0 + 5_000
    compute_end = gpu_first[:, None] + dur.sum(axis=2)  # [steps, ranks]
    comm_end = compute_end.max(axis=1) + transfer
    d = dur[:, rank, :]
    k_gpu_start = gpu_first[:, None] + np.cumsum(d, axis=1) - d
    k_gpu_end = k_gpu_start + d
    k_host = t0[:, None] + 3_000 * np.arange(kernels)
    c_host = t0 + 3_000 * kernels

    rows = kernels + 2  # decode_step, kernels, allreduce
    n = steps * rows

    def grid(step_col: np.ndarray, kernel_cols: np.ndarray, comm_col: np.ndarray) -> np.ndarray:
        out = np.empty((steps, rows), dtype=np.int64)
        out[:, 0], out[:, 1:-1], out[:, -1] = step_col, kernel_cols, comm_col
        return out.reshape(n)

    offset = rank * 1_000_000 + 12_345
    kname = np.where(np.arange(kernels) % 2 == 0, STRINGS.index("gemm"), STRINGS.index("attn"))
    timed = RecordFlag.GPU_TIMED | RecordFlag.GPU_RESOLVED | RecordFlag.HAS_STREAM
    cols = {
        "name": grid(STRINGS.index("decode_step"), kname, STRINGS.index("allreduce")),
        "kind": grid(STRINGS.index("host"), STRINGS.index("compute"), STRINGS.index("comm")),
        "thread": np.zeros(n),
        "depth": grid(0, 1, 1),
        "flags": grid(0, timed, timed),
        "start_ns": grid(t0, k_host, c_host) + offset,
        "end_ns": grid(c_host + 2_000, k_host + 2_000, c_host + 2_000) + offset,
        "gpu_start_ns": grid(NO_TIME, k_gpu_start + offset, compute_end[:, rank] + offset),
        "gpu_end_ns": grid(NO_TIME, k_gpu_end + offset, comm_end + offset),
        "stream": grid(0, STREAM_COMPUTE, STREAM_COMM),
        "nbytes": grid(-1, -1, 1 << 20),
        "payload": np.zeros(n),
    }
    return Recording(
        records={
            c: np.asarray(v).astype(dt)
            for c, (v, dt) in ((c, (cols[c], RECORD_SCHEMA[c])) for c in RECORD_SCHEMA)
        },
        strings=list(STRINGS),
        threads=[{"tid": 5000 + rank, "name": "MainThread"}],
        meta={"pid": 1000 + rank, "rank": rank, "device": 0, "device_name": "synthetic"},
    )


def write_ranks(directory: Path, n_ranks: int, ops: int, **kw: int) -> list[Path]:
    """``rank<i>.pyt`` for each rank, in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    return [
        storage.save(directory / f"rank{r}.pyt", rank_recording(r, n_ranks, ops, **kw))
        for r in range(n_ranks)
    ]
