"""Normalisation: layer norm and RMS norm (aten and vLLM's fused kernels).

FLOPs per element of the normalised tensor, counting each add, multiply and square once:
layer norm 5 (mean: 1, variance: 2, normalise: 2) plus 1 for each of weight and bias;
RMS norm 3 (square: 1, sum: 1, scale: 1) plus 1 for the weight; vLLM's
``fused_add_rms_norm`` 1 more for the residual add. Bytes: the input read and the output
written once, the weight and bias read once, layer norm's per-row mean and rstd (fp32)
written; RMS norm's rstd, a few bytes a row, is left out.
"""

from __future__ import annotations

import math

from pytimings.analysis.ops.calls import (
    NoModel,
    OpCall,
    dims,
    input_dtype,
    tensor_bytes,
    tensors,
)
from pytimings.analysis.ops.family import Cost, Family


class LayerNorm(Family):
    family = "layer_norm"
    category = "norm"
    formula = (
        "layer_norm(X, shape, w, b): (5 + [w] + [b])·numel(X) FLOPs; "
        "bytes 2·X + w + b + 8·rows (mean, rstd)"
    )
    names = (
        "aten::layer_norm",
        "aten::native_layer_norm",
        "aten::cudnn_layer_norm",
        "aten::miopen_layer_norm",
    )

    def cost(self, call: OpCall) -> Cost:
        x = dims(call, 0)
        params = tensors(call, 2, 3)
        norm = math.prod(dims(call, params[0])) if params else x[-1]
        numel = math.prod(x)
        if norm < 1 or numel % norm:
            raise NoModel("normalised shape does not divide the input")
        flops = (5 + len(params)) * numel
        nbytes = 2 * tensor_bytes(call, 0) + tensor_bytes(call, *params) + 8 * (numel // norm)
        return Cost(float(flops), float(nbytes), input_dtype(call, 0))


class RmsNorm(Family):
    family = "rms_norm"
    category = "norm"
    formula = "rms_norm(X, shape, w): (3 + [w])·numel(X) FLOPs; bytes 2·X + w"
    names = ("aten::rms_norm", "aten::_fused_rms_norm")

    def cost(self, call: OpCall) -> Cost:
        numel = math.prod(dims(call, 0))
        params = tensors(call, 2)
        flops = (3 + len(params)) * numel
        nbytes = 2 * tensor_bytes(call, 0) + tensor_bytes(call, *params)
        return Cost(float(flops), float(nbytes), input_dtype(call, 0))


class EngineRmsNorm(Family):
    family = "rms_norm"
    category = "norm"
    formula = (
        "vLLM rms_norm(out, X, w): 4·numel(X) FLOPs, bytes out + X + w; "
        "fused_add_rms_norm(X, R, w) (X += R, then normalised in place): 5·numel(X) FLOPs, "
        "bytes 2·X + 2·R + w"
    )
    names = ("_C::rms_norm", "_C::fused_add_rms_norm")

    def cost(self, call: OpCall) -> Cost:
        if call.name == "_C::rms_norm":
            x, w = 1, 2
            flops = 4 * math.prod(dims(call, x))
            nbytes = tensor_bytes(call, 0, x, w)
        else:
            x, w = 0, 2
            if dims(call, 1) != dims(call, 0):
                raise NoModel("residual and input differ")
            flops = 5 * math.prod(dims(call, x))
            nbytes = 2 * tensor_bytes(call, 0, 1) + tensor_bytes(call, w)
        return Cost(float(flops), float(nbytes), input_dtype(call, x))
