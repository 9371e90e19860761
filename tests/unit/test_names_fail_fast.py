"""Names and numbers options give (``--what-if``, ``--window``, ``export --critical-path``)
are checked against the loaded trace before any analysis runs or prints (issue 29 item 1,
issue 30 items 13 and 17): one line naming the option as typed, the closest names the trace
has, exit 2, nothing on stdout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.synth import make_trace

from pytimings.analysis.attribution import attribute
from pytimings.analysis.name_checks import check_repeats, check_what_if, window_count
from pytimings.analysis.replay import replay_windows, what_if
from pytimings.cli import main
from pytimings.commands.example import example_path
from pytimings.errors import UsageError
from pytimings.ingest import load


@pytest.fixture(scope="module")
def example() -> Any:
    return load(str(example_path()))


def _no_analysis(*_: Any, **__: Any) -> Any:
    raise AssertionError("the analysis ran before the option was checked")


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], *said: str) -> str:
    assert main([*argv, "--quiet"]) == 2
    out, err = capsys.readouterr()
    assert out == "", "a report was printed before the error"
    err = err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for s in said:
        assert s in err, err
    return err


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("foo=0", ["--what-if 'foo=0': no range or host activity is named 'foo'; closest"]),
        # the GEMMs of the example are nvjet_*: the category the glob names is suggested
        ("kernel:gemm*=0", ["no GPU op is named 'gemm*'", "gemm ops are named: nvjet_sm90"]),
        ("schedulr=0", ["no range or host activity is named 'schedulr'", "scheduler"]),
        ("self:schedulr=0", ["'schedulr'", "closest host activity names: scheduler"]),
    ],
)
def test_unknown_what_if_names_fail_before_the_analysis(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    spec: str,
    said: list[str],
) -> None:
    monkeypatch.setattr("pytimings.session.attribute", _no_analysis)
    _refused(capsys, ["analyze", str(example_path()), "--what-if", spec], *said)


def test_a_window_beyond_the_analysis_fails_before_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pytimings.session.attribute", _no_analysis)
    argv = ["analyze", str(example_path()), "--by", "decode_step", "--critical-path"]
    _refused(capsys, [*argv, "--window", "99"], "--window 99: the analysis has windows 1-16")
    _refused(capsys, [*argv, "--window", "0"], "--window 0: the analysis has windows 1-16")


def test_export_names_the_flag_typed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("pytimings.analysis.attribution.attribute", _no_analysis)
    argv = ["export", str(example_path()), "--perfetto", str(tmp_path / "t.json")]
    err = _refused(
        capsys,
        [*argv, "--by", "nonexist", "--critical-path"],
        "--by 'nonexist' matches no range; closest range names: ",
    )
    assert "--critical-path" not in err
    assert not (tmp_path / "t.json").exists()


def test_window_count_is_what_the_replay_numbers(example: Any) -> None:
    for by in (None, "decode_step", "probe:*", "sample"):
        a = attribute(example, by=by)
        assert window_count(example, by, None, None) == len(replay_windows(a).name) > 0
    # several ranks and devices, some selected away
    ops = [
        {"start": 100 * i, "end": 100 * i + 50, "rank": r, "device": d}
        for i, (r, d) in enumerate([(0, 0), (0, 1), (1, 0), (2, 3), (2, 3)])
    ]
    ranges = [
        {"name": "step", "start": 100 * i, "end": 100 * i + 90, "rank": r}
        for i, r in enumerate([0, 0, 1, 2, 2, 2])
    ]
    t = make_trace(ops, ranges=ranges)
    for ranks, devices in [(None, None), ([0], None), ([0, 2], None), (None, [3]), (None, [0])]:
        for by in (None, "step"):
            a = attribute(t, by=by, ranks=ranks, devices=devices)
            n = len(np.unique(a.windows["rank"])) if by is None else len(replay_windows(a).name)
            assert window_count(t, by, ranks, devices) == n, (by, ranks, devices)


def test_prefixed_names_are_checked_by_the_name_behind_the_prefix(example: Any) -> None:
    check_what_if(example, "self:scheduler=0,kernel:nvjet*=0.5,comm:*elementwise*=0.5")
    with pytest.raises(UsageError, match="no range or host activity is named 'nonexist'"):
        check_what_if(example, "self:nonexist=0")
    with pytest.raises(UsageError, match="no GPU op is named 'nonexist'"):
        check_what_if(example, "comm:nonexist=0.5")


@pytest.mark.parametrize(
    "spec",
    ["scheduler=0,scheduler=2", "scheduler=0, scheduler=0", "self:layer=0,layer=1",
     "kernel:nvjet*=0.5,kernel:nvjet*=2"],
)  # fmt: skip
def test_a_second_change_to_one_name_is_an_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, spec: str
) -> None:
    monkeypatch.setattr("pytimings.ingest.load", _no_analysis)  # refused before loading
    _refused(capsys, ["analyze", str(example_path()), "--what-if", spec], "is changed twice")


def test_a_gpu_op_and_a_range_of_one_name_are_two_changes() -> None:
    check_repeats("kernel:layer*=0,layer=2")


@pytest.mark.parametrize("spec", ["scheduler=1e15", "kernel:*=1e18", "scheduler=3e11,layer=3e10"])
def test_factors_overflowing_int64_ns_are_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, spec: str
) -> None:
    monkeypatch.setattr("pytimings.session.attribute", _no_analysis)
    _refused(capsys, ["analyze", str(example_path()), "--what-if", spec], "int64 nanoseconds")


def test_a_large_factor_that_fits_lengthens_every_window(example: Any) -> None:
    """Below the limit the replay computes: a change that lengthens time never saves (the
    old code wrapped and reported a 97.6% saving)."""
    spec = "kernel:*=1e11"
    check_what_if(example, spec)
    doc = what_if(attribute(example, by="decode_step"), spec).to_dict()
    assert doc["windows"] and all(r["after_ns"] > 100 * r["before_ns"] for r in doc["windows"])
    assert doc["total_saving_ns"] < 0


@pytest.mark.parametrize(
    "spec",
    ["foo=0", "schedulr=0.50", "self:schedulr=0", "kernel:gemm*=0", "comm:nonexist=0.5",
     "comm:all_gather=2", "scheduler", "scheduler=x", "scheduler=-1", "self:=0", "kernel:=1",
     "scheduler=0,=1"],
)  # fmt: skip
def test_the_cli_and_the_python_api_refuse_a_spec_in_one_words(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, example: Any, spec: str
) -> None:
    """One reading of the forms, one error text: `analyze --what-if` (checked before the
    analysis) and `what_if(attribution, spec)` (the replay applying it) refuse a bad spec
    with the same line, the item quoted as typed."""
    with pytest.raises(UsageError) as api:
        what_if(attribute(example, by="decode_step"), spec).to_dict()
    monkeypatch.setattr("pytimings.session.attribute", _no_analysis)
    err = _refused(capsys, ["analyze", str(example_path()), "--what-if", spec])
    assert err == f"pytimings analyze: error: {api.value}"
    assert f"--what-if {spec.split(',')[-1]!r}: " in err  # the bad item, as typed


def test_a_comm_change_may_name_a_collective_kind_before_the_analysis() -> None:
    """``comm:all_reduce`` names the collective, not a kernel (docs/replay.md): the check
    before the analysis accepts what the replay applies (it refused it: no GPU op is named
    'all_reduce'), and refuses a kind the trace's comm kernels do not run, in the replay's
    words."""
    ops = [{"start": 0, "end": 100, "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"}]
    t = make_trace(ops)
    check_what_if(t, "comm:all_reduce=0.5")
    assert what_if(attribute(t), "comm:all_reduce=0.5").to_dict()["changes"][0]["kind"] == "comm"
    with pytest.raises(UsageError) as before:
        check_what_if(t, "comm:all_gather=0.5")
    with pytest.raises(UsageError) as replayed:
        what_if(attribute(t), "comm:all_gather=0.5").to_dict()
    assert str(before.value) == str(replayed.value)
    assert "no communication op is of kind 'all_gather' (kinds here: all_reduce)" in str(
        before.value
    )
