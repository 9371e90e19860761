from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import pytimings
from pytimings._native import _kernels
from pytimings.model.trace import GPU_OP_SCHEMA, Trace
from pytimings.table import Table


def test_clock_is_monotonic_ns() -> None:
    a = pytimings.now_ns()
    t0 = time.monotonic_ns()
    b = pytimings.now_ns()
    assert b >= a
    assert abs(b - t0) < 50_000_000  # CLOCK_MONOTONIC, same clock as time.monotonic_ns


def test_cython_kernel_agrees_with_numpy() -> None:
    a = np.array([1, 2, 2, 5], dtype=np.int64)
    assert _kernels.is_sorted_i64(a) == bool(np.all(np.diff(a) >= 0))
    b = np.array([3, 1], dtype=np.int64)
    assert _kernels.is_sorted_i64(b) == bool(np.all(np.diff(b) >= 0))


def test_gpu_op_row_stays_small() -> None:
    # 67 bytes: 10 M GPU ops hold 670 MB, well inside the 4 GB target with 40 M host
    # activities; a new column must say why it needs the room
    assert sum(np.dtype(dt).itemsize for dt in GPU_OP_SCHEMA.values()) <= 68


def test_empty_trace_tables() -> None:
    tr = Trace.empty()
    assert len(tr.gpu_ops) == 0
    assert isinstance(tr.gpu_ops, Table)
    with pytest.raises(KeyError):
        tr.table("nope")


def test_cli_runs_without_subcommand_error() -> None:
    r = subprocess.run([sys.executable, "-m", "pytimings.cli"], capture_output=True, text=True)
    assert r.returncode == 2


def test_cli_output_into_a_closed_pipe_is_quiet(tmp_path: object) -> None:
    # `pytimings ... | head -1`: no BrokenPipeError traceback
    import os

    example = os.path.join(os.path.dirname(pytimings.__file__), "examples")
    sqlite = next(p for p in os.listdir(example) if p.endswith(".sqlite"))
    cmd = (
        f"{sys.executable} -m pytimings.cli summary --top 1000 "
        f"{os.path.join(example, sqlite)} | head -c 10 >/dev/null; echo ${{PIPESTATUS[0]}}"
    )
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
    assert "Traceback" not in r.stderr
    assert r.stdout.strip() in {"0", "141"}


def test_unbuilt_source_checkout_says_what_to_install(tmp_path: Path) -> None:
    """A copy of the source without compiled modules: a one-line ImportError naming the
    install command, not a bare ModuleNotFoundError for pytimings._core."""
    import shutil

    src = Path(__file__).resolve().parents[2] / "pytimings"
    shutil.copytree(src, tmp_path / "pytimings", ignore=shutil.ignore_patterns("*.so"))
    r = subprocess.run(
        [sys.executable, "-S", "-c", "import pytimings"],  # -S: no installed pytimings
        cwd=tmp_path,
        env={**os.environ, "PYTHONSAFEPATH": "", "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: pytimings' native extension") and "pip install ." in last
