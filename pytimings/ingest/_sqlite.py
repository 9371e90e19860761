"""Whole columns of SQLite rowid tables, read from the file's b-trees (no sqlite3_step).

``SqliteFile`` validates the 100-byte header, maps the file read-only, learns the schema
through the stdlib ``sqlite3`` module (table root pages, column order, INTEGER PRIMARY KEY
aliases, defaults) and hands table b-trees to the native scanner
(:func:`pytimings._native._sqlitescan.scan_table`), which decodes the records straight into
numpy arrays. Row order is the b-tree's key order, the order ``SELECT ... FROM t`` returns a
rowid table's rows in when no index is used (rowid order).

WAL: a database in WAL mode (header bytes 18/19 == 2) whose ``-wal`` file is not empty may
have committed pages only in the WAL, so the main file alone can be stale. Such a file is
first copied consistently by SQLite itself (``VACUUM INTO`` a temporary file, removed on
close) and the copy is scanned.

A file changed while it is read: the scanner turns a truncation under its mmap (SIGBUS)
into ValueError, and :meth:`SqliteFile.check_unchanged` (after every table read, and for
the caller once it has read all it needs) refuses a file whose size, modification or
status-change time moved since it was opened.
"""

from __future__ import annotations

import mmap
import os
import re
import sqlite3
import tempfile
import urllib.parse
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from pytimings._native._sqlitescan import MASK_ABSENT, MASK_NULL, scan_table
from pytimings.ingest.detect import SQLITE_MAGIC

__all__ = ["Column", "SqliteFile", "connect_ro", "ro_uri"]

_KINDS = ("i", "f", "b")
_INT_LITERAL = re.compile(r"\(*\s*([+-]?\d+)\s*\)*")
_INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True, slots=True)
class Column:
    """One column of ``n`` rows. ``values``: int64 (kind 'i') or float64 ('f') values, 0
    where NULL; for 'b' (text/blob) the int64 offsets (n + 1) of row i's bytes
    ``data[values[i]:values[i + 1]]``. ``mask``: True where NULL, or None when no row is."""

    values: npt.NDArray[Any]
    mask: npt.NDArray[np.bool_] | None
    data: bytes | None = None


@dataclass(frozen=True, slots=True)
class _Table:
    root: int
    columns: list[str]
    rowid_alias: int  # index of the INTEGER PRIMARY KEY column, or -1
    defaults: list[str | None]  # each column's DEFAULT as SQL text (None: no default)
    without_rowid: bool


