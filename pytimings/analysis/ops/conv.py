"""Convolution (forward): aten::convolution and the forms it dispatches to.

Each output element of a convolution is a dot product over (C_in / groups)·Πk inputs:
2·N·C_out·Πo·(C_in/groups)·Πk FLOPs, with the output size per spatial dim
o = ⌊(x + 2p - d·(k - 1) - 1)/s⌋ + 1; a transposed convolution does the same work per input
element, 2·N·C_in·Πx·(C_out/groups)·Πk. A bias adds one FLOP per output element. Bytes:
input, weight and bias read once, output written once.
"""

from __future__ import annotations

import math
from typing import ClassVar

from pytimings.analysis.ops.calls import (
    NoModel,
    OpCall,
    dims,
    flag,
    input_itemsize,
    int_list,
    tensor_bytes,
    tensors,
    type_of,
)
from pytimings.analysis.ops.family import Cost, Family
from pytimings.analysis.ops.gemm import compute_dtype


class Conv(Family):
    family = "conv"
    category = "conv"
    formula = (
        "conv(X[N,Cin,x...], W[Cout,Cin/g,k...], b): 2·N·Cout·Πo·(Cin/g)·Πk (+ N·Cout·Πo with b) "
        "FLOPs, o = ⌊(x + 2p - d(k - 1) - 1)/s⌋ + 1; bytes X + W + b + out"
    )
    # argument indices: bias, stride, padding, dilation, transposed, output_padding, groups
    # (None: the form has no such argument)
    ARGS: ClassVar[dict[str, tuple[int | None, int, int, int, int | None, int | None, int]]] = {
        "aten::convolution": (2, 3, 4, 5, 6, 7, 8),
        "aten::_convolution": (2, 3, 4, 5, 6, 7, 8),
        "aten::conv1d": (2, 3, 4, 5, None, None, 6),
        "aten::conv2d": (2, 3, 4, 5, None, None, 6),
        "aten::conv3d": (2, 3, 4, 5, None, None, 6),
        "aten::cudnn_convolution": (None, 3, 2, 4, None, None, 5),
        "aten::miopen_convolution": (2, 4, 3, 5, None, None, 6),
    }
    names = tuple(ARGS)

    def cost(self, call: OpCall) -> Cost:
        bias_i, stride_i, pad_i, dil_i, tr_i, outpad_i, groups_i = self.ARGS[call.name]
        x, w = dims(call, 0), dims(call, 1)
        if len(x) < 3 or len(w) != len(x):
            raise NoModel("input and weight ranks do not fit a convolution")
        rank = len(x) - 2
        stride = int_list(call, stride_i, rank, 1)
        pad = int_list(call, pad_i, rank, 0)
        dil = int_list(call, dil_i, rank, 1)
        groups = int_list(call, groups_i, 1, 1)[0]
        transposed = tr_i is not None and flag(call, tr_i, False)
        n, c_in, space, ks = x[0], x[1], x[2:], w[2:]
        if groups < 1 or min(stride) < 1:
            raise NoModel("bad groups or stride")
        if transposed:
            outpad = int_list(call, outpad_i, rank, 0) if outpad_i is not None else (0,) * rank
            c_out = w[1] * groups
            out = [
                (xi - 1) * s - 2 * p + d * (k - 1) + op + 1
                for xi, s, p, d, k, op in zip(space, stride, pad, dil, ks, outpad, strict=True)
            ]
            macs = n * c_in * math.prod(space) * (c_out // groups) * math.prod(ks)
        else:
            c_out = w[0]
            out = [
                (xi + 2 * p - d * (k - 1) - 1) // s + 1
                for xi, s, p, d, k in zip(space, stride, pad, dil, ks, strict=True)
            ]
            macs = n * c_out * math.prod(out) * (c_in // groups) * math.prod(ks)
        if min(out) < 1:
            raise NoModel("empty output")
        out_numel = n * c_out * math.prod(out)
        biases = () if bias_i is None else tensors(call, bias_i)
        flops = 2 * macs + out_numel * len(biases)
        nbytes = tensor_bytes(call, 0, 1, *biases) + out_numel * input_itemsize(call, 0)
        return Cost(float(flops), float(nbytes), compute_dtype(call, type_of(call, 0)))
