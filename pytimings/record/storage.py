"""Recordings on disk: ``save`` writes the ``pytimings.recording/1`` format (read back by
:mod:`pytimings.ingest.recording_file`).

The file is one Arrow IPC file (format described in docs/recording-format.md) with a single
row; each column is one named table stored as a list of structs, so any Arrow reader sees
every table with its full types, and reading memory-maps the file without copying columns.
Besides the records it writes :data:`BUILTIN_TABLES` (request timelines, memory samples);
users add their own tables to the same file with :func:`register_table_provider`;
:func:`~pytimings.ingest.recording_file.load_tables` returns every table in a file.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc

from pytimings.errors import UsageError
from pytimings.fileout import writing
from pytimings.ingest.recording_file import load_recording
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
from pytimings.record import memory, requests, telemetry

TableProvider = Callable[[], Any]  # () -> pyarrow.Table | None
# what every save() writes besides records/strings/threads (a table that is None is left out)
BUILTIN_TABLES: dict[str, TableProvider] = {
    "requests": requests.default_requests_table,
    "memory": memory.default_memory_table,  # pytimings.sample_memory()
    "telemetry": telemetry.default_telemetry_table,  # pytimings.sample_telemetry()
}
# tables users add with register_table_provider (they may replace a built-in one)
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
        from pytimings.record.recorder import default_recorder

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


def _used_strings(rec: Recording) -> tuple[Any, list[str]]:
    """The records table with its name and kind ids renumbered to the strings it uses, and
    those strings: the process-wide table holds every name ever interned (1M names under a
    1,000-record cap used to write 16.6 MB of names no record had)."""
    table = _records_table(rec)
    if table.num_rows == 0:
        return table, []
    name = np.asarray(table.column("name"))
    kind = np.asarray(table.column("kind"))
    used = np.union1d(name, kind)
    if int(used[-1]) >= len(rec.strings):
        raise UsageError(f"recording records name string {int(used[-1])} of {len(rec.strings)}")
    table = table.set_column(
        table.schema.get_field_index("name"),
        "name",
        pa.array(np.searchsorted(used, name).astype(RECORD_SCHEMA["name"])),
    )
    table = table.set_column(
        table.schema.get_field_index("kind"),
        "kind",
        pa.array(np.searchsorted(used, kind).astype(RECORD_SCHEMA["kind"])),
    )
    return table, [rec.strings[i] for i in used.tolist()]


def _threads_table(threads: list[dict[str, Any]]) -> Any:
    if not threads:
        return pa.table({"tid": pa.array([], pa.int64()), "name": pa.array([], pa.string())})
    return pa.Table.from_pylist(threads)


def save(path: str | os.PathLike[str], recorder: Any = None) -> Path:
    """Write a recording (see :func:`as_recording` for what ``recorder`` may be) and every
    registered provider's table to ``path``, atomically. Returns the path."""
    rec = as_recording(recorder)
    records, strings = _used_strings(rec)
    tables: dict[str, Any] = {
        "records": records,
        "strings": pa.table({"string": pa.array(strings, pa.string())}),
        "threads": _threads_table(rec.threads),
    }
    with _providers_lock:
        providers = {**BUILTIN_TABLES, **_providers}
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
    meta = {**process_rank(), **rec.meta}
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
    with writing(out) as sink, pa.ipc.new_file(sink, schema) as writer:
        writer.write_batch(pa.record_batch(arrays, schema=schema))
    return out


def process_rank() -> dict[str, int]:
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
