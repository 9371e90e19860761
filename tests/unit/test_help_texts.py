"""Help texts that said what the command does not do (issue 46)."""

from __future__ import annotations

import pytest

from pytimings.cli import main


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_each_help_says_what_the_command_does(capsys: pytest.CaptureFixture[str]) -> None:
    assert ".pyt" in _help(capsys, "analyze")  # it reads recordings too
    assert "metrics table as text, --html for the page" in _help(capsys)  # report
    assert "plot GPU time per operation against size" in _help(capsys, "bench", "latency")
    assert "plot bandwidth against size" in _help(capsys, "bench", "copy")
