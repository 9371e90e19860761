"""User mistakes that used to end in a traceback (issue 17 item 8): each is one line on
stderr and exit status 2, through the real command line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers.run_files import small_run_doc as _run_doc

from pytimings.cli import main
from pytimings.commands.example import example_path


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], said: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert said in err, err


@pytest.mark.parametrize("flag", ["--device", "--rank"])
def test_an_index_beyond_int16_is_not_in_the_trace(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _one_line_error(
        capsys, ["analyze", "--example", flag, "32768", "--quiet"], f"{flag[2:]} 32768 not in"
    )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_export_to_a_full_disk(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["export", str(example_path()), "--perfetto", "/dev/full", "--no-attribution"]
    _one_line_error(capsys, [*argv, "--quiet"], "--perfetto /dev/full: cannot write (No space")


@pytest.mark.parametrize(
    ("where", "key", "value", "said"),
    [
        ("round", "end_ns", 1e30, "end_ns must be an integer"),
        ("round", "end_ns", 10**30, "end_ns must be an integer"),
        ("round", "end_ns", 5, "end_ns 5 precedes start_ns"),
        ("level", "concurrency", 0, "concurrency must be an integer in [1, 2**63)"),
        ("level", "concurrency", True, "concurrency must be an integer"),
        ("level", "rate", float("inf"), "rate must be a positive number"),
    ],
)
@pytest.mark.parametrize("command", ["compare", "report"])
def test_compare_and_report_reject_impossible_run_files(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    where: str,
    key: str,
    value: Any,
    said: str,
) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(_run_doc()))
    doc = _run_doc()
    target = doc["levels"][0] if where == "level" else doc["levels"][0]["rounds"][0]
    target[key] = value
    bad.write_text(json.dumps(doc))  # inf is written as Infinity, which json reads back
    out = ["--html", str(tmp_path / "r.html")] if command == "report" else []
    assert main([command, str(good), str(good), "--labels", "a,b", *out]) == 0
    capsys.readouterr()
    _one_line_error(capsys, [command, str(good), str(bad), "--labels", "a,b", *out], said)


def _example() -> str:
    return str(example_path())


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        # an unset CI variable passes '': the gate used to be off, and the diff passed
        (["diff", "--base", "EX", "--new", "EX", "--fail-on", ""], "--fail-on: must not be empty"),
        (["diff", "--base", "EX", "--new", "EX", "--seed", "-1"], "--seed: must be from 0"),
        (["analyze", "EX", "--what-if", ""], "--what-if: must not be empty"),
        (["export", "EX", "--perfetto", "OUT", "--by", "", "--critical-path"], "--by: must not"),
        (["compare", "RUN", "RUN", "--labels", "a,b", "--seed", "-1"], "--seed: must be from 0"),
        (["compare", "RUN", "RUN", "--labels", "a,b", "--knee-pct", "nan"], "finite number"),
        (["compare", "RUN", "RUN", "--labels", "a,b", "--plot", "OUT.json"], ".json is no image"),
        (["report", "RUN", "--html", "OUT", "--knee-pct", "inf"], "--knee-pct: must be a finite"),
        (["join", "RUN", "EX", "--tolerance-ms", "inf"], "--tolerance-ms: must be a finite"),
        (["overhead", "--iterations", str(10**20)], "--iterations: must be from 1 to"),
        (["record", "--flush-every", "inf", "--", "x.py"], "--flush-every: expected a positive"),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else None,
)
def test_option_values_that_broke_the_work_are_refused_while_parsing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    run = tmp_path / "run.json"
    run.write_text(json.dumps(_run_doc()))
    subs = {"EX": _example(), "RUN": str(run), "OUT": str(tmp_path / "out.html"),
            "OUT.json": str(tmp_path / "out.json")}  # fmt: skip
    argv = [subs.get(a, a) for a in argv]
    try:  # argparse's own refusals exit; the commands' return 2
        code = main([*argv, "--quiet"] if argv[0] in ("diff", "analyze", "export") else argv)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and said in err.splitlines()[-1], err
    assert not (tmp_path / "out.json").exists()


def _bad_runs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Run files each of which used to crash compare/report/join (or be accepted)."""
    out = {}
    deep = tmp_path / "deep.json"
    deep.write_text('{"schema": "x", "config": ' + "[" * 100_000 + "]" * 100_000 + "}")
    out["nested"] = (deep, "nested too deep")
    d = _run_doc()
    d["levels"][0]["intervals"] = [{}]
    out["interval"] = (tmp_path / "iv.json", "an intervals entry lacks start_ns")
    out["interval"][0].write_text(json.dumps(d))
    d = _run_doc()
    d["levels"][0]["rounds"][0]["requests"][0]["phases"] = [["queue", 2**63]]
    out["phase"] = (tmp_path / "ph.json", "9223372036854775808")
    out["phase"][0].write_text(json.dumps(d))
    d = _run_doc()
    d["levels"][0]["rounds"][0]["requests"][0]["output_tokens"] = -690
    out["tokens"] = (tmp_path / "neg.json", "token count -690 out of range")
    out["tokens"][0].write_text(json.dumps(d))
    return out


