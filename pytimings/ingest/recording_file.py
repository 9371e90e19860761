"""Recording files (``pytimings.recording/1``, docs/recording-format.md) read back:
:func:`load_tables` (every table in the file), :func:`load_recording` (the records as a
:class:`~pytimings.model.recording.Recording`), and the built-in tables beside the records
(:data:`pytimings.record.storage.BUILTIN_TABLES`) as the model's types: :func:`load_requests`
(request timelines), :func:`load_memory` (memory samples) and :func:`load_telemetry` (GPU
telemetry samples). Every reader of the format is here; writing is :func:`pytimings.save`
(:mod:`pytimings.record.storage`), the keys and record schema are
:mod:`pytimings.model.recording`, and :mod:`pytimings.ingest.recording` turns a file into a
Trace.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc

from pytimings.errors import TraceFormatError
from pytimings.model.recording import (
    DROPPED_KEY,
    FORMAT_KEY,
    FORMAT_NAME,
    FORMAT_VERSION,
    META_KEY,
    RECORD_SCHEMA,
    RESERVED,
    Recording,
)
from pytimings.model.requests import RequestRecord, records_from_arrow
from pytimings.model.samples import MAX_GPU_INDEX, MemoryRow, MemorySamples, TelemetrySamples

__all__ = [
    "load_memory",
    "load_recording",
    "load_requests",
    "load_tables",
    "load_telemetry",
    "telemetry_from_arrow",
]

# what pyarrow raises on damaged files: its own errors, failed reads, undecodable names
_ARROW_ERRORS = (pa.ArrowException, OSError, UnicodeDecodeError)


@contextlib.contextmanager
def _corrupt_as_format_error(path: str) -> Iterator[None]:
    """Arrow errors past the validated header (bad buffers) as one TraceFormatError."""
    try:
        yield
    except _ARROW_ERRORS as exc:
        raise TraceFormatError(path, f"corrupt recording: {exc}") from None


def _open(path: str | os.PathLike[str]) -> tuple[Any, dict[bytes, bytes]]:
    """The one record batch of a recording file and its schema metadata, validated."""
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise TraceFormatError(p, "no such file")
    try:
        # read, not mapped: arrays over a mapping of a file truncated later (even after
        # the load) would fault with SIGBUS wherever they are touched
        reader = pa.ipc.open_file(pa.OSFile(p, "r"))
        schema = reader.schema
    except _ARROW_ERRORS as exc:
        raise TraceFormatError(
            p, f"not a readable Arrow IPC file (truncated or corrupt?): {exc}"
        ) from None
    meta = dict(schema.metadata or {})
    fmt = meta.get(FORMAT_KEY)
    if fmt is None:
        raise TraceFormatError(
            p,
            "an Arrow IPC file but not a pytimings recording "
            "(no pytimings.format in its schema metadata)",
        )
    name, _, version = fmt.decode("utf-8", "replace").partition("/")
    if name != FORMAT_NAME or not version.isdigit():
        raise TraceFormatError(
            p,
            f"unknown format {fmt.decode('utf-8', 'replace')!r}, "
            f"expected {FORMAT_NAME}/{FORMAT_VERSION}",
        )
    if int(version) != FORMAT_VERSION:
        raise TraceFormatError(
            p,
            f"recording format version {version} is not supported; "
            f"this pytimings reads version {FORMAT_VERSION}",
        )
    with _corrupt_as_format_error(p):
        if reader.num_record_batches != 1:
            raise TraceFormatError(p, f"expected 1 record batch, found {reader.num_record_batches}")
        batch = reader.get_batch(0)
        batch.validate(full=True)
        if batch.num_rows != 1:
            raise TraceFormatError(p, f"expected 1 row, found {batch.num_rows}")
        for t in RESERVED:
            if t not in batch.schema.names:
                raise TraceFormatError(p, f"table {t!r} is missing")
        if len(set(batch.schema.names)) != batch.num_columns:
            raise TraceFormatError(p, "a table name appears twice")
        for f in batch.schema:
            if not (pa.types.is_large_list(f.type) and pa.types.is_struct(f.type.value_type)):
                raise TraceFormatError(p, f"table {f.name!r} is not a large_list<struct> column")
            cols = [c.name for c in f.type.value_type]
            if len(set(cols)) != len(cols):
                raise TraceFormatError(p, f"table {f.name!r} has a column name twice")
    return batch, meta


def _table_of(batch: Any, name: str) -> Any:
    field = batch.schema.field(name)
    struct = batch.column(name).values
    t = pa.Table.from_arrays(struct.flatten(), schema=pa.schema(list(field.type.value_type)))
    return t.replace_schema_metadata(field.metadata)


def load_tables(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Every table in a recording file, by name (``records``, ``strings``, ``threads``
    and whatever providers added), as pyarrow Tables (memory-mapped, not copied)."""
    batch, _ = _open(path)
    with _corrupt_as_format_error(os.fspath(path)):
        return {name: _table_of(batch, name) for name in batch.schema.names}


