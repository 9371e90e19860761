"""`pytimings record -- CMD` end to end: a 2-rank gloo job under torchrun, a program that
raises, one killed by SIGTERM, one that forks; each leaves complete, loadable recordings."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import pytimings as pt
from pytimings.analysis.summary import trace_summary
from pytimings.ingest.recording_file import load_recording

pytestmark = pytest.mark.slow

TARGET = str(Path(__file__).resolve().parents[1] / "helpers" / "record_target.py")
N_ALLREDUCE = 20


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")}
    env["PYTHONWARNINGS"] = "ignore::FutureWarning"
    return env


def _record(tmp_path: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "pytimings.cli", "record", "-o", str(tmp_path / "run.pyt"), *args]


def _run(tmp_path: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=180, env=_env(), cwd=tmp_path
    )


def _files(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir())


def test_torchrun_gloo_two_ranks_every_all_reduce_aligned(tmp_path: Path) -> None:
    done = _run(
        tmp_path,
        [
            *_record(tmp_path),
            "--",
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            TARGET,
            "allreduce",
            str(N_ALLREDUCE),
        ],
    )
    assert done.returncode == 0, done.stderr
    assert _files(tmp_path) == ["run.rank0.pyt", "run.rank1.pyt"]  # the launcher records nothing
    ends = {}
    for rank in (0, 1):
        path = tmp_path / f"run.rank{rank}.pyt"
        s = pt.summary(path)
        row = s["dist.all_reduce"]
        assert row["count"] == N_ALLREDUCE
        assert row["nbytes_count"] == N_ALLREDUCE and row["nbytes_per_call"] == 4096 * 4
        assert row["busbw_gbps"] is not None and row["busbw_gbps"] > 0
        # nccl-tests: busbw = algbw * 2(n-1)/n, n = 2
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"])
        meta = load_recording(path).meta
        assert meta["rank"] == rank and meta["world_size"] == 2
        assert meta["record"]["reason"] == "exit" and meta["record"]["exception"] is None
        assert f"rank {rank}:" in done.stderr and "busbw" in done.stderr  # the exit summary
    trace = pt.load(tmp_path / "run.rank0.pyt", tmp_path / "run.rank1.pyt")
    ranges = trace_summary(trace)["ranges"]
    for rank in (0, 1):  # `summary` of the files keeps the record-time busbw (issue 46)
        i = np.flatnonzero(
            (ranges["rank"] == rank) & (ranges["name"] == "pytimings:dist.all_reduce")
        )
        recorded = pt.summary(tmp_path / f"run.rank{rank}.pyt")["dist.all_reduce"]["busbw_gbps"]
        assert float(ranges["busbw_gbps"][i[0]]) == pytest.approx(recorded, rel=1e-12)
    al = trace.meta["clock_alignment"]
    assert al["uncertainty_ns"] < 1e6
    r = trace.ranges
    names = np.array(trace.strings)[r["name"]]
    for rank in (0, 1):
        sel = (names == "dist.all_reduce") & (r["rank"] == rank)
        ends[rank] = np.sort(r["end"][sel])
    # an all_reduce returns on both ranks once both contributed: the same instant, give or
    # take scheduling on a loaded box (median over the calls)
    assert float(np.median(np.abs(ends[0] - ends[1]))) < 1e6


def test_uncaught_exception_is_saved_and_noted(tmp_path: Path) -> None:
    done = _run(
        tmp_path,
        [
            *_record(tmp_path, "--modules", "torch.nn.modules.linear.*", "--kineto", "Linear:1-2"),
            "--",
            TARGET,
            "raise",
        ],
    )
    assert done.returncode == 1
    assert "ValueError: boom from the target" in done.stderr  # the program's own traceback
    assert _files(tmp_path) == ["run.pt.trace.json", "run.pyt"]
    rec = load_recording(tmp_path / "run.pyt")
    kineto = rec.meta["record"]["kineto"]
    assert kineto["steps"] == [1, 2] and kineto["path"] == str(tmp_path / "run.pt.trace.json")
    events = json.loads((tmp_path / "run.pt.trace.json").read_text())["traceEvents"]
    # two forwards profiled: two aten::linear ops (steps 0 and 1..2 of 3)
    assert sum(e.get("name") == "aten::linear" for e in events) == 2
    assert rec.meta["record"]["exception"]["type"] == "ValueError"
    assert rec.meta["record"]["exception"]["message"] == "boom from the target"
    assert pt.summary(tmp_path / "run.pyt")["Linear"]["count"] == 3
    assert len(pt.load(tmp_path / "run.pyt").ranges) == 3


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_run_leaves_the_whole_recording(tmp_path: Path, signum: int) -> None:
    proc = subprocess.Popen(
        [
            *_record(tmp_path, "--modules", "*Linear", "--flush-every", "0.2"),
            "--",
            TARGET,
            "sigterm",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=tmp_path,
    )
    out = tmp_path / "run.pyt"
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        flushed = load_recording(out)  # a periodic save, complete while the program runs
        assert flushed.meta["record"]["reason"] == "flush"
        if signum == signal.SIGTERM:
            proc.send_signal(signum)  # to `pytimings record`, which forwards it
        else:  # Ctrl-C reaches the program itself (`pytimings record` ignores SIGINT)
            os.kill(flushed.meta["pid"], signum)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, err
    assert _files(tmp_path) == ["run.pyt"]
    rec = load_recording(out)
    if signum == signal.SIGTERM:
        assert rec.meta["record"]["reason"] == "signal SIGTERM"
    else:  # Python raises KeyboardInterrupt: noted, then saved at exit
        assert rec.meta["record"]["reason"] == "exit"
        assert rec.meta["record"]["exception"]["type"] == "KeyboardInterrupt"
    count = pt.summary(out)["Linear"]["count"]
    assert count >= 3 and count >= len(flushed.records["name"])


def test_forked_and_spawned_children_never_touch_the_parents_file(tmp_path: Path) -> None:
    done = _run(tmp_path, [*_record(tmp_path, "--modules", "*Linear"), "--", TARGET, "fork"])
    assert done.returncode == 0, done.stderr
    assert "early-file: False" in done.stdout  # neither child saved anything
    assert _files(tmp_path) == ["run.pyt"]
    # the parent's own forwards only: 2 before the fork, 1 after (not the child's 2)
    assert pt.summary(tmp_path / "run.pyt")["Linear"]["count"] == 3


def test_overhead_bench_still_runs() -> None:
    bench = Path(__file__).resolve().parents[2] / "benches" / "bench_record_overhead.py"
    done = subprocess.run(
        [sys.executable, str(bench), "--smoke"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| 1048576 |" in done.stdout and "wrapper: a do-nothing all_reduce" in done.stdout
