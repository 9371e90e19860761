"""Every compiled module's .pyi must describe it exactly (mypy.stubtest): the recorder
extension and each Cython kernel module in pytimings/_native."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODULES = ["pytimings._core"] + [
    f"pytimings._native.{p.stem}" for p in sorted((REPO / "pytimings/_native").glob("*.pyx"))
]


@pytest.mark.slow
def test_stubs_match_the_compiled_modules() -> None:
    """Never skipped: mypy is in the "test" extra, so without it the install is broken."""
    checked = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", *MODULES],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert len(MODULES) >= 7  # _core + the six kernel modules at least
