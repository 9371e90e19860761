"""Graph-replayed GPU ops charged to the ops that recorded them at capture time
(docs/ops.md, "Graph replays").

A kernel a CUDA/HIP graph replays has no op around it at replay time: its op ran when the
graph was captured. A capture trace (``--capture FILE``, or the analysed trace itself when it
covers the capture) holds, per captured graph, the launch calls the capturing thread made
between ``cudaStreamBeginCapture`` and ``cudaStreamEndCapture`` (``hip*``/``cu*`` spellings
too): each is a kernel launch, an async copy or an async memset, in call order, with the
innermost op around it (the rule of :mod:`pytimings.analysis.op_launch`). CUPTI records no
GPU op for a captured launch (it does not run), so a capture gives the kind of each node and,
only where the capture trace also holds the launched kernel, its name.

A replay is the GPU ops of one graph launch (one correlation id), in start order. It matches
a captured graph when the two sequences are equal: the same length, the same kind (kernel,
copy, memset) at each position and, where the capture names the kernel, the same name (after
demangler normalisation); its i-th op is then charged to the op of the i-th captured launch.
Real captures differ from their replays at a few nodes (a trailing GEMM a capture recorded
and the replay's graph lacks, a node the replay skips, a kernel another build renamed): with
no exact fit, a replay is aligned to each captured graph that names all its kernels
(:func:`align`: names in order, the fewest insertions and deletions; time linear in the
length times the edits, memory in the edits squared), and the alignment covering the most
of it, at least ``ALIGN_MIN_SHARE`` of its ops on both sides, is charged: each aligned op
to its node's op;
an op left unaligned stays unattributed (``graph_unaligned``), and the unaligned nodes of
both sides are reported by name and position (``differences``). A graph whose nodes the
capture does not name is aligned by ops instead where the analysed trace launches the
replay's kernels outside graph replays (:func:`op_launchers`: each kernel stands for the
one op that launches it, each node for the op around its launch call), else matched
exactly or not at all (by kinds alone any graph of the length would align). Several
captured graphs may fit one replay (graphs captured per batch size often have one
structure); the replay is charged only when they charge every position
to the same op (name, input dims, input types), else it stays unattributed
(``graph_ambiguous``); so do
replays charged to one captured graph that ran different kernels (a graph replays the same
kernels every time: they are other graphs, or its nodes in another order). A capture that
forked streams is not matched by sequence (``graph_branches``): its branches may replay in
another order (its event waits are the graph's edges the replay reads:
:func:`capture_joins`). With Nsight's per-node tracing a replayed op names its executable
node, whose clones lead back to the node's creation inside the captured launch call: a replay whose
every op resolves so is charged through node ids instead (:func:`node_refs`). Every
replayed op not charged is counted by reason, never guessed.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.analysis.launches import Launches, link_launches
from pytimings.analysis.op_launch import (
    CAPTURE_NO_OP,
    GRAPH,
    GRAPH_AMBIGUOUS,
    GRAPH_BRANCHES,
    GRAPH_UNALIGNED,
    GRAPH_UNMATCHED,
    KERNEL_MISMATCH,
    REASONS,
    OpText,
    kineto_op,
    nvtx_op,
    op_source,
    ops_around,
    ops_at,
)
from pytimings.ingest.names import api_concept, api_stem, normalize_kernel_name
from pytimings.model.trace import OpKind, Trace
from pytimings.table import Table

I64 = npt.NDArray[np.int64]

OWN = "the trace"  # the label of the analysed trace's own captures
# an alignment is charged when it pairs at least this share of the replay's ops and of the
# captured graph's nodes
ALIGN_MIN_SHARE = 0.95
MAX_DIFFERENCES = 8  # unaligned nodes listed per capture source

_BEGIN = ("StreamBeginCapture", "StreamBeginCaptureToGraph")
_END = ("StreamEndCapture",)
_KIND_OF_CONCEPT = {
    "kernel_launch": OpKind.KERNEL,
    "memcpy_async": OpKind.MEMCPY,
    "memset_async": OpKind.MEMSET,
}


@dataclass
class CapturedGraph:
    """One captured graph: per captured launch, in call order, its GPU op kind, its kernel
    name (normalised; None where the capture trace holds no GPU op for it) and its op
    (an index into :attr:`Captures.ops`, -1 where no op was around the launch)."""

    source: int
    kinds: bytes  # one OpKind byte per launch
    names: tuple[str | None, ...]
    ops: tuple[int, ...]
    # streams were forked inside the capture (a stream-wait-event call): its branches may
    # replay in another order than they were captured
    forked: bool = False
    # per event wait inside the capture: (the node the awaited event follows, the first
    # node launched after the wait), both node indices; None where a wait's event was not
    # recorded inside the capture (:func:`capture_joins`)
    joins: tuple[tuple[int, int], ...] | None = ()


@dataclass
class CaptureSource:
    """A capture trace's captured graphs (``label``: the file, or "the trace")."""

    label: str
    graphs: int = 0
    nodes: int = 0  # captured launch calls
    named: int = 0  # captured launch calls whose kernel name the trace holds
    incomplete: int = 0  # begin-capture calls with no end-capture call on their thread
    matched_launches: int = 0
    first_difference: str | None = None  # where its graphs first name another kernel
    aligned_launches: int = 0  # matched by an alignment, not exactly
    # the unaligned nodes of its aligned replays, both sides, by name and position
    differences: list[str] = field(default_factory=list)


