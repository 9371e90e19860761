"""What the native recorder hands back: one row per region instance (or mark).

This is the contract between the recorder (csrc/, pytimings.record) and everything that reads
recordings (summary, save/load, ingestion of recordings). Times are CLOCK_MONOTONIC ns of
the recording host; GPU times are already placed on that clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.model.comm import collective_index

# the file format (docs/recording-format.md): schema metadata keys and the tables every file has
FORMAT_KEY = b"pytimings.format"
FORMAT_NAME = "pytimings.recording"
FORMAT_VERSION = 1
META_KEY = b"pytimings.meta"
DROPPED_KEY = b"pytimings.dropped"
# tables every recording has; providers may not use these names
RESERVED = ("records", "strings", "threads")

NO_TIME = np.iinfo(np.int64).min  # a GPU time that does not exist (untimed, unresolved)

# regions the torch.distributed wrappers record (pytimings.record.distributed): named
# "dist.<op>" (asynchronous calls "dist.<op>.async"), kind "comm", nbytes as nccl-tests counts
# them and the process group's size as payload
COMM_PREFIX = "dist."
ASYNC_SUFFIX = ".async"
COMM_KIND = "comm"
# the point-to-point calls that are asynchronous by nature (recorded without ASYNC_SUFFIX)
ALWAYS_ASYNC = frozenset(("isend", "irecv", "batch_isend_irecv"))


def comm_region_collective(name: str, kind: str) -> int:
    """The collective (an index into :data:`pytimings.model.comm.COLLECTIVES`) of a region the
    torch.distributed wrappers recorded around a synchronous call, -1 for any other region:
    an asynchronous call was timed at its enqueue only (no honest bandwidth), ``barrier``
    moves no bytes. Its bus factor needs the group size: the region's payload."""
    if kind != COMM_KIND or not name.startswith(COMM_PREFIX):
        return -1
    op = name[len(COMM_PREFIX) :]
    if op.endswith(ASYNC_SUFFIX) or op in ALWAYS_ASYNC:
        return -1
    return collective_index(op)


class RecordFlag(enum.IntFlag):
    GPU_TIMED = 1  # GPU events were recorded for this instance
    GPU_RESOLVED = 2  # ...and have been resolved to gpu_start_ns/gpu_end_ns
    MARK = 4  # an instant (start == end), from mark()
    GRAPH_CAPTURE = 8  # entered during CUDA graph capture: host + NVTX only
    GPU_FAILED = 16  # event record/query failed; GPU times absent
    HAS_STREAM = 32
    HAS_PAYLOAD = 64
    ERROR = 128  # the region was left by an exception


RECORD_SCHEMA: dict[str, npt.DTypeLike] = {
    "name": np.uint32,  # id into Recording.strings
    "kind": np.uint32,  # id into Recording.strings ("compute", "comm", "memory", "host", ...)
    "thread": np.uint32,  # row into Recording.threads
    "depth": np.uint16,  # nesting depth on its thread, 0 = outermost
    "flags": np.uint16,  # RecordFlag
    "start_ns": np.int64,
    "end_ns": np.int64,
    "gpu_start_ns": np.int64,  # NO_TIME unless GPU_RESOLVED
    "gpu_end_ns": np.int64,
    "stream": np.uint64,  # raw cudaStream_t value (0 = legacy default) when HAS_STREAM
    "nbytes": np.int64,  # -1 when not given
    "payload": np.int64,  # when HAS_PAYLOAD
}


@dataclass
class Recording:
    """A drained recording: records plus the tables its ids point into."""

    records: dict[str, npt.NDArray[Any]]  # columns of RECORD_SCHEMA, equal length
    strings: list[str]
    threads: list[dict[str, Any]]  # {"tid": int, "name": str}
    meta: dict[str, Any] = field(default_factory=dict)
    # records not kept (memory cap), by region name; always reported
    dropped: dict[str, int] = field(default_factory=dict)
