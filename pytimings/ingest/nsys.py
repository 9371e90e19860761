"""Nsight Systems SQLite exports (``nsys export --type sqlite``) -> the event model.

Reads every schema era found in real exports (2020 legacy files without a META table,
``EXPORT_META_DATA`` 2.x, ``META_DATA_EXPORT`` 3.x up to 3.25): tables that are absent when
empty, columns added over time, non-UTF-8 bytes in strings.

Speed: the large tables are read by ``pytimings.ingest._sqlite`` straight from the file's
b-tree pages into numpy columns (no SQL engine, no Python object per row: ~30 ns a row
against ~265 ns for ``sqlite3_step`` in C, see benches/RESULTS.md); small tables go through
the stdlib ``sqlite3``. NULLs arrive as masks and get this loader's defaults; a value of
the wrong type (a corrupt file) is an error, never a silent cast. Strings stay integer ids:
``StringIds`` ids are remapped to trace string ids with one numpy take, inline NVTX text is
dictionary-encoded by Arrow.

Facts of nsys behaviour the loader relies on (each checked on the shared real exports):
- ``globalPid``/``globalTid`` hold the OS pid in bits 24..47 and the tid in bits 0..23;
  CUPTI correlation ids are unique per process, so links are made within (pid, id).
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` holds runtime (eventClass 0) and driver (eventClass 1)
  calls. Exports made with CUDA backtraces hold a second row per call with eventClass 67
  (same correlation id, the call's un-suffixed name and a callchain); those duplicates are
  skipped and counted in ``dropped['cuda_backtrace_duplicate_rows']``.
- Kernels launched from one CUDA graph launch share the launch's correlation id (they carry
  a graphId/graphNodeId); any other repeated correlation id among a process's GPU ops is an
  inconsistent export and an error.
- With ``--cuda-graph-trace=node`` a replayed GPU op carries ``graphNodeId`` (its executable
  node), and ``CUDA_GRAPH_NODE_EVENTS`` (older exports: ``CUDA_GRAPH_EVENTS`` with a
  ``graphNodeId`` column) holds each node's creation (``originalGraphNodeId`` NULL: at the
  launch call that captured it, on its thread ``globalTid``) and each clone (instantiation:
  ``originalGraphNodeId`` the node cloned). The node ids become a per-file index
  (``gpu_ops.graph_node``, ``graph_nodes``). Not checked on a real export: none of the shared
  ones holds a non-null ``graphNodeId`` or a node event.
- nsys memory kinds (ENUM_CUDA_MEM_KIND: 0 pageable, 1 pinned, 2 device, ...) differ from
  CUPTI's; they are translated to :class:`MemKind`.
- NVTX_EVENTS rows: eventType 59 push/pop range, 60 start/end range, 75 domain create
  (names ``domainId`` within a process), 33 category name (``category`` within a domain),
  34 mark (instant: counted, not a range), 39 thread name. A push/pop or start/end range
  whose end is NULL was still open when the capture stopped: counted, not loaded. A
  start/end range belongs to the thread that started it (``globalTid``). NCCL's typed
  payloads (``binaryData``), where the export keeps them, give a range its ``bytes`` and the
  kernel it launched its size, collective and group (:mod:`pytimings.ingest.nvtx_payloads`).
- ``OSRT_API`` (OS runtime calls, with ``--trace osrt``): eventClass 27 rows are calls
  (start, end, ``nameId`` the function, ``globalTid`` the thread); they become host
  activities of kind OS. Classes 31 and 32 are zero-length "OS runtime libraries profiling
  started/finished" markers: counted, not loaded.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from pytimings._native._kernels import is_sorted_i64, join_sorted
from pytimings.errors import TraceFormatError
from pytimings.ingest import nvtx_payloads
from pytimings.ingest._nesting import nesting_depth
from pytimings.ingest._sqlite import Column, SqliteFile, connect_ro
from pytimings.ingest._times import implausible_time
from pytimings.ingest.detect import SQLITE_MAGIC
from pytimings.ingest.memory import nsys_memory
from pytimings.model.trace import (
    API_CALL_SCHEMA,
    DEVICE_SCHEMA,
    EVENT_SCHEMA,
    GPU_OP_SCHEMA,
    GRAPH_NODE_SCHEMA,
    HOST_OP_SCHEMA,
    RANGE_SCHEMA,
    SYNC_SCHEMA,
    THREAD_SCHEMA,
    ActivityKind,
    CopyKind,
    MemKind,
    OpKind,
    RangeKind,
    StringTable,
    SyncKind,
    Trace,
    concat_columns,
    conform,
)

FORMAT = "nsys-sqlite"
# schema majors this loader understands; 2.x and 3.x exports were checked (2.9.1 .. 3.25.0)
SUPPORTED_SCHEMA_MAJORS = (2, 3)
TESTED_SCHEMA = (3, 25)

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER = "CUPTI_ACTIVITY_KIND_DRIVER"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
CUDA_EVENT = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"
NVTX = "NVTX_EVENTS"
OSRT = "OSRT_API"
EVENT_TABLES = (KERNEL, MEMCPY, MEMSET, RUNTIME, DRIVER, SYNC, CUDA_EVENT, NVTX, OSRT)

EVENT_CLASS_RUNTIME = 0
EVENT_CLASS_DRIVER = 1
EVENT_CLASS_OSRT_CALL = 27
EVENT_CLASS_OSRT_START = 31  # "OS runtime libraries profiling started" (zero length)
EVENT_CLASS_OSRT_FINISH = 32  # "... profiling finished"
EVENT_CLASS_CUDA_BACKTRACE = 67

NVTX_CATEGORY = 33
NVTX_MARK = 34
NVTX_THREAD_NAME = 39
NVTX_PUSHPOP = 59
NVTX_STARTEND = 60
NVTX_DOMAIN_CREATE = 75


# ENUM_CUDA_MEMCPY_OPER (identical in every era that has the table; CUPTI values)
_COPY_NAMES = {
    0: "Unknown",
    1: "Host-to-Device",
    2: "Device-to-Host",
    3: "Host-to-Array",
    4: "Array-to-Host",
    5: "Array-to-Array",
    6: "Array-to-Device",
    7: "Device-to-Array",
    8: "Device-to-Device",
    9: "Host-to-Host",
    10: "Peer-to-Peer",
    11: "Unified Host-to-Device",
    12: "Unified Device-to-Host",
    13: "Unified Device-to-Device",
}
# unified-memory migrations have no CopyKind of their own; their direction is kept
_COPY_KIND = {k: k for k in range(11)} | {11: CopyKind.HTOD, 12: CopyKind.DTOH, 13: CopyKind.DTOD}
# ENUM_CUDA_MEM_KIND (nsys numbering) -> MemKind (CUPTI numbering)
_MEM_KIND = {
    0: MemKind.PAGEABLE,
    1: MemKind.PINNED,
    2: MemKind.DEVICE,
    3: MemKind.ARRAY,
    4: MemKind.MANAGED,
    5: MemKind.DEVICE_STATIC,
    6: MemKind.MANAGED_STATIC,
    7: MemKind.UNKNOWN,
}
# the columns read from each event table; a column an era lacks reads as its default
_API_COLUMNS = ("start", "end", "eventClass", "globalTid", "correlationId", "nameId")
_SYNC_COLUMNS = (
    "start",
    "end",
    "correlationId",
    "globalPid",
    "syncType",
    "deviceId",
    "streamId",
    "eventId",
)
_EVENT_COLUMNS = ("correlationId", "globalPid", "deviceId", "streamId", "eventId")
_OSRT_COLUMNS = ("start", "end", "eventClass", "globalTid", "nameId")
_GPU_OP_COLUMNS = (
    "start",
    "end",
    "deviceId",
    "streamId",
    "correlationId",
    "globalPid",
    "graphId",
    "graphExecId",
    "graphNodeId",
)
# NVTX payload union members, in the order of precedence when several are set
_NVTX_PAYLOADS = (
    "doubleValue",
    "floatValue",
    "int64Value",
    "uint64Value",
    "int32Value",
    "uint32Value",
)
_NVTX_COLUMNS = {
    **dict.fromkeys(("start", "end", "eventType", "globalTid", "textId", "domainId"), "i"),
    "category": "i",
    "text": "b",
    **dict.fromkeys(_NVTX_PAYLOADS, "f"),
    "binaryData": "b",  # NCCL's typed payloads (pytimings.ingest.nvtx_payloads)
}


class _Bad(Exception):
    """A problem with the file's content; becomes a TraceFormatError naming the file."""


