"""A self-contained HTML report of an attribution (plotly, its JavaScript inlined: the file
opens with no network).

Sections: the totals; per-window stacked breakdown of the eight labels (windows in time
order); the GPU time by op category (docs/ops.md), in all and per window; timeline lanes
of the labels per device for one window (the slowest by default); per-rank arrival skew at
collectives; the launch-latency histogram; the host tables (what the launching thread was
inside during host_bound, the host windows' self time per activity); the findings with
their savings and caveats, as the text gives them.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pytimings.analysis.finding import Finding, plural
from pytimings.analysis.memory import device_groups, levels
from pytimings.analysis.op_table import OpTable
from pytimings.analysis.partition import LABELS
from pytimings.analysis.result import Attribution
from pytimings.errors import UsageError, install_hint
from pytimings.fileout import write_text
from pytimings.model.samples import TelemetrySamples
from pytimings.report.analysis_text import saving_text, savings_head
from pytimings.report.host_text import HostSection, host_bound_section, host_window_sections
from pytimings.report.segments import label_segments

if TYPE_CHECKING:
    import plotly.graph_objects as go

COLORS = {
    "compute": "#2ca02c",
    "comm_overlapped": "#17becf",
    "comm_exposed": "#d62728",
    "memory": "#9467bd",
    "host_bound": "#ff7f0e",
    "launch_overhead": "#bcbd22",
    "device_wait": "#1f77b4",
    "idle_other": "#7f7f7f",
}
# one colour per op category (docs/ops.md), in CATEGORIES order: none of the labels'
# colours, so one colour means one thing across the page (orange was host_bound above the
# categories' memcpy); comm a paler teal than the comm labels it feeds
CATEGORY_COLORS = {
    "gemm": "#393b79",
    "attention": "#e377c2",
    "moe": "#8c564b",
    "norm": "#637939",
    "elementwise": "#c49c94",
    "reduce": "#e7ba52",
    "conv": "#7b4173",
    "comm": "#9edae5",
    "memcpy": "#843c39",
    "memset": "#e7969c",
    "other": "#c7c7c7",
}
CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 1200px; color: #222; }
table { border-collapse: collapse; } td, th { padding: 2px 10px; text-align: right; }
td:first-child, th:first-child { text-align: left; } tr:nth-child(even) { background: #f4f4f4; }
.note { color: #666; } li { margin: 0.4em 0; }
.scroll { overflow-x: auto; } table.metrics td, table.metrics th { white-space: nowrap; }
table.metrics td, table.metrics th { padding: 2px 5px; font-size: 0.9em; }
table.metrics th { white-space: normal; }
table.metrics td:first-child, table.metrics tr:first-child th:first-child {
  position: sticky; left: 0; background: #fff; }
table.metrics tr:nth-child(even) td:first-child { background: #f4f4f4; }
"""


def _go() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise UsageError(f"--html needs plotly: {install_hint('html')}") from None
    return go


def _ms(ns: float) -> float:
    return float(ns) / 1e6


def _breakdown(a: Attribution) -> go.Figure:
    w = a.windows
    order, x = _window_labels(a)
    bars = [(lab, w[f"{lab}_ns"][order], COLORS[lab]) for lab in LABELS]
    return _stacked(x, bars, "Where each window's time went (time order)", 420)


def _stacked(x: list[str], bars: list[tuple[str, Any, str]], title: str, height: int) -> Any:
    """A stacked bar per window (``x``, time order): per series its name, ns per window
    and colour."""
    go = _go()
    fig = go.Figure()
    for name, ns, color in bars:
        fig.add_bar(name=name, x=x, y=_ms_arr(ns), marker_color=color)
    fig.update_layout(
        barmode="stack",
        title=title,
        yaxis_title="ms",
        height=height,
        bargap=0.05,
        xaxis={"showticklabels": len(x) <= 60},
    )
    return fig


def _window_labels(a: Attribution) -> tuple[Any, list[str]]:
    """The windows in time order and their axis labels."""
    w = a.windows
    order = np.lexsort((w["device"], w["rank"], w["start_ns"]))
    several = len(set(zip(w["rank"].tolist(), w["device"].tolist(), strict=True))) > 1
    x = [  # each window by its number (the text's #N, --window N)
        f"{w['name'][i]} #{int(w['index'][i])}"
        + (f" r{int(w['rank'][i])} GPU{int(w['device'][i])}" if several else "")
        for i in order.tolist()
    ]
    return order, x


