"""The b-tree scanner (pytimings._native._sqlitescan via pytimings.ingest._sqlite) against
its twin, the stdlib sqlite3 module: every column must equal ``SELECT ... ORDER BY rowid``."""

from __future__ import annotations

import mmap
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.sqlite_files import check_table, make_db, varint
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pytimings._native._sqlitescan import MASK_NULL, scan_table
from pytimings.ingest._sqlite import SqliteFile

NSYS_TABLES = (
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "NVTX_EVENTS",
    "StringIds",
)
INT_EDGES = [0, 1, -1, 127, 128, -128, 255, 32767, -32768, 2**23 - 1, -(2**23), 2**31 - 1]
INT_EDGES += [-(2**31), 2**47 - 1, -(2**47), 2**48, 2**63 - 1, -(2**63)]


def _refuses_mixed(f: SqliteFile, table: str, name: str) -> None:
    with pytest.raises(ValueError, match=r"column \d+, rowid"):
        f.read(table, {name: "i"})


def _check(path: Path, table: str) -> int:
    """check_table, and a column mixing numbers and bytes must fail as an integer column."""
    return check_table(path, table, _refuses_mixed)


# --- generated tables ---------------------------------------------------------------------

_ints = st.one_of(st.sampled_from(INT_EDGES), st.integers(-(2**63), 2**63 - 1))
_floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=True),
    st.integers(-(2**53), 2**53).map(float),  # stored with integer serial types
)
_sizes = st.one_of(st.integers(0, 40), st.integers(0, 3000), st.integers(0, 200_000))
_texts = st.one_of(st.text(max_size=30), _sizes.map(lambda n: "é" * (n // 2)))
_blobs = st.one_of(st.binary(max_size=30), _sizes.map(lambda n: bytes(range(256)) * (n // 256)))
_COLUMN_TYPES = {
    "INTEGER": _ints,
    "REAL": _floats,
    "TEXT": _texts,
    "BLOB": _blobs,
}


@st.composite
def _tables(draw: st.DrawFn) -> tuple[list[str], list[list[Any]]]:
    types = draw(st.lists(st.sampled_from(sorted(_COLUMN_TYPES)), min_size=1, max_size=10))
    small = draw(st.booleans())  # many short rows (deep trees) or fewer, wider ones
    n = draw(st.integers(0, 40) | st.integers(300, 2500)) if small else draw(st.integers(0, 40))
    rows = []
    for _ in range(n):
        row = []
        for t in types:
            null = draw(st.integers(0, 9)) == 0
            if null:
                row.append(None)
            elif small and t in ("TEXT", "BLOB"):
                row.append(
                    draw(st.text(max_size=8)) if t == "TEXT" else draw(st.binary(max_size=8))
                )
            else:
                row.append(draw(_COLUMN_TYPES[t]))
        rows.append(row)
    return types, rows


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
@given(
    spec=_tables(),
    page_size=st.sampled_from([512, 1024, 4096, 65536]),
    reserved=st.sampled_from([0, 0, 8, 32]),
    delete_every=st.sampled_from([0, 2, 3, 7]),
    alias=st.booleans(),
)
def test_generated_tables_match_sqlite3(
    tmp_path_factory: pytest.TempPathFactory,
    spec: tuple[list[str], list[list[Any]]],
    page_size: int,
    reserved: int,
    delete_every: int,
    alias: bool,
) -> None:
    types, rows = spec
    path = tmp_path_factory.mktemp("gen") / "t.sqlite"
    db = make_db(path, page_size, reserved)
    cols = [f"c{i} {t}" for i, t in enumerate(types)]
    if alias:
        cols.insert(0, "id INTEGER PRIMARY KEY")
    db.execute(f"CREATE TABLE t ({', '.join(cols)})")
    marks = ", ".join("?" * len(types))
    if alias:
        db.executemany(
            f"INSERT INTO t VALUES (?, {marks})", [(3 * i - 50, *r) for i, r in enumerate(rows)]
        )
    else:
        db.executemany(f"INSERT INTO t VALUES ({marks})", rows)
    if delete_every:
        db.execute(f"DELETE FROM t WHERE rowid % {delete_every} = 0")  # leaves free pages
    db.commit()
    db.close()
    pages = path.stat().st_size // page_size
    longest = max((len(v) for r in rows for v in r if isinstance(v, (str, bytes))), default=0)
    event(
        f"{'>' if pages > 20 else '<='}20 pages; {'overflow' if longest > page_size else 'local'}"
    )
    with SqliteFile(path) as f:
        assert f.usable_size == page_size - reserved
        assert f._table("t").rowid_alias == (0 if alias else -1)
    _check(path, "t")


def test_multi_level_tree_and_overflow_chains(tmp_path: Path) -> None:
    path = tmp_path / "deep.sqlite"
    db = make_db(path, 512)
    db.execute("CREATE TABLE t (a INTEGER, b TEXT, c REAL, d BLOB)")
    rng = np.random.default_rng(7)
    rows = [
        (int(rng.integers(-(2**62), 2**62)), "k" * int(rng.integers(0, 900)), i / 3, None)
        for i in range(20_000)
    ]
    rows += [(1, "x" * 200_000, 2.0, b"\x00" * 100_000)]
    db.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)
    db.commit()
    db.close()
    assert _check(path, "t") == len(rows)


def test_integer_primary_key_alias_and_desc_non_alias(tmp_path: Path) -> None:
    path = tmp_path / "pk.sqlite"
    db = make_db(path, 1024)
    db.execute("CREATE TABLE a (id INTEGER PRIMARY KEY, v INTEGER)")
    db.execute("CREATE TABLE d (id INTEGER PRIMARY KEY DESC, v INTEGER)")
    db.execute("CREATE TABLE k (x TEXT, id INTEGER, PRIMARY KEY (id DESC))")
    for t in ("a", "d"):
        db.executemany(f"INSERT INTO {t} VALUES (?, ?)", [(i * 7 - 1000, i) for i in range(500)])
    db.executemany("INSERT INTO k VALUES (?, ?)", [("s", i * 5) for i in range(300)])
    db.commit()
    db.close()
    with SqliteFile(path) as f:
        assert f._table("a").rowid_alias == 0
        assert f._table("d").rowid_alias == -1  # the documented DESC quirk
        assert f._table("k").rowid_alias == 1
        with pytest.raises(ValueError, match="INTEGER PRIMARY KEY"):
            f.read("a", {"id": "f"})
    for t in ("a", "d", "k"):
        _check(path, t)


def test_added_columns_take_their_default(tmp_path: Path) -> None:
    path = tmp_path / "alter.sqlite"
    db = make_db(path, 4096)
    db.execute("CREATE TABLE t (a INTEGER)")
    db.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(1000)])
    db.execute("ALTER TABLE t ADD COLUMN b INTEGER DEFAULT 7")
    db.execute("ALTER TABLE t ADD COLUMN c INTEGER")
    db.execute("ALTER TABLE t ADD COLUMN d TEXT DEFAULT 'x'")
    db.execute("ALTER TABLE t ADD COLUMN e REAL DEFAULT -3")
    db.execute("ALTER TABLE t ADD COLUMN g TEXT")
    db.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)", [(1, None, 2, "y", 1.5, "z")] * 10)
    db.commit()
    db.close()
    with SqliteFile(path) as f:
        got = f.read("t", {"b": "i", "c": "i", "e": "f", "g": "b"})
        with pytest.raises(ValueError, match="DEFAULT 'x'"):
            f.read("t", {"d": "b"})
    b, c, e, g = got["b"], got["c"], got["e"], got["g"]
    assert b.values[:1000].tolist() == [7] * 1000 and b.mask is not None
    assert b.mask.tolist() == [False] * 1000 + [True] * 10
    assert c.mask is not None and c.mask.tolist() == [True] * 1000 + [False] * 10
    assert e.values.tolist() == [-3.0] * 1000 + [1.5] * 10 and e.mask is None
    assert g.mask is not None and g.data == b"z" * 10
    assert g.values.tolist() == [0] * 1001 + list(range(1, 11))


def test_wal_file_not_yet_checkpointed(tmp_path: Path) -> None:
    path = tmp_path / "wal.sqlite"
    db = make_db(path, 4096, wal=True)
    db.execute("CREATE TABLE t (a INTEGER, b TEXT)")
    db.executemany("INSERT INTO t VALUES (?, ?)", [(i, str(i) * 50) for i in range(3000)])
    db.commit()
    try:  # the writer stays open, so nothing is checkpointed into the main file
        wal = Path(str(path) + "-wal")
        assert wal.stat().st_size > 0
        assert _check(path, "t") == 3000
    finally:
        db.close()


def test_without_rowid_tables_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "wr.sqlite"
    db = make_db(path, 4096)
    db.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER) WITHOUT ROWID")
    db.execute("INSERT INTO t VALUES ('a', 1)")
    db.commit()
    db.close()
    with SqliteFile(path) as f, pytest.raises(ValueError, match="WITHOUT ROWID"):
        f.read("t", {"v": "i"})


def test_utf16_databases_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "u16.sqlite"
    db = sqlite3.connect(path)
    db.execute("PRAGMA encoding = 'UTF-16le'")
    db.execute("CREATE TABLE t (a TEXT)")
    db.commit()
    db.close()
    with pytest.raises(ValueError, match=r"UTF-16le.*only UTF-8"):
        SqliteFile(path)


def test_wrong_types_and_bad_requests(tmp_path: Path) -> None:
    path = tmp_path / "ty.sqlite"
    db = make_db(path, 4096)
    db.execute("CREATE TABLE t (a INTEGER, b, c REAL)")  # b: no affinity, 3 stays a number
    db.executemany("INSERT INTO t VALUES (?, ?, ?)", [(1, "s", 1.5), ("x", 3, 2.5)])
    db.commit()
    db.close()
    with SqliteFile(path) as f:
        with pytest.raises(ValueError, match=r"^t: column 0, rowid 2: TEXT value in an integer"):
            f.read("t", {"a": "i"})
        with pytest.raises(ValueError, match=r"column 1, rowid 2: INTEGER value in a text"):
            f.read("t", {"b": "b"})
        with pytest.raises(ValueError, match=r"column 2, rowid 1: REAL value in an integer"):
            f.read("t", {"c": "i"})
        with pytest.raises(ValueError, match="no column 'z'"):
            f.read("t", {"z": "i"})
        with pytest.raises(ValueError, match="unknown kind"):
            f.read("t", {"a": "s"})
        with pytest.raises(ValueError, match="no table"):
            f.read("nope", {"a": "i"})
        assert f.has("t") and not f.has("nope") and f.columns("t") == ["a", "b", "c"]
    (tmp_path / "x").write_bytes(b"hello")
    with pytest.raises(ValueError, match="not an SQLite database"):
        SqliteFile(tmp_path / "x")


# --- corrupt files ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, int, int]:
    """A multi-page file (512-byte pages, interior pages, overflow chains) and its table's root."""
    path = tmp_path_factory.mktemp("fuzz") / "small.sqlite"
    db = make_db(path, 512)
    db.execute("CREATE TABLE t (a INTEGER, b TEXT, c REAL, d INTEGER)")
    db.executemany(
        "INSERT INTO t VALUES (?, ?, ?, ?)",
        [(i * 1_000_003, "n" * (i % 7 * 300), i * 0.5, None if i % 5 else i) for i in range(150)],
    )
    db.commit()
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0]
    db.close()
    return path.read_bytes(), 512, root


