"""Per-call bytes of collectives in every loader (ranges.bytes; gpu_ops.bytes, collective,
group_size of communication ops) and nccl-tests' algbw / busbw from them, against sizes and
bandwidths computed here by hand from the args the traces carry."""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import nsys_synth
from helpers.recording_factory import make_recording
from helpers.synth import make_trace

from pytimings.analysis.attribution import attribute
from pytimings.analysis.classes import COMM
from pytimings.analysis.collectives import bandwidth, collective_mask
from pytimings.ingest import load
from pytimings.ingest.recording import load_recording_trace
from pytimings.model.comm import COLLECTIVES, bus_factor, collective_of, message_bytes
from pytimings.record import storage
from pytimings.session import Analysis

ELEMENT = {"Float": 4, "BFloat16": 2, "Half": 2, "Long": 8, "Int": 4, "Byte": 1}


@pytest.mark.parametrize(
    ("name", "collective"),
    [
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_gather"),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "all_reduce"),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "reduce_scatter"),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long)", "sendrecv"),
        ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*)", "broadcast"),
        ("ncclAllReduce", "all_reduce"),
        ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(...)", "all_reduce"),
        ("multimem_all_reduce_kernel<c10::BFloat16, 16>", "all_reduce"),
        ("_allgather_base", "all_gather"),
        ("allgather_into_tensor_coalesced", "all_gather"),
        ("reduce_scatter_tensor_coalesced", "reduce_scatter"),
        ("alltoall_base", "all_to_all"),
        ("all_to_all_single", "all_to_all"),
        ("reduce", "reduce"),
        ("send", "sendrecv"),
        ("barrier", None),
        ("gemm", None),
    ],
)
def test_collective_names(name: str, collective: str | None) -> None:
    assert collective_of(name) == collective


def test_bus_factors_and_message_size_by_hand() -> None:
    assert bus_factor("all_reduce", 8) == 2 * 7 / 8
    assert bus_factor("all_gather", 8) == bus_factor("reduce_scatter", 8) == 7 / 8
    assert bus_factor("all_to_all", 4) == 3 / 4
    assert bus_factor("broadcast", 8) == bus_factor("sendrecv", 2) == bus_factor("reduce", 3) == 1
    assert message_bytes(25136, 201088, "BFloat16") == 201088 * 2  # the gathered output
    assert message_bytes(1000, 125, "Float") == 4000  # reduce_scatter: the whole input
    assert message_bytes(None, 7, "Half") == 14
    assert message_bytes(5, 5, "NoSuchType") == 0  # unknown dtype: unknown size


# -- recordings: the region's nbytes ------------------------------------------------------


def test_recording_ranges_and_ops_carry_bytes(tmp_path: Path) -> None:
    rows = [
        {"name": "step", "kind": "compute", "start": 0, "end": 10_000},
        # the torch.distributed wrapper's region: nbytes and the group size as payload
        {"name": "dist.all_reduce", "kind": "comm", "start": 100, "end": 200, "depth": 1,
         "gpu": (300, 1300), "stream": 5, "nbytes": 8 << 20, "payload": 8},
        {"name": "dist.all_gather", "kind": "comm", "start": 2000, "end": 2100, "depth": 1,
         "gpu": (2200, 4200), "stream": 5, "nbytes": 1 << 20, "payload": 4},
        # a comm region of the user's own: bytes, but no collective and no group size
        {"name": "kv_push", "kind": "comm", "start": 5000, "end": 5100, "depth": 1,
         "gpu": (5200, 6200), "stream": 5, "nbytes": 4096},
        {"name": "host_only", "kind": "host", "start": 7000, "end": 7100, "nbytes": 123},
    ]  # fmt: skip
    path = storage.save(tmp_path / "r.pyt", make_recording(rows))
    t = load_recording_trace(path)
    names = [t.strings[i] for i in t.ranges["name"]]
    got = dict(zip(names, t.ranges["bytes"].tolist(), strict=True))
    assert got == {
        "step": -1,
        "dist.all_reduce": 8 << 20,
        "dist.all_gather": 1 << 20,
        "kv_push": 4096,
        "host_only": 123,
    }
    ops = {t.strings[n]: i for i, n in enumerate(t.gpu_ops["name"])}
    g = t.gpu_ops
    ar, ag, kv = ops["dist.all_reduce"], ops["dist.all_gather"], ops["kv_push"]
    assert (g["bytes"][ar], g["group_size"][ar], COLLECTIVES[g["collective"][ar]]) == (
        8 << 20,
        8,
        "all_reduce",
    )
    assert (g["bytes"][ag], g["group_size"][ag], COLLECTIVES[g["collective"][ag]]) == (
        1 << 20,
        4,
        "all_gather",
    )
    assert (g["bytes"][kv], g["group_size"][kv], g["collective"][kv]) == (0, -1, -1)
    a = attribute(t)
    calls = a.comm_bandwidth.calls
    i = int(np.flatnonzero(calls["row"] == ar)[0])
    algbw = (8 << 20) / 1000  # bytes per ns = GB/s
    assert calls["algbw_gbps"][i] == pytest.approx(algbw)
    assert calls["busbw_gbps"][i] == pytest.approx(algbw * 2 * 7 / 8)
    j = int(np.flatnonzero(calls["row"] == ag)[0])
    assert calls["busbw_gbps"][j] == pytest.approx((1 << 20) / 2000 * 3 / 4)


