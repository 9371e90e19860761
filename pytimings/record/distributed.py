"""Record torch.distributed collectives and point-to-point calls as ``comm`` regions.

``instrument_torch_distributed()`` replaces the functions in the ``torch.distributed``
namespace (what ``import torch.distributed as dist; dist.all_reduce(...)`` calls) by
wrappers that run the original inside ``region("dist.<op>", kind="comm", nbytes=...,
payload=<group size>)``; ``uninstrument()`` puts the very same function objects back.
Calls torch makes internally (``distributed_c10d`` module globals) and names imported
before instrumenting (``from torch.distributed import all_reduce``) are not wrapped.

What ``nbytes`` means follows nccl-tests (the "size" column of its tables), so that
``algbw = nbytes / time`` and ``busbw = algbw * factor`` are comparable with nccl-tests:

* ``all_reduce``: the tensor; bus factor 2(n-1)/n
* ``all_gather``, ``all_gather_into_tensor``, ``all_gather_single``: the whole gathered
  output; (n-1)/n
* ``reduce_scatter``, ``reduce_scatter_tensor``, ``reduce_scatter_single``: the whole input;
  (n-1)/n
* ``all_to_all``, ``all_to_all_single``: the whole input; (n-1)/n
* ``broadcast``, ``reduce``, ``send``, ``recv``, ``isend``, ``irecv``: the tensor; 1
* ``gather``: the whole gathered buffer (the tensor times n, on every rank); (n-1)/n
* ``scatter``: the whole scattered buffer (the output tensor times n); (n-1)/n
* ``batch_isend_irecv``: the sum of its ops' tensors; 1
* ``barrier``: no bytes, so no bandwidth (its time is still recorded)

Not wrapped: the ``*_object`` calls (pickled Python objects, no meaningful byte count),
``all_reduce_coalesced``/``all_gather_coalesced`` and the ``_coalescing_manager`` batches.

(n is the size of the call's process group, recorded as the region's payload.)

What is timed, honestly:

* Blocking calls (``async_op=False``, ``send``, ``recv``) are timed from entry to return
  on the host. With CUDA tensors the region also records CUDA events on the caller's
  current stream: NCCL makes its stream wait for the current stream before the collective
  and the current stream wait for the collective before the call returns, so the GPU span
  on that stream covers the collective (including any wait for peers).
* Asynchronous calls (``async_op=True``, ``isend``, ``irecv``, ``batch_isend_irecv``) are
  named ``dist.<op>.async`` (``dist.isend``... are always asynchronous) and time only the
  host enqueue; they get no GPU events and no bandwidth, because the transfer completes at
  some later ``wait()`` that the region does not see.
"""

from __future__ import annotations

import functools
import inspect
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytimings.model.recording import ALWAYS_ASYNC, ASYNC_SUFFIX
from pytimings.model.recording import COMM_PREFIX as PREFIX
from pytimings.record import nccl

# nbytes(arguments, group size): nccl-tests' "size" of the call, None for no bytes
_NBytes = Callable[[dict[str, Any], int], int | None]


def _arg_nbytes(name: str) -> _NBytes:
    return lambda a, n: int(a[name].nbytes)


def _list_nbytes(name: str) -> _NBytes:
    return lambda a, n: sum(int(t.nbytes) for t in a[name])


def _times_group(name: str) -> _NBytes:
    # gather/scatter: the list exists on the root only; every rank has its n-th part
    return lambda a, n: int(a[name].nbytes) * n


def _batch_nbytes(a: dict[str, Any], n: int) -> int:
    return sum(int(p.tensor.nbytes) for p in a["p2p_op_list"])


def _no_bytes(a: dict[str, Any], n: int) -> None:
    return None


@dataclass(frozen=True)
class _OpSpec:
    collective: str | None  # nccl-tests' operation whose bus factor applies (pytimings.record.nccl)
    nbytes: _NBytes
    tensor: str  # argument whose device decides where the GPU is timed


_SPECS: dict[str, _OpSpec] = {
    "all_reduce": _OpSpec("all_reduce", _arg_nbytes("tensor"), "tensor"),
    "all_gather": _OpSpec("all_gather", _list_nbytes("tensor_list"), "tensor"),
    "all_gather_into_tensor": _OpSpec("all_gather", _arg_nbytes("output_tensor"), "input_tensor"),
    "all_gather_single": _OpSpec("all_gather", _arg_nbytes("output_tensor"), "input_tensor"),
    "reduce_scatter": _OpSpec("reduce_scatter", _list_nbytes("input_list"), "output"),
    "reduce_scatter_tensor": _OpSpec("reduce_scatter", _arg_nbytes("input"), "input"),
    "reduce_scatter_single": _OpSpec("reduce_scatter", _arg_nbytes("input"), "input"),
    "all_to_all": _OpSpec("all_to_all", _list_nbytes("input_tensor_list"), "output_tensor_list"),
    "all_to_all_single": _OpSpec("all_to_all", _arg_nbytes("input"), "input"),
    "broadcast": _OpSpec("broadcast", _arg_nbytes("tensor"), "tensor"),
    "reduce": _OpSpec("reduce", _arg_nbytes("tensor"), "tensor"),
    "gather": _OpSpec("gather", _times_group("tensor"), "tensor"),
    "scatter": _OpSpec("scatter", _times_group("tensor"), "tensor"),
    "barrier": _OpSpec(None, _no_bytes, ""),
    "send": _OpSpec("sendrecv", _arg_nbytes("tensor"), "tensor"),
    "recv": _OpSpec("sendrecv", _arg_nbytes("tensor"), "tensor"),
    "isend": _OpSpec("sendrecv", _arg_nbytes("tensor"), "tensor"),
    "irecv": _OpSpec("sendrecv", _arg_nbytes("tensor"), "tensor"),
    "batch_isend_irecv": _OpSpec("sendrecv", _batch_nbytes, "p2p_op_list"),
}
OPS = tuple(_SPECS)


