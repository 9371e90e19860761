"""Nsight Systems SQLite exports (``nsys export --type sqlite``) -> the event model.

Reads every schema era found in real exports (2020 legacy files without a META table,
``EXPORT_META_DATA`` 2.x, ``META_DATA_EXPORT`` 3.x up to 3.25): tables that are absent when
empty, columns added over time, non-UTF-8 bytes in strings.

Speed: the large tables are read with ADBC's SQLite driver straight into Arrow columns
(no Python object per row; measured 3x faster than ``sqlite3`` + ``fetchall`` + numpy, see
benches/RESULTS.md). Every nullable or mixed-type column is coalesced in SQL so that
Arrow's per-batch type inference sees one type; a value of the wrong type (a corrupt file)
is an error, never a silent cast. Strings stay integer ids: ``StringIds`` ids are remapped
to trace string ids with one numpy take, inline NVTX text is dictionary-encoded by Arrow.

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
- nsys memory kinds (ENUM_CUDA_MEM_KIND: 0 pageable, 1 pinned, 2 device, ...) differ from
  CUPTI's; they are translated to :class:`MemKind`.
- NVTX_EVENTS rows: eventType 59 push/pop range, 60 start/end range, 75 domain create
  (names ``domainId`` within a process), 33 category name (``category`` within a domain),
  34 mark (instant: counted, not a range), 39 thread name. A push/pop or start/end range
  whose end is NULL was still open when the capture stopped: counted, not loaded. A
  start/end range belongs to the thread that started it (``globalTid``).
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.errors import TraceFormatError
from pytimings.ingest import SQLITE_MAGIC
from pytimings.ingest._model import (
    API_CALL_SCHEMA,
    DEVICE_SCHEMA,
    GPU_OP_SCHEMA,
    RANGE_SCHEMA,
    THREAD_SCHEMA,
    ApiKind,
    CopyKind,
    MemKind,
    OpKind,
    RangeKind,
    StringTable,
    Trace,
    concat_columns,
    conform,
)
from pytimings.ingest._nesting import nesting_depth

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
NVTX = "NVTX_EVENTS"
EVENT_TABLES = (KERNEL, MEMCPY, MEMSET, RUNTIME, DRIVER, SYNC, NVTX)

EVENT_CLASS_RUNTIME = 0
EVENT_CLASS_DRIVER = 1
EVENT_CLASS_CUDA_BACKTRACE = 67

NVTX_CATEGORY = 33
NVTX_MARK = 34
NVTX_THREAD_NAME = 39
NVTX_PUSHPOP = 59
NVTX_STARTEND = 60
NVTX_DOMAIN_CREATE = 75

_NULL = np.iinfo(np.int64).min  # SQL NULL in coalesced integer columns
_ARROW_BATCH_ROWS = "262144"  # large batches: 1.8x faster than ADBC's default of 1024

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
# ENUM_CUPTI_SYNC_TYPE descriptions
_SYNC_NAMES = {
    0: "Unknown sync",
    1: "Event sync",
    2: "Stream wait sync",
    3: "Stream sync",
    4: "Context sync",
}


class _Bad(Exception):
    """A problem with the file's content; becomes a TraceFormatError naming the file."""


