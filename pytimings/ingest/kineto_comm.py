"""What a Kineto NCCL kernel says about its collective (PyTorch 2.1+ writes the
record_param_comms args on the kernel too): ``Collective name``, ``In msg nelems``,
``Out msg nelems``, ``dtype`` and ``Group size``. The size is nccl-tests' (the larger buffer,
:func:`pytimings.model.comm.message_bytes`), the collective the one ``Collective name`` names
(``_allgather_base``: all_gather); a kernel without them keeps bytes 0, collective and group
size -1 (unknown). Older traces carry only ``Input Dims`` on record_param_comms
(no group size, no collective): their sizes stay unknown.

The native scanner keeps the five values of each such kernel as one JSON text
("[name, in, out, dtype, group]", interned: a trace has few distinct ones); each distinct
text is decoded here once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.arrays import unique
from pytimings.model.comm import (
    COLLECTIVES,
    collective_index,
    input_message_bytes,
    message_bytes,
)
from pytimings.model.trace import ActivityKind, OpKind
from pytimings.table import Table

I64 = npt.NDArray[np.int64]
_GROUP_MAX = np.iinfo(np.int16).max  # ranks are int16 in the model


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _values(text: str) -> tuple[int, int, int]:
    """(bytes, collective, group size) of one kernel's args text."""
    try:
        name, n_in, n_out, dtype, group = json.loads(text)
    except ValueError:  # the scanner validated the JSON: not five values
        return 0, -1, -1
    if name is None:
        return 0, -1, -1
    nbytes = message_bytes(_count(n_in), _count(n_out), dtype if isinstance(dtype, str) else None)
    g = _count(group)
    return (
        nbytes,
        collective_index(name) if isinstance(name, str) else -1,
        g if g is not None and 0 < g <= _GROUP_MAX else -1,
    )


def comm_columns(args: npt.NDArray[np.int32], texts: Sequence[str]) -> dict[str, npt.NDArray[Any]]:
    """Per GPU row, from its args text id + 1 (0: none; ``texts`` by id): the message bytes
    (0 unknown), the collective (index into COLLECTIVES, -1 unknown) and the group size (-1
    unknown)."""
    ids = unique(args[args > 0])
    table = np.zeros((3, int(ids[-1]) + 1 if ids.size else 1), dtype=np.int64)
    table[1:, :] = -1
    for i in ids.tolist():
        table[:, i] = _values(texts[i - 1])
    return {
        "comm_bytes": table[0][args],
        "collective": table[1][args].astype(np.int8),
        "group_size": table[2][args].astype(np.int16),
    }


_PARAM_COMMS = "record_param_comms"
_CORRELATION_MASK = (1 << 40) - 1
# the c10d ops around record_param_comms: their names name the collective the call ran
# (``c10d::alltoall_base_`` on a ``SendRecv`` kernel is all_to_all)
_C10D_PREFIXES = ("c10d::", "c10d_functional::", "_c10d_functional::")


def _enclosing(rows: I64, host: Table, row: int) -> int:
    """The innermost of ``rows`` (host rows on ``row``'s thread) around host row ``row``,
    or -1."""
    start, end = host["start"], host["end"]
    around = rows[(start[rows] <= start[row]) & (end[rows] >= end[row]) & (rows != row)]
    return int(around[np.argmax(start[around])]) if around.size else -1