@dataclass
class Captures:
    """Captured graphs of every capture source; ``ops``: the text (name, shapes, types) of
    each captured op instance the graphs' nodes and node ids charge."""

    sources: list[CaptureSource] = field(default_factory=list)
    graphs: list[CapturedGraph] = field(default_factory=list)
    ops: list[OpText] = field(default_factory=list)

    def copy(self) -> Captures:
        """Another Captures with the same graphs (its sources' counts its own)."""
        return Captures([replace(s) for s in self.sources], list(self.graphs), list(self.ops))

    def joined(self, other: Captures) -> Captures:
        """These captures and ``other``'s in one (its sources, graphs and ops after these)."""
        ns, no = len(self.sources), len(self.ops)
        moved = [
            replace(g, source=g.source + ns, ops=tuple(o + no if o >= 0 else -1 for o in g.ops))
            for g in other.graphs
        ]
        return Captures(
            [replace(s) for s in (*self.sources, *other.sources)],
            [*self.graphs, *moved],
            [*self.ops, *other.ops],
        )

    def add(self, trace: Trace, label: str, launches: Launches | None = None) -> CaptureSource:
        """The captured graphs of ``trace`` (see the module docstring); ``launches``: its
        GPU ops' launch calls when already linked."""
        src = CaptureSource(label)
        self.sources.append(src)
        api = trace.api_calls
        spans = capture_spans(trace, src)
        if not spans:
            return src
        names = api["name"]
        ids = np.flatnonzero(np.bincount(names))  # the names present (no sort of the calls)
        kind_of = np.full(int(ids.max()) + 1, -1, dtype=np.int8)
        is_wait = np.zeros(int(ids.max()) + 1, dtype=bool)
        is_record = np.zeros(int(ids.max()) + 1, dtype=bool)
        for i in ids.tolist():
            concept = api_concept(trace.strings[i])
            if concept in _KIND_OF_CONCEPT:
                kind_of[i] = _KIND_OF_CONCEPT[concept]
            is_wait[i] = concept == "stream_wait_event"
            is_record[i] = api_stem(trace.strings[i]).startswith("EventRecord")
        thread, start, end = api["thread"], api["start"], api["end"]
        launch_rows = _by_thread_then_start(np.flatnonzero(kind_of[names] >= 0), thread, start)
        wait_rows = _by_thread_then_start(np.flatnonzero(is_wait[names]), thread, start)
        record_rows = _by_thread_then_start(np.flatnonzero(is_record[names]), thread, start)
        per_span, forked, joins = [], [], []
        for t, lo, hi in spans:
            inside = _within(launch_rows, thread, start, t, lo, hi)
            inside = _outermost(inside[end[inside] <= hi], start, end)
            per_span.append(inside)
            waits = _within(wait_rows, thread, start, t, lo, hi)
            forked.append(bool(waits.size))
            records = _within(record_rows, thread, start, t, lo, hi)
            joins.append(capture_joins(start[inside], start[records], start[waits]))
        captured = np.unique(np.concatenate(per_span))
        gpu_name = _launched_names(trace, captured, launches)
        source = op_source(trace)
        op_of_call = ops_around(trace, source, captured)
        op_index: dict[int, int] = {}
        for inside, fork, join in zip(per_span, forked, joins, strict=True):
            ops = []
            for r in op_of_call[np.searchsorted(captured, inside)].tolist():
                if r >= 0 and r not in op_index:
                    op_index[r] = len(self.ops)
                    self.ops.append(_op_text(trace, source.table, r))
                ops.append(op_index[r] if r >= 0 else -1)
            graph_names = tuple(gpu_name.get(c) for c in inside.tolist())
            self.graphs.append(
                CapturedGraph(
                    len(self.sources) - 1,
                    kind_of[names[inside]].astype(np.int8).tobytes(),
                    graph_names,
                    tuple(ops),
                    fork,
                    join,
                )
            )
            src.graphs += 1
            src.nodes += int(inside.size)
            src.named += sum(n is not None for n in graph_names)
        return src


