"""CPU figures of `pytimings bench`: host copy bandwidth, and 2-rank gloo collectives launched
by torchrun. Each result is checked (rows valid, algbw = size/time, busbw = algbw x nccl-tests'
factor, alpha-beta fits present) before its markdown table is printed for RESULTS.md.

    python benches/bench_transfers_cpu.py            # the figures recorded in RESULTS.md
    python benches/bench_transfers_cpu.py --smoke    # tiny sizes, a check that it still runs
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pytimings.bench.collective import bus_factor


def _run(argv: list[str], out: Path, ok: tuple[int, ...] = (0,)) -> dict[str, Any]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore::FutureWarning"}
    done = subprocess.run(
        [*argv, "--json", str(out), "--quiet"], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode not in ok:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def copy_figure(tmp: Path, sizes: str) -> list[str]:
    doc = _run(
        [
            sys.executable,
            "-m",
            "pytimings.cli",
            "bench",
            "copy",
            "--sizes",
            sizes,
            "--factor",
            "4",
            "--samples",
            "10",
            "--warmup",
            "2",
        ],
        tmp / "copy.json",
        ok=(0, 2),
    )  # 2: no GPU, host rows only
    lines = ["| path | size | GB/s median | min..max GB/s |", "|---|---:|---:|---:|"]
    for r in doc["rows"]:
        assert r["min_us"] <= r["time_us"] <= r["max_us"], r
        assert math.isclose(r["gbps"], r["size_bytes"] / (r["time_us"] * 1e3)), r
        lines.append(
            f"| {r['path']} | {r['size_bytes']} | {r['gbps']:.2f} | "
            f"{r['size_bytes'] / (r['max_us'] * 1e3):.2f}..."
            f"{r['size_bytes'] / (r['min_us'] * 1e3):.2f} |"
        )
    lines += ["", "| path | alpha (us) | beta (GB/s) | R2 |", "|---|---:|---:|---:|"]
    assert doc["fits"], "no alpha-beta fits"
    for f in doc["fits"]:
        beta = "n/a" if f["beta_gbps"] is None else f"{f['beta_gbps']:.2f}"
        lines.append(f"| {f['path']} | {f['alpha_us']:.1f} | {beta} | {f['r2']:.3f} |")
    return lines


def collective_figure(tmp: Path, ops: list[str], maxbytes: str) -> list[str]:
    doc = _run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            "-m",
            "pytimings.cli",
            "bench",
            "collective",
            "--op",
            ",".join(ops),
            "-b",
            "8",
            "-e",
            maxbytes,
            "-f",
            "8",
            "-w",
            "3",
            "-n",
            "10",
        ],
        tmp / "collective.json",
    )
    head = doc["header"]
    assert head["world_size"] == 2 and head["backend"] == "gloo", head
    lines = [
        "2 ranks, gloo, float32, 3 warm-up + 10 timed iterations:",
        "",
        "| op | size (B) | in-place | time (us) | algbw (GB/s) | busbw (GB/s) |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in doc["rows"]:
        assert r["valid"], r
        assert math.isclose(r["algbw_gbps"], r["size_bytes"] / (r["time_us"] * 1e3)), r
        assert math.isclose(r["busbw_gbps"], r["algbw_gbps"] * bus_factor(r["op"], 2)), r
        lines.append(
            f"| {r['op']} | {r['size_bytes']} | {'yes' if r['in_place'] else 'no'} | "
            f"{r['time_us']:.1f} | {r['algbw_gbps']:.4f} | {r['busbw_gbps']:.4f} |"
        )
    lines += ["", "| op | placement | alpha (us) | beta (GB/s) | R2 |", "|---|---|---:|---:|---:|"]
    assert {f["op"] for f in doc["fits"]} == set(ops), "alpha-beta fits missing"
    for f in doc["fits"]:
        beta = "n/a" if f["beta_gbps"] is None else f"{f['beta_gbps']:.3f}"
        lines.append(
            f"| {f['op']} | {'in-place' if f['in_place'] else 'out-of-place'} | "
            f"{f['alpha_us']:.1f} | {beta} | {f['r2']:.3f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        out = copy_figure(t, "64K:256K" if args.smoke else "64K:256M")
        out += [
            "",
            *collective_figure(t, ["all_reduce", "all_gather"], "1K" if args.smoke else "16M"),
        ]
    print("\n".join(out))


if __name__ == "__main__":
    main()
