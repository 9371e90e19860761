"""Hostile nsys exports, made by mutating the real H200 capture in the test: corrupt pages
SQLite calls malformed, ids and cell pointers that would blow up memory, times that
overflow, and a file truncated or rewritten while it loads (issue 17, items 3-6)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.sqlite_files import varint
from hypothesis import given, settings
from hypothesis import strategies as st

import pytimings as pt
from pytimings.errors import TraceFormatError

pytestmark = pytest.mark.shared
KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"
INT64 = (-(2**63), 2**63 - 1)


@pytest.fixture()
def capture(shared_dir: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "decode.sqlite"
    shutil.copy(shared_dir / "data" / "h200" / "decode_16steps_h200.sqlite", dst)
    dst.chmod(0o644)
    return dst


def _integrity(path: Path) -> str:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])
    except sqlite3.DatabaseError as exc:
        return str(exc)
    finally:
        db.close()


def _leaves(path: Path, table: str) -> tuple[int, list[int]]:
    """Page size and the table's leaf pages (0x0D) that are not its root."""
    data = path.read_bytes()
    page_size = int.from_bytes(data[16:18], "big")
    db = sqlite3.connect(path)
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    db.close()
    out, todo = [], [root]
    while todo:
        pg = todo.pop()
        base = (pg - 1) * page_size
        n = int.from_bytes(data[base + 3 : base + 5], "big")
        if data[base] == 0x05:
            ptrs = [
                int.from_bytes(data[base + 12 + 2 * i : base + 14 + 2 * i], "big") for i in range(n)
            ]
            todo += [int.from_bytes(data[base + p : base + p + 4], "big") for p in ptrs]
            todo.append(int.from_bytes(data[base + 8 : base + 12], "big"))
        elif pg != root:
            out.append(pg)
    return page_size, sorted(out)


def _edit(path: Path, at: int, value: bytes) -> None:
    with path.open("r+b") as f:
        f.seek(at)
        f.write(value)


# --- item 5: corrupt pages SQLite rejects are errors naming the file and page -------------


