"""The comm kernel names of contract v3 (docs/attribution.md, "Classifying GPU ops"): one
kernel per rule that only that rule matches, kernels whose names merely resemble one stay
compute, and a DeepEP-style expert-parallel step on a side stream is comm, overlapped
where compute runs and exposed elsewhere, to the ns against a timeline computed here."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.synth import make_trace

from pytimings.analysis.attribution import attribute
from pytimings.analysis.classes import COMM, COMM_KERNEL_NAMES, COMPUTE, classify
from pytimings.session import Analysis

US = 1_000

# rule -> a kernel name of the kind seen in real traces that only this rule matches
BY_RULE = {
    "nccl": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
    "allreduce": "void trtllm::oneshotAllreduceKernel<__nv_bfloat16>(Params)",
    "all_reduce": "void flashinfer::all_reduce_fusion_kernel<float>(Params)",
    "allgather": "ck_tile::AllGatherKernel<bf16>",
    "all_gather": "void all_gather_into_tensor_kernel<8>(float*)",
    "reduce_scatter": "void symm_mem::reduce_scatter_kernel<bf16>(...)",
    "reducescatter": "ReduceScatterTwoShot<float>",
    "alltoall": "void moe::AlltoallCombineKernel<16>()",
    "all_to_all": "void all_to_all_single_kernel<int>()",
    "all2all": "void pplx::all2all_dispatch<bf16>()",
    "cross_device_reduce": "void vllm::cross_device_reduce_2stage<__nv_bfloat16, 8>(...)",
    "multimem": "void multimem_ld_reduce_kernel<bf16>(...)",
    "nvshmem": "nvshmemi_transfer_rma_kernel<(nvshmemi_op_t)0>",
    "mscclpp": "void mscclpp_put_packet_kernel(...)",
    "deep_ep": "void deep_ep::layout::get_dispatch_layout<256>(...)",
    "dpsk::ep": "void dpsk::ep::cached_notify<8>(int*)",
    "::internode::": "void uccl::internode::combine<true, 8>(...)",
    "::intranode::": "void xep::intranode::notify_dispatch<8>(int*)",
}
# names that resemble a rule but that the contract does not name: compute
RESEMBLING = [
    "sm90_xmma_gemm_bf16_epilogue",  # 'ep', no 'dpsk::ep'
    "void dpsk_gemm::ep_fused<8>()",  # 'dpsk' and 'ep', not 'dpsk::ep'
    "deepep_style_gemm",  # no 'deep_ep'
    "internode_dispatch_layout_kernel",  # no '::internode::' namespace
    "void at::native::reduce_kernel<512, 1>(...)",
    "void at::native::scatter_gather_elementwise_kernel<128, 4>(...)",
    "multi_mem_copy_kernel",
    "nvshm_like_copy",
    "all_2_all_like_gemm",
    "crossdevicereduce_gemm",
    "all_reducer_stats",  # 'all_reduce' is in it: comm by the contract, checked below
]


def _kernels(names):
    return make_trace(
        [{"start": 10 * i, "end": 10 * i + 5, "name": n} for i, n in enumerate(names)]
    )


def test_the_rules_are_the_contracts():
    assert set(BY_RULE) == set(COMM_KERNEL_NAMES)


@pytest.mark.parametrize("rule", sorted(BY_RULE))
def test_each_rule_alone_makes_comm(rule):
    name = BY_RULE[rule]
    hits = [r for r in COMM_KERNEL_NAMES if r in name.lower()]
    assert hits == [rule]  # the example tests this rule and no other
    for spelled in (name, name.upper(), name.lower()):  # any case
        assert classify(_kernels([spelled])).tolist() == [COMM]


def test_resembling_names_stay_compute():
    cls = classify(_kernels(RESEMBLING)).tolist()
    assert cls[:-1] == [COMPUTE] * (len(RESEMBLING) - 1)
    assert cls[-1] == COMM  # contains 'all_reduce': the contract says comm


def _timeline(intervals, n):
    t = np.zeros(n, dtype=bool)
    for s, e in intervals:
        t[s:e] = True
    return t


def test_deepep_kernels_on_a_side_stream_overlap_where_compute_runs():
    compute = [(0, 100 * US), (150 * US, 300 * US), (310 * US, 315 * US)]
    comm = [
        ("void dpsk::ep::internode::dispatch<8, 4096>(...)", 50 * US, 180 * US),
        ("void dpsk::ep::internode::notify_dispatch<8>(...)", 280 * US, 330 * US),
        ("void dpsk::ep::internode::combine<bf16, 8>(...)", 320 * US, 350 * US),
    ]
    ops = [{"start": s, "end": e, "name": "sm90_gemm_bf16", "stream": 7} for s, e in compute]
    ops += [{"start": s, "end": e, "name": n, "stream": 21} for n, s, e in comm]
    a = attribute(make_trace(ops))
    assert classify(a.trace).tolist() == [COMPUTE] * 3 + [COMM] * 3
    # independent: one boolean per ns
    n = 350 * US
    c = _timeline(compute, n)
    m = _timeline([(s, e) for _, s, e in comm], n)
    t = a.totals
    assert t["window_ns"] == n
    assert t["comm_overlapped_ns"] == int((c & m).sum()) == 105 * US
    assert t["comm_exposed_ns"] == int((m & ~c).sum()) == 95 * US
    assert t["compute_ns"] == int((c & ~m).sum()) == 150 * US
    assert t["idle_other_ns"] == int((~c & ~m).sum())


def _side_stream_trace(dispatch="void moe::ep_dispatch<8>(int*)", side=21, extra=()):
    ops = [
        {"start": 0, "end": 100 * US, "name": "sm90_gemm_bf16", "stream": 7},
        {"start": 150 * US, "end": 300 * US, "name": "sm90_gemm_bf16", "stream": 7},
        {"start": 50 * US, "end": 180 * US, "name": dispatch, "stream": side},
        {"start": 280 * US, "end": 350 * US, "name": "void moe::ep_combine<8>(int*)",
         "stream": side},
        *extra,
    ]  # fmt: skip
    return make_trace(ops)


def _unclassified(a):
    return [f for f in Analysis(a).findings if "no comm rule" in f.title]


def test_unclassified_comm_like_kernels_get_a_capture_finding():
    a = attribute(_side_stream_trace())
    (f,) = _unclassified(a)
    # independent: one boolean per ns
    n = 350 * US
    c = _timeline([(0, 100 * US), (150 * US, 300 * US)], n)
    k = _timeline([(50 * US, 180 * US), (280 * US, 350 * US)], n)
    e = f.evidence
    assert e["under_compute_ns"] == int((c & k).sum()) == 100 * US
    assert e["if_comm_ns"] == {"comm_overlapped": 100 * US, "comm_exposed": int((k & ~c).sum())}
    assert f.loss_ns == e["distorts"]["compute_ns"] == int(k.sum()) == 200 * US
    assert [x["hints"] for x in e["kernels"]] == [["dispatch", "ep"], ["combine", "ep"]]
    assert f.layer == "capture" and f.title.startswith("capture: 2 kernels on 1 side stream")
    assert "overlap compute for 100.00 ms" not in f.title and "for 0.10 ms" in f.title
    assert "--comm-kernel GLOB per name, e.g. 'ep_dispatch*'" in f.title
    # the suggested glob does what the finding says
    b = attribute(a.trace, comm_kernels=[x["short_name"].split("<")[0] + "*" for x in e["kernels"]])
    assert not _unclassified(b)
    assert b.totals["comm_overlapped_ns"] == 100 * US
    assert b.totals["comm_exposed_ns"] == e["if_comm_ns"]["comm_exposed"]


def test_a_hintless_kernel_on_a_comm_stream_counts_and_plain_compute_does_not():
    nccl = {"start": 190 * US, "end": 200 * US, "name": "ncclDevKernel_AllReduce", "stream": 21}
    a = attribute(_side_stream_trace(dispatch="custom_pack_kernel", extra=[nccl]))
    (f,) = _unclassified(a)
    pack = [x for x in f.evidence["kernels"] if x["short_name"] == "custom_pack_kernel"]
    assert pack[0]["hints"] == [] and pack[0]["on_comm_stream"] == 1
    assert "streams with comm kernels" in f.title
    # a side-stream compute kernel with no hint and no comm beside it: no finding
    assert not _unclassified(attribute(_plain()))


def _plain():
    return make_trace(
        [
            {"start": 0, "end": 100 * US, "name": "sm90_gemm_bf16", "stream": 7},
            {"start": 50 * US, "end": 180 * US, "name": "layernorm_kernel", "stream": 21},
        ]
    )


def test_no_finding_without_overlap_or_on_the_main_stream():
    serial = make_trace(
        [
            {"start": 0, "end": 100 * US, "name": "sm90_gemm_bf16", "stream": 7},
            {"start": 100 * US, "end": 180 * US, "name": "void moe::ep_dispatch<8>(int*)",
             "stream": 21},
            {"start": 180 * US, "end": 200 * US, "name": "void moe::ep_combine<8>()", "stream": 7},
        ]
    )  # fmt: skip
    assert not _unclassified(attribute(serial))
    # the DeepEP-named dispatch is comm by the contract: only the combine beside it is named
    (f,) = _unclassified(attribute(_side_stream_trace("void dpsk::ep::internode::dispatch<8>")))
    assert [x["short_name"] for x in f.evidence["kernels"]] == ["ep_combine<8>"]
    assert f.title.startswith("capture: 1 kernel on 1 side stream ('ep_combine<8>') overlaps")


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_gather"),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "all_reduce"),
        ("ncclKernel_ReduceScatter_RING_SIMPLE_Sum_bf16", "reduce_scatter"),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", "sendrecv"),
        ("ncclKernel_Reduce_RING_LL_Sum_float", "reduce"),
        ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(...)", "all_reduce"),
        ("void deep_ep::internode::dispatch<true, 8>(...)", "dispatch"),
        ("ncclKernel_Broadcast_RING_LL_Sum_int8_t", "broadcast"),
        ("nvshmem_barrier_kernel", "other"),
    ],
)
def test_the_collective_a_comm_kernel_names(name: str, kind: str) -> None:
    from pytimings.analysis.classes import comm_kind

    assert comm_kind(name) == kind