def _categories(a: Attribution, table: OpTable) -> go.Figure | None:
    """Each window's GPU busy time split by op category (the exact busy split)."""
    if not table.categories:
        return None
    order, x = _window_labels(a)
    bars = []
    for cat, color in CATEGORY_COLORS.items():
        per = [
            next((c["busy_ns"] for c in table.window_categories[i] if c["category"] == cat), 0)
            for i in order.tolist()
        ]
        if any(per):
            bars.append((cat, per, color))
    return _stacked(x, bars, "The GPU's busy time by op category (time order)", 380)


def _categories_table(table: OpTable) -> str:
    busy = max(1, sum(c["busy_ns"] for c in table.categories))
    rows = "".join(
        f'<tr><td><span style="color:{CATEGORY_COLORS[c["category"]]}">&#9632;</span> '
        f"{html.escape(c['category'])}</td><td>{_ms(c['busy_ns']):.3f}</td>"
        f"<td>{100 * c['busy_ns'] / busy:.1f}%</td><td>{_ms(c['kernel_ns']):.3f}</td></tr>"
        for c in sorted(table.categories, key=lambda c: -c["busy_ns"])
    )
    return (
        "<table><tr><th>op category</th><th>busy ms</th><th>share of busy</th>"
        f"<th>GPU op ms</th></tr>{rows}</table>"
        '<p class="note">busy ms: the time the GPU ran an op of the category, overlapping ops '
        "charged once (to the category listed first in docs/ops.md), so the busy column sums "
        "to the GPU's busy time; GPU op ms: the sum of the category's op durations, "
        "concurrent ops each counted, so it can exceed busy ms.</p>"
    )


def _ms_arr(ns: Any) -> list[float]:
    values: list[float] = (np.asarray(ns, dtype=np.float64) / 1e6).tolist()
    return values


def _lanes(a: Attribution, row: int) -> go.Figure:
    go = _go()
    w = a.windows
    name, rank = w["name"][row], int(w["rank"][row])
    s0, e0 = int(w["start_ns"][row]), int(w["end_ns"][row])
    same = np.flatnonzero(
        (w["name"] == name) & (w["rank"] == rank) & (w["start_ns"] == s0) & (w["end_ns"] == e0)
    )
    segs: dict[str, tuple[list[float], list[float], list[str]]] = {
        lab: ([], [], []) for lab in LABELS
    }
    for i in same.tolist():
        dev = int(w["device"][i])
        s, e, labels = label_segments(a, rank, dev, (s0, e0))
        for a_, b_, k in zip(s.tolist(), e.tolist(), labels.tolist(), strict=True):
            base, length, lane = segs[LABELS[k]]
            base.append((a_ - s0) / 1e3)
            length.append((b_ - a_) / 1e3)
            lane.append(f"rank {rank} GPU {dev}")
    fig = go.Figure()
    for lab, (base, length, lane) in segs.items():
        if not base:
            continue  # a label absent from this window gets no legend entry
        fig.add_bar(
            name=lab,
            y=lane,
            x=length,
            base=base,
            orientation="h",
            marker_color=COLORS[lab],
            hovertemplate="%{base:.1f} µs + %{x:.1f} µs<extra>" + lab + "</extra>",
        )
    fig.update_layout(
        barmode="overlay",
        title=f"Timeline of {name} #{int(w['index'][row])} (rank {rank}, {_ms(e0 - s0):.3f} ms)",
        xaxis_title="µs from the window start",
        legend={"orientation": "h", "y": -0.35 - 0.1 / same.size},
        height=260 + 60 * same.size,
    )
    return fig


def _skew(a: Attribution) -> go.Figure | None:
    c = a.collectives
    if c is None or len(c.table) == 0:
        return None
    go = _go()
    t = c.table
    fig = go.Figure()
    for r in sorted(set(t["rank"].tolist())):
        m = t["rank"] == r
        fig.add_box(y=(t["skew_ns"][m] / 1e3).tolist(), name=f"rank {r}", boxpoints=False)
    fig.update_layout(
        title="Arrival skew at collectives ("
        + (f"straggler: rank {c.straggler})" if c.straggler is not None else "no straggler)"),
        yaxis_title="µs after the first rank",
        showlegend=False,
        height=380,
    )
    return fig


def _latency(a: Attribution) -> go.Figure | None:
    lat = a.launch_latency.latency_ns
    if lat.size == 0:
        return None
    go = _go()
    fig = go.Figure()
    # a grey no label uses: the colours above mean labels
    fig.add_histogram(x=(lat / 1e3).tolist(), nbinsx=80, marker_color="#4d4d4d")
    fig.update_layout(
        title=f"Launch latency, op start - launch call start ({plural(lat.size, 'op')})",
        xaxis_title="µs",
        yaxis_title="ops",
        yaxis_type="log",
        height=360,
    )
    return fig


