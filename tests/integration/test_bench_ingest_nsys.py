"""The nsys ingestion benchmark runs and its own result checks pass (smoke, small inputs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benches" / "bench_ingest_nsys.py"


@pytest.mark.slow
@pytest.mark.shared
def test_bench_quick(shared_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "synthetic_ops_x20.sqlite" in done.stdout and "MISMATCH" not in done.stderr
