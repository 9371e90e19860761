"""The attribution benchmark as a smoke test: small scale, no HTA race; it checks itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_bench_attribution_smoke():
    env = {k: v for k, v in os.environ.items() if k != "PYTIMINGS_HTA_PYTHON"}
    r = subprocess.run(
        [sys.executable, str(REPO / "benches/bench_attribution.py"), "--ops", "200000", "--kineto"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "labels sum to windows True, busy == union True" in r.stdout
    # no machine-specific default: without the variable the race is skipped, and said so
    assert "PYTIMINGS_HTA_PYTHON is not set" in r.stdout