def _scan_all(buf: Any, page_size: int, root: int) -> None:
    try:
        out = scan_table(buf, page_size, page_size, root, [0, 1, 2, 3], b"ibfi", -1)
    except ValueError:
        return
    n = len(out[0][0])
    for kind, (values, data, mask) in zip("ibfi", out, strict=True):
        assert len(values) == (n + 1 if kind == "b" else n)
        assert mask is None or len(mask) == n
        if kind == "b":
            assert data is not None and values[-1] == len(data)
            assert (np.diff(values) >= 0).all()


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    edits=st.lists(
        st.tuples(
            st.integers(0, 2**31),
            st.one_of(st.sampled_from([0, 1, 2, 5, 10, 13, 0x7F, 0x80, 0xFF]), st.integers(0, 255)),
        ),
        max_size=12,
    ),
    cut=st.one_of(st.none(), st.integers(0, 2**31)),
    root_bump=st.sampled_from([0, 0, 0, 1, -1, 10_000]),
)
def test_corrupt_files_raise_value_error_or_stay_consistent(
    small_db: tuple[bytes, int, int], edits: list[tuple[int, int]], cut: int | None, root_bump: int
) -> None:
    data, page_size, root = small_db
    buf = bytearray(data)
    for pos, byte in edits:
        buf[100 + pos % (len(buf) - 100)] = byte
    if cut is not None:
        del buf[cut % len(buf) :]
    _scan_all(bytes(buf), page_size, max(root + root_bump, 0))


