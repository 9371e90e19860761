"""``record --kineto NAME:FIRST-LAST`` writes a trace that loads and carries its steps
(issue 29 item 3): each profiled step is a ``NAME`` annotation holding that step's
operators, so ``summary`` reads it (a CPU-only capture too: its cpu_ops are events) and
``analyze --by NAME`` has one window per step."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pytimings as pt
from pytimings.cli import main
from pytimings.ingest.recording import load_recording

pytest.importorskip("torch")

PROGRAM = """
import torch

class MyDecoderLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(32, 32)

    def forward(self, x):
        return torch.relu(self.l(x))

m, x = MyDecoderLayer(), torch.randn(4, 32)
for _ in range(12):
    x = m(x)
"""


def test_the_trace_loads_and_carries_its_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "prog.py").write_text(PROGRAM)
    env = {**os.environ, "PYTHONWARNINGS": "ignore::FutureWarning"}
    argv = [sys.executable, "-m", "pytimings.cli", "record", "-o", str(tmp_path / "run.pyt"),
            "--modules", "*DecoderLayer", "--kineto", "MyDecoderLayer:5-8",
            "--", "prog.py"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "run.pt.trace.json"
    # the end-of-run summary says where each file went (issue 46)
    assert f"saved to {tmp_path / 'run.pyt'} (exit); the Kineto trace in {path};" in done.stderr
    trace = pt.load(path)
    names = np.asarray(trace.strings, dtype=object)
    steps = np.flatnonzero(names[trace.ranges["name"]] == "MyDecoderLayer")
    assert steps.size == 4  # steps 5..8, the range asked for
    ho = trace.host_ops
    linear = np.flatnonzero(names[ho["name"]] == "aten::linear")
    assert linear.size == 4
    for r in steps:  # each step holds its forward's operator
        s, e = trace.ranges["start"][r], trace.ranges["end"][r]
        assert np.sum((ho["start"][linear] >= s) & (ho["end"][linear] <= e)) == 1
    assert main(["summary", str(path), "-q"]) == 0
    assert "MyDecoderLayer" in capsys.readouterr().out
    assert main(["analyze", str(path), "--by", "MyDecoderLayer", "-q"]) == 0
    assert "(by MyDecoderLayer: 0 window entries, 4 host windows)" in capsys.readouterr().out


def _record(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "prog.py").write_text(PROGRAM)
    env = {**os.environ, "PYTHONWARNINGS": "ignore::FutureWarning"}
    argv = [sys.executable, "-m", "pytimings.cli", "record", "-o", str(tmp_path / "run.pyt"),
            *options, "--", "prog.py"]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)


def test_a_name_no_modules_pattern_can_match_is_refused_before_the_run(tmp_path: Path) -> None:
    done = _record(tmp_path, "--modules", "*DecoderLayer", "--kineto", "Foo:0-2")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "pytimings record: error: --kineto Foo:0-2: no --modules pattern (*DecoderLayer) can "
        "match a class named 'Foo' (patterns match 'module.ClassName'; NAME is the class name)"
    )
    assert not (tmp_path / "run.pyt").exists()


@pytest.mark.parametrize(
    ("modules", "kineto", "why"),
    [
        ("*Layer", "MyDecoderLayer:12-14", "no thread began more than 12 (steps 0-11)"),
        ("*", "OtherDecoderLayer:0-2", "no forward of a --modules class of that name ran"),
    ],
)
def test_a_step_range_that_never_began_is_said_at_exit(
    tmp_path: Path, modules: str, kineto: str, why: str
) -> None:
    """Twelve forwards, steps 0-11: a range past them, or a class that never ran, writes no
    trace and says so (issue 46: it exited 0 without a word), in the meta too."""
    done = _record(tmp_path, "--modules", modules, "--kineto", kineto)
    assert done.returncode == 0, done.stderr
    name, first = kineto.split(":")[0], kineto.split(":")[1].split("-")[0]
    said = (
        f"pytimings record: no Kineto trace of {kineto}: step {first} of {name} never began: {why}"
    )
    assert said in done.stderr, done.stderr
    assert not (tmp_path / "run.pt.trace.json").exists()
    meta = load_recording(tmp_path / "run.pyt").meta["record"]["kineto"]
    assert meta["path"] is None and why in meta["note"]
