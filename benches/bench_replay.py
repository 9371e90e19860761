"""Replay speed: every window of a 1M-op trace re-timed from its dependencies, a what-if,
and the critical path of the slowest window.

    python benches/bench_replay.py [--ops N] [--ops-per-step K]

The trace is synthetic and decode-shaped: steps (ranges "step" on one host thread) of K
kernels, each launched by its own call, on two streams with event waits between them, the
host doing some work before each launch and waiting for the step's last kernel with
cudaStreamSynchronize. Timed in one process after loading: ``replay`` (the fidelity pass),
``what_if`` with ``kernel:gemm*=0.8`` and with ``step=0.5`` (a host change: each step's
self time around its launches; two replays each) and ``critical_path``.

Checks: every window is reproduced exactly, the what-if saves time and never lengthens a
window, the critical path's shares sum to 1. Exit 1 when a check fails, 3 when the target
(replay + critical path < 10 s for 1M ops) is missed.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from pytimings.analysis.attribution import attribute
from pytimings.analysis.critical_path import critical_path
from pytimings.analysis.replay import replay, what_if
from pytimings.model.trace import (
    API_CALL_SCHEMA,
    DEVICE_SCHEMA,
    GPU_OP_SCHEMA,
    RANGE_SCHEMA,
    THREAD_SCHEMA,
    CopyKind,
    MemKind,
    OpKind,
    Trace,
    conform,
)
from pytimings.table import Table

US = 1_000


def synth(n: int, per_step: int, seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    strings = ["", "gemm_bf16", "elementwise", "cudaLaunchKernel", "cudaStreamSynchronize",
               "step", "python3", "GPU 0"]  # fmt: skip
    steps = n // per_step
    n = steps * per_step
    host_gap = rng.integers(2 * US, 12 * US, size=n)
    launch = rng.integers(3 * US, 6 * US, size=n)
    l_start = np.cumsum(host_gap + launch) - launch
    # a sync at each step's end: 200 µs after the step's last launch, before the next step
    step_of = np.arange(n) // per_step
    l_start += step_of * 300 * US
    l_end = l_start + launch
    dur = rng.integers(2 * US, 9 * US, size=n)
    stream = np.where(rng.random(n) < 0.2, 2, 1).astype(np.int32)
    start = np.empty(n, np.int64)
    end = np.empty(n, np.int64)
    last = {1: 0, 2: 0}
    for i in range(n):  # measured starts: after the launch and the stream's previous op
        s = stream[i]
        t = max(int(l_end[i]) + 2 * US, last[s] + 1 * US)
        start[i], end[i] = t, t + int(dur[i])
        last[s] = int(end[i])
    name = np.where(rng.random(n) < 0.6, 1, 2).astype(np.int32)
    corr = np.arange(1, n + 1, dtype=np.int64)
    ops = conform({
        "start": start, "end": end, "name": name, "kind": np.full(n, OpKind.KERNEL, np.int8),
        "copy_kind": np.full(n, CopyKind.NONE, np.int8),
        "src_mem": np.full(n, MemKind.NONE, np.int8), "dst_mem": np.full(n, MemKind.NONE, np.int8),
        "bytes": np.zeros(n, np.int64), "device": np.zeros(n, np.int16), "stream": stream,
        "correlation": corr, "pid": np.full(n, 1, np.int32), "rank": np.zeros(n, np.int16),
        "graph": np.full(n, -1, np.int64), "collective": np.full(n, -1, np.int8),
        "group_size": np.full(n, -1, np.int16),
    }, GPU_OP_SCHEMA)  # fmt: skip
    last_of_step = np.arange(per_step - 1, n, per_step)
    s_start = l_end[last_of_step] + 1 * US
    s_end = np.maximum(np.maximum.reduceat(end, np.arange(0, n, per_step)), s_start) + 2 * US
    m = steps
    api = conform({
        "start": np.concatenate([l_start, s_start]), "end": np.concatenate([l_end, s_end]),
        "name": np.concatenate([np.full(n, 3, np.int32), np.full(m, 4, np.int32)]),
        "kind": np.zeros(n + m, np.int8), "thread": np.zeros(n + m, np.int32),
        "correlation": np.concatenate([corr, np.full(m, -1, np.int64)]),
        "pid": np.full(n + m, 1, np.int32), "rank": np.zeros(n + m, np.int16),
    }, API_CALL_SCHEMA)  # fmt: skip
    r_start = l_start[::per_step] - 1 * US
    ranges = conform({
        "start": r_start, "end": s_end + 1 * US, "name": np.full(m, 5, np.int32),
        "kind": np.zeros(m, np.int8), "thread": np.zeros(m, np.int32),
        "device": np.full(m, -1, np.int16), "domain": np.zeros(m, np.int32),
        "category": np.zeros(m, np.int32), "depth": np.zeros(m, np.int16),
        "payload": np.full(m, np.nan), "pid": np.full(m, 1, np.int32),
        "rank": np.zeros(m, np.int16), "bytes": np.full(m, -1, np.int64),
    }, RANGE_SCHEMA)  # fmt: skip
    threads = conform({"pid": [1], "tid": [1], "name": [6], "rank": [0]}, THREAD_SCHEMA)
    devices = conform({"device": [0], "name": [7], "rank": [0]}, DEVICE_SCHEMA)
    assert isinstance(ops, Table)
    return Trace(ops, api, ranges, threads, devices, strings)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=1_000_000)
    ap.add_argument("--ops-per-step", type=int, default=1000)
    args = ap.parse_args()
    trace = synth(args.ops, args.ops_per_step)
    a = attribute(trace, by="step")
    t0 = time.process_time()
    fid = replay(a).fidelity()
    t1 = time.process_time()
    wi = what_if(a, "kernel:gemm*=0.8")
    t2 = time.process_time()
    cp = critical_path(a)
    t3 = time.process_time()
    hw = what_if(a, "step=0.5")  # host self time: 1,000 ranges, each around its launches
    t4 = time.process_time()
    ok = (
        fid["windows"] == len(trace.ranges)
        and fid["max_error"] == 0.0
        and wi["total_saving_ns"] > 0
        and all(w["after_ns"] <= w["before_ns"] for w in wi["windows"])
        and abs(sum(lk["share"] for lk in cp["links"]) - 1.0) < 1e-9
        and 0 < hw["total_saving_ns"]
    )
    n = len(trace.gpu_ops)
    print(
        "| ops | windows | replay s | what-if kernel s | what-if host s | critical path s "
        "| replay + path s |"
    )
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {n:,} | {fid['windows']:,} | {t1 - t0:.2f} | {t2 - t1:.2f} | {t4 - t3:.2f} "
        f"| {t3 - t2:.2f} | {t1 - t0 + t3 - t2:.2f} |"
    )
    print(
        f"what-if kernel:gemm*=0.8 saves {wi['total_saving_ns'] / 1e6:.1f} ms in total, "
        f"step=0.5 {hw['total_saving_ns'] / 1e6:.1f} ms"
    )
    if not ok:
        print("CHECK FAILED", fid, file=sys.stderr)
        return 1
    if n >= 1_000_000 and (t1 - t0 + t3 - t2) >= 10:
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
