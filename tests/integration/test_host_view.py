"""The host view on real captures with no GPU ops: a CPU-only torch.profiler capture made
here (a planted sleep inside a named range is charged to that range), and a host-only
pytimings recording analysed from the command line with --by."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from helpers.recording_factory import make_recording

import pytimings as pt
from pytimings.cli import main


def test_cpu_only_torch_capture_charges_the_sleep_to_its_range(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one op thread: less contention on a shared 2-core box
    try:
        model = torch.nn.Sequential(
            torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)
        )
        x = torch.randn(16, 64)
        slept = 0
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for i in range(4):
                with record_function("step"):
                    model(x)
                    if i == 2:
                        with record_function("sleepy"):
                            t0 = time.perf_counter_ns()
                            time.sleep(0.02)
                            slept = time.perf_counter_ns() - t0
                    model(x)
    finally:
        torch.set_num_threads(threads)
    path = tmp_path / "cpu.pt.trace.json"
    prof.export_chrome_trace(str(path))
    tr = pt.load(str(path))
    assert len(tr.gpu_ops) == 0
    doc = pt.attribute(tr, by="step").to_dict()
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
    assert doc["schema"] == "pytimings.attribution/2" and doc["windows"] == []
    assert [w["by_activity"] for w in doc["host_windows"]] == [
        [{"kind": "range", "name": "decode_step", "ns": 7 * ms},
         {"kind": "range", "name": "sample", "ns": 3 * ms}],
        [{"kind": "range", "name": "decode_step", "ns": 5 * ms},
         {"kind": "range", "name": "sample", "ns": 1 * ms}],
    ]  # fmt: skip
    assert doc["host_totals"]["window_ns"] == 16 * ms
    assert main(["analyze", str(run), "-q"]) == 2
    assert "--by" in capsys.readouterr().err