# -- Kineto: the NCCL kernel's args ------------------------------------------------------


def _kineto(tmp_path: Path, kernels: list[dict[str, Any]]) -> Path:
    events: list[dict[str, Any]] = []
    for i, k in enumerate(kernels):
        corr = 10 + i
        t0 = 1000.0 + 100 * i
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                       "tid": 2, "ts": t0, "dur": 5.0, "args": {"correlation": corr}})  # fmt: skip
        args = {"correlation": corr, "device": 0, "stream": 7, **k["args"]}
        events.append({"ph": "X", "cat": "kernel", "name": k["name"], "pid": 0, "tid": 7,
                       "ts": t0 + 10, "dur": k["dur"], "args": args})  # fmt: skip
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": 0}}))
    return path


def test_kineto_nccl_kernel_args(tmp_path: Path) -> None:
    comm = {"Process Group Name": "0", "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"}
    path = _kineto(
        tmp_path,
        [
            {"name": "ncclDevKernel_AllGather_RING_LL", "dur": 20.0,
             "args": {**comm, "Collective name": "_allgather_base", "In msg nelems": 25136,
                      "Out msg nelems": 201088, "Group size": 8, "dtype": "BFloat16"}},
            {"name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "dur": 50.0,
             "args": {**comm, "Collective name": "allreduce", "In msg nelems": 1 << 20,
                      "Out msg nelems": 1 << 20, "Group size": 8, "dtype": "Float"}},
            {"name": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", "dur": 30.0,
             "args": {**comm, "Collective name": "alltoall_base", "In msg nelems": 4096,
                      "Out msg nelems": 4096, "Group size": 4, "dtype": "Weird"}},
            {"name": "ncclKernel_AllReduce_RING_LL_Sum_float", "dur": 10.0, "args": {}},
            {"name": "gemm", "dur": 40.0, "args": {}},
        ],
    )  # fmt: skip
    t = load(path)
    g = t.gpu_ops
    by = {t.strings[n]: i for i, n in enumerate(g["name"])}
    want = {
        "ncclDevKernel_AllGather_RING_LL": (201088 * 2, 8, "all_gather"),
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL": ((1 << 20) * 4, 8, "all_reduce"),
        # an unknown dtype: the size is unknown; the collective and group still known
        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t": (0, 4, "all_to_all"),
        "ncclKernel_AllReduce_RING_LL_Sum_float": (0, -1, None),
        "gemm": (0, -1, None),
    }
    for name, (nbytes, group, coll) in want.items():
        i = by[name]
        got = COLLECTIVES[g["collective"][i]] if g["collective"][i] >= 0 else None
        assert (int(g["bytes"][i]), int(g["group_size"][i]), got) == (nbytes, group, coll), name
    assert (t.ranges["bytes"] == -1).all()
    b = bandwidth(t, attribute(t).classes)
    s = {row["collective"]: row for row in b.to_dicts()}
    # all_gather: 402,176 B in 20 µs; busbw x 7/8. all_reduce: 4 MiB in 50 µs; x 2*7/8
    assert s["all_gather"]["algbw_gbps"] == pytest.approx(402176 / 20_000)
    assert s["all_gather"]["busbw_gbps"] == pytest.approx(402176 / 20_000 * 7 / 8)
    # the unsized all_reduce kernel (named AllReduce) counts as a call without a size
    assert (s["all_reduce"]["calls"], s["all_reduce"]["sized_calls"]) == (2, 1)
    assert s["all_reduce"]["busbw_gbps"] == pytest.approx((1 << 22) / 50_000 * 1.75)
    assert s["all_to_all"]["algbw_gbps"] is None and s["all_to_all"]["group_sizes"] == [4]