def pid_of(global_id: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """OS process id held in an nsys globalPid/globalTid (bits 24..47)."""
    pid = global_id >> 24
    pid &= 0xFFFFFF
    return pid


def tid_of(global_tid: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """OS thread id held in an nsys globalTid (bits 0..23)."""
    return global_tid & 0xFFFFFF


def load_nsys(path: str | os.PathLike[str], rank: int = 0) -> Trace:
    """Load one nsys SQLite export. Raises TraceFormatError for anything it cannot read."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read ({exc.strerror or exc})") from None
    if head != SQLITE_MAGIC:
        raise TraceFormatError(path, "not an SQLite file (no 'SQLite format 3' header)")
    try:
        with _Reader(path) as reader:
            trace = _Loader(reader, rank).load()
            reader.file.check_unchanged()  # sqlite3's reads too came from this version
            return trace
    except _Bad as exc:
        raise TraceFormatError(path, str(exc)) from None
    except (sqlite3.Error, OSError, ValueError, OverflowError) as exc:
        # sqlite3 and the page scanner report corrupt pages, type mismatches and
        # truncation; nothing of a partly read file is returned
        msg = " ".join(str(exc).split()) or type(exc).__name__
        raise TraceFormatError(path, f"corrupt or unreadable nsys export ({msg})") from None


class _Reader:
    """One read-only export: the page scanner for big tables, sqlite3 for small ones."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.file = SqliteFile(path)
        self.db = connect_ro(path)
        self.db.text_factory = bytes

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.db.close()
        self.file.close()

    def columns(self, table: str) -> set[str]:
        return set(self.file.columns(table))

    def has(self, table: str) -> bool:
        return self.file.has(table)

    def small(self, sql: str) -> list[tuple[Any, ...]]:
        return self.db.execute(sql).fetchall()

    def rows(self, table: str, kinds: dict[str, str]) -> _Rows:
        """The columns ``kinds`` names ('i' integer, 'f' number, 'b' text) that the table
        has; those of other schema eras are absent and read as their defaults."""
        have = set(self.columns(table))
        return _Rows(self.file.read(table, {c: k for c, k in kinds.items() if c in have}))


class _Rows:
    """A table's columns as read, with this loader's defaults for NULL and absent columns."""

    def __init__(self, cols: dict[str, Column]) -> None:
        self.cols = cols
        first = next(iter(cols.values()))
        self.n = len(first.values) - (first.data is not None)

    def null(self, name: str) -> npt.NDArray[np.bool_] | None:
        """Where the column is NULL; None when no row is (or the column is absent)."""
        col = self.cols.get(name)
        return None if col is None else col.mask

    def int(self, name: str, default: int) -> npt.NDArray[np.int64]:
        """The column with NULLs set to ``default`` (in place: ask for a column once)."""
        col = self.cols.get(name)
        if col is None:
            return np.full(self.n, default, dtype=np.int64)
        if col.mask is not None:
            col.values[col.mask] = default
        return col.values

    def num(self, name: str) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]] | None:
        """Values and where they are present, or None for an absent column."""
        col = self.cols.get(name)
        if col is None:
            return None
        has = np.ones(self.n, dtype=bool) if col.mask is None else ~col.mask
        return col.values, has

    def blob(self, name: str) -> Any:
        """A pyarrow large_binary array (NULL and an absent column: empty bytes)."""
        import pyarrow as pa

        col = self.cols.get(name)
        offsets, data = (col.values, col.data) if col else (np.zeros(self.n + 1, np.int64), b"")
        return pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), self.n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )


