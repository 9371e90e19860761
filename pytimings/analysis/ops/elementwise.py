"""Elementwise ops (unary, binary, ternary, in place or not), copies and fills.

One FLOP per output element (TraceLens's convention; these ops are memory-bound, and the
roofline places them by their bytes). Bytes: every tensor input read once (a broadcast input
once at its own size) and the output, of the broadcast shape, written once; an in-place op
reads and writes its first input. A 0-dim tensor counts as one element (the trace cannot
tell a wrapped Python number, passed as a kernel argument, from a 0-dim GPU tensor). The
output's element type is torch's promotion of the inputs: the widest floating type among
them (bf16 · int32 is bf16; a comparison writes bool); in place, the first input's.
"""

from __future__ import annotations

import math

from pytimings.analysis.ops.calls import (
    FLOAT_DTYPES,
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
    shape,
    tensor_bytes,
    type_of,
)
from pytimings.analysis.ops.family import Cost, Family

_UNARY = (
    "abs neg exp exp2 expm1 log log2 log10 log1p sqrt rsqrt reciprocal square sigmoid tanh relu "
    "relu6 gelu silu mish hardswish hardsigmoid hardtanh leaky_relu elu selu softplus sin cos tan "
    "erf erfc erfinv sign sgn floor ceil round trunc frac clamp clamp_min clamp_max clip "
    "nan_to_num logical_not bitwise_not isnan isinf isfinite"
)
_BINARY = (
    "add sub rsub mul div true_divide floor_divide remainder fmod pow maximum minimum fmax fmin "
    "atan2 hypot copysign xlogy lerp where masked_fill addcmul addcdiv logical_and logical_or "
    "logical_xor bitwise_and bitwise_or bitwise_xor bitwise_left_shift bitwise_right_shift "
    "eq ne lt le gt ge sigmoid_backward threshold_backward gelu_backward silu_backward "
    "tanh_backward"
)
_COMPARE = {
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "isnan",
    "isinf",
    "isfinite",
    "logical_not",
    "logical_and",
    "logical_or",
    "logical_xor",
}


def _aten_names(words: str) -> tuple[str, ...]:
    return tuple(f"aten::{w}{s}" for w in words.split() for s in ("", "_"))


def _out_type(call: OpCall, tensors: list[int]) -> str:
    """The output's element type under torch's promotion of the tensor inputs."""
    types = [type_of(call, i) for i in tensors]
    floats = [t for t in types if dtype_of(t) in FLOAT_DTYPES]
    return max(floats or types, key=itemsize)


class Elementwise(Family):
    family = "elementwise"
    category = "elementwise"
    formula = (
        "unary/binary/ternary op: numel(out) FLOPs, out = broadcast of the tensor inputs; "
        "bytes Σ inputs + out"
    )
    names = _aten_names(_UNARY) + _aten_names(_BINARY)

    def cost(self, call: OpCall) -> Cost:
        tensors = [i for i in range(len(call.input_dims)) if has_shape(call, i)]
        if not tensors:
            raise NoModel("no tensor input")
        numel = math.prod(broadcast(*(shape(call, i) for i in tensors)))
        base = call.name.removeprefix("aten::").rstrip("_")
        out_type = "bool" if base in _COMPARE else _out_type(call, tensors)
        if call.name.endswith("_"):
            out_type = type_of(call, 0)  # in place: the output is the first input
        nbytes = tensor_bytes(call, *tensors) + numel * itemsize(out_type)
        return Cost(float(numel), float(nbytes), input_dtype(call, tensors[0]))


class Copy(Family):
    family = "copy"
    category = "elementwise"
    formula = "copy_(dst, src): numel(dst) FLOPs; bytes dst + src (each at its own type)"
    names = ("aten::copy_",)

    def cost(self, call: OpCall) -> Cost:
        dst, src = shape(call, 0), shape(call, 1)
        if broadcast(dst, src) != dst:
            raise NoModel("source does not broadcast to the destination")
        numel = math.prod(dst)
        return Cost(float(numel), float(tensor_bytes(call, 0, 1)), input_dtype(call, 0))


