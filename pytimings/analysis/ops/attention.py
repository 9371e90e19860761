"""Attention: scaled_dot_product_attention and its flash/efficient/cudnn forms, flash-attn.

Attention of Nq queries over Nkv keys per head does two GEMMs: Q·Kᵀ (2·d_qk FLOPs per
query-key pair) and P·V (2·d_v per pair), so 2·B·H_q·(d_qk + d_v)·P FLOPs where P is the
number of query-key pairs the mask keeps: Nq·Nkv, or under a causal mask the pairs on or
below the diagonal, counted exactly (top-left aligned for torch's ``is_causal``, bottom-right
for flash-attn's ``causal``). The softmax's few FLOPs per pair are left out, as TraceLens and
the FlashAttention paper leave them. Bytes: Q, K and V read once and O written once (the
fused kernel's DRAM traffic; the Nq x Nkv scores stay on chip).

Engine attention over a paged KV cache (vLLM ``unified_attention``, ``paged_attention``) has
no model: the cached sequence lengths are in the engine's metadata, not in the op's inputs.
"""

from __future__ import annotations

import math
from typing import ClassVar

from pytimings.analysis.ops.calls import (
    NoModel,
    OpCall,
    concrete,
    dims,
    flag,
    input_dtype,
    input_itemsize,
    tensor_bytes,
)
from pytimings.analysis.ops.family import Cost, Family


def causal_pairs(nq: int, nkv: int, bottom_right: bool) -> int:
    """Query-key pairs a causal mask keeps: query i sees keys j <= i (+ Nkv - Nq if aligned
    bottom-right)."""
    shift = nkv - nq if bottom_right else 0
    # sum over i in [0, nq) of clamp(i + 1 + shift, 0, nkv): rows below lo see no key, rows
    # in [lo, hi) see i + 1 + shift keys, the rest see all nkv
    lo = max(0, -shift)
    hi = min(nq, nkv - shift - 1)
    total = 0
    if hi > lo:
        first, last = lo + 1 + shift, hi + shift
        total += (first + last) * (hi - lo) // 2
    total += max(0, nq - max(hi, lo)) * nkv
    return total


def _attention(call: OpCall, heads_first: bool, causal: bool, bottom_right: bool) -> Cost:
    """Q, K, V as [B, H, N, d] (``heads_first``) or [B, N, H, d]; O is [.., Nq, Hq, dv]."""
    q, k, v = dims(call, 0), dims(call, 1), dims(call, 2)
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        raise NoModel("not 4-D Q, K, V (variable-length?)")
    n, h = (2, 1) if heads_first else (1, 2)
    b, hq, nq, dqk = q[0], q[h], q[n], q[3]
    nkv, dv = k[n], v[3]
    if k[3] != dqk or v[n] != nkv or k[0] != b or v[0] != b:
        raise NoModel("Q, K, V disagree")
    pairs = causal_pairs(nq, nkv, bottom_right) if causal else nq * nkv
    flops = 2 * b * hq * (dqk + dv) * pairs
    out = b * hq * nq * dv * input_itemsize(call, 2)
    nbytes = tensor_bytes(call, 0, 1, 2) + out
    return Cost(float(flops), float(nbytes), input_dtype(call, 0))


class Sdpa(Family):
    family = "sdpa"
    category = "attention"
    formula = (
        "sdpa(Q[B,Hq,Nq,d], K[B,Hkv,Nkv,d], V[B,Hkv,Nkv,dv]): 2·B·Hq·(d + dv)·P FLOPs, "
        "P = Nq·Nkv or the causal pairs (top-left); bytes Q + K + V + O"
    )
    # the argument index of is_causal in each form's schema
    CAUSAL: ClassVar[dict[str, int]] = {
        "aten::scaled_dot_product_attention": 5,
        "aten::_scaled_dot_product_flash_attention": 4,
        "aten::_scaled_dot_product_flash_attention_for_cpu": 4,
        "aten::_scaled_dot_product_efficient_attention": 6,
        "aten::_scaled_dot_product_cudnn_attention": 6,
        "aten::_scaled_dot_product_fused_attention_overrideable": 5,
        "aten::_cudnn_attention_forward": 10,
    }
    names = tuple(CAUSAL)

    def cost(self, call: OpCall) -> Cost:
        return _attention(call, True, flag(call, self.CAUSAL[call.name], False), False)


class FlashAttn(Family):
    family = "flash_attn"
    category = "attention"
    formula = (
        "flash-attn forward(Q[B,Nq,Hq,d], K[B,Nkv,Hkv,d], V[B,Nkv,Hkv,dv]): "
        "2·B·Hq·(d + dv)·P FLOPs, P = Nq·Nkv or the causal pairs (bottom-right); "
        "bytes Q + K + V + O. Variable-length (packed [T,H,d]) calls have no model"
    )
    # is_causal's index; aten::_efficient_attention_forward has custom_mask_type (1: causal
    # from the top left, 2: from the bottom right)
    CAUSAL: ClassVar[dict[str, int]] = {
        "flash_attn::_flash_attn_forward": 5,
        "aten::_flash_attention_forward": 8,
        "aten::_efficient_attention_forward": 9,
    }
    names = tuple(CAUSAL)

    def cost(self, call: OpCall) -> Cost:
        i = self.CAUSAL[call.name]
        if call.name == "aten::_efficient_attention_forward":
            mask = concrete(call, i)
            return _attention(call, False, mask in (1, 2), mask == 2)
        return _attention(call, False, flag(call, i, False), True)


class KvCacheWrite(Family):
    family = "kv_cache_write"
    category = "attention"
    formula = (
        "vLLM reshape_and_cache(_flash)(K[T,H,d], V[T,H,d], k_cache, v_cache, slots[T]): "
        "no FLOPs; bytes K + V + slots + T·H·d of each cache at the cache's type"
    )
    names = ("_C_cache_ops::reshape_and_cache_flash", "_C_cache_ops::reshape_and_cache")

    def cost(self, call: OpCall) -> Cost:
        k, v = dims(call, 0), dims(call, 1)
        if k != v:
            raise NoModel("key and value differ")
        numel = math.prod(k)
        written = numel * (input_itemsize(call, 2) + input_itemsize(call, 3))
        nbytes = tensor_bytes(call, 0, 1, 4) + written
        return Cost(0.0, float(nbytes), input_dtype(call, 0))