class _Strings(StringTable):
    """The trace's string table, seeded with StringIds, plus id remapping."""

    def __init__(self) -> None:
        super().__init__()
        self.non_utf8 = 0
        # StringIds id -> trace id: a dense table (-1 unknown) when the ids are about as
        # many as the rows, else the sorted ids and their trace ids (memory: the rows)
        self._lut = np.full(1, -1, dtype=np.int32)
        self._sparse: tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]] | None = None
        self.unresolved = 0

    def decode(self, raw: bytes | str | None) -> str:
        if raw is None:
            return ""
        if isinstance(raw, str):
            return raw
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.non_utf8 += 1
            return raw.decode("utf-8", "replace")

    def texts(self, arr: Any) -> list[str]:
        """An Arrow binary array as str (invalid UTF-8 replaced, and counted)."""
        import pyarrow as pa

        try:
            texts: list[str] = arr.cast(pa.large_string()).to_pylist()
        except pa.ArrowInvalid:
            texts = [self.decode(v) for v in arr.to_pylist()]
        return texts

    def load_string_ids(self, rows: _Rows) -> None:
        if not rows.n:
            return
        if rows.null("id") is not None or rows.null("value") is not None:
            raise _Bad("StringIds holds a row that is not an (integer id, text) pair")
        sid = rows.int("id", -1)
        if sid.min() < 0:
            raise _Bad("StringIds holds a negative id")
        ids = self.intern_many(self.texts(rows.blob("value")))
        top = int(sid.max())
        if top < 4 * len(sid) + 4096:
            lut = np.full(top + 1, -1, dtype=np.int32)
            lut[sid] = ids
            self._lut = lut
        else:  # a few ids far apart (up to 2^63): sorted pairs, looked up by bisection
            order = np.argsort(sid, kind="stable")
            self._sparse = (sid[order], np.asarray(ids, dtype=np.int32)[order])

    def remap(self, string_ids: npt.NDArray[np.int64], what: str) -> npt.NDArray[np.int32]:
        """StringIds ids -> trace string ids; an id StringIds lacks gets a visible name."""
        if len(string_ids) == 0:
            return np.empty(0, dtype=np.int32)
        if self._sparse is not None:
            keys, vals = self._sparse
            out = np.full(len(string_ids), -1, dtype=np.int32)
            at = np.minimum(np.searchsorted(keys, string_ids), len(keys) - 1)
            hit = keys[at] == string_ids
            out[hit] = vals[at[hit]]
        elif 0 <= string_ids.min() and string_ids.max() < len(self._lut):
            out = self._lut.take(string_ids)  # the usual case: every id inside the table
        else:
            out = np.full(len(string_ids), -1, dtype=np.int32)
            inside = (string_ids >= 0) & (string_ids < len(self._lut))
            out[inside] = self._lut[string_ids[inside]]
        missing = out < 0
        if missing.any():
            self.unresolved += int(missing.sum())
            out[missing] = self.intern(f"[{what}: unknown string id]")
        return out

    def encode_blobs(self, col: Any) -> npt.NDArray[np.int32]:
        """Trace string ids of an Arrow binary array, via Arrow's dictionary encoding."""
        import pyarrow.compute as pc

        if len(col) == 0:
            return np.empty(0, dtype=np.int32)
        enc = pc.dictionary_encode(col)
        remap = self.intern_many(self.texts(enc.dictionary))
        return remap[np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)]


