"""Reductions over dimensions (sum, mean, max, norm, ...) and softmax.

A reduction does one FLOP per input element. Bytes: the input read once and the output
written once; the output keeps the dimensions not reduced (from the ``dim`` argument in
"Concrete Inputs"; no ``dim`` reduces everything to one element). ``max``/``min`` over a
dimension also write int64 indices, ``argmax``/``argmin`` write only int64 indices.
Softmax (and log-softmax) reads and writes the whole tensor: 5 FLOPs an element
(max, subtract, exp, sum, divide).
"""

from __future__ import annotations

import math

from pytimings.analysis.ops.calls import (
    NoModel,
    OpCall,
    concrete,
    dims,
    flag,
    input_dtype,
    input_itemsize,
    itemsize,
    tensor_bytes,
    type_of,
)
from pytimings.analysis.ops.family import Cost, Family

# op -> index of its dim argument
_DIM = {
    "sum": 1,
    "mean": 1,
    "nansum": 1,
    "nanmean": 1,
    "prod": 1,
    "amax": 1,
    "amin": 1,
    "max": 1,
    "min": 1,
    "argmax": 1,
    "argmin": 1,
    "var": 1,
    "std": 1,
    "logsumexp": 1,
    "all": 1,
    "any": 1,
    "norm": 2,
    "linalg_norm": 2,
    "linalg_vector_norm": 2,
}


def _kept(call: OpCall, shape: tuple[int, ...], i: int) -> int:
    """Elements left after reducing over the dims that argument ``i`` names."""
    value = concrete(call, i)
    if value is None:
        if type_of(call, i) in ("Scalar", "ScalarList", "int[]"):
            raise NoModel("the reduced dims are not in the trace")
        return 1
    if isinstance(value, bool) or not isinstance(value, (int, list, tuple)):
        raise NoModel("the reduced dims are not ints")  # 1.5, 1j, "x": list() raised
    axes = [value] if isinstance(value, int) else list(value)
    if not axes:
        return 1
    if not all(isinstance(a, int) and -len(shape) <= a < len(shape) for a in axes):
        raise NoModel("reduced dims out of range")
    reduced = {a % len(shape) for a in axes}
    return math.prod(s for k, s in enumerate(shape) if k not in reduced)


class Reduce(Family):
    family = "reduce"
    category = "reduce"
    formula = (
        "reduction over dims: numel(X) FLOPs; bytes X + out (+ int64 indices for max/min "
        "over a dim, only indices for argmax/argmin)"
    )
    names = tuple(f"aten::{n}" for n in _DIM)

    def cost(self, call: OpCall) -> Cost:
        shape = dims(call, 0)
        op = call.name.removeprefix("aten::")
        kept = _kept(call, shape, _DIM[op])
        has_dim = concrete(call, _DIM[op]) is not None
        out_type = "bool" if op in ("all", "any") else type_of(call, 0)
        out = kept * itemsize(out_type)
        if op in ("argmax", "argmin"):
            out = kept * 8
        elif op in ("max", "min") and has_dim:
            out += kept * 8
        nbytes = tensor_bytes(call, 0) + out
        return Cost(float(math.prod(shape)), float(nbytes), input_dtype(call, 0))


class Softmax(Family):
    family = "softmax"
    category = "reduce"
    formula = "softmax(X, dim): 5·numel(X) FLOPs; bytes X + out (fp32 out for half_to_float)"
    names = ("aten::_softmax", "aten::softmax", "aten::_log_softmax", "aten::log_softmax")

    def cost(self, call: OpCall) -> Cost:
        numel = math.prod(dims(call, 0))
        to_float = call.name.startswith("aten::_") and flag(call, 2, False)
        out = numel * (4 if to_float else input_itemsize(call, 0))
        nbytes = tensor_bytes(call, 0) + out
        return Cost(float(5 * numel), float(nbytes), input_dtype(call, 0))
