"""The benches/ script behind RESULTS.md still runs and its own checks pass (tiny sizes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_transfers_cpu_smoke() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benches/bench_transfers_cpu.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| host numpy copyto (pageable) | 65536 |" in done.stdout
    assert "2 ranks, gloo" in done.stdout and "| all_gather | out-of-place |" in done.stdout
