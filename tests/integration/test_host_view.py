"""The host view on real captures with no GPU ops: a CPU-only torch.profiler capture made
here (a planted sleep inside a named range is charged to that range), and a host-only
pytimings recording analysed from the command line with --by."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.recording_factory import make_recording
from helpers.torch_capture import cpu_capture

import pytimings as pt
from pytimings.cli import main
from pytimings.session import Analysis


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """One capture for this module's tests: its path and the slept ns."""
    pytest.importorskip("torch")
    path = tmp_path_factory.mktemp("cpu") / "cpu.pt.trace.json"
    return path, cpu_capture(path)


def test_cpu_only_torch_capture_charges_the_sleep_to_its_range(capture: tuple[Path, int]) -> None:
    path, slept = capture
    tr = pt.load(str(path))
    assert len(tr.gpu_ops) == 0
    doc = Analysis(pt.attribute(tr, by="step")).to_document()
    assert doc["windows"] == [] and len(doc["host_windows"]) == 4
    charged = {
        (x["kind"], x["name"]): x["ns"]
        for w in doc["host_windows"]
        for x in w["by_activity"]
        if x["name"] == "sleepy"
    }
    assert list(charged) == [("range", "sleepy")]
    assert abs(charged["range", "sleepy"] - slept) <= 0.02 * slept
    third = doc["host_windows"][2]["by_activity"]
    assert [x["ns"] for x in third if x["name"] == "sleepy"] == [charged["range", "sleepy"]]
    for w in doc["host_windows"]:
        assert sum(x["ns"] for x in w["by_activity"]) == w["window_ns"]


def test_cpu_only_torch_capture_has_a_finding_that_names_the_sleep(
    capture: tuple[Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    """No GPU ops, so no GPU finding: the host-window finding names the range holding the
    planted 20 ms sleep, in the one step that slept; the report prints it."""
    path, slept = capture
    a = pt.attribute(pt.load(str(path)), by="step")
    (f,) = Analysis(a).findings
    assert f.layer == "host" and f.title.startswith("range 'sleepy' holds ")
    e = f.evidence
    assert (e["kind"], e["name"], e["host_windows"], e["host_window_rows"]) == (
        "range", "sleepy", 4, [2]
    )  # fmt: skip
    assert abs(e["ns"] - slept) <= 0.02 * slept
    assert e["host_window_ns"] == sum(w["window_ns"] for w in a.host_windows())
    assert "in 4 step host windows" in f.title and "in 1 of them (3)" in f.title
    assert main(["analyze", str(path), "--by", "step", "-q"]) == 0
    assert "range 'sleepy' holds" in capsys.readouterr().out


def test_host_only_recording_analyze_by(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytimings.record import storage

    ms = 1_000_000
    rows = [
        {"name": "decode_step", "start": 0, "end": 10 * ms},
        {"name": "sample", "start": 2 * ms, "end": 5 * ms, "depth": 1},
        {"name": "decode_step", "start": 10 * ms, "end": 16 * ms},
        {"name": "sample", "start": 11 * ms, "end": 12 * ms, "depth": 1},
    ]
    run = storage.save(tmp_path / "run.pyt", make_recording(rows))
    out = tmp_path / "a.json"
    assert main(["analyze", str(run), "--by", "decode_step", "--json", str(out), "-q"]) == 0
    text = capsys.readouterr().out
    assert "Host time per decode_step window (2 windows" in text
    doc = json.loads(out.read_text())
    assert doc["schema"] == "pytimings.attribution/3" and doc["windows"] == []
    assert [w["by_activity"] for w in doc["host_windows"]] == [
        [{"kind": "range", "name": "decode_step", "ns": 7 * ms},
         {"kind": "range", "name": "sample", "ns": 3 * ms}],
        [{"kind": "range", "name": "decode_step", "ns": 5 * ms},
         {"kind": "range", "name": "sample", "ns": 1 * ms}],
    ]  # fmt: skip
    assert doc["host_totals"]["window_ns"] == 16 * ms
    # without --by: the host view of each thread over the whole recording, and the hint
    assert main(["analyze", str(run), "-q"]) == 0
    text = capsys.readouterr().out
    assert "host view of each thread over the whole trace (--by NAME" in text
    assert "Host time of thread '" in text and "(16.00 ms from its first activity" in text
