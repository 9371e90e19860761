"""`pytimings bench collective` end to end: torchrun, 2 processes, gloo, tiny sizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytimings.bench.collective import OPS, bus_factor
from pytimings.record.nccl import algbw_gbps

pytestmark = pytest.mark.slow


def _torchrun(
    tmp_path: Path, *args: str, nproc: int = 2
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    out = tmp_path / "out.json"
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")}
    env["PYTHONWARNINGS"] = "ignore::FutureWarning"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={nproc}",
            "-m",
            "pytimings.cli",
            "bench",
            "collective",
            *args,
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    return done, json.loads(out.read_text()) if out.exists() else None


def test_every_op_on_gloo_in_one_launch(tmp_path: Path) -> None:
    done, doc = _torchrun(
        tmp_path,
        "--op",
        ",".join(OPS),
        "-b",
        "8",
        "-e",
        "1K",
        "-f",
        "8",
        "-w",
        "1",
        "-n",
        "3",
        "--dtype",
        "int32",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert doc is not None and doc["schema"] == "pytimings.bench/1"
    head = doc["header"]
    assert head["world_size"] == 2 and head["backend"] == "gloo" and head["ops"] == list(OPS)
    assert head["iters"] == 3 and head["warmup_iters"] == 1 and "torch" in head
    for op, spec in OPS.items():
        placements = {p for p, ok in ((False, spec.out_of_place), (True, spec.in_place)) if ok}
        rows = [r for r in doc["rows"] if r["op"] == op]
        assert {r["in_place"] for r in rows} == placements, op
        # nccl-tests sizes: 8, 64, 512 requested; split ops need 2 ranks x 4 bytes: all fit
        assert sorted({r["size_bytes"] for r in rows}) == [8, 64, 512], op
        for r in rows:
            assert {
                "op",
                "size_bytes",
                "count",
                "dtype",
                "in_place",
                "time_us",
                "algbw_gbps",
                "busbw_gbps",
            } <= set(r)
            assert r["dtype"] == "int32" and r["valid"] is True
            split = 2 if spec.per_rank_split else 1
            assert r["count"] * 4 * split == r["size_bytes"]
            assert 0 < r["time_us"] <= r["max_rank_time_us"] * (1 + 1e-9)
            assert r["algbw_gbps"] == pytest.approx(algbw_gbps(r["size_bytes"], r["time_us"]))
            assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * bus_factor(op, 2))
        assert {f["in_place"] for f in doc["fits"] if f["op"] == op} == placements
    assert "size(B)" in done.stdout and "alpha-beta fit" in done.stdout  # rank 0's table


def test_env_ab_on_gloo_runs_each_variant_in_fresh_processes(tmp_path: Path) -> None:
    done, doc = _torchrun(
        tmp_path,
        "--op",
        "all_reduce",
        "-b",
        "64",
        "-e",
        "256",
        "-f",
        "4",
        "-w",
        "1",
        "-n",
        "2",
        "--env-ab",
        "PYTIMINGS_AB_PROBE=2 PYTIMINGS_AB_OTHER=x",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert doc is not None
    # the children saw the variant's environment when their process group started
    assert doc["header"]["env_ab"] == {
        "baseline": {"PYTIMINGS_AB_OTHER": None, "PYTIMINGS_AB_PROBE": None},
        "PYTIMINGS_AB_PROBE=2 PYTIMINGS_AB_OTHER=x": {
            "PYTIMINGS_AB_OTHER": "x",
            "PYTIMINGS_AB_PROBE": "2",
        },
    }
    rows = doc["rows"]
    assert [r["variant"] for r in rows].count("baseline") == 2
    base = {r["size_bytes"]: r["time_us"] for r in rows if r["variant"] == "baseline"}
    for r in rows:
        assert r["baseline_time_us"] == pytest.approx(base[r["size_bytes"]])
        if r["variant"] == "baseline":
            assert r["time_change_pct"] is None
        else:
            assert r["time_change_pct"] == pytest.approx(
                100 * (r["time_us"] - base[r["size_bytes"]]) / base[r["size_bytes"]]
            )
    assert {f["variant"] for f in doc["fits"]} == set(doc["header"]["env_ab"])


def test_world_size_one_under_torchrun_is_a_clear_error(tmp_path: Path) -> None:
    done, doc = _torchrun(tmp_path, "--op", "all_reduce", "-b", "8", "-e", "8", nproc=1)
    assert done.returncode != 0 and doc is None
    assert "pytimings bench: error: collective: world size 1" in done.stderr


def test_a_size_beyond_the_hosts_memory_is_refused_before_running(tmp_path: Path) -> None:
    """-e 1T on gloo: both local ranks would allocate far beyond the host; it used to run
    until the kernel killed it. Refused before any allocation, with the numbers."""
    done, doc = _torchrun(tmp_path, "--op", "all_reduce", "-b", "1M", "-e", "1T")
    assert done.returncode != 0 and doc is None
    line = next(x for x in done.stderr.splitlines() if "--maxbytes" in x)
    assert "pytimings bench: error: -e/--maxbytes 1T: needs about 6144.0 GiB" in line
    assert "local ranks" in line and "the largest size that fits is" in line


def test_progress_lines_reach_stderr_when_it_is_not_a_terminal(tmp_path: Path) -> None:
    done, doc = _torchrun(tmp_path, "--op", "all_reduce", "-b", "8", "-e", "64")
    assert done.returncode == 0 and doc is not None, done.stderr
    lines = [x for x in done.stderr.splitlines() if x.startswith("collective all_reduce ")]
    assert len(lines) == len(doc["rows"]) == 4  # 8, 16, 32, 64 B: one line each, rank 0 only


def test_a_child_killed_by_a_signal_is_said_so() -> None:
    from pytimings.bench.envab import exit_reason

    assert exit_reason(-9).startswith("killed by SIGKILL (the kernel's out-of-memory killer")
    assert exit_reason(3) == "exit status 3; what it printed is above"