def test_corrupt_structures_give_short_messages(small_db: tuple[bytes, int, int]) -> None:
    data, page_size, root = small_db
    with pytest.raises(ValueError, match=r"^page 0: child or overflow page number 0"):
        scan_table(data, page_size, page_size, 0, [0], b"i", -1)
    off = (root - 1) * page_size
    wrong = data[:off] + b"\x02" + data[off + 1 :]
    with pytest.raises(ValueError, match=rf"^page {root}: not a table b-tree page \(type byte 2\)"):
        scan_table(wrong, page_size, page_size, root, [0], b"i", -1)
    looped = bytearray(data)
    assert looped[off] == 0x05  # interior: point its right-most child back at itself
    looped[off + 8 : off + 12] = root.to_bytes(4, "big")
    with pytest.raises(ValueError, match=rf"^page {root}: child page {root} is already in the b"):
        scan_table(bytes(looped), page_size, page_size, root, [0], b"i", -1)
    with pytest.raises(ValueError, match="power of two"):
        scan_table(data, 1000, 1000, root, [0], b"i", -1)
    with pytest.raises(ValueError, match="twice"):
        scan_table(data, page_size, page_size, root, [0, 0], b"ii", -1)


@pytest.fixture(scope="module")
def chained_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, int, list[list[int]]]:
    """Two 2,000-byte blobs on one 512-byte leaf, each spilling onto a chain of 4 overflow
    pages; returns the file, the root and per cell [offset of the first-overflow pointer,
    then the offset of each overflow page's next pointer]."""
    path = tmp_path_factory.mktemp("chains") / "c.sqlite"
    db = make_db(path, 512)
    db.execute("CREATE TABLE t (v BLOB)")
    db.executemany("INSERT INTO t VALUES (?)", [(bytes([i]) * 2000,) for i in (1, 2)])
    db.commit()
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0]
    db.close()
    data = path.read_bytes()
    base = (root - 1) * 512
    assert data[base] == 0x0D and data[base + 3 : base + 5] == b"\x00\x02"
    chains = []
    for c in range(2):
        cell = base + int.from_bytes(data[base + 8 + 2 * c : base + 10 + 2 * c], "big")
        plen, p = varint(data, cell)
        _, p = varint(data, p)
        assert plen == 2003
        at = [p + 39]  # the local part: the minimum, 39 bytes (fileformat2 section 1.6)
        while (ovf := int.from_bytes(data[at[-1] : at[-1] + 4], "big")) != 0:
            at.append((ovf - 1) * 512)
        assert len(at) == 5  # ceil((2003 - 39) / (512 - 4)) = 4 overflow pages
        chains.append(at)
    return data, root, chains


