"""Mixture-of-experts expert GEMMs: grouped GEMMs and vLLM's fused experts.

A grouped GEMM of tokens (M rows in all, split among G groups by ``offs``) against a weight
per group does 2·M·N·K FLOPs in all, whatever the split; bytes are the activations, all G
weights and the output. vLLM's fused experts run two grouped GEMMs per token and chosen
expert (top-k): up/gate X·W1ᵀ with W1[E, 2I, H] and down with W2[E, H, I], so
2·T·k·(2I·H + H·I) FLOPs for T tokens. Bytes: the tokens read and the output written, the
routing (top-k weights and ids) read, and the weights of every expert that can be chosen
(min(E, T·k) of E) read once: an upper bound when fewer experts are hit. The intermediate
activations between the two GEMMs are left out.
"""

from __future__ import annotations

import math

from pytimings.analysis.ops.calls import (
    NoModel,
    OpCall,
    dims,
    input_dtype,
    input_itemsize,
    tensor_bytes,
)
from pytimings.analysis.ops.family import Cost, Family


class GroupedMm(Family):
    family = "grouped_gemm"
    category = "moe"
    formula = (
        "_grouped_mm(A[M,K], B[G,K,N], offs): 2·M·N·K FLOPs; A[G,M,K]·B[G,K,N]: 2·G·M·N·K; "
        "A[M,Kt]·B[Kt,N] with K split among G groups (out [G,M,N]): 2·M·N·Kt; "
        "bytes A + B + out"
    )
    names = ("aten::_grouped_mm", "aten::_scaled_grouped_mm")

    def cost(self, call: OpCall) -> Cost:
        a, b = dims(call, 0), dims(call, 1)
        if len(a) == 2 and len(b) == 3 and a[1] == b[1]:
            out, flops = a[0] * b[2], 2 * a[0] * a[1] * b[2]
        elif len(a) == 3 and len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
            out, flops = a[0] * a[1] * b[2], 2 * a[0] * a[1] * a[2] * b[2]
        elif len(a) == 2 and len(b) == 2 and a[1] == b[0]:
            offs = 2 if call.name == "aten::_grouped_mm" else 4
            groups = math.prod(dims(call, offs))
            out, flops = groups * a[0] * b[1], 2 * a[0] * a[1] * b[1]
        else:
            raise NoModel("operand shapes do not fit a grouped GEMM")
        nbytes = tensor_bytes(call, 0, 1) + out * input_itemsize(call, 0)
        return Cost(float(flops), float(nbytes), input_dtype(call, 0))


class FusedExperts(Family):
    family = "fused_moe"
    category = "moe"
    formula = (
        "fused_experts(X[T,H], W1[E,N1,H], W2[E,H,I], topk_w[T,k], topk_ids[T,k]): "
        "2·T·k·(N1·H + H·I) FLOPs; bytes 2·X + topk + min(E, T·k)/E·(W1 + W2)"
    )
    names = (
        "vllm::outplace_fused_experts",
        "vllm::inplace_fused_experts",
        "vllm::fused_experts",
    )

    def cost(self, call: OpCall) -> Cost:
        x, w1, w2, tw, ti = (dims(call, i) for i in range(5))
        if len(x) != 2 or len(w1) != 3 or len(w2) != 3 or len(tw) != 2 or tw != ti:
            raise NoModel("operand shapes do not fit fused experts")
        t, h = x
        e, k = w1[0], tw[1]
        if w1[2] != h or w2[1] != h or w2[0] != e or tw[0] != t:
            raise NoModel("weights do not match the hidden size (packed?)")
        flops = 2 * t * k * (w1[1] * h + h * w2[2])
        active = min(e, t * k) / e if e else 0.0
        weights = tensor_bytes(call, 1, 2) * active
        nbytes = 2 * tensor_bytes(call, 0) + tensor_bytes(call, 3, 4)
        w_dtype = input_dtype(call, 1)
        dtype = w_dtype if w_dtype in ("fp8", "fp4") else input_dtype(call, 0)
        return Cost(float(flops), nbytes + weights, dtype)