def capture_joins(
    launch_start: I64, record_start: I64, wait_start: I64
) -> tuple[tuple[int, int], ...] | None:
    """The edges a capture's event waits make (one thread's calls, each sorted by start):
    per wait, (the last node launched before the latest event record before the wait, the
    first node launched after the wait). A stream that waits on an event joins the capture
    at the work recorded before it (a fork) or brings its own back (a join); the capture's
    records and waits name no stream in the traces read here, so the event is the latest
    recorded and the waiting stream's next node is found in the replay (the first node from
    there that runs on another stream than the awaited one). None where a wait has no
    record of a launched node before it inside the capture."""
    out = []
    for w in wait_start.tolist():
        rec = int(np.searchsorted(record_start, w, "left")) - 1
        if rec < 0:
            return None
        src = int(np.searchsorted(launch_start, record_start[rec], "left")) - 1
        nxt = int(np.searchsorted(launch_start, w, "right"))
        if src < 0 or nxt >= launch_start.size:
            return None
        out.append((src, nxt))
    return tuple(out)


def capture_spans(trace: Trace, src: CaptureSource | None = None) -> list[tuple[int, int, int]]:
    """(thread, from, to) of each stream capture in ``trace``: from a begin-capture call's
    end to the next end-capture call's start on its thread, in the order :class:`Captures`
    numbers the trace's graphs; ``src`` counts the begins that no end follows."""
    api = trace.api_calls
    if not len(api):
        return []
    names = api["name"]
    ids = np.flatnonzero(np.bincount(names))
    role = np.zeros(int(ids.max()) + 1, dtype=np.int8)  # 1 begin, 2 end
    for i in ids.tolist():
        stem = api_stem(trace.strings[i])
        role[i] = 1 if stem in _BEGIN else 2 if stem in _END else 0
    if not role.any():
        return []
    return _spans(api, role, src if src is not None else CaptureSource(""))


def captured_into(trace: Trace, rows: I64, table: str = "host_ops") -> I64:
    """Per row of ``table`` (host_ops or api_calls): the index among the trace's own
    captures (:func:`capture_spans`) of the stream capture it overlaps on its thread, or -1.
    A launch made there recorded a graph node; nothing ran then."""
    out = np.full(rows.size, -1, dtype=np.int64)
    t = trace.host_ops if table == "host_ops" else trace.api_calls
    for graph, (thread, lo, hi) in enumerate(capture_spans(trace)):
        hit = (t["thread"][rows] == thread) & (t["start"][rows] < hi) & (t["end"][rows] > lo)
        out[hit & (out < 0)] = graph
    return out


def _by_thread_then_start(rows: I64, thread: npt.NDArray[np.int32], start: I64) -> I64:
    return rows[np.lexsort((start[rows], thread[rows]))]


def _within(rows: I64, thread: npt.NDArray[np.int32], start: I64, t: int, lo: int, hi: int) -> I64:
    """The calls of ``rows`` (sorted by thread, then start) on thread t starting in [lo, hi]."""
    th = thread[rows]
    a, b = np.searchsorted(th, t, "left"), np.searchsorted(th, t, "right")
    st = start[rows[a:b]]
    return rows[a + np.searchsorted(st, lo, "left") : a + np.searchsorted(st, hi, "right")]


def _spans(
    api: Table, role: npt.NDArray[np.int8], src: CaptureSource
) -> list[tuple[int, int, int]]:
    """(thread, from, to) between each begin-capture call's end and the next end-capture
    call's start on its thread; a begin that no end follows is counted in ``src``."""
    names, thread, start, end = api["name"], api["thread"], api["start"], api["end"]
    marks = np.flatnonzero(role[names] > 0)
    order = marks[np.lexsort((start[marks], thread[marks]))]
    spans = []
    open_begin = -1
    for row in order.tolist():
        if open_begin >= 0 and thread[open_begin] != thread[row]:
            src.incomplete += 1  # the previous thread's capture never ended
            open_begin = -1
        if role[names[row]] == 1:
            if open_begin >= 0:
                src.incomplete += 1
            open_begin = row
        elif open_begin >= 0:
            spans.append((int(thread[row]), int(end[open_begin]), int(start[row])))
            open_begin = -1
        # an end with no begin in the trace: nothing to charge
    if open_begin >= 0:
        src.incomplete += 1
    return spans


def _outermost(rows: I64, start: I64, end: I64) -> I64:
    """The calls of ``rows`` (one thread, by start) not nested in another of them (a driver
    launch inside the runtime call that made it is one launch)."""
    if rows.size < 2:
        return rows
    rows = rows[np.lexsort((-end[rows], start[rows]))]  # at one start, the outer first
    reach = np.maximum.accumulate(end[rows])
    keep = np.ones(rows.size, dtype=bool)
    keep[1:] = end[rows[1:]] > reach[:-1]
    return rows[keep]


def _launched_names(trace: Trace, launch_rows: I64, launches: Launches | None) -> dict[int, str]:
    """Per launch call row that launched a kernel in ``trace``: its normalised name (copies
    and memsets are compared by kind only: formats name them differently)."""
    ops = trace.gpu_ops
    if not len(ops) or not launch_rows.size:
        return {}
    api_row = (launches or link_launches(trace)).api_row
    hit = np.flatnonzero(np.isin(api_row, launch_rows) & (ops["kind"] == OpKind.KERNEL))
    return {
        int(api_row[i]): normalize_kernel_name(trace.strings[int(ops["name"][i])])
        for i in hit.tolist()
    }


