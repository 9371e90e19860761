"""Build small Traces from rows for tests (columns per pytimings.model.trace schemas)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pytimings.model.trace import (
    API_CALL_SCHEMA,
    DEVICE_SCHEMA,
    EVENT_SCHEMA,
    GPU_OP_SCHEMA,
    HOST_OP_SCHEMA,
    RANGE_SCHEMA,
    SYNC_SCHEMA,
    THREAD_SCHEMA,
    ActivityKind,
    CopyKind,
    MemKind,
    OpKind,
    StringTable,
    SyncKind,
    Trace,
    conform,
)

OP_DEFAULTS: dict[str, Any] = {
    "name": "k",
    "kind": OpKind.KERNEL,
    "copy_kind": CopyKind.NONE,
    "src_mem": MemKind.NONE,
    "dst_mem": MemKind.NONE,
    "bytes": 0,
    "device": 0,
    "stream": 7,
    "correlation": -1,
    "pid": 100,
    "rank": 0,
    "graph": -1,
    "graph_node": -1,
    "collective": -1,
    "group_size": -1,
}
API_DEFAULTS: dict[str, Any] = {
    "name": "cudaLaunchKernel",
    "kind": 0,
    "thread": 0,
    "correlation": -1,
    "pid": 100,
    "rank": 0,
    "external": -1,  # the External id of the innermost cpu_op open at the call
}
RANGE_DEFAULTS: dict[str, Any] = {
    "kind": 0,
    "thread": 0,
    "device": -1,
    "domain": "",
    "category": "",
    "depth": 0,
    "payload": float("nan"),
    "pid": 100,
    "rank": 0,
    "bytes": -1,
}

HOST_OP_DEFAULTS: dict[str, Any] = {
    "kind": ActivityKind.CPU_OP,
    "thread": 0,
    "pid": 100,
    "rank": 0,
    "args": "",  # record_shapes JSON text: [dims, types, concrete, strides]
    "external": -1,  # a cpu_op's External id
}

SYNC_DEFAULTS: dict[str, Any] = {
    "kind": SyncKind.STREAM_SYNC,
    "device": 0,
    "stream": 7,
    "event": -1,
    "correlation": -1,
    "thread": 0,
    "pid": 100,
    "rank": 0,
}

EVENT_DEFAULTS: dict[str, Any] = {"device": 0, "stream": 7, "event": 1, "pid": 100, "rank": 0}


def _table(
    rows: Sequence[dict[str, Any]],
    schema: dict[str, Any],
    defaults: dict[str, Any],
    st: StringTable,
    strings: Sequence[str],
) -> Any:
    cols: dict[str, list[Any]] = {c: [] for c in schema}
    for row in rows:
        full = {**defaults, **row}
        for c in schema:
            v = full[c]
            cols[c].append(st.intern(v) if c in strings else v)
    return conform({c: np.asarray(v, dtype=schema[c]) for c, v in cols.items()}, schema)


def make_trace(
    ops: Sequence[dict[str, Any]],
    api: Sequence[dict[str, Any]] = (),
    ranges: Sequence[dict[str, Any]] = (),
    threads: Sequence[dict[str, Any]] = ({"pid": 100, "tid": 100, "name": "python3"},),
    host_ops: Sequence[dict[str, Any]] = (),
    syncs: Sequence[dict[str, Any]] = (),
    events: Sequence[dict[str, Any]] = (),
) -> Trace:
    """A trace from rows (dicts of column values; names as text, defaults per table);
    ``host_ops``: cpu_op / python / os host activities (kind an ActivityKind); ``syncs``:
    synchronization records (kind a SyncKind); ``events``: CUDA event records."""
    st = StringTable()
    return Trace(
        gpu_ops=_table(ops, GPU_OP_SCHEMA, OP_DEFAULTS, st, ("name",)),
        api_calls=_table(api, API_CALL_SCHEMA, API_DEFAULTS, st, ("name",)),
        ranges=_table(ranges, RANGE_SCHEMA, RANGE_DEFAULTS, st, ("name", "domain", "category")),
        threads=_table(threads, THREAD_SCHEMA, {"rank": 0}, st, ("name",)),
        devices=_table([{"device": 0, "name": "GPU", "rank": 0}], DEVICE_SCHEMA, {}, st, ("name",)),
        host_ops=_table(host_ops, HOST_OP_SCHEMA, HOST_OP_DEFAULTS, st, ("name", "args")),
        syncs=_table(syncs, SYNC_SCHEMA, SYNC_DEFAULTS, st, ()),
        events=_table(events, EVENT_SCHEMA, EVENT_DEFAULTS, st, ()),
        strings=st.strings,
    )


def shuffled(trace: Trace, seed: int) -> Trace:
    """The same events, every table's rows in a random order (thread rows keep their ids)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in ("gpu_ops", "api_calls", "ranges", "host_ops"):
        t = trace.table(name)
        out[name] = t.take(rng.permutation(len(t)))
    return Trace(
        **out,
        threads=trace.threads,
        devices=trace.devices,
        syncs=trace.syncs,
        events=trace.events,
        strings=trace.strings,
    )
