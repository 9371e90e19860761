"""``pytimings report`` without ``--html``: the report's metrics table and notes as text
(the same cells as the HTML page's table, from :mod:`pytimings.report.serving_html`), and
for a joined recording the decomposition of client TTFT per level and its slowest requests."""

from __future__ import annotations

from collections.abc import Sequence

from pytimings.report.serving_html import STATS, findings_lines, metric_cells, notes
from pytimings.serving._format import format_table
from pytimings.serving.join import render, render_slowest
from pytimings.serving.sources import SLOWEST, SourceResult
from pytimings.serving.trend import MEMORY_HEAD, drift_table


def render_text(
    results: Sequence[SourceResult], definition: str, price: tuple[float, int] | None = None
) -> str:
    headers = ["run", "conc", "completed", "failed", "req/s", "out tok/s"]
    headers += [f"{name} {q}" for _, name in STATS for q in ("mean", "p50", "p99")]
    if price is not None:
        headers.append("USD/Mtok")
    rows = [metric_cells(r, lv, price) for r in results for lv in r.levels]
    lines = [format_table(headers, rows), *notes(results, definition, price)]
    lines += ["", *findings_lines(results)]
    drift = [row for r in results for row in r.drift]
    if drift:
        lines += ["", drift_table(drift)]
    mem = [row for r in results for row in r.memory_drift]
    if mem:
        lines += ["", drift_table(mem, MEMORY_HEAD)]
    for r in results:
        j = r.source.joined
        if j is not None:
            lines += ["", f"{r.source.label} joined with {j.run_label}", render(j.doc, j.clock),
                      render_slowest(j.doc, SLOWEST)]  # fmt: skip
    return "\n".join(lines)
