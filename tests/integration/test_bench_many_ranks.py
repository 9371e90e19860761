"""Smoke test of benches/bench_many_ranks.py at a tiny scale (it checks its own result)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHES = Path(__file__).resolve().parents[2] / "benches"


@pytest.mark.slow
def test_bench_many_ranks_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(BENCHES))
    try:
        import bench_many_ranks
    finally:
        sys.path.remove(str(BENCHES))
    assert bench_many_ranks.main(["--ranks", "4", "--ops", "900", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "results identical; straggler rank 3" in out
