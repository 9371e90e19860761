"""Recordings with GPU times (from the fake CUDA runtime, tests/native/fake_cudart.c) through
summary(), save/load, the Trace loader and the overhead command's GPU rows, on a CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

RunScript = Callable[..., Any]
LAUNCH_NS = 200_000  # the fake GPU's launch latency


@pytest.fixture
def fake_env(fake_cudart: Path) -> dict[str, str]:
    return {"PYTIMINGS_CUDART": str(fake_cudart), "FAKE_CUDA_LAUNCH_NS": str(LAUNCH_NS)}


WORKLOAD = """
import ctypes, json, os, sys
import numpy as np
import pytimings as pt
from pytimings.record.recorder import Recorder
from pytimings.ingest.recording import load_recording_trace

lib = ctypes.CDLL(os.environ["PYTIMINGS_CUDART"])
lib.fake_cuda_launch.argtypes = [ctypes.c_size_t, ctypes.c_longlong]
S, S2 = 0x1000, 0x2000
r = Recorder()
for i in range(20):
    with r.region("k", kind="compute", stream=S):
        lib.fake_cuda_launch(S, 50_000)
for i in range(10):
    with r.region("copy", kind="memory", stream=S2, nbytes=1_000_000):
        lib.fake_cuda_launch(S2, 100_000)
for i in range(16):
    with r.region("sampled", stream=S, sample_every=4):
        pass
with r.region("host_only"):
    pass
path = sys.argv[1]
pt.save(path, r)
rec = r.recording()
tr = load_recording_trace(path)
names = np.array(tr.strings, dtype=object)
calls = {int(c): int(s) for c, s in zip(tr.api_calls["correlation"], tr.api_calls["start"])}
print(json.dumps({
    "summary": pt.summary(path).to_dict(),
    "same_as_live": pt.summary(path).to_dict() == pt.summary(rec).to_dict(),
    "ops": {
        "name": names[tr.gpu_ops["name"]].tolist(),
        "kind": tr.gpu_ops["kind"].tolist(),
        "bytes": tr.gpu_ops["bytes"].tolist(),
        "stream": tr.gpu_ops["stream"].tolist(),
        "launch_latency": [int(s) - calls[int(c)] for s, c in
                           zip(tr.gpu_ops["start"], tr.gpu_ops["correlation"])],
    },
    "queue": {n: (rec.records["gpu_start_ns"] - rec.records["start_ns"])[
        np.array([rec.strings[i] == n for i in rec.records["name"]])
        & (rec.records["flags"] & 2 > 0)].tolist() for n in ("k", "copy", "sampled")},
    "streams": tr.meta["streams"],
}))
"""


def test_gpu_times_flow_through_summary_storage_and_trace(
    fake_env: dict[str, str], tmp_path: Path
) -> None:
    r = subprocess.run(
        [sys.executable, "-c", WORKLOAD, str(tmp_path / "gpu.pyt")],
        env={**os.environ, **fake_env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["same_as_live"]
    rows = {row["name"]: row for row in out["summary"]["regions"]}
    k, copy, sampled, host = rows["k"], rows["copy"], rows["sampled"], rows["host_only"]
    assert k["gpu_count"] == 20 and copy["gpu_count"] == 10
    assert sampled["count"] == 16 and sampled["gpu_count"] == 4
    assert host["gpu_count"] == 0 and host["gpu_p50_ns"] is None
    assert 50_000 - 1_000 <= k["gpu_p50_ns"] <= k["gpu_max_ns"]
    # queue delay: the fake's launch latency when the stream was idle, more when queued
    assert k["queue_p50_ns"] >= LAUNCH_NS - 250_000
    assert copy["queue_p50_ns"] == np.percentile(out["queue"]["copy"], 50)
    assert k["queue_p99_ns"] == np.percentile(out["queue"]["k"], 99)
    # bandwidth from GPU time: 1 MB per ~100 us of fake copy work
    gpu_mean = copy["gpu_mean_ns"]
    assert copy["bandwidth_gbps"] == pytest.approx(1_000_000 / gpu_mean)
    assert copy["bandwidth_gbps"] <= 10.0 + 0.5
    ops = out["ops"]
    assert sorted(ops["name"]) == sorted(["k"] * 20 + ["copy"] * 10 + ["sampled"] * 4)
    copies = [i for i, n in enumerate(ops["name"]) if n == "copy"]
    assert all(ops["kind"][i] == 1 and ops["bytes"][i] == 1_000_000 for i in copies)
    assert out["streams"] == [0x1000, 0x2000]
    assert {ops["stream"][i] for i in copies} == {1}
    # launch latency in the Trace is exactly each region's queue delay
    by_name: dict[str, list[int]] = {}
    for n, lat in zip(ops["name"], ops["launch_latency"], strict=True):
        by_name.setdefault(n, []).append(lat)
    for n in ("k", "copy", "sampled"):
        assert sorted(by_name[n]) == sorted(out["queue"][n])


@pytest.mark.slow
def test_overhead_gpu_rows_run_against_the_fake_runtime(
    fake_env: dict[str, str], tmp_path: Path
) -> None:
    js = tmp_path / "oh.json"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytimings.cli",
            "overhead",
            "--iterations",
            "2000",
            "--repeats",
            "2",
            "--json",
            str(js),
        ],
        env={**os.environ, **fake_env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(js.read_text())
    rows = {row["key"]: row for row in doc["rows"]}
    for key in ("pytimings_cuda", "pytimings_sampled16", "cuda_floor"):
        assert rows[key]["ns"] is not None, rows[key]
    assert rows["torch_event_pair"]["ns"] is None and rows["torch_event_pair"]["note"]
    assert all(t["passed"] is not None for t in doc["targets"])
