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


def _files(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir())


def test_torchrun_gloo_two_ranks_every_all_reduce_aligned(tmp_path: Path) -> None:
    done = subprocess.run(
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
        capture_output=True,
        text=True,
        timeout=180,
        env=_env(),
        cwd=tmp_path,
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
    done = subprocess.run(
        [
            *_record(tmp_path, "--modules", "torch.nn.modules.linear.*", "--kineto", "Linear:1-2"),
            "--",
            TARGET,
            "raise",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        cwd=tmp_path,
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


def test_sigterm_saves_then_dies_of_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [*_record(tmp_path, "--modules", "*Linear"), "--", TARGET, "sigterm"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)  # to `pytimings record`, which forwards it
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert _files(tmp_path) == ["run.pyt"]
    rec = load_recording(tmp_path / "run.pyt")
    assert rec.meta["record"]["reason"] == "signal SIGTERM"
    assert pt.summary(tmp_path / "run.pyt")["Linear"]["count"] >= 3


def test_forked_and_spawned_children_never_touch_the_parents_file(tmp_path: Path) -> None:
    done = subprocess.run(
        [*_record(tmp_path, "--modules", "*Linear"), "--", TARGET, "fork"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "early-file: False" in done.stdout  # neither child saved anything
    assert _files(tmp_path) == ["run.pyt"]
    # the parent's own forwards only: 2 before the fork, 1 after (not the child's 2)
    assert pt.summary(tmp_path / "run.pyt")["Linear"]["count"] == 3
