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
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings._native import _optable
from pytimings.analysis.launches import Launches
from pytimings.ingest.names import NVTX_OP_TEXT
from pytimings.model.trace import ActivityKind, RangeKind, Trace

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]

NO_LAUNCH = "no launch call in the trace"
NO_OP = "no op around the launch call"
GRAPH = "replayed by a CUDA/HIP graph (no capture to match)"
# graph replays with captures to match (pytimings.analysis.graph_capture)
GRAPH_UNMATCHED = "replayed by a graph whose sequence of GPU ops no captured graph has"
KERNEL_MISMATCH = "replayed by a graph whose kernel names differ from the captured ones"
GRAPH_AMBIGUOUS = "replayed by a graph that several captured graphs with different ops fit"
CAPTURE_NO_OP = "replayed from a captured launch with no op around it"
GRAPH_BRANCHES = (
    "replayed by a graph captured across forked streams (its replay order need not be its "
    "capture order)"
)
GRAPH_UNALIGNED = "replayed by a graph aligned to a captured one, at a node the capture lacks"
REASONS = (
    NO_LAUNCH,
    NO_OP,
    GRAPH,
    GRAPH_UNMATCHED,
    KERNEL_MISMATCH,
    GRAPH_AMBIGUOUS,
    CAPTURE_NO_OP,
    GRAPH_BRANCHES,
    GRAPH_UNALIGNED,
)
# the reasons' keys in JSON (``op_attribution.unattributed[].code``)
REASON_CODES = (
    "no_launch",
    "no_op",
    "graph_no_capture",
    "graph_unmatched",
    "kernel_mismatch",
    "graph_ambiguous",
    "capture_no_op",
    "graph_branches",
    "graph_unaligned",
)


@dataclass
class OpLaunch:
    """Per GPU op: the row of its launching op in ``table`` (``host_ops`` or ``ranges``;
    int32 where the table's rows fit), or -1 with ``reason`` (an index into
    :data:`REASONS`; -1 where attributed)."""

    table: str
    op_row: I32 | I64
    reason: npt.NDArray[np.int8]
    graph: npt.NDArray[np.bool_]


@dataclass
class OpSource:
    """The host ops a trace's launches are charged to: its Kineto cpu_ops (``host_ops``
    rows) or, in traces without cpu_ops, its NVTX ranges on host threads (``ranges`` rows):
    ``keep`` marks them. ``start``, ``end``, ``thread``: the whole table's columns (the
    compiled sweep reads the kept rows through them, no copies)."""

    table: str
    keep: npt.NDArray[np.bool_]
    start: I64
    end: I64
    thread: I32


def op_source(trace: Trace) -> OpSource:
    host, rng = trace.host_ops, trace.ranges
    keep = host["kind"] == ActivityKind.CPU_OP
    table, src = "host_ops", host
    if not keep.any():
        keep = (rng["thread"] >= 0) & (
            (rng["kind"] == RangeKind.NVTX_PUSHPOP) | (rng["kind"] == RangeKind.NVTX_STARTEND)
        )
        table, src = "ranges", rng
    c = np.ascontiguousarray
    return OpSource(
        table,
        keep,
        c(src["start"], dtype=np.int64),
        c(src["end"], dtype=np.int64),
        c(src["thread"], dtype=np.int32),
    )


def ops_at(source: OpSource, start: I64, end: I64, thread: npt.NDArray[np.integer[Any]]) -> I64:
    """Per interval [start, end] on a thread: the row (in ``source.table``) of the innermost
    op around it, or -1."""
    c = np.ascontiguousarray
    found = _optable.innermost_rows(
        source.start, source.end, source.thread, source.keep.view(np.uint8),
        c(start, dtype=np.int64), c(end, dtype=np.int64), c(thread, dtype=np.int32),
    )  # fmt: skip
    return found.astype(np.int64, copy=False)


def ops_around(trace: Trace, source: OpSource, calls: I64) -> I64:
    """Per API call row in ``calls``: the row (in ``source.table``) of the innermost op
    around it on its thread, or -1."""
    api = trace.api_calls
    return ops_at(source, api["start"][calls], api["end"][calls], api["thread"][calls])


def cores() -> int:
    """The cores this process may run on (the compiled passes split their work over them)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def id_spaces(trace: Trace) -> I32:
    """Per thread row: its (rank, pid), numbered; Kineto's External ids are unique within
    one."""
    th = trace.threads
    if len(th) == 0:
        return np.empty(0, dtype=np.int32)
    key = np.stack([np.asarray(th["rank"], dtype=np.int64), np.asarray(th["pid"])], axis=1)
    return np.unique(key, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int32)


def op_ids(trace: Trace, space: I32) -> I64 | None:
    """Per API call: the External id that names its innermost cpu_op, -1 where it has none;
    None when no call has one. Kineto of 2022-2023 wrote a runtime call's own correlation id
    there (every call of those traces: "External id" == "correlation"), which names no op:
    an id space whose calls' ids mostly equal their correlations has none."""
    api = trace.api_calls
    ext = api["external"]
    has = ext >= 0
    if not has.any():
        return None
    if space.size == 0:
        return None  # no threads: nothing to join on
    own = has & (ext == api["correlation"])
    n = int(space.max()) + 1
    if n == 1:  # one process (a Kineto file): counts, no per-call spaces
        bad = np.array([2 * np.count_nonzero(own) > np.count_nonzero(has)])
    else:
        at = space[np.maximum(api["thread"], 0)]  # (a call with no thread is never joined)
        bad = 2 * np.bincount(at[own], minlength=n) > np.bincount(at[has], minlength=n)
    if bad.all():
        return None
    if bad.any():
        ext = np.where(bad[space[np.maximum(api["thread"], 0)]], -1, ext)
    return np.ascontiguousarray(ext, dtype=np.int64)


def launching_ops(trace: Trace, launches: Launches, *, by_id: bool = True) -> OpLaunch:
    """Each GPU op's launching op (see the module docstring), in one compiled pass over
    the launch calls of the ops no graph ran (``_optable.launching_rows``: on each core,
    one part of the calls, for traces of a million launches and more). Kineto names the
    innermost cpu_op open at a call by its External id: where ``by_id``, a call is joined
    to the cpu_op of its id, checked to be on its thread and around it, and only the
    others are looked up among the intervals (docs/ops.md, "Attribution to ops")."""
    graph = launches.graph
    source = op_source(trace)
    c = np.ascontiguousarray
    ids: dict[str, Any] = {}
    if by_id and source.table == "host_ops":
        space = id_spaces(trace)
        call_id = op_ids(trace, space)
        if call_id is not None:
            ids = {"a_id": c(trace.host_ops["external"], dtype=np.int64), "call_id": call_id,
                   "space": space}  # fmt: skip
    op_row, reason = _optable.launching_rows(
        source.start, source.end, source.thread, source.keep.view(np.uint8),
        c(launches.start, dtype=np.int64), c(launches.end, dtype=np.int64),
        c(launches.thread, dtype=np.int32), c(launches.api_row, dtype=np.int64),
        graph.view(np.uint8), REASONS.index(NO_LAUNCH), REASONS.index(NO_OP),
        REASONS.index(GRAPH), parts=cores(), **ids,
    )  # fmt: skip
    return OpLaunch(source.table, op_row, reason, graph)


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
    m = NVTX_OP_TEXT.match(text)
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
