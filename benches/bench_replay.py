"""Replay speed: every window of a 1M-op trace re-timed from its dependencies, a what-if,
and the critical path of the slowest window.

    python benches/bench_replay.py [--ops N] [--ops-per-step K]

The trace is synthetic and decode-shaped: steps (ranges "step" on one host thread) of K
kernels, each launched by its own call, on two streams with event waits between them, the
host doing some work before each launch and waiting for the step's last kernel with
cudaStreamSynchronize. Timed in one process after loading: ``replay`` (the fidelity pass),
``what_if`` with ``kernel:gemm*=0.8`` and with ``self:step=0.5`` (a host change: each
step's self time around its launches; two replays each) and ``critical_path``. Then two
ranks of ``N / 2`` ops on 8 streams each, with recorded event waits and stream
synchronizes and all-reduces meeting across the ranks: the whole-trace windows replayed
together (``replay``), ``what_if`` with ``comm:*=0.5``, and the step windows.

Checks: every window is reproduced exactly, the what-if saves time and never lengthens a
window, the critical path's shares sum to 1, the two-rank replay reads recorded waits,
syncs and collectives. Exit 1 when a check fails, 3 when a target (replay + critical path
< 10 s for 1M ops; the two-rank replay of 1M ops < 5 s) is missed.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from pytimings.analysis.attribution import attribute
from pytimings.analysis.critical_path import critical_path
from pytimings.analysis.replay import replay, what_if
from pytimings.model.trace import (
    API_CALL_SCHEMA,
    DEVICE_SCHEMA,
    EVENT_SCHEMA,
    GPU_OP_SCHEMA,
    RANGE_SCHEMA,
    SYNC_SCHEMA,
    THREAD_SCHEMA,
    CopyKind,
    MemKind,
    OpKind,
    SyncKind,
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


AR = "ncclKernel_AllReduce_RING_LL_Sum_float"


def synth_ranks(n: int, per_step: int, ranks: int, streams: int, seed: int = 0) -> Trace:
    """``ranks`` ranks of ``n // ranks`` ops each over ``streams`` streams per rank, with
    the dependencies the replay reads: every 10th op on a side stream waits by a recorded
    event (cudaEventRecord, cudaStreamWaitEvent, their records) for the main stream's
    last op; every 50th op is an all-reduce on every rank (the n-th one meets: it ends at
    the last rank's arrival plus its transfer); each step ends with a recorded
    cudaStreamSynchronize of the main stream. The last rank's host is slower."""
    rng = np.random.default_rng(seed)
    strings = ["", "gemm_bf16", "elementwise", "cudaLaunchKernel", "cudaStreamSynchronize",
               "step", "python3", "GPU 0", AR, "cudaEventRecord",
               "cudaStreamWaitEvent"]  # fmt: skip
    per = (n // ranks // per_step) * per_step
    steps = per // per_step
    idx = np.arange(per)
    coll = idx % 50 == 49
    side = ~coll & (rng.random(per) < 0.5)
    stream = np.where(side, 2 + rng.integers(0, streams - 2, per), 1)  # all-reduces: main
    waits = side & (idx % 10 == 0)
    transfer = rng.integers(5 * US, 20 * US, size=per)
    name = np.where(coll, 8, np.where(rng.random(per) < 0.6, 1, 2)).astype(np.int32)
    step_of = idx // per_step
    host = []
    for r in range(ranks):
        gap = rng.integers(2 * US, 12 * US, size=per) + (3 * US if r == ranks - 1 else 0)
        launch = rng.integers(3 * US, 6 * US, size=per)
        l_start = np.cumsum(gap + launch) - launch + step_of * 300 * US
        host.append((l_start, l_start + launch, rng.integers(2 * US, 9 * US, size=per)))
    start = np.empty((ranks, per), np.int64)
    end = np.empty((ranks, per), np.int64)
    last = np.zeros((ranks, streams + 2), np.int64)
    sync = np.empty((ranks, 2, steps), np.int64)  # each step's synchronize: start, end
    # the host waits at each step's synchronize: the next step's launches move later
    shift = np.zeros((ranks, steps), np.int64)
    for i in range(per):  # measured times, every rank in step
        k = i // per_step
        arrive = []
        for r in range(ranks):
            l_end, s = host[r][1], stream[i]
            t = max(int(l_end[i] + shift[r, k]) + 2 * US, int(last[r, s]) + 1 * US)
            if waits[i]:
                t = max(t, int(last[r, 1]) + 1 * US)
            start[r, i] = t
            arrive.append(t)
        for r in range(ranks):
            s = stream[i]
            e = (max(arrive) + int(transfer[i])) if coll[i] else start[r, i] + int(host[r][2][i])
            end[r, i] = e
            last[r, s] = e
            if i % per_step == per_step - 1:  # the step's end: wait for the main stream
                s0 = int(host[r][1][i] + shift[r, k]) + 1 * US
                s1 = max(int(last[r, 1]), s0) + 2 * US
                sync[r, :, k] = s0, s1
                if k + 1 < steps:
                    late = s1 + 10 * US - int(host[r][0][i + 1] + shift[r, k])
                    shift[r, k + 1] = shift[r, k] + max(0, late)
    for r in range(ranks):  # the launch times as the host ran them
        moved = shift[r][step_of]
        host[r] = (host[r][0] + moved, host[r][1] + moved, host[r][2])
    cols: dict[str, list[Any]] = {k: [] for k in ("ops", "api", "ranges", "syncs", "events")}
    for r in range(ranks):
        pid = 100 + r
        l_start, l_end, _ = host[r]
        corr = np.arange(1, per + 1, dtype=np.int64)
        cols["ops"].append({
            "start": start[r], "end": end[r], "name": name,
            "kind": np.full(per, OpKind.KERNEL, np.int8),
            "copy_kind": np.full(per, CopyKind.NONE, np.int8),
            "src_mem": np.full(per, MemKind.NONE, np.int8),
            "dst_mem": np.full(per, MemKind.NONE, np.int8), "bytes": np.zeros(per, np.int64),
            "device": np.zeros(per, np.int16), "stream": stream.astype(np.int32),
            "correlation": corr, "pid": np.full(per, pid, np.int32),
            "rank": np.full(per, r, np.int16), "graph": np.full(per, -1, np.int64),
        })  # fmt: skip
        # a step's end: a synchronize of the main stream, 1 µs after the last launch
        s_start, s_end = sync[r]
        # each waited-for op: a record call and a wait call, just before its launch
        w = np.flatnonzero(waits)
        rec_t, wait_t = l_start[w] - 2 * US, l_start[w] - 1 * US
        k = per + np.arange(steps + 2 * w.size, dtype=np.int64) + 1
        sync_corr, rec_corr, wait_corr = k[:steps], k[steps::2], k[steps + 1 :: 2]
        cols["api"].append({
            "start": np.concatenate([l_start, s_start, rec_t, wait_t]),
            "end": np.concatenate([l_end, s_end, rec_t + 500, wait_t + 500]),
            "name": np.concatenate([np.full(per, 3), np.full(steps, 4), np.full(w.size, 9),
                                    np.full(w.size, 10)]).astype(np.int32),
            "kind": np.zeros(per + steps + 2 * w.size, np.int8),
            "thread": np.full(per + steps + 2 * w.size, r, np.int32),
            "correlation": np.concatenate([corr, sync_corr, rec_corr, wait_corr]),
            "pid": np.full(per + steps + 2 * w.size, pid, np.int32),
            "rank": np.full(per + steps + 2 * w.size, r, np.int16),
        })  # fmt: skip
        cols["syncs"].append({
            "start": np.concatenate([s_start, wait_t]),
            "end": np.concatenate([s_end, wait_t + 500]),
            "kind": np.concatenate([np.full(steps, SyncKind.STREAM_SYNC),
                                    np.full(w.size, SyncKind.STREAM_WAIT_EVENT)]).astype(np.int8),
            "device": np.zeros(steps + w.size, np.int16),
            "stream": np.concatenate([np.ones(steps), stream[w]]).astype(np.int32),
            "event": np.concatenate([np.full(steps, -1), np.arange(w.size)]),
            "correlation": np.concatenate([sync_corr, wait_corr]),
            "thread": np.full(steps + w.size, r, np.int32),
            "pid": np.full(steps + w.size, pid, np.int32),
            "rank": np.full(steps + w.size, r, np.int16),
        })  # fmt: skip
        cols["events"].append({
            "device": np.zeros(w.size, np.int16), "stream": np.ones(w.size, np.int32),
            "event": np.arange(w.size), "correlation": rec_corr,
            "pid": np.full(w.size, pid, np.int32), "rank": np.full(w.size, r, np.int16),
        })  # fmt: skip
        cols["ranges"].append({
            "start": l_start[::per_step] - 1 * US, "end": s_end + 1 * US,
            "name": np.full(steps, 5, np.int32), "kind": np.zeros(steps, np.int8),
            "thread": np.full(steps, r, np.int32), "device": np.full(steps, -1, np.int16),
            "domain": np.zeros(steps, np.int32), "category": np.zeros(steps, np.int32),
            "depth": np.zeros(steps, np.int32), "payload": np.full(steps, np.nan),
            "pid": np.full(steps, pid, np.int32), "rank": np.full(steps, r, np.int16),
            "bytes": np.full(steps, -1, np.int64),
        })  # fmt: skip

    def table(key: str, schema: dict[str, Any]) -> Table:
        parts = cols[key]
        t = conform({c: np.concatenate([p[c] for p in parts]) for c in parts[0]}, schema)
        assert isinstance(t, Table)
        return t

    pids = [100 + r for r in range(ranks)]
    threads = conform({"pid": pids, "tid": pids, "name": [6] * ranks,
                       "rank": list(range(ranks))}, THREAD_SCHEMA)  # fmt: skip
    devices = conform({"device": [0] * ranks, "name": [7] * ranks, "rank": list(range(ranks))},
                      DEVICE_SCHEMA)  # fmt: skip
    return Trace(
        table("ops", GPU_OP_SCHEMA), table("api", API_CALL_SCHEMA),
        table("ranges", RANGE_SCHEMA), threads, devices, strings,
        syncs=table("syncs", SYNC_SCHEMA), events=table("events", EVENT_SCHEMA),
    )  # fmt: skip


def _multi_rank(n: int, per_step: int) -> tuple[bool, bool]:
    """The rank-coupled replay: 2 ranks, 8 streams each, recorded waits and syncs,
    all-reduces meeting; whole-trace windows (replayed together) and step windows."""
    trace = synth_ranks(n, per_step, ranks=2, streams=8)
    a = attribute(trace)
    t0 = time.process_time()
    fid = replay(a).fidelity()
    t1 = time.process_time()
    wi = what_if(a, "comm:*=0.5")
    t2 = time.process_time()
    steps = attribute(trace, by="step")
    t3 = time.process_time()
    sfid = replay(steps).fidelity()
    t4 = time.process_time()
    deps = fid["dependencies"]
    ok = (
        fid["windows"] == 2 and fid["max_error"] == 0.0 and sfid["max_error"] == 0.0
        and deps["stream_wait"] > 0 and deps["stream_sync"] > 0 and deps["collective"] > 0
        and 0 < wi["total_saving_ns"]
    )  # fmt: skip
    print(
        "\n| ops | ranks x streams | deps read (stream wait, stream sync, collective) "
        "| replay s (2 whole-trace windows, together) | what-if comm:*=0.5 s "
        "| replay s (step windows) |"
    )
    print("|---|---|---|---|---|---|")
    print(
        f"| {len(trace.gpu_ops):,} | 2 x 8 | {deps['stream_wait']:,}, {deps['stream_sync']:,}, "
        f"{deps['collective']:,} | {t1 - t0:.2f} | {t2 - t1:.2f} | {t4 - t3:.2f} |"
    )
    print(f"what-if comm:*=0.5 saves {wi['total_saving_ns'] / 1e6:.1f} ms over both ranks")
    if not ok:
        print("CHECK FAILED (ranks)", fid["max_error"], sfid["max_error"], deps, file=sys.stderr)
    return ok, (t1 - t0) < 5


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
    hw = what_if(a, "self:step=0.5")  # host self time: 1,000 ranges, each around its launches
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
        f"self:step=0.5 {hw['total_saving_ns'] / 1e6:.1f} ms"
    )
    ranks_ok, ranks_fast = _multi_rank(args.ops, args.ops_per_step)
    if not ok or not ranks_ok:
        print("CHECK FAILED", fid, file=sys.stderr)
        return 1
    if n >= 1_000_000 and ((t1 - t0 + t3 - t2) >= 10 or not ranks_fast):
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
