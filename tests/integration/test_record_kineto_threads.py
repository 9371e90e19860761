"""`pytimings record --kineto` when the forwards run off the main thread (issue 30 item 4).

torch.profiler's callbacks are thread-local and it must be stopped in the thread that started
it; before the fix the capture crashed the program (SIGSEGV at exit) or raised an
``AssertionError`` inside the user's thread. Each test runs the program under ``pytimings
record`` and checks the program's own outcome, the whole recording, and the trace (its
operators counted straight from the JSON) or the note saying why there is none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytimings.ingest.recording_file import load_recording

pytestmark = pytest.mark.slow

TARGET = str(Path(__file__).resolve().parents[1] / "helpers" / "record_target.py")


def _record(tmp_path: Path, steps: str, *target: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")}
    env["PYTHONWARNINGS"] = "ignore::FutureWarning"
    argv = [sys.executable, "-m", "pytimings.cli", "record", "-o", str(tmp_path / "run.pyt")]
    argv += ["--modules", "torch.nn.modules.linear.*", "--kineto", steps, "--", TARGET, *target]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)


def _linear_ops(path: Path) -> list[dict[str, Any]]:
    events = json.loads(path.read_text())["traceEvents"]
    return [e for e in events if e.get("name") == "aten::linear" and e.get("ph") == "X"]


def _clean(done: subprocess.CompletedProcess[str]) -> None:
    """The program ran as it would without pytimings: exit 0, no traceback anywhere."""
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Exception in thread" not in done.stderr


def test_concurrent_threads_one_owns_the_capture(tmp_path: Path) -> None:
    done = _record(tmp_path, "Linear:2-5", "threads", "4")
    _clean(done)
    rec = load_recording(tmp_path / "run.pyt")
    assert len(rec.records["start_ns"]) == 4 * 10 + 1  # every forward of every thread recorded
    kineto = rec.meta["record"]["kineto"]
    assert kineto["path"] == str(tmp_path / "run.pt.trace.json") and kineto["note"] is None
    assert kineto["steps"] == [2, 5] and kineto["thread"].startswith("Thread-")
    ops = _linear_ops(tmp_path / "run.pt.trace.json")
    assert len(ops) == 4  # steps 2..5 of the owner thread, nothing else
    assert len({e["tid"] for e in ops}) == 1


def test_owner_thread_ending_mid_range_writes_what_it_captured(tmp_path: Path) -> None:
    done = _record(tmp_path, "Linear:2-5", "thread-ends")
    _clean(done)
    rec = load_recording(tmp_path / "run.pyt")
    assert len(rec.records["start_ns"]) == 4 + 10
    kineto = rec.meta["record"]["kineto"]
    assert kineto["steps"] == [2, 3] and kineto["thread"].startswith("Thread-")
    # the worker's steps 2 and 3; the main thread's own steps 2..5 come later, not captured
    assert len(_linear_ops(tmp_path / "run.pt.trace.json")) == 2


def test_owner_still_running_at_exit_leaves_a_note(tmp_path: Path) -> None:
    done = _record(tmp_path, "Linear:1-5", "daemon")
    _clean(done)
    rec = load_recording(tmp_path / "run.pyt")
    assert len(rec.records["start_ns"]) == 3
    kineto = rec.meta["record"]["kineto"]
    assert kineto["path"] is None and "still running at exit" in kineto["note"]
    assert not (tmp_path / "run.pt.trace.json").exists()
    lines = [ln for ln in done.stderr.splitlines() if "no Kineto trace" in ln]
    assert len(lines) == 1 and "Linear:1-5" in lines[0]


def test_the_programs_own_profiler_is_left_alone(tmp_path: Path) -> None:
    done = _record(tmp_path, "Linear:2-3", "own-profiler")
    _clean(done)
    assert "own-profile: 6" in done.stdout  # the program's profile holds all its forwards
    rec = load_recording(tmp_path / "run.pyt")
    assert len(rec.records["start_ns"]) == 6
    kineto = rec.meta["record"]["kineto"]
    assert kineto["path"] is None and "own torch.profiler" in kineto["note"]