def _json(path: str, meta: dict[bytes, bytes], key: bytes, kind: type) -> Any:
    raw = meta.get(key)
    if raw is None:
        raise TraceFormatError(path, f"{key.decode()} is missing from the schema metadata")
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise TraceFormatError(path, f"{key.decode()} is not valid JSON: {exc}") from None
    if not isinstance(value, kind):
        raise TraceFormatError(path, f"{key.decode()} is not a JSON {kind.__name__}")
    return value


def load_recording(path: str | os.PathLike[str]) -> Recording:
    """Read a file written by :func:`save` back into a Recording (record columns are
    read-only numpy views of the memory-mapped file)."""
    p = os.fspath(path)
    batch, meta = _open(p)
    with _corrupt_as_format_error(p):
        return _recording_of(p, batch, meta)


def _recording_of(p: str, batch: Any, meta: dict[bytes, bytes]) -> Recording:
    records = _table_of(batch, "records")
    columns: dict[str, Any] = {}
    for c, dt in RECORD_SCHEMA.items():
        if c not in records.column_names:
            raise TraceFormatError(p, f"record column {c!r} is missing")
        col = records.column(c)
        if col.null_count:
            raise TraceFormatError(p, f"record column {c!r} has nulls")
        arr = col.to_numpy()
        if arr.dtype != np.dtype(dt):
            raise TraceFormatError(
                p, f"record column {c!r} is {arr.dtype}, expected {np.dtype(dt)}"
            )
        columns[c] = arr
    strings = _table_of(batch, "strings")
    if strings.column_names != ["string"] or strings.column("string").null_count:
        raise TraceFormatError(p, "table 'strings' must be one non-null column 'string'")
    string_list = strings.column("string").to_pylist()
    threads = _table_of(batch, "threads").to_pylist()
    for t in threads:
        if not isinstance(t.get("tid"), int) or not isinstance(t.get("name"), str | None):
            raise TraceFormatError(p, f"thread entry {t!r} lacks an integer tid or a name")
    n = len(columns["name"])
    if n:
        for c, limit, what in (
            ("name", len(string_list), "strings"),
            ("kind", len(string_list), "strings"),
            ("thread", len(threads), "threads"),
        ):
            top = int(columns[c].max())
            if top >= limit:
                raise TraceFormatError(
                    p, f"record column {c!r} refers to entry {top} of {what}, which has {limit}"
                )
    rec_meta = _json(p, meta, META_KEY, dict)
    dropped = _json(p, meta, DROPPED_KEY, dict)
    if not all(isinstance(v, int) and v >= 0 for v in dropped.values()):
        raise TraceFormatError(p, "pytimings.dropped counts must be non-negative integers")
    return Recording(
        records=columns, strings=string_list, threads=threads, meta=rec_meta, dropped=dropped
    )


def load_telemetry(path: str | os.PathLike[str]) -> TelemetrySamples | None:
    """The telemetry samples saved in a recording file (None: it has no "telemetry" table)."""
    tables = load_tables(path)
    if "telemetry" not in tables:
        return None
    return telemetry_from_arrow(tables["telemetry"], path)


def telemetry_from_arrow(table: pa.Table, path: str | os.PathLike[str]) -> TelemetrySamples:
    """A recording's "telemetry" table (read from ``path``) as samples."""
    names = ("t_ns", "gpu", "metric", "value")
    missing = [name for name in names if name not in table.column_names]
    if missing:
        raise TraceFormatError(path, f"telemetry table lacks columns {missing}")
    rows = list(zip(*(table[name].to_pylist() for name in names), strict=True))
    if any(None in row for row in rows):
        raise TraceFormatError(path, "telemetry table has a row with a null field")
    for _, gpu, metric, value in rows:
        if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < MAX_GPU_INDEX:
            raise TraceFormatError(
                path, f"telemetry GPU index {gpu!r:.40} is not in 0..{MAX_GPU_INDEX - 1}"
            )
        if not isinstance(value, int | float) or not math.isfinite(value):
            raise TraceFormatError(path, f"telemetry value {value!r:.40} of {metric!r:.80} "
                                   "is not a finite number")  # fmt: skip
    source = (table.schema.metadata or {}).get(b"source", b"nvml").decode()  # older files: NVML
    return TelemetrySamples.from_rows(sorted(rows), source)


def load_requests(path: str | os.PathLike[str]) -> list[RequestRecord]:
    """The request timelines saved in a recording file (its "requests" table)."""
    tables = load_tables(path)
    if "requests" not in tables:
        raise TraceFormatError(path, "has no requests table (no request was recorded)")
    return records_from_arrow(tables["requests"], path)


def load_memory(path: str | os.PathLike[str]) -> MemorySamples | None:
    """The memory samples saved in a recording file, in time order (None: it has no "memory"
    table)."""
    tables = load_tables(path)
    if "memory" not in tables:
        return None
    table = tables["memory"]
    names = ("t_ns", "rss_bytes", "cuda_allocated_bytes")
    missing = [name for name in names if name not in table.column_names]
    if missing:
        raise TraceFormatError(os.fspath(path), f"memory table lacks columns {missing}")
    rows: list[MemoryRow] = sorted(zip(*(table[name].to_pylist() for name in names), strict=True))
    if any(row[0] is None or row[1] is None for row in rows):
        raise TraceFormatError(os.fspath(path), "memory table has a sample without a time or RSS")
    return MemorySamples.from_rows(rows)
