"""Build Recordings by hand for tests of what reads them (summary, storage, ingestion)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pytimings.model.recording import NO_TIME, RECORD_SCHEMA, RecordFlag, Recording


def make_recording(
    rows: list[dict[str, Any]],
    threads: list[dict[str, Any]] | None = None,
    meta: dict[str, Any] | None = None,
    dropped: dict[str, int] | None = None,
) -> Recording:
    """Each row: name, kind, start, end; optional gpu=(start, end), stream, nbytes, payload,
    thread, depth, flags (extra RecordFlag bits)."""
    strings = [""]
    ids: dict[str, int] = {"": 0}

    def intern(s: str) -> int:
        if s not in ids:
            ids[s] = len(strings)
            strings.append(s)
        return ids[s]

    cols: dict[str, list[int]] = {c: [] for c in RECORD_SCHEMA}
    for row in rows:
        flags = int(row.get("flags", 0))
        gpu = row.get("gpu")
        if gpu is not None:
            flags |= RecordFlag.GPU_TIMED | RecordFlag.GPU_RESOLVED
        if "stream" in row:
            flags |= RecordFlag.HAS_STREAM
        if "payload" in row:
            flags |= RecordFlag.HAS_PAYLOAD
        cols["name"].append(intern(row["name"]))
        cols["kind"].append(intern(row.get("kind", "host")))
        cols["thread"].append(int(row.get("thread", 0)))
        cols["depth"].append(int(row.get("depth", 0)))
        cols["flags"].append(flags)
        cols["start_ns"].append(int(row["start"]))
        cols["end_ns"].append(int(row["end"]))
        cols["gpu_start_ns"].append(int(gpu[0]) if gpu is not None else NO_TIME)
        cols["gpu_end_ns"].append(int(gpu[1]) if gpu is not None else NO_TIME)
        cols["stream"].append(int(row.get("stream", 0)))
        cols["nbytes"].append(int(row.get("nbytes", -1)))
        cols["payload"].append(int(row.get("payload", 0)))
    return Recording(
        records={
            c: np.array(v, dtype=dt)
            for (c, dt), v in zip(RECORD_SCHEMA.items(), cols.values(), strict=True)
        },
        strings=strings,
        threads=threads if threads is not None else [{"tid": 1234, "name": "MainThread"}],
        meta=meta if meta is not None else {"pid": 4321},
        dropped=dropped or {},
    )
