"""Nsight's per-node graph tracing: a replayed kernel's graphNodeId, through the clone rows
of CUDA_GRAPH_NODE_EVENTS, to the node's creation inside the captured launch call, and the
op (NVTX range) around it; and captures across forked streams, which sequence matching
refuses."""

from __future__ import annotations

from pathlib import Path

from helpers import nsys_synth
from helpers.nsys_synth import GPID, GTID
from helpers.synth import make_trace

from pytimings.analysis.attribution import attribute
from pytimings.analysis.op_table import op_table
from pytimings.ingest import load

MM = "aten::mm, seq = 1, op_id = 1, sizes = [[8, 4], [4, 2]]"
STRINGS = [
    (1, "gemm_kernel"),
    (2, "add_kernel"),
    (3, "cudaLaunchKernel_v7000"),
    (4, "cudaStreamBeginCapture_v10000"),
    (5, "cudaStreamEndCapture_v10000"),
    (6, "cudaGraphInstantiate_v12000"),
    (7, "cudaGraphLaunch_v10000"),
    (8, "Graph Node Creation"),
]
# node ids as CUPTI numbers them (large, sparse); clones get new ids
A, B, A_EXEC, B_EXEC = 4_294_967_301, 4_294_967_302, 8_589_934_593, 8_589_934_594


def _export(path: Path, creations: bool = True) -> Path:
    runtime = [
        (50, 60, 0, GTID, 1, 4),
        (110, 120, 0, GTID, 2, 3),  # captured launch of the gemm, inside aten::mm
        (310, 320, 0, GTID, 3, 3),  # captured launch of the add, inside aten::add
        (500, 510, 0, GTID, 4, 5),
        (520, 600, 0, GTID, 5, 6),
        (1000, 1010, 0, GTID, 10, 7),
        (2000, 2010, 0, GTID, 11, 7),
    ]
    nodes = [(530, 530, 0, GTID, 8, A_EXEC, A), (531, 531, 0, GTID, 8, B_EXEC, B)]
    if creations:
        nodes += [(115, 115, 0, GTID, 8, A, None), (315, 315, 0, GTID, 8, B, None)]
    kernels = [
        (1100, 1200, 0, 1, 7, 10, GPID, 1, 1, A_EXEC, 5),
        (1200, 1230, 0, 1, 7, 10, GPID, 2, 2, B_EXEC, 5),
        # the second replay runs the add first (another stream, say): node ids still tell
        (2100, 2130, 0, 1, 7, 11, GPID, 2, 2, B_EXEC, 5),
        (2130, 2230, 0, 1, 7, 11, GPID, 1, 1, A_EXEC, 5),
    ]
    return nsys_synth.write(
        path,
        {
            "StringIds": STRINGS,
            "CUPTI_ACTIVITY_KIND_RUNTIME": runtime,
            "CUPTI_ACTIVITY_KIND_KERNEL": kernels,
            "CUDA_GRAPH_NODE_EVENTS": nodes,
            "NVTX_EVENTS": [
                (100, 200, 59, None, None, None, MM, GTID),
                (300, 400, 59, None, None, None, "aten::add", GTID),
            ],
        },
    )


def test_the_loader_keeps_node_ids_and_their_creations(tmp_path):
    tr = load(_export(tmp_path / "n.sqlite"))
    gn = tr.graph_nodes
    node = dict(zip(tr.gpu_ops["start"].tolist(), tr.gpu_ops["graph_node"].tolist(), strict=True))
    created = {
        int(s): int(n)
        for s, n, o in zip(gn["start"], gn["node"], gn["original"], strict=True)
        if o < 0
    }
    clone_of = {int(n): int(o) for n, o in zip(gn["node"], gn["original"], strict=True) if o >= 0}
    # the kernel at 1100 ran A's clone, whose original was created at 115
    assert clone_of[node[1100]] == created[115] and clone_of[node[1200]] == created[315]
    assert node[2130] == node[1100] and len(set(node.values())) == 2
    assert set(gn["thread"].tolist()) == {0}


def test_replayed_kernels_are_charged_through_their_nodes(tmp_path):
    t = op_table(attribute(load(_export(tmp_path / "n.sqlite"))))
    rows = {r["name"]: r for r in t.ops}
    assert rows["aten::mm"]["graph_kernel_ns"] == 100 + 100
    assert rows["aten::mm"]["input_dims"] == [[8, 4], [4, 2]] and rows["aten::mm"]["calls"] == 2
    assert rows["aten::add"]["graph_kernel_ns"] == 30 + 30
    g = t.attribution["graph_replays"]
    assert g["matched_launches"] == g["matched_by_node_ids"] == 2
    assert t.attribution["unattributed"] == []


def test_without_the_creations_the_replays_fall_back_to_the_sequence(tmp_path):
    # the capture (in the trace) matches both replays by kinds, but they ran their kernels in
    # different orders: one captured graph replays the same kernels every time, so which
    # replay follows the capture's order cannot be told; both stay unattributed
    t = op_table(attribute(load(_export(tmp_path / "n.sqlite", creations=False))))
    g = t.attribution["graph_replays"]
    assert g["matched_by_node_ids"] == 0 and g["matched_launches"] == 0
    assert {u["code"]: u["kernel_ns"] for u in t.attribution["unattributed"]} == {
        "graph_ambiguous": 2 * 130
    }


def test_a_capture_across_forked_streams_is_not_matched_by_sequence():
    api = [
        {"name": "cudaStreamBeginCapture", "start": 0, "end": 2, "correlation": 1},
        {"name": "cudaLaunchKernel", "start": 12, "end": 14, "correlation": 2},
        {"name": "cudaStreamWaitEvent", "start": 16, "end": 17, "correlation": 3},
        {"name": "cudaLaunchKernel", "start": 22, "end": 24, "correlation": 4},
        {"name": "cudaStreamEndCapture", "start": 30, "end": 32, "correlation": 5},
        {"name": "cudaGraphLaunch", "start": 100, "end": 105, "correlation": 9},
    ]
    host = [
        {"name": "aten::mm", "start": 10, "end": 15},
        {"name": "aten::add", "start": 20, "end": 25},
    ]
    ops = [
        {"name": "k1", "start": 200, "end": 300, "correlation": 9},
        {"name": "k2", "start": 300, "end": 330, "correlation": 9},
    ]
    t = op_table(attribute(make_trace(ops, api, host_ops=host)))
    assert {u["code"]: u["kernel_ns"] for u in t.attribution["unattributed"]} == {
        "graph_branches": 130
    }