def _kernel_args(path: Path) -> list[dict[str, Any]]:
    doc = json.loads(gzip.open(path).read())
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]


@pytest.mark.shared
@pytest.mark.parametrize(
    "rel", ["hta/nccl_parser_config/nccl_data.json.gz", "tracelens/b200/eager_trace.json.gz"]
)
def test_real_kineto_nccl_sizes(shared_dir: Path, rel: str) -> None:
    path = shared_dir / "data/external" / rel
    kernels = [k for k in _kernel_args(path) if "Collective name" in k.get("args", {})]
    assert kernels
    t = load(path)
    g = t.gpu_ops
    for k in kernels:
        a = k["args"]
        i = int(np.flatnonzero(g["correlation"] == a["correlation"])[0])
        want = max(a["In msg nelems"], a["Out msg nelems"]) * ELEMENT[a["dtype"]]
        assert int(g["bytes"][i]) == want
        assert int(g["group_size"][i]) == a["Group size"]
        assert COLLECTIVES[g["collective"][i]] == collective_of(a["Collective name"])
    doc = Analysis(attribute(t)).to_document()
    total = sum(r["bytes"] for r in doc["comm_bandwidth"])
    sizes = [max(k["args"]["In msg nelems"], k["args"]["Out msg nelems"]) for k in kernels]
    assert total == sum(
        n * ELEMENT[k["args"]["dtype"]] for n, k in zip(sizes, kernels, strict=True)
    )


def _old_kineto(tmp_path: Path, calls: list[dict[str, Any]], nested: bool = False) -> Path:
    """PyTorch 2.0-era Kineto: each call a c10d op around record_param_comms (Input Dims,
    Input type only) around the launches of its kernels; nothing on the kernels.
    ``nested``: a runtime call on the same thread spans all the others (the thread's calls
    then end out of start order), launching nothing."""
    events: list[dict[str, Any]] = []
    if nested:
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize",
                       "pid": 1, "tid": 2, "ts": 900.0, "dur": 100_000.0,
                       "args": {"correlation": 9}})  # fmt: skip
    corr = 10
    for i, c in enumerate(calls):
        t0 = 1000.0 + 1000 * i
        events.append({"ph": "X", "cat": "cpu_op", "name": c["op"], "pid": 1, "tid": 2,
                       "ts": t0, "dur": 500.0, "args": {}})  # fmt: skip
        events.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1,
                       "tid": 2, "ts": t0 + 10, "dur": 400.0,
                       "args": {"Input Dims": c["dims"], "Input type": c["types"]}})  # fmt: skip
        for j, kernel in enumerate(c["kernels"]):
            corr += 1
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                           "pid": 1, "tid": 2, "ts": t0 + 20 + 10 * j, "dur": 5.0,
                           "args": {"correlation": corr}})  # fmt: skip
            events.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7,
                           "ts": t0 + 100 + 100 * j, "dur": 50.0,
                           "args": {"correlation": corr, "device": 0, "stream": 7}})  # fmt: skip
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": 0}}))
    return path


