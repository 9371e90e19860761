"""What `pytimings record --comm` costs a collective-heavy loop: 2 ranks under torchrun, gloo
on CPU, all_reduce loops of several sizes, timed inside rank 0 (after a barrier, warm-up
excluded), the bare launch and the recorded one alternating round by round; the best round
of each is compared (the least disturbed by other work on the box). The recorded launch is
also checked: every timed all_reduce is in both ranks' files. Because launches on a shared
2-core box differ by more than the 2% target, the wrapper's own per-call cost is also
measured twice without launches: an in-run A/B (one 2-rank job alternating bare and
instrumented loops, :func:`worker`) and the wrapper alone around a do-nothing call
(:func:`wrapper_cost_ns`), shown against each bare call.

    python benches/bench_record_overhead.py            # the figures in RESULTS.md
    python benches/bench_record_overhead.py --smoke    # tiny, a check that it still runs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIZES = (64 << 10, 1 << 20, 4 << 20, 16 << 20)  # bytes per all_reduce


def _loop_ns(dist: Any, t: Any, iters: int) -> float:
    dist.barrier()
    start = time.perf_counter_ns()
    for _ in range(iters):
        dist.all_reduce(t)
    return (time.perf_counter_ns() - start) / iters


def worker(sizes: list[int], iters: int, out: str, blocks: int) -> None:
    """One rank. ``blocks`` 0: one timed loop per size (the process is bare or recorded as
    launched). Otherwise the in-run A/B: per size, ``blocks`` pairs of loops, bare and
    instrumented (``instrument_torch_distributed``/``uninstrument`` between them, both ranks
    in step), the best loop of each kept."""
    import torch
    import torch.distributed as dist

    import pytimings as pt
    from pytimings.record import distributed as ptd

    dist.init_process_group("gloo")
    times: dict[int, Any] = {}
    for size in sizes:
        t = torch.ones(size // 4)
        for _ in range(3):
            dist.all_reduce(t)
        if not blocks:
            times[size] = _loop_ns(dist, t, iters)
            continue
        best = {"bare": float("inf"), "wrapped": float("inf")}
        for _ in range(blocks):
            for mode in best:
                if mode == "wrapped":
                    pt.instrument_torch_distributed()
                best[mode] = min(best[mode], _loop_ns(dist, t, iters))
                ptd.uninstrument()
            pt.default_recorder().clear()
        times[size] = best
    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps(times))
    dist.destroy_process_group()


def launch(
    tmp: Path, recorded: bool, sizes: list[int], iters: int, blocks: int = 0
) -> dict[int, Any]:
    out = tmp / "times.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    env["PYTHONWARNINGS"] = "ignore::FutureWarning"
    job = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        __file__,
        "--worker",
        ",".join(map(str, sizes)),
        str(iters),
        str(out),
        str(blocks),
    ]
    prefix = [sys.executable, "-m", "pytimings.cli", "record", "-o", str(tmp / "rec.pyt"), "--"]
    done = subprocess.run(
        prefix + job if recorded else job, capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"launch exited {done.returncode}:\n{done.stderr[-3000:]}")
    if recorded:
        check(tmp, sizes, iters)
    return {int(k): v for k, v in json.loads(out.read_text()).items()}


def check(tmp: Path, sizes: list[int], iters: int) -> None:
    import pytimings as pt

    for rank in (0, 1):
        row = pt.summary(tmp / f"rec.rank{rank}.pyt")["dist.all_reduce"]
        want = len(sizes) * (iters + 3)
        if row["count"] != want or row["busbw_gbps"] is None:
            raise SystemExit(f"rank {rank}: {row['count']} all_reduce recorded, {want} made")


def wrapper_cost_ns(blocks: int, calls: int) -> tuple[float, float]:
    """Per-call ns of a do-nothing ``all_reduce`` bare and as ``instrument_torch_distributed``
    wraps it (in a 1-rank gloo group, so the wrapper's group-size lookup is real), blocks
    interleaved, the best block of each: what the wrapper itself adds to every call, free of
    gloo's own time and of the launch-to-launch noise of the 2-rank runs."""
    import torch
    import torch.distributed as dist

    import pytimings as pt
    from pytimings.record import distributed as ptd

    def all_reduce(tensor: Any, op: Any = None, group: Any = None, async_op: bool = False) -> None:
        return None

    real = dist.all_reduce
    with tempfile.TemporaryDirectory() as d:
        dist.init_process_group("gloo", init_method=f"file://{d}/store", rank=0, world_size=1)
        t = torch.ones(1)
        dist.all_reduce = all_reduce
        pt.instrument_torch_distributed()
        wrapped = dist.all_reduce
        best = {"bare": float("inf"), "wrapped": float("inf")}
        try:
            for _ in range(blocks):
                for key, fn in (("bare", all_reduce), ("wrapped", wrapped)):
                    start = time.perf_counter_ns()
                    for _ in range(calls):
                        fn(t)
                    best[key] = min(best[key], (time.perf_counter_ns() - start) / calls)
                pt.default_recorder().clear()
        finally:
            ptd.uninstrument()
            dist.all_reduce = real
            dist.destroy_process_group()
    return best["bare"], best["wrapped"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", nargs=4, metavar=("SIZES", "ITERS", "OUT", "BLOCKS"))
    ap.add_argument("--blocks", type=int, default=10, help="pairs of loops in the in-run A/B")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.worker:
        sizes_, iters_, out, blocks = args.worker
        worker([int(s) for s in sizes_.split(",")], int(iters_), out, int(blocks))
        return
    sizes = [4096, 1 << 20] if args.smoke else list(SIZES)
    rounds, iters, blocks = (1, 3, 2) if args.smoke else (args.rounds, args.iters, args.blocks)
    best: dict[bool, dict[int, float]] = {False: {}, True: {}}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(rounds):
            for recorded in (False, True):
                for size, ns in launch(Path(d), recorded, sizes, iters).items():
                    best[recorded][size] = min(ns, best[recorded].get(size, float("inf")))
        in_run = launch(Path(d), False, sizes, iters, blocks)
    bare1, wrapped1 = wrapper_cost_ns(3 if args.smoke else 20, 200 if args.smoke else 2000)
    cost = wrapped1 - bare1
    print(
        f"2 ranks, gloo on CPU, {iters} all_reduce per loop; launches: best of {rounds} rounds; "
        f"in-run A/B: best of {blocks} loop pairs; load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"wrapper: a do-nothing all_reduce {bare1 / 1e3:.2f} µs bare, {wrapped1 / 1e3:.2f} µs "
        f"instrumented: {cost / 1e3:.2f} µs per call"
    )
    print(
        "| bytes | launch bare µs | launch recorded µs | launch overhead | in-run bare µs "
        "| in-run instrumented µs | in-run overhead | wrapper / bare call |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in sizes:
        bare, rec = best[False][size], best[True][size]
        ab = in_run[size]
        print(
            f"| {size} | {bare / 1e3:.1f} | {rec / 1e3:.1f} | {100 * (rec - bare) / bare:+.2f}% "
            f"| {ab['bare'] / 1e3:.1f} | {ab['wrapped'] / 1e3:.1f} "
            f"| {100 * (ab['wrapped'] - ab['bare']) / ab['bare']:+.2f}% "
            f"| {100 * cost / ab['bare']:.3f}% |"
        )


if __name__ == "__main__":
    main()
