"""The HTML report: one self-contained file whose charts draw in headless Chromium."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.ranks_synth import write_ranks

from pytimings.analysis.attribution import attribute
from pytimings.analysis.partition import BUSY_LABELS
from pytimings.cli import main
from pytimings.ingest import load
from pytimings.report.analysis_text import saving_text, savings_head
from pytimings.report.host_text import host_bound_section, host_window_sections
from pytimings.report.html import CATEGORY_COLORS, render, write_html
from pytimings.session import Analysis

EXAMPLE = (
    Path(__file__).resolve().parents[2] / "pytimings" / "examples" / "decode_16steps_h200.sqlite"
)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _dom(path: Path) -> str:
    """The page's DOM after its scripts ran, from headless Chromium."""
    assert CHROMIUM is not None
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=20000",
            "--dump-dom",
            path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


@pytest.fixture(scope="module")
def multi_rank_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("html")
    analysis = Analysis(attribute(load(*write_ranks(d / "ranks", 4, ops=450)), by="decode_step"))
    out = d / "report.html"
    write_html(analysis.attribution, analysis.findings, analysis.ops, out, "4 synthetic ranks")
    return out


def test_self_contained(multi_rank_report: Path) -> None:
    doc = multi_rank_report.read_text()
    assert not re.search(r"<script[^>]+src=", doc), "no external scripts"
    assert not re.search(r"<link[^>]+href=", doc), "no external stylesheets"
    assert doc.count("Plotly.newPlot") == 5  # breakdown, categories, lanes, skew, latency
    assert "straggler: rank 3" in doc and "Findings" in doc


def test_op_categories_table_and_chart() -> None:
    """The category table holds the op table's busy split (ms, share of the busy time),
    each row with its colour; the chart a bar trace per category present."""
    analysis = Analysis(attribute(load(EXAMPLE), by="decode_step"))
    a = analysis.attribution
    doc = render(a, analysis.findings, analysis.ops, "one rank")
    cats = analysis.ops.categories
    busy = sum(c["busy_ns"] for c in cats)
    assert cats and busy == sum(int(a.windows[f"{x}_ns"].sum()) for x in BUSY_LABELS)
    for c in cats:
        row = (
            f'<tr><td><span style="color:{CATEGORY_COLORS[c["category"]]}">&#9632;</span> '
            f"{c['category']}</td><td>{c['busy_ns'] / 1e6:.3f}</td>"
            f"<td>{100 * c['busy_ns'] / busy:.1f}%</td>"
        )
        assert row in doc, c
    assert "The GPU&#x27;s busy time by op category" in doc or "busy time by op category" in doc


def test_missing_parts_are_said() -> None:
    analysis = Analysis(attribute(load(EXAMPLE), by="decode_step"))
    parts = (analysis.attribution, analysis.findings, analysis.ops)
    doc = render(*parts, "one rank")
    assert doc.count("Plotly.newPlot") == 4
    assert "No collectives matched across ranks" in doc
    doc = render(*parts, "reduced", has_events=False)
    assert "Timeline lanes need the events" in doc and doc.count("Plotly.newPlot") == 3


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_charts_draw_in_chromium(multi_rank_report: Path) -> None:
    dom = _dom(multi_rank_report)
    assert dom.count('class="main-svg"') >= 8  # two SVG layers per drawn chart
    bars = re.findall(r'<g class="point"><path d="M([^"]+)"', dom)
    assert len(bars) > 100 and all(len(d) > 5 for d in bars[:100])  # bars with real shapes
    assert "trace boxes" in dom  # the skew box plot drew


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_cli_html(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    assert main(["analyze", "--example", "--html", str(out), "-q"]) == 0
    dom = _dom(out)
    assert dom.count('class="main-svg"') >= 6


def test_the_page_carries_what_the_text_says(tmp_path: Path) -> None:
    """``analyze --example --html``: the host table the text prints ("what the launching
    thread was inside"), its host windows' table, and each finding's saving with its caveat
    (or why there is none), as the text words them (issue 45 item 9)."""
    out = tmp_path / "r.html"
    assert main(["analyze", "--example", "--html", str(out), "-q"]) == 0
    doc = out.read_text()
    a = attribute(load(EXAMPLE), by="decode_step")
    bound = host_bound_section(a)
    assert bound is not None
    for section in [bound, *host_window_sections(a)]:
        assert f"<h2>{html.escape(section.heading)}</h2>" in doc
        for row in section.rows:  # every cell, in order, in one table row
            assert re.search(".*".join(re.escape(html.escape(c)) for c in row), doc), row
    found = Analysis(a).findings
    head, none_line = savings_head(found)
    assert f"<h2>Findings ({html.escape(head)})</h2>" in doc
    for f in found:
        saving = saving_text(f, none_line).strip()
        assert html.escape(saving) in doc


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_the_host_table_renders_in_chromium(tmp_path: Path) -> None:
    """The host table's section renders: in the DOM after the scripts ran, and in a
    screenshot that is not blank."""
    out = tmp_path / "r.html"
    assert main(["analyze", "--example", "--html", str(out), "-q"]) == 0
    assert "What the launching thread was inside during host_bound" in _dom(out)
    shot = tmp_path / "shot.png"
    assert CHROMIUM is not None
    subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
         "--window-size=1200,4000", "--virtual-time-budget=20000", out.as_uri()],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    assert shot.stat().st_size > 10_000  # a drawn page, not an empty canvas
