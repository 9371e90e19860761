"""Which perf model an op gets, and the category of every op and GPU kernel.

An op is modelled by the family that names it (exact op names, then engine GEMM name
patterns); any op or kernel gets a category: an op from its family, else its name's rules,
else the one category of the kernels it launched, else its name read as a kernel name
(``triton_poi_...``, ``_C::rotary_embedding``), and ``other`` where none of these says.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

from pytimings.analysis.ops.attention import FlashAttn, KvCacheWrite, Sdpa
from pytimings.analysis.ops.calls import NoModel, OpCall, OpCost
from pytimings.analysis.ops.conv import Conv
from pytimings.analysis.ops.elementwise import (
    Copy,
    Elementwise,
    EngineOutIn,
    Fill,
    Gather,
    Rotary,
)
from pytimings.analysis.ops.family import Family
from pytimings.analysis.ops.gemm import (
    Addmm,
    Baddbmm,
    Bmm,
    EngineGemm,
    EngineScaledMm,
    Linear,
    Matmul,
    Mm,
    ScaledMm,
)
from pytimings.analysis.ops.moe import FusedExperts, GroupedMm
from pytimings.analysis.ops.norm import EngineRmsNorm, LayerNorm, RmsNorm
from pytimings.analysis.ops.reduce import Reduce, Softmax

FAMILIES: tuple[Family, ...] = (
    Mm(),
    Addmm(),
    Bmm(),
    Baddbmm(),
    Matmul(),
    Linear(),
    ScaledMm(),
    EngineScaledMm(),
    Sdpa(),
    FlashAttn(),
    KvCacheWrite(),
    Conv(),
    LayerNorm(),
    RmsNorm(),
    EngineRmsNorm(),
    Elementwise(),
    Copy(),
    Fill(),
    EngineOutIn(),
    Gather(),
    Rotary(),
    Reduce(),
    Softmax(),
    GroupedMm(),
    FusedExperts(),
)
_BY_NAME: dict[str, Family] = {n: f for f in FAMILIES for n in f.names}
_ENGINE_GEMM = EngineGemm()
_ENGINE_GEMM_NAME = re.compile(r"^(vllm|sglang|sgl_kernel|_C|trtllm|aiter)::\w*(gemm|_mm\b)")

# (category, pattern) over op names with no family, first match wins
_OP_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "comm",
        re.compile(
            r"^(c10d|_c10d_functional|c10d_functional|nccl|symm_mem)::|record_param_comms|"
            r"all_reduce|allreduce|all_gather|allgather|reduce_scatter|all_to_all|alltoall|"
            r"^vllm::(all_|reduce_scatter)"
        ),
    ),
    ("moe", re.compile(r"moe|fused_experts|expert", re.IGNORECASE)),
    ("attention", re.compile(r"attention|attn|_cache_ops::|paged|fmha|mha_", re.IGNORECASE)),
    ("gemm", re.compile(r"gemm|::\w*_mm$|matmul|linear", re.IGNORECASE)),
    ("norm", re.compile(r"norm(?!al_)", re.IGNORECASE)),
    ("conv", re.compile(r"conv", re.IGNORECASE)),
)

# (category, pattern) over GPU kernel names, first match wins
_KERNEL_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("memcpy", re.compile(r"^memcpy|\bmemcpy", re.IGNORECASE)),
    ("memset", re.compile(r"^memset|\bmemset", re.IGNORECASE)),
    (
        "comm",
        re.compile(
            r"nccl|rccl|cross_device_reduce|all_?reduce|all_?gather|reduce_?scatter|"
            r"all_?to_?all|multimem|one_shot|two_shot|custom_ar",
            re.IGNORECASE,
        ),
    ),
    (
        "attention",
        re.compile(
            r"flash|fmha|attention|attn|sdpa|paged_|mha_|softmax_rescale|reshape_and_cache",
            re.IGNORECASE,
        ),
    ),
    (
        "moe",
        re.compile(r"moe|matmul_ogs|fused_experts|grouped_?gemm|expert", re.IGNORECASE),
    ),
    (
        "conv",
        re.compile(
            r"conv|fprop|dgrad|wgrad|winograd|implicit_?gemm|implicit_convolve", re.IGNORECASE
        ),
    ),
    (
        "gemm",
        re.compile(
            r"gemm|cutlass|cublas|xmma|^nvjet|^cijk_|hipblaslt|wgmma|matmul|_mm_|splitk|"
            r"triton_tem_fused_(addmm|mm|bmm)",
            re.IGNORECASE,
        ),
    ),
    (
        "norm",
        re.compile(
            r"layer_?norm|rms_?norm|batch_?norm|group_?norm|instance_?norm|"
            r"RowwiseMoments|cuApplyLayerNorm|welford",
            re.IGNORECASE,
        ),
    ),
    (
        "reduce",
        re.compile(r"reduce|softmax|argmax|argmin|topk|triton_red_|triton_per_", re.IGNORECASE),
    ),
    (
        "elementwise",
        re.compile(
            r"elementwise|vectorized|triton_poi_|fill|copy|act_and_mul|silu|gelu|rotary|"
            r"quant|index|gather|scatter|cat_|catarray",
            re.IGNORECASE,
        ),
    ),
)


@lru_cache(maxsize=1 << 16)
def category_of_kernel(name: str) -> str:
    """A GPU kernel's category from its name alone ("other" when the name does not say)."""
    for category, pattern in _KERNEL_RULES:
        if pattern.search(name):
            return category
    return "other"


