"""Users' comm rules: ``attribute(..., comm_kernels=[GLOB])``, ``--comm-kernel GLOB`` on
every command that attributes (analyze, diff, export) and the ``pytimings.toml`` config
file; malformed globs and files are one line and exit status 2."""

from __future__ import annotations

import json

import pytest
from helpers.nsys_synth import basic
from helpers.synth import make_trace

from pytimings.analysis.attribution import attribute
from pytimings.analysis.classes import COMM, COMPUTE, MEMORY
from pytimings.cli import main
from pytimings.errors import UsageError
from pytimings.model.trace import CopyKind, OpKind


def _trace():
    return make_trace(
        [
            {"start": 0, "end": 10, "name": "void ep::my_a2a_dispatch<8>(int*)"},
            {"start": 10, "end": 30, "name": "sm90_gemm"},
            {"start": 30, "end": 35, "name": "MY_A2A_COMBINE"},
            {"start": 40, "end": 50, "name": "my_a2a_copy", "kind": OpKind.MEMCPY,
             "copy_kind": CopyKind.DTOD},
        ]
    )  # fmt: skip


def test_globs_match_full_or_short_names_in_any_case_kernels_only():
    assert attribute(_trace()).classes.tolist() == [COMPUTE, COMPUTE, COMPUTE, MEMORY]
    a = attribute(_trace(), comm_kernels=["my_a2a*"])  # the short name of the first
    assert a.classes.tolist() == [COMM, COMPUTE, COMM, MEMORY]
    assert a.totals["comm_exposed_ns"] == 15 and a.totals["compute_ns"] == 20
    assert attribute(_trace(), comm_kernels="*combine").classes.tolist()[2] == COMM


@pytest.mark.parametrize(("glob", "msg"), [("", "non-empty glob"), ("*a2a[dc", "closing ']'")])
def test_bad_globs_are_usage_errors(glob, msg):
    with pytest.raises(UsageError, match=msg):
        attribute(_trace(), comm_kernels=[glob])


def _comm(tmp_path, capsys, *extra):
    trace = tmp_path / "t.sqlite"
    if not trace.exists():
        basic(trace)
    out = tmp_path / "a.json"
    assert main(["analyze", str(trace), "--json", str(out), "-q", *extra]) == 0
    capsys.readouterr()
    return json.loads(out.read_text())["totals"]


def test_cli_option_and_config_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _comm(tmp_path, capsys)["comm_exposed_ns"] == 0
    # kernB runs [300, 350) on its own: exposed communication once it is comm
    assert _comm(tmp_path, capsys, "--comm-kernel", "kernB")["comm_exposed_ns"] == 50
    both = _comm(tmp_path, capsys, "--comm-kernel", "kernB", "--comm-kernel", "KERNA")
    assert both["comm_exposed_ns"] == 150 and both["compute_ns"] == 0
    cfg = tmp_path / "rules.toml"
    cfg.write_text('[classify]\ncomm_kernels = ["kern[A]"]\n')
    assert _comm(tmp_path, capsys, "--config", str(cfg))["comm_exposed_ns"] == 100
    (tmp_path / "pytimings.toml").write_text('[classify]\ncomm_kernels = ["kernB"]\n')
    assert _comm(tmp_path, capsys)["comm_exposed_ns"] == 50  # found in the current directory
    assert _comm(tmp_path, capsys, "--comm-kernel", "kernA")["comm_exposed_ns"] == 150


@pytest.mark.parametrize(
    ("config", "extra", "msg"),
    [
        (None, ["--comm-kernel", ""], "--comm-kernel '': give a non-empty glob"),
        (None, ["--comm-kernel", "k[ab"], "--comm-kernel 'k[ab': '[' without a closing ']'"),
        (None, ["--config", "nosuch.toml"], "--config nosuch.toml: no such file"),
        ("[classify\n", [], "not valid TOML"),
        ('[classify]\ncomm_kernel = ["x"]\n', [], "unknown key classify.comm_kernel"),
        ("[rules]\nx = 1\n", [], "unknown table [rules]"),
        ('[classify]\ncomm_kernels = "x*"\n', [], "must be a list of globs"),
        ("[classify]\ncomm_kernels = [1]\n", [], "classify.comm_kernels 1: give a non-empty"),
    ],
)
def test_bad_rules_are_one_line_exit_2(tmp_path, capsys, monkeypatch, config, extra, msg):
    monkeypatch.chdir(tmp_path)
    trace = basic(tmp_path / "t.sqlite")
    if config is not None:
        (tmp_path / "pytimings.toml").write_text(config)
    for cmd in (
        ["analyze", str(trace)],
        ["diff", "--base", str(trace), "--new", str(trace)],
        ["export", str(trace), "--perfetto", str(tmp_path / "p.json")],
    ):
        assert main([*cmd, "-q", *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and msg in err, err


def test_diff_and_export_take_the_rules(tmp_path, capsys):
    trace = basic(tmp_path / "t.sqlite")
    out = tmp_path / "d.json"
    args = ["diff", "--base", str(trace), "--new", str(trace), "--json", str(out), "-q"]
    assert main([*args, "--comm-kernel", "kernB"]) == 0
    rows = {r["name"]: r for r in json.loads(out.read_text())["labels"]}
    assert rows["comm_exposed"]["base_ns"] == rows["comm_exposed"]["new_ns"] == 50
    perfetto = tmp_path / "p.json"
    assert main(["export", str(trace), "--perfetto", str(perfetto), "-q", "--comm-kernel",
                 "kernB"]) == 0  # fmt: skip
    assert "comm_exposed" in perfetto.read_text()


def test_the_json_says_which_rules_were_used_also_per_rank(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pytimings.toml").write_text('[classify]\ncomm_kernels = ["kern[A]"]\n')
    one, two = basic(tmp_path / "r0.sqlite"), basic(tmp_path / "r1.sqlite")
    for traces in ([one], [one, two]):  # one trace; per-rank tasks (two files)
        out = tmp_path / "a.json"
        args = ["analyze", *map(str, traces), "--json", str(out), "-q", "--workers", "1"]
        assert main([*args, "--comm-kernel", "kernB"]) == 0
        doc = json.loads(out.read_text())
        assert doc["comm_kernels"] == ["kern[A]", "kernB"]
        assert doc["totals"]["comm_exposed_ns"] == 150 * len(traces)
    capsys.readouterr()


def test_a_config_file_read_is_said_on_stderr_and_in_the_json(tmp_path, capsys, monkeypatch):
    """A ./pytimings.toml changes the classification: the run says it read it (issue 46)."""
    monkeypatch.chdir(tmp_path)
    trace = basic(tmp_path / "t.sqlite")
    out = tmp_path / "a.json"
    for cmd in (["analyze", str(trace)], ["diff", "--base", str(trace), "--new", str(trace)]):
        assert main([*cmd, "--json", str(out), "-q"]) == 0
        assert "pytimings.toml" not in capsys.readouterr().err
        assert json.loads(out.read_text())["config_file"] is None
    config = tmp_path / "pytimings.toml"
    config.write_text('[classify]\ncomm_kernels = ["kernB", "nvjet*"]\n')
    for cmd in (["analyze", str(trace)], ["diff", "--base", str(trace), "--new", str(trace)]):
        assert main([*cmd, "--json", str(out), "-q"]) == 0
        err = capsys.readouterr().err
        assert f"pytimings: read {config}: comm kernels kernB, nvjet*\n" in err, err
        assert json.loads(out.read_text())["config_file"] == str(config)
