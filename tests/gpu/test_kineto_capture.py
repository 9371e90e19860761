"""A fresh torch.profiler (Kineto) capture on a real GPU loads with the counts, copy kinds,
annotations and launch links that the same file shows to the json module."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from pytimings.ingest.kineto import load_kineto
from pytimings.model.trace import CopyKind, OpKind, RangeKind


@pytest.mark.gpu
def test_fresh_capture_loads(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    assert torch.cuda.is_available(), "the gpu marker promises a CUDA device"
    x = torch.randn(256, 256, device="cuda")
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function("step"):
            for _ in range(5):
                x = x @ x
                x = x / x.norm()
            x.cpu()  # a device-to-host copy
            torch.cuda.synchronize()
    path = tmp_path / "capture.pt.trace.json"
    prof.export_chrome_trace(str(path))

    events = json.loads(path.read_text())["traceEvents"]
    complete = [e for e in events if e.get("ph") == "X"]
    n_kernels = sum(1 for e in complete if e.get("cat") == "kernel")
    n_copies = sum(1 for e in complete if e.get("cat") == "gpu_memcpy")
    assert n_kernels >= 10 and n_copies >= 1

    tr = load_kineto(path)
    g = tr.gpu_ops
    assert int((g["kind"] == OpKind.KERNEL).sum()) == n_kernels
    assert int((g["kind"] == OpKind.MEMCPY).sum()) == n_copies
    assert CopyKind.DTOH in set(g["copy_kind"].tolist())
    # every GPU op was launched by a call of this process, found by correlation
    assert set(g["pid"].tolist()) == {os.getpid()}
    assert np.isin(g["correlation"], tr.api_calls["correlation"]).all()
    assert (g["end"] >= g["start"]).all()
    steps = [
        i
        for i, k in zip(tr.ranges["name"], tr.ranges["kind"], strict=True)
        if k == RangeKind.ANNOTATION and tr.strings[i] == "step"
    ]
    assert len(steps) == 1
