"""Tables out: every Table as CSV, Parquet and JSON, read back exactly; the CLIs' --format."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv
import pyarrow.parquet
import pytest
from helpers.recording_factory import make_recording

from pytimings.analysis.attribution import attribute
from pytimings.analysis.summary import trace_summary
from pytimings.cli import main
from pytimings.errors import UsageError
from pytimings.ingest import load
from pytimings.record.summary import Summary
from pytimings.table import Table

EXAMPLE = (
    Path(__file__).resolve().parents[2] / "pytimings" / "examples" / "decode_16steps_h200.sqlite"
)


def _table() -> Table:
    return Table(
        {
            "name": np.array(["a", 'quote " and, comma', "ü"], dtype=object),
            "start_ns": np.array([0, 2**62 + 1, -5], dtype=np.int64),  # beyond float precision
            "share": np.array([0.5, np.nan, 1e-9]),
            "rank": np.array([0, 1, 2], dtype=np.int16),
        }
    )


def _read(path: Path, fmt: str) -> pa.Table:
    if fmt == "csv":
        return pyarrow.csv.read_csv(path)
    if fmt == "parquet":
        return pyarrow.parquet.read_table(path)
    return pa.Table.from_pylist(json.loads(path.read_text()))


@pytest.mark.parametrize("fmt", ["csv", "parquet", "json"])
def test_round_trip(tmp_path: Path, fmt: str) -> None:
    t = _table()
    path = tmp_path / f"t.{fmt}"
    t.write(path)  # format from the suffix
    back = _read(path, fmt)
    assert back.column_names == t.columns
    assert back["name"].to_pylist() == list(t["name"])
    assert back["start_ns"].to_pylist() == t["start_ns"].tolist()
    share = back["share"].to_pylist()
    assert share[0] == 0.5 and share[2] == 1e-9
    assert share[1] is None or np.isnan(share[1])  # NaN: null in JSON/CSV, NaN in Parquet
    assert back["rank"].to_pylist() == [0, 1, 2]


def test_pandas_and_arrow_views() -> None:
    t = _table()
    df = t.to_pandas()
    assert list(df.columns) == t.columns and df["start_ns"].tolist() == t["start_ns"].tolist()
    assert t.to_arrow().schema.field("start_ns").type == pa.int64()
    assert t.to_records()[1] == {
        "name": 'quote " and, comma',
        "start_ns": 2**62 + 1,
        "share": None,
        "rank": 1,
    }


def test_unknown_format_and_unwritable(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown table format 'xlsx'"):
        _table().write(tmp_path / "t.xlsx")
    with pytest.raises(UsageError, match="cannot write"):
        _table().write(tmp_path / "missing" / "t.json")


def test_analyze_writes_the_windows_table(tmp_path: Path) -> None:
    out = tmp_path / "w.parquet"
    assert (
        main(
            [
                "analyze",
                str(EXAMPLE),
                "--by",
                "decode_step",
                "--format",
                "parquet",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    want = attribute(load(EXAMPLE), by="decode_step").windows
    got = pyarrow.parquet.read_table(out)
    assert got.column_names == [*want.columns, "payload"]
    for c in want.columns:
        assert got[c].to_pylist() == want[c].tolist(), c


def test_summary_writes_each_table(tmp_path: Path) -> None:
    out = tmp_path / "summary"
    assert main(["summary", str(EXAMPLE), "--format", "csv", "--out", str(out), "-q"]) == 0
    want = trace_summary(load(EXAMPLE), top=None)  # files are complete whatever --top shows
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{n}.csv" for n in want)
    for name, table in want.items():
        got = pyarrow.csv.read_csv(out / f"{name}.csv")
        assert got.num_rows == len(table)
        assert got["count"].to_pylist() == table["count"].tolist()


@pytest.mark.parametrize(
    "argv",
    [
        ["analyze", str(EXAMPLE), "--format", "csv"],
        ["summary", str(EXAMPLE), "--out", "x"],
    ],
)
def test_format_needs_out(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("--format and --out go together")


def test_recording_summary_table_writes(tmp_path: Path) -> None:
    """The recorder's per-region summary is a Table too."""
    rec = make_recording(
        [
            {"name": "step", "kind": "host", "start": 0, "end": 1_000},
            {"name": "step", "kind": "host", "start": 2_000, "end": 5_000},
        ]
    )
    s = Summary.from_recording(rec)
    s.table.write(tmp_path / "regions.json")
    rows = json.loads((tmp_path / "regions.json").read_text())
    assert len(rows) == 1 and rows[0]["name"] == "step" and rows[0]["count"] == 2


@pytest.mark.parametrize("fmt", ["csv", "parquet", "json"])
def test_every_format_writes_through_links_and_names_a_full_disk(tmp_path: Path, fmt: str) -> None:
    """Table files go through the one writer (pytimings.fileout): a symlink keeps pointing
    at its target, which gets the table; a full disk is one line naming the path."""
    import os

    t = Table({"op": np.arange(50_000, dtype=np.int64)})
    target = tmp_path / f"real.{fmt}"
    link = tmp_path / f"link.{fmt}"
    link.symlink_to(target)
    t.write(link, fmt)
    assert link.is_symlink()
    if fmt == "csv":
        back = pyarrow.csv.read_csv(target).column("op").to_pylist()
    elif fmt == "parquet":
        back = pyarrow.parquet.read_table(target).column("op").to_pylist()
    else:
        back = [row["op"] for row in json.loads(target.read_text())]
    assert back == list(range(50_000))
    if os.path.exists("/dev/full"):
        with pytest.raises(UsageError, match=r"^/dev/full: cannot write \(No space left"):
            t.write("/dev/full", fmt)
