"""Small nsys-like SQLite exports written by the tests (schema subset of nsys 3.x).

Column names and types follow the real exports in ../shared/data (schema 3.20/3.25).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

PID = 731
GPID = PID << 24
GTID = (PID << 24) | PID

# the leading columns of every CUPTI activity table that runs on a device
_GPU_ACTIVITY = (
    "start INTEGER NOT NULL",
    '"end" INTEGER NOT NULL',
    "deviceId INTEGER",
    "contextId INTEGER",
    "streamId INTEGER",
    "correlationId INTEGER",
    "globalPid INTEGER",
)

TABLES: dict[str, tuple[str, ...]] = {
    "StringIds": ("id INTEGER PRIMARY KEY", "value TEXT NOT NULL"),
    "META_DATA_EXPORT": ("name TEXT", "value TEXT"),
    "ThreadNames": ("nameId INTEGER", "priority INTEGER", "globalTid INTEGER"),
    "PROCESSES": ("globalPid INTEGER", "pid INTEGER", "name TEXT"),
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        *_GPU_ACTIVITY,
        "demangledName INTEGER",
        "shortName INTEGER",
        "graphNodeId INTEGER",
        "graphId INTEGER",
    ),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        *_GPU_ACTIVITY,
        "bytes INTEGER",
        "copyKind INTEGER",
        "srcKind INTEGER",
        "dstKind INTEGER",
        "graphNodeId INTEGER",
    ),
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        *_GPU_ACTIVITY,
        "value INTEGER",
        "bytes INTEGER",
        "graphNodeId INTEGER",
        "memKind INTEGER",
    ),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        "start INTEGER NOT NULL",
        '"end" INTEGER NOT NULL',
        "eventClass INTEGER",
        "globalTid INTEGER",
        "correlationId INTEGER",
        "nameId INTEGER",
        "returnValue INTEGER",
        "callchainId INTEGER",
    ),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": (
        *_GPU_ACTIVITY,
        "syncType INTEGER",
        "eventId INTEGER",
    ),
    "CUPTI_ACTIVITY_KIND_CUDA_EVENT": (
        "deviceId INTEGER",
        "contextId INTEGER",
        "streamId INTEGER",
        "correlationId INTEGER",
        "globalPid INTEGER",
        "eventId INTEGER",
    ),
    "NVTX_EVENTS": (
        "start INTEGER NOT NULL",
        '"end" INTEGER',
        "eventType INTEGER NOT NULL",
        "rangeId INTEGER",
        "category INTEGER",
        "color INTEGER",
        "text TEXT",
        "globalTid INTEGER",
        "endGlobalTid INTEGER",
        "textId INTEGER",
        "domainId INTEGER",
        "uint64Value INTEGER",
        "int64Value INTEGER",
        "doubleValue REAL",
        "uint32Value INTEGER",
        "int32Value INTEGER",
        "floatValue REAL",
        "jsonTextId INTEGER",
        "jsonText TEXT",
        "binaryData TEXT",  # nsys declares it TEXT and stores the payload bytes
    ),
    "NVTX_PAYLOAD_SCHEMAS": (
        "domainId INTEGER",
        "schemaId INTEGER",
        "name TEXT",
        "type INTEGER",
        "flags INTEGER",
        "numEntries INTEGER",
        "payloadSize INTEGER",
        "alignTo INTEGER",
    ),
    "NVTX_PAYLOAD_SCHEMA_ENTRIES": (
        "domainId INTEGER NOT NULL",
        "schemaId INTEGER NOT NULL",
        "idx INTEGER NOT NULL",
        "flags INTEGER",
        "type INTEGER",
        "name TEXT",
        "description TEXT",
        "arrayOrUnionDetail INTEGER",
        "offset INTEGER",
    ),
    # graph node creations/clones (--cuda-graph-trace=node; the layout of the shared
    # saxpy export's CUDA_GRAPH_EVENTS, which newer exports name CUDA_GRAPH_NODE_EVENTS)
    "CUDA_GRAPH_NODE_EVENTS": (
        "start INTEGER NOT NULL",
        '"end" INTEGER NOT NULL',
        "eventClass INTEGER NOT NULL",
        "globalTid INTEGER",
        "nameId INTEGER NOT NULL",
        "graphNodeId INTEGER NOT NULL",
        "originalGraphNodeId INTEGER",
    ),
    # GPU metrics (nsys profile --gpu-metrics-devices): one row per sample and metric, and
    # each (typeId, metricId)'s name (the columns of the Nsight Systems SQLite schema)
    "GPU_METRICS": (
        "timestamp INTEGER",
        "typeId INTEGER NOT NULL",
        "metricId INTEGER NOT NULL",
        "value INTEGER NOT NULL",
    ),
    "TARGET_INFO_GPU_METRICS": (
        "typeId INTEGER NOT NULL",
        "sourceId INTEGER NOT NULL",
        "typeName TEXT NOT NULL",
        "metricId INTEGER NOT NULL",
        "metricName TEXT NOT NULL",
    ),
    "OSRT_API": (
        "start INTEGER NOT NULL",
        '"end" INTEGER NOT NULL',
        "eventClass INTEGER NOT NULL",
        "globalTid INTEGER",
        "nameId INTEGER NOT NULL",
        "returnValue INTEGER",
        "nestingLevel INTEGER",
        "callchainId INTEGER",
    ),
}


def columns(table: str) -> list[str]:
    return [c.split()[0].strip('"') for c in TABLES[table]]


def execute(path: Path, *statements: str) -> None:
    """Runs SQL ``statements`` on the database at ``path`` and commits (to damage an export)."""
    db = sqlite3.connect(path)
    for sql in statements:
        db.execute(sql)
    db.commit()
    db.close()


def write(
    path: Path,
    rows: dict[str, Iterable[Sequence[Any]]],
    schema_version: str | None = "3.20.3",
    create: Iterable[str] = (),
    strict: bool = True,
) -> Path:
    """An nsys-like export: tables named in ``rows`` (plus ``create``) with those rows.

    Rows give the leading columns of a table in :data:`TABLES` order; the rest are NULL.
    ``strict=False`` drops NOT NULL and types (any value may be stored, as in a corrupt file).
    """
    db = sqlite3.connect(path)
    names = set(rows) | set(create) | {"StringIds"}
    for t in sorted(names):
        defs = TABLES[t] if strict else tuple(c.split()[0] for c in TABLES[t])
        db.execute(f'CREATE TABLE "{t}" ({", ".join(defs)})')
    if schema_version is not None:
        meta = rows.get("META_DATA_EXPORT") or [
            ("EXPORT_PRODUCT_VERSION", "2025.3.2.0"),
            ("EXPORT_SCHEMA_VERSION", schema_version),
        ]
        if "META_DATA_EXPORT" not in names:
            db.execute('CREATE TABLE "META_DATA_EXPORT" (name TEXT, value TEXT)')
        db.executemany('INSERT INTO "META_DATA_EXPORT" VALUES (?, ?)', meta)
    for t, rs in rows.items():
        if t == "META_DATA_EXPORT":
            continue
        cols = columns(t)
        for r in rs:
            names_ = ", ".join(f'"{c}"' for c in cols[: len(r)])
            db.execute(f'INSERT INTO "{t}" ({names_}) VALUES ({", ".join("?" * len(r))})', tuple(r))
    db.commit()
    db.close()
    return path


def basic(path: Path, **overrides: Any) -> Path:
    """A consistent little trace: 2 kernels, 1 memcpy, 1 memset, launches, NVTX ranges."""
    rows: dict[str, list[Sequence[Any]]] = {
        "StringIds": [
            (1, "kernA"),
            (2, "kernB"),
            (3, "cudaLaunchKernel_v7000"),
            (4, "cudaMemcpyAsync_v3020"),
            (5, "cudaMemsetAsync_v3020"),
            (6, "main"),
            (7, "reg"),
        ],
        "CUPTI_ACTIVITY_KIND_RUNTIME": [
            (100, 110, 0, GTID, 1, 3),
            (120, 130, 0, GTID, 2, 3),
            (140, 150, 0, GTID, 3, 4),
            (160, 170, 0, GTID, 4, 5),
        ],
        "CUPTI_ACTIVITY_KIND_KERNEL": [
            (200, 300, 0, 1, 7, 1, GPID, 1, 1),
            (300, 350, 0, 1, 7, 2, GPID, 2, 2),
        ],
        "CUPTI_ACTIVITY_KIND_MEMCPY": [(400, 420, 0, 1, 7, 3, GPID, 1024, 1, 1, 2)],
        "CUPTI_ACTIVITY_KIND_MEMSET": [(430, 440, 0, 1, 7, 4, GPID, 0, 64, None, 2)],
        "NVTX_EVENTS": [
            (90, 180, 59, None, None, None, "outer", GTID),
            (115, 135, 59, None, None, None, "inner", GTID),
            (95, 500, 60, None, None, None, None, GTID, GTID, 7),
        ],
        "ThreadNames": [(6, 20, GTID)],
    }
    rows.update(overrides)
    return write(path, rows)
