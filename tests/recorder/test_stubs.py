"""pytimings/_core.pyi must describe the extension exactly (mypy.stubtest)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow
def test_core_stubs_match_the_extension() -> None:
    pytest.importorskip("mypy")
    r = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "pytimings._core"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
