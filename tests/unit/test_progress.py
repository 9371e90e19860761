"""Progress bars: drawn on a terminal (a pseudo-terminal here), never into pipes or files,
never with --quiet, and only for work outlasting the delay."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

EXAMPLE = (
    Path(__file__).resolve().parents[2] / "pytimings" / "examples" / "decode_16steps_h200.sqlite"
)
CLI = [sys.executable, "-m", "pytimings.cli"]
WORK = """
import time
from pytimings.console.progress import task
with task("Crunching", total=4) as t:
    for _ in range(4):
        time.sleep(0.15)
        t.advance()
print("finished")
"""


def _env(delay_s: float) -> dict[str, str]:
    return {**os.environ, "PYTIMINGS_PROGRESS_DELAY_S": str(delay_s), "TERM": "xterm"}


def _in_pty(argv: list[str], env: dict[str, str]) -> str:
    """Run with stdout and stderr on a pseudo-terminal; all it printed."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=60)
    os.close(master)
    assert proc.returncode == 0, out.decode(errors="replace")
    return out.decode(errors="replace")


def test_bar_on_a_terminal() -> None:
    out = _in_pty([sys.executable, "-c", WORK], _env(0.1))
    assert "Crunching" in out and "finished" in out
    assert "\x1b[" in out  # drawn with terminal control sequences


def test_nothing_before_the_delay() -> None:
    out = _in_pty([sys.executable, "-c", WORK], _env(30))
    assert "Crunching" not in out and "finished" in out


def test_quiet_on_a_terminal() -> None:
    out = _in_pty([*CLI, "analyze", str(EXAMPLE), "--quiet"], _env(0))
    assert "Loading" not in out and "Attributing" not in out
    assert "Where the time went" in out


def test_cli_on_a_terminal_shows_progress() -> None:
    out = _in_pty([*CLI, "summary", str(EXAMPLE)], _env(0))
    assert f"Loading {EXAMPLE.name}" in out


def test_nothing_into_pipes() -> None:
    """Not a terminal: the output is exactly that of --quiet, with no control sequences."""
    plain = subprocess.run(
        [*CLI, "analyze", str(EXAMPLE)], env=_env(0), capture_output=True, text=True, check=True
    )
    quiet = subprocess.run(
        [*CLI, "analyze", str(EXAMPLE), "-q"],
        env=_env(0),
        capture_output=True,
        text=True,
        check=True,
    )
    assert plain.stdout == quiet.stdout and "Where the time went" in plain.stdout
    assert plain.stderr == "" and "\x1b[" not in plain.stdout