def _op_text(trace: Trace, table: str, row: int) -> OpText:
    if table == "host_ops":
        h = trace.host_ops
        return kineto_op(trace.strings[int(h["name"][row])], trace.strings[int(h["args"][row])])
    return nvtx_op(trace.strings[int(trace.ranges["name"][row])])


def _op_key(t: OpText) -> tuple[str, str, str]:
    return (t.name, repr(t.input_dims), repr(t.input_types))


NO_NODE, NODE_NO_OP = -1, -2


def node_refs(trace: Trace, graph: npt.NDArray[np.bool_], captures: Captures) -> I64:
    """Per GPU op, through Nsight's graph node tracing: the captured op instance (an index
    into ``captures.ops``, appended to it) of the op around the creation of the node that
    ran it, the creation reached from the executable node through its clones' originals;
    NODE_NO_OP where no op was around the creation, NO_NODE where the op names no node or
    its node's creation is not in the trace."""
    ops, gn = trace.gpu_ops, trace.graph_nodes
    out = np.full(len(ops), NO_NODE, dtype=np.int64)
    rows = np.flatnonzero(graph & (ops["graph_node"] >= 0))
    if not rows.size or not len(gn):
        return out
    original: dict[tuple[int, int, int], int] = {}
    created: dict[tuple[int, int, int], int] = {}  # node -> its earliest creation row
    for i, (r, p, n, o, t) in enumerate(
        zip(
            gn["rank"].tolist(),
            gn["pid"].tolist(),
            gn["node"].tolist(),
            gn["original"].tolist(),
            gn["start"].tolist(),
            strict=True,
        )
    ):
        if o >= 0:
            original[(r, p, n)] = o
        elif (r, p, n) not in created or t < int(gn["start"][created[(r, p, n)]]):
            created[(r, p, n)] = i
    keys = np.stack([ops["rank"][rows], ops["pid"][rows], ops["graph_node"][rows]]).astype(np.int64)
    uniq, inv = np.unique(keys, axis=1, return_inverse=True)
    root_row = np.full(uniq.shape[1], -1, dtype=np.int64)
    for k, (r, p, n) in enumerate(uniq.T.tolist()):
        seen = {n}
        while (r, p, n) in original:
            n = original[(r, p, n)]
            if n in seen:
                break  # a cycle: an inconsistent export, no creation to charge
            seen.add(n)
        root_row[k] = created.get((r, p, n), -1)
    found = root_row >= 0
    source = op_source(trace)
    at = root_row[found]
    t = gn["start"][at].astype(np.int64)
    op_row = ops_at(source, t, t, gn["thread"][at].astype(np.int64))
    ref = np.full(uniq.shape[1], NO_NODE, dtype=np.int64)
    index: dict[int, int] = {}
    got = []
    for r in op_row.tolist():
        if r < 0:
            got.append(NODE_NO_OP)
            continue
        if r not in index:
            index[r] = len(captures.ops)
            captures.ops.append(_op_text(trace, source.table, r))
        got.append(index[r])
    ref[found] = got
    out[rows] = ref[inv.reshape(-1)]
    return out


@dataclass
class GraphMatch:
    """Per GPU op of the trace: ``ref``, the captured op instance it is charged to (an index
    into ``Captures.ops``, -1 when none), ``reason`` (an index into REASONS for a replayed op
    not charged, else -1) and ``replay`` (its graph launch's number, -1 outside replays)."""

    ref: I64
    reason: npt.NDArray[np.int8]
    replay: I64
    replays: int
    matched: int
    refusals: list[str]
    by_nodes: int = 0  # replays charged through graph node ids
    aligned: int = 0  # replays charged through an alignment (not an exact match)


def _first_difference(names: Sequence[str], g: CapturedGraph) -> str:
    """Where a captured graph with a replay's kinds names another kernel."""
    for i, (cn, rn) in enumerate(zip(g.names, names, strict=True)):
        if cn is not None and cn != rn:
            return f"node {i} of {len(names)}: replayed {rn!r}, captured {cn!r}"
    return ""


def align(a: Sequence[int], b: Sequence[int], max_edits: int) -> list[tuple[int, int]] | None:
    """The pairs (i, j) of equal tokens ``a[i] == b[j]``, in order, of an alignment of ``a``
    and ``b`` with the fewest insertions and deletions (a longest common subsequence), or
    None when it needs more than ``max_edits``. The common prefix and suffix are paired
    first; the rest by Myers' greedy O((n + m) D) walk, which keeps per edit step only the
    furthest point of each diagonal (O(D^2) memory for D edits, not O(n m))."""
    n, m = len(a), len(b)
    pre = 0
    while pre < n and pre < m and a[pre] == b[pre]:
        pre += 1
    suf = 0
    while suf < n - pre and suf < m - pre and a[n - 1 - suf] == b[m - 1 - suf]:
        suf += 1
    middle = _myers(a[pre : n - suf], b[pre : m - suf], max_edits)
    if middle is None:
        return None
    return [
        *((i, i) for i in range(pre)),
        *((i + pre, j + pre) for i, j in middle),
        *((n - suf + k, m - suf + k) for k in range(suf)),
    ]


