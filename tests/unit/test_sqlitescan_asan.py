"""The SQLite scanner under AddressSanitizer + UBSan: _sqlitescan.pyx cythonized and built
with the system C compiler into a temporary directory, then driven by
sqlitescan_asan_child.py in a Python with the ASan runtime preloaded: real nsys exports and
generated databases against sqlite3, and a seeded mutation fuzz. test_sqlitescan.py's fuzz
shows the scanner does not crash; this one shows it reads nothing outside the file's heap
copy nor past any page's usable part (the child poisons the reserved bytes of every page)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
PYX = REPO / "pytimings" / "_native" / "_sqlitescan.pyx"
CHILD = Path(__file__).resolve().parents[1] / "helpers" / "sqlitescan_asan_child.py"
MUTATIONS = 3000  # per fuzzed table (three): about 15 s under ASan on one core


def _runtime(cc: str, name: str) -> str | None:
    """Path of a sanitizer runtime of this compiler (cc prints the bare name when it has none)."""
    r = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True, text=True)
    path = r.stdout.strip()
    return path if r.returncode == 0 and os.path.isabs(path) and os.path.exists(path) else None


def build(tmp: Path) -> tuple[Path, str]:
    """The scanner as the top-level module ``_sqlitescan`` in tmp/asan, and libasan's path."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None or importlib.util.find_spec("Cython") is None:
        pytest.skip("needs a C compiler and Cython")
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").exists():
        pytest.skip(f"no Python.h in {include} (Python development headers)")
    libasan = _runtime(cc, "libasan.so")
    if libasan is None:
        pytest.skip(f"{cc} has no libasan.so")
    src = tmp / "_sqlitescan.pyx"  # copied out of the package: a top-level module
    shutil.copyfile(PYX, src)
    r = subprocess.run(
        [sys.executable, "-m", "cython", "-3", str(src), "-o", str(tmp / "_sqlitescan.c")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    out = tmp / "asan"
    out.mkdir()
    flags = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
    so = out / f"_sqlitescan{sysconfig.get_config_var('EXT_SUFFIX')}"
    cmd = [cc, "-shared", "-fPIC", "-O1", "-g", "-fno-omit-frame-pointer", *flags]
    cmd += [f"-I{include}", f"-I{np.get_include()}", "-o", str(so), str(tmp / "_sqlitescan.c")]
    r = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
    )
    if r.returncode != 0 and "sanitize" in r.stderr:
        pytest.skip(f"{cc} cannot build with {flags}: {r.stderr.splitlines()[-1]}")
    assert r.returncode == 0, r.stderr
    return out, libasan


@pytest.mark.slow
def test_scanner_under_asan_and_ubsan(tmp_path: Path) -> None:
    module_dir, libasan = build(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    env = {
        **os.environ,
        "LD_PRELOAD": libasan,  # first in the process: Python itself is not instrumented
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
        "PYTHONMALLOC": "malloc",  # Python's objects in ASan's heap too, not in pymalloc arenas
    }
    r = subprocess.run(
        [sys.executable, str(CHILD), str(module_dir), str(work), str(SHARED), str(MUTATIONS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0 and r.stdout.startswith("ok "), r.stdout + r.stderr[-20000:]