def sizes_from_launching_ops(
    gpu_ops: Table, api_calls: Table, host_ops: Table, strings: Sequence[str]
) -> int:
    """Size (``gpu_ops.bytes``, in place) each kernel that names a collective, has no size
    and is the one such kernel launched from inside a ``record_param_comms`` cpu_op on that
    op's thread, from the op's first input (its dims and type; the collective: the kernel's
    as recorded, else the enclosing c10d op's, else the kernel name's); a kernel without
    a recorded collective takes the c10d op's. Several collective kernels under one op
    (coalesced calls) are left unsized: one input does not say how the bytes split. The
    number of kernels sized."""
    ids = [i for i, text in enumerate(strings) if text == _PARAM_COMMS]
    c10d = [i for i, text in enumerate(strings) if text.startswith(_C10D_PREFIXES)]
    cpu_op = host_ops["kind"] == ActivityKind.CPU_OP
    params = np.flatnonzero(cpu_op & np.isin(host_ops["name"], ids))
    if params.size == 0 or len(api_calls) == 0:
        return 0
    ops = gpu_ops
    kernel = ops["kind"] == OpKind.KERNEL
    names = unique(ops["name"][kernel])
    named = names[[collective_index(strings[n]) >= 0 for n in names.tolist()]]
    # the kernels that name a collective: none of them unsized, nothing to do (most traces)
    is_coll = kernel & ((ops["collective"] >= 0) | np.isin(ops["name"], named))
    if not (is_coll & (ops["bytes"] <= 0)).any():
        return 0
    parents = np.flatnonzero(cpu_op & np.isin(host_ops["name"], c10d))
    api_order = np.lexsort((api_calls["start"], api_calls["thread"]))
    api_thread = api_calls["thread"][api_order]
    api_start = api_calls["start"][api_order]
    api_end = api_calls["end"][api_order]
    # GPU ops by (pid, correlation): the kernels a call launched
    key = (ops["pid"].astype(np.int64) << 40) | (ops["correlation"] & _CORRELATION_MASK)
    op_order = np.argsort(key, kind="stable")
    op_key = key[op_order]
    call_key = (api_calls["pid"][api_order].astype(np.int64) << 40) | (
        api_calls["correlation"][api_order] & _CORRELATION_MASK
    )
    at = np.searchsorted(op_key, call_key, side="left")
    to = np.searchsorted(op_key, call_key, side="right")
    # per call (in api_order): how many collective kernels it launched and the sum of their
    # rows (the row itself where it launched one); prefix sums over the calls then answer
    # each op's calls at once
    coll_sorted = is_coll[op_order]
    counts = np.concatenate(([0], np.cumsum(coll_sorted)))
    rows = np.concatenate(([0], np.cumsum(np.where(coll_sorted, op_order, 0))))
    launches = api_calls["correlation"][api_order] >= 0
    count_prefix = np.concatenate(([0], np.cumsum(np.where(launches, counts[to] - counts[at], 0))))
    row_prefix = np.concatenate(([0], np.cumsum(np.where(launches, rows[to] - rows[at], 0))))
    # each op's calls: on its thread, from its start, ending by its end (a suffix of those
    # starting inside it where the thread's calls end in start order; else searched per op)
    op_thread = host_ops["thread"][params]
    op_start, op_end = host_ops["start"][params], host_ops["end"][params]
    first = np.zeros(params.size, dtype=np.int64)
    last = np.zeros(params.size, dtype=np.int64)
    for thread in unique(op_thread).tolist():
        mine = np.flatnonzero(op_thread == thread)
        lo = int(np.searchsorted(api_thread, thread, side="left"))
        hi = int(np.searchsorted(api_thread, thread, side="right"))
        if np.any(np.diff(api_end[lo:hi]) < 0):  # nested calls: ends out of start order
            first[mine], last[mine] = -1, -1
            continue
        first[mine] = lo + np.searchsorted(api_start[lo:hi], op_start[mine], side="left")
        last[mine] = lo + np.minimum(
            np.searchsorted(api_start[lo:hi], op_end[mine], side="right"),
            np.searchsorted(api_end[lo:hi], op_end[mine], side="right"),
        )
    sized = 0
    for k in np.flatnonzero(first >= 0).tolist():
        if count_prefix[last[k]] - count_prefix[first[k]] != 1:
            continue
        kernel_row = int(row_prefix[last[k]] - row_prefix[first[k]])
        if ops["bytes"][kernel_row] <= 0:
            sized += _size(ops, host_ops, strings, parents, int(params[k]), kernel_row)
    for k in np.flatnonzero(first < 0).tolist():  # threads with nested calls: one by one
        row = int(params[k])
        calls = api_order[np.flatnonzero(
            (api_thread == op_thread[k]) & (api_start >= op_start[k]) & (api_end <= op_end[k])
            & launches
        )]  # fmt: skip
        if calls.size == 0:
            continue
        found = np.concatenate([op_order[a:b] for a, b in zip(at[calls], to[calls], strict=True)])
        found = found[is_coll[found]]
        if found.size == 1 and ops["bytes"][found[0]] <= 0:
            sized += _size(ops, host_ops, strings, parents, row, int(found[0]))
    return sized


def _size(
    ops: Table, host_ops: Table, strings: Sequence[str], parents: I64, row: int, kernel_row: int
) -> int:
    """Size the collective kernel ``kernel_row`` (in place) from the ``record_param_comms``
    cpu_op ``row`` it is the one collective kernel under (1: sized, 0: its input says no
    size); the collective: the kernel's, else the enclosing c10d op's (``parents``), else
    the kernel name's."""
    coll = int(ops["collective"][kernel_row])
    if coll < 0:
        same_thread = parents[host_ops["thread"][parents] == host_ops["thread"][row]]
        parent = _enclosing(same_thread, host_ops, row)
        if parent >= 0:
            coll = collective_index(strings[host_ops["name"][parent]])
        if coll >= 0:
            ops["collective"][kernel_row] = coll
        else:
            coll = collective_index(strings[ops["name"][kernel_row]])
    nbytes = _first_input_bytes(strings[host_ops["args"][row]], COLLECTIVES[coll])
    if nbytes > 0:
        ops["bytes"][kernel_row] = nbytes
        return 1
    return 0


def _first_input_bytes(args_text: str, collective: str) -> int:
    """The bytes of a cpu_op's first input (its args text: [Input Dims, Input type, ...]) as
    the size of ``collective``; 0 when unknown."""
    if not args_text:
        return 0
    dims, types = json.loads(args_text)[:2]
    if not isinstance(dims, list) or not isinstance(types, list) or not dims or not types:
        return 0
    return input_message_bytes(dims[0], types[0], collective)