def _memory(a: Attribution) -> go.Figure | None:
    """Allocated (solid) and reserved (dotted) GiB over time, one pair per device with
    memory events (docs/memory.md)."""
    groups = device_groups(a.trace)
    if not groups:
        return None
    go = _go()
    fig = go.Figure()
    t0 = int(a.trace.mem_events["time"].min())
    for d in a.memory.devices:
        rows = next(
            r for k, dt, dv, r in groups if (k, dt, dv) == (d.rank, d.device_type, d.device)
        )
        level, _, resv = levels(a.trace, rows, d.device_type)
        x = ((a.trace.mem_events["time"][rows] - t0) / 1e6).tolist()
        fig.add_scatter(x=x, y=(level / 2**30).tolist(), name=f"{d.label} allocated",
                        mode="lines", line_shape="hv")  # fmt: skip
        if resv is not None:
            fig.add_scatter(x=x, y=(resv / 2**30).tolist(), name=f"{d.label} reserved",
                            mode="lines", line_shape="hv", line_dash="dot")  # fmt: skip
    fig.update_layout(
        title="Device memory (peaks and who holds them: pytimings memory)",
        xaxis_title="ms after the first memory event",
        yaxis_title="GiB",
        height=380,
    )
    return fig


# (metric, unit, axis) drawn in the telemetry panel: NVML/DCGM samples' power and SM clock,
# an Nsight export's GPU metrics (percent of peak, left; GPC clock, right)
PANEL_METRICS = (("power_w", "W", "y"), ("sm_clock_mhz", "MHz", "y2"),
                 ("sm_active_pct", "%", "y"), ("sm_issue_pct", "%", "y"),
                 ("tensor_active_pct", "%", "y"), ("dram_read_pct", "%", "y"),
                 ("dram_write_pct", "%", "y"), ("gpc_clock_mhz", "MHz", "y2"))  # fmt: skip


def _telemetry(a: Attribution, s: TelemetrySamples) -> go.Figure:
    """Per GPU of the samples: power (W) or its GPU metrics (%), left axis, and SM/GPC clock
    (MHz, right axis) over time, on the trace's clock (docs/telemetry.md)."""
    go = _go()
    fig = go.Figure()
    t0 = min(int(a.windows["start_ns"].min()), int(s.t_ns.min()))
    for gpu in s.gpus():
        for metric, unit, axis in PANEL_METRICS:
            t, v = s.series(gpu, metric)
            if len(t):
                fig.add_scatter(x=((t - t0) / 1e6).tolist(), y=v.tolist(), yaxis=axis,
                                name=f"GPU {gpu} {metric} ({unit})", mode="lines")  # fmt: skip
    what = "power and SM clock" if s.source != "nsys_gpu_metrics" else "Nsight GPU metrics"
    fig.update_layout(
        title=f"GPU telemetry ({what}; per window: pytimings analyze --by)",
        xaxis_title="ms after the first window or sample",
        yaxis_title="W" if s.source != "nsys_gpu_metrics" else "% of peak",
        yaxis2={"title": "MHz", "overlaying": "y", "side": "right"},
        height=380,
    )
    return fig


def _totals_table(a: Attribution) -> str:
    t = a.totals
    win = max(1, t["window_ns"])
    rows = "".join(
        f"<tr><td>{lab}</td><td>{_ms(t[f'{lab}_ns']):.3f}</td>"
        f"<td>{100 * t[f'{lab}_ns'] / win:.1f}%</td></tr>"
        for lab in LABELS
    )
    return (
        "<table><tr><th>label</th><th>ms</th><th>share</th></tr>"
        f"{rows}<tr><th>window</th><th>{_ms(t['window_ns']):.3f}</th><th>100%</th></tr></table>"
    )