def _kernels_category(kernels: tuple[str, ...]) -> str | None:
    """The category the launched kernels share, if they share one."""
    cats = {category_of_kernel(k) for k in kernels}
    return cats.pop() if len(cats) == 1 else None


def _family(name: str) -> Family | None:
    family = _BY_NAME.get(name)
    if family is None and _ENGINE_GEMM_NAME.search(name):
        return _ENGINE_GEMM
    return family


# the categories whose modelled op is the op a user wrote: a kernel launched anywhere beneath
# the outermost such op is charged to it (docs/ops.md, "The op of interest")
OF_INTEREST = ("gemm", "attention", "conv", "norm", "moe")
# GEMM front ends that dispatch to a GEMM op (mm, addmm, bmm) and make layout copies around
# it (aten::matmul's contiguous copies: 3-52% of its time on TraceLens's TimeSformer trace):
# the GEMM op beneath them is the op of interest, as in TraceLens
_GEMM_FRONT_ENDS = frozenset({"aten::matmul", "aten::linear"})


def of_interest(name: str) -> bool:
    """Whether an op named so has a perf model of :data:`OF_INTEREST` (SDPA in every form,
    convolution, the GEMM ops beneath linear/matmul, norms, MoE, engine GEMMs)."""
    family = _family(name)
    return family is not None and family.category in OF_INTEREST and name not in _GEMM_FRONT_ENDS


@lru_cache(maxsize=1 << 12)
def _name_category(name: str) -> str | None:
    """The category an op's name rules give it, if one does."""
    for category, pattern in _OP_RULES:
        if pattern.search(name):
            return category
    return None


@lru_cache(maxsize=1 << 16)
def model_op(call: OpCall) -> OpCost:
    """The op call's category and, where its family's formula fits its inputs, its cost.

    Never raises on odd or missing shapes: the op keeps its category, gflops/bytes None.
    A copy or fill whose kernels are all memcpy/memset records is charged to that category.
    Equal calls are answered from a bounded cache.
    """
    family = _family(call.name)
    launched = _kernels_category(call.kernel_names)
    if family is None:
        named = _name_category(call.name)
        if named is not None:
            return OpCost(named, None, None, None, None)
        # the kernels it launched, else its own name read as a kernel's (triton_poi_...)
        return OpCost(launched or category_of_kernel(call.name), None, None, None, None)
    category = family.category
    if launched in ("memcpy", "memset") and family.category == "elementwise":
        category = launched
    try:
        cost = family.cost(call)
    except (NoModel, OverflowError):  # dims whose FLOPs or bytes pass a double (10**330)
        return OpCost(category, family.family, None, None, None)
    if not (math.isfinite(cost.flops) and math.isfinite(cost.nbytes)):
        return OpCost(category, family.family, None, None, None)
    return OpCost(category, family.family, cost.flops / 1e9, cost.nbytes, cost.dtype)
