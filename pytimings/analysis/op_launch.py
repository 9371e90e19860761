"""Each GPU op charged to the op that launched it (docs/ops.md, "Attribution to ops").

The launching op of a GPU op is the innermost host op around its launch call, on the
launch call's thread: a Kineto ``cpu_op`` (its record_shapes args in ``host_ops.args``) or,
in traces without cpu_ops (Nsight), an NVTX range (PyTorch's ``emit_nvtx`` texts carry the
op name and shapes: ``aten::mm, seq = 12, op_id = 3, sizes = [[8, 4], [4, 2]]``). Ops run
by a CUDA/HIP graph replay are not charged to what surrounds the graph launch (the ops that
recorded them ran at capture time): they stay unattributed. Every GPU op that is not
charged is counted by reason, never guessed.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings._native import _host
from pytimings.analysis.graphs import graph_ops
from pytimings.analysis.launches import Launches
from pytimings.model.trace import ActivityKind, RangeKind, Trace

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]

NO_LAUNCH = "no launch call in the trace"
NO_OP = "no op around the launch call"
GRAPH = "replayed by a CUDA/HIP graph (no capture to match)"
REASONS = (NO_LAUNCH, NO_OP, GRAPH)

# PyTorch emit_nvtx / autograd-nvtx range text (torch profiler getNvtxStr)
_NVTX_OP = re.compile(
    r"^(?P<name>.+?)(?:, seq = -?\d+)?(?:, op_id = \d+)?(?:, sizes = (?P<sizes>\[.*?\]))?"
    r"(?:, input_op_ids = .*)?$"
)


@dataclass
class OpLaunch:
    """Per GPU op: the row of its launching op in ``table`` (``host_ops`` or ``ranges``),
    or -1 with ``reason`` (an index into :data:`REASONS`; -1 where attributed)."""

    table: str
    op_row: I64
    reason: npt.NDArray[np.int8]
    graph: npt.NDArray[np.bool_]


def _innermost(
    a_start: I64, a_end: I64, a_thread: I32, a_rows: I64, q_s: I64, q_e: I64, q_thread: I32
) -> I64:
    """Per query (every row of ``q_*``), the row of the innermost activity among ``a_rows``
    enclosing it on its thread, or -1: the compiled sweep reads both tables through their
    (thread, start) orders, with no sorted copies of their columns."""
    a_order = _host.group_start_order(a_thread, a_start, a_rows)
    q_order = _host.group_start_order(q_thread, q_s)
    hit = _host.innermost_enclosing(a_start, a_end, a_thread, a_order, q_s, q_e, q_thread, q_order)
    out = np.empty(q_s.size, dtype=np.int64)
    out[q_order] = hit
    return out


def launching_ops(trace: Trace, launches: Launches) -> OpLaunch:
    """Each GPU op's launching op (see the module docstring)."""
    n = len(trace.gpu_ops)
    host, rng, api = trace.host_ops, trace.ranges, trace.api_calls
    cpu = np.flatnonzero(host["kind"] == ActivityKind.CPU_OP)
    if cpu.size:
        table, src, rows = "host_ops", host, cpu
    else:
        nvtx = (rng["thread"] >= 0) & (
            (rng["kind"] == RangeKind.NVTX_PUSHPOP) | (rng["kind"] == RangeKind.NVTX_STARTEND)
        )
        table, src, rows = "ranges", rng, np.flatnonzero(nvtx)
    graph = graph_ops(trace, launches) if n else np.zeros(0, dtype=bool)
    op_row = np.full(n, -1, dtype=np.int64)
    reason = np.full(n, REASONS.index(NO_LAUNCH), dtype=np.int8)
    linked = launches.api_row >= 0
    direct = linked & ~graph
    if direct.any() and rows.size:
        # every API call queried once (cheaper than finding the distinct launch calls)
        c = np.ascontiguousarray
        found = _innermost(
            c(src["start"]), c(src["end"]), c(src["thread"]), rows,
            c(api["start"]), c(api["end"]), c(api["thread"]),
        )  # fmt: skip
        op_row[direct] = found[launches.api_row[direct]]
    reason[direct] = REASONS.index(NO_OP)
    reason[graph] = REASONS.index(GRAPH)
    reason[op_row >= 0] = -1
    return OpLaunch(table, op_row, reason, graph)


@dataclass(frozen=True)
class OpText:
    """An op's name and record_shapes args, parsed once per distinct text."""

    name: str
    input_dims: list[Any]
    input_types: list[str]
    concrete_inputs: list[str]
    input_strides: list[Any]


def _list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, list) else []


def kineto_op(name: str, args_text: str) -> OpText:
    """A cpu_op's name and its ``host_ops.args`` JSON text ("" when none)."""
    if not args_text:
        return OpText(name, [], [], [], [])
    dims, types, concrete, strides = json.loads(args_text)
    return OpText(
        name,
        _list(dims),
        [str(t) for t in _list(types)],
        [str(c) for c in _list(concrete)],
        _list(strides),
    )


def nvtx_op(text: str) -> OpText:
    """An emit_nvtx range text's op name and sizes (other NVTX texts: the text, no shapes)."""
    m = _NVTX_OP.match(text)
    if m is None:
        return OpText(text, [], [], [], [])
    sizes: list[Any] = []
    if m.group("sizes"):
        try:
            parsed = ast.literal_eval(m.group("sizes"))
        except (ValueError, SyntaxError):
            return OpText(text, [], [], [], [])
        sizes = _list(parsed)
    return OpText(m.group("name"), sizes, [], [], [])
