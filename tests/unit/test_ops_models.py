"""Per-op perf models: each family's FLOPs and bytes worked out by hand, categories, roofline.

Every expected number is written out from the formula in docs/ops.md with the shapes of the
call, not taken from the model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytimings.analysis.ops import (
    CATEGORIES,
    FAMILIES,
    TABLE,
    GpuSpec,
    OpCall,
    OpCost,
    category_of_kernel,
    gpu_from_trace,
    gpu_spec,
    model_op,
    roofline,
)
from pytimings.errors import UsageError
from pytimings.report.ops_text import unknown_gpu

BF16, F32, F8 = "c10::BFloat16", "float", "c10::Float8_e4m3fn"


def call(
    name: str,
    dims: list[object],
    types: list[str],
    concrete: list[str] | None = None,
    kernels: tuple[str, ...] = (),
) -> OpCall:
    return OpCall(name, tuple(dims), tuple(types), tuple(concrete or ()), (), kernels)


def cost(c: OpCall) -> OpCost:
    out = model_op(c)
    assert out.category in CATEGORIES
    return out


# --- GEMM ---------------------------------------------------------------------------------


def test_mm_flops_and_bytes_by_hand() -> None:
    m, k, n = 128, 64, 32
    got = cost(call("aten::mm", [[m, k], [k, n]], [BF16, BF16]))
    assert (got.category, got.family, got.dtype) == ("gemm", "gemm", "bf16")
    assert got.gflops == pytest.approx(2 * 128 * 32 * 64 / 1e9)
    assert got.bytes == 2 * (128 * 64 + 64 * 32 + 128 * 32)


def test_addmm_counts_the_bias_add_and_read() -> None:
    got = cost(
        call(
            "aten::addmm",
            [[32], [128, 64], [64, 32], [], []],
            [BF16, BF16, BF16, "Scalar", "Scalar"],
            ["", "", "", "1", "1"],
        )
    )
    assert got.gflops == pytest.approx((2 * 128 * 32 * 64 + 128 * 32) / 1e9)
    assert got.bytes == 2 * (128 * 64 + 64 * 32 + 128 * 32 + 32)


def test_bmm_baddbmm_matmul_linear_by_hand() -> None:
    bmm = cost(call("aten::bmm", [[4, 16, 8], [4, 8, 2]], [F32, F32]))
    assert bmm.gflops == pytest.approx(2 * 4 * 16 * 2 * 8 / 1e9)
    assert bmm.bytes == 4 * 4 * (16 * 8 + 8 * 2 + 16 * 2)
    assert bmm.dtype == "fp32"
    bad = cost(
        call(
            "aten::baddbmm",
            [[4, 16, 2], [4, 16, 8], [4, 8, 2], [], []],
            [F32, F32, F32, "Scalar", "Scalar"],
        )
    )
    assert bad.gflops == pytest.approx((2 * 4 * 16 * 2 * 8 + 4 * 16 * 2) / 1e9)
    assert bad.bytes == 4 * 4 * (16 * 8 + 8 * 2 + 16 * 2 + 16 * 2)
    # matmul broadcasts B (no batch) over A's batch of 3x5: B is read once at its own size
    mat = cost(call("aten::matmul", [[3, 5, 7, 11], [11, 13]], [BF16, BF16]))
    assert mat.gflops == pytest.approx(2 * 15 * 7 * 13 * 11 / 1e9)
    assert mat.bytes == 2 * (3 * 5 * 7 * 11 + 11 * 13 + 15 * 7 * 13)
    lin = cost(call("aten::linear", [[2, 9, 64], [48, 64], [48]], [BF16, BF16, BF16]))
    assert lin.gflops == pytest.approx((2 * 18 * 48 * 64 + 18 * 48) / 1e9)
    assert lin.bytes == 2 * (18 * 64 + 48 * 64 + 48 + 18 * 48)


def test_fp32_gemm_runs_against_tf32_when_its_kernel_says_so() -> None:
    plain = cost(call("aten::mm", [[8, 8], [8, 8]], [F32, F32]))
    tf32 = cost(
        call(
            "aten::mm",
            [[8, 8], [8, 8]],
            [F32, F32],
            kernels=("sm80_xmma_gemm_tf32f32_tf32f32_f32_nn_n_tilesize64x64x16",),
        )
    )
    assert (plain.dtype, tf32.dtype) == ("fp32", "tf32")


def test_scaled_mm_fp8_and_fp4() -> None:
    m, k, n = 256, 512, 128
    fp8 = cost(
        call(
            "aten::_scaled_mm",
            [[m, k], [k, n], [], [], [], [], [], []],
            [F8, F8, F32, F32, "", "", "ScalarType", "Scalar"],
            ["", "", "", "", "", "", "15", "False"],
        )
    )  # out_dtype 15 = bf16
    assert (fp8.dtype, fp8.category) == ("fp8", "gemm")
    assert fp8.gflops == pytest.approx(2 * m * n * k / 1e9)
    # A and B one byte an element, bf16 out, the two 0-dim fp32 scales 4 bytes each
    assert fp8.bytes == m * k + k * n + 2 * m * n + 4 + 4
    # nvfp4: two values of K per stored byte, so K doubles in the FLOPs, not in the bytes
    fp4 = cost(
        call(
            "_C::cutlass_scaled_fp4_mm",
            [[m, n], [m, k // 2], [n, k // 2], [m, k // 16], [n, k // 16], []],
            [BF16, "unsigned char", "unsigned char", F8, F8, F32],
        )
    )
    assert fp4.dtype == "fp4"
    assert fp4.gflops == pytest.approx(2 * m * n * k / 1e9)
    assert fp4.bytes == m * k // 2 + n * k // 2 + 2 * m * n + (m + n) * k // 16 + 4


def test_call_from_kineto_args() -> None:
    args = {
        "Input Dims": [[8, 4], [4, 2]],
        "Input type": ["float", "float"],
        "Concrete Inputs": ["", ""],
        "External id": 3,
    }
    c = OpCall.from_kineto("aten::mm", args, ("gemm_kernel",))
    assert c == OpCall(
        "aten::mm", ([8, 4], [4, 2]), ("float", "float"), ("", ""), (), ("gemm_kernel",)
    )
    assert OpCall.from_kineto("aten::mm", {"Input Dims": None}).input_dims == ()
    # nested lists are kept as tuples, so calls are hashable and equal calls share a model
    assert c.input_dims == ((8, 4), (4, 2))
    assert hash(c) == hash(
        OpCall("aten::mm", ((8, 4), (4, 2)), ("float", "float"), ("", ""), (), ("gemm_kernel",))
    )
    assert model_op(c) is model_op(OpCall.from_kineto("aten::mm", args, ("gemm_kernel",)))


def test_engine_gemm_by_name_pattern() -> None:
    got = cost(call("vllm::gemm_with_dynamic_quant", [[16, 64], [32, 64], []], [BF16, BF16, ""]))
    assert (got.category, got.family) == ("gemm", "gemm")
    assert got.gflops == pytest.approx(2 * 16 * 32 * 64 / 1e9)


# --- attention ----------------------------------------------------------------------------


def test_sdpa_full_and_causal_by_hand() -> None:
    b, h, n, d = 2, 4, 6, 8
    q = [b, h, n, d]
    full = cost(
        call(
            "aten::_scaled_dot_product_flash_attention",
            [q, q, q, [], [], [], []],
            [BF16] * 3 + ["Scalar"] * 4,
            ["", "", "", "0.", "False", "False", ""],
        )
    )
    assert (full.category, full.family) == ("attention", "sdpa")
    assert full.gflops == pytest.approx(2 * b * h * (d + d) * n * n / 1e9)
    assert full.bytes == 4 * b * h * n * d * 2
    causal = cost(
        call(
            "aten::_scaled_dot_product_flash_attention",
            [q, q, q, [], [], [], []],
            [BF16] * 3 + ["Scalar"] * 4,
            ["", "", "", "0.", "True", "False", ""],
        )
    )
    pairs = 1 + 2 + 3 + 4 + 5 + 6  # query i sees keys 0..i
    assert causal.gflops == pytest.approx(2 * b * h * 2 * d * pairs / 1e9)


def test_flash_attn_causal_is_bottom_right_for_a_decode_step() -> None:
    # 2 new queries over 10 keys: query 0 sees keys 0..8, query 1 sees all 10
    q, kv = [1, 2, 3, 16], [1, 10, 1, 16]
    got = cost(
        call(
            "flash_attn::_flash_attn_forward",
            [q, kv, kv, [], [], [], []],
            [BF16] * 3 + ["Scalar"] * 4,
            ["", "", "", "0.0", "0.125", "True", ""],
        )
    )
    assert got.gflops == pytest.approx(2 * 1 * 3 * (16 + 16) * (9 + 10) / 1e9)
    assert got.bytes == 2 * (1 * 2 * 3 * 16 + 2 * 10 * 16 + 2 * 3 * 16)


def test_paged_engine_attention_has_a_category_but_no_model() -> None:
    got = cost(
        call(
            "vllm::unified_attention_with_output",
            [[888, 8, 64], [888, 1, 64], [888, 1, 64], [888, 8, 64], [], [], []],
            [F8, BF16, BF16, BF16, "", "", ""],
        )
    )
    assert (got.category, got.gflops, got.bytes) == ("attention", None, None)


# --- conv, norm, elementwise, reduce, moe -------------------------------------------------


def test_conv2d_by_hand() -> None:
    # 2x3x10x10 input, 4 filters 3x3, stride 2, padding 1: out 5x5
    got = cost(
        call(
            "aten::convolution",
            [[2, 3, 10, 10], [4, 3, 3, 3], [4], [], [], [], [], [], []],
            [
                BF16,
                BF16,
                BF16,
                "ScalarList",
                "ScalarList",
                "ScalarList",
                "Scalar",
                "ScalarList",
                "Scalar",
            ],
            ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"],
        )
    )
    out = 2 * 4 * 5 * 5
    assert got.gflops == pytest.approx((2 * out * 3 * 9 + out) / 1e9)
    assert got.bytes == 2 * (2 * 3 * 100 + 4 * 27 + 4 + out)
    grouped = cost(
        call(
            "aten::conv2d",
            [[1, 8, 6, 6], [8, 2, 3, 3], [], [], [], [], []],
            [F32, F32, "", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
            ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "4"],
        )
    )
    assert grouped.gflops == pytest.approx(2 * 1 * 8 * 16 * 2 * 9 / 1e9)  # out 4x4


def test_transposed_conv_by_hand() -> None:
    # input 1x4x5x5, weight [Cin=4, Cout/g=2, 3, 3], stride 2: out (5-1)*2 + 2 + 1 = 11
    got = cost(
        call(
            "aten::convolution",
            [[1, 4, 5, 5], [4, 2, 3, 3], [], [], [], [], [], [], []],
            [
                F32,
                F32,
                "",
                "ScalarList",
                "ScalarList",
                "ScalarList",
                "Scalar",
                "ScalarList",
                "Scalar",
            ],
            ["", "", "", "[2, 2]", "[0, 0]", "[1, 1]", "True", "[0, 0]", "1"],
        )
    )
    assert got.gflops == pytest.approx(2 * 1 * 4 * 25 * 2 * 9 / 1e9)
    assert got.bytes == 4 * (100 + 72 + 2 * 11 * 11)


def test_layer_and_rms_norm_by_hand() -> None:
    ln = cost(
        call(
            "aten::native_layer_norm",
            [[4, 10, 32], [], [32], [32], []],
            [BF16, "ScalarList", BF16, BF16, "Scalar"],
            ["", "[32]", "", "", "1e-5"],
        )
    )
    assert ln.category == "norm"
    assert ln.gflops == pytest.approx(7 * 1280 / 1e9)  # 5 + weight + bias per element
    assert ln.bytes == 2 * 2 * 1280 + 2 * 2 * 32 + 8 * 40  # in, out, w, b, mean+rstd per row
    rms = cost(
        call("aten::rms_norm", [[6, 32], [], [32], []], [BF16, "ScalarList", BF16, "Scalar"])
    )
    assert rms.gflops == pytest.approx(4 * 192 / 1e9)
    assert rms.bytes == 2 * 2 * 192 + 2 * 32
    fused = cost(
        call("_C::fused_add_rms_norm", [[6, 32], [6, 32], [32], []], [BF16, BF16, BF16, "Scalar"])
    )
    assert fused.gflops == pytest.approx(5 * 192 / 1e9)
    assert fused.bytes == 4 * 2 * 192 + 2 * 32


def test_elementwise_broadcast_promotion_and_in_place() -> None:
    add = cost(call("aten::add", [[4, 1, 8], [3, 1], []], [BF16, F32, "Scalar"], ["", "", "1"]))
    assert add.gflops == pytest.approx(4 * 3 * 8 / 1e9)
    assert add.bytes == 32 * 2 + 3 * 4 + 96 * 4  # bf16 + fp32 promotes to fp32
    inplace = cost(call("aten::mul_", [[4, 8], [8]], [BF16, F32]))
    assert inplace.bytes == 32 * 2 + 8 * 4 + 32 * 2  # written back as bf16
    cmp = cost(call("aten::lt", [[10], [10]], [F32, F32]))
    assert cmp.bytes == 40 + 40 + 10
    unary = cost(call("aten::silu", [[5, 6]], [BF16]))
    assert (unary.category, unary.gflops, unary.bytes) == ("elementwise", 30 / 1e9, 120)


def test_copy_fill_and_memcpy_category() -> None:
    c = cost(call("aten::copy_", [[3, 4], [3, 4], []], [F32, BF16, "Scalar"]))
    assert (c.family, c.bytes) == ("copy", 12 * 4 + 12 * 2)
    h2d = cost(
        call(
            "aten::copy_",
            [[3, 4], [3, 4], []],
            [F32, F32, "Scalar"],
            kernels=("Memcpy HtoD (Pageable -> Device)",),
        )
    )
    assert h2d.category == "memcpy"
    z = cost(call("aten::fill_", [[7], []], [F32, "Scalar"]))
    assert (z.gflops, z.bytes) == (0.0, 28)


def test_gathers_rotary_and_kv_cache_writes_by_hand() -> None:
    emb = cost(
        call(
            "aten::embedding",
            [[100, 16], [2, 5], [], [], []],
            [F32, "long int", "Scalar", "Scalar", "Scalar"],
        )
    )
    assert (emb.category, emb.gflops, emb.bytes) == ("elementwise", 0.0, 2 * 10 * 16 * 4 + 80)
    sel = cost(
        call("aten::index_select", [[8, 4], [], [3]], [F32, "Scalar", "long int"], ["", "0", ""])
    )
    assert sel.bytes == 2 * 3 * 4 * 4 + 3 * 8
    # vLLM rotary on the B200 trace's shapes: 888 tokens, 8 query heads and 1 KV head of 64
    t = 888
    rot = cost(
        call(
            "_C::rotary_embedding",
            [[t], [t, 512], [t, 64], [], [131072, 64], []],
            ["long int", BF16, BF16, "Scalar", BF16, "Scalar"],
            ["", "", "", "64", "", "True"],
        )
    )
    assert rot.gflops == pytest.approx(3 * (t * 512 + t * 64) / 1e9)
    assert rot.bytes == 2 * 2 * t * 512 + 2 * 2 * t * 64 + 8 * t + 2 * t * 64
    kv = cost(
        call(
            "_C_cache_ops::reshape_and_cache_flash",
            [[t, 1, 64], [t, 1, 64], [4213816, 16, 1, 64], [4213816, 16, 1, 64], [t], [], [], []],
            [BF16, BF16, "unsigned char", "unsigned char", "long int", "", F32, F32],
        )
    )
    assert (kv.category, kv.gflops) == ("attention", 0.0)
    assert kv.bytes == 2 * (2 * t * 64) + 8 * t + 2 * t * 64  # fp8 cache: a byte an element


def test_reductions_by_hand() -> None:
    mean = cost(
        call(
            "aten::mean",
            [[4, 5, 6], [], [], []],
            [BF16, "ScalarList", "Scalar", ""],
            ["", "[-1]", "True", ""],
        )
    )
    assert (mean.category, mean.gflops) == ("reduce", 120 / 1e9)
    assert mean.bytes == 120 * 2 + 20 * 2
    mx = cost(call("aten::max", [[4, 6], [], []], [F32, "Scalar", "Scalar"], ["", "1", "False"]))
    assert mx.bytes == 24 * 4 + 4 * 4 + 4 * 8  # values and int64 indices
    total = cost(call("aten::sum", [[4, 6]], [F32]))
    assert total.bytes == 24 * 4 + 4
    unknown = cost(call("aten::sum", [[4, 6], [], []], [F32, "ScalarList", "Scalar"]))
    assert (unknown.category, unknown.bytes) == ("reduce", None)  # dims not recorded
    sm = cost(
        call("aten::_softmax", [[8, 16], [], []], [BF16, "Scalar", "Scalar"], ["", "-1", "False"])
    )
    assert (sm.gflops, sm.bytes) == (5 * 128 / 1e9, 128 * 2 * 2)


def test_moe_grouped_and_fused_experts_by_hand() -> None:
    g = cost(call("aten::_grouped_mm", [[100, 64], [8, 64, 32], [8]], [BF16, BF16, "int"]))
    assert (g.category, g.family) == ("moe", "grouped_gemm")
    assert g.gflops == pytest.approx(2 * 100 * 64 * 32 / 1e9)
    assert g.bytes == 2 * (100 * 64 + 8 * 64 * 32 + 100 * 32)
    t, h, i, e, k = 3, 16, 8, 32, 2  # 6 token-expert pairs: at most 6 of 32 experts read
    f = cost(
        call(
            "vllm::outplace_fused_experts",
            [[t, h], [e, 2 * i, h], [e, h, i], [t, k], [t, k]],
            [BF16, BF16, BF16, F32, "int"],
        )
    )
    assert f.gflops == pytest.approx(2 * t * k * (2 * i * h + h * i) / 1e9)
    w = 2 * (e * 2 * i * h + e * h * i)
    assert f.bytes == pytest.approx(2 * 2 * t * h + t * k * 4 + t * k * 4 + w * 6 / 32)
    assert (
        cost(call("vllm::moe_forward", [[8, 16], [8, 4], []], [BF16, BF16, ""])).category == "moe"
    )


# --- categories ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kernel", "category"),
    [
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas", "gemm"),
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopB_NNT", "gemm"),
        ("Cijk_Alik_Bljk_BBS_BH_MT128x128x64_MI16x16x16x1", "gemm"),
        ("_matmul_ogs_NNT_bf16xbf16xmxfp4_128x256x128x1", "moe"),
        ("fused_moe_kernel", "moe"),
        ("flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>", "attention"),
        ("void cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3", "attention"),
        ("ncclDevKernel_AllGather_RING_LL", "comm"),
        ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>", "comm"),
        ("Memcpy HtoD (Pageable -> Device)", "memcpy"),
        ("Memset (Device)", "memset"),
        ("sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nchw", "conv"),
        (
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16>",
            "norm",
        ),
        ("void vllm::rms_norm_kernel<c10::BFloat16, 8, 4>", "norm"),
        ("void at::native::reduce_kernel<512, 1, ReduceOp<float, MeanOps<float>>>", "reduce"),
        (
            "void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add<float>>",
            "elementwise",
        ),
        ("triton_poi_fused_add_mul_0", "elementwise"),
        ("some_unknown_kernel", "other"),
    ],
)
def test_kernel_categories(kernel: str, category: str) -> None:
    assert category_of_kernel(kernel) == category


def test_ops_without_a_model_keep_a_category() -> None:
    assert cost(call("c10d::allreduce_", [[1024]], [BF16])).category == "comm"
    assert cost(call("record_param_comms", [], [])).category == "comm"
    assert cost(
        call(
            "aten::index_select",
            [[8, 4], [], [3]],
            [F32, "Scalar", "long int"],
            kernels=("void at::native::indexSelectLargeIndex<float>",),
        )
    ).category == ("elementwise")
    assert cost(call("aten::normal_", [[8]], [F32])).category == "other"
    assert cost(call("aten::broadcast_tensors", [[8]], [F32])).category == "other"
    assert cost(call("triton_poi_fused_add_0", [[8]], [F32])).category == "elementwise"
    assert cost(call("_C::rotary_embedding", [[8]], [F32])).category == "elementwise"
    # mixed kernels do not decide; the name does not either
    mixed = ("void at::native::reduce_kernel<512, 1>", "sm90_xmma_gemm_bf16bf16")
    assert cost(call("Torch-Compiled Region: 0/1", [], [], kernels=mixed)).category == "other"


@pytest.mark.parametrize(
    "dims",
    [
        [],
        [[]],
        [None],
        [[-1, 4], [4, 4]],
        [[4, 4], [5, 4]],
        [[[1, 2], [3]], [2]],
        [[1.5, 2], [2, 2]],
        [[True, 2], [2, 2]],
        [[0, 4], [4, 0]],
    ],
)
def test_odd_shapes_never_raise(dims: list[object]) -> None:
    for family in FAMILIES:
        for name in family.names:
            got = model_op(call(name, dims, [BF16] * len(dims), ["[1, 2]"] * len(dims)))
            assert got.category in CATEGORIES
            assert (got.gflops is None) == (got.bytes is None)


# --- GPUs and roofline --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "name"),
    [
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-SXM-40GB"),
        ("A100-PCIE-40GB", "A100-PCIe-40GB"),
        ("NVIDIA A100 80GB PCIe", "A100-PCIe-80GB"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA H20", "H20"),
        ("NVIDIA GB200", "GB200"),
        ("AMD Instinct MI300X", "MI300X"),
        ("AMD Instinct MI250X/MI250", "MI250X"),
        ("AMD Instinct MI325X", "MI325X"),
        ("AMD Instinct MI355X", "MI355X"),
        # as the traces in ../shared and vendor tools write them
        ("NVIDIA A100-PG509-200", "A100-SXM-40GB"),
        ("Tesla V100-SXM2-16GB", "V100-SXM2"),
        ("Tesla V100-SXM2-32GB", "V100-SXM2"),
        ("Tesla V100-DGXS-32GB", "V100-SXM2"),
        ("Tesla V100-PCIE-32GB", "V100-PCIe"),
        ("Tesla V100S-PCIE-32GB", "V100S-PCIe"),
        ("NVIDIA B300 SXM6 AC", "B300"),
        ("NVIDIA GB300", "GB300"),
        ("NVIDIA B100", "B100"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40", "L40"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("NVIDIA GeForce RTX 4080", "RTX-4080"),
        ("NVIDIA GeForce RTX 4090 Laptop GPU", "RTX-4090-Laptop"),
        ("NVIDIA GeForce RTX 4080 Laptop GPU", "RTX-4080-Laptop"),
        ("AMD Instinct MI210", "MI210"),
    ],
)
def test_gpu_names_as_traces_write_them(written: str, name: str) -> None:
    spec = gpu_from_trace(written)
    assert spec is not None and spec.name == name
    assert gpu_spec(written) == spec


def test_gpu_table_is_dense_and_sourced() -> None:
    for spec in TABLE:
        assert spec.source and spec.peak_tb_s > 0
        assert set(spec.peak_tflops) <= {
            "fp64",
            "fp32",
            "tf32",
            "bf16",
            "fp16",
            "fp8",
            "fp4",
            "int8",
        }
        half = spec.peak_tflops.get("bf16", spec.peak_tflops.get("fp16"))
        assert half is None or half > spec.peak_tflops.get("fp32", 0)
    h100 = gpu_from_trace("NVIDIA H100 80GB HBM3")
    assert h100 is not None
    # datasheet: 1,979 TFLOPS bf16 "with sparsity", 3.35 TB/s
    assert (h100.peak_tflops["bf16"], h100.peak_tb_s) == (989.5, 3.35)
    assert "fp4" not in h100.peak_tflops
    assert gpu_from_trace("GeForce GTX 1060 with Max-Q Design") is None
    # datasheet figures, dense: V100 has no bf16 tensor cores; L4 prints 242 "with sparsity"
    v100, l4 = gpu_from_trace("Tesla V100-SXM2-32GB"), gpu_from_trace("NVIDIA L4")
    assert v100 is not None and l4 is not None
    assert "bf16" not in v100.peak_tflops and v100.peak_tflops["fp16"] == 125
    assert (l4.peak_tflops["bf16"], l4.peak_tb_s) == (121, 0.3)


def test_unknown_gpu_line_names_the_traces_gpu() -> None:
    assert "'AMD Radeon Graphics'" in unknown_gpu(["AMD Radeon Graphics"])
    assert "none named by the trace" in unknown_gpu([])


def test_gpu_spec_file_and_mistakes(tmp_path: Path) -> None:
    f = tmp_path / "gpu.json"
    f.write_text(json.dumps({"name": "lab", "peak_tflops": {"bf16": 100}, "peak_tb_s": 2}))
    assert gpu_spec(str(f)) == GpuSpec("lab", {"bf16": 100.0}, 2.0, str(f))
    with pytest.raises(UsageError, match=r"close: H100-SXM") as e:
        gpu_spec("H100-SMX")
    assert "\n" not in str(e.value)
    for text, problem in [
        ("{", "not JSON"),
        ("[]", "not a JSON object"),
        ('{"name": "x", "peak_tflops": {"bf17": 1}, "peak_tb_s": 1}', "unknown dtype"),
        ('{"name": "x", "peak_tflops": {"bf16": -1}, "peak_tb_s": 1}', "positive"),
        ('{"name": "x", "peak_tflops": {"bf16": 1}}', "peak_tb_s"),
        ('{"name": "x", "peak_tflops": {"bf16": 1}, "peak_tb_s": 1, "tdp": 7}', "unknown key"),
    ]:
        f.write_text(text)
        with pytest.raises(UsageError, match=problem):
            gpu_spec(str(f))
    with pytest.raises(UsageError, match="cannot read"):
        gpu_spec(str(tmp_path / "missing.json"))


GPU = GpuSpec("hand", {"bf16": 1000.0}, 2.0)  # ridge point: 1000e12 / 2e12 = 500 FLOP/B


def test_roofline_memory_bound_op_by_hand() -> None:
    # 1 GFLOP over 10 MB in 100 us: 10 TFLOP/s, 0.1 TB/s, 100 FLOP/B < 500: memory-bound;
    # attainable 100 x 2 TB/s = 200 TFLOP/s, so 10/200 = 5% (= 0.1 / 2 TB/s)
    r = roofline(1.0, 10e6, 100_000, "bf16", GPU)
    assert r.tflops_s == pytest.approx(10.0)
    assert r.tb_s == pytest.approx(0.1)
    assert r.intensity == pytest.approx(100.0)
    assert r.bound == "memory"
    assert r.fraction == pytest.approx(0.05)


def test_roofline_compute_bound_op_by_hand() -> None:
    # 500 GFLOP over 100 MB in 1 ms: 500 TFLOP/s, 5000 FLOP/B >= 500: compute, 50% of peak
    r = roofline(500.0, 100e6, 1_000_000, "bf16", GPU)
    assert r.bound == "compute"
    assert r.fraction == pytest.approx(0.5)
    assert r.tb_s == pytest.approx(0.1)


def test_roofline_of_an_op_with_no_flops_is_its_share_of_the_bandwidth() -> None:
    # a copy: 0 FLOPs, 4 MB in 10 us = 0.4 TB/s of 2 TB/s: memory-bound at 20%, whatever
    # its dtype's compute peak (fp8 has none on this GPU, None: no dtype)
    for dtype in ("bf16", "fp8", None):
        r = roofline(0.0, 4e6, 10_000, dtype, GPU)
        assert (r.tflops_s, r.intensity, r.bound) == (0.0, 0.0, "memory")
        assert r.tb_s == pytest.approx(0.4)
        assert r.fraction == pytest.approx(0.2)
    assert roofline(0.0, 0.0, 10_000, "bf16", GPU).bound is None  # moves nothing: no roof


def test_roofline_says_nothing_it_cannot_know() -> None:
    no_peak = roofline(1.0, 1e6, 1000, "fp8", GPU)
    assert no_peak.tflops_s is not None and (no_peak.bound, no_peak.fraction) == (None, None)
    assert roofline(None, None, 1000, "bf16", GPU) == roofline(None, None, 1000, None, None)
    untimed = roofline(1.0, 1e6, 0, "bf16", GPU)
    assert (untimed.tflops_s, untimed.bound) == (None, None)
    assert untimed.intensity == pytest.approx(1000.0)
    assert roofline(1.0, 1e6, 1000, "bf16", None).bound is None


@pytest.mark.parametrize(
    "call",
    [
        OpCall("aten::mm", ((10**330, 4), (4, 10**330)), ("float", "float")),  # OverflowError
        OpCall("aten::mm", ((10**200, 10**200), (10**200, 4)), ("float", "float")),  # inf
        OpCall("aten::sum", ((4, 4), ()), ("float", "ScalarList"), ("", "1.5")),  # TypeError
        OpCall("aten::sum", ((4, 4), ()), ("float", "ScalarList"), ("", "1j")),
        OpCall("aten::sum", ((4, 4), ()), ("float", "ScalarList"), ("", "'x'")),
        OpCall("aten::sum", ((4, 4), ()), ("float", "ScalarList"), ("", "True")),
    ],
)
def test_hostile_dims_leave_an_op_without_a_cost_never_raise(call: OpCall) -> None:
    """Dims whose FLOPs pass a double and a reduction dim given as a float or complex raised
    in every command that builds the op table (issue 47 #23, #24)."""
    cost = model_op(call)
    assert cost.family is not None and cost.gflops is None and cost.bytes is None
