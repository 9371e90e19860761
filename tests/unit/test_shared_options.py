"""The shared options' values (issue 43 item 5): durations with units on every command that
takes one, the old spellings kept as aliases, ``--top all`` and ``--example`` on ``ops``,
and ``-`` as standard input where a command reads a file."""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import pytest

from pytimings.cli import every_parser, main
from pytimings.commands.example import example_path
from pytimings.console.options import duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("100ms", 0.1), ("1s", 1.0), ("5m", 300.0), ("1h", 3600.0), ("2", 2.0), ("0.5", 0.5),
     ("250us", 250e-6), (" 3 s ", 3.0)],
)  # fmt: skip
def test_a_duration_takes_units_and_bare_seconds(text: str, seconds: float) -> None:
    assert duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["0", "0ms", "-1", "inf", "nan", "soon", "1d", "", "1 m s"])
def test_a_duration_that_is_no_positive_time_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected a positive time"):
        duration(text)


def _parse(argv: list[str]) -> argparse.Namespace:
    return every_parser().parse_args(argv)


LOADGEN = ["loadgen", "--url", "http://127.0.0.1:9/v1", "--model", "m", "-o", "r.json"]


@pytest.mark.parametrize(
    ("argv", "attr"),
    [
        ([*LOADGEN, "--telemetry-interval", "100ms"], "telemetry_interval"),
        ([*LOADGEN, "--metrics-interval", "100ms"], "metrics_interval"),
        ([*LOADGEN, "--duration", "100ms"], "duration"),
        ([*LOADGEN, "--timeout", "100ms"], "timeout"),
        (["record", "--telemetry-interval", "100ms", "--", "x.py"], "telemetry_interval"),
        (["record", "--flush-every", "100ms", "--", "x.py"], "flush_every"),
    ],
    ids=lambda v: v[-1] if isinstance(v, list) else v,
)
def test_every_interval_takes_the_same_units(argv: list[str], attr: str) -> None:
    """``--telemetry-interval`` took bare seconds only (100ms was refused)."""
    assert getattr(_parse(argv), attr) == pytest.approx(0.1)


@pytest.mark.parametrize("flag", ["-o", "--out", "--output"])
def test_record_keeps_its_output_spelling(flag: str) -> None:
    assert _parse(["record", flag, "run.pyt", "--", "x.py"]).out == "run.pyt"


def test_ops_takes_top_all_and_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    """``ops --top all`` was refused (an int option) and ``ops`` had no ``--example``."""
    assert main(["ops", "--example", "--top", "all", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"example: {example_path()}\n") and "more ops" not in out
    assert main(["ops", "--example", "--top", "1", "-q"]) == 0
    assert "more ops; --top N" in capsys.readouterr().out


class _Stdin(io.TextIOWrapper):
    def __init__(self, data: bytes, tty: bool = False) -> None:
        super().__init__(io.BytesIO(data))
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def test_a_dash_reads_the_trace_from_standard_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(example_path())
    assert main(["summary", path, "-q"]) == 0
    from_path = capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", _Stdin(Path(path).read_bytes()))
    assert main(["summary", "-", "-q"]) == 0
    assert capsys.readouterr().out == from_path


@pytest.mark.parametrize(
    ("argv", "tty", "said"),
    [
        (["summary", "-"], True, "'-' reads standard input, and it is a terminal: pipe a file in"),
        (
            ["diff", "--base", "-", "--new", "-"],
            False,
            "'-' given twice: standard input can be read once",
        ),
    ],
)
def test_a_dash_that_cannot_be_read_is_one_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    tty: bool,
    said: str,
) -> None:
    monkeypatch.setattr(sys, "stdin", _Stdin(b"", tty=tty))
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().splitlines() == [f"pytimings {argv[0]}: error: {said}"]
