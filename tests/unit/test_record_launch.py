"""Which processes `pytimings record`'s startup hook arms (pytimings.record.launch)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from pytimings.errors import UsageError
from pytimings.ingest.recording_file import load_recording
from pytimings.record import launch
from pytimings.record.kineto import StepRange, trace_path


@pytest.fixture
def armed(monkeypatch: pytest.MonkeyPatch) -> list[launch.Options]:
    calls: list[launch.Options] = []
    monkeypatch.setattr(launch, "arm", calls.append)
    for k in list(os.environ):
        if k.startswith("PYTIMINGS_RECORD_"):
            monkeypatch.delenv(k)
    return calls


def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, parent: int, launcher: bool) -> None:
    opts = launch.Options(out=str(tmp_path / "r.pyt"))
    env = launch.hook_environment(opts, launcher=launcher, hook_dir=str(tmp_path))
    env[launch.ENV_PARENT] = str(parent)
    for k, v in env.items():
        monkeypatch.setenv(k, v)


def test_the_commands_own_process_is_armed(
    armed: list[launch.Options], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _env(monkeypatch, tmp_path, os.getppid(), launcher=False)
    launch.startup()
    assert armed == [launch.Options(out=str(tmp_path / "r.pyt"))]


def test_a_process_the_program_started_is_not(
    armed: list[launch.Options], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _env(monkeypatch, tmp_path, os.getppid() + 1, launcher=False)
    launch.startup()
    assert armed == []


def test_a_launcher_hands_over_to_its_children(
    armed: list[launch.Options], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _env(monkeypatch, tmp_path, os.getppid(), launcher=True)
    launch.startup()
    assert armed == []
    assert os.environ[launch.ENV_PARENT] == str(os.getpid())  # its workers' parent
    assert launch.ENV_LAUNCHER not in os.environ


def test_without_the_variables_nothing_happens(armed: list[launch.Options]) -> None:
    launch.startup()
    assert armed == []


def test_hook_path_comes_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", "/else")
    env = launch.hook_environment(launch.Options(out="/o.pyt"), launcher=False, hook_dir="/h")
    assert env["PYTHONPATH"] == "/h" + os.pathsep + "/else"
    assert launch.write_hook(tmp_path).read_text() == launch.SITECUSTOMIZE


def test_kineto_steps_syntax() -> None:
    assert StepRange.parse("LlamaDecoderLayer:5-8") == StepRange("LlamaDecoderLayer", 5, 8)
    assert str(StepRange.parse(" x:0-0 ")) == "x:0-0"
    for bad in ("x", "x:5", "x:8-5", ":1-2", "x:-1-2"):
        with pytest.raises(UsageError, match="--kineto"):
            StepRange.parse(bad)
    assert trace_path(Path("/d/run.rank3.pyt")) == Path("/d/run.rank3.pt.trace.json")


def test_a_flush_waiting_behind_the_last_save_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # the flusher thread may pass its wait just before finish() starts and then block on the
    # lock until the last save is done; what it would write then is older than that save
    monkeypatch.setattr(launch.atexit, "register", lambda *a, **k: None)
    monkeypatch.setattr(launch.os, "register_at_fork", lambda **k: None)
    monkeypatch.setattr(launch.Session, "_wrap_exec", lambda self: None)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    session = launch.Session(launch.Options(out=str(tmp_path / "run.pyt")))
    assert session.save("flush") == tmp_path / "run.pyt"  # a flush while the program runs
    assert load_recording(tmp_path / "run.pyt").meta["record"]["reason"] == "flush"
    session.finish("exit")
    assert session.save("flush") is None
    assert load_recording(tmp_path / "run.pyt").meta["record"]["reason"] == "exit"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.pyt"]
