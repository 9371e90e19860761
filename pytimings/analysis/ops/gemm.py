"""GEMM-like ops: aten mm/addmm/bmm/baddbmm/matmul/linear, scaled (fp8/fp4) and engine GEMMs.

A GEMM of an (M x K) by a (K x N) matrix does M·N·K multiply-adds: 2·M·N·K FLOPs, times the
batch; a bias or ``beta·C`` term adds M·N per batch. Bytes moved are each operand read once
and the output written once (the DRAM lower bound a well-tiled kernel reaches), as
TraceLens's GEMM model counts them.
"""

from __future__ import annotations

import math

from pytimings.analysis.ops.calls import (
    NoModel,
    OpCall,
    broadcast,
    concrete,
    dims,
    dtype_of,
    has_shape,
    input_dtype,
    input_itemsize,
    itemsize,
    scalar_type,
    tensor_bytes,
    tensors,
    type_of,
)
from pytimings.analysis.ops.family import Cost, Family


def compute_dtype(call: OpCall, type_name: str) -> str:
    """The peak a GEMM runs against: its operands' dtype; fp32 is tf32 where a kernel says so."""
    dtype = dtype_of(type_name)
    if dtype == "fp32" and any("tf32" in k.lower() for k in call.kernel_names):
        return "tf32"
    return dtype


def _gemm(
    call: OpCall, a: int, b: int, batch: int, m: int, n: int, k: int, extra: tuple[int, ...]
) -> Cost:
    """2·batch·M·N·K (+ batch·M·N per bias/C input in ``extra``); operands, extras, output."""
    flops = 2 * batch * m * n * k + batch * m * n * len(extra)
    out = batch * m * n * input_itemsize(call, a)
    nbytes = tensor_bytes(call, a, b) + out + tensor_bytes(call, *extra)
    return Cost(float(flops), float(nbytes), compute_dtype(call, type_of(call, a)))


def _two_d(call: OpCall, i: int) -> tuple[int, int]:
    d = dims(call, i)
    if len(d) != 2:
        raise NoModel(f"input {i} is not a matrix")
    return d[0], d[1]


def _mm(call: OpCall, a: int, b: int, extra: tuple[int, ...]) -> Cost:
    """Matrices ``a`` [M,K] by ``b`` [K,N] (:func:`_gemm`)."""
    m, k = _two_d(call, a)
    k2, n = _two_d(call, b)
    if k != k2:
        raise NoModel("inner dimensions differ")
    return _gemm(call, a, b, 1, m, n, k, extra)


class _Gemm(Family):
    """The GEMM families' family and category (each class below names its ops)."""

    family = "gemm"
    category = "gemm"


class Mm(_Gemm):
    formula = "mm(A[M,K], B[K,N]): 2·M·N·K FLOPs; bytes (M·K + K·N + M·N)·size"
    names = ("aten::mm",)

    def cost(self, call: OpCall) -> Cost:
        return _mm(call, 0, 1, ())


class Addmm(_Gemm):
    formula = "addmm(C, A[M,K], B[K,N]): 2·M·N·K + M·N FLOPs; bytes A + B + C + out"
    names = ("aten::addmm",)

    def cost(self, call: OpCall) -> Cost:
        return _mm(call, 1, 2, tensors(call, 0))


def _bmm(call: OpCall, a: int, b: int, extra: tuple[int, ...]) -> Cost:
    da, db = dims(call, a), dims(call, b)
    if len(da) != 3 or len(db) != 3 or da[0] != db[0] or da[2] != db[1]:
        raise NoModel("not a batched matrix product")
    return _gemm(call, a, b, da[0], da[1], db[2], da[2], extra)


class Bmm(_Gemm):
    formula = "bmm(A[B,M,K], B[B,K,N]): 2·B·M·N·K FLOPs; bytes B·(M·K + K·N + M·N)·size"
    names = ("aten::bmm",)

    def cost(self, call: OpCall) -> Cost:
        return _bmm(call, 0, 1, ())


class Baddbmm(_Gemm):
    formula = "baddbmm(C, A[B,M,K], B[B,K,N]): 2·B·M·N·K + B·M·N FLOPs; bytes A + B + C + out"
    names = ("aten::baddbmm",)

    def cost(self, call: OpCall) -> Cost:
        return _bmm(call, 1, 2, tensors(call, 0))