def pid_of(global_id: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """OS process id held in an nsys globalPid/globalTid (bits 24..47)."""
    return (global_id >> 24) & 0xFFFFFF


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
    from adbc_driver_manager import Error as AdbcError
    from pyarrow import ArrowException

    try:
        with _Reader(path) as reader:
            return _Loader(reader, rank).load()
    except _Bad as exc:
        raise TraceFormatError(path, str(exc)) from None
    except (sqlite3.Error, AdbcError, ArrowException, OSError, ValueError, OverflowError) as exc:
        # sqlite3 and the ADBC driver (OSError subclasses) report corrupt pages, type
        # mismatches and truncation; nothing of a partly read file is returned
        msg = " ".join(str(exc).split()) or type(exc).__name__
        raise TraceFormatError(path, f"corrupt or unreadable nsys export ({msg})") from None


class _Reader:
    """Both SQLite clients on one read-only file: ADBC for big tables, sqlite3 for small."""

    def __init__(self, path: str) -> None:
        self.path = path
        uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
        self.db = sqlite3.connect(uri, uri=True)
        self.db.text_factory = bytes
        try:
            rows = self.db.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
        except sqlite3.DatabaseError:
            self.db.close()
            raise
        self.tables = {r[0].decode("utf-8", "replace") for r in rows}
        self._columns: dict[str, set[str]] = {}
        self._uri = uri
        self._adbc: Any = None

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.db.close()
        if self._adbc is not None:
            self._adbc.close()

    def columns(self, table: str) -> set[str]:
        cols = self._columns.get(table)
        if cols is None:
            rows = self.db.execute(f'PRAGMA table_info("{table}")').fetchall()
            cols = self._columns[table] = {r[1].decode("utf-8", "replace") for r in rows}
        return cols

    def has(self, table: str) -> bool:
        return table in self.tables

    def small(self, sql: str) -> list[tuple[Any, ...]]:
        return self.db.execute(sql).fetchall()

    def arrow(self, sql: str) -> Any:
        """A query's result as a pyarrow Table (columnar, no Python object per row)."""
        if self._adbc is None:
            import adbc_driver_sqlite.dbapi as adbc

            self._adbc = adbc.connect(self._uri)
        cur = self._adbc.cursor()
        try:
            cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": _ARROW_BATCH_ROWS})
            cur.execute(sql)
            return cur.fetch_arrow_table()
        finally:
            cur.close()


def _ints(tab: Any, name: str) -> npt.NDArray[np.int64]:
    """An integer column of an Arrow result (NULLs were coalesced in SQL)."""
    import pyarrow as pa

    col = tab.column(name)
    if not (pa.types.is_integer(col.type) or (pa.types.is_null(col.type) and len(col) == 0)):
        raise _Bad(f"column {name!r} holds {col.type} values where integers are expected")
    if len(col) == 0:
        return np.empty(0, dtype=np.int64)
    return np.asarray(col.to_numpy(), dtype=np.int64)


def _floats(tab: Any, name: str) -> npt.NDArray[np.float64]:
    import pyarrow as pa

    col = tab.column(name)
    if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type) or len(col) == 0):
        raise _Bad(f"column {name!r} holds {col.type} values where numbers are expected")
    if len(col) == 0:
        return np.empty(0, dtype=np.float64)
    return np.asarray(col.to_numpy(), dtype=np.float64)


def _q(col: str) -> str:
    return f'"{col}"'


