"""nccl-tests' conventions for a collective's size and bus bandwidth, and the names traces give
collectives, in one place: the recorder's wrappers (:mod:`pytimings.record.distributed`), the
collective benchmark, the loaders and the collectives analysis all use these.

``size`` is the bytes of the operation's largest buffer: the tensor (all_reduce, broadcast,
reduce, send/recv), the whole gathered output (all_gather, gather), the whole input
(reduce_scatter, scatter) or each rank's whole buffer (all_to_all). ``algbw = size / time``
and ``busbw = algbw * bus_factor(n)`` for a group of ``n`` ranks, as nccl-tests prints them.
"""

from __future__ import annotations

import re
from collections.abc import Callable


def _all_reduce(n: int) -> float:
    return 2.0 * (n - 1) / n if n > 0 else 0.0


def _spread(n: int) -> float:
    return (n - 1) / n if n > 0 else 0.0


def _one(n: int) -> float:
    return 1.0


# collective -> (busbw / algbw factor, size is split into n equal per-rank parts)
_CONVENTIONS: dict[str, tuple[Callable[[int], float], bool]] = {
    "all_reduce": (_all_reduce, False),
    "all_gather": (_spread, True),
    "reduce_scatter": (_spread, True),
    "all_to_all": (_spread, True),
    "gather": (_spread, True),
    "scatter": (_spread, True),
    "broadcast": (_one, False),
    "reduce": (_one, False),
    "sendrecv": (_one, False),  # point to point: send, recv and their batches
}
COLLECTIVES = tuple(_CONVENTIONS)


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests' busbw / algbw ratio of ``collective`` among ``n`` ranks."""
    return _CONVENTIONS[collective][0](n)


def per_rank_split(collective: str) -> bool:
    """Whether ``size`` is split into ``n`` equal parts (nccl-tests' count is per part)."""
    return _CONVENTIONS[collective][1]


# The names traces give collectives, letters only and lower case: NCCL kernels
# (ncclDevKernel_AllGather_RING_LL, ncclKernel_SendRecv_...), NCCL's API calls in its NVTX
# ranges (ncclAllReduce), torch.distributed ops (all_gather_into_tensor, dist.all_reduce) and
# Kineto's "Collective name" (allreduce, _allgather_base, reduce_scatter_tensor_coalesced,
# alltoall_base, send), custom all-reduces (vLLM's cross_device_reduce_1stage, symmetric
# memory's multimem_all_reduce). First match wins: reduce_scatter before reduce and scatter.
PATTERNS = (
    ("reducescatter", "reduce_scatter"),
    ("allreduce", "all_reduce"),
    ("crossdevicereduce", "all_reduce"),  # vLLM's custom all-reduce kernels
    ("allgather", "all_gather"),
    ("alltoall", "all_to_all"),
    ("all2all", "all_to_all"),
    ("broadcast", "broadcast"),
    ("bcast", "broadcast"),
    ("sendrecv", "sendrecv"),
    ("send", "sendrecv"),
    ("recv", "sendrecv"),
    ("reduce", "reduce"),
    ("gather", "gather"),
    ("scatter", "scatter"),
)
_NOT_LETTERS = re.compile(r"[^a-z0-9]")


def collective_of(name: str) -> str | None:
    """The nccl-tests collective a trace's name for a communication call stands for (one of
    ``COLLECTIVES``), None when the name names none. ``barrier`` moves no bytes: None."""
    key = _NOT_LETTERS.sub("", name.lower())
    for pattern, collective in PATTERNS:
        if pattern in key:
            return collective
    return None


# bytes per element of the dtypes Kineto writes (c10 ScalarType names)
DTYPE_BYTES: dict[str, int] = {
    "Bool": 1,
    "Byte": 1,
    "Char": 1,
    "UInt8": 1,
    "Int8": 1,
    "Float8_e4m3fn": 1,
    "Float8_e4m3fnuz": 1,
    "Float8_e5m2": 1,
    "Float8_e5m2fnuz": 1,
    "Float8_e8m0fnu": 1,
    "Short": 2,
    "Half": 2,
    "BFloat16": 2,
    "UInt16": 2,
    "Int": 4,
    "Float": 4,
    "UInt32": 4,
    "ComplexHalf": 4,
    "Long": 8,
    "Double": 8,
    "UInt64": 8,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
}


def message_bytes(in_nelems: int | None, out_nelems: int | None, dtype: str | None) -> int:
    """nccl-tests' size of a call from its element counts and dtype (the larger buffer:
    Kineto's ``In msg nelems`` and ``Out msg nelems``); 0 when either is unknown."""
    size = DTYPE_BYTES.get(dtype or "")
    counts = [c for c in (in_nelems, out_nelems) if isinstance(c, int) and c >= 0]
    if size is None or not counts:
        return 0
    return max(counts) * size


# Kineto's "Input type" (C++ type names) where they are not c10 ScalarType names ("c10::Half"
# is Half: the "c10::" prefix goes)
_CPP_TYPES = {
    "double": "Double",
    "float": "Float",
    "bool": "Bool",
    "unsigned char": "Byte",
    "signed char": "Char",
    "short int": "Short",
    "int": "Int",
    "unsigned int": "UInt32",
    "long int": "Long",
    "long long int": "Long",
    "long": "Long",
    "c10::complex<float>": "ComplexFloat",
    "c10::complex<double>": "ComplexDouble",
    "c10::complex<c10::Half>": "ComplexHalf",
}
# the collectives whose nccl-tests size is the call's input buffer (all_gather and gather
# size their larger output, which one input tensor does not give)
_INPUT_SIZED = frozenset(COLLECTIVES) - {"all_gather", "gather"}


def input_type_bytes(input_type: str) -> int | None:
    """Bytes per element of a Kineto ``Input type`` (``float``, ``c10::BFloat16``), None
    for what is not one tensor's dtype (``TensorList``, ``Scalar``, unknown names)."""
    dtype = _CPP_TYPES.get(input_type, input_type.removeprefix("c10::"))
    return DTYPE_BYTES.get(dtype)


def input_message_bytes(dims: object, input_type: object, collective: str | None) -> int:
    """nccl-tests' size of a call from its first input tensor's dims and type (Kineto's
    ``record_param_comms`` ``Input Dims[0]``/``Input type[0]``), for a collective whose size
    is its input buffer (dims ``[]``: a 0-d tensor); 0 when unknown (a tensor list, no
    dims, all_gather/gather, no collective)."""
    if collective not in _INPUT_SIZED or not isinstance(input_type, str):
        return 0
    size = input_type_bytes(input_type)
    if size is None or not isinstance(dims, list):
        return 0
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims):
        return 0
    count = 1
    for d in dims:
        count *= d
    return count * size


def algbw_gbps(size_bytes: int | float, time_us: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes per second): ``size / time``."""
    return size_bytes / (time_us * 1e3) if time_us > 0 else 0.0


def collective_index(name: str) -> int:
    """``collective_of(name)``'s index in ``COLLECTIVES`` (the model's ``gpu_ops.collective``),
    -1 when the name names none."""
    c = collective_of(name)
    return -1 if c is None else COLLECTIVES.index(c)
