"""One machine-output convention (issue 29 item 4): ``--json -`` writes the document to
stdout in every command, alone (the human text goes to stderr), and no file named ``-``
appears; unknown flags name the subcommand; ``--version``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.run_files import small_run_doc

from pytimings.commands.example import example_path


def _run(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytimings.cli", *argv],
        capture_output=True, text=True, timeout=300, cwd=cwd,
    )  # fmt: skip


def _run_file(tmp_path: Path, name: str) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(small_run_doc()))
    return p


@pytest.mark.parametrize(
    ("argv", "schema"),
    [
        (["analyze", "EX", "--by", "decode_step"], "pytimings.attribution/"),
        (["summary", "EX"], None),
        (["diff", "--base", "EX", "--new", "EX", "--resamples", "200"], "pytimings.diff/"),
        (["compare", "RUN", "RUN2", "--labels", "a,b", "--resamples", "200"], None),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else None,
)
def test_json_dash_is_the_document_alone_on_stdout(
    tmp_path: Path, argv: list[str], schema: str | None
) -> None:
    subs = {
        "EX": str(example_path()),
        "RUN": str(_run_file(tmp_path, "run.json")),
        "RUN2": str(_run_file(tmp_path, "run2.json")),
    }
    r = _run(tmp_path, *[subs.get(a, a) for a in argv], "--json", "-")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # nothing else on stdout
    if schema is not None:
        assert doc["schema"].startswith(schema)
    assert r.stderr.strip()  # the text report is still shown, on stderr
    assert not (tmp_path / "-").exists()


def test_an_unknown_flag_names_the_subcommand(tmp_path: Path) -> None:
    r = _run(tmp_path, "analyze", "--example", "--bogus")
    assert r.returncode == 2
    assert "usage: pytimings analyze" in r.stderr
    assert "pytimings analyze: error: unrecognized arguments: --bogus" in r.stderr


def test_version(tmp_path: Path) -> None:
    r = _run(tmp_path, "--version")
    assert r.returncode == 0 and r.stdout.startswith("pytimings ")


@pytest.mark.parametrize("command", ["analyze", "summary", "export"])
def test_example_runs_on_the_bundled_capture_and_names_it(tmp_path: Path, command: str) -> None:
    extra = ["--perfetto", str(tmp_path / "t.json")] if command == "export" else []
    r = _run(tmp_path, command, "--example", *extra, "-q")
    assert r.returncode == 0, r.stderr
    assert f"example: {example_path()}" in r.stdout.splitlines()
    if command == "export":
        assert json.loads((tmp_path / "t.json").read_text())


@pytest.mark.parametrize("command", ["analyze", "summary", "export"])
def test_no_input_and_no_example_is_one_line(tmp_path: Path, command: str) -> None:
    extra = ["--perfetto", str(tmp_path / "t.json")] if command == "export" else []
    r = _run(tmp_path, command, *extra)
    assert r.returncode == 2 and "(or --example)" in r.stderr.strip().splitlines()[-1]


def test_html_without_a_writable_directory_fails_before_loading(tmp_path: Path) -> None:
    r = _run(tmp_path, "analyze", "--example", "--html", str(tmp_path / "no" / "r.html"))
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.endswith(f"directory {tmp_path / 'no'} does not exist")  # before any report


@pytest.mark.parametrize(
    "command", ["summary", "analyze", "diff", "export", "report", "join", "record", "overhead",
                "loadgen", "compare", "bench"],
)  # fmt: skip
def test_every_command_takes_quiet_and_its_help_shows_defaults(
    tmp_path: Path, command: str
) -> None:
    r = _run(tmp_path, command, "--help")
    assert r.returncode == 0
    assert "--quiet" in r.stdout
    if command == "loadgen":
        assert "(default: " in r.stdout  # every default said where its help did not


def test_bench_kv_help_says_what_each_option_is(tmp_path: Path) -> None:
    r = _run(tmp_path, "bench", "kv", "--help")
    assert "key/value heads per layer (default: 8)" in r.stdout
    assert "elements per head (default: 128)" in r.stdout


def test_files_hold_every_row_whatever_top_shows(tmp_path: Path) -> None:
    """summary --top 1 --json cut the file's tables to one row each as well."""
    few, full = tmp_path / "few.json", tmp_path / "full.json"
    assert _run(tmp_path, "summary", "--example", "--top", "1", "--json", str(few)).returncode == 0
    r = _run(tmp_path, "summary", "--example", "--top", "all", "--json", str(full))
    assert r.returncode == 0
    a, b = json.loads(few.read_text())["tables"], json.loads(full.read_text())["tables"]
    assert a == b and len(b["kernels"]) > 1
    shown = _run(tmp_path, "summary", "--example", "--top", "0").stdout
    assert shown.count("nvjet") == r.stdout.count("nvjet") > 1  # 0: every row on screen too
