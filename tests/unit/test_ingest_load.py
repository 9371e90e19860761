"""pytimings.ingest.load: format detection from content, ranks, several files, errors."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from helpers import nsys_synth as syn

from pytimings.errors import TraceFormatError, UsageError
from pytimings.ingest import detect_format, load


@pytest.fixture
def export(tmp_path: Path) -> Path:
    return syn.basic(tmp_path / "base.sqlite")


def test_format_comes_from_content_not_extension(export: Path, tmp_path: Path) -> None:
    odd = tmp_path / "trace.json"
    shutil.copy(export, odd)
    assert detect_format(str(odd)) == "nsys-sqlite"
    assert len(load(odd).gpu_ops) == 4
    rep = tmp_path / "no_extension"
    rep.write_bytes(b"NVIDIA Tegra Profiler Report 1.\n...")
    assert detect_format(str(rep)) == "nsys-report"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b"just text", "unrecognised trace format"),
        (gzip.compress(b"not json at all"), "unrecognised trace format"),
        (b"\x1f\x8b\x08\x00garbage", "truncated or corrupt gzip data"),
    ],
)
def test_unrecognised_content(tmp_path: Path, content: bytes, message: str) -> None:
    p = tmp_path / "x.bin"
    p.write_bytes(content)
    with pytest.raises(TraceFormatError, match=message):
        load(p)


def test_nonexistent_path() -> None:
    with pytest.raises(TraceFormatError, match=r"^missing\.sqlite: no such file or directory$"):
        load("missing.sqlite")


def test_no_paths() -> None:
    with pytest.raises(UsageError):
        load()


def _ranks_of(tr: object) -> list[int]:
    return sorted(set(tr.gpu_ops["rank"].tolist()))  # type: ignore[attr-defined]


@pytest.mark.parametrize("workers", [1, 2])
def test_rank_from_file_names(export: Path, tmp_path: Path, workers: int) -> None:
    d = tmp_path / "run"
    d.mkdir()
    for n in ("trace_rank3.sqlite", "trace_rank-1.sqlite", "trace_rank_2.sqlite"):
        shutil.copy(export, d / n)
    (d / "README.md").write_text("not a trace")
    tr = load(d, workers=workers)
    assert _ranks_of(tr) == [1, 2, 3]
    for table in (tr.gpu_ops, tr.api_calls, tr.ranges, tr.threads, tr.devices):
        assert sorted(set(table["rank"].tolist())) == [1, 2, 3]
    assert len(tr.gpu_ops) == 12
    assert [p["rank_source"] for p in tr.meta["parts"]] == ["file name"] * 3
    # threads stay distinct per rank and api calls point at their own rank's thread rows
    api = tr.api_calls
    assert np.array_equal(tr.threads["rank"][api["thread"]], api["rank"])


def test_rank_from_order_and_argument(export: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    shutil.copy(export, a)
    shutil.copy(export, b)
    assert _ranks_of(load(a, b)) == [0, 1]
    assert _ranks_of(load(a, b, ranks=[5, 7])) == [5, 7]
    with pytest.raises(UsageError):
        load(a, b, ranks=[1])


def test_two_files_with_one_rank_are_an_error(export: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "x_rank0.sqlite", tmp_path / "y_rank0.sqlite"
    shutil.copy(export, a)
    shutil.copy(export, b)
    with pytest.raises(TraceFormatError, match="rank 0 is also the rank of"):
        load(a, b)


def test_the_same_file_twice_is_an_error(export: Path, tmp_path: Path) -> None:
    a = tmp_path / "a.sqlite"
    shutil.copy(export, a)
    (tmp_path / "link.sqlite").symlink_to(a)
    for again in (a, tmp_path / "." / "a.sqlite", tmp_path / "link.sqlite"):
        with pytest.raises(UsageError, match=r"given more than once \(also as .*a\.sqlite\)"):
            load(a, again)
    d = tmp_path / "d"
    d.mkdir()
    shutil.copy(export, d / "r.sqlite")
    with pytest.raises(UsageError, match=r"r\.sqlite: given more than once"):
        load(d, d / "r.sqlite")


def test_directory_without_traces(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(TraceFormatError, match="directory holds no trace files"):
        load(tmp_path)


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"", "is empty"), (b"SQLite format 3\x00" + b"\x01" * 200, "corrupt or unreadable")],
)
def test_cli_bad_input_exits_2_with_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    p = tmp_path / "bad.sqlite"
    p.write_bytes(content)
    done = subprocess.run(
        [sys.executable, "-m", "pytimings.cli", "summary", str(p)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"pytimings summary: error: {p}: ")
    assert message in lines[0] and "Traceback" not in done.stderr


def test_cli_missing_file_and_bad_option(export: Path) -> None:
    for args in (["summary", "nope.sqlite"], ["summary", str(export), "--top", "-1"]):
        done = subprocess.run(
            [sys.executable, "-m", "pytimings.cli", *args],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr
        # one line, or argparse's usage before its one error line
        assert "error: " in done.stderr.strip().splitlines()[-1]


def _bad_exports(d: Path) -> dict[str, tuple[Path, str]]:
    import sqlite3

    other = d / "other.sqlite"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE t (a)")
    db.commit()
    db.close()
    g = syn.GPID
    return {
        "not nsys": (other, "not an Nsight Systems export"),
        "too new": (
            syn.write(d / "new.sqlite", {"StringIds": [(1, "k")]}, schema_version="9.1.0"),
            "schema version 9.1.0 is not supported",
        ),
        "duplicate ids": (
            syn.basic(
                d / "dup.sqlite",
                CUPTI_ACTIVITY_KIND_KERNEL=[(1, 2, 0, 1, 7, 1, g, 1), (3, 4, 0, 1, 7, 1, g, 1)],
            ),
            "share a correlation id",
        ),
        "negative": (
            syn.basic(d / "neg.sqlite", CUPTI_ACTIVITY_KIND_KERNEL=[(5, 2, 0, 1, 7, 1, g, 1)]),
            "end before they start",
        ),
        "no events": (
            syn.write(d / "none.sqlite", {"StringIds": [(1, "k")]}),
            "contains no events",
        ),
    }


@pytest.mark.parametrize("case", ["not nsys", "too new", "duplicate ids", "negative", "no events"])
def test_cli_bad_exports_exit_2(tmp_path: Path, case: str) -> None:
    path, message = _bad_exports(tmp_path)[case]
    done = subprocess.run(
        [sys.executable, "-m", "pytimings.cli", "summary", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"pytimings summary: error: {path}: ")
    assert message in lines[0]


def test_recordings_and_nsys_exports_load_together(tmp_path: Path, export: Path) -> None:
    from helpers.recording_factory import make_recording

    from pytimings.record import storage

    rows = [{"name": "step", "kind": "compute", "start": 10, "end": 90, "gpu": (20, 80)}]
    rec = make_recording(rows, meta={"pid": 5, "rank": 3})
    saved = storage.save(tmp_path / "run.pyt", rec)
    assert detect_format(str(saved)) == "recording"
    tr = load(saved, export)
    assert [p["format"] for p in tr.meta["parts"]] == ["pytimings", "nsys-sqlite"]
    # the recording says its rank (3); the export is second in order (1)
    assert [p["rank_source"] for p in tr.meta["parts"]] == ["trace", "file order"]
    assert sorted(set(tr.ranges["rank"].tolist())) == [1, 3]


def test_parallel_loads_equal_one_at_a_time(tmp_path: Path, export: Path) -> None:
    """nsys exports load in threads, a mix with other formats in worker processes; either
    way the Trace equals loading the files one after the other."""
    from helpers.recording_factory import make_recording

    from pytimings.model.trace import TABLES
    from pytimings.record import storage

    other = syn.basic(tmp_path / "other_rank1.sqlite")
    rows = [{"name": "step", "kind": "compute", "start": 10, "end": 90, "gpu": (20, 80)}]
    saved = storage.save(tmp_path / "run.pyt", make_recording(rows, meta={"pid": 5}))
    for files in ([export, other], [export, other, saved]):
        serial, pooled = load(*files, workers=1), load(*files, workers=3)
        assert pooled.strings == serial.strings
        for name in TABLES:
            a, b = serial.table(name), pooled.table(name)
            assert list(a.columns) == list(b.columns)
            for col in a.columns:
                assert np.array_equal(a[col], b[col], equal_nan=a[col].dtype.kind == "f"), col


_FAKE_NSYS = """#!/bin/sh
# nsys export --type sqlite -o OUT REPORT: fails when NSYS_FAIL is set
[ -n "$NSYS_FAIL" ] && { echo "fake nsys: cannot read the report" >&2; exit 1; }
printf 'SQLite format 3\\000exported' > "$5"
"""


@pytest.fixture
def fake_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nsys").write_text(_FAKE_NSYS)
    (bin_dir / "nsys").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"NVIDIA Tegra Profiler Report")
    return report


@pytest.mark.parametrize("nsys_fails", [True, False], ids=["export fails", "export works"])
def test_an_older_sqlite_of_the_users_beside_the_report_is_never_deleted(
    fake_nsys: Path, monkeypatch: pytest.MonkeyPatch, nsys_fails: bool
) -> None:
    """summary X.nsys-rep deleted the user's own older X.sqlite before running nsys: when
    the export failed, the file was gone."""
    from pytimings.ingest.detect import export_report

    users = fake_nsys.with_suffix(".sqlite")
    users.write_bytes(b"the user's own export")
    os.utime(users, (1, 1))  # older than the report
    if nsys_fails:
        monkeypatch.setenv("NSYS_FAIL", "1")
        with pytest.raises(TraceFormatError, match=r"nsys export failed.*cannot read the report"):
            export_report(str(fake_nsys))
    else:
        out = Path(export_report(str(fake_nsys)))
        assert out.parent.name == "nsys-export" and out.read_bytes().endswith(b"exported")
        assert export_report(str(fake_nsys)) == str(out)  # cached
    assert users.read_bytes() == b"the user's own export"
    assert sorted(p.name for p in fake_nsys.parent.iterdir()) == [
        "bin", "run.nsys-rep", "run.sqlite", "tmp"
    ]  # fmt: skip


def test_a_report_exports_beside_itself_when_nothing_is_there(fake_nsys: Path) -> None:
    from pytimings.ingest.detect import export_report

    assert export_report(str(fake_nsys)) == str(fake_nsys.with_suffix(".sqlite"))
    assert fake_nsys.with_suffix(".sqlite").read_bytes().endswith(b"exported")
    assert not list(fake_nsys.parent.glob(".pytimings-export-*"))
