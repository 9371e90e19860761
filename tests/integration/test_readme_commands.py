"""The commands in README.md and docs/ run as written when pasted (issue 29 item 8): every
``pytimings`` line of a fenced shell block is run through the installed package, its trace
placeholders (``report.sqlite``, ``rank*.pt.trace.json.gz``, ``run.pyt``, ``traces/``)
replaced by the bundled capture and its outputs sent to a temporary directory; each must
exit 0. A command this cannot run here (it needs a server, a GPU, a program to record, run
files of a load test) is listed in ``NOT_HERE`` with the reason, and a new command is
either run or listed: none is skipped silently."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.doc_blocks import DOCS, fenced_blocks

from pytimings.commands.example import example_path

SHELLS = ("bash", "sh", "shell", "console", "")
TRACE = re.compile(r"(\.(sqlite|nsys-rep|pyt|json\.gz|json)|/)$")
OUTPUTS = ("--json", "--html", "--out", "--perfetto", "--plot", "-o")
# command prefix -> why it cannot run against the bundled capture here (tested elsewhere)
NOT_HERE = {
    "pytimings record": "runs and records a program (tests/integration/test_record_cli.py)",
    "pytimings loadgen": "drives a serving engine (tests/integration/test_loadgen.py)",
    "pytimings bench": "measures this machine's GPUs and links (tests/unit/test_bench_cli.py)",
    "pytimings compare": "compares loadgen run files (tests/unit/test_serving_compare.py)",
    "pytimings report": "reads loadgen run files (tests/integration/test_serving_html.py)",
    "pytimings join": "joins a loadgen run with a recording (tests/integration/test_join.py)",
    "pytimings analyze rank*.sqlite --executor dask --scheduler tcp://HOST:8786": (
        "needs a running Dask scheduler"
    ),
    "pytimings ops serve.pt.trace.json.gz --capture graph_capture.pt.trace.json.gz": (
        "needs a trace of a CUDA graph capture (tests/integration/test_graph_capture_hta.py)"
    ),
    "pytimings diff --base before.pt.trace.json.gz --new after.pt.trace.json.gz --capture": (
        "needs traces of CUDA graph replays and captures (tests/unit/test_graph_capture_cli.py)"
    ),
    "pytimings diff --base h100.pt.trace.json.gz --new mi300x.pt.trace.json.gz --base-capture": (
        "needs traces of CUDA graph replays and captures (tests/unit/test_graph_capture_cli.py)"
    ),
    "pytimings export serve.pt.trace.json.gz --perfetto serve.perfetto.json --capture": (
        "needs traces of CUDA graph replays and captures (tests/unit/test_graph_capture_cli.py)"
    ),
    "pytimings diff --base a1.json a2.json --new b1.json b2.json --by 'ProfilerStep*'": (
        "Kineto ProfilerStep ranges: the bundled capture is an Nsight one"
    ),
}


def documented() -> list[tuple[str, str]]:
    """(file, command) of every pytimings command in a fenced shell block."""
    found = []
    for doc in DOCS:
        for lang, body, _ in fenced_blocks(doc.read_text()):
            if lang not in SHELLS:
                continue
            for line in body.replace("\\\n", " ").splitlines():
                cmd = line.split(" && ")[-1].strip()
                cmd = re.sub(r"^\S*/(?=pytimings )", "", cmd)  # .venv/bin/pytimings
                if cmd.startswith("pytimings "):
                    found.append((doc.name, cmd))
    return found


def _not_here(cmd: str) -> str | None:
    return next((why for prefix, why in NOT_HERE.items() if cmd.startswith(prefix)), None)


def _argv(cmd: str, tmp: Path) -> tuple[list[str], bool]:
    """The command's arguments with the placeholders replaced; whether it writes JSON to
    stdout (``--json -`` piped into jq)."""
    cmd = cmd.split(" | ")[0]
    cmd = re.sub(r"\s\[[^]]*\]", "", cmd)  # optional parts: [--window N]
    words = shlex.split(cmd, comments=True)[1:]
    out, stdout_json = [], False
    for i, w in enumerate(words):
        flag = words[i - 1] if i else ""
        if flag in OUTPUTS:
            stdout_json |= w == "-"
            out.append(w if w == "-" else str(tmp / w.rstrip("/")))
        elif not w.startswith("-") and TRACE.search(w.replace("*", "")):
            copy = tmp / f"input{i}.sqlite"  # a file of its own: inputs given twice are refused
            shutil.copyfile(example_path(), copy)
            out.append(str(copy))
        else:
            out.append(w)
    return out, stdout_json


COMMANDS = documented()


def test_every_documented_command_is_run_or_listed() -> None:
    assert len(COMMANDS) >= 20
    listed = {p for p in NOT_HERE if any(c.startswith(p) for _, c in COMMANDS)}
    assert listed == set(NOT_HERE), f"listed but no longer documented: {set(NOT_HERE) - listed}"


@pytest.mark.parametrize(
    "cmd", [c for _, c in COMMANDS if _not_here(c) is None], ids=lambda c: c[:70]
)
def test_the_documented_command_runs(cmd: str, tmp_path: Path) -> None:
    argv, stdout_json = _argv(cmd, tmp_path)
    if "dask" in argv and importlib.util.find_spec("distributed") is None:
        pytest.skip("the [dask] extra is not installed")
    proc = subprocess.run(
        [sys.executable, "-m", "pytimings.cli", *argv],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, f"{cmd}\n-> {argv}\n{proc.stderr[-2000:]}"
    if stdout_json:
        assert "totals" in json.loads(proc.stdout)
