"""Small SQLite databases for the scanner tests (test_sqlitescan.py and its ASan child)."""

from __future__ import annotations

import sqlite3
from pathlib import Path


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
