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