@pytest.mark.parametrize("case", ["nested", "interval", "phase", "tokens"])
@pytest.mark.parametrize("command", ["compare", "report", "join"])
def test_hostile_run_files_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, case: str
) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_run_doc()))
    bad, said = _bad_runs(tmp_path)[case]
    if command == "join":  # a run file beside the engine's trace
        _one_line_error(capsys, ["join", str(bad), _example()], said)
        return
    out = ["--html", str(tmp_path / "r.html")] if command == "report" else []
    _one_line_error(capsys, [command, str(good), str(bad), "--labels", "a,b", *out], said)


def test_a_recording_with_an_empty_requests_table_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pytimings as pt
    from pytimings.record import storage
    from pytimings.record.requests import RequestLog

    rec = pt.Recorder()
    with rec.region("step"):
        pass
    path = tmp_path / "engine.pyt"
    storage.register_table_provider("requests", lambda: RequestLog().to_arrow())  # no rows
    try:
        storage.save(path, rec)
    finally:
        storage.unregister_table_provider("requests")
    _one_line_error(
        capsys, ["report", str(path), "--html", str(tmp_path / "r.html")], "has no rows"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["analyze", "T", "--json", "T"],
        ["analyze", "T", "--html", "LINK"],
        ["analyze", "T", "--format", "csv", "--out", "T"],
        ["summary", "T", "--json", "T"],
        ["export", "T", "--perfetto", "T"],
        ["diff", "--base", "T", "--new", "T", "--json", "LINK"],
        ["join", "RUN", "T", "--json", "RUN"],
        ["compare", "RUN", "RUN2", "--labels", "a,b", "--json", "RUN2"],
        ["report", "RUN", "--html", "RUN"],
        ["record", "-o", "PROG", "--", "PROG"],
    ],
    ids=lambda v: " ".join(v[:1] + [a for a in v if a.startswith("-")][-1:]),
)
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Every output option used to overwrite one of the command's own inputs, exit 0."""
    import shutil

    trace = tmp_path / "t.sqlite"
    shutil.copy(_example(), trace)
    (tmp_path / "link.sqlite").symlink_to(trace)  # the same file through a link
    run, run2, prog = tmp_path / "run.json", tmp_path / "run2.json", tmp_path / "prog.py"
    run.write_text(json.dumps(_run_doc()))
    run2.write_text(json.dumps(_run_doc()))
    prog.write_text("print('hi')\n")
    subs = {"T": str(trace), "LINK": str(tmp_path / "link.sqlite"), "RUN": str(run),
            "RUN2": str(run2), "PROG": str(prog)}  # fmt: skip
    before = {p: p.read_bytes() for p in (trace, run, run2, prog)}
    _one_line_error(capsys, [subs.get(a, a) for a in argv], "is one of the inputs")
    assert {p: p.read_bytes() for p in before} == before