def _myers(a: Sequence[int], b: Sequence[int], max_edits: int) -> list[tuple[int, int]] | None:
    """Myers' greedy shortest edit script of ``a`` into ``b`` (insertions and deletions),
    as the pairs of equal tokens it keeps; None beyond ``max_edits`` edits."""
    n, m = len(a), len(b)
    if n + m == 0:
        return []
    if abs(n - m) > max_edits:
        return None
    reach: dict[int, int] = {1: 0}  # diagonal k = x - y -> the furthest x reached
    history: list[dict[int, int]] = []
    for d in range(max_edits + 1):
        history.append(dict(reach))
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and reach[k - 1] < reach[k + 1]):
                x = reach[k + 1]  # down: b[y] inserted
            else:
                x = reach[k - 1] + 1  # right: a[x] deleted
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x, y = x + 1, y + 1
            reach[k] = x
            if x >= n and y >= m:
                return _walk_back(history, n, m, d)
    return None


def _walk_back(history: list[dict[int, int]], n: int, m: int, edits: int) -> list[tuple[int, int]]:
    """The kept pairs of the edit path ``_myers`` found, walked back from (n, m)."""
    pairs: list[tuple[int, int]] = []
    x, y = n, m
    for d in range(edits, 0, -1):
        before = history[d]  # the furthest points after d - 1 edits
        k = x - y
        down = k == -d or (k != d and before[k - 1] < before[k + 1])
        prev_k = k + 1 if down else k - 1
        prev_x = before[prev_k]
        mid_x = prev_x if down else prev_x + 1
        while x > mid_x:
            x, y = x - 1, y - 1
            pairs.append((x, y))
        x, y = prev_x, prev_x - prev_k
    while x > 0 and y > 0:
        x, y = x - 1, y - 1
        pairs.append((x, y))
    pairs.reverse()
    return pairs


@dataclass
class _Resolved:
    """One replay sequence's outcome: ``why`` (a REASONS index, -1 charged), the captured
    graph charged, per replay op its node in that graph (None: the i-th, an exact match; -1
    unaligned), the differences of an alignment, and per source its first difference."""

    why: int
    chosen: CapturedGraph | None = None
    node_of: I64 | None = None
    differences: list[str] = field(default_factory=list)
    near: list[tuple[int, str]] = field(default_factory=list)


def _tokens(
    kinds: bytes, names: Sequence[str | None], ids: dict[tuple[int, str | None], int]
) -> list[int]:
    """One int per node: its kind and, for a kernel, its name (copies and memsets compare by
    kind: formats name them differently)."""
    return [
        ids.setdefault((k, n if k == OpKind.KERNEL else None), len(ids))
        for k, n in zip(kinds, names, strict=True)
    ]


def named(g: CapturedGraph) -> bool:
    """Whether the capture names every kernel of ``g``."""
    return all(n is not None for k, n in zip(g.kinds, g.names, strict=True) if k == OpKind.KERNEL)


def _describe(names: Sequence[str | None], kinds: bytes, index: int) -> str:
    kind: dict[int, str] = {OpKind.KERNEL: "kernel", OpKind.MEMCPY: "copy", OpKind.MEMSET: "memset"}
    name = names[index] if kinds[index] == OpKind.KERNEL else None
    return repr(name) if name is not None else kind.get(kinds[index], "op")


def _divergence(names: Sequence[str], kinds: bytes, g: CapturedGraph) -> str:
    """Where a captured graph and a replay first part (by position: the kind, and the
    kernel name where the capture names it)."""
    n, m = len(kinds), len(g.kinds)
    for i in range(min(n, m)):
        named = kinds[i] == OpKind.KERNEL and g.names[i] is not None
        if kinds[i] != g.kinds[i] or (named and names[i] != g.names[i]):
            return (
                f"node {i} of {n}: replayed {_describe(names, kinds, i)}, captured "
                f"{_describe(g.names, g.kinds, i)} (captured graph of {m} nodes)"
            )
    return f"the first {min(n, m)} nodes agree; replayed {n} ops, captured {m} nodes"