@dataclass(frozen=True)
class CommOp:
    """What a region name recorded by the wrapper stands for."""

    op: str
    asynchronous: bool

    def bus_factor(self, world_size: int) -> float:
        """nccl-tests' busbw / algbw ratio of this op among ``world_size`` ranks (NaN for
        ``barrier``, which moves no bytes)."""
        collective = _SPECS[self.op].collective
        return math.nan if collective is None else nccl.bus_factor(collective, world_size)


def comm_op_of(region_name: str) -> CommOp | None:
    """The collective behind a region name such as ``dist.all_reduce``, else None."""
    if not region_name.startswith(PREFIX):
        return None
    op = region_name[len(PREFIX) :]
    asynchronous = op.endswith(ASYNC_SUFFIX)
    if asynchronous:
        op = op[: -len(ASYNC_SUFFIX)]
    spec = _SPECS.get(op)
    if spec is None or (asynchronous and op in ALWAYS_ASYNC):
        return None
    return CommOp(op, asynchronous or op in ALWAYS_ASYNC)


# -- wrapping --------------------------------------------------------------------------------

_lock = threading.Lock()
_originals: dict[str, Any] = {}  # op -> the function found in torch.distributed


class _P2PFunction:
    """Wrapper for isend/irecv that compares equal to the original function.

    torch checks ``P2POp(op=...)`` with ``op in [isend, irecv]`` against its own module
    globals, so a wrapped ``dist.isend`` must pass that check; ``batch_isend_irecv`` is
    given back the originals before it runs (it tells sends from receives by identity).
    """

    def __init__(self, wrapper: Callable[..., Any], original: Callable[..., Any]) -> None:
        functools.update_wrapper(self, original)
        self._wrapper = wrapper
        self.original = original

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._wrapper(*args, **kwargs)

    def __eq__(self, other: object) -> bool:
        return other is self or other is self.original

    def __hash__(self) -> int:
        return hash(self.original)


def _wrap(op: str, original: Callable[..., Any]) -> Any:
    import torch
    import torch.distributed as dist

    from pytimings.record.recorder import region

    spec = _SPECS[op]
    params = list(inspect.signature(original).parameters)
    sync_name = PREFIX + op
    async_name = sync_name if op in ALWAYS_ASYNC else sync_name + ASYNC_SUFFIX

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        a = dict(zip(params, args, strict=False))
        a.update(kwargs)
        asynchronous = op in ALWAYS_ASYNC or bool(a.get("async_op", False))
        group = a.get("group")
        if op == "batch_isend_irecv" and a["p2p_op_list"]:
            group = a["p2p_op_list"][0].group
        world = dist.get_world_size(group)
        stream = None
        if not asynchronous:
            t = a.get(spec.tensor)
            if isinstance(t, list | tuple):
                t = t[0] if t else None
            if isinstance(t, torch.Tensor) and t.is_cuda:
                stream = torch.cuda.current_stream(t.device)
        name = async_name if asynchronous else sync_name
        with region(name, kind="comm", stream=stream, nbytes=spec.nbytes(a, world), payload=world):
            if op == "batch_isend_irecv":
                return _call_batch(original, a["p2p_op_list"])
            return original(*args, **kwargs)

    if op in ("isend", "irecv"):
        return _P2PFunction(wrapper, original)
    return functools.wraps(original)(wrapper)


def _call_batch(original: Callable[..., Any], p2p_ops: list[Any]) -> Any:
    swapped = [(p, p.op) for p in p2p_ops if isinstance(p.op, _P2PFunction)]
    for p, wrapped in swapped:
        p.op = wrapped.original
    try:
        return original(p2p_ops)
    finally:
        for p, wrapped in swapped:
            p.op = wrapped


def instrument_torch_distributed() -> None:
    """Wrap torch.distributed's collectives and P2P calls as ``comm`` regions (idempotent)."""
    import torch.distributed as dist

    with _lock:
        for op in OPS:
            original = getattr(dist, op, None)
            if op in _originals or original is None:  # done already / not in this torch
                continue
            _originals[op] = original
            setattr(dist, op, _wrap(op, original))


def uninstrument() -> None:
    """Put back the functions ``instrument_torch_distributed`` replaced (idempotent)."""
    with _lock:
        if not _originals:
            return
        import torch.distributed as dist

        for op, original in _originals.items():
            setattr(dist, op, original)
        _originals.clear()


def is_instrumented() -> bool:
    return bool(_originals)
