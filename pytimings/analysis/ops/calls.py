"""What a trace says of one op call, what the perf models make of it, and the shape helpers.

An op call is read as the profiler writes it (Kineto ``record_shapes``): one entry per input
in ``Input Dims`` (a list of ints for a tensor, ``[]`` for a scalar or None, a list of lists
for a tensor list), its ``Input type`` (``c10::BFloat16``, ``float``, ``Scalar``, ...) and its
``Concrete Inputs`` (the value of scalar arguments as text). The helpers here turn those into
numbers and raise :class:`NoModel` when an input is not what a family's formula needs, so a
model never guesses from an odd shape.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

CATEGORIES = (
    "gemm",
    "attention",
    "moe",
    "norm",
    "elementwise",
    "reduce",
    "conv",
    "comm",
    "memcpy",
    "memset",
    "other",
)

# Kineto "Input type" -> (compute dtype for the roofline peak, bytes per element as counted in
# "Input Dims"). Packed fp4 (two values per byte) counts one byte per stored element.
_TYPES: dict[str, tuple[str, int]] = {
    "double": ("fp64", 8),
    "float": ("fp32", 4),
    "c10::Half": ("fp16", 2),
    "c10::BFloat16": ("bf16", 2),
    "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1),
    "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1),
    "c10::Float8_e8m0fnu": ("fp8", 1),
    "c10::Float4_e2m1fn_x2": ("fp4", 1),
    "signed char": ("int8", 1),
    "unsigned char": ("int8", 1),
    "bool": ("int8", 1),
    "short int": ("int16", 2),
    "int": ("int32", 4),
    "unsigned int": ("int32", 4),
    "long int": ("int64", 8),
    "long long int": ("int64", 8),
    "c10::complex<float>": ("fp32", 8),
    "c10::complex<double>": ("fp64", 16),
    "c10::complex<c10::Half>": ("fp16", 4),
}
FLOAT_DTYPES = frozenset({"fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4"})

# torch ScalarType enum values, as "Concrete Inputs" writes a dtype argument (out_dtype=15)
_SCALAR_TYPES: dict[int, str] = {
    0: "unsigned char",
    1: "signed char",
    2: "short int",
    3: "int",
    4: "long int",
    5: "c10::Half",
    6: "float",
    7: "double",
    11: "bool",
    15: "c10::BFloat16",
    23: "c10::Float8_e5m2",
    24: "c10::Float8_e4m3fn",
    25: "c10::Float8_e5m2fnuz",
    26: "c10::Float8_e4m3fnuz",
}


@dataclass(frozen=True)
class OpCall:
    """What a trace says of one op call (Kineto ``record_shapes`` args, as written; nested
    lists are kept as tuples)."""

    name: str
    input_dims: tuple[Any, ...]
    input_types: tuple[str, ...]
    concrete_inputs: tuple[str, ...] = ()
    input_strides: tuple[Any, ...] = ()
    kernel_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # nested lists become tuples: a call is hashable, so equal calls share one model
        object.__setattr__(self, "input_dims", _frozen(self.input_dims))
        object.__setattr__(self, "input_strides", _frozen(self.input_strides))

    @classmethod
    def from_kineto(
        cls, name: str, args: Mapping[str, Any], kernel_names: tuple[str, ...] = ()
    ) -> OpCall:
        """A call from a Kineto ``cpu_op`` event's ``args`` (whichever shape keys it has)."""

        def seq(key: str) -> tuple[Any, ...]:
            value = args.get(key)
            return tuple(value) if isinstance(value, (list, tuple)) else ()

        types = tuple(str(t) if t is not None else "" for t in seq("Input type"))
        concrete = tuple(str(c) if c is not None else "" for c in seq("Concrete Inputs"))
        return cls(name, seq("Input Dims"), types, concrete, seq("Input Strides"), kernel_names)


def _frozen(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


@dataclass(frozen=True)
class OpCost:
    """An op call's category and, where a perf model fits its inputs, its per-call cost."""

    category: str
    family: str | None
    gflops: float | None
    bytes: float | None
    dtype: str | None


class NoModel(Exception):
    """The call's inputs do not fit the family's formula (the op keeps its category)."""


def dims(call: OpCall, i: int) -> tuple[int, ...]:
    """Input ``i`` as a tensor shape; NoModel when it is absent, a scalar or a tensor list."""
    if i >= len(call.input_dims):
        raise NoModel(f"input {i} missing")
    d = call.input_dims[i]
    if not isinstance(d, (list, tuple)) or not d:
        raise NoModel(f"input {i} is not a tensor")
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in d):
        raise NoModel(f"input {i} is not a tensor shape")
    return tuple(d)