def _alignment(
    names: Sequence[str],
    kinds: bytes,
    g: CapturedGraph,
    by_op: tuple[Sequence[str | None], Sequence[str | None]] | None = None,
) -> tuple[list[tuple[int, int]], list[str]] | None:
    """The alignment of a replay (``names``: its kernel names) to a captured graph covering
    at least ``ALIGN_MIN_SHARE`` of both, with its unaligned nodes described; None without
    one. The kernel names are aligned to the graph's (it names them); or, with ``by_op``
    (per replayed op the op that launches its kernel elsewhere, per node the op around its
    launch call; None: no one op), those ops, an op-less node or kernel aligning with
    nothing."""
    n, m = len(kinds), len(g.kinds)
    need = math.ceil(ALIGN_MIN_SHARE * max(n, m))
    if min(n, m) < need:
        return None
    ids: dict[tuple[int, str | None], int] = {}
    shown = g.names
    if by_op is None:
        r_tok, g_tok = _tokens(kinds, names, ids), _tokens(g.kinds, g.names, ids)
    else:  # a missing op is a token of its own
        launchers, g_ops = by_op
        r_tok = [ids.setdefault((k, x), len(ids)) if x is not None else -1 - i
                 for i, (k, x) in enumerate(zip(kinds, launchers, strict=True))]  # fmt: skip
        g_tok = [ids.setdefault((k, x), len(ids)) if x is not None else -1 - n - j
                 for j, (k, x) in enumerate(zip(g.kinds, g_ops, strict=True))]  # fmt: skip
        shown = tuple(f"launched in {x}" if x is not None else None for x in g_ops)
    pairs = align(r_tok, g_tok, n + m - 2 * need)
    if pairs is None or len(pairs) < need:
        return None
    on_replay = {i for i, _ in pairs}
    on_graph = {j for _, j in pairs}
    diffs = [
        f"replayed node {i} of {n} ({_describe(names, kinds, i)}) not in the capture"
        for i in range(n)
        if i not in on_replay
    ] + [
        f"captured node {j} of {m} ({_describe(shown, g.kinds, j)}) not replayed"
        for j in range(m)
        if j not in on_graph
    ]
    return pairs, diffs


def op_launchers(trace: Trace, launch_row: I64, graph: npt.NDArray[np.bool_]) -> dict[int, str]:
    """Per GPU op name (a string id) the trace launches outside graph replays (``graph``;
    ``launch_row``: each GPU op's launch call, -1 none): the name of the one op around its
    launch calls, where every such launch has the same one."""
    ops = trace.gpu_ops
    rows = np.flatnonzero(~graph & (launch_row >= 0))
    if not rows.size:
        return {}
    source = op_source(trace)
    op_row = ops_around(trace, source, launch_row[rows])
    column = trace.host_ops["name"] if source.table == "host_ops" else trace.ranges["name"]
    pairs = np.unique(
        np.stack([ops["name"][rows], np.where(op_row >= 0, column[op_row], -1)]), axis=1
    )
    one = np.flatnonzero(np.bincount(pairs[0])[pairs[0]] == 1)  # names launched by one op
    read = kineto_op if source.table == "host_ops" else lambda text, _: nvtx_op(text)
    return {
        int(k): read(trace.strings[int(o)], "").name
        for k, o in zip(pairs[0][one].tolist(), pairs[1][one].tolist(), strict=True)
        if o >= 0
    }


