"""Text a user reads says one thing one way (issue 29 item 8): no Findings header over
nothing, HTML names the findings' figure as the text does ("fixing it saves"), one spelling
of microseconds (µs) in every table heading."""

from __future__ import annotations

import re

import pytest
from helpers.synth import make_trace

from pytimings.analysis.attribution import attribute
from pytimings.cli import main
from pytimings.commands.example import example_path
from pytimings.report.analysis_text import render_attribution
from pytimings.report.html import render
from pytimings.session import Analysis


def test_no_findings_is_one_line_not_an_empty_header() -> None:
    analysis = Analysis(attribute(make_trace([{"start": 0, "end": 100}])))
    a = analysis.attribution
    text = render_attribution(a, [], ["t.sqlite"])
    assert text.splitlines()[-1].startswith("Findings: none")
    assert "Findings (" not in text
    pytest.importorskip("plotly")
    page = render(a, [], analysis.ops, "t")
    assert "<h2>Findings: none</h2>" in page and "<ol></ol>" not in page


def test_html_and_text_name_the_saving_alike() -> None:
    pytest.importorskip("plotly")
    from pytimings.ingest import load

    analysis = Analysis(attribute(load(str(example_path())), by="decode_step"))
    a, found = analysis.attribution, analysis.findings
    text = render_attribution(a, found, ["x"]).replace("\n   ", " ")  # the findings unwrapped
    page = render(a, found, analysis.ops, "x")
    saves = re.findall(r"fixing it saves ([\d.]+ [mµ]?s)", text)
    assert saves and saves == re.findall(r"fixing it saves ([\d.]+ [mµ]?s)", page)
    assert "(loss " not in page and "biggest losses" not in page


def test_one_spelling_of_microseconds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", "--example", "-q"]) == 0
    out = capsys.readouterr().out
    assert not re.search(r"\bus\b", out), [ln for ln in out.splitlines() if " us" in ln]
    assert re.search(r"\d µs", out) and re.search(r"\d ms", out)  # units by magnitude
    import importlib

    from pytimings.bench.report import Column

    titles = [
        c.title
        for m in ("copy", "kv", "latency", "collective", "envab", "report")
        for v in vars(importlib.import_module(f"pytimings.bench.{m}")).values()
        if isinstance(v, (list, tuple))
        for c in v
        if isinstance(c, Column)
    ]
    assert len(titles) > 20 and not [t for t in titles if "(us)" in t]
    assert "time(µs)" in titles
