"""Recordings on disk: ``save`` / ``load_recording`` in the ``pytimings.recording/1`` format.

The file is one Arrow IPC file (format described in docs/recording-format.md) with a single
row; each column is one named table stored as a list of structs, so any Arrow reader sees
every table with its full types, and reading memory-maps the file without copying columns.
Other modules add their own tables to the same file with :func:`register_table_provider`;
:func:`load_tables` returns every table in a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc

from pytimings._records import RECORD_SCHEMA, Recording
from pytimings.errors import TraceFormatError, UsageError

FORMAT_KEY = b"pytimings.format"
FORMAT_NAME = "pytimings.recording"
FORMAT_VERSION = 1
META_KEY = b"pytimings.meta"
DROPPED_KEY = b"pytimings.dropped"
# tables every recording has; providers may not use these names
RESERVED = ("records", "strings", "threads")

TableProvider = Callable[[], Any]  # () -> pyarrow.Table | None
_providers: dict[str, TableProvider] = {}
_providers_lock = threading.Lock()


def register_table_provider(name: str, provider: TableProvider) -> None:
    """Have ``save`` also store ``provider()`` (a ``pyarrow.Table``, or None to skip) as
    table ``name``. Registering a name again replaces its provider."""
    if not isinstance(name, str) or not name or name in RESERVED:
        raise UsageError(
            f"table provider name must be a non-empty string other than "
            f"{', '.join(RESERVED)}; got {name!r}"
        )
    if not callable(provider):
        raise UsageError(f"table provider for {name!r} is not callable")
    with _providers_lock:
        _providers[name] = provider


def unregister_table_provider(name: str) -> None:
    with _providers_lock:
        _providers.pop(name, None)


def as_recording(source: Any = None) -> Recording:
    """The Recording behind ``source``: None (the default recorder), a ``Recorder``
    (flushed, records kept), a ``Recording``, or the path of a saved recording."""
    if isinstance(source, Recording):
        return source
    if isinstance(source, str | os.PathLike):
        return load_recording(source)
    if source is None:
        from pytimings.recorder import default_recorder

        source = default_recorder()
    flush = getattr(source, "flush", None)
    recording = getattr(source, "recording", None)
    if not callable(flush) or not callable(recording):
        raise UsageError(f"expected a Recorder, a Recording or a path, got {type(source).__name__}")
    flush()
    rec = recording()
    if not isinstance(rec, Recording):
        raise UsageError(f"{type(source).__name__}.recording() did not return a Recording")
    return rec


# -- writing ---------------------------------------------------------------------------------


def _as_list_column(table: Any) -> Any:
    """A pyarrow Table as a one-row large_list<struct> array (the table's rows)."""
    table = table.combine_chunks()
    children = [
        col.chunk(0) if col.num_chunks else pa.array([], type=col.type) for col in table.columns
    ]
    struct = pa.StructArray.from_arrays(children, fields=list(table.schema))
    offsets = pa.array([0, len(struct)], type=pa.int64())
    return pa.LargeListArray.from_arrays(offsets, struct)


def _records_table(rec: Recording) -> Any:
    n = {len(np.asarray(rec.records[c])) for c in RECORD_SCHEMA if c in rec.records}
    missing = [c for c in RECORD_SCHEMA if c not in rec.records]
    if missing or len(n) > 1:
        raise UsageError(f"recording records are malformed (missing {missing}, lengths {n})")
    return pa.table(
        {
            c: pa.array(np.ascontiguousarray(rec.records[c], dtype=dt))
            for c, dt in RECORD_SCHEMA.items()
        }
    )


def _threads_table(threads: list[dict[str, Any]]) -> Any:
    if not threads:
        return pa.table({"tid": pa.array([], pa.int64()), "name": pa.array([], pa.string())})
    return pa.Table.from_pylist(threads)


def save(path: str | os.PathLike[str], recorder: Any = None) -> Path:
    """Write a recording (see :func:`as_recording` for what ``recorder`` may be) and every
    registered provider's table to ``path``, atomically. Returns the path."""
    rec = as_recording(recorder)
    tables: dict[str, Any] = {
        "records": _records_table(rec),
        "strings": pa.table({"string": pa.array(list(rec.strings), pa.string())}),
        "threads": _threads_table(rec.threads),
    }
    with _providers_lock:
        providers = dict(_providers)
    for name, provider in providers.items():
        t = provider()
        if t is None:
            continue
        if not isinstance(t, pa.Table):
            raise UsageError(
                f"table provider {name!r} returned {type(t).__name__}, not a pyarrow.Table or None"
            )
        tables[name] = t
    fields, arrays = [], []
    for name, t in tables.items():
        arr = _as_list_column(t)
        fields.append(pa.field(name, arr.type, nullable=False, metadata=t.schema.metadata))
        arrays.append(arr)
    meta = {**_process_rank(), **rec.meta}
    schema = pa.schema(
        fields,
        metadata={
            META_KEY: json.dumps(meta, default=_json_default).encode(),
            DROPPED_KEY: json.dumps({str(k): int(v) for k, v in rec.dropped.items()}).encode(),
            # last: Arrow writes metadata in reverse, so the marker lands near the file's start
            FORMAT_KEY: f"{FORMAT_NAME}/{FORMAT_VERSION}".encode(),
        },
    )
    out = Path(path)
    tmp = out.with_name(out.name + ".tmp")
    with pa.OSFile(os.fspath(tmp), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        writer.write_batch(pa.record_batch(arrays, schema=schema))
    os.replace(tmp, out)
    return out


def _process_rank() -> dict[str, int]:
    """This process's rank and world size in a torch.distributed job, if it is in one (from
    an initialised default group, else torchrun's RANK/WORLD_SIZE), so that recordings of
    several ranks load as one Trace with the right rank column."""
    dist = sys.modules.get("torch.distributed")  # never import torch just for this
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return {"rank": int(dist.get_rank()), "world_size": int(dist.get_world_size())}
    except (RuntimeError, ValueError):
        pass
    env = {k: os.environ.get(k, "") for k in ("RANK", "WORLD_SIZE")}
    if all(v.isdigit() for v in env.values()):
        return {"rank": int(env["RANK"]), "world_size": int(env["WORLD_SIZE"])}
    return {}


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"{type(o).__name__} in recording meta is not JSON serialisable")


# -- reading ---------------------------------------------------------------------------------

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
        reader = pa.ipc.open_file(pa.memory_map(p, "r"))
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