def match_replays(
    trace: Trace, launches: Launches, graph: npt.NDArray[np.bool_], captures: Captures
) -> GraphMatch:
    """Each replayed GPU op (``graph``) charged through ``captures`` (module docstring):
    a replay whose every op resolves through graph node ids (:func:`node_refs`) is charged
    by them, the others by sequence matching."""
    ops = trace.gpu_ops
    n = len(ops)
    ref = np.full(n, -1, dtype=np.int64)
    reason = np.full(n, -1, dtype=np.int8)
    replay = np.full(n, -1, dtype=np.int64)
    rows = np.flatnonzero(graph)
    if not rows.size:
        return GraphMatch(ref, reason, replay, 0, 0, [])
    by_node = node_refs(trace, graph, captures)
    by_kinds: dict[bytes, list[CapturedGraph]] = {}
    for g in captures.graphs:
        by_kinds.setdefault(g.kinds, []).append(g)
    op_key = [_op_key(t) for t in captures.ops]
    # one replay per (rank, pid, correlation); its ops in start order
    corr = ops["correlation"][rows]
    order = rows[np.lexsort((rows, ops["start"][rows], corr, ops["pid"][rows], ops["rank"][rows]))]
    key = np.stack(
        [ops["rank"][order].astype(np.int64), ops["pid"][order], ops["correlation"][order]]
    )
    cut = np.flatnonzero(np.concatenate(([True], (key[:, 1:] != key[:, :-1]).any(axis=0))))
    bounds = np.append(cut, order.size)
    name_norm: dict[int, str] = {}
    memo: dict[tuple[bytes, bytes], _Resolved] = {}
    unnamed = not all(named(g) for g in captures.graphs)
    launcher_of: dict[int, str] | None = None
    matched_src: list[int] = [0] * len(captures.sources)
    mismatch_detail: dict[int, str] = {}  # per source: its first kernel-name difference
    matched = by_nodes = aligned = 0
    differences: dict[int, list[str]] = {}  # per source: its aligned replays' differences
    aligned_src: list[int] = [0] * len(captures.sources)
    charged: dict[int, tuple[CapturedGraph, dict[bytes, list[tuple[I64, _Resolved]]]]] = {}
    n_replays = bounds.size - 1
    for r, (a, b) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)):
        g_rows = order[a:b]
        replay[g_rows] = r
        nodes = by_node[g_rows]
        if (nodes != NO_NODE).all():
            matched += 1
            by_nodes += 1
            ref[g_rows] = np.maximum(nodes, -1)
            reason[g_rows[nodes == NODE_NO_OP]] = REASONS.index(CAPTURE_NO_OP)
            continue
        if not captures.graphs:
            reason[g_rows] = REASONS.index(GRAPH)
            continue
        if int(ops["correlation"][g_rows[0]]) < 0:
            reason[g_rows] = REASONS.index(GRAPH_UNMATCHED)
            continue
        kinds = ops["kind"][g_rows].astype(np.int8).tobytes()
        name_ids = ops["name"][g_rows]
        mk = (kinds, name_ids.tobytes())
        if mk not in memo:
            names = [
                name_norm.setdefault(i, normalize_kernel_name(trace.strings[i]))
                for i in name_ids.tolist()
            ]
            if launcher_of is None:  # only where a replay has no exact fit to look for
                launcher_of = op_launchers(trace, launches.api_row, graph) if unnamed else {}
            launchers = [launcher_of.get(i) for i in name_ids.tolist()]
            memo[mk] = _resolve(
                names, kinds, by_kinds.get(kinds, []), captures.graphs, op_key, launchers
            )
        res = memo[mk]
        for source, detail in res.near:
            mismatch_detail.setdefault(source, detail)
        if res.chosen is None:
            reason[g_rows] = res.why
            continue
        entry = charged.setdefault(id(res.chosen), (res.chosen, {}))
        entry[1].setdefault(mk[1], []).append((g_rows, res))
    # a captured graph replays the same kernels every time: replays charged to one captured
    # graph that ran different kernels (possible where the capture names none) are other
    # graphs, or its nodes in another order; which is which cannot be told
    for chosen, by_names in charged.values():
        if len(by_names) > 1:
            for runs in by_names.values():
                for g_rows, _ in runs:
                    reason[g_rows] = REASONS.index(GRAPH_AMBIGUOUS)
            continue
        nodes = np.asarray(chosen.ops, dtype=np.int64)
        for g_rows, res in next(iter(by_names.values())):
            matched += 1
            matched_src[chosen.source] += 1
            if res.node_of is None:  # an exact match: the i-th op is the i-th node's
                refs = nodes
            else:
                aligned += 1
                aligned_src[chosen.source] += 1
                refs = np.where(res.node_of >= 0, nodes[np.maximum(res.node_of, 0)], -1)
                reason[g_rows[res.node_of < 0]] = REASONS.index(GRAPH_UNALIGNED)
                listed = differences.setdefault(chosen.source, [])
                listed += [d for d in res.differences if d not in listed]
            ref[g_rows] = refs
            no_op = refs < 0 if res.node_of is None else (refs < 0) & (res.node_of >= 0)
            reason[g_rows[no_op]] = REASONS.index(CAPTURE_NO_OP)
    refusals = []
    for k, (src, m) in enumerate(zip(captures.sources, matched_src, strict=True)):
        src.matched_launches = m
        src.aligned_launches = aligned_src[k]
        src.differences = differences.get(k, [])[:MAX_DIFFERENCES]
        src.first_difference = mismatch_detail.get(k)
        if src.graphs and not m:
            refusals.append(refusal(src.label, src.graphs, n_replays, src.first_difference))
    return GraphMatch(ref, reason, replay, n_replays, matched, refusals, by_nodes, aligned)


def refusal(label: str, graphs: int, launches: int, first_difference: str | None) -> str:
    """The line refusing a capture none of whose ``graphs`` matched one of ``launches``."""
    because = (
        f"first difference: {first_difference}"
        if first_difference
        else "no captured graph has a replayed graph's sequence of GPU ops"
    )
    return (
        f"{label}: refused: none of its {graphs} captured graphs matches one of the "
        f"{launches} replayed graph launches ({because}); their kernels stay unattributed"
    )