class _Loader:
    def __init__(self, reader: _Reader, rank: int) -> None:
        self.r = reader
        self.rank = rank
        self.s = _Strings()
        self.meta: dict[str, Any] = {"format": FORMAT, "path": reader.path}
        self.dropped: dict[str, int] = {}
        self.thread_keys = np.empty(0, dtype=np.int64)  # unique globalTids, by thread row
        self.thread_order = np.empty(0, dtype=np.int64)  # argsort of thread_keys

    # -- helpers ------------------------------------------------------------------------
    def drop(self, reason: str, n: int) -> None:
        if n:
            self.dropped[reason] = self.dropped.get(reason, 0) + int(n)

    def need(self, table: str, cols: Sequence[str]) -> None:
        missing = [c for c in cols if c not in self.r.columns(table)]
        if missing:
            raise _Bad(f"table {table} lacks column(s) {', '.join(missing)}")

    def opt(self, table: str, col: str, default: str) -> str:
        """A column expression, or a constant when this era's table lacks the column."""
        return f'coalesce("{col}", {default})' if col in self.r.columns(table) else default

    def check_times(
        self, what: str, start: npt.NDArray[np.int64], end: npt.NDArray[np.int64]
    ) -> None:
        odd = implausible_time(start, end)
        if odd is not None:
            _, column, value = odd
            raise _Bad(f"{what} {column} time {value} ns is outside ±2^62 ns (a corrupt time)")
        backwards = end < start
        if backwards.any():
            bad = np.flatnonzero(backwards)
            i = int(bad[0])
            raise _Bad(
                f"{len(bad)} {what} row(s) end before they start "
                f"(first: start {int(start[i])} ns, end {int(end[i])} ns)"
            )

    def timed(
        self, what: str, rows: _Rows
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_] | None]:
        """Start, end, and the rows that have both times (None: all do); a row with a NULL
        time cannot be placed and is counted. Checks that no kept row ends before it starts."""
        start, end = rows.int("start", 0), rows.int("end", 0)
        ok = _none_of(rows.null("start"), rows.null("end"))
        if ok is None:
            self.check_times(what, start, end)
        else:
            self.drop(f"{what}_without_time", len(ok) - int(ok.sum()))
            self.check_times(what, start[ok], end[ok])
        return start, end, ok

    # -- the file -----------------------------------------------------------------------
    def load(self) -> Trace:
        self.read_meta()
        if not self.r.has("StringIds"):
            if not any(self.r.has(t) for t in EVENT_TABLES):
                raise _Bad("an SQLite database, but not an Nsight Systems export (no StringIds)")
            raise _Bad("nsys export lacks its StringIds table (names cannot be resolved)")
        self.need("StringIds", ("id", "value"))
        self.s.load_string_ids(self.r.rows("StringIds", {"id": "i", "value": "b"}))
        self.read_threads()
        api = self.read_api_calls()
        syncs = self.read_syncs(api)
        events = self.read_events()
        ops = self.read_gpu_ops()
        ranges = self.read_ranges()
        group = ranges.pop("group", np.empty(0, dtype=np.int64))
        self.meta["nvtx_sized_ops"] = nvtx_payloads.give_to_ops(
            ops, api, ranges, group, self.s.strings
        )
        host_ops = self.read_os_calls()
        if not (
            len(ops["start"]) or len(api["start"]) or len(ranges["start"]) or len(host_ops["start"])
        ):
            raise _Bad("contains no events (no GPU ops, API calls, NVTX ranges or OS calls)")
        devices = self.read_devices(ops["device"])
        graph_nodes = self.read_graph_nodes(ops)
        threads = self.thread_table()
        self.meta.update(self.read_processes())
        self.meta["streams"] = self.read_streams()
        self.meta["non_utf8_strings"] = self.s.non_utf8
        self.meta["unresolved_string_ids"] = self.s.unresolved
        mem_events, self.meta["device_memory_bytes"] = nsys_memory(
            self.r.small, self.r.columns, self.r.has, self.s.intern, api, self.rank
        )
        return Trace(
            gpu_ops=conform(ops, GPU_OP_SCHEMA),
            api_calls=conform(api, API_CALL_SCHEMA),
            ranges=conform(ranges, RANGE_SCHEMA),
            host_ops=conform(host_ops, HOST_OP_SCHEMA),
            threads=conform(threads, THREAD_SCHEMA),
            devices=conform(devices, DEVICE_SCHEMA),
            syncs=conform(syncs, SYNC_SCHEMA),
            events=conform(events, EVENT_SCHEMA),
            strings=self.s.strings,
            meta=self.meta,
            dropped=self.dropped,
            mem_events=mem_events,
            graph_nodes=conform(graph_nodes, GRAPH_NODE_SCHEMA),
        )

    def read_meta(self) -> None:
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if self.r.has(table):
                self.need(table, ("name", "value"))
                rows = self.r.small(f'SELECT name, CAST(value AS BLOB) FROM "{table}"')
                kv = {self.s.decode(k): self.s.decode(v) for k, v in rows}
                self.meta["meta_table"] = table
                break
        else:
            kv = {}
            self.meta["meta_table"] = None  # exports before 2021 have no META table
        self.meta["tool_version"] = kv.get("EXPORT_PRODUCT_VERSION")
        version = kv.get("EXPORT_SCHEMA_VERSION")
        self.meta["schema_version"] = version
        if version is None:
            if self.meta["meta_table"] is not None:
                raise _Bad(f"{self.meta['meta_table']} has no EXPORT_SCHEMA_VERSION")
            return
        parts = version.split(".")
        if len(parts) < 2 or not all(p.isdigit() for p in parts):
            raise _Bad(f"unrecognised export schema version {version!r}")
        major, minor = int(parts[0]), int(parts[1])
        if major not in SUPPORTED_SCHEMA_MAJORS:
            raise _Bad(
                f"export schema version {version} is not supported (this pytimings reads "
                f"schema {'/'.join(map(str, SUPPORTED_SCHEMA_MAJORS))}.x); "
                "export with an Nsight Systems release from 2021-2026"
            )
        self.meta["schema_newer_than_tested"] = (major, minor) > TESTED_SCHEMA

    # -- threads ------------------------------------------------------------------------
    def read_threads(self) -> None:
        keys: list[npt.NDArray[np.int64]] = []
        self.thread_names: dict[int, int] = {}
        if self.r.has("ThreadNames") and {"nameId", "globalTid"} <= self.r.columns("ThreadNames"):
            rows = self.r.small(
                'SELECT globalTid, coalesce(nameId, -1) FROM "ThreadNames" '
                "WHERE globalTid IS NOT NULL"
            )
            if not all(type(r[0]) is int and type(r[1]) is int for r in rows):
                raise _Bad("ThreadNames holds a non-integer globalTid or nameId")
            if rows:
                gt = np.array([r[0] for r in rows], dtype=np.int64)
                names = self.s.remap(np.array([r[1] for r in rows], dtype=np.int64), "thread name")
                self.thread_names = dict(zip(gt.tolist(), names.tolist(), strict=True))
                keys.append(gt)
        self._pending_thread_keys = keys

    def thread_index(self, global_tids: npt.NDArray[np.int64]) -> npt.NDArray[np.int32]:
        """Thread rows of globalTids, new threads added. A row once given never moves:
        threads first seen by a later table are appended after the earlier ones."""
        # a thread's calls come in runs: one value per run is added and looked up
        values, lengths = _runs(global_tids)
        seen = np.unique(np.concatenate([*self._pending_thread_keys, values]))
        self._pending_thread_keys = []
        new = seen[~np.isin(seen, self.thread_keys)]
        if len(new):
            self.thread_keys = np.concatenate([self.thread_keys, new])
            self.thread_order = np.argsort(self.thread_keys, kind="stable")
        pos = np.searchsorted(self.thread_keys, values, sorter=self.thread_order)
        return np.repeat(self.thread_order[pos].astype(np.int32), lengths)

    def thread_table(self) -> dict[str, npt.NDArray[Any]]:
        self.thread_index(np.empty(0, dtype=np.int64))
        k = self.thread_keys
        names = np.fromiter(
            (self.thread_names.get(int(g), 0) for g in k), dtype=np.int32, count=len(k)
        )
        return {
            "pid": pid_of(k),
            "tid": tid_of(k),
            "name": names,
            "rank": np.full(len(k), self.rank, dtype=np.int16),
        }

    # -- API calls ----------------------------------------------------------------------
    def read_api_calls(self) -> dict[str, npt.NDArray[Any]]:
        parts: list[dict[str, npt.NDArray[Any]]] = []
        for table in (RUNTIME, DRIVER):
            if not self.r.has(table):
                continue
            self.need(table, ("start", "end", "globalTid", "correlationId", "nameId"))
            rows = self.r.rows(table, dict.fromkeys(_API_COLUMNS, "i"))
            cls_v = rows.int("eventClass", EVENT_CLASS_DRIVER if table == DRIVER else 0)
            # classes runtime 0 and driver 1 only, the usual table: two reductions tell
            keep: npt.NDArray[np.bool_] | None = None
            lo, hi = cls_v.min(initial=0), cls_v.max(initial=0)
            if not EVENT_CLASS_RUNTIME <= lo <= hi <= EVENT_CLASS_DRIVER:
                keep = (cls_v == EVENT_CLASS_RUNTIME) | (cls_v == EVENT_CLASS_DRIVER)
                backtrace = cls_v == EVENT_CLASS_CUDA_BACKTRACE
                self.drop("cuda_backtrace_duplicate_rows", int(backtrace.sum()))
                for c in np.unique(cls_v[~keep & ~backtrace]).tolist():
                    self.drop(f"{table.lower()}_event_class_{c}_rows", int((cls_v == c).sum()))
            start, end, ok = self.timed("cuda_api_call", rows)
            keep = _both(keep, ok)
            cols = {
                "start": start,
                "end": end,
                "kind": (cls_v == EVENT_CLASS_DRIVER).astype(np.int8),  # ApiKind values
                "gtid": rows.int("globalTid", 0),
                "correlation": rows.int("correlationId", -1),
                "name": rows.int("nameId", -1),
            }
            if keep is not None:
                cols = {k: v[keep] for k, v in cols.items()}
            cols["name"] = self.s.remap(cols["name"], "CUDA API")
            parts.append(cols)
        calls = _merge_by_start(parts, ("start", "end", "name", "kind", "gtid", "correlation"))
        calls["thread"] = self.thread_index(calls["gtid"])
        # the pid is the thread's: a take from the thread table, not a shift of every gtid
        calls["pid"] = pid_of(self.thread_keys).astype(np.int32).take(calls["thread"])
        names = ("start", "end", "name", "kind", "thread", "correlation", "pid")
        out = {k: calls[k] for k in names}
        out["rank"] = np.full(len(out["start"]), self.rank, dtype=np.int16)
        return out

    def read_syncs(self, calls: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
        """Synchronization records (not host activities: each describes the API call with
        its correlation id); their thread is that call's."""
        if not self.r.has(SYNC):
            return {c: np.empty(0, dtype=dt) for c, dt in SYNC_SCHEMA.items()}
        self.need(SYNC, ("start", "end", "correlationId", "globalPid"))
        rows = self.r.rows(SYNC, dict.fromkeys(_SYNC_COLUMNS, "i"))
        start, end, ok = self.timed("synchronization", rows)
        cols: dict[str, npt.NDArray[Any]] = {
            "start": start,
            "end": end,
            "kind": rows.int("syncType", SyncKind.UNKNOWN),
            "device": rows.int("deviceId", -1),
            "stream": _none_if_all_ones(rows.int("streamId", -1)),
            "event": _none_if_all_ones(rows.int("eventId", -1)),
            "correlation": rows.int("correlationId", -1),
            "pid": pid_of(rows.int("globalPid", 0)),
        }
        if ok is not None:
            cols = {k: v[ok] for k, v in cols.items()}
        unknown = ~np.isin(cols["kind"], np.array(list(SyncKind), dtype=np.int64))
        self.meta["sync_rows_of_unknown_type"] = int(unknown.sum())
        cols["kind"][unknown] = SyncKind.UNKNOWN
        cols["thread"] = self.call_threads(calls, cols["pid"], cols["correlation"])
        self.meta["sync_rows_without_api_call"] = int((cols["thread"] < 0).sum())
        cols["rank"] = np.full(len(cols["start"]), self.rank)
        return cols

    def read_events(self) -> dict[str, npt.NDArray[Any]]:
        """CUDA event records: the stream each cudaEventRecord call recorded its event on."""
        if not self.r.has(CUDA_EVENT):
            return {c: np.empty(0, dtype=dt) for c, dt in EVENT_SCHEMA.items()}
        self.need(CUDA_EVENT, ("correlationId", "globalPid", "streamId", "eventId"))
        rows = self.r.rows(CUDA_EVENT, dict.fromkeys(_EVENT_COLUMNS, "i"))
        return {
            "device": rows.int("deviceId", -1),
            "stream": _none_if_all_ones(rows.int("streamId", -1)),
            "event": _none_if_all_ones(rows.int("eventId", -1)),
            "correlation": rows.int("correlationId", -1),
            "pid": pid_of(rows.int("globalPid", 0)),
            "rank": np.full(rows.n, self.rank),
        }

    @staticmethod
    def call_threads(
        calls: dict[str, npt.NDArray[Any]], pid: npt.NDArray[Any], corr: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int32]:
        """The thread of the API call with each (pid, correlation id), or -1 (of calls with
        the same key, the first). Each key is looked up from where the previous one was found
        (:func:`_kernels.join_sorted`): records in call order cost a step or two each."""
        ck = _pair_key(calls["pid"], calls["correlation"])
        order = None if is_sorted_i64(ck) else np.argsort(ck, kind="stable")
        sk = _pair_key(pid, corr)
        # every key is >= 0 (so is a pid): passed as the ids, none is skipped
        at, _ = join_sorted(ck if order is None else ck[order], order, sk, sk)
        found = at >= 0
        thread = np.full(len(sk), -1, dtype=np.int32)
        thread[found] = calls["thread"][at[found]]
        return thread

    # -- OS runtime calls ---------------------------------------------------------------
    def read_os_calls(self) -> dict[str, npt.NDArray[Any]]:
        """OSRT_API calls as host activities of kind OS, on their thread, by start."""
        if not self.r.has(OSRT):
            return {c: np.empty(0, dtype=dt) for c, dt in HOST_OP_SCHEMA.items()}
        self.need(OSRT, ("start", "end", "globalTid", "nameId"))
        rows = self.r.rows(OSRT, dict.fromkeys(_OSRT_COLUMNS, "i"))
        cls_v = rows.int("eventClass", EVENT_CLASS_OSRT_CALL)
        call = cls_v == EVENT_CLASS_OSRT_CALL
        marker = (cls_v == EVENT_CLASS_OSRT_START) | (cls_v == EVENT_CLASS_OSRT_FINISH)
        self.drop("osrt_profiling_started_finished_markers", int(marker.sum()))
        for c in np.unique(cls_v[~call & ~marker]).tolist():
            self.drop(f"osrt_api_event_class_{c}_rows", int((cls_v == c).sum()))
        start, end, ok = self.timed("os_runtime_call", rows)
        no_thread = rows.null("globalTid")
        if no_thread is not None:
            self.drop("os_runtime_calls_without_thread", int((call & no_thread).sum()))
        kept = _both(call, _both(ok, None if no_thread is None else ~no_thread))
        keep = np.flatnonzero(call if kept is None else kept)
        gtid = rows.int("globalTid", 0)[keep]
        out: dict[str, npt.NDArray[Any]] = {
            "start": start[keep],
            "end": end[keep],
            "name": self.s.remap(rows.int("nameId", -1)[keep], "OS runtime call"),
            "kind": np.full(len(keep), ActivityKind.OS, dtype=np.int8),
            "args": np.zeros(len(keep), dtype=np.int32),  # OS calls carry no op args
            "pid": pid_of(gtid).astype(np.int32),
        }
        out["thread"] = self.thread_index(gtid)
        if not is_sorted_i64(out["start"]):
            order = np.argsort(out["start"], kind="stable")
            out = {k: v[order] for k, v in out.items()}
        out["rank"] = np.full(len(keep), self.rank, dtype=np.int16)
        return out

    def enum_names(self, table: str, default: dict[int, str]) -> dict[int, str]:
        if not self.r.has(table) or not {"id", "label"} <= self.r.columns(table):
            return default
        rows = self.r.small(f'SELECT id, CAST(label AS BLOB) FROM "{table}"')
        return {**default, **{int(i): self.s.decode(v) for i, v in rows if isinstance(i, int)}}

    # -- GPU ops ------------------------------------------------------------------------
    def read_gpu_ops(self) -> dict[str, npt.NDArray[Any]]:
        parts = []
        for table, kind in (
            (KERNEL, OpKind.KERNEL),
            (MEMCPY, OpKind.MEMCPY),
            (MEMSET, OpKind.MEMSET),
        ):
            if not self.r.has(table):
                continue
            self.need(table, ("start", "end", "deviceId", "streamId", "correlationId", "globalPid"))
            cols = self.r.columns(table)
            wanted = dict.fromkeys(_GPU_OP_COLUMNS, "i")
            if kind == OpKind.KERNEL:
                name_col = next((c for c in ("demangledName", "shortName") if c in cols), None)
                if name_col is None:
                    raise _Bad(f"table {table} lacks column(s) demangledName")
                wanted[name_col] = "i"
            elif kind == OpKind.MEMCPY:
                self.need(table, ("bytes", "copyKind"))
                wanted |= dict.fromkeys(("bytes", "copyKind", "srcKind", "dstKind"), "i")
            else:
                self.need(table, ("bytes",))
                wanted |= dict.fromkeys(("bytes", "memKind"), "i")
            rows = self.r.rows(table, wanted)
            what = {OpKind.KERNEL: "kernel", OpKind.MEMCPY: "memcpy", OpKind.MEMSET: "memset"}[kind]
            start, end, keep = self.timed(what, rows)
            if keep is not None:
                start, end = start[keep], end[keep]
            n = len(start)

            def col(
                name: str,
                default: int,
                keep: npt.NDArray[np.bool_] | None = keep,
                rows: _Rows = rows,
            ) -> npt.NDArray[np.int64]:
                v = rows.int(name, default)
                return v if keep is None else v[keep]

            # graphId names the graph (2021+ kernels); a graphExecId alone still marks a launch
            graph_id = col("graphId" if "graphId" in cols else "graphExecId", 0)
            node_id = col("graphNodeId", 0)
            part: dict[str, npt.NDArray[Any]] = {
                "start": start,
                "end": end,
                "kind": np.full(n, kind, dtype=np.int8),
                "device": col("deviceId", -1),
                "stream": col("streamId", -1),
                "correlation": col("correlationId", -1),
                "pid": pid_of(col("globalPid", 0)),
                "graph": np.where(graph_id > 0, graph_id, -1),
                # no table names a kernel's collective or communicator (NCCL's NVTX ranges
                # around the launch do: ranges.bytes)
                "collective": np.full(n, -1, dtype=np.int8),
                "group_size": np.full(n, -1, dtype=np.int16),
            }
            if kind == OpKind.KERNEL:
                part["name"] = self.s.remap(col(name_col or "", -1), "kernel")
                part.update(_no_copy(n))
            elif kind == OpKind.MEMCPY:
                part.update(
                    self.memcpy_columns(col("copyKind", 0), col("srcKind", -1), col("dstKind", -1))
                )
                part["bytes"] = col("bytes", 0)
            else:
                part["name"] = np.full(n, self.s.intern("[CUDA memset]"), dtype=np.int32)
                part.update(_no_copy(n))
                part["dst_mem"] = _map_mem(col("memKind", -1))
                part["bytes"] = col("bytes", 0)
            del rows
            part = {k: _fit(v, GPU_OP_SCHEMA[k], k) for k, v in part.items()}
            # raw node ids (0: none), made a per-file index by read_graph_nodes
            part["graph_node_id"] = node_id
            part["in_graph"] = (graph_id > 0) | (node_id > 0)
            parts.append(part)
        names = [c for c in GPU_OP_SCHEMA if c not in ("rank", "graph_node")]
        ops = _merge_by_start(parts, [*names, "graph_node_id", "in_graph"])
        self.check_correlation(ops, ops.pop("in_graph"))
        ops["rank"] = np.full(len(ops["start"]), self.rank, dtype=np.int16)
        return ops

    def read_graph_nodes(self, ops: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
        """Node creations and clones (module docstring); sets ``ops["graph_node"]``."""
        table = next(
            (
                t
                for t in ("CUDA_GRAPH_NODE_EVENTS", "CUDA_GRAPH_EVENTS")
                if self.r.has(t) and "graphNodeId" in self.r.columns(t)
            ),
            None,
        )
        raw_op = ops.pop("graph_node_id")
        start = node = original = gtid = np.empty(0, dtype=np.int64)
        if table is not None:
            self.need(table, ("start", "graphNodeId"))
            cols = self.r.columns(table)
            names = ("start", "globalTid", "graphNodeId", "originalGraphNodeId")
            want: dict[str, str] = {c: "i" for c in names if c in cols}
            rows = self.r.rows(table, want)
            keep = _none_of(rows.null("start"), rows.null("graphNodeId"))
            start, node = rows.int("start", 0), rows.int("graphNodeId", 0)
            original = rows.int("originalGraphNodeId", -1)
            no_original = rows.null("originalGraphNodeId")
            if no_original is not None:
                original[no_original] = -1
            gtid = rows.int("globalTid", -1)
            no_tid = rows.null("globalTid")
            if no_tid is not None:
                gtid[no_tid] = -1
            if keep is not None:
                self.drop("graph_node_events_without_node", len(keep) - int(keep.sum()))
                start, node, original, gtid = start[keep], node[keep], original[keep], gtid[keep]
        ids = np.unique(np.concatenate([raw_op[raw_op > 0], node, original[original >= 0]]))
        if ids.size > np.iinfo(np.int32).max:
            raise _Bad(f"{ids.size} distinct CUDA graph node ids: more than the model holds")
        ops["graph_node"] = np.where(raw_op > 0, np.searchsorted(ids, raw_op), -1).astype(np.int32)
        known = gtid >= 0
        thread = np.full(len(gtid), -1, dtype=np.int32)
        thread[known] = self.thread_index(gtid[known])
        return {
            "node": np.searchsorted(ids, node).astype(np.int32),
            "original": np.where(
                original >= 0, np.searchsorted(ids, np.maximum(original, 0)), -1
            ).astype(np.int32),
            "start": start,
            "thread": thread,
            "pid": pid_of(np.maximum(gtid, 0)).astype(np.int32),
            "rank": np.full(len(start), self.rank, dtype=np.int16),
        }

    def memcpy_columns(
        self, copy: npt.NDArray[np.int64], src: npt.NDArray[np.int64], dst: npt.NDArray[np.int64]
    ) -> dict[str, npt.NDArray[Any]]:
        names = self.enum_names("ENUM_CUDA_MEMCPY_OPER", _COPY_NAMES)
        uniq, inv = np.unique(copy, return_inverse=True)
        inv = inv.reshape(-1)
        kind = np.array([_COPY_KIND.get(int(u), CopyKind.UNKNOWN) for u in uniq], dtype=np.int8)
        unmapped = [int(u) for u in uniq if int(u) not in _COPY_KIND]
        if unmapped:
            self.meta["unknown_copy_kinds"] = unmapped
        ids = np.array(
            [self.s.intern(f"[CUDA memcpy {names.get(int(u), f'kind {int(u)}')}]") for u in uniq],
            dtype=np.int32,
        )
        return {
            "name": ids[inv] if len(uniq) else np.empty(0, np.int32),
            "copy_kind": kind[inv] if len(uniq) else np.empty(0, np.int8),
            "src_mem": _map_mem(src),
            "dst_mem": _map_mem(dst),
        }

    def check_correlation(
        self, ops: dict[str, npt.NDArray[Any]], in_graph: npt.NDArray[np.bool_]
    ) -> None:
        """Repeated (pid, correlation id) among GPU ops: allowed only for graph launches."""
        pid, corr = ops["pid"], ops["correlation"]
        known = corr >= 0
        if not known.all():
            pid, corr, in_graph = pid[known], corr[known], in_graph[known]
        key = _pair_key(pid, corr)
        if len(key) < 2:
            return
        # usually in key order already (one process, ops in launch order): no sort
        order = None if is_sorted_i64(key) else np.argsort(key, kind="stable")
        sk = key if order is None else key[order]
        dup = sk[1:] == sk[:-1]
        if not dup.any():
            return
        if order is None:
            order = np.arange(len(key))
        rows = np.zeros(len(sk), dtype=bool)
        rows[1:] |= dup
        rows[:-1] |= dup
        graph_flags = in_graph[order][rows]
        if not graph_flags.all():
            first = order[np.flatnonzero(rows & ~in_graph[order])[0]]
            raise _Bad(
                f"{int(rows.sum())} GPU ops share a correlation id with another GPU op of the "
                f"same process (first: correlationId {int(corr[first])}, pid "
                f"{int(pid[first])}) and are not CUDA graph launches"
            )
        self.meta["graph_ops_sharing_correlation"] = int(rows.sum())

    # -- NVTX ---------------------------------------------------------------------------
    def read_ranges(self) -> dict[str, npt.NDArray[Any]]:
        empty = {c: np.empty(0, dtype=dt) for c, dt in RANGE_SCHEMA.items()}
        if not self.r.has(NVTX):
            return empty
        self.need(NVTX, ("start", "end", "eventType", "globalTid"))
        rows = self.r.rows(NVTX, dict(_NVTX_COLUMNS))
        etype = rows.int("eventType", -1)
        gtid = rows.int("globalTid", 0)
        pid = pid_of(gtid)
        domain_id = rows.int("domainId", 0)
        category = rows.int("category", 0)
        text_id = rows.int("textId", -1)
        # names: a registered string (textId) wins over inline text
        inline = self.s.encode_blobs(rows.blob("text"))
        has_id = text_id >= 0
        names = inline.copy()
        if has_id.any():
            names[has_id] = self.s.remap(text_id[has_id], "NVTX")
        # domain and category names, keyed within their process
        dom_rows = etype == NVTX_DOMAIN_CREATE
        dom_key = _pair_key(pid[dom_rows], domain_id[dom_rows])
        cat_rows = etype == NVTX_CATEGORY
        cat_key = _triple_key(pid[cat_rows], domain_id[cat_rows], category[cat_rows])
        for gt, nm in zip(
            gtid[etype == NVTX_THREAD_NAME].tolist(),
            names[etype == NVTX_THREAD_NAME].tolist(),
            strict=True,
        ):
            self.thread_names.setdefault(gt, nm)
        self.drop("nvtx_marks", int((etype == NVTX_MARK).sum()))
        handled = {
            NVTX_PUSHPOP,
            NVTX_STARTEND,
            NVTX_DOMAIN_CREATE,
            NVTX_CATEGORY,
            NVTX_MARK,
            NVTX_THREAD_NAME,
        }
        other = ~np.isin(etype, np.array(sorted(handled), dtype=np.int64))
        if other.any():  # a few comparisons per row; the rare other types are counted
            for t in np.unique(etype[other]).tolist():
                self.drop(f"nvtx_event_type_{t}_rows", int((etype == t).sum()))
        is_range = (etype == NVTX_PUSHPOP) | (etype == NVTX_STARTEND)
        start, end = rows.int("start", 0), rows.int("end", 0)
        placed = is_range
        no_start, no_end = rows.null("start"), rows.null("end")
        if no_start is not None:
            self.drop("nvtx_ranges_without_start", int((is_range & no_start).sum()))
            placed = placed & ~no_start
        if no_end is not None:
            self.drop("nvtx_ranges_open_at_capture_end", int((placed & no_end).sum()))
            placed = placed & ~no_end
        sel = np.flatnonzero(placed)
        start, end = start[sel], end[sel]
        self.check_times("NVTX range", start, end)
        gtid_s = gtid[sel]
        thread = self.thread_index(gtid_s)
        kind = np.where(
            etype[sel] == NVTX_PUSHPOP, RangeKind.NVTX_PUSHPOP, RangeKind.NVTX_STARTEND
        ).astype(np.int8)
        payload = np.full(len(sel), np.nan)
        for c in reversed(_NVTX_PAYLOADS):  # the first listed column wins
            value = rows.num(c)
            if value is not None:
                has = value[1][sel]
                payload[has] = value[0][sel][has]
        pid_s, dom_s, cat_s = pid[sel], domain_id[sel], category[sel]
        fields = self.nvtx_payloads(rows, sel, dom_s)
        out = {
            "start": start,
            "end": end,
            "name": names[sel],
            "kind": kind,
            "thread": thread,
            "device": np.full(len(sel), -1, dtype=np.int16),
            "domain": _lookup(dom_key, names[dom_rows], _pair_key(pid_s, dom_s)),
            "category": _lookup(cat_key, names[cat_rows], _triple_key(pid_s, dom_s, cat_s)),
            "depth": np.zeros(len(sel), dtype=np.int32),
            "payload": payload,
            "pid": pid_s,
            "bytes": fields[nvtx_payloads.MESSAGE_SIZE],
            "group": nvtx_payloads.group_sizes(fields),  # not a column: for the ops
        }
        for k in (RangeKind.NVTX_PUSHPOP, RangeKind.NVTX_STARTEND):
            m = kind == k
            if m.any():
                out["depth"][m] = nesting_depth(thread[m], start[m], end[m])
        if not is_sorted_i64(start):  # nsys writes NVTX_EVENTS in start order
            order = np.argsort(start, kind="stable")
            out = {k: v[order] for k, v in out.items()}
        out["rank"] = np.full(len(start), self.rank, dtype=np.int16)
        return out

    def nvtx_payloads(
        self, rows: _Rows, sel: npt.NDArray[np.int64], domains: npt.NDArray[np.int64]
    ) -> dict[str, npt.NDArray[np.int64]]:
        """NCCL's payload fields of the ranges ``sel`` (-1 where none)."""
        blob = rows.cols.get("binaryData")
        if blob is None:
            return {f: np.full(len(sel), -1, dtype=np.int64) for f in nvtx_payloads.FIELDS}
        schemas = nvtx_payloads.read_schemas(self.r.small, self.r.has)
        fields, bad = nvtx_payloads.decode(blob.values, blob.data or b"", sel, domains, schemas)
        self.drop(nvtx_payloads.NOT_DECODED, bad)
        return fields

    # -- metadata -----------------------------------------------------------------------
    def read_devices(self, used: npt.NDArray[Any]) -> dict[str, npt.NDArray[Any]]:
        found: dict[int, str] = {}
        if self.r.has("TARGET_INFO_CUDA_GPU") and {"deviceId", "name"} <= self.r.columns(
            "TARGET_INFO_CUDA_GPU"
        ):
            rows = self.r.small('SELECT deviceId, CAST(name AS BLOB) FROM "TARGET_INFO_CUDA_GPU"')
            found.update({int(d): self.s.decode(n) for d, n in rows if isinstance(d, int)})
        if self.r.has("TARGET_INFO_GPU") and "name" in self.r.columns("TARGET_INFO_GPU"):
            cols = self.r.columns("TARGET_INFO_GPU")
            dev = next((c for c in ("cuDevice", "deviceId", "id") if c in cols), None)
            cuda = "computeMajor > 0" if "computeMajor" in cols else "1"
            if dev is not None:
                rows = self.r.small(
                    f'SELECT "{dev}", CAST(name AS BLOB) FROM "TARGET_INFO_GPU" WHERE {cuda}'
                )
                for d, n in rows:
                    if isinstance(d, int) and d >= 0:
                        found.setdefault(d, self.s.decode(n))
        # the ops' int16 device ids: a count per value finds those used (np.unique hashes)
        lo = int(used.min(initial=0))
        seen = np.flatnonzero(np.bincount(used.astype(np.int64) - lo)) + lo
        ids = sorted(set(found) | set(seen.tolist()))
        return {
            "device": np.array(ids, dtype=np.int64),
            "name": np.array([self.s.intern(found.get(d, "")) for d in ids], dtype=np.int32),
            "rank": np.full(len(ids), self.rank, dtype=np.int16),
        }

    def read_processes(self) -> dict[str, Any]:
        if not self.r.has("PROCESSES") or not {"globalPid", "name"} <= self.r.columns("PROCESSES"):
            return {"processes": {}}
        rows = self.r.small('SELECT globalPid, CAST(name AS BLOB) FROM "PROCESSES"')
        return {
            "processes": {
                int(g >> 24) & 0xFFFFFF: self.s.decode(n) for g, n in rows if isinstance(g, int)
            }
        }

    def read_streams(self) -> list[dict[str, int]]:
        t = "TARGET_INFO_CUDA_STREAM"
        if not self.r.has(t) or not {"streamId", "processId"} <= self.r.columns(t):
            return []
        prio = self.opt(t, "priority", "0")
        ctx = self.opt(t, "contextId", "-1")
        rows = self.r.small(f'SELECT processId, streamId, {ctx}, {prio} FROM "{t}"')
        return [
            {"pid": p, "stream": s, "context": c, "priority": pr}
            for p, s, c, pr in rows
            if all(isinstance(v, int) for v in (p, s, c, pr))
        ]


def _fit(values: npt.NDArray[Any], dtype: npt.DTypeLike, what: str) -> npt.NDArray[Any]:
    """``values`` in the model's (narrower) dtype; a value that does not fit is an error."""
    dt = np.dtype(dtype)
    if values.dtype == dt or len(values) == 0:
        return values.astype(dt, copy=False)
    if dt.kind == "i" and values.dtype.kind in "iu":
        info = np.iinfo(dt)
        if int(values.min()) < info.min or int(values.max()) > info.max:
            raise _Bad(f"{what} values out of range ({int(values.min())}..{int(values.max())})")
    return values.astype(dt)


def _none_of(*masks: npt.NDArray[np.bool_] | None) -> npt.NDArray[np.bool_] | None:
    """Rows where none of ``masks`` is set; None when no mask has a row set."""
    ok: npt.NDArray[np.bool_] | None = None
    for m in masks:
        if m is not None:
            ok = ~m if ok is None else ok & ~m
    return ok


def _both(
    a: npt.NDArray[np.bool_] | None, b: npt.NDArray[np.bool_] | None
) -> npt.NDArray[np.bool_] | None:
    """Rows kept by both selections (None: every row)."""
    if a is None or b is None:
        return b if a is None else a
    return a & b


def _merge_by_start(
    parts: Sequence[dict[str, npt.NDArray[Any]]], names: Sequence[str]
) -> dict[str, npt.NDArray[Any]]:
    """The parts' columns ``names`` as one table in start order (ties keep part order).

    Parts each in start order (as nsys writes every table) are interleaved by position:
    each output column is written once, no gather. A row of part i goes after the rows of
    the parts before i that start at or before it and of the parts after i that start
    before it; the largest part fills the rows the others leave."""
    parts = [p for p in parts if len(p["start"])] or list(parts[:1])
    if len(parts) > 1 and all(is_sorted_i64(p["start"]) for p in parts):
        n = sum(len(p["start"]) for p in parts)
        big = max(range(len(parts)), key=lambda i: len(parts[i]["start"]))
        at: dict[int, npt.NDArray[np.intp]] = {}
        for i, p in enumerate(parts):
            if i != big:
                at[i] = np.arange(len(p["start"]))
                for j, q in enumerate(parts):
                    if j != i:
                        side: Literal["left", "right"] = "right" if j < i else "left"
                        at[i] += np.searchsorted(q["start"], p["start"], side=side)
        from_big = np.ones(n, dtype=bool)
        for rows in at.values():
            from_big[rows] = False
        out = {}
        for name in names:
            col = np.empty(n, dtype=np.result_type(*(p[name] for p in parts)))
            col[from_big] = parts[big][name]
            for i, rows in at.items():
                col[rows] = parts[i][name]
            out[name] = col
        return out
    cols = concat_columns(parts, names)
    if len(cols["start"]) > 1 and not is_sorted_i64(cols["start"]):
        order = np.argsort(cols["start"], kind="stable")
        cols = {k: v[order] for k, v in cols.items()}
    return cols


def _runs(v: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Run-length encoding of ``v``: the value and the length of each run of equal values."""
    if len(v) == 0:
        return v, np.empty(0, dtype=np.int64)
    starts = np.concatenate([[0], np.flatnonzero(v[1:] != v[:-1]) + 1])
    return v[starts], np.diff(starts, append=len(v))


def _none_if_all_ones(v: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """A 32-bit id column with CUPTI's "none" (0xFFFFFFFF) as -1 (in place)."""
    v[v == 0xFFFFFFFF] = -1
    return v


def _pair_key(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """One int64 per (pid < 2**24, id < 2**39) pair, for sorting and searching."""
    key: npt.NDArray[np.int64] = np.left_shift(a, 39, dtype=np.int64)
    key |= np.bitwise_and(b, (1 << 39) - 1, dtype=np.int64)
    return key


def _triple_key(
    a: npt.NDArray[np.int64], b: npt.NDArray[np.int64], c: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    return _pair_key(
        a, (np.asarray(b, dtype=np.int64) << 20) | (np.asarray(c, dtype=np.int64) & 0xFFFFF)
    )


def _lookup(
    keys: npt.NDArray[np.int64], values: npt.NDArray[np.int32], query: npt.NDArray[np.int64]
) -> npt.NDArray[np.int32]:
    """values[i] where keys[i] == query (first occurrence), else 0 (the empty string)."""
    out = np.zeros(len(query), dtype=np.int32)
    if len(keys) == 0 or len(query) == 0:
        return out
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    pos = np.minimum(np.searchsorted(sk, query), len(sk) - 1)
    hit = sk[pos] == query
    out[hit] = values[order][pos][hit]
    return out


def _map_mem(v: npt.NDArray[np.int64]) -> npt.NDArray[np.int8]:
    lut = np.array([_MEM_KIND[i] for i in range(len(_MEM_KIND))], dtype=np.int8)
    inside = (v >= 0) & (v < len(lut))
    out = np.where(v < 0, MemKind.NONE, MemKind.UNKNOWN).astype(np.int8)
    out[inside] = lut[v[inside]]
    return out


def _no_copy(n: int) -> dict[str, npt.NDArray[Any]]:
    return {
        "copy_kind": np.full(n, CopyKind.NONE, dtype=np.int8),
        "src_mem": np.full(n, MemKind.NONE, dtype=np.int8),
        "dst_mem": np.full(n, MemKind.NONE, dtype=np.int8),
        "bytes": np.zeros(n, dtype=np.int64),
    }
