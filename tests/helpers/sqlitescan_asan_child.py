"""Child of test_sqlitescan_asan.py: the SQLite scanner built with AddressSanitizer + UBSan,
run on real nsys exports, on generated databases (checked against sqlite3) and on a
deterministic mutation fuzz.

Usage: python sqlitescan_asan_child.py MODULE_DIR WORK_DIR SHARED_DIR MUTATIONS

MODULE_DIR holds the sanitizer build of the scanner as the top-level module ``_sqlitescan``.
Every file reaches the scanner as an exact-size heap copy (a numpy array, one malloc of
len(file) bytes): ASan poisons the bytes around a heap block but not those past an mmap, so
only a heap copy turns an overrun into a report. Prints "ok ..." and exits 0; a sanitizer
report aborts the process.
"""

from __future__ import annotations

import ctypes
import random
import sqlite3
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: run as a script, safe-path
import pytimings.ingest._sqlite as sqlite_ingest
from helpers.sqlite_files import check_table, make_db, varint
from pytimings.ingest._sqlite import SqliteFile, ro_uri


def heap(data: bytes) -> np.ndarray:
    """``data`` in a heap block of exactly its size (ASan redzones right before and after)."""
    out = np.empty(len(data), dtype=np.uint8)
    out[:] = np.frombuffer(data, dtype=np.uint8)
    return out


_asan = ctypes.CDLL(None)  # the preloaded ASan runtime's interface
_asan.__asan_poison_memory_region.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_asan.__asan_unpoison_memory_region.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def scan(scanner: Any, data: Any, page_size: int, usable: int, *args: Any) -> Any:
    """scan_table on a heap copy of ``data`` whose bytes past ``usable`` in each page (the
    reserved bytes) are poisoned too: the scanner reads only the usable part of a page, so
    an overrun at any page's end is reported, not only at the file's end."""
    buf = heap(bytes(data))
    at = buf.ctypes.data
    ends = range(usable, len(buf), page_size) if usable < page_size else range(0)
    for end in ends:
        _asan.__asan_poison_memory_region(at + end, min(page_size - usable, len(buf) - end))
    try:
        return scanner.scan_table(buf, page_size, usable, *args)
    finally:
        _asan.__asan_unpoison_memory_region(at, len(buf))


def check_file(path: Path) -> int:
    with SqliteFile(path) as f:
        names = [t for t in sorted(f._roots) if not t.startswith("sqlite_")]
        tables = [t for t in names if not f._table(t).without_rowid]
    return sum(check_table(path, t) for t in tables)


# --- generated databases ------------------------------------------------------------------


def payload_lengths(usable: int, rng: random.Random, small: bool) -> list[int]:
    """Blob lengths around the local-payload limit and the overflow-page boundaries."""
    x, per = usable - 35, usable - 4
    sizes = set(range(max(0, x - 12), x + 12))
    for k in (1,) if small else (1, 2, 3):
        sizes.update(range(x + k * per - 12, x + k * per + 12))
    sizes.update(rng.randrange(0, 5 * usable) for _ in range(5 if small else 60))
    sizes.update((0, 1) if small else (0, 1, 100_000))
    return sorted(sizes)


