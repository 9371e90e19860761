"""The engine tier's server handling without vLLM: a start that dies says why (the log's
tail), one that never answers is bounded, and stop ends the whole process tree by PID."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
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