def _resolve(
    names: Sequence[str],
    kinds: bytes,
    candidates: Sequence[CapturedGraph],
    graphs: Sequence[CapturedGraph],
    op_key: Sequence[tuple[str, str, str]],
    launchers: Sequence[str | None],
) -> _Resolved:
    """For one replay's sequence (``candidates``: the captured graphs with its kinds;
    ``graphs``: all; ``launchers``: per op, the op that launches its kernel outside graph
    replays, :func:`op_launchers`): the exact match, else the best alignment to a named
    graph, or by launching ops to one that names none (module docstring), else the reason
    none is charged with each source's first difference."""
    fits, near = [], []
    for g in candidates:
        detail = _first_difference(names, g)
        if detail:
            near.append((g.source, detail))
        else:
            fits.append(g)
    if fits:
        if any(g.forked for g in fits):
            return _Resolved(REASONS.index(GRAPH_BRANCHES))
        first = fits[0]
        want = [op_key[i] if i >= 0 else None for i in first.ops]
        for g in fits[1:]:
            if [op_key[i] if i >= 0 else None for i in g.ops] != want:
                return _Resolved(REASONS.index(GRAPH_AMBIGUOUS))
        return _Resolved(-1, first)
    best: list[tuple[int, CapturedGraph, list[tuple[int, int]], list[str]]] = []
    parted: list[CapturedGraph] = []  # neither of the replay's kinds nor aligned to it
    for g in graphs:
        if named(g):
            found = _alignment(names, kinds, g)
        elif any(launchers):
            op_names = [op_key[i][0] if i >= 0 else None for i in g.ops]
            found = _alignment(names, kinds, g, (launchers, op_names))
        else:
            found = None
        if found is None:
            if g not in candidates:
                parted.append(g)
            continue
        pairs, diffs = found
        best.append((len(pairs), g, pairs, diffs))
    # per source without a first difference yet: where its graph closest in length parts
    for source in dict.fromkeys(g.source for g in parted):
        if all(src != source for src, _ in near):
            closest = min(
                (g for g in parted if g.source == source),
                key=lambda g: abs(len(g.kinds) - len(kinds)),
            )
            near.append((source, _divergence(names, kinds, closest)))
    if not best:
        why = KERNEL_MISMATCH if candidates else GRAPH_UNMATCHED
        return _Resolved(REASONS.index(why), near=near)
    top = max(b[0] for b in best)
    best = [b for b in best if b[0] == top]
    _, g, pairs, diffs = best[0]
    if any(b[1].forked for b in best):
        return _Resolved(REASONS.index(GRAPH_BRANCHES))
    node_of = np.full(len(kinds), -1, dtype=np.int64)
    for i, j in pairs:
        node_of[i] = j
    charged = [op_key[g.ops[j]] if g.ops[j] >= 0 else None for _, j in pairs]
    for _, other, other_pairs, _ in best[1:]:
        if [op_key[other.ops[j]] if other.ops[j] >= 0 else None for _, j in other_pairs] != charged:
            return _Resolved(REASONS.index(GRAPH_AMBIGUOUS))
    near = [(g.source, diffs[0])] if diffs else []
    return _Resolved(-1, g, node_of, diffs, near)


def capture_doc(captures: Captures, match: GraphMatch | None) -> dict[str, Any]:
    """``op_attribution.graph_replays``: what the captures matched (``match`` None: the
    trace replays no graph)."""
    return {
        "launches": match.replays if match else 0,
        "matched_launches": match.matched if match else 0,
        "matched_by_node_ids": match.by_nodes if match else 0,
        "matched_by_alignment": match.aligned if match else 0,
        "captures": [
            {
                "source": s.label,
                "graphs": s.graphs,
                "nodes": s.nodes,
                "named_nodes": s.named,
                "incomplete": s.incomplete,
                "matched_launches": s.matched_launches,
                "aligned_launches": s.aligned_launches,
                "first_difference": s.first_difference,
                "differences": s.differences,
            }
            for s in captures.sources
        ],
        "refused": match.refusals if match else [],
    }


def merge_replay_docs(
    docs: Sequence[tuple[str, dict[str, Any]]], exempt: Collection[str] = ()
) -> dict[str, Any]:
    """One ``graph_replays`` document for several traces matched against the same captures
    (a ``diff`` side's files), from each trace's (its name, its document): launches summed;
    a capture file's counts once, its matched launches summed; each trace's own captures
    (:data:`OWN`) named after it; a capture refused when it matched none of the launches
    of every trace, unless its label is in ``exempt`` (a capture that matched elsewhere)."""
    out: dict[str, Any] = {
        k: sum(int(d[k]) for _, d in docs)
        for k in ("launches", "matched_launches", "matched_by_node_ids", "matched_by_alignment")
    }
    sources: dict[str, dict[str, Any]] = {}
    for name, d in docs:
        for c in d["captures"]:
            label = f"{name} (its own captures)" if c["source"] == OWN else c["source"]
            if label not in sources:
                sources[label] = {**c, "source": label}
            else:
                s = sources[label]
                s["matched_launches"] += c["matched_launches"]
                s["aligned_launches"] += c["aligned_launches"]
                s["first_difference"] = s["first_difference"] or c["first_difference"]
                s["differences"] = list(dict.fromkeys([*s["differences"], *c["differences"]]))[
                    :MAX_DIFFERENCES
                ]
    out["captures"] = list(sources.values())
    out["refused"] = [
        refusal(s["source"], s["graphs"], out["launches"], s["first_difference"])
        for s in sources.values()
        if s["graphs"] and not s["matched_launches"] and s["source"] not in exempt
    ]
    return out
