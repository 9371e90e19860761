"""Region cost with the telemetry sampler on vs off (issue 26: no overhead on the recorder's
hot path). Rows take turns round by round; the ratio to a fresh nullcontext in the same
round is what to read (this box is shared).

The sampler reads NVML; without a GPU give the fake NVML (tests/native/fake_nvml.c, built
with `cc -O2 -shared -fPIC -o /tmp/libnvidia-ml.so.1 tests/native/fake_nvml.c`):
``PYTIMINGS_NVML=/tmp/libnvidia-ml.so.1 python benches/bench_telemetry.py``. ``--every``
sets the period (default 0.1 s, the CLI's; 0.005 s is a stress setting).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import timeit

from pytimings.record.recorder import Recorder
from pytimings.record.telemetry import TelemetryLog, sample_telemetry


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=50_000, help="regions per timing")
    ap.add_argument("--repeat", type=int, default=15, help="rounds (median and best of)")
    ap.add_argument("--every", type=float, default=0.1, help="sampling period, s")
    args = ap.parse_args()
    rec = Recorder()
    env: dict[str, object] = {"contextlib": contextlib, "region": rec.region}
    null = timeit.Timer("with contextlib.nullcontext(): pass", globals=env)
    reg = timeit.Timer("with region('x'): pass", globals=env)
    log = TelemetryLog()
    ratios: dict[str, list[float]] = {"off": [], "on": []}
    best: dict[str, float] = {"off": float("inf"), "on": float("inf")}
    for _ in range(args.repeat):
        for mode in ("off", "on"):
            stop = sample_telemetry(args.every, log=log) if mode == "on" else None
            base = null.timeit(args.n) / args.n * 1e9
            ns = reg.timeit(args.n) / args.n * 1e9
            if stop is not None:
                stop()
            rec.clear()
            ratios[mode].append(ns / base)
            best[mode] = min(best[mode], ns)
    if log.unavailable:
        print(f"sampler had no GPU: {log.unavailable} (the 'on' rows measure an idle thread)")
    print(f"telemetry samples taken: {len(log)} rows, period {args.every} s")
    print("| telemetry | region ns (best) | region / nullcontext (median) |")
    print("|---|---|---|")
    for mode in ("off", "on"):
        print(f"| {mode} | {best[mode]:.1f} | {statistics.median(ratios[mode]):.3f} |")
    print(f"on/off (best): {best['on'] / best['off']:.3f}")


if __name__ == "__main__":
    main()
