"""Nsight GPU metrics (issue 26 item 3): what reading an export's GPU_METRICS costs, and
what looking for the tables costs an export without them.

Writes a time-ordered GPU_METRICS (as nsys does) of ``--gpus`` x ``--metrics`` x
``--samples`` rows to a temporary file, then times :func:`read_gpu_metrics` (rows/s), the
per-window means over ``--windows`` windows and the two findings; and, on ``--plain`` (an
export without the tables, by default the shared H200 one), the look against
:func:`load_nsys` of the same file (the ratio is what to read: this box is shared).
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

import numpy as np

from pytimings.analysis.hardware import gpu_metric_findings, window_gpu_metrics
from pytimings.analysis.window_telemetry import nsys_gpu_metrics
from pytimings.ingest.nsys import load_nsys

NAMES = ["GPC Clock Frequency [MHz]", "SYS Clock Frequency [MHz]", "GR Active [Throughput %]",
         "SMs Active [Throughput %]", "SM Issue [Throughput %]", "Tensor Active [Throughput %]",
         "DRAM Read Bandwidth [Throughput %]", "DRAM Write Bandwidth [Throughput %]",
         "Compute Warps in Flight [Throughput %]", "PCIe RX Throughput [Throughput %]",
         "PCIe TX Throughput [Throughput %]",
         "NVLink RX Responses User Data [Throughput %]"]  # fmt: skip
PERIOD_NS = 100_000  # 10 kHz, nsys's default --gpu-metrics-frequency


def _write(path: Path, gpus: int, metrics: int, samples: int) -> int:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE GPU_METRICS (timestamp INTEGER, typeId INTEGER NOT NULL, "
               "metricId INTEGER NOT NULL, value INTEGER NOT NULL)")  # fmt: skip
    db.execute("CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER NOT NULL, sourceId "
               "INTEGER NOT NULL, typeName TEXT NOT NULL, metricId INTEGER NOT NULL, "
               "metricName TEXT NOT NULL)")  # fmt: skip
    db.executemany("INSERT INTO TARGET_INFO_GPU_METRICS VALUES (?, 1, 'GPU', ?, ?)",
                   [(0x100 | g, m, NAMES[m % len(NAMES)]) for g in range(gpus)
                    for m in range(metrics)])  # fmt: skip
    rng = np.random.default_rng(0)
    values = rng.integers(0, 100, (samples, gpus, metrics)).tolist()
    db.executemany(
        "INSERT INTO GPU_METRICS VALUES (?, ?, ?, ?)",
        ((i * PERIOD_NS, 0x100 | g, m, values[i][g][m])
         for i in range(samples) for g in range(gpus) for m in range(metrics)),
    )  # fmt: skip
    db.commit()
    db.close()
    return gpus * metrics * samples


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--metrics", type=int, default=12)
    ap.add_argument("--samples", type=int, default=50_000, help="per GPU and metric")
    ap.add_argument("--windows", type=int, default=10_000)
    ap.add_argument("--plain", default="../shared/data/h200/decode_16steps_h200.sqlite")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "metrics.sqlite"
        rows = _write(path, args.gpus, args.metrics, args.samples)
        t0 = time.perf_counter()
        s = nsys_gpu_metrics(str(path))
        t1 = time.perf_counter()
        assert s is not None and len(s.t_ns) == rows
        span = args.samples * PERIOD_NS
        starts = np.linspace(0, span, args.windows, endpoint=False).astype(np.int64)
        ends = starts + span // args.windows * 8 // 10
        devices = np.arange(args.windows) % args.gpus
        window_gpu_metrics(s, starts, ends, devices)
        t2 = time.perf_counter()
        gpu_metric_findings(s, starts, ends, devices)
        t3 = time.perf_counter()
    print(f"{rows:,} samples: read {t1 - t0:.2f} s ({rows / (t1 - t0) / 1e6:.2f} M/s), "
          f"{args.windows:,} window means {t2 - t1:.2f} s, findings {t3 - t2:.2f} s")  # fmt: skip
    looks, loads = [], []
    for _ in range(5):
        t = time.perf_counter()
        assert nsys_gpu_metrics(args.plain) is None
        looks.append(time.perf_counter() - t)
        t = time.perf_counter()
        load_nsys(args.plain)
        loads.append(time.perf_counter() - t)
    look, load = min(looks), min(loads)
    print(f"{args.plain} (no tables): look {look * 1e3:.2f} ms, load_nsys {load * 1e3:.1f} ms "
          f"({look / load:.1%} of the ingest)")  # fmt: skip


if __name__ == "__main__":
    main()
