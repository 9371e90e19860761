"""Small SQLite databases for the scanner tests (test_sqlitescan.py and its ASan child), and
the check of the scanner against sqlite3 that both run."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pytimings.ingest._sqlite import Column, SqliteFile, ro_uri


def make_db(path: Path, page_size: int, reserved: int = 0, wal: bool = False) -> sqlite3.Connection:
    """An empty database with this page size; ``reserved`` bytes at the end of each page are
    set by editing the one-page file's header (Python's sqlite3 cannot set them)."""
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA page_size = {page_size}")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    if reserved:
        db.close()
        head = bytearray(path.read_bytes())
        head[20] = reserved
        head[105:107] = ((page_size - reserved) % 65536).to_bytes(2, "big")
        path.write_bytes(bytes(head))
        db = sqlite3.connect(path)
    if wal:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA wal_autocheckpoint = 0")
    return db


def varint(b: bytes, p: int) -> tuple[int, int]:
    """The SQLite varint at b[p]: its value and the offset after it (fileformat2 1.6)."""
    v = 0
    for i in range(8):
        v = (v << 7) | (b[p + i] & 0x7F)
        if b[p + i] < 0x80:
            return v, p + i + 1
    return (v << 8) | b[p + 8], p + 9


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def kind_of(values: list[Any]) -> str | None:
    """The kind a column of these values reads as; None when it mixes numbers and bytes."""
    types = {type(v) for v in values if v is not None}
    if types <= {int}:
        return "i"
    if types <= {int, float}:
        return "f"
    if types <= {bytes}:
        return "b"
    return None


def assert_column(col: Column, kind: str, want: list[Any], where: str) -> None:
    """The scanner's column equals sqlite3's values ``want`` (NULL -> 0 / empty bytes)."""
    nulls = np.array([v is None for v in want], dtype=bool)
    if nulls.any():
        assert col.mask is not None, where
        np.testing.assert_array_equal(col.mask, nulls, err_msg=where)
    else:
        assert col.mask is None, where
    if kind == "b":
        assert col.data is not None and len(col.values) == len(want) + 1, where
        got = [col.data[a:b] for a, b in zip(col.values[:-1], col.values[1:], strict=True)]
        assert got == [b"" if v is None else v for v in want], where
        return
    assert col.data is None and len(col.values) == len(want), where
    dtype = np.int64 if kind == "i" else np.float64
    expect = np.array([0 if v is None else v for v in want], dtype=dtype)
    assert col.values.dtype == dtype, where
    np.testing.assert_array_equal(col.values, expect, err_msg=where)


def check_table(
    path: Path, table: str, on_mixed: Callable[[SqliteFile, str, str], None] | None = None
) -> int:
    """Every column of ``table`` read by SqliteFile equals sqlite3's ``SELECT ... ORDER BY
    rowid``; returns the row count. A column mixing numbers and bytes is not compared but
    handed to ``on_mixed`` (the file, the table and the column name)."""
    ref = sqlite3.connect(ro_uri(str(path)), uri=True)
    ref.text_factory = bytes
    try:
        with SqliteFile(path) as f:
            names = f.columns(table)
            rows = ref.execute(
                f"SELECT {', '.join(map(quote, names))} FROM {quote(table)} ORDER BY rowid"
            ).fetchall()
            kinds = {}
            for i, name in enumerate(names):
                kind = kind_of([r[i] for r in rows])
                if kind is not None:
                    kinds[name] = kind
                elif on_mixed is not None:
                    on_mixed(f, table, name)
            got = f.read(table, kinds)
            for i, name in enumerate(names):
                if name in kinds:
                    want = [r[i] for r in rows]
                    assert_column(got[name], kinds[name], want, f"{path.name} {table}.{name}")
    finally:
        ref.close()
    return len(rows)