def _reads(read: Callable[[OpCall, int], tuple[int, ...]], call: OpCall, i: int) -> bool:
    """Whether ``read`` takes input ``i`` without a NoModel."""
    try:
        read(call, i)
    except NoModel:
        return False
    return True


def is_tensor(call: OpCall, i: int) -> bool:
    """Whether input ``i`` is a tensor of at least one dimension."""
    return _reads(dims, call, i)


def shape(call: OpCall, i: int) -> tuple[int, ...]:
    """Input ``i``'s shape, ``()`` for a 0-dim tensor (``[]`` with an element type)."""
    if i < len(call.input_dims) and call.input_dims[i] in ([], ()) and type_of(call, i) in _TYPES:
        return ()
    return dims(call, i)


def has_shape(call: OpCall, i: int) -> bool:
    """Whether input ``i`` is a tensor, 0-dim included."""
    return _reads(shape, call, i)


def type_of(call: OpCall, i: int) -> str:
    """Input ``i``'s Kineto type name ("" where the trace has none)."""
    return call.input_types[i] if i < len(call.input_types) else ""


def _known(type_name: str) -> tuple[str, int]:
    known = _TYPES.get(type_name)
    if known is None:
        raise NoModel(f"unknown element type {type_name!r}")
    return known


def itemsize(type_name: str) -> int:
    """Bytes per element of a Kineto type; NoModel for a type the models do not know."""
    return _known(type_name)[1]


def dtype_of(type_name: str) -> str:
    """The roofline dtype of a Kineto type; NoModel for a type the models do not know."""
    return _known(type_name)[0]


def input_itemsize(call: OpCall, i: int) -> int:
    """Bytes per element of input ``i`` (its ``Input type``)."""
    return itemsize(type_of(call, i))


def input_dtype(call: OpCall, i: int) -> str:
    """The roofline dtype of input ``i`` (its ``Input type``)."""
    return dtype_of(type_of(call, i))


def tensor_bytes(call: OpCall, *inputs: int) -> int:
    """Bytes of the inputs, summed (numel x element size; a 0-dim tensor is one element)."""
    return sum(math.prod(shape(call, i)) * input_itemsize(call, i) for i in inputs)


def tensors(call: OpCall, *inputs: int) -> tuple[int, ...]:
    """Those of the inputs that are tensors of at least one dimension (optional ones given:
    a bias, a weight)."""
    return tuple(i for i in inputs if is_tensor(call, i))


def scalar_type(value: str) -> str | None:
    """The Kineto type name a dtype argument names (``"15"`` -> ``c10::BFloat16``)."""
    try:
        return _SCALAR_TYPES.get(int(value))
    except ValueError:
        return None


def concrete(call: OpCall, i: int) -> Any:
    """Input ``i``'s concrete value as a Python literal; None when absent or unreadable."""
    if i >= len(call.concrete_inputs):
        return None
    text = call.concrete_inputs[i].strip()
    if not text:
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def int_list(call: OpCall, i: int, rank: int, default: int) -> tuple[int, ...]:
    """A ScalarList argument (stride, padding, ...) of ``rank`` ints; one int repeats."""
    v = concrete(call, i)
    if v is None:
        return (default,) * rank
    if isinstance(v, int) and not isinstance(v, bool):
        return (v,) * rank
    if isinstance(v, (list, tuple)) and all(isinstance(x, int) for x in v):
        if len(v) == 1:
            return (int(v[0]),) * rank
        if len(v) == rank:
            return tuple(int(x) for x in v)
    raise NoModel(f"input {i} is not a list of {rank} ints")


def flag(call: OpCall, i: int, default: bool) -> bool:
    """A bool argument (``is_causal``); ``default`` where the trace does not say."""
    v = concrete(call, i)
    return v if isinstance(v, bool) else default


def broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast of tensor shapes (numpy rules); NoModel where they do not broadcast."""
    rank = max(len(s) for s in shapes)
    out = []
    for k in range(rank):
        sizes = {s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise NoModel(f"shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)
