"""Signals during a save of `pytimings record` wait until the file is written (issue 47 #3,
#4): each case arms a recording session in a fresh Python and signals it from inside the
save, where a user's second Ctrl-C or a SIGTERM lands."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytimings.ingest.recording_file import load_recording

_ARMED = """
import os, signal
import pytimings as pt
from pytimings.record import storage
from pytimings.record.launch import Options, arm

session = arm(Options(out={out!r}))
with pt.region("work"):
    pass
real_save = storage.save
"""


def _run(tmp_path: Path, body: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "run.pyt"
    script = _ARMED.format(out=str(out)) + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    return done, out


def test_a_second_ctrl_c_during_the_exit_save_waits_for_the_file(tmp_path: Path) -> None:
    """It raised KeyboardInterrupt inside the save: nothing saved, exit 0."""
    done, out = _run(
        tmp_path,
        """
        def interrupted(path, rec):
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            return real_save(path, rec)
        storage.save = interrupted
        """,
    )
    assert done.returncode == -signal.SIGINT, done.stderr
    assert "Exception ignored" not in done.stderr
    rec = load_recording(out)
    assert rec.meta["record"]["reason"] == "exit"
    assert [rec.strings[i] for i in rec.records["name"]] == ["work"]


def test_sigterm_while_the_exit_save_waits_for_telemetry_waits_for_the_file(
    tmp_path: Path,
) -> None:
    """finish() had set _finished; the SIGTERM handler's finish() returned at once and the
    signal was re-raised before anything was written."""
    done, out = _run(
        tmp_path,
        """
        session.telemetry = lambda: os.kill(os.getpid(), signal.SIGTERM)  # its last sample
        """,
    )
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert load_recording(out).meta["record"]["reason"] == "exit"


def test_ctrl_c_during_a_save_mid_run_reaches_the_program_after_it(tmp_path: Path) -> None:
    done, out = _run(
        tmp_path,
        """
        def interrupted(path, rec):
            os.kill(os.getpid(), signal.SIGINT)
            return real_save(path, rec)
        storage.save = interrupted
        try:
            session.save("flush")
        except KeyboardInterrupt:
            storage.save = real_save
            print("interrupted after", os.path.getsize({out!r}) > 0)
        """.replace("{out!r}", repr(str(tmp_path / "run.pyt"))),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "interrupted after True"
    assert load_recording(out).meta["record"]["reason"] == "exit"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_handlers_are_back_after_a_save(tmp_path: Path, signum: int) -> None:
    done, _ = _run(
        tmp_path,
        f"""
        before = signal.getsignal({int(signum)})
        session.save("flush")
        print(signal.getsignal({int(signum)}) is before)
        """,
    )
    assert done.stdout.strip() == "True", done.stderr