class SqliteFile:
    """A read-only SQLite file whose rowid tables are read column-wise.

    Raises ValueError when the file is not an SQLite database this reader handles (bad
    header, a text encoding other than UTF-8) and OSError when it cannot be opened."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._tables: dict[str, _Table] = {}
        self._mm: mmap.mmap | None = None
        self._fh: BinaryIO | None = None
        self._db: sqlite3.Connection | None = None
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    def _open(self) -> None:
        head = _read_header(self.path)
        scan_path = self.path
        wal = self.path + "-wal"
        if head[18] == 2 and head[19] == 2 and os.path.exists(wal) and os.path.getsize(wal):
            scan_path = self._consistent_copy()
            head = _read_header(scan_path)
        self.page_size, self.usable_size = _geometry(head, scan_path)
        self._db = connect_ro(scan_path)
        self._fh = open(scan_path, "rb")
        st = os.fstat(self._fh.fileno())
        self._identity = _identity(st)
        self._mm = mmap.mmap(self._fh.fileno(), st.st_size, access=mmap.ACCESS_READ)
        rows = self._db.execute(
            "SELECT name, rootpage FROM sqlite_master WHERE type = 'table'"
        ).fetchall()
        self._roots = {str(name): int(root or 0) for name, root in rows}

    def _consistent_copy(self) -> str:
        self._tmp = tempfile.TemporaryDirectory(prefix="pytimings-sqlite-")
        dst = os.path.join(self._tmp.name, "copy.sqlite")
        src = connect_ro(self.path)
        try:
            src.execute("VACUUM INTO ?", (dst,))
        finally:
            src.close()
        return dst

    def __enter__(self) -> SqliteFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def has(self, table: str) -> bool:
        return table in self._roots

    def check_unchanged(self) -> None:
        """ValueError when the file was written, truncated or extended since it was opened
        (what was read from it may mix two versions)."""
        assert self._fh is not None
        if _identity(os.fstat(self._fh.fileno())) != self._identity:
            raise ValueError("the file changed while it was read")

    def columns(self, table: str) -> list[str]:
        """The table's column names in declaration order."""
        return list(self._table(table).columns)

    def read(self, table: str, columns: dict[str, str]) -> dict[str, Column]:
        """Read whole columns of a rowid table: name -> kind, 'i' int64, 'f' float64 (an
        integer stored in the column is converted), 'b' text/blob bytes. Raises ValueError
        for a corrupt table, a value of another type, an unknown table or column, or a
        WITHOUT ROWID table."""
        t = self._table(table)
        if t.without_rowid:
            raise ValueError(f"{table}: WITHOUT ROWID tables are not supported")
        index = []
        for name, kind in columns.items():
            if kind not in _KINDS:
                raise ValueError(f"{table}.{name}: unknown kind {kind!r} (one of i, f, b)")
            if name not in t.columns:
                raise ValueError(f"{table}: no column {name!r}")
            index.append(t.columns.index(name))
        assert self._mm is not None
        kinds = "".join(columns.values()).encode()
        try:
            raw = scan_table(
                self._mm, self.page_size, self.usable_size, t.root, index, kinds, t.rowid_alias
            )
        except ValueError as exc:
            raise ValueError(f"{table}: {exc}") from None
        self.check_unchanged()
        out = {}
        for (name, kind), i, (values, data, mask) in zip(columns.items(), index, raw, strict=True):
            nulls = None
            if mask is not None:
                nulls = self._fill_defaults(table, name, kind, t.defaults[i], values, mask)
            out[name] = Column(values, nulls, data)
        return out

    @staticmethod
    def _fill_defaults(
        table: str,
        name: str,
        kind: str,
        default: str | None,
        values: npt.NDArray[Any],
        mask: npt.NDArray[np.uint8],
    ) -> npt.NDArray[np.bool_] | None:
        """Rows whose record ends before the column take the column's DEFAULT: NULL, or an
        integer literal in a numeric column; anything else is refused."""
        absent = mask == MASK_ABSENT
        if absent.any():
            lit = None if default is None else _INT_LITERAL.fullmatch(default.strip())
            if default is None or default.strip().upper() == "NULL":
                mask[absent] = MASK_NULL
            elif lit is not None and kind in "if":
                value = int(lit.group(1))
                if not _INT64[0] <= value <= _INT64[1]:
                    raise ValueError(f"{table}.{name}: DEFAULT {default} out of int64 range")
                values[absent] = value
                mask[absent] = 0
            else:
                raise ValueError(
                    f"{table}.{name}: rows without the column need its DEFAULT {default},"
                    " which is not an integer literal"
                )
        bools = mask.view(np.bool_)
        return bools if bools.any() else None

    def _table(self, table: str) -> _Table:
        t = self._tables.get(table)
        if t is not None:
            return t
        if table not in self._roots:
            raise ValueError(f"no table {table!r}")
        assert self._db is not None
        quoted = '"' + table.replace('"', '""') + '"'
        info = self._db.execute(f"PRAGMA table_info({quoted})").fetchall()
        names = [str(r[1]) for r in info]
        listed = self._db.execute(
            "SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = ?", (table,)
        )
        without_rowid = bool((listed.fetchone() or (0,))[0])
        t = _Table(
            root=self._roots[table],
            columns=names,
            rowid_alias=-1 if without_rowid else self._rowid_alias(quoted, info),
            defaults=[None if r[4] is None else str(r[4]) for r in info],
            without_rowid=without_rowid,
        )
        self._tables[table] = t
        return t

    def _rowid_alias(self, quoted: str, info: list[Any]) -> int:
        """Index of the column that is the rowid (INTEGER PRIMARY KEY), or -1. The declared
        type and a one-column key make a candidate; SQLite's own plan for reading it settles
        the rest (``INTEGER PRIMARY KEY DESC`` in a column definition is not an alias)."""
        pk = [i for i, r in enumerate(info) if r[5]]
        if len(pk) != 1 or str(info[pk[0]][2]).upper() != "INTEGER":
            return -1
        assert self._db is not None
        col = '"' + str(info[pk[0]][1]).replace('"', '""') + '"'
        ops = {r[1] for r in self._db.execute(f"EXPLAIN SELECT {col} FROM {quoted} NOT INDEXED")}
        return pk[0] if "Rowid" in ops and "Column" not in ops else -1


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def ro_uri(path: str) -> str:
    """A read-only sqlite3 URI for ``path``."""
    return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"


def connect_ro(path: str) -> sqlite3.Connection:
    """A read-only sqlite3 connection that reads pages with read(), never through an mmap
    (a build with memory-mapped I/O on would fault with SIGBUS on a file truncated under it)."""
    db = sqlite3.connect(ro_uri(path), uri=True)
    db.execute("PRAGMA mmap_size = 0")
    return db


def _read_header(path: str) -> bytes:
    with open(path, "rb") as f:
        head = f.read(100)
    if len(head) < 100 or head[:16] != SQLITE_MAGIC:
        raise ValueError("not an SQLite database (no 'SQLite format 3' header)")
    return head


def _geometry(head: bytes, path: str) -> tuple[int, int]:
    """Page size and usable size from the header, checked."""
    page_size = int.from_bytes(head[16:18], "big")
    if page_size == 1:
        page_size = 65536
    if page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
        raise ValueError(f"bad page size {page_size} in the header")
    usable = page_size - head[20]
    if usable < 480:
        raise ValueError(f"usable page size {usable} below 480")
    encoding = int.from_bytes(head[56:60], "big")
    if encoding != 1:
        names = {2: "UTF-16le", 3: "UTF-16be"}
        raise ValueError(
            f"text encoding {names.get(encoding, encoding)}: only UTF-8 databases are read"
        )
    if os.path.getsize(path) < page_size:
        raise ValueError("file shorter than one page")
    return page_size, usable