class _Strings(StringTable):
    """The trace's string table, seeded with StringIds, plus id remapping."""

    def __init__(self) -> None:
        super().__init__()
        self.non_utf8 = 0
        self._lut = np.zeros(1, dtype=np.int32)  # StringIds id -> trace id; -1 unknown
        self._lut[:] = -1
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

    def load_string_ids(self, rows: Sequence[tuple[Any, Any]]) -> None:
        if not rows:
            return
        if not all(type(r[0]) is int and isinstance(r[1], bytes) for r in rows):
            raise _Bad("StringIds holds a row that is not an (integer id, text) pair")
        sid = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        if sid.min() < 0:
            raise _Bad("StringIds holds a negative id")
        if sid.max() > 1 << 31:
            raise _Bad(f"StringIds id {int(sid.max())} is out of range")
        lut = np.full(int(sid.max()) + 1, -1, dtype=np.int32)
        decode, intern = self.decode, self.intern
        lut[sid] = np.fromiter(
            (intern(decode(r[1])) for r in rows), dtype=np.int32, count=len(rows)
        )
        self._lut = lut

    def remap(self, string_ids: npt.NDArray[np.int64], what: str) -> npt.NDArray[np.int32]:
        """StringIds ids -> trace string ids; an id StringIds lacks gets a visible name."""
        if len(string_ids) == 0:
            return np.empty(0, dtype=np.int32)
        inside = (string_ids >= 0) & (string_ids < len(self._lut))
        out = np.full(len(string_ids), -1, dtype=np.int32)
        out[inside] = self._lut[string_ids[inside]]
        missing = out < 0
        if missing.any():
            self.unresolved += int(missing.sum())
            out[missing] = self.intern(f"[{what}: unknown string id]")
        return out

    def encode_blobs(self, col: Any) -> npt.NDArray[np.int32]:
        """Trace string ids of an Arrow binary column, via Arrow's dictionary encoding."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if len(col) == 0:
            return np.empty(0, dtype=np.int32)
        if not (pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type)):
            raise _Bad(f"a text column holds {col.type} values")
        enc = pc.dictionary_encode(col).combine_chunks()
        remap = np.fromiter(
            (self.intern(self.decode(v)) for v in enc.dictionary.to_pylist()),
            dtype=np.int32,
            count=len(enc.dictionary),
        )
        return remap[np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)]


class _Loader:
    def __init__(self, reader: _Reader, rank: int) -> None:
        self.r = reader
        self.rank = rank
        self.s = _Strings()
        self.meta: dict[str, Any] = {"format": FORMAT, "path": reader.path}
        self.dropped: dict[str, int] = {}
        self.thread_keys = np.empty(0, dtype=np.int64)  # sorted unique globalTids

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
        return f"coalesce({_q(col)}, {default})" if col in self.r.columns(table) else default

    def check_times(
        self, what: str, start: npt.NDArray[np.int64], end: npt.NDArray[np.int64]
    ) -> None:
        bad = np.flatnonzero(end < start)
        if len(bad):
            i = int(bad[0])
            raise _Bad(
                f"{len(bad)} {what} row(s) end before they start "
                f"(first: start {int(start[i])} ns, end {int(end[i])} ns)"
            )

    def timed(
        self, what: str, start: npt.NDArray[np.int64], end: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.bool_]:
        """Rows with both times (NULL times cannot be placed: counted); checks order."""
        ok: npt.NDArray[np.bool_] = (start != _NULL) & (end != _NULL)
        self.drop(f"{what}_without_time", len(ok) - int(ok.sum()))
        self.check_times(what, start[ok], end[ok])
        return ok

    # -- the file -----------------------------------------------------------------------
    def load(self) -> Trace:
        self.read_meta()
        if not self.r.has("StringIds"):
            if not any(self.r.has(t) for t in EVENT_TABLES):
                raise _Bad("an SQLite database, but not an Nsight Systems export (no StringIds)")
            raise _Bad("nsys export lacks its StringIds table (names cannot be resolved)")
        self.need("StringIds", ("id", "value"))
        self.s.load_string_ids(self.r.small('SELECT id, CAST(value AS BLOB) FROM "StringIds"'))
        self.read_threads()
        api = self.read_api_calls()
        ops = self.read_gpu_ops()
        ranges = self.read_ranges()
        if not (len(ops["start"]) or len(api["start"]) or len(ranges["start"])):
            raise _Bad("contains no events (no GPU ops, API calls or NVTX ranges)")
        devices = self.read_devices(ops["device"])
        threads = self.thread_table()
        self.meta.update(self.read_processes())
        self.meta["streams"] = self.read_streams()
        self.meta["non_utf8_strings"] = self.s.non_utf8
        self.meta["unresolved_string_ids"] = self.s.unresolved
        return Trace(
            gpu_ops=conform(ops, GPU_OP_SCHEMA),
            api_calls=conform(api, API_CALL_SCHEMA),
            ranges=conform(ranges, RANGE_SCHEMA),
            threads=conform(threads, THREAD_SCHEMA),
            devices=conform(devices, DEVICE_SCHEMA),
            strings=self.s.strings,
            meta=self.meta,
            dropped=self.dropped,
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

    def add_threads(self, global_tids: npt.NDArray[np.int64]) -> None:
        self._pending_thread_keys.append(_runs(global_tids)[0])

    def thread_index(self, global_tids: npt.NDArray[np.int64]) -> npt.NDArray[np.int32]:
        if self._pending_thread_keys:
            self.thread_keys = np.unique(
                np.concatenate([self.thread_keys, *self._pending_thread_keys])
            )
            self._pending_thread_keys = []
        # a thread's calls come in runs: look up one value per run
        values, lengths = _runs(global_tids)
        return np.repeat(np.searchsorted(self.thread_keys, values).astype(np.int32), lengths)

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
            cls = self.opt(table, "eventClass", str(EVENT_CLASS_DRIVER if table == DRIVER else 0))
            tab = self.r.arrow(
                f'SELECT coalesce(start, {_NULL}) AS start, coalesce("end", {_NULL}) AS "end", '
                f"coalesce(nameId, -1) AS nameId, coalesce(globalTid, 0) AS globalTid, "
                f"coalesce(correlationId, -1) AS corr, {cls} AS cls FROM {table}"
            )
            cls_v = _ints(tab, "cls")
            backtrace = cls_v == EVENT_CLASS_CUDA_BACKTRACE
            self.drop("cuda_backtrace_duplicate_rows", int(backtrace.sum()))
            known = (cls_v == EVENT_CLASS_RUNTIME) | (cls_v == EVENT_CLASS_DRIVER)
            for c in np.unique(cls_v[~known & ~backtrace]).tolist():
                self.drop(f"{table.lower()}_event_class_{c}_rows", int((cls_v == c).sum()))
            start, end = _ints(tab, "start"), _ints(tab, "end")
            sel = np.flatnonzero(known & self.timed("cuda_api_call", start, end))
            start, end = start[sel], end[sel]
            gtid = _ints(tab, "globalTid")[sel]
            self.add_threads(gtid)
            parts.append(
                {
                    "start": start,
                    "end": end,
                    "name": self.s.remap(_ints(tab, "nameId")[sel], "CUDA API"),
                    "kind": np.where(
                        cls_v[sel] == EVENT_CLASS_DRIVER, ApiKind.DRIVER, ApiKind.RUNTIME
                    ),
                    "gtid": gtid,
                    "correlation": _ints(tab, "corr")[sel],
                }
            )
        calls = concat_columns(parts, ("start", "end", "name", "kind", "gtid", "correlation"))
        calls["pid"] = pid_of(calls["gtid"])
        calls["thread"] = self.thread_index(calls["gtid"])
        sync = self.read_sync(calls)
        out = concat_columns(
            [calls, sync], ("start", "end", "name", "kind", "thread", "correlation", "pid")
        )
        order = np.argsort(out["start"], kind="stable")
        out = {k: v[order] for k, v in out.items()}
        out["rank"] = np.full(len(order), self.rank, dtype=np.int16)
        return out

    def read_sync(self, calls: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
        """Synchronisation rows; their thread is that of the API call with their id."""
        empty = {
            k: np.empty(0, dtype=np.int64)
            for k in ("start", "end", "name", "kind", "thread", "correlation", "pid")
        }
        if not self.r.has(SYNC):
            return empty
        self.need(SYNC, ("start", "end", "correlationId", "globalPid"))
        stype = self.opt(SYNC, "syncType", "0")
        tab = self.r.arrow(
            f'SELECT coalesce(start, {_NULL}) AS start, coalesce("end", {_NULL}) AS "end", '
            f"coalesce(correlationId, -1) AS corr, coalesce(globalPid, 0) AS gpid, "
            f"{stype} AS stype FROM {SYNC}"
        )
        start, end = _ints(tab, "start"), _ints(tab, "end")
        ok = self.timed("synchronization", start, end)
        start, end = start[ok], end[ok]
        corr = _ints(tab, "corr")[ok]
        pid = pid_of(_ints(tab, "gpid")[ok])
        stype_v = _ints(tab, "stype")[ok]
        names_by_type = self.enum_names("ENUM_CUPTI_SYNC_TYPE", _SYNC_NAMES)
        uniq, inv = np.unique(stype_v, return_inverse=True)
        ids = np.array(
            [self.s.intern(names_by_type.get(int(u), f"Sync type {int(u)}")) for u in uniq],
            dtype=np.int32,
        )
        # the launching call's thread, found by (pid, correlation id)
        thread = np.full(len(corr), -1, dtype=np.int32)
        ck = _pair_key(calls["pid"], calls["correlation"])
        order = np.argsort(ck, kind="stable")
        sk = _pair_key(pid, corr)
        pos = np.searchsorted(ck[order], sk)
        pos_c = np.minimum(pos, max(len(ck) - 1, 0))
        if len(ck):
            hit = ck[order][pos_c] == sk
            thread[hit] = calls["thread"][order][pos_c][hit]
        self.meta["sync_rows_without_api_call"] = int((thread < 0).sum())
        return {
            "start": start,
            "end": end,
            "name": ids[inv.reshape(-1)] if len(uniq) else np.empty(0, np.int32),
            "kind": np.full(len(start), ApiKind.SYNC, dtype=np.int8),
            "thread": thread,
            "correlation": corr,
            "pid": pid,
        }

    def enum_names(self, table: str, default: dict[int, str]) -> dict[int, str]:
        if not self.r.has(table) or not {"id", "label"} <= self.r.columns(table):
            return default
        rows = self.r.small(f'SELECT id, CAST(label AS BLOB) FROM "{table}"')
        return {**default, **{int(i): self.s.decode(v) for i, v in rows if isinstance(i, int)}}

    # -- GPU ops ------------------------------------------------------------------------
    def read_gpu_ops(self) -> dict[str, npt.NDArray[Any]]:
        parts = []
        in_graph: list[npt.NDArray[np.bool_]] = []
        for table, kind in (
            (KERNEL, OpKind.KERNEL),
            (MEMCPY, OpKind.MEMCPY),
            (MEMSET, OpKind.MEMSET),
        ):
            if not self.r.has(table):
                continue
            self.need(table, ("start", "end", "deviceId", "streamId", "correlationId", "globalPid"))
            cols = self.r.columns(table)
            extra = []
            if kind == OpKind.KERNEL:
                name_col = next((c for c in ("demangledName", "shortName") if c in cols), None)
                if name_col is None:
                    raise _Bad(f"table {table} lacks column(s) demangledName")
                extra.append(f"coalesce({_q(name_col)}, -1) AS nameId")
            elif kind == OpKind.MEMCPY:
                self.need(table, ("bytes", "copyKind"))
                extra += [
                    "coalesce(bytes, 0) AS bytes",
                    "coalesce(copyKind, 0) AS copyKind",
                    f"{self.opt(table, 'srcKind', '-1')} AS srcKind",
                    f"{self.opt(table, 'dstKind', '-1')} AS dstKind",
                ]
            else:
                self.need(table, ("bytes",))
                extra += [
                    "coalesce(bytes, 0) AS bytes",
                    f"{self.opt(table, 'memKind', '-1')} AS memKind",
                ]
            # graphId names the graph (2021+ kernels); a graphExecId alone still marks a launch
            graph_col = next((c for c in ("graphId", "graphExecId") if c in cols), None)
            graph = self.opt(table, graph_col, "0") if graph_col else "0"
            node = self.opt(table, "graphNodeId", "0")
            tab = self.r.arrow(
                f'SELECT coalesce(start, {_NULL}) AS start, coalesce("end", {_NULL}) AS "end", '
                f"coalesce(deviceId, -1) AS deviceId, coalesce(streamId, -1) AS streamId, "
                f"coalesce(correlationId, -1) AS corr, coalesce(globalPid, 0) AS gpid, "
                f"{graph} AS graphId, {node} AS graphNodeId, {', '.join(extra)} FROM {table}"
            )
            what = {OpKind.KERNEL: "kernel", OpKind.MEMCPY: "memcpy", OpKind.MEMSET: "memset"}[kind]
            start, end = _ints(tab, "start"), _ints(tab, "end")
            ok = self.timed(what, start, end)
            keep: npt.NDArray[np.bool_] | None = None if ok.all() else ok  # no copy when whole
            if keep is not None:
                start, end = start[keep], end[keep]
            n = len(start)

            def col(
                name: str, keep: npt.NDArray[np.bool_] | None = keep, tab: Any = tab
            ) -> npt.NDArray[np.int64]:
                v = _ints(tab, name)
                return v if keep is None else v[keep]

            graph_id = col("graphId")
            part: dict[str, npt.NDArray[Any]] = {
                "start": start,
                "end": end,
                "kind": np.full(n, kind, dtype=np.int8),
                "device": col("deviceId"),
                "stream": col("streamId"),
                "correlation": col("corr"),
                "pid": pid_of(col("gpid")),
                "graph": np.where(graph_id > 0, graph_id, -1),
            }
            in_graph.append((graph_id > 0) | (col("graphNodeId") > 0))
            if kind == OpKind.KERNEL:
                part["name"] = self.s.remap(col("nameId"), "kernel")
                part.update(_no_copy(n))
            elif kind == OpKind.MEMCPY:
                part.update(self.memcpy_columns(col("copyKind"), col("srcKind"), col("dstKind")))
                part["bytes"] = col("bytes")
            else:
                part["name"] = np.full(n, self.s.intern("[CUDA memset]"), dtype=np.int32)
                part.update(_no_copy(n))
                part["dst_mem"] = _map_mem(col("memKind"))
                part["bytes"] = col("bytes")
            del tab
            parts.append({k: _fit(v, GPU_OP_SCHEMA[k], k) for k, v in part.items()})
        names = tuple(GPU_OP_SCHEMA)
        ops = concat_columns(parts, tuple(c for c in names if c != "rank"))
        flags = np.concatenate(in_graph) if in_graph else np.empty(0, dtype=bool)
        self.check_correlation(ops, flags)
        if len(ops["start"]) > 1 and not np.all(ops["start"][1:] >= ops["start"][:-1]):
            order = np.argsort(ops["start"], kind="stable")
            ops = {k: v[order] for k, v in ops.items()}
        ops["rank"] = np.full(len(ops["start"]), self.rank, dtype=np.int16)
        return ops

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
        corr = ops["correlation"]
        known = corr >= 0
        key = _pair_key(ops["pid"][known], corr[known])
        if len(key) < 2:
            return
        order = np.argsort(key, kind="stable")
        sk = key[order]
        dup = sk[1:] == sk[:-1]
        if not dup.any():
            return
        rows = np.zeros(len(sk), dtype=bool)
        rows[1:] |= dup
        rows[:-1] |= dup
        graph_flags = in_graph[known][order][rows]
        if not graph_flags.all():
            first = order[np.flatnonzero(rows & ~in_graph[known][order])[0]]
            raise _Bad(
                f"{int(rows.sum())} GPU ops share a correlation id with another GPU op of the "
                f"same process (first: correlationId {int(corr[known][first])}, pid "
                f"{int(ops['pid'][known][first])}) and are not CUDA graph launches"
            )
        self.meta["graph_ops_sharing_correlation"] = int(rows.sum())

    # -- NVTX ---------------------------------------------------------------------------
    def read_ranges(self) -> dict[str, npt.NDArray[Any]]:
        empty = {c: np.empty(0, dtype=dt) for c, dt in RANGE_SCHEMA.items()}
        if not self.r.has(NVTX):
            return empty
        self.need(NVTX, ("start", "end", "eventType", "globalTid"))
        cols = self.r.columns(NVTX)
        payload_cols = [
            c
            for c in (
                "doubleValue",
                "floatValue",
                "int64Value",
                "uint64Value",
                "int32Value",
                "uint32Value",
            )
            if c in cols
        ]
        payload_sql = "".join(
            f", coalesce({_q(c)}, 0) AS p{i}, {_q(c)} IS NULL AS n{i}"
            for i, c in enumerate(payload_cols)
        )
        text = "coalesce(CAST(text AS BLOB), X'')" if "text" in cols else "X''"
        tab = self.r.arrow(
            f'SELECT coalesce(start, {_NULL}) AS start, coalesce("end", {_NULL}) AS "end", '
            f"coalesce(eventType, -1) AS etype, coalesce(globalTid, 0) AS gtid, "
            f"{self.opt(NVTX, 'textId', '-1')} AS textId, {text} AS text, "
            f"{self.opt(NVTX, 'domainId', '0')} AS domainId, "
            f"{self.opt(NVTX, 'category', '0')} AS category{payload_sql} FROM {NVTX}"
        )
        etype = _ints(tab, "etype")
        gtid = _ints(tab, "gtid")
        pid = pid_of(gtid)
        domain_id = _ints(tab, "domainId")
        category = _ints(tab, "category")
        text_id = _ints(tab, "textId")
        # names: a registered string (textId) wins over inline text
        inline = self.s.encode_blobs(tab.column("text"))
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
        for t in np.unique(etype).tolist():
            if t not in handled:
                self.drop(f"nvtx_event_type_{t}_rows", int((etype == t).sum()))
        is_range = (etype == NVTX_PUSHPOP) | (etype == NVTX_STARTEND)
        start, end = _ints(tab, "start"), _ints(tab, "end")
        self.drop("nvtx_ranges_without_start", int((is_range & (start == _NULL)).sum()))
        open_ = is_range & (start != _NULL) & (end == _NULL)
        self.drop("nvtx_ranges_open_at_capture_end", int(open_.sum()))
        sel = np.flatnonzero(is_range & (start != _NULL) & (end != _NULL))
        start, end = start[sel], end[sel]
        self.check_times("NVTX range", start, end)
        gtid_s = gtid[sel]
        self.add_threads(gtid_s)
        thread = self.thread_index(gtid_s)
        kind = np.where(
            etype[sel] == NVTX_PUSHPOP, RangeKind.NVTX_PUSHPOP, RangeKind.NVTX_STARTEND
        ).astype(np.int8)
        payload = np.full(len(sel), np.nan)
        for i in reversed(range(len(payload_cols))):  # first listed column wins
            has = _ints(tab, f"n{i}")[sel] == 0
            payload[has] = _floats(tab, f"p{i}")[sel][has]
        pid_s, dom_s, cat_s = pid[sel], domain_id[sel], category[sel]
        out = {
            "start": start,
            "end": end,
            "name": names[sel],
            "kind": kind,
            "thread": thread,
            "device": np.full(len(sel), -1, dtype=np.int16),
            "domain": _lookup(dom_key, names[dom_rows], _pair_key(pid_s, dom_s)),
            "category": _lookup(cat_key, names[cat_rows], _triple_key(pid_s, dom_s, cat_s)),
            "depth": np.zeros(len(sel), dtype=np.int16),
            "payload": payload,
            "pid": pid_s,
        }
        for k in (RangeKind.NVTX_PUSHPOP, RangeKind.NVTX_STARTEND):
            m = kind == k
            if m.any():
                out["depth"][m] = nesting_depth(thread[m], start[m], end[m])
        order = np.argsort(start, kind="stable")
        out = {k: v[order] for k, v in out.items()}
        out["rank"] = np.full(len(order), self.rank, dtype=np.int16)
        return out

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
                    f'SELECT {_q(dev)}, CAST(name AS BLOB) FROM "TARGET_INFO_GPU" WHERE {cuda}'
                )
                for d, n in rows:
                    if isinstance(d, int) and d >= 0:
                        found.setdefault(d, self.s.decode(n))
        ids = sorted(set(found) | {int(d) for d in np.unique(used)})
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


def _runs(v: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Run-length encoding of ``v``: the value and the length of each run of equal values."""
    if len(v) == 0:
        return v, np.empty(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate([[True], v[1:] != v[:-1]]))
    return v[starts], np.diff(starts, append=len(v))


def _pair_key(a: npt.NDArray[np.int64], b: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """One int64 per (pid < 2**24, id < 2**39) pair, for sorting and searching."""
    return (np.asarray(a, dtype=np.int64) << 39) | (np.asarray(b, dtype=np.int64) & ((1 << 39) - 1))


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