@pytest.mark.parametrize("nested", [False, True], ids=["calls_in_order", "nested_call"])
def test_old_kineto_sizes_from_record_param_comms(tmp_path: Path, nested: bool) -> None:
    send = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8"
    path = _old_kineto(
        tmp_path,
        [
            {"op": "c10d::alltoall_base_", "dims": [[6144], []], "types": ["float", "Scalar"],
             "kernels": [send]},
            {"op": "c10d::allreduce_", "dims": [[], []], "types": ["TensorList", "Scalar"],
             "kernels": ["ncclKernel_AllReduce_RING_LL_Sum_float"]},
            {"op": "c10d::broadcast_", "dims": [[3, 5], []], "types": ["long", "Scalar"],
             "kernels": ["ncclKernel_Broadcast_RING_LL_Sum_int8"]},
            # all_gather's size is its output: one input does not give it
            {"op": "c10d::_allgather_base_", "dims": [[100]], "types": ["c10::BFloat16"],
             "kernels": ["ncclDevKernel_AllGather_RING_LL"]},
            # two collective kernels under one op: how the bytes split is unknown
            {"op": "c10d::allreduce_", "dims": [[64]], "types": ["float"],
             "kernels": ["ncclKernel_AllReduce_A", "ncclKernel_AllReduce_B"]},
        ],
        nested,
    )  # fmt: skip
    t = load(path)
    g = t.gpu_ops
    got = [
        (t.strings[n], int(b), COLLECTIVES[c] if c >= 0 else None)
        for n, b, c in zip(g["name"], g["bytes"], g["collective"], strict=True)
    ]
    assert got == [
        (send, 6144 * 4, "all_to_all"),  # the c10d op names it, not the SendRecv kernel
        ("ncclKernel_AllReduce_RING_LL_Sum_float", 0, "all_reduce"),
        ("ncclKernel_Broadcast_RING_LL_Sum_int8", 15 * 8, "broadcast"),
        ("ncclDevKernel_AllGather_RING_LL", 0, "all_gather"),
        ("ncclKernel_AllReduce_A", 0, None),
        ("ncclKernel_AllReduce_B", 0, None),
    ]
    rows = {r["collective"]: r for r in bandwidth(t, attribute(t).classes).to_dicts()}
    assert rows["all_to_all"]["algbw_gbps"] == pytest.approx(6144 * 4 / 50_000)


def _param_comms_sizes(path: Path) -> tuple[int, int]:
    """(sized calls, their bytes) of a Kineto trace computed here from its JSON: each NCCL
    kernel whose launch lies inside one record_param_comms on its thread with one typed
    input, of a collective sized by its input (an all_to_all's c10d op)."""
    doc = json.loads(gzip.open(path).read())
    ev = doc["traceEvents"]
    size = {"float": 4, "int": 4, "long int": 8, "long": 8, "unsigned char": 1}
    launch = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime"}
    params = [e for e in ev if e.get("name") == "record_param_comms"]
    n = total = 0
    for k in (e for e in ev if e.get("cat") == "kernel" and "nccl" in e["name"]):
        c = launch[k["args"]["correlation"]]
        around = [p for p in params if p["tid"] == c["tid"] and p["ts"] <= c["ts"]
                  and c["ts"] + c["dur"] <= p["ts"] + p["dur"]]  # fmt: skip
        if len(around) != 1 or "AllReduce" in k["name"]:  # DLRM's all-reduces: tensor lists
            continue
        dims, types = around[0]["args"]["Input Dims"][0], around[0]["args"]["Input type"][0]
        assert types in size, types
        n += 1
        total += int(np.prod(dims)) * size[types]
    return n, total


@pytest.mark.shared
@pytest.mark.parametrize("rank", range(8))
def test_param_dlrm_collectives_have_sizes(shared_dir: Path, rank: int) -> None:
    path = next((shared_dir / "data/external/param/dlrm_kineto").glob(f"worker{rank}_*.json.gz"))
    n, total = _param_comms_sizes(path)
    rows = attribute(load(path)).comm_bandwidth.to_dicts()
    a2a = next(r for r in rows if r["collective"] == "all_to_all")
    assert n == 5 and (a2a["sized_calls"], a2a["bytes"]) == (n, total)
    assert a2a["algbw_gbps"] > 0