@pytest.mark.parametrize("case", ["no_cells", "one_cell_less", "cell_twice", "cells_reversed"])
def test_malformed_leaf_is_an_error_naming_file_and_page(capture: Path, case: str) -> None:
    page_size, leaves = _leaves(capture, KERNELS)
    pg = leaves[len(leaves) // 2]
    base = (pg - 1) * page_size
    data = capture.read_bytes()
    n = int.from_bytes(data[base + 3 : base + 5], "big")
    ptrs = data[base + 8 : base + 8 + 2 * n]
    if case == "no_cells":
        _edit(capture, base + 3, b"\x00\x00")
    elif case == "one_cell_less":
        _edit(capture, base + 3, (n - 1).to_bytes(2, "big"))
    elif case == "cell_twice":
        _edit(capture, base + 10, ptrs[:2])
    else:  # the cells laid out bottom up (SQLite writes them top down): valid, and loaded
        content = int.from_bytes(data[base + 5 : base + 7], "big")
        assert data[base + 1 : base + 3] == b"\x00\x00" and data[base + 7] == 0
        cells = []
        for i in range(n):
            off = int.from_bytes(ptrs[2 * i : 2 * i + 2], "big")
            plen, p = varint(data, base + off)
            _, p = varint(data, p)
            assert plen <= page_size - 35  # no overflow page
            cells.append(data[base + off : p + plen])
        page = bytearray(data[base : base + page_size])
        at = content
        for i, cell in enumerate(cells):
            page[8 + 2 * i : 10 + 2 * i] = at.to_bytes(2, "big")
            page[at : at + len(cell)] = cell
            at += len(cell)
        assert at == page_size
        _edit(capture, base, bytes(page))
    if case == "cells_reversed":
        assert _integrity(capture) == "ok"
        assert len(pt.load(capture).gpu_ops) == 1075
        return
    assert _integrity(capture) != "ok"
    with pytest.raises(TraceFormatError, match=rf"^{capture}: .*page {pg}: ") as err:
        pt.load(capture)
    assert "\n" not in str(err.value)


_FIELDS = ["count", "pointer", "content", "freeblock", "fragments"]


def _check_mutant(path: Path, which: int, field: str, value: int) -> None:
    """Mutate one header field of a kernel leaf: the load fails (one line naming the file)
    exactly when SQLite's integrity_check finds the file malformed, and otherwise has every
    kernel."""
    page_size, leaves = _leaves(path, KERNELS)
    base = (leaves[which % len(leaves)] - 1) * page_size
    n = int.from_bytes(path.read_bytes()[base + 3 : base + 5], "big")
    at = {
        "count": base + 3,
        "pointer": base + 8 + 2 * (which % n),
        "content": base + 5,
        "freeblock": base + 1,
        "fragments": base + 7,
    }[field]
    small = field == "fragments"
    _edit(path, at, (value % 256).to_bytes(1, "big") if small else value.to_bytes(2, "big"))
    try:
        trace = pt.load(path)
    except TraceFormatError as exc:
        assert str(exc).startswith(f"{path}: ") and "\n" not in str(exc)
        assert _integrity(path) != "ok", exc  # refused only what SQLite calls malformed
        return
    assert _integrity(path) == "ok"
    assert len(trace.gpu_ops) == 1075


def _copy(shared_dir: Path, dst: Path) -> Path:
    shutil.copy(shared_dir / "data" / "h200" / "decode_16steps_h200.sqlite", dst)
    dst.chmod(0o644)
    return dst


@settings(max_examples=40, deadline=None)
@given(which=st.integers(0, 10**6), field=st.sampled_from(_FIELDS), value=st.integers(0, 65535))
def test_leaf_header_mutants_load_only_what_sqlite_accepts(
    shared_dir: Path, tmp_path_factory: pytest.TempPathFactory, which: int, field: str, value: int
) -> None:
    """Property: no kernel row vanishes or doubles uncounted (see _check_mutant)."""
    path = _copy(shared_dir, tmp_path_factory.mktemp("mutant") / "m.sqlite")
    _check_mutant(path, which, field, value)


@pytest.mark.slow
def test_leaf_header_corpus(shared_dir: Path, tmp_path: Path) -> None:
    """The fuzzer's seed corpus: every header field of three leaves set to its edge values."""
    values = [0, 1, 2, 3, 4, 7, 8, 100, 255, 256, 1000, 4095, 4096, 4097, 65535]
    for which in (0, 7, 10**6 - 1):
        for field in _FIELDS:
            for value in values:
                path = _copy(shared_dir, tmp_path / f"{which}-{field}-{value}.sqlite")
                _check_mutant(path, which, field, value)
                path.unlink()


# --- item 4: memory proportional to the data ----------------------------------------------

_PEAK = textwrap.dedent(
    """
    import sys, tracemalloc
    import pyarrow, pyarrow.compute
    import pytimings as pt
    import pytimings.ingest.nsys
    tracemalloc.start()  # after the imports: what the load itself allocates
    try:
        tr = pt.load(sys.argv[1])
        print("ok", len(tr.gpu_ops), len(tr.ranges))
    except pt.PytimingsError as exc:
        print("error", exc)
    print(tracemalloc.get_traced_memory()[1])
    """
)


def _peak(path: Path) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", _PEAK, str(path)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return out[0], int(out[-1])


def _sparse_ids(capture: Path, dst: Path) -> str:
    """A copy where one StringIds id (a kernel name's) is 2^62; returns that name."""
    shutil.copy(capture, dst)
    db = sqlite3.connect(dst)
    sid = db.execute(f"SELECT demangledName FROM {KERNELS} LIMIT 1").fetchone()[0]
    name = str(db.execute("SELECT value FROM StringIds WHERE id = ?", (sid,)).fetchone()[0])
    db.execute("UPDATE StringIds SET id = ? WHERE id = ?", (2**62, sid))
    db.execute(f"UPDATE {KERNELS} SET demangledName = ? WHERE demangledName = ?", (2**62, sid))
    db.commit()
    db.close()
    return name


def _aimed_cells(capture: Path, dst: Path) -> Path:
    """A copy where every cell pointer of each NVTX leaf points at the leaf's first cell."""
    page_size, leaves = _leaves(capture, "NVTX_EVENTS")
    data = bytearray(capture.read_bytes())
    for pg in leaves:
        b = (pg - 1) * page_size
        n = int.from_bytes(data[b + 3 : b + 5], "big")
        data[b + 8 : b + 8 + 2 * n] = data[b + 8 : b + 10] * n
    dst.write_bytes(bytes(data))
    return dst


def test_sparse_ids_resolve_and_shared_cells_are_refused(capture: Path, tmp_path: Path) -> None:
    name = _sparse_ids(capture, tmp_path / "sparse.sqlite")
    trace = pt.load(tmp_path / "sparse.sqlite")
    names = {trace.strings[i] for i in trace.gpu_ops["name"]}
    assert name in names and not any("unknown string id" in n for n in names)
    plain = pt.load(capture)
    assert names == {plain.strings[i] for i in plain.gpu_ops["name"]}
    aimed = _aimed_cells(capture, tmp_path / "aimed.sqlite")
    assert _integrity(aimed) != "ok"
    with pytest.raises(TraceFormatError, match=rf"^{aimed}: .*page \d+: cell at \d+ overlaps"):
        pt.load(aimed)


@pytest.mark.slow
def test_memory_stays_proportional_to_the_file(capture: Path, tmp_path: Path) -> None:
    """One field must not change the memory a load of the same file takes (once: 8.5 GB
    for an id of 2^31; 16,000 pointers at one cell made 16,000 rows)."""
    first, base_peak = _peak(capture)
    assert first.startswith("ok 1075")
    _sparse_ids(capture, tmp_path / "sparse.sqlite")
    first, peak = _peak(tmp_path / "sparse.sqlite")
    assert first.startswith("ok 1075") and peak < 1.2 * base_peak + (1 << 20)
    aimed = _aimed_cells(capture, tmp_path / "aimed.sqlite")
    first, peak = _peak(aimed)
    assert first.startswith(f"error {aimed}: ") and "overlaps another cell" in first
    assert peak < 1.2 * base_peak + (1 << 20)


# --- item 6: times whose span overflows int64 ---------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    value=st.sampled_from([INT64[0], INT64[1], -(2**62), 2**62, 2**62 - 1, 2**63 - 2])
    | st.integers(*INT64),
    column=st.sampled_from(["start", "end"]),
    table=st.sampled_from([KERNELS, "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"]),
)
def test_int64_edge_times_are_refused_or_plausible(
    shared_dir: Path, tmp_path_factory: pytest.TempPathFactory, value: int, column: str, table: str
) -> None:
    """Property: with one time set to any int64, the load either refuses it (a clear line
    naming the value) or yields a trace whose every span fits in int64 with room."""
    path = tmp_path_factory.mktemp("times") / "t.sqlite"
    shutil.copy(shared_dir / "data" / "h200" / "decode_16steps_h200.sqlite", path)
    path.chmod(0o644)
    db = sqlite3.connect(path)
    db.execute(
        f'UPDATE {table} SET "{column}" = ? WHERE rowid = (SELECT min(rowid) FROM {table})',
        (value,),
    )
    db.commit()
    db.close()
    try:
        trace = pt.load(path)
    except TraceFormatError as exc:
        msg = str(exc)
        assert "\n" not in msg and msg.startswith(f"{path}: ")
        assert str(value) in msg
        return
    for t in (trace.gpu_ops, trace.api_calls, trace.ranges):
        for times in (t["start"], t["end"]):
            assert (times > -(2**62)).all() and (times < 2**62).all()
        assert (t["end"] >= t["start"]).all()