def render(
    a: Attribution,
    findings: Sequence[Finding],
    table: OpTable,
    title: str,
    has_events: bool = True,
    telemetry: TelemetrySamples | None = None,
    files: Sequence[str] = (),
) -> str:
    """The report as one HTML document: ``a`` with its ``findings`` and op ``table``
    (:class:`pytimings.session.Analysis` gives them). ``has_events=False`` (an attribution
    reduced from per-rank tasks, without the events) leaves out the timeline lanes, saying so;
    ``telemetry``: the recording's GPU samples, drawn as a panel; ``files``: the inputs,
    listed under the (short) title."""
    if len(a.windows) == 0:
        raise UsageError("--html: the attribution has no windows to draw")
    parts: list[str] = []
    first = True

    def figure(fig: go.Figure | None, missing: str) -> None:
        nonlocal first
        if fig is None:
            parts.append(f'<p class="note">{html.escape(missing)}</p>')
            return
        parts.append(
            fig.to_html(full_html=False, include_plotlyjs=first, config={"responsive": True})
        )
        first = False

    parts.append(f"<h1>{html.escape(title)}</h1>{file_list(files)}")
    scope = (
        f"by {a.by}: {plural(len(a.windows), 'window entry', 'window entries')}"
        if a.by
        else "whole trace"
    )
    parts.append(f"<p>{html.escape(scope)}</p><h2>Totals</h2>{_totals_table(a)}")
    figure(_breakdown(a), "")
    if table.categories:
        parts.append(f"<h2>GPU time by op category</h2>{_categories_table(table)}")
    figure(_categories(a, table), "No GPU op in the windows: no op categories.")
    slowest = int(np.lexsort((a.windows["start_ns"], -a.windows["window_ns"]))[0])
    figure(
        _lanes(a, slowest) if has_events else None,
        "Timeline lanes need the events, which per-rank tasks do not send back; "
        "analyse one rank's file for them.",
    )
    figure(_skew(a), "No collectives matched across ranks (one rank, or no communication).")
    figure(_latency(a), "No GPU op has a known launch call.")
    if has_events:
        figure(_memory(a), "No memory events (profile_memory=True, nsys --cuda-memory-usage).")
    if telemetry is not None:
        figure(_telemetry(a, telemetry), "")
    for section in _host_sections(a):
        parts.append(section)
    found = findings
    head, none_line = savings_head(found)
    items = "".join(  # as the text names them: what fixing each saves, or why not
        f"<li><b>[{html.escape(f.layer)}]</b> {html.escape(f.title)}"
        + (
            f' <span class="note">{html.escape(saving.strip())}</span>'
            if (saving := saving_text(f, none_line))
            else ""
        )
        + "</li>"
        for f in findings
    )
    parts.append(
        f"<h2>Findings ({html.escape(head)})</h2>"
        + (f'<p class="note">{html.escape(none_line)}</p>' if none_line else "")
        + f"<ol>{items}</ol>"
        if items
        else "<h2>Findings: none</h2><p>No loss the rules look for is large enough to name.</p>"
    )
    return page(title, "\n".join(parts))


def _html_table(section: HostSection) -> str:
    """A host table (:mod:`pytimings.report.host_text`) as an HTML section."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in section.head)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td style="text-align:{"left" if al == "l" else "right"}">{html.escape(c)}</td>'
            for c, al in zip(row, section.align, strict=True)
        )
        + "</tr>"
        for row in section.rows
    )
    return (
        f"<h2>{html.escape(section.heading)}</h2>"
        f'<div class="scroll"><table><tr>{head}</tr>{body}</table></div>'
    )


def _host_sections(a: Attribution) -> list[str]:
    """The text's host tables: what the launching thread was inside during host_bound, and
    the host windows' self time per activity."""
    bound = host_bound_section(a)
    return [_html_table(s) for s in ([bound] if bound else []) + host_window_sections(a)]


def file_list(files: Sequence[str]) -> str:
    """The input files under a page's title (the title stays short)."""
    if not files:
        return ""
    items = "".join(f"<li>{html.escape(f)}</li>" for f in files)
    return f'<ul class="note">{items}</ul>'


def page(title: str, body: str) -> str:
    """One HTML document around ``body`` (the report's style inlined)."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head>"
        f"<body>\n{body}\n</body></html>\n"
    )


def write_html(
    a: Attribution,
    findings: Sequence[Finding],
    table: OpTable,
    path: str | os.PathLike[str],
    title: str,
    has_events: bool = True,
    telemetry: TelemetrySamples | None = None,
    files: Sequence[str] = (),
) -> None:
    write_document(render(a, findings, table, title, has_events, telemetry, files), path)


def write_document(doc: str, path: str | os.PathLike[str]) -> None:
    """Write an HTML document; a path that cannot be written is a UsageError naming it.
    A file name that is not UTF-8 (Python keeps its bytes as lone surrogates) is shown with
    replacement characters: writing it failed with UnicodeEncodeError."""
    write_text(path, _utf8(doc), "--html")


def _utf8(text: str) -> str:
    """``text`` with what UTF-8 cannot hold as U+FFFD: the bytes of a non-UTF-8 file name
    are decoded as well as they go, any other lone surrogate replaced."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            raw = text.encode("utf-8", "surrogateescape")  # the name's own bytes back
        except UnicodeEncodeError:
            raw = text.encode("utf-8", "surrogatepass")
        return raw.decode("utf-8", "replace")
    return text