class Fill(Family):
    family = "fill"
    category = "elementwise"
    formula = "fill_/zero_(X): no FLOPs; bytes X (written)"
    names = ("aten::fill_", "aten::zero_")

    def cost(self, call: OpCall) -> Cost:
        return Cost(0.0, float(tensor_bytes(call, 0)), input_dtype(call, 0))


class EngineOutIn(Family):
    family = "elementwise"
    category = "elementwise"
    formula = (
        "engine op writing out from input (vLLM silu_and_mul, gelu_and_mul, fp8 quant): "
        "numel(out) FLOPs; bytes input + out"
    )
    names = (
        "_C::silu_and_mul",
        "_C::mul_and_silu",
        "_C::gelu_and_mul",
        "_C::gelu_tanh_and_mul",
        "_C::static_scaled_fp8_quant",
        "_C::dynamic_scaled_fp8_quant",
        "_C::dynamic_per_token_scaled_fp8_quant",
    )

    def cost(self, call: OpCall) -> Cost:
        out, x = dims(call, 0), dims(call, 1)
        if out[:-1] != x[:-1] or x[-1] not in (out[-1], 2 * out[-1]):
            raise NoModel("output and input do not fit")
        nbytes = tensor_bytes(call, 0, 1)
        return Cost(float(math.prod(out)), float(nbytes), input_dtype(call, 1))


class Gather(Family):
    family = "gather"
    category = "elementwise"
    formula = (
        "embedding(W[V,H], idx) / index_select(X, dim, idx[n]): no FLOPs; bytes 2·out + idx "
        "(each gathered row read once, the output written once)"
    )
    names = ("aten::embedding", "aten::index_select")

    def cost(self, call: OpCall) -> Cost:
        x = dims(call, 0)
        if call.name == "aten::embedding":
            idx = 1
            out = math.prod(shape(call, idx)) * math.prod(x[1:])
        else:
            idx = 2
            axis = concrete(call, 1)
            if not isinstance(axis, int) or not -len(x) <= axis < len(x):
                raise NoModel("index_select's dim is not in the trace")
            out = math.prod(x) // max(x[axis], 1) * math.prod(shape(call, idx))
        nbytes = 2 * out * input_itemsize(call, 0) + tensor_bytes(call, idx)
        return Cost(0.0, float(nbytes), input_dtype(call, 0))


class Rotary(Family):
    family = "rotary"
    category = "elementwise"
    formula = (
        "vLLM rotary_embedding(pos[T], Q[T,Hq·d], K[T,Hk·d], d, cache[P,r], neox): "
        "3·(Q + K)·r/d FLOPs (x·cos - y·sin per rotated element); "
        "bytes 2·Q + 2·K + pos + T·r of the cos/sin cache"
    )
    names = ("_C::rotary_embedding",)

    def cost(self, call: OpCall) -> Cost:
        pos, q, cache = dims(call, 0), dims(call, 1), dims(call, 4)
        head = concrete(call, 3)
        if not isinstance(head, int) or head < 1 or len(cache) != 2 or cache[1] > head:
            raise NoModel("head size or cos/sin cache not in the trace")
        tokens = math.prod(pos)
        qk = math.prod(q) + (math.prod(dims(call, 2)) if has_shape(call, 2) else 0)
        flops = 3 * qk * cache[1] // head
        nbytes = 2 * tensor_bytes(call, 1) + tensor_bytes(call, 0)
        if has_shape(call, 2):
            nbytes += 2 * tensor_bytes(call, 2)
        nbytes += tokens * cache[1] * input_itemsize(call, 4)
        return Cost(float(flops), float(nbytes), input_dtype(call, 1))
