"""The one event model every format is loaded into (see docs/attribution.md).

Columnar, integer nanoseconds, strings interned to int32 ids into ``Trace.strings``
(id 0 is always the empty string). Times of one process (rank) share one timeline.
Column dtypes are fixed here so that every loader, the analyses and the Cython kernels
agree; a GPU op costs 67 bytes held.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.table import Table


class OpKind(enum.IntEnum):
    KERNEL = 0
    MEMCPY = 1
    MEMSET = 2


class CopyKind(enum.IntEnum):
    """CUPTI_ACTIVITY_MEMCPY_KIND values (nsys stores these; Kineto names map onto them)."""

    NONE = -1
    UNKNOWN = 0
    HTOD = 1
    DTOH = 2
    HTOA = 3
    ATOH = 4
    ATOA = 5
    ATOD = 6
    DTOA = 7
    DTOD = 8
    HTOH = 9
    PTOP = 10


class MemKind(enum.IntEnum):
    """CUPTI_ACTIVITY_MEMORY_KIND values, for the two sides of a copy."""

    NONE = -1
    UNKNOWN = 0
    PAGEABLE = 1
    PINNED = 2
    DEVICE = 3
    ARRAY = 4
    MANAGED = 5
    DEVICE_STATIC = 6
    MANAGED_STATIC = 7


class ApiKind(enum.IntEnum):
    RUNTIME = 0
    DRIVER = 1


class SyncKind(enum.IntEnum):
    """What a synchronization record waited for (CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE
    numbering, which nsys stores and Kineto's ``cuda_sync`` names map onto)."""

    UNKNOWN = 0
    EVENT_SYNC = 1  # cudaEventSynchronize: the host waits for an event
    STREAM_WAIT_EVENT = 2  # cudaStreamWaitEvent: a stream waits for an event
    STREAM_SYNC = 3  # cudaStreamSynchronize: the host waits for a stream
    CONTEXT_SYNC = 4  # cudaDeviceSynchronize / cuCtxSynchronize


# what users read for each SyncKind (nsys's ENUM_CUPTI_SYNC_TYPE labels)
SYNC_KIND_NAMES = ("Unknown sync", "Event sync", "Stream wait sync", "Stream sync", "Context sync")


class RangeKind(enum.IntEnum):
    NVTX_PUSHPOP = 0
    NVTX_STARTEND = 1
    ANNOTATION = 2  # Kineto user_annotation (record_function)
    REGION = 3  # a pytimings recorder region


GPU_OP_SCHEMA: dict[str, npt.DTypeLike] = {
    "start": np.int64,
    "end": np.int64,
    "name": np.int32,
    "kind": np.int8,  # OpKind
    "copy_kind": np.int8,  # CopyKind, -1 for kernels and memsets
    "src_mem": np.int8,  # MemKind
    "dst_mem": np.int8,  # MemKind
    # memcpy/memset: bytes moved; a communication kernel: its message size as nccl-tests
    # counts it (pytimings.model.comm) where the trace records it; 0 otherwise (unknown)
    "bytes": np.int64,
    "device": np.int16,
    "stream": np.int32,
    "correlation": np.int64,  # links to api_calls.correlation within (rank, pid); -1 unknown
    "pid": np.int32,
    "rank": np.int16,
    "graph": np.int64,  # CUDA graph id when launched from a graph, else -1
    # the graph node that ran it (Nsight --cuda-graph-trace=node, Kineto's "graph node id"):
    # a per-file index into graph_nodes.node, else -1
    "graph_node": np.int32,
    # communication ops, where the trace says: the collective (an index into
    # pytimings.model.comm.COLLECTIVES, -1 unknown) and how many ranks its communicator has
    # (-1 unknown)
    "collective": np.int8,
    "group_size": np.int16,
}

# columns a loader may leave out, and the value they then hold
OPTIONAL_COLUMNS: dict[str, int] = {
    "graph_node": -1,
    "collective": -1,
    "group_size": -1,
    "external": -1,
}

API_CALL_SCHEMA: dict[str, npt.DTypeLike] = {
    "start": np.int64,
    "end": np.int64,
    "name": np.int32,
    "kind": np.int8,  # ApiKind
    "thread": np.int32,  # row index into Trace.threads
    "correlation": np.int64,  # -1 unknown
    "pid": np.int32,
    "rank": np.int16,
    # Kineto's "External id": the id (host_ops.external) of the innermost cpu_op open on
    # the call's thread when it was made, within (rank, pid); -1 unknown
    "external": np.int64,
}

RANGE_SCHEMA: dict[str, npt.DTypeLike] = {
    "start": np.int64,
    "end": np.int64,
    "name": np.int32,
    "kind": np.int8,  # RangeKind
    "thread": np.int32,  # row index into Trace.threads; -1 for GPU-side ranges
    "device": np.int16,  # -1 for host ranges
    "domain": np.int32,  # string id ("" = default domain)
    "category": np.int32,  # string id ("" = none); pytimings regions: their kind
    "depth": np.int32,  # nesting depth on its thread, 0 = outermost
    "payload": np.float64,  # NaN when none
    "pid": np.int32,
    "rank": np.int16,
    # bytes the range says it moved: a pytimings region's nbytes, NCCL's NVTX payload
    # "Message size [bytes]", a Kineto annotation's collective (record_param_comms); -1 unknown
    "bytes": np.int64,
}


# synchronization records (docs/attribution.md "Events"): not host activities; each
# describes the API call with its correlation id (its thread, pid); read by the replay
SYNC_SCHEMA: dict[str, npt.DTypeLike] = {
    "start": np.int64,
    "end": np.int64,
    "kind": np.int8,  # SyncKind
    "device": np.int16,  # -1 unknown
    "stream": np.int32,  # the stream synchronized, or that waits (STREAM_WAIT_EVENT); -1
    "event": np.int64,  # the CUDA event waited for (EVENT_SYNC, STREAM_WAIT_EVENT); -1
    "correlation": np.int64,  # of the API call it describes; -1 unknown
    "thread": np.int32,  # the API call's thread (row of Trace.threads); -1 when not found
    "pid": np.int32,
    "rank": np.int16,
}

# CUDA event records (nsys CUPTI_ACTIVITY_KIND_CUDA_EVENT): the stream an event was
# recorded on by the cudaEventRecord call with the correlation id; the op it marks is that
# stream's last op submitted before the call (pytimings.ingest.links.event_ops)
EVENT_SCHEMA: dict[str, npt.DTypeLike] = {
    "device": np.int16,
    "stream": np.int32,
    "event": np.int64,
    "correlation": np.int64,  # of the cudaEventRecord call; -1 unknown
    "pid": np.int32,
    "rank": np.int16,
}


# CUDA graph node creations and clones (Nsight CUDA_GRAPH_NODE_EVENTS): a captured node is
# created during the launch call that recorded it, on that thread; instantiating a graph
# clones each node (``original``: the node it was cloned from); a replayed GPU op names its
# executable node (gpu_ops.graph_node)
GRAPH_NODE_SCHEMA: dict[str, npt.DTypeLike] = {
    "node": np.int32,  # per-file index of the node id
    "original": np.int32,  # the node it was cloned from, -1 for a creation
    "start": np.int64,
    "thread": np.int32,  # row index into Trace.threads; -1 unknown
    "pid": np.int32,
    "rank": np.int16,
}


class ActivityKind(enum.IntEnum):
    """The kinds of host activity (docs/attribution.md), in the contract's tie order: when
    two activities start and end together on a thread, the lower value is innermost."""

    CUDA_API = 0  # api_calls rows (CUDA/HIP runtime and driver calls)
    OS = 1  # host_ops: Nsight OS runtime calls (OSRT_API)
    CPU_OP = 2  # host_ops: Kineto cpu_op (aten operators)
    PYTHON = 3  # host_ops: Kineto python_function (with_stack)
    RANGE = 4  # ranges rows on a host thread (NVTX, annotations, pytimings regions)
    UNTRACED = 5  # an instant covered by no activity (name empty)


ACTIVITY_KIND_NAMES = ("cuda_api", "os", "cpu_op", "python", "range", "untraced")

# host activities that are neither ranges nor CUDA API calls: cpu_op, python, os
HOST_OP_SCHEMA: dict[str, npt.DTypeLike] = {
    "start": np.int64,
    "end": np.int64,
    "name": np.int32,
    "kind": np.int8,  # ActivityKind.OS, CPU_OP or PYTHON
    "thread": np.int32,  # row index into Trace.threads
    "pid": np.int32,
    "rank": np.int16,
    # Kineto cpu_op record_shapes args, as the JSON text of [Input Dims, Input type,
    # Concrete Inputs, Input Strides] (absent ones null), interned; 0 = none
    "args": np.int32,
    # a Kineto cpu_op's "External id" (api_calls.external names it), else -1
    "external": np.int64,
}

THREAD_SCHEMA: dict[str, npt.DTypeLike] = {
    "pid": np.int64,
    "tid": np.int64,
    "name": np.int32,  # string id
    "rank": np.int16,
}

DEVICE_SCHEMA: dict[str, npt.DTypeLike] = {
    "device": np.int16,
    "name": np.int32,  # string id
    "rank": np.int16,
}


class MemEventKind(enum.IntEnum):
    ALLOC = 0  # bytes > 0 taken at addr
    FREE = 1  # bytes < 0 given back at addr
    SAMPLE = 2  # a level only (allocated/reserved), no allocation (recordings' samples)


class MemSource(enum.IntEnum):
    KINETO = 0  # [memory] instant events (profile_memory=True): the caching allocator
    NSYS = 1  # CUDA_GPU_MEMORY_USAGE_EVENTS (--cuda-memory-usage): cudaMalloc/cudaFree
    SNAPSHOT = 2  # torch.cuda.memory._snapshot() device_traces
    RECORDING = 3  # pytimings.sample_memory samples


# device memory over time: one row per allocation, free or sample, in time order
MEM_EVENT_SCHEMA: dict[str, npt.DTypeLike] = {
    "time": np.int64,
    "kind": np.int8,  # MemEventKind
    "bytes": np.int64,  # signed: + allocated, - freed, 0 for a sample
    "addr": np.int64,  # -1 unknown (2021-era Kineto writes no address)
    "device_type": np.int8,  # c10 DeviceType as Kineto writes it: 0 CPU, 1 CUDA, ...
    "device": np.int16,  # -1: the host (or the current device, unknown)
    "allocated": np.int64,  # bytes allocated after this event; -1 unknown
    "reserved": np.int64,  # bytes the allocator reserved after this event; -1 unknown
    "source": np.int8,  # MemSource
    "site": np.int32,  # string id: where the format names the allocation (frame, variable)
    "thread": np.int32,  # row index into Trace.threads; -1 unknown
    "pid": np.int32,
    "rank": np.int16,
}

TABLES = (
    "gpu_ops", "api_calls", "ranges", "host_ops", "threads", "devices", "syncs", "events",
    "mem_events", "graph_nodes",
)  # fmt: skip
SCHEMAS: dict[str, dict[str, npt.DTypeLike]] = {
    "gpu_ops": GPU_OP_SCHEMA,
    "api_calls": API_CALL_SCHEMA,
    "ranges": RANGE_SCHEMA,
    "host_ops": HOST_OP_SCHEMA,
    "threads": THREAD_SCHEMA,
    "devices": DEVICE_SCHEMA,
    "syncs": SYNC_SCHEMA,
    "events": EVENT_SCHEMA,
    "mem_events": MEM_EVENT_SCHEMA,
    "graph_nodes": GRAPH_NODE_SCHEMA,
}
# columns holding string ids, per table (remapped when traces are merged)
STRING_COLUMNS: dict[str, tuple[str, ...]] = {
    "gpu_ops": ("name",),
    "api_calls": ("name",),
    "ranges": ("name", "domain", "category"),
    "host_ops": ("name", "args"),
    "threads": ("name",),
    "devices": ("name",),
    "syncs": (),
    "events": (),
    "mem_events": ("site",),
    "graph_nodes": (),
}


class StringTable:
    """Interns strings to dense int32 ids; id 0 is the empty string."""

    __slots__ = ("_ids", "strings")

    def __init__(self, strings: Iterable[str] = ()) -> None:
        self.strings: list[str] = [""]
        self._ids: dict[str, int] = {"": 0}
        for s in strings:
            self.intern(s)

    def intern(self, s: str) -> int:
        i = self._ids.get(s)
        if i is None:
            i = self._ids[s] = len(self.strings)
            self.strings.append(s)
        return i

    def intern_many(self, values: Sequence[str]) -> npt.NDArray[np.int32]:
        ids = self._ids
        new = [v for v in dict.fromkeys(values) if v not in ids]  # first-seen order
        ids.update(zip(new, range(len(self.strings), len(self.strings) + len(new)), strict=True))
        self.strings.extend(new)
        return np.fromiter(map(ids.__getitem__, values), dtype=np.int32, count=len(values))

    def __len__(self) -> int:
        return len(self.strings)


def concat_columns(
    parts: Sequence[Mapping[str, npt.NDArray[Any]]],
    names: Sequence[str],
    empty: Mapping[str, npt.DTypeLike] | None = None,
) -> dict[str, npt.NDArray[Any]]:
    """Columns ``names`` of the row blocks ``parts``, concatenated (one part: its own
    arrays, not copies); with no parts, empty columns of dtype ``empty[name]`` (int64 for
    names not in ``empty``)."""
    if not parts:
        dtypes = empty or {}
        return {n: np.empty(0, dtype=dtypes.get(n, np.int64)) for n in names}
    if len(parts) == 1:
        return {n: parts[0][n] for n in names}
    return {n: np.concatenate([p[n] for p in parts]) for n in names}


class ValueOutOfRange(ValueError):
    """A value that the model's column type cannot hold (it would wrap silently)."""


def _fitted(name: str, values: npt.ArrayLike, dtype: npt.DTypeLike) -> npt.NDArray[Any]:
    src = np.asarray(values)
    dt = np.dtype(dtype)
    if dt.kind in "iu" and src.size and src.dtype.kind in "iuf" and not np.can_cast(src, dt):
        info = np.iinfo(dt)
        lo, hi = src.min(), src.max()
        if lo < info.min or hi > info.max:
            bad = lo if lo < info.min else hi
            raise ValueOutOfRange(f"{name} value {bad} is outside the range of {dt} in the model")
    return src.astype(dt, copy=False)


def conform(table: Mapping[str, npt.ArrayLike], schema: Mapping[str, npt.DTypeLike]) -> Table:
    """A Table with exactly the schema's columns and dtypes (missing columns are an error,
    except :data:`OPTIONAL_COLUMNS`, which then hold their none value).

    Integer values that a column's type cannot hold raise ValueOutOfRange instead of
    wrapping (a device id of 99999999 must not become "GPU -7937").
    """
    missing = [c for c in schema if c not in table and c not in OPTIONAL_COLUMNS]
    if missing:
        raise ValueError(f"missing columns {missing}")
    n = len(np.asarray(table[next(iter(table))])) if table else 0
    return Table(
        {
            c: _fitted(c, table[c], dt) if c in table else np.full(n, OPTIONAL_COLUMNS[c], dtype=dt)
            for c, dt in schema.items()
        }
    )


@dataclass
class Trace:
    """One or more ranks' events on integer-ns timelines, strings interned."""

    gpu_ops: Table
    api_calls: Table
    ranges: Table
    threads: Table
    devices: Table
    strings: list[str]
    # cpu_op / python / os host activities (empty for formats that have none)
    host_ops: Table = field(default_factory=lambda: Table.empty(HOST_OP_SCHEMA))
    # synchronization records and CUDA event records (empty for formats that have none)
    syncs: Table = field(default_factory=lambda: Table.empty(SYNC_SCHEMA))
    events: Table = field(default_factory=lambda: Table.empty(EVENT_SCHEMA))
    meta: dict[str, Any] = field(default_factory=dict)
    # device memory events (empty for captures without memory profiling)
    mem_events: Table = field(default_factory=lambda: Table.empty(MEM_EVENT_SCHEMA))
    # CUDA graph node creations and clones (empty unless Nsight traced graph nodes)
    graph_nodes: Table = field(default_factory=lambda: Table.empty(GRAPH_NODE_SCHEMA))
    # rows a loader could not represent, by reason; reported, never silently lost
    dropped: dict[str, int] = field(default_factory=dict)

    @classmethod
    def empty(cls) -> Trace:
        return cls(
            gpu_ops=Table.empty(GPU_OP_SCHEMA),
            api_calls=Table.empty(API_CALL_SCHEMA),
            ranges=Table.empty(RANGE_SCHEMA),
            threads=Table.empty(THREAD_SCHEMA),
            devices=Table.empty(DEVICE_SCHEMA),
            strings=[""],
        )

    def table(self, name: str) -> Table:
        if name not in TABLES:
            raise KeyError(f"no table {name!r}; tables: {', '.join(TABLES)}")
        t: Table = getattr(self, name)
        return t

    def to_pandas(self, name: str, decode_strings: bool = True) -> Any:
        """One table as a pandas DataFrame, string ids replaced by the strings."""
        df = self.table(name).to_pandas()
        if decode_strings:
            lookup = np.asarray(self.strings, dtype=object)
            for col in STRING_COLUMNS[name]:
                df[col] = lookup[df[col].to_numpy()]
        return df

    def to_arrow(self, name: str, decode_strings: bool = True) -> Any:
        """One table as a pyarrow Table; string columns become dictionary arrays."""
        import pyarrow as pa

        t = self.table(name)
        strings = pa.array(self.strings, type=pa.string())
        cols: dict[str, Any] = {}
        for col in t.columns:
            arr = t[col]
            if decode_strings and col in STRING_COLUMNS[name]:
                cols[col] = pa.DictionaryArray.from_arrays(pa.array(arr), strings)
            else:
                cols[col] = pa.array(arr)
        return pa.table(cols)

    @property
    def nbytes(self) -> int:
        return sum(self.table(t).nbytes for t in TABLES)

    @staticmethod
    def merge(traces: Sequence[Trace]) -> Trace:
        """Concatenate traces (e.g. one per rank), re-interning strings and thread rows."""
        if len(traces) == 1:
            return traces[0]
        st = StringTable()
        parts: dict[str, list[dict[str, npt.NDArray[Any]]]] = {t: [] for t in TABLES}
        thread_offset = 0
        metas = []
        dropped: dict[str, int] = {}
        for tr in traces:
            remap = st.intern_many(tr.strings)
            for name in TABLES:
                cols = tr.table(name).to_dict()
                for c in STRING_COLUMNS[name]:
                    cols[c] = remap[cols[c]]
                if "thread" in cols:
                    th = cols["thread"]
                    cols["thread"] = np.where(th >= 0, th + thread_offset, th).astype(np.int32)
                parts[name].append(cols)
            thread_offset += len(tr.threads)
            metas.append(tr.meta)
            for k, v in tr.dropped.items():
                dropped[k] = dropped.get(k, 0) + v
        tables = {
            name: conform(
                {c: np.concatenate([p[c] for p in parts[name]]) for c in SCHEMAS[name]},
                SCHEMAS[name],
            )
            for name in TABLES
        }
        return Trace(**tables, strings=st.strings, meta={"parts": metas}, dropped=dropped)