def test_copies_are_never_collectives(tmp_path: Path) -> None:
    # a copy kernel launched inside a comm range is comm time, not a collective
    path = _kineto(
        tmp_path,
        [
            {"name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "dur": 50.0, "args": {}},
            {"name": "direct_copy_kernel_cuda", "dur": 20.0, "args": {}},
        ],
    )
    t = load(path)
    classes = np.full(len(t.gpu_ops), COMM, dtype=np.int8)
    assert collective_mask(t, classes).tolist() == [True, False]
    assert bandwidth(t, classes).calls["collective"].tolist() == ["all_reduce"]


# -- the analysis: algbw, busbw, and the single-rank finding -----------------------------


def _one_rank(durations_us: list[int], nbytes: int, group: int) -> Any:
    ops = []
    for i, d in enumerate(durations_us):
        t = 1_000_000 * (i + 1)
        ops.append({"start": t, "end": t + d * 1000, "name": "ncclDevKernel_AllReduce_Sum_bf16",
                    "bytes": nbytes, "group_size": group,
                    "collective": COLLECTIVES.index("all_reduce")})  # fmt: skip
    return make_trace(ops)


def test_bandwidth_sums_by_hand() -> None:
    t = _one_rank([100, 100, 300, 500], 8 << 20, 8)
    b = bandwidth(t, attribute(t).classes)
    (row,) = b.to_dicts()
    assert row["bytes"] == 4 * (8 << 20) and row["sized_ns"] == 1_000_000
    assert row["algbw_gbps"] == pytest.approx(4 * (8 << 20) / 1e6)
    assert row["busbw_gbps"] == pytest.approx(4 * (8 << 20) * 1.75 / 1e6)
    c = b.calls
    np.testing.assert_allclose(c["busbw_gbps"] / c["algbw_gbps"], 1.75)  # invariant
    np.testing.assert_allclose(c["algbw_gbps"], (8 << 20) / (c["duration_ns"]))


def test_single_rank_finding_says_peers() -> None:
    a = attribute(_one_rank([100, 100, 300, 500], 8 << 20, 8))
    (f,) = [f for f in Analysis(a).findings if "reach busbw" in f.title]
    e = f.evidence
    # the fastest call of the size takes 100 µs: 0 + 0 + 200 + 400 µs beyond it
    assert e["beyond_fastest_ns"] == f.loss_ns == 600_000
    assert e["busbw_gbps"] == pytest.approx(4 * (8 << 20) * 1.75 / 1e6)
    assert "4 all_reduce calls (33.6 MB in 1.00 ms) reach busbw 58.72 GB/s" in f.title
    assert "0.60 ms (60.0%) of their time is beyond the fastest call" in f.title
    assert "one rank of 8 loaded" in f.title and "waiting for peers" in f.title
    # a group of one rank has no peers to wait for: no finding
    b = attribute(_one_rank([100, 100, 300, 500], 8 << 20, 1))
    assert not [f for f in Analysis(b).findings if "reach busbw" in f.title]


# -- Nsight Systems: NCCL's typed NVTX payloads -----------------------------------------

INIT, COLL, P2P = 16777218, 16777223, 16777226  # NCCL's schema ids (as in ../shared exports)


def _blob(domain: int, schema: int, payload: bytes) -> bytes:
    return struct.pack("<QQQQ", domain, schema, len(payload), 32 + len(payload)) + payload


def _nvtx(start: int, end: int, name_id: int, blob: bytes | None) -> tuple[Any, ...]:
    # start, end, eventType 59 (push/pop), ..., globalTid, endGlobalTid, textId, domainId,
    # the payload union members (NULL), jsonTextId, jsonText, binaryData
    return (start, end, 59, None, None, None, None, nsys_synth.GTID, None, name_id, 1,
            None, None, None, None, None, None, None, None, blob)  # fmt: skip


def test_nsys_nccl_payloads_give_ops_their_size(tmp_path: Path) -> None:
    comm = 0xABCDEF
    size = 8 << 20
    init = struct.pack("<QiiI", comm, 4, 1, 0) + b"\0" * 4  # communicator, ranks, rank, device
    allreduce = struct.pack("<QQI", comm, size, 0) + b"\0" * 4  # communicator, size, op
    send = struct.pack("<QQi", comm, 4096, 3) + b"\0" * 4  # communicator, size, peer
    rows: dict[str, list[Any]] = {
        "StringIds": list(
            enumerate(
                [
                    "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                    "gemm",
                    "cudaLaunchKernel_v7000",
                    "ncclAllReduce",
                    "ncclSend",
                    "ncclCommInitRank",
                    "NCCL",
                ],
                start=1,
            )
        ),
        "NVTX_PAYLOAD_SCHEMAS": [
            (1, s, None, 1, None, n, 24) for s, n in ((INIT, 4), (COLL, 3), (P2P, 3))
        ],
        "NVTX_PAYLOAD_SCHEMA_ENTRIES": [
            (1, INIT, 0, None, 18, "NCCL communicator ID", None, None, None),
            (1, INIT, 1, None, 5, "No. of ranks", None, None, 8),
            (1, INIT, 2, None, 5, "Rank", None, None, 12),
            (1, COLL, 0, None, 18, "NCCL communicator ID", None, None, None),
            (1, COLL, 1, None, 22, "Message size [bytes]", None, None, 8),
            (1, COLL, 2, None, 16777232, "Reduction operation", None, None, 16),
            (1, P2P, 0, None, 18, "NCCL communicator ID", None, None, None),
            (1, P2P, 1, None, 22, "Message size [bytes]", None, None, 8),
            (1, P2P, 2, None, 5, "Peer rank", None, None, 16),
        ],
        "NVTX_EVENTS": [
            (1, None, 75, None, None, None, None, nsys_synth.GTID, None, 7, 1),  # domain NCCL
            _nvtx(10, 20, 6, _blob(1, INIT, init)),
            _nvtx(100, 200, 4, _blob(1, COLL, allreduce)),  # launches the NCCL kernel
            _nvtx(400, 450, 5, _blob(1, P2P, send)),  # grouped: launches nothing itself
            _nvtx(500, 600, 4, _blob(1, COLL, allreduce)),  # launches two ops: no one's
            _nvtx(700, 800, 4, _blob(1, COLL, allreduce)[:-4]),  # cut short: not decoded
            _nvtx(900, 950, 4, None),
        ],
        "CUPTI_ACTIVITY_KIND_RUNTIME": [
            (150, 160, 0, nsys_synth.GTID, 1, 3),
            (510, 520, 0, nsys_synth.GTID, 2, 3),
            (530, 540, 0, nsys_synth.GTID, 3, 3),
        ],
        "CUPTI_ACTIVITY_KIND_KERNEL": [
            (300, 1300, 0, 1, 7, 1, nsys_synth.GPID, 1, 1),
            (1400, 1500, 0, 1, 7, 2, nsys_synth.GPID, 1, 1),
            (1500, 1600, 0, 1, 8, 3, nsys_synth.GPID, 2, 2),
        ],
    }
    t = load(nsys_synth.write(tmp_path / "nccl.sqlite", rows))
    names = [t.strings[i] for i in t.ranges["name"]]
    assert list(zip(names, t.ranges["bytes"].tolist(), strict=True)) == [
        ("ncclCommInitRank", -1),
        ("ncclAllReduce", size),
        ("ncclSend", 4096),
        ("ncclAllReduce", size),
        ("ncclAllReduce", -1),
        ("ncclAllReduce", -1),
    ]
    assert t.dropped["nvtx_binary_payloads_not_decoded"] == 1
    g = t.gpu_ops
    assert g["bytes"].tolist() == [size, 0, 0]
    assert g["group_size"].tolist() == [4, -1, -1]
    assert g["collective"].tolist() == [COLLECTIVES.index("all_reduce"), -1, -1]
    calls = attribute(t).comm_bandwidth.calls
    assert calls["algbw_gbps"][0] == pytest.approx(size / 1000)
    assert calls["busbw_gbps"][0] == pytest.approx(size / 1000 * 2 * 3 / 4)


@pytest.mark.shared
def test_nsys_group_sizes_are_the_last_init_calls_count_per_communicator() -> None:
    """Per range, the rank count of its communicator's init call (the last one when a
    communicator is initialised twice), -1 when none is known: a dict lookup by hand."""
    from pytimings.ingest import nvtx_payloads as nv

    rng = np.random.default_rng(3)
    for n in (0, 1, 50):
        comm = rng.integers(-1, 6, n)
        ranks = np.where(rng.random(n) < 0.3, rng.integers(-1, 9, n), -1)
        fields = {nv.COMMUNICATOR: comm, nv.RANKS: ranks, nv.MESSAGE_SIZE: np.full(n, -1)}
        sizes: dict[int, int] = {}
        for c, r in zip(comm.tolist(), ranks.tolist(), strict=True):
            if c >= 0 and r > 0:
                sizes[c] = r
        want = [sizes.get(c, -1) for c in comm.tolist()]
        got = nv.group_sizes(fields)
        assert got.dtype == np.int64 and got.tolist() == want


def test_nsys_exports_in_shared_have_no_payload_values(shared_dir: Path) -> None:
    # what docs/collectives.md says: these exports keep NCCL's schemas, not the values
    for rel in ("h200/decode_16steps_h200.sqlite", "external/nsys_ai/mfu_2gpu_after.sqlite"):
        t = load(shared_dir / "data" / rel)
        assert (t.ranges["bytes"] == -1).all() and t.meta["nvtx_sized_ops"] == 0
        assert "nvtx_binary_payloads_not_decoded" not in t.dropped


def test_text_reports_bandwidth_per_collective() -> None:
    from pytimings.report.analysis_text import render_attribution

    a = attribute(_one_rank([100, 100, 300, 500], 8 << 20, 8))
    text = render_attribution(a, Analysis(a).findings, ["r.json"])
    lines = text.splitlines()
    at = lines.index(
        "Collectives: bandwidth (nccl-tests algbw = bytes / time, busbw = algbw x bus factor; GB/s)"
    )
    assert lines[at + 1].split() == ["collective", "calls", "MB", "ranks", "algbw", "busbw"]
    # 4 x 8 MiB = 33.6 MB in 1 ms: algbw 33.55 GB/s, busbw x 1.75 = 58.72 GB/s
    assert lines[at + 3].split() == ["all_reduce", "4", "33.6", "8", "33.55", "58.72"]


def test_summary_equals_a_per_group_recomputation() -> None:
    rng = np.random.default_rng(3)
    n = 2000
    start = np.cumsum(rng.integers(1000, 5000, n))
    ops = [
        {
            "start": int(s),
            "end": int(s) + int(d),
            "name": "ncclDevKernel_Generic",
            "bytes": int(b),
            "group_size": int(g),
            "collective": int(c),
            "rank": int(r),
            "device": int(r),
        }
        for s, d, b, g, c, r in zip(
            start,
            rng.integers(0, 900, n),  # some of zero length: no bandwidth
            rng.integers(0, 1 << 20, n) * (rng.random(n) < 0.8),  # some without a size
            rng.choice([-1, 1, 2, 8], n),
            rng.integers(-1, len(COLLECTIVES), n),
            rng.integers(0, 3, n),
            strict=True,
        )
    ]
    t = make_trace(ops)
    b = bandwidth(t, np.ones(n, dtype=np.int8))
    c, s = b.calls, b.summary
    assert int(s["calls"].sum()) == n
    for i in range(len(s)):
        coll = s["collective"][i]
        m = (c["rank"] == s["rank"][i]) & (c["collective"] == ("" if coll == "unknown" else coll))
        sized = m & (c["bytes"] > 0) & (c["duration_ns"] > 0)
        assert (s["calls"][i], s["sized_calls"][i]) == (m.sum(), sized.sum())
        assert s["bytes"][i] == c["bytes"][sized].sum()
        assert s["sized_ns"][i] == c["duration_ns"][sized].sum()
        bus = sized & ~np.isnan(c["busbw_gbps"])
        if bus.any():
            moved = sum(
                int(x) * bus_factor(COLLECTIVES[t.gpu_ops["collective"][r]], int(g))
                for x, r, g in zip(
                    c["bytes"][bus], c["row"][bus], c["group_size"][bus], strict=True
                )
            )
            assert s["busbw_gbps"][i] == pytest.approx(moved / c["duration_ns"][bus].sum())
        else:
            assert np.isnan(s["busbw_gbps"][i])
        assert s["group_sizes"][i] == sorted({int(g) for g in c["group_size"][m] if g > 0})


@pytest.mark.shared
@pytest.mark.parametrize("pattern", ["param/dlrm_kineto/*.json.gz", "hta/trace_filter/*.json.gz"])
def test_real_ranks_waiting_within_exposed_within_partition(shared_dir: Path, pattern: str) -> None:
    files = sorted((shared_dir / "data/external").glob(pattern))
    a = attribute(load(*files))
    c = a.collectives
    assert c is not None and set(c.exposed) == set(range(len(files)))
    w = a.windows
    for r, e in c.exposed.items():
        m = c.table["rank"] == r
        assert e["exposed_ns"] == e["waiting_ns"] + e["transfer_ns"]
        assert 0 <= e["waiting_ns"] <= int(c.table["wait_ns"][m].sum())
        # the matched collectives' exposed time is part of the rank's comm_exposed
        assert e["exposed_ns"] <= int(w["comm_exposed_ns"][w["rank"] == r].sum())
        assert e["exposed_ns"] <= int((c.table["end_ns"] - c.table["start_ns"])[m].sum())