class Matmul(_Gemm):
    formula = (
        "matmul(A[...,M,K], B[...,K,N]): 2·batch·M·N·K FLOPs (batch: the broadcast leading "
        "dims; a 1-D operand is a vector); bytes A + B + out"
    )
    names = ("aten::matmul",)

    def cost(self, call: OpCall) -> Cost:
        da, db = dims(call, 0), dims(call, 1)
        m, k = (1, da[0]) if len(da) == 1 else da[-2:]
        k2, n = (db[0], 1) if len(db) == 1 else db[-2:]
        if k != k2:
            raise NoModel("inner dimensions differ")
        batch = math.prod(broadcast(da[:-2] or (1,), db[:-2] or (1,)))
        return _gemm(call, 0, 1, batch, m, n, k, ())


class Linear(_Gemm):
    formula = "linear(X[...,K], W[N,K], b[N]): 2·M·N·K (+ M·N with b) FLOPs, M = numel(X)/K"
    names = ("aten::linear",)

    def cost(self, call: OpCall) -> Cost:
        dx = dims(call, 0)
        n, k = _two_d(call, 1)
        if dx[-1] != k:
            raise NoModel("input and weight K differ")
        m = math.prod(dx[:-1])
        return _gemm(call, 0, 1, 1, m, n, k, tensors(call, 2))


def _scaled(
    call: OpCall, a: int, b: int, out_type: str, bias: int | None, extra: tuple[int, ...]
) -> Cost:
    """A scaled (fp8/fp4) GEMM; packed fp4 stores two values of K per element.

    ``bias`` is the bias input's index (M·N FLOPs where present); ``extra`` the other
    inputs read (scales), counted in bytes.
    """
    m, k = _two_d(call, a)
    b0, b1 = _two_d(call, b)
    if b0 == k:
        n = b1
    elif b1 == k:
        n = b0
    else:
        raise NoModel("inner dimensions differ")
    dtype = input_dtype(call, a)
    if dtype == "int8" and call.name.endswith("fp4_mm"):
        dtype = "fp4"  # vLLM passes nvfp4 operands as uint8, two values a byte
    k_logical = 2 * k if dtype == "fp4" else k
    biases = () if bias is None else tensors(call, bias)
    read = [i for i in extra if has_shape(call, i)]
    flops = 2 * m * n * k_logical + m * n * len(biases)
    nbytes = tensor_bytes(call, a, b) + m * n * itemsize(out_type)
    nbytes += tensor_bytes(call, *read, *biases)
    return Cost(float(flops), float(nbytes), dtype)


class ScaledMm(_Gemm):
    formula = (
        "_scaled_mm(A[M,K], B[K,N], scale_a, scale_b, bias, scale_result, out_dtype): "
        "2·M·N·K (+ M·N with bias) FLOPs, K doubled for packed fp4; bytes A + B + scales + "
        "bias + out (out_dtype's size, A's type when not given)"
    )
    names = ("aten::_scaled_mm", "trtllm::cublas_scaled_mm")

    def cost(self, call: OpCall) -> Cost:
        given = concrete(call, 6)
        out_type = scalar_type(str(given)) if given is not None else None
        if out_type is None:
            out_type = type_of(call, 0)
        return _scaled(call, 0, 1, out_type, 4, (2, 3, 5))


class EngineScaledMm(_Gemm):
    formula = (
        "vLLM cutlass_scaled_mm(out[M,N], A[M,K], B[K,N] or [N,K], scales..., bias), "
        "cutlass_scaled_fp4_mm(out, A, B, a_sf, b_sf, alpha): 2·M·N·K FLOPs (K doubled for "
        "fp4); bytes A + B + scales + bias + out"
    )
    names = ("_C::cutlass_scaled_mm", "_C::cutlass_scaled_fp4_mm", "_C::cutlass_scaled_mm_azp")

    def cost(self, call: OpCall) -> Cost:
        if call.name == "_C::cutlass_scaled_fp4_mm":  # (out, a, b, a_sf, b_sf, alpha)
            return _scaled(call, 1, 2, type_of(call, 0), None, (3, 4, 5))
        return _scaled(call, 1, 2, type_of(call, 0), 5, (3, 4))


class EngineGemm(_Gemm):
    formula = (
        "an engine GEMM op (vllm::*gemm*, *::*_mm): the first two 2-D inputs X[M,K] and "
        "W[N,K] or W[K,N] sharing K; 2·M·N·K FLOPs; bytes X + W + out"
    )
    names = ()

    def cost(self, call: OpCall) -> Cost:
        every = tensors(call, *range(len(call.input_dims)))
        mats = [i for i in every if len(dims(call, i)) == 2][:2]
        if len(mats) != 2:
            raise NoModel("no two matrices")
        return _scaled(call, mats[0], mats[1], type_of(call, mats[0]), None, ())
