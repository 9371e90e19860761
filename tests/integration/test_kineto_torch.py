"""A trace written by the installed torch.profiler (CPU activities) loads: annotations
with their nesting, and its operator events as host activities, as the json module sees it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytimings.ingest.kineto import load_kineto
from pytimings.model.trace import ActivityKind, RangeKind


def test_torch_profiler_cpu_capture(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    x = torch.randn(64, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("step"):
            for _ in range(3):
                with record_function("inner"):
                    x = x @ x
    path = tmp_path / "cpu.pt.trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    n_ops = sum(1 for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X")

    tr = load_kineto(path)
    r = tr.ranges
    names = [tr.strings[i] for i in r["name"]]
    assert names == ["step", "inner", "inner", "inner"]
    assert r["depth"].tolist() == [0, 1, 1, 1]
    assert set(r["kind"].tolist()) == {RangeKind.ANNOTATION}
    assert (r["start"][1:] >= r["start"][0]).all() and (r["end"][1:] <= r["end"][0]).all()
    ops = tr.host_ops
    assert int((ops["kind"] == ActivityKind.CPU_OP).sum()) == len(ops) == n_ops > 0
    assert "aten::mm" in {tr.strings[i] for i in ops["name"]}
    assert len(tr.gpu_ops) == 0