def _page_of(at: int) -> int:
    return at // 512 + 1


@pytest.mark.parametrize(
    "case", ["loop", "self", "shared", "tail", "tree_page", "past_file", "short", "long"]
)
def test_corrupt_overflow_chains_name_the_page(
    chained_db: tuple[bytes, int, list[list[int]]], case: str
) -> None:
    """A chain must have exactly the pages its payload needs, each in the file and used once."""
    data, root, (c0, c1) = chained_db
    npages = len(data) // 512
    page = [_page_of(a) for a in c0]  # page[0] is the leaf; page[1:] the chain
    edit, message = {
        # the 3rd overflow page points back at the 1st (once "too long", naming another page)
        "loop": ((c0[3], page[1]), rf"page {page[3]}: overflow page {page[1]} is already in use"),
        "self": ((c0[2], page[2]), rf"page {page[2]}: overflow page {page[2]} is already in use"),
        # the second cell's chain is the first's (once no error: the first cell's bytes twice)
        "shared": ((c1[0], page[1]), rf"page {root}: overflow page {page[1]} is already in use"),
        "tail": ((c1[0], page[2]), rf"page {root}: overflow page {page[2]} is already in use"),
        "tree_page": ((c0[0], root), rf"page {root}: overflow page {root} is already in use"),
        "past_file": ((c0[2], npages + 1), rf"page {page[2]}: .* number {npages + 1} out of"),
        "short": ((c0[2], 0), rf"page {page[2]}: overflow chain too short"),
        # the last page goes on (to page 1, a page of another b-tree)
        "long": ((c0[4], 1), rf"page {page[4]}: overflow chain too long"),
    }[case]
    at, value = edit
    buf = data[:at] + value.to_bytes(4, "big") + data[at + 4 :]
    assert scan_table(data, 512, 512, root, [0], b"b", -1)[0][1] == b"\x01" * 2000 + b"\x02" * 2000
    with pytest.raises(ValueError, match=f"^{message}"):
        scan_table(buf, 512, 512, root, [0], b"b", -1)


