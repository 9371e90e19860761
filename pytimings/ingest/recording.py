"""pytimings recordings (files from ``pytimings.save``) as a Trace.

Every region instance becomes a range (``RangeKind.REGION``, domain ``pytimings``,
category = the region's kind, its depth, payload and ``nbytes`` as ``bytes``, -1 where not
given). Every instance whose CUDA events were resolved also becomes:

* a GPU op spanning its GPU start/end: a memcpy of unknown copy kind carrying the region's
  ``nbytes`` when the region's kind is ``memory``, otherwise a kernel; on its stream (raw
  ``cudaStream_t`` handles numbered 0, 1, ... in ascending order, the handles kept in
  ``meta["streams"]``). A collective recorded by the torch.distributed wrappers (a ``comm``
  region named ``dist.<op>``) is a kernel carrying its ``nbytes``, its collective (``<op>``)
  and its process group's size (the region's payload);
* an API call ``pytimings.region`` spanning the region's host time on its thread, sharing a
  synthetic correlation id with the op, so that GPU projection and launch latency
  (``op.start - call.start``: the region's queue delay) work as for a profiler trace.

Records whose GPU timing was requested but never resolved, records the recorder dropped
at its memory cap, and regions entered but never closed (``meta["open_regions"]``: no
record exists) are counted in ``Trace.dropped`` (they cannot be represented).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.ingest.memory import CPU, CUDA
from pytimings.ingest.recording_file import load_memory, load_recording
from pytimings.model.recording import NO_TIME, RecordFlag, comm_region_collective
from pytimings.model.samples import MemorySamples
from pytimings.model.trace import (
    API_CALL_SCHEMA,
    DEVICE_SCHEMA,
    GPU_OP_SCHEMA,
    MEM_EVENT_SCHEMA,
    RANGE_SCHEMA,
    THREAD_SCHEMA,
    ApiKind,
    CopyKind,
    MemEventKind,
    MemKind,
    MemSource,
    OpKind,
    RangeKind,
    StringTable,
    Trace,
    conform,
)
from pytimings.table import Table

ARROW_MAGIC = b"ARROW1"
FORMAT_MARKER = b"pytimings.recording/"  # schema metadata value, written near the start
DOMAIN = "pytimings"
API_NAME = "pytimings.region"


def looks_like_recording(head: bytes) -> bool:
    """True when ``head`` (the first bytes of a file, 1 KiB is plenty) starts an Arrow IPC
    file whose schema names the pytimings recording format; ``load_recording_trace``
    validates the rest."""
    return head.startswith(ARROW_MAGIC) and FORMAT_MARKER in head


def _meta_int(meta: dict[str, Any], key: str, dtype: Any) -> int | None:
    """An integer from the recording's meta that fits the model's column, else None."""
    v = meta.get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        return None
    info = np.iinfo(dtype)
    return v if info.min <= v <= info.max else None


def load_recording_trace(path: str | os.PathLike[str]) -> Trace:
    """Load a saved recording as a Trace (see the module docstring)."""
    rec = load_recording(path)
    r = rec.records
    n = len(r["name"])
    pid = _meta_int(rec.meta, "pid", np.int32) or 0
    own_rank = _meta_int(rec.meta, "rank", np.int16)  # saved by a torch.distributed process
    known_rank = own_rank is not None
    rank = own_rank or 0
    device = _meta_int(rec.meta, "device", np.int16) or 0

    st = StringTable()
    remap = st.intern_many(rec.strings)  # recording string id -> trace string id
    domain = st.intern(DOMAIN)
    api_name = st.intern(API_NAME)

    flags = r["flags"].astype(np.int64)
    name = remap[r["name"]] if n else np.empty(0, np.int32)
    category = remap[r["kind"]] if n else np.empty(0, np.int32)
    has_payload = (flags & RecordFlag.HAS_PAYLOAD) > 0
    ranges = conform(
        {
            "start": r["start_ns"],
            "end": r["end_ns"],
            "name": name,
            "kind": np.full(n, RangeKind.REGION, np.int8),
            "thread": r["thread"],
            "device": np.full(n, -1, np.int16),
            "domain": np.full(n, domain, np.int32),
            "category": category,
            "depth": r["depth"],
            "payload": np.where(has_payload, r["payload"].astype(np.float64), np.nan),
            "pid": np.full(n, pid, np.int32),
            "rank": np.full(n, rank, np.int16),
            "bytes": np.where(r["nbytes"] >= 0, r["nbytes"], -1),
        },
        RANGE_SCHEMA,
    )

    resolved = (
        ((flags & RecordFlag.GPU_RESOLVED) > 0)
        & (r["gpu_start_ns"] != NO_TIME)
        & (r["gpu_end_ns"] != NO_TIME)
    )
    idx = np.flatnonzero(resolved)
    m = len(idx)
    streams, stream_ids = np.unique(r["stream"][idx], return_inverse=True)
    memory_id = rec.strings.index("memory") if "memory" in rec.strings else -1
    is_copy = r["kind"][idx].astype(np.int64) == memory_id
    correlation = idx.astype(np.int64) + 1  # synthetic: record row + 1, shared by op and call
    nbytes = r["nbytes"][idx]
    collective, group_size = _collectives(rec.strings, r, idx, has_payload[idx])
    has_bytes = (is_copy | (collective >= 0)) & (nbytes >= 0)
    gpu_ops = conform(
        {
            "start": r["gpu_start_ns"][idx],
            "end": r["gpu_end_ns"][idx],
            "name": name[idx],
            "kind": np.where(is_copy, OpKind.MEMCPY, OpKind.KERNEL),
            "copy_kind": np.where(is_copy, CopyKind.UNKNOWN, CopyKind.NONE),
            "src_mem": np.where(is_copy, MemKind.UNKNOWN, MemKind.NONE),
            "dst_mem": np.where(is_copy, MemKind.UNKNOWN, MemKind.NONE),
            "bytes": np.where(has_bytes, nbytes, 0),
            "device": np.full(m, device, np.int16),
            "stream": stream_ids,
            "correlation": correlation,
            "pid": np.full(m, pid, np.int32),
            "rank": np.full(m, rank, np.int16),
            "graph": np.full(m, -1, np.int64),
            "collective": collective,
            "group_size": group_size,
        },
        GPU_OP_SCHEMA,
    )
    api_calls = conform(
        {
            "start": r["start_ns"][idx],
            "end": r["end_ns"][idx],
            "name": np.full(m, api_name, np.int32),
            "kind": np.full(m, ApiKind.RUNTIME, np.int8),
            "thread": r["thread"][idx],
            "correlation": correlation,
            "pid": np.full(m, pid, np.int32),
            "rank": np.full(m, rank, np.int16),
        },
        API_CALL_SCHEMA,
    )

    threads = conform(
        {
            "pid": np.full(len(rec.threads), pid, np.int64),
            "tid": np.array([int(t["tid"]) for t in rec.threads], np.int64),
            "name": st.intern_many([str(t.get("name") or "") for t in rec.threads]),
            "rank": np.full(len(rec.threads), rank, np.int16),
        },
        THREAD_SCHEMA,
    )
    device_name = str(rec.meta.get("device_name", ""))
    devices = conform(
        {
            "device": np.full(1 if m else 0, device, np.int16),
            "name": np.full(1 if m else 0, st.intern(device_name), np.int32),
            "rank": np.full(1 if m else 0, rank, np.int16),
        },
        DEVICE_SCHEMA,
    )

    dropped: dict[str, int] = {}
    unresolved = int(np.count_nonzero(((flags & RecordFlag.GPU_TIMED) > 0) & ~resolved))
    if unresolved:
        dropped["GPU timing requested but not resolved (no GPU op)"] = unresolved
    for region_name, count in rec.dropped.items():
        if count:
            dropped[f"dropped by the recorder's memory cap: {region_name}"] = int(count)
    open_regions = rec.meta.get("open_regions")
    for region_name, count in (open_regions if isinstance(open_regions, dict) else {}).items():
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            dropped[f"region entered, never closed: {region_name}"] = count
    meta: dict[str, Any] = {
        "format": "pytimings",
        "path": os.fspath(path),
        "recording": rec.meta,
        "streams": [int(s) for s in streams],
        "pid": pid,
    }
    if known_rank:  # otherwise pytimings.load() takes the rank from the file name or order
        meta["rank"] = rank
    return Trace(
        gpu_ops=gpu_ops,
        api_calls=api_calls,
        ranges=ranges,
        threads=threads,
        devices=devices,
        strings=st.strings,
        meta=meta,
        dropped=dropped,
        mem_events=recording_mem_events(path, pid, rank),
    )


def _collectives(
    strings: list[str], r: dict[str, Any], idx: npt.NDArray[np.int64], has_payload: Any
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.int16]]:
    """Per GPU-timed record ``idx``: the collective of a torch.distributed wrapper's region
    (:func:`pytimings.model.recording.comm_region_collective`; -1 none) and its group size
    (the payload; -1 unknown)."""
    names = r["name"][idx].astype(np.int64)
    kinds = r["kind"][idx].astype(np.int64)
    collective = np.full(len(idx), -1, np.int8)
    pair = names * len(strings) + kinds  # one code per (name, kind)
    for code in np.unique(pair).tolist():
        index = comm_region_collective(strings[code // len(strings)], strings[code % len(strings)])
        if index >= 0:
            collective[pair == code] = index
    payload = r["payload"][idx]
    fits = has_payload & (collective >= 0) & (payload > 0) & (payload <= np.iinfo(np.int16).max)
    return collective, np.where(fits, payload, -1).astype(np.int16)


def recording_mem_events(path: str | os.PathLike[str], pid: int, rank: int) -> Table:
    """A recording's memory samples as SAMPLE rows: the resident set on the host (device
    type CPU) and, where sampled, CUDA-allocated bytes of the current device (device -1:
    the recording does not say which)."""
    samples = load_memory(path) or MemorySamples([], [], [])
    rows = list(zip(samples.t_ns, samples.rss_bytes, samples.cuda_allocated_bytes, strict=True))
    out: list[tuple[int, int, int]] = [(t, CPU, rss) for t, rss, _ in rows]
    out += [(t, CUDA, cuda) for t, _, cuda in rows if cuda is not None]
    out.sort()
    n = len(out)
    t, dtype, level = (list(c) for c in zip(*out, strict=True)) if n else ([], [], [])
    return conform(
        {
            "time": t,
            "kind": np.full(n, MemEventKind.SAMPLE),
            "bytes": np.zeros(n),
            "addr": np.full(n, -1),
            "device_type": dtype,
            "device": np.full(n, -1),
            "allocated": level,
            "reserved": np.full(n, -1),
            "source": np.full(n, MemSource.RECORDING),
            "site": np.zeros(n, np.int32),
            "thread": np.full(n, -1),
            "pid": np.full(n, pid),
            "rank": np.full(n, rank),
        },
        MEM_EVENT_SCHEMA,
    )
