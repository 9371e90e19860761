"""The attribution benchmark as a smoke test: small scale, no HTA race; it checks itself."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def test_bench_attribution_smoke():
    r = subprocess.run(
        [sys.executable, str(REPO / "benches/bench_attribution.py"), "--ops", "200000", "--kineto"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "labels sum to windows True, busy == union True" in r.stdout
