"""Kineto's per-op CUDA graph node id (``args["graph node id"]``, written by Kineto built with
CUDA 12+; 0 outside graphs) loaded into ``gpu_ops.graph_node``, and a replay whose graph
launch predates the trace window recognised by it and charged through a capture."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytimings.analysis.attribution import attribute
from pytimings.analysis.graph_capture import Captures
from pytimings.analysis.op_table import op_table
from pytimings.ingest import load

MM = {"Input Dims": [[8, 4], [4, 2]], "Input type": ["float", "float"]}


def _ev(cat: str, name: str, ts: int, dur: int, pid: int = 1, tid: int = 1, **args: Any) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}  # fmt: skip


def _kernel(name: str, ts: int, dur: int, corr: int, node: int) -> dict:
    args = {"correlation": corr, "device": 0, "stream": 7, "graph id": 3 if node else 0}
    return _ev("kernel", name, ts, dur, pid=0, tid=7, **args, **{"graph node id": node})


def _trace(path: Path) -> Path:
    """An eager kernel (node 0), a graph replay whose cudaGraphLaunch predates the trace
    (correlation 5, no call) and one whose call is in it (correlation 6), both running the
    graph's nodes 4294967301 and 4294967302 (CUPTI ids: large, not dense)."""
    events = [
        _ev("cpu_op", "aten::mm", 10, 20, **MM),
        _ev("cuda_runtime", "cudaLaunchKernel", 12, 5, correlation=1),
        _kernel("eager_gemm", 40, 10, 1, 0),
        _kernel("triton_poi_fused_0", 100, 20, 5, 4294967301),
        _kernel("triton_poi_fused_1", 120, 5, 5, 4294967302),
        _ev("cuda_runtime", "cudaGraphLaunch", 200, 5, correlation=6),
        _kernel("triton_poi_fused_0", 210, 20, 6, 4294967301),
        _kernel("triton_poi_fused_1", 230, 5, 6, 4294967302),
    ]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_the_graph_node_id_is_loaded_per_file_and_zero_is_none(tmp_path):
    ops = load(_trace(tmp_path / "t.json")).gpu_ops
    by_name = {}
    for i in range(len(ops)):
        by_name.setdefault(int(ops["correlation"][i]), []).append(
            (int(ops["graph_node"][i]), int(ops["graph"][i]))
        )
    assert by_name[1] == [(-1, -1)]  # eager: node 0 is none, no graph
    # the same two nodes in both replays; the launch-less one is a replay too
    assert by_name[5] == [(0, 5), (1, 5)]
    assert by_name[6] == [(0, 6), (1, 6)]


def test_a_replay_whose_launch_predates_the_trace_is_matched_to_its_capture(tmp_path):
    trace = load(_trace(tmp_path / "t.json"))
    capture = tmp_path / "cap.json"
    events = [_ev("cuda_runtime", "cudaStreamBeginCapture", 10, 2, correlation=1)]
    for i, name in enumerate(("aten::mm", "aten::add")):
        events.append(_ev("cpu_op", name, 20 + 20 * i, 10, **MM))
        events.append(_ev("cuda_runtime", "cudaLaunchKernel", 22 + 20 * i, 3, correlation=2 + i))
    events.append(_ev("cuda_runtime", "cudaStreamEndCapture", 80, 2, correlation=9))
    capture.write_text(json.dumps({"traceEvents": events}))
    a = attribute(trace)
    without = op_table(a).attribution
    assert without["graph_kernel_ns"] == 2 * 25_000
    assert {u["code"]: u["kernel_ns"] for u in without["unattributed"]} == {
        "graph_no_capture": 50_000
    }
    caps = Captures()
    caps.add(load(capture), "cap")
    t = op_table(a, captures=caps)
    assert t.attribution["graph_attributed_ns"] == 50_000
    assert t.attribution["graph_replays"]["matched_launches"] == 2
    rows = {r["name"]: (r["kernel_ns"], r["graph_calls"]) for r in t.ops}
    assert rows == {"aten::mm": (10_000 + 2 * 20_000, 2), "aten::add": (2 * 5_000, 2)}
