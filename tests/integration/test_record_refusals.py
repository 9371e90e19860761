"""`pytimings record` refuses, before running the program, what would lose its recording:
an OUT that cannot be written, a second record of the same OUT at once, a script that does
not exist; and says so when the command it ran wrote no recording (issue 30 items 1-2,
issue 29 item 3)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytimings.ingest.recording_file import load_recording


def _record(
    cwd: Path, out: str, *cmd: str, timeout: float = 120, opts: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")}
    return subprocess.run(
        [sys.executable, "-m", "pytimings.cli", "record", "-o", out, *opts, "--", *cmd],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd,
    )  # fmt: skip


def _script(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "prog.py"
    p.write_text(f"import pathlib\npathlib.Path('ran').write_text('yes')\n{body}\n")
    return p


# --flush-every saves from a thread while the program runs: refused all the same, up front
PERIODIC = pytest.mark.parametrize("opts", [(), ("--flush-every", "0.5")], ids=["", "flush"])


@PERIODIC
def test_an_output_that_is_a_directory_is_refused_before_the_program_runs(
    tmp_path: Path, opts: tuple[str, ...]
) -> None:
    (tmp_path / "out.pyt").mkdir()
    prog = _script(tmp_path, "")
    r = _record(tmp_path, "out.pyt", str(prog), opts=opts)
    assert r.returncode == 2 and not (tmp_path / "ran").exists()
    assert (
        r.stderr.strip().splitlines() == ["pytimings record: error: -o out.pyt: is a directory"]
        or "is a directory" in r.stderr.strip().splitlines()[-1]
    )
    assert "Traceback" not in r.stderr


@PERIODIC
def test_an_unwritable_output_is_refused_before_the_program_runs(
    tmp_path: Path, opts: tuple[str, ...]
) -> None:
    """/proc refuses new files even to root (a chmod would not stop root)."""
    prog = _script(tmp_path, "")
    r = _record(tmp_path, "/proc/self/run.pyt", str(prog), opts=opts)
    assert r.returncode == 2 and not (tmp_path / "ran").exists()
    assert "cannot be written" in r.stderr and "Traceback" not in r.stderr


def test_two_records_of_one_output_at_once_the_second_is_refused(tmp_path: Path) -> None:
    prog = tmp_path / "slow.py"
    prog.write_text(
        "import pathlib, time\npathlib.Path('started').write_text('1')\ntime.sleep(4)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")}
    first = subprocess.Popen(
        [sys.executable, "-m", "pytimings.cli", "record", "-o", "same.pyt", "--", str(prog)],
        cwd=tmp_path, env=env, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists():
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.05)
        second = _record(tmp_path, "same.pyt", str(_script(tmp_path, "")))
        assert second.returncode == 2, second.stderr
        assert "another pytimings record is writing it" in second.stderr
        assert not (tmp_path / "ran").exists()
    finally:
        first.wait(timeout=120)
    assert first.returncode == 0
    load_recording(tmp_path / "same.pyt")  # the first one's recording is whole


def test_a_script_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    r = _record(tmp_path, "run.pyt", "nonexistent.py")
    assert r.returncode == 2 and "nonexistent.py: no such script" in r.stderr
    assert not (tmp_path / "run.pyt").exists()


def test_a_command_that_writes_no_recording_says_so(tmp_path: Path) -> None:
    r = _record(tmp_path, "run.pyt", "true")
    assert r.returncode == 0
    assert "no recording written to run.pyt" in r.stderr
    assert not (tmp_path / "run.pyt").exists()


def test_a_python_program_writes_its_recording_and_no_warning(tmp_path: Path) -> None:
    r = _record(tmp_path, "run.pyt", str(_script(tmp_path, "")))
    assert r.returncode == 0, r.stderr
    assert "no recording written" not in r.stderr
    load_recording(tmp_path / "run.pyt")


def test_a_program_that_execs_keeps_the_regions_before_the_exec(tmp_path: Path) -> None:
    """exec replaces the process without exit handlers: the regions before it were lost
    (exec into a non-Python program left no file; into Python, the new image's recording
    replaced OUT). Now each image has its file."""
    second = tmp_path / "second.py"
    second.write_text("import pytimings as pt\nwith pt.region('after_exec'):\n    pass\n")
    first = tmp_path / "first.py"
    first.write_text(
        "import os, sys\nimport pytimings as pt\n"
        "with pt.region('before_exec'):\n    pass\n"
        f"os.execv(sys.executable, [sys.executable, {str(second)!r}])\n"
    )
    r = _record(tmp_path, "run.pyt", str(first))
    assert r.returncode == 0, r.stderr
    assert "execs" in r.stderr and "run.exec1.pyt" in r.stderr

    def names(p: Path) -> set[str]:
        rec = load_recording(p)
        return {rec.strings[i] for i in rec.records["name"]}

    assert names(tmp_path / "run.pyt") == {"before_exec"}
    assert names(tmp_path / "run.exec1.pyt") == {"after_exec"}
    assert load_recording(tmp_path / "run.pyt").meta["record"]["reason"] == "exec"


def test_exec_into_a_program_that_is_not_python_keeps_the_file(tmp_path: Path) -> None:
    first = tmp_path / "first.py"
    first.write_text(
        "import os\nimport pytimings as pt\n"
        "with pt.region('before_exec'):\n    pass\n"
        "os.execvp('true', ['true'])\n"
    )
    r = _record(tmp_path, "run.pyt", str(first))
    assert r.returncode == 0, r.stderr
    rec = load_recording(tmp_path / "run.pyt")
    assert {rec.strings[i] for i in rec.records["name"]} == {"before_exec"}
    assert not (tmp_path / "run.exec1.pyt").exists()
