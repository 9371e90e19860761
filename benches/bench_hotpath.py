"""Per-region cost of the recorder's hot path from Python, side by side with a fresh
`with contextlib.nullcontext():` in the same run (ratios, not absolute times).

Development aid for the native hot path; the user-facing overhead table is
benches/bench_overhead.py / `pytimings overhead`. Run: python benches/bench_hotpath.py [-n N]
"""

from __future__ import annotations

import argparse
import contextlib
import timeit

import pytimings as pt
from pytimings.record.recorder import Recorder


def per_call_ns(
    rows: list[tuple[str, str]], env: dict[str, object], number: int, rounds: int, rec: Recorder
) -> dict[str, float]:
    """Best ns per region of each row; rows take turns round by round so that a noisy
    neighbour slows them alike (this box is shared)."""
    timers = {label: timeit.Timer(stmt, globals=env) for label, stmt in rows}
    best = dict.fromkeys(timers, float("inf"))
    for _ in range(rounds):
        for label, timer in timers.items():
            best[label] = min(best[label], timer.timeit(number) / number * 1e9)
            rec.clear()
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=50_000, help="regions per timing")
    ap.add_argument("--repeat", type=int, default=15, help="rounds (best of)")
    ap.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = ap.parse_args()
    rec = Recorder()
    off = Recorder()
    off.disable()
    stream = 0 if pt.cuda_available() else None
    env: dict[str, object] = {
        "contextlib": contextlib,
        "region": rec.region,
        "off": off.region,
        "stream": stream,
        "s0": 0,
        "reg": rec.region.make("prebuilt"),
    }
    rows = [
        ("nullcontext (fresh)", "with contextlib.nullcontext(): pass"),
        ("region(name) host-only", "with region('x'): pass"),
        ("region(name, kind=...)", "with region('x', kind='compute'): pass"),
        ("region(name, nbytes=...)", "with region('x', kind='comm', nbytes=4096): pass"),
        ("prebuilt region object", "with reg: pass"),
        ("disabled recorder", "with off('x'): pass"),
        ("stream, sample_every=16", "with region('s', stream=s0, sample_every=16): pass"),
    ]
    if stream is not None:
        rows.append(("GPU-timed (stream 0)", "with region('g', stream=stream): pass"))
    measured = per_call_ns(rows, env, args.n, args.repeat, rec)
    print(f"{'row':32} {'ns/region':>10} {'ratio':>7}")
    for label, ns in measured.items():
        print(f"{label:32} {ns:10.1f} {ns / measured[rows[0][0]]:7.2f}")
    null, host = measured[rows[0][0]], measured[rows[1][0]]
    misses = []
    if host > null:
        misses.append(f"host-only {host:.0f} ns > nullcontext {null:.0f} ns")
    if measured["stream, sample_every=16"] > host + 200:
        misses.append("sampled 1/16 > host-only + 200 ns")
    if stream is not None:
        floor = pt._core.event_record_floor_ns(0, 20_000)
        gpu = measured["GPU-timed (stream 0)"]
        print(f"{'2x cudaEventRecord (floor)':32} {floor:10.1f}")
        print(f"GPU-timed / (floor + host-only) = {gpu / (floor + host):.3f}")
        if gpu > 1.1 * (floor + host):
            misses.append("GPU-timed > 1.1 x (floor + host-only)")
    print(pt.cuda_status())
    for m in misses:
        print("MISSED:", m)
    if args.check and misses:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