# --- item 3: the file changes while it loads ----------------------------------------------

_TRUNCATED_SCAN = textwrap.dedent(
    """
    import mmap, os, sys
    from pytimings.ingest._sqlite import SqliteFile
    path = sys.argv[1]
    f = SqliteFile(path)
    f.columns("CUPTI_ACTIVITY_KIND_KERNEL")  # the schema, read by sqlite3 before the cut
    os.truncate(path, f.page_size * 2)   # the mmap now reaches past the file's end
    try:
        f.read("CUPTI_ACTIVITY_KIND_KERNEL", {"start": "i"})
    except ValueError as exc:
        print(exc)
    """
)


def test_truncated_under_the_mmap_is_an_error_not_sigbus(capture: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _TRUNCATED_SCAN, str(capture)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "truncated while it was read" in done.stdout


_RACE = textwrap.dedent(
    """
    import os, sys, threading
    import pytimings as pt
    paths = sys.argv[1:]
    data = open(paths[0], "rb").read()
    stop = threading.Event()

    def churn(i):
        k = 0
        while not stop.is_set():
            p = paths[k % len(paths)]
            with open(p, "r+b") as f:
                f.truncate((k * 7919 + i * 4096) % len(data))
                f.seek(0)
                f.write(data)
            k += 1

    workers = [threading.Thread(target=churn, args=(i,)) for i in range(2)]
    for w in workers:
        w.start()
    try:
        for _ in range(int(os.environ.get("ROUNDS", "12"))):
            try:
                tr = pt.load(*paths)
                print("ok", len(tr.gpu_ops))
            except pt.PytimingsError as exc:
                print("error", exc)
    finally:
        stop.set()
        for w in workers:
            w.join()
    """
)


def _race(capture: Path, tmp_path: Path, rounds: int) -> list[str]:
    paths = [capture] + [tmp_path / f"rank{i}.sqlite" for i in (1, 2)]
    for p in paths[1:]:
        shutil.copy(capture, p)
    env = {**os.environ, "ROUNDS": str(rounds)}
    done = subprocess.run(
        [sys.executable, "-c", _RACE, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]  # never killed by a signal
    lines = done.stdout.splitlines()
    assert len(lines) == rounds
    for line in lines:
        if line.startswith("ok"):
            assert line == f"ok {3 * 1075}"
        else:
            assert line.startswith("error ") and any(f"{p}: " in line for p in paths), line
    return lines


def test_files_truncated_and_rewritten_during_loads(capture: Path, tmp_path: Path) -> None:
    """Two threads truncate and rewrite three exports while they load (in threads): the
    process survives (no SIGBUS), each load is the right trace or a one-line error."""
    _race(capture, tmp_path, 12)


@pytest.mark.slow
def test_files_truncated_and_rewritten_during_many_loads(capture: Path, tmp_path: Path) -> None:
    lines = _race(capture, tmp_path, 150)
    assert any(line.startswith("error ") for line in lines)  # the race did bite