def test_empty_first_bytes_value(tmp_path: Path) -> None:
    """Empty TEXT/BLOB values before any byte is stored (once memcpy(NULL, p, 0), undefined
    behaviour that UBSan reports in test_sqlitescan_asan.py)."""
    path = tmp_path / "e.sqlite"
    db = make_db(path, 4096)
    db.execute("CREATE TABLE t (a TEXT, b BLOB)")
    db.executemany("INSERT INTO t VALUES (?, ?)", [("", b""), ("", None), ("x", b"yz")])
    db.commit()
    db.close()
    assert _check(path, "t") == 3


def test_scan_reads_an_mmap(small_db: tuple[bytes, int, int], tmp_path: Path) -> None:
    data, page_size, root = small_db
    path = tmp_path / "m.sqlite"
    path.write_bytes(data)
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        values, _, mask = scan_table(m, page_size, page_size, root, [3], b"i", -1)[0]
    assert len(values) == 150 and mask is not None
    assert (mask == MASK_NULL).sum() == 120


# --- real exports -------------------------------------------------------------------------


@pytest.mark.shared
def test_real_nsys_exports_match_sqlite3(shared_dir: Path) -> None:
    files = sorted((shared_dir / "data").rglob("*.sqlite"))
    assert files
    checked = 0
    for path in files:
        with SqliteFile(path) as f:
            tables = [t for t in NSYS_TABLES if f.has(t)]
        for table in tables:
            checked += _check(path, table)
    assert checked > 50_000
