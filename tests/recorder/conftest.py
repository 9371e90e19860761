"""Fixtures for the recorder tests: the NVTX injection library and the fake CUDA runtime
(tests/native/*.c) compiled with the system C compiler, and a runner for workloads that must
start in a fresh process (NVTX and the CUDA runtime are bound once per process)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

NATIVE = Path(__file__).resolve().parent.parent / "native"


def _compile(source: Path, out: Path, *extra: str) -> Path:
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        pytest.skip("no C compiler (cc) to build the test libraries")
    cmd = [cc, "-O2", "-shared", "-fPIC", "-Wall", "-Wextra", *extra, "-o", str(out)]
    subprocess.run([*cmd, str(source), "-lpthread"], check=True, capture_output=True, text=True)
    return out


@pytest.fixture(scope="session")
def fake_cudart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake libcudart, named like a real one (soname libcudart.so.12)."""
    out = tmp_path_factory.mktemp("fakecuda") / "libcudart.so.12"
    return _compile(NATIVE / "fake_cudart.c", out, "-Wl,-soname,libcudart.so.12")


@pytest.fixture(scope="session")
def fake_nvml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake NVML (tests/native/fake_nvml.c), named like the real one."""
    out = tmp_path_factory.mktemp("fakenvml") / "libnvidia-ml.so.1"
    return _compile(NATIVE / "fake_nvml.c", out, "-Wl,-soname,libnvidia-ml.so.1")


@pytest.fixture(scope="session")
def nvtx_injection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = importlib.util.find_spec("nvidia.nvtx")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("nvidia-nvtx-cu12 (NVTX3 headers) is not installed")
    include = Path(next(iter(spec.submodule_search_locations))) / "include"
    out = tmp_path_factory.mktemp("nvtx") / "libnvtx_inject.so"
    return _compile(NATIVE / "nvtx_injection.c", out, f"-I{include}")


RunScript = Callable[..., Any]


@pytest.fixture
def run_script() -> RunScript:
    """run_script(code, **env) runs `code` in a fresh interpreter with `env` added; the code
    ends by printing one JSON document, which is returned."""

    def run(code: str, **env: str) -> Any:
        full_env = {**os.environ, **env}
        if "PYTIMINGS_CUDART" not in env:  # only what the test asks for
            full_env.pop("PYTIMINGS_CUDART", None)
        r = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, f"workload failed ({r.returncode}):\n{r.stderr}"
        return json.loads(r.stdout.strip().splitlines()[-1])

    return run