def generate(work: Path, page_size: int, reserved: int, nrows: int, rng: random.Random) -> Path:
    """Tables t (every storage class, NULLs, long values on overflow chains, free pages)
    and s (an INTEGER PRIMARY KEY; blobs whose lengths sweep the overflow boundaries)."""
    path = work / f"gen_{page_size}_{reserved}_{nrows}.sqlite"
    db = make_db(path, page_size, reserved)
    usable = page_size - reserved
    db.execute("CREATE TABLE t (a INTEGER, b TEXT, c REAL, d BLOB, e INTEGER)")
    db.execute("CREATE TABLE s (id INTEGER PRIMARY KEY, v BLOB, w TEXT)")
    edges = [0, 1, -1, 127, -128, 32767, -(2**23), 2**31 - 1, 2**47, -(2**63), 2**63 - 1]
    rows = []
    for i in range(nrows):
        long = rng.random() < 0.1
        rows.append(
            (
                rng.choice(edges) if i % 3 else rng.randrange(-(2**63), 2**63),
                None if i % 11 == 0 else "é" * rng.randrange(0, 3 * usable if long else 12),
                None if i % 7 == 0 else rng.uniform(-1e12, 1e12),
                None if i % 5 else rng.randbytes(rng.randrange(0, 4 * usable if long else 20)),
                i,
            )
        )
    db.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", rows)
    db.executemany(
        "INSERT INTO s VALUES (?, ?, ?)",
        [
            (3 * i - 40, rng.randbytes(n), "" if i % 4 else "z" * (n // 3))
            for i, n in enumerate(payload_lengths(usable, rng, small=nrows < 200))
        ],
    )
    db.execute("DELETE FROM t WHERE e % 9 = 0")  # free pages, partly empty leaves
    db.commit()
    db.close()
    return path


# --- mutation fuzz ------------------------------------------------------------------------


class Layout:
    """Where the structures of a (sound) table b-tree lie in a file, to aim mutations at."""

    def __init__(self, data: bytes, page_size: int, usable: int, root: int) -> None:
        self.headers: list[int] = []  # page header bytes
        self.cellptrs: list[int] = []  # 2-byte cell pointers
        self.cells: list[int] = []  # cell starts: payload size, rowid, record header varints
        self.pointers: list[int] = []  # 4-byte child, first-overflow and next-overflow pointers
        self.leaves: list[int] = []
        self.overflow: list[int] = []  # overflow page numbers
        self.tree: list[int] = []
        self.counts: list[tuple[int, int]] = []  # cell count fields, most cells that fit
        self.last: list[int] = []  # cell pointer of each page's last cell (ends at usable)
        self.sizes: list[tuple[int, int, int]] = []  # leaf cells: at, payload size, its bytes
        x, per = usable - 35, usable - 4
        m = (usable - 12) * 32 // 255 - 23
        todo = [root]
        while todo:
            pgno = todo.pop()
            self.tree.append(pgno)
            base = (pgno - 1) * page_size
            h = base + (100 if pgno == 1 else 0)
            kind, ncells = data[h], int.from_bytes(data[h + 3 : h + 5], "big")
            hlen = 12 if kind == 0x05 else 8
            self.headers.extend(range(h, h + hlen))
            self.counts.append((h + 3, (base + usable - h - hlen) // 2))
            ptrs = [h + hlen + 2 * c for c in range(ncells)]
            if ptrs:
                self.last.append(max(ptrs, key=lambda q: int.from_bytes(data[q : q + 2], "big")))
            if kind == 0x05:
                self.pointers.append(h + 8)
                todo.append(int.from_bytes(data[h + 8 : h + 12], "big"))
            else:
                self.leaves.append(pgno)
            for c in range(ncells):
                cp = h + hlen + 2 * c
                self.cellptrs.append(cp)
                cell = base + int.from_bytes(data[cp : cp + 2], "big")
                self.cells.append(cell)
                if kind == 0x05:
                    self.pointers.append(cell)
                    todo.append(int.from_bytes(data[cell : cell + 4], "big"))
                    continue
                plen, p = varint(data, cell)
                self.sizes.append((cell, plen, p - cell))
                _, p = varint(data, p)
                if plen <= x:
                    continue
                k = m + (plen - m) % per
                p += k if k <= x else m
                while True:
                    self.pointers.append(p)
                    ovf = int.from_bytes(data[p : p + 4], "big")
                    if not ovf:
                        break
                    self.overflow.append(ovf)
                    p = (ovf - 1) * page_size


def consistent(out: list[tuple[Any, Any, Any]], kinds: str) -> None:
    n = len(out[0][0]) - (kinds[0] == "b")
    for kind, (values, data, mask) in zip(kinds, out, strict=True):
        assert len(values) == (n + 1 if kind == "b" else n)
        assert mask is None or len(mask) == n
        if kind == "b":
            assert data is not None and values[0] == 0 and values[-1] == len(data)
            assert (np.diff(values) >= 0).all()
        else:
            assert data is None


def fuzz(
    scanner: Any, path: Path, table: str, kinds: str, n: int, rng: random.Random
) -> dict[str, int]:
    """n scans of mutated copies of ``table``: each must give consistent columns or raise
    ValueError (a sanitizer report aborts the process); returns how many did which."""
    data = path.read_bytes()
    page_size = int.from_bytes(data[16:18], "big")
    usable = page_size - data[20]
    db = sqlite3.connect(ro_uri(str(path)), uri=True)
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    db.close()
    lay = Layout(data, page_size, usable, root)
    npages = len(data) // page_size
    cols = list(range(len(kinds)))
    kb = kinds.encode()
    base = scan(scanner, data, page_size, usable, root, cols, kb, -1)
    consistent(base, kinds)
    specials = (0, 1, 2, 5, 8, 10, 12, 13, 0x7F, 0x80, 0x81, 0xFE, 0xFF)
    outcomes = {"rows": 0, "ValueError": 0}
    for _ in range(n):
        buf = bytearray(data)
        use, start, cut = usable, root, len(buf)
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            what = rng.randrange(12)
            if what == 0:  # a byte of a page header
                buf[rng.choice(lay.headers)] = rng.choice((*specials, rng.randrange(256)))
            elif what == 1:  # a cell pointer
                p = rng.choice(lay.cellptrs)
                old = int.from_bytes(buf[p : p + 2], "big")
                near = (usable - 4, usable - 1, usable, page_size - 1, 0xFFFF)
                v = rng.choice((0, 1, 8, 99, 107, *near, old + rng.randrange(-12, 13)))
                buf[p : p + 2] = (v % 65536).to_bytes(2, "big")
            elif what in (2, 3):  # bytes of a cell: payload size, rowid, record header
                p = min(rng.choice(lay.cells) + rng.randrange(12), len(buf) - 9)
                if rng.random() < 0.2:  # a run of continuation bytes: a 9-byte varint
                    buf[p : p + 9] = bytes([rng.choice((0x80, 0xFF))] * 8 + [rng.randrange(256)])
                else:
                    buf[p] = rng.choice((*specials, rng.randrange(256)))
            elif what in (4, 5):  # a child or overflow pointer
                p = rng.choice(lay.pointers)
                pages = lay.overflow + lay.leaves + lay.tree
                own = p // page_size + 1  # a page pointing at itself
                v = rng.choice((0, 1, root, npages, npages + 1, 2**31, 2**32 - 1, own))
                v = rng.choice((v, rng.choice(pages), rng.randrange(1, npages + 1)))
                buf[p : p + 4] = v.to_bytes(4, "big")
            elif what == 6:  # any byte of the file
                buf[rng.randrange(100, len(buf))] = rng.randrange(256)
            elif what == 7:  # truncation, often near a page boundary
                cut = rng.randrange(len(buf))
                if rng.random() < 0.5:
                    cut = max(cut // page_size * page_size + rng.randrange(-8, 9), 0)
            elif what == 8:  # a wrong root page
                start = rng.choice((-1, 0, 1, npages, npages + 1, rng.randrange(1, npages + 1)))
                start = rng.choice((start, rng.choice(lay.overflow or [2]), rng.choice(lay.leaves)))
            elif what == 9:  # a wrong usable size (reserved bytes)
                use = rng.randrange(480, page_size + 1)
            elif what == 10:  # a cell count at or just past the most that fit
                p, most = rng.choice(lay.counts)
                v = rng.choice([0, 0xFFFF, most + rng.randrange(-2, 3)])
                buf[p : p + 2] = (v % 65536).to_bytes(2, "big")
            elif rng.random() < 0.3:  # a page's last cell moved by a few bytes
                p = rng.choice(lay.last)
                v = int.from_bytes(buf[p : p + 2], "big") + rng.randrange(-8, 9)
                buf[p : p + 2] = (v % 65536).to_bytes(2, "big")
            else:  # a payload size a little off: the local part or overflow pointer shifts
                p, plen, nb = rng.choice(lay.sizes)
                v = max(plen + rng.randrange(-8, 9), 0)
                if v < 1 << (7 * nb):  # same length, so the cell's other bytes stay put
                    buf[p : p + nb] = bytes(
                        [0x80 | (v >> 7 * (nb - 1 - i)) & 0x7F for i in range(nb - 1)] + [v & 0x7F]
                    )
        del buf[cut:]  # last: the other mutations aim at offsets of the whole file
        try:
            out = scan(scanner, buf, page_size, use, start, cols, kb, -1)
        except ValueError:
            outcomes["ValueError"] += 1
            continue
        consistent(out, kinds)
        outcomes["rows"] += 1
    return outcomes


def main() -> None:
    module_dir, work, shared, mutations = sys.argv[1:5]
    sys.path.insert(0, module_dir)
    import _sqlitescan as scanner  # the sanitizer build, not pytimings._native._sqlitescan

    assert Path(scanner.__file__).parent == Path(module_dir), scanner.__file__
    sqlite_ingest.scan_table = lambda *args: scan(scanner, *args)
    rng = random.Random(20240607)
    rows = 0
    exports = sorted(Path(shared).glob("data/**/*.sqlite"), key=lambda p: p.stat().st_size)[:3]
    for path in exports:
        rows += check_file(path)
    geometry = ((512, 0), (512, 32), (4096, 16))  # reserved bytes: poisoned page ends
    generated = [generate(Path(work), ps, r, 1200, rng) for ps, r in geometry]
    for path in generated:
        rows += check_file(path)
    total: dict[str, int] = {}
    small = [generate(Path(work), ps, r, 150, rng) for ps, r in geometry[1:]]  # quick copies
    bases = ((small[0], "t", "ibfbi"), (small[0], "s", "ibb"), (small[1], "t", "ibfbi"))
    for path, table, kinds in bases:
        for k, v in fuzz(scanner, path, table, kinds, int(mutations), rng).items():
            total[k] = total.get(k, 0) + v
    print(f"ok {len(exports)} exports, {rows} rows checked, mutations: {total}")


if __name__ == "__main__":
    main()
