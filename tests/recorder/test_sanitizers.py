"""The native recorder's lock-free buffers under ThreadSanitizer and AddressSanitizer+UBSan:
tests/native/recorder_stress.cpp built against csrc/ with the system C++ compiler."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def build(tmp: Path, flags: list[str]) -> Path:
    cxx = shutil.which(os.environ.get("CXX", "c++"))
    spec = importlib.util.find_spec("nvidia.nvtx")
    if cxx is None or spec is None or not spec.submodule_search_locations:
        pytest.skip("needs a C++ compiler and the NVTX3 headers (nvidia-nvtx-cu12)")
    nvtx = Path(next(iter(spec.submodule_search_locations))) / "include"
    out = tmp / "stress"
    sources = [
        *sorted((REPO / "csrc" / "core").glob("*.cpp")),
        REPO / "tests/native/recorder_stress.cpp",
    ]
    cmd = [cxx, "-std=c++17", "-O1", "-g", *flags, f"-I{REPO / 'csrc/include'}", f"-I{nvtx}"]
    r = subprocess.run(
        [*cmd, *map(str, sources), "-o", str(out), "-ldl", "-lpthread"],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0 and "sanitize" in r.stderr:
        pytest.skip(f"this compiler cannot build with {flags}: {r.stderr.splitlines()[-1]}")
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags",
    [["-fsanitize=thread"], ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]],
    ids=["tsan", "asan-ubsan"],
)
def test_recorder_stress_under_sanitizers(tmp_path: Path, flags: list[str]) -> None:
    exe = build(tmp_path, flags)
    env = {
        **os.environ,
        "PYTIMINGS_CUDART": "/nonexistent",  # host time only: no runtime in the picture
        "TSAN_OPTIONS": "halt_on_error=1",
        "ASAN_OPTIONS": "detect_leaks=1",
    }
    for cap in ([], ["30000"]):
        r = subprocess.run([str(exe), *cap], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and r.stdout.startswith("ok "), r.stdout + r.stderr
