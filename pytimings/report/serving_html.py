"""A self-contained HTML report of serving runs (plotly, its JavaScript inlined), drawn from
:func:`pytimings.serving.sources.analyse`'s results (loaded, joined and measured there:
this module only formats), so the page agrees with ``pytimings compare`` and the run file's
own figures.

Sections: the CDFs of TTFT and ITL (one panel per concurrency level, one curve per run);
the throughput-latency curve over the concurrency levels (output token throughput against
TPOT and ITL p50 and p99, the knee marked, point labels placed apart or left out; a CDF
panel's axis is log-scaled when its tail passes 10x its median); the table of serving
metrics (its first column sticky) with the failed requests counted by kind (with
``--gpu-price``, the cost per million output tokens); for soak runs, each interval's
TTFT and TPOT over time and the drift verdict of every figure; for recordings with memory
samples (``pytimings.sample_memory``), the samples over time and the same verdict on them;
for a recording joined with the run file before it, the slowest requests of each level as
timelines of their phases.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.console.text import duration, duration_ms
from pytimings.errors import UsageError
from pytimings.report.html import _go, file_list, page, write_document
from pytimings.serving._format import fmt_num
from pytimings.serving.cost import cost_per_mtok_usd
from pytimings.serving.findings import missing_evidence
from pytimings.serving.findings import render as render_findings
from pytimings.serving.join import render as render_join
from pytimings.serving.join import render_slowest, timeline
from pytimings.serving.metrics import ServingMetrics, measured
from pytimings.serving.sources import SLOWEST, LevelResult, SourceResult, run_cost
from pytimings.serving.trend import DRIFT_HEADERS, DRIFT_RULE, drift_cells

# a CDF is drawn through at most this many of its values, each at its exact rank
MAX_CDF_POINTS = 2000
PALETTE = (
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
# where each run's knee label sits, so knees at the same throughput stay readable
_KNEE_TEXT_AT = ("bottom right", "top right", "bottom left", "top left")


def cdf_points(values: npt.ArrayLike) -> tuple[list[float], list[float]]:
    """Points of the empirical CDF: (value, fraction of values <= it), at most
    MAX_CDF_POINTS of them, each an exact point of the full CDF (ranks evenly spaced,
    the smallest and largest always kept)."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    n = v.size
    ranks = np.arange(n)
    if n > MAX_CDF_POINTS:
        ranks = np.unique(np.linspace(0, n - 1, MAX_CDF_POINTS).round().astype(np.int64))
    return v[ranks].tolist(), ((ranks + 1) / n).tolist()


TAIL_RATIO = 10.0  # a CDF panel's axis is log-scaled when its largest value is this x its median


def wide_tail(values: npt.ArrayLike) -> bool:
    """Whether a panel's largest value exceeds TAIL_RATIO x its median (all values > 0: a
    log axis cannot show the others), so that a linear axis would squeeze the body."""
    v = np.asarray(values, dtype=np.float64)
    return bool(v.size and v.min() > 0 and v.max() > TAIL_RATIO * float(np.median(v)))


# a point label's box as a fraction of its panel's width (per character) and height
LABEL_CHAR_W, LABEL_H = 0.017, 0.05  # a 12 px character in a ~450 px wide panel
LABEL_AT = ("top left", "top right", "bottom left", "bottom right")


def label_box(x: float, y: float, text: str, at: str) -> tuple[float, float, float, float]:
    """``(x0, y0, x1, y1)`` of a label placed ``at`` a point, in panel fractions."""
    w = LABEL_CHAR_W * len(text)
    x0 = x - w if at.endswith("left") else x
    y0 = y if at.startswith("top") else y - LABEL_H
    return x0, y0, x0 + w, y0 + LABEL_H


def label_positions(
    points: Sequence[tuple[float, float, str]],
    y_top: float | None = None,
    knees: Sequence[tuple[float, str, str]] = (),
) -> list[str]:
    """A text position for each point's label (``(x, y, text)``, panel data units) such
    that no two labels overlap, nor a knee's label (``(x, text, at)``: the vertical line's
    annotation, at the panel's top or bottom): the first of LABEL_AT that clears the labels
    placed before it, or "" (label left out; the hover still names it) when none does.
    ``y_top``: the axis' top when other traces reach above the points (the p99 curves)."""
    if not points:
        return []
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    xspan = (max(xs) - min(xs)) or 1.0
    yspan = (y_top if y_top is not None else max(ys)) or 1.0  # the y axis starts at zero
    placed = []
    for x, text, at in knees:  # a knee's label hangs from the panel's top or stands on 0
        vertical, side = at.split()
        top = vertical == "top"
        placed.append(label_box((x - min(xs)) / xspan, float(top), text,
                                f"{'bottom' if top else 'top'} {side}"))  # fmt: skip
    out = []
    for x, y, text in points:
        fx, fy = (x - min(xs)) / xspan, y / yspan
        for at in LABEL_AT:
            a = label_box(fx, fy, text, at)
            if all(a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1] for b in placed):
                placed.append(a)
                out.append(at)
                break
        else:
            out.append("")
    return out


def _facets(results: Sequence[SourceResult]) -> list[tuple[str, bool, int]]:
    """Panels of the CDF figures: (title, recorded, concurrency); run levels first."""
    keys = sorted({(r.source.recorded, lv.concurrency) for r in results for lv in r.levels})
    return [
        (f"recording, peak {c} in flight" if rec else f"concurrency {c}", rec, c) for rec, c in keys
    ]


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _cdf_figure(results: Sequence[SourceResult], metric: str, title: str) -> Any:
    from plotly.subplots import make_subplots

    facets = _facets(results)
    cols = min(4, len(facets))
    rows = math.ceil(len(facets) / cols)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[f[0] for f in facets],
        shared_yaxes=True,
        horizontal_spacing=0.05,
        vertical_spacing=0.25 / rows,
    )
    shown: set[str] = set()
    panel_values: dict[int, list[npt.NDArray[np.float64]]] = {}
    for i, r in enumerate(results):
        for lv in r.levels:
            values = lv.ttft_ms if metric == "ttft" else lv.itl_ms
            if values.size == 0:
                continue
            k = facets.index(
                next(f for f in facets if f[1:] == (r.source.recorded, lv.concurrency))
            )
            panel_values.setdefault(k, []).append(values)
            x, y = cdf_points(values)
            label = r.source.label
            fig.add_scatter(
                x=x,
                y=y,
                mode="lines",
                line={"shape": "hv", "color": _color(i), "width": 2},
                name=label,
                legendgroup=label,
                showlegend=label not in shown,
                meta=[label, lv.concurrency, metric],
                hovertemplate=f"{html.escape(label)}: %{{x:.2f}} ms, %{{y:.1%}} of "
                f"{values.size}<extra>c={lv.concurrency}</extra>",
                row=k // cols + 1,
                col=k % cols + 1,
            )
            shown.add(label)
    fig.update_xaxes(title_text="ms", exponentformat="none")
    for k, vs in panel_values.items():
        if wide_tail(np.concatenate(vs)):
            fig.update_xaxes(type="log", title_text="ms (log)", row=k // cols + 1, col=k % cols + 1)
    fig.update_yaxes(title_text="fraction", range=[0, 1.02], col=1)
    fig.update_layout(title=title, height=120 + 300 * rows)
    return fig


def _knee_text(r: SourceResult) -> str:
    return f"knee {r.source.label}: c={r.knee}"


def _curve_figure(results: Sequence[SourceResult]) -> Any:
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=["TPOT (time per output token)", "ITL (inter-token latency)"],
        horizontal_spacing=0.08,
    )
    runs = [[lv for lv in r.levels if lv.metrics.completed] for r in results]
    knees = [
        (lv.metrics.output_throughput, _knee_text(r), _KNEE_TEXT_AT[i % len(_KNEE_TEXT_AT)])
        for i, (r, lvs) in enumerate(zip(results, runs, strict=True))
        for lv in lvs
        if lv.concurrency == r.knee
    ]
    label_at: dict[tuple[int, str], list[str]] = {}  # (run, stat) -> each p50 point's label place
    for stat in ("tpot", "itl"):
        pts = [(lv.metrics.output_throughput, getattr(lv.metrics, stat).median,
                f"c={lv.concurrency}", i) for i, lvs in enumerate(runs) for lv in lvs]  # fmt: skip
        drawn = [v for lvs in runs for lv in lvs
                 for v in (getattr(lv.metrics, stat).p99, getattr(lv.metrics, stat).median)
                 if math.isfinite(v)]  # fmt: skip
        pos = label_positions([p[:3] for p in pts], max(drawn, default=None), knees)
        for i in range(len(runs)):
            label_at[i, stat] = [a for a, p in zip(pos, pts, strict=True) if p[3] == i]
    for i, r in enumerate(results):
        lvs = runs[i]
        x = [lv.metrics.output_throughput for lv in lvs]
        for col, stat in ((1, "tpot"), (2, "itl")):
            text = [f"c={lv.concurrency}" if a else "" for lv, a in zip(lvs, label_at[i, stat],
                                                                        strict=True)]  # fmt: skip
            for q, dash in (("median", "solid"), ("p99", "dash")):
                y = [getattr(getattr(lv.metrics, stat), q) for lv in lvs]
                name = f"{r.source.label} {'p50' if q == 'median' else 'p99'}"
                fig.add_scatter(
                    x=x,
                    y=y,
                    mode="lines+markers+text" if q == "median" else "lines+markers",
                    text=text if q == "median" else None,
                    textposition=[a or "top left" for a in label_at[i, stat]],
                    line={"color": _color(i), "dash": dash},
                    name=name,
                    legendgroup=name,
                    showlegend=col == 1,
                    meta=[r.source.label, stat, q],
                    hovertemplate="%{x:.1f} tok/s, %{y:.2f} ms<extra>"
                    + html.escape(name)
                    + "</extra>",
                    row=1,
                    col=col,
                )
        if r.knee is not None:
            at = next(lv for lv in lvs if lv.concurrency == r.knee)
            for col in (1, 2):
                fig.add_vline(
                    x=at.metrics.output_throughput,
                    line={"color": _color(i), "dash": "dot", "width": 1.5},
                    annotation_text=_knee_text(r),
                    annotation_position=_KNEE_TEXT_AT[i % len(_KNEE_TEXT_AT)],
                    row=1,
                    col=col,
                )
    fig.update_xaxes(title_text="output token throughput (tok/s)")
    fig.update_yaxes(title_text="ms", rangemode="tozero", exponentformat="none")
    fig.update_layout(
        title="Throughput vs latency across concurrency levels (p50 solid, p99 dashed)",
        height=480,
    )
    return fig


def _memory_figure(results: Sequence[SourceResult]) -> Any:
    """Recordings' memory samples over time: RSS and (when sampled) CUDA-allocated MiB,
    one line each per recording, against minutes since its first sample."""
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1, cols=2, subplot_titles=["RSS", "CUDA allocated"], horizontal_spacing=0.08
    )
    for i, r in enumerate(results):
        m = r.source.memory
        if m is None or not m.t_ns:
            continue
        x = [(t - m.t_ns[0]) / 6e10 for t in m.t_ns]
        series = (("rss", 1, m.rss_bytes), ("cuda_allocated", 2, m.cuda_allocated_bytes))
        for what, col, values in series:
            if all(v is None for v in values):
                continue
            fig.add_scatter(
                x=x,
                y=[None if v is None else v / 2**20 for v in values],
                mode="lines+markers",
                line={"color": _color(i)},
                name=f"{r.source.label} {what}",
                meta=[r.source.label, what],
                hovertemplate="%{x:.2f} min, %{y:.1f} MiB<extra>"
                + html.escape(r.source.label)
                + "</extra>",
                row=1,
                col=col,
            )
    fig.update_xaxes(title_text="minutes since the first sample")
    fig.update_yaxes(title_text="MiB", exponentformat="none")
    fig.update_layout(title="Memory over the recording (pytimings.sample_memory)", height=400)
    return fig


def _soak_figure(results: Sequence[SourceResult]) -> Any:
    """Soak runs over time: each interval's p50 (solid) and p99 (dashed) of TTFT and TPOT,
    one line per run and level, against the interval's midpoint (minutes from the start)."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=["TTFT", "TPOT"], horizontal_spacing=0.08)
    for i, r in enumerate(results):
        for lv in r.source.run.levels:
            ivs = lv.intervals or []
            if not ivs:
                continue
            t0 = ivs[0]["start_ns"]
            x = [((iv["start_ns"] + iv["end_ns"]) / 2 - t0) / 6e10 for iv in ivs]
            for col, stat in ((1, "ttft"), (2, "tpot")):
                for q, dash in (("p50", "solid"), ("p99", "dash")):
                    name = f"{r.source.label} c={lv.concurrency} {q}"
                    fig.add_scatter(
                        x=x,
                        y=[iv[f"{stat}_ms"][q] for iv in ivs],
                        mode="lines+markers",
                        line={"color": _color(i), "dash": dash},
                        name=name,
                        legendgroup=name,
                        showlegend=col == 1,
                        meta=[r.source.label, lv.concurrency, stat, q],
                        hovertemplate="%{x:.1f} min, %{y:.2f} ms<extra>"
                        + html.escape(name)
                        + "</extra>",
                        row=1,
                        col=col,
                    )
    fig.update_xaxes(title_text="minutes since the soak started")
    fig.update_yaxes(title_text="ms", rangemode="tozero", exponentformat="none")
    fig.update_layout(title="Soak: per-interval latency over time", height=440)
    return fig


# the engine series drawn under the latency panel, one row each: (title, unit, series)
ENGINE_ROWS = (
    ("requests in the engine", "requests", ("running", "waiting")),
    ("KV-cache usage", "fraction", ("kv_cache_usage",)),
    ("tokens per second", "tok/s", ("prompt_tokens", "generation_tokens")),
    ("queue time", "s", ("queue_time_p50", "queue_time_p99")),
    ("speculative tokens per second", "tok/s", ("spec_draft_tokens", "spec_accepted_tokens")),
)


def _engine_rows(results: Sequence[SourceResult]) -> list[tuple[str, str, tuple[str, ...]]]:
    have = {k for r in results for lv in r.source.run.levels for k in (lv.engine or {}).get(
        "series", {})}  # fmt: skip
    return [row for row in ENGINE_ROWS if have & set(row[2])]


def _engine_figure(results: Sequence[SourceResult]) -> Any:
    """Each run's requests' TTFT by send time and, below on the same time axis (seconds
    since the run's first measured send), the engine's series scraped during it."""
    from plotly.subplots import make_subplots

    rows = _engine_rows(results)
    fig = make_subplots(
        rows=1 + len(rows), cols=1, shared_xaxes=True, vertical_spacing=0.04,
        subplot_titles=["TTFT per request, at its send time"] + [r[0] for r in rows],
    )  # fmt: skip
    dashes = ("solid", "dash")
    for i, r in enumerate(results):
        levels = [lv for lv in r.source.run.levels if lv.engine is not None]
        recs = [q for lv in levels for rd in lv.rounds for q in measured(rd.records)]
        if not recs:
            continue
        t0 = min(q.start_ns for q in recs)
        fig.add_scatter(
            x=[(q.start_ns - t0) / 1e9 for q in recs],
            y=[(q.chunk_ns[0] - q.start_ns) / 1e6 for q in recs],
            mode="markers", marker={"color": _color(i), "size": 4}, name=f"{r.source.label} TTFT",
            meta=[r.source.label, "ttft"], row=1, col=1,
            hovertemplate="%{x:.2f} s: %{y:.2f} ms<extra>" + html.escape(r.source.label)
            + "</extra>",
        )  # fmt: skip
        for k, (_, _, names) in enumerate(rows):
            for j, name in enumerate(names):
                pts = [p for lv in levels for p in lv.engine["series"].get(name, [])]  # type: ignore[index]
                if not pts:
                    continue
                fig.add_scatter(
                    x=[(t - t0) / 1e9 for t, _ in pts], y=[v for _, v in pts],
                    mode="lines+markers", line={"color": _color(i), "dash": dashes[j % 2]},
                    marker={"size": 3}, name=f"{r.source.label} {name}",
                    meta=[r.source.label, name], row=k + 2, col=1,
                    hovertemplate="%{x:.2f} s: %{y:.3g}<extra>" + html.escape(name) + "</extra>",
                )  # fmt: skip
    fig.update_yaxes(title_text="ms", row=1, col=1)
    for k, (_, unit, _) in enumerate(rows):
        fig.update_yaxes(title_text=unit, rangemode="tozero", row=k + 2, col=1)
    fig.update_xaxes(title_text="seconds since the run's first measured request",
                     row=1 + len(rows), col=1)  # fmt: skip
    fig.update_layout(title="Engine metrics during the run (scraped /metrics)",
                      height=260 + 200 * len(rows))  # fmt: skip
    return fig


def findings_lines(results: Sequence[SourceResult]) -> list[str]:
    """The serving findings of every run (text lines)."""
    found = [f for r in results for f in r.findings]
    runs = [r.source.run for r in results if not r.source.recorded]
    return render_findings(found, None if found else missing_evidence(runs))


PART_COLORS = {"send": "#7f7f7f", "first_token_delivery": "#17becf", "to_last_chunk": "#c7c7c7"}
# the engine's phases: none of the runs' colours (PALETTE), so a colour on the page is a run
# or a phase, never both
PHASE_PALETTE = ("#393b79", "#e7ba52", "#637939", "#843c39", "#7b4173", "#9c9ede", "#cedb9c")


def _phase_panels(results: Sequence[SourceResult]) -> list[tuple[str, int, list[dict[str, Any]]]]:
    return [(r.source.label, conc, rows) for r in results for conc, rows in r.slowest if rows]


def _phase_figure(results: Sequence[SourceResult]) -> Any:
    """Joined recordings: the slowest requests of each level as timelines from the client's
    send (send, each engine phase to the first token, first-token delivery, the rest of the
    stream), one panel per recording and level, one bar per request."""
    from plotly.subplots import make_subplots

    panels = _phase_panels(results)
    fig = make_subplots(
        rows=len(panels),
        cols=1,
        subplot_titles=[
            f"{label}: c={conc}, slowest {len(rows)} by client E2E" for label, conc, rows in panels
        ],
        vertical_spacing=0.3 / len(panels),
    )
    colors: dict[str, str] = {}
    for k, (label, conc, rows) in enumerate(panels):
        segs: dict[str, tuple[list[str], list[float], list[float]]] = {}
        for q in rows:
            for name, t0, d in timeline(q):
                y, base, x = segs.setdefault(name, ([], [], []))
                y.append(str(q["id"]))
                base.append(t0 / 1e6)
                x.append(d / 1e6)
        for name, (y, base, x) in segs.items():
            color = PART_COLORS.get(name) or colors.setdefault(
                name, PHASE_PALETTE[len(colors) % len(PHASE_PALETTE)]
            )
            fig.add_bar(
                y=y, x=x, base=base, orientation="h", name=name, legendgroup=name,
                marker_color=color, showlegend=name not in {t.name for t in fig.data},
                meta=[label, conc, name],
                hovertemplate=f"{html.escape(name)}: %{{x:.2f}} ms from %{{base:.2f}} ms"
                "<extra>%{y}</extra>",
                row=k + 1, col=1,
            )  # fmt: skip
    fig.update_xaxes(title_text="ms since the client sent the request", exponentformat="none")
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(
        title="Per-request phases of the slowest requests (client and engine joined)",
        barmode="overlay",
        height=120 + 260 * len(panels),
    )
    return fig


STATS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E"))


def _errors(m: ServingMetrics) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(m.errors.items())) or "none"


def metric_cells(r: SourceResult, lv: LevelResult, price: tuple[float, int] | None) -> list[str]:
    """One row of the metrics table (plain text): run, conc, completed, failed, req/s,
    out tok/s, mean/p50/p99 of each latency, and USD per million output tokens if priced."""
    m = lv.metrics
    conc = f"{lv.concurrency} (peak)" if r.source.recorded else str(lv.concurrency)
    if r.knee == lv.concurrency:
        conc += " (knee)"
    cells = [r.source.label, conc, str(m.completed), _errors(m), fmt_num(m.request_throughput),
             fmt_num(m.output_throughput, 1)]  # fmt: skip
    for stat, _ in STATS:
        s = getattr(m, stat)
        cells += [duration_ms(s.mean), duration_ms(s.median), duration_ms(s.p99)]
    if price is not None:
        cells.append(fmt_num(cost_per_mtok_usd(m.output_throughput, *price), 3))
    return cells


def _table(results: Sequence[SourceResult], price: tuple[float, int] | None) -> str:
    priced = '<th rowspan="2">USD/Mtok</th>' if price is not None else ""
    head1 = (
        '<tr><th rowspan="2">run</th><th rowspan="2">conc</th><th rowspan="2">completed</th>'
        '<th rowspan="2">failed (by kind)</th><th rowspan="2">req/s</th>'
        '<th rowspan="2">out tok/s</th>'
        + "".join(f'<th colspan="3">{name}</th>' for _, name in STATS)
        + priced
        + "</tr>"
    )
    head2 = "<tr>" + "<th>mean</th><th>p50</th><th>p99</th>" * len(STATS) + "</tr>"
    rows = [
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in metric_cells(r, lv, price)) + "</tr>"
        for r in results
        for lv in r.levels
    ]
    return f'<div class="scroll"><table class="metrics">{head1}{head2}{"".join(rows)}</table></div>'


def _drift_table(rows: Sequence[dict[str, Any]]) -> str:
    """Mann-Kendall verdicts with Sen's slope per figure of each soak level."""
    head = "".join(f"<th>{h}</th>" for h in DRIFT_HEADERS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in drift_cells(r)) + "</tr>"
        for r in rows
    )
    return f'<div class="scroll"><table class="metrics"><tr>{head}</tr>{body}</table></div>'


def notes(
    results: Sequence[SourceResult], definition: str, price: tuple[float, int] | None = None
) -> list[str]:
    """What the table's figures mean and leave out (plain text, one note a line)."""
    out = [
        f"Metric definitions: {definition} (see pytimings.serving.metrics). Failed requests "
        "are counted in the table and enter no figure."
    ]
    for r in results:
        warm = {lv.concurrency: lv.warmup_requests for lv in r.levels if lv.warmup_requests}
        if warm:
            out.append(
                f"{r.source.label}: warmup requests sent before measuring, not in any figure: "
                + ", ".join(f"c={c}: {n}" for c, n in warm.items())
            )
        run = r.source.run
        if not r.source.recorded and not run.fmt.startswith("pytimings.serving"):
            absent = "; ".join(run.config.get("absent", []))
            out.append(f"{r.source.label}: a {run.fmt} result file; absent from it: {absent}.")
        j = r.source.joined
        if j is not None:
            by_time = sum(q["matched_by"] == "time" for q in j.doc["requests"])
            out.append(
                f"{r.source.label}: an engine recording joined with {j.run_label}: "
                f"{j.doc['matched']} requests matched ({by_time} by start time; "
                f"{j.doc['unmatched_client']} of the run's matched none), drawn at the "
                f"run's levels; clock: {j.clock.how}, engine - client = "
                f"{duration(j.clock.offset_ns)} +- {duration(j.clock.uncertainty_ns)}; "
                f"{j.outside} engine requests in no level nor its warm-up, not in any figure."
            )
        if r.source.unjoined is not None:
            out.append(
                f"{r.source.label}: matches no request of {r.source.unjoined} (ids or start "
                "times), so it is not joined with it."
            )
        if r.source.recorded:
            out.append(
                f"{r.source.label}: an engine recording; its concurrency is the peak number "
                "of requests in flight and its duration the span of its requests."
            )
        else:
            knee = f"c={r.knee}" if r.knee is not None else "none"
            out.append(f"{r.source.label}: knee {knee} ({r.knee_rule}).")
        if price is not None:
            out.append(
                f"{r.source.label}: {fmt_num(run_cost(r, price), 3)} USD per million output "
                f"tokens over all levels, at {price[0]:g} USD per GPU hour x {price[1]} GPUs."
            )
    return out


def render(
    results: Sequence[SourceResult],
    title: str,
    definition: str,
    price: tuple[float, int] | None = None,
) -> str:
    """The report as one HTML document."""
    _go()  # a clear error when plotly is missing
    if not any(lv.metrics.completed for r in results for lv in r.levels):
        counts = "; ".join(
            f"{r.source.run.path} c={lv.concurrency}: {_errors(lv.metrics)}"
            for r in results
            for lv in r.levels
        )
        raise UsageError(f"--html: no request succeeded in any input, nothing to draw ({counts})")
    files = [  # a run's label before its file, where the label is not the file's name
        r.source.run.path
        if r.source.label == Path(r.source.run.path).name
        else f"{r.source.label}: {r.source.run.path}"
        for r in results
    ]
    parts = [f"<h1>{html.escape(title)}</h1>{file_list(files)}"]
    figs = [
        _cdf_figure(results, "ttft", "TTFT CDF (time to first token), per concurrency level"),
        _cdf_figure(results, "itl", "ITL CDF (inter-token latency), per concurrency level"),
        _curve_figure(results),
    ]
    if any(lv.engine is not None for r in results for lv in r.source.run.levels):
        figs.append(_engine_figure(results))
    if any(lv.intervals for r in results for lv in r.source.run.levels):
        figs.append(_soak_figure(results))
    if _phase_panels(results):
        figs.append(_phase_figure(results))
    if any(r.source.memory is not None for r in results):
        figs.append(_memory_figure(results))
    for k, fig in enumerate(figs):
        parts.append(
            fig.to_html(full_html=False, include_plotlyjs=k == 0, config={"responsive": True})
        )
    notes_html = "".join(
        f'<p class="note">{html.escape(n)}</p>' for n in notes(results, definition, price)
    )
    parts.append(f"<h2>Serving metrics</h2>{_table(results, price)}{notes_html}")
    lines = findings_lines(results)
    if len(lines) > 1:
        found = "".join(f"<li>{html.escape(line.strip())}</li>" for line in lines[1:])
        parts.append(f"<h2>Serving findings</h2><ul>{found}</ul>")
    else:  # none: the line says which evidence was missing
        parts.append(f'<h2>Serving findings</h2><p class="note">{html.escape(lines[0])}</p>')
    for r in results:  # a joined recording: client TTFT decomposed, as the text gives it
        j = r.source.joined
        if j is not None:
            parts.append(
                f"<h2>TTFT breakdown: {html.escape(r.source.label)} joined with "
                f"{html.escape(j.run_label)}</h2>"
                f"<pre>{html.escape(render_join(j.doc, j.clock))}</pre>"
                f"<pre>{html.escape(render_slowest(j.doc, SLOWEST))}</pre>"
            )
    rule = f'<p class="note">Mann-Kendall test, Sen\'s slope per hour; {DRIFT_RULE}.</p>'
    drift = [row for r in results for row in r.drift]
    if drift:
        parts.append(f"<h2>Drift over the soak intervals</h2>{rule}{_drift_table(drift)}")
    mem = [row for r in results for row in r.memory_drift]
    if mem:
        parts.append(f"<h2>Memory trend over the recordings' samples</h2>{rule}{_drift_table(mem)}")
    return page(title, "\n".join(parts))


def write_report(
    results: Sequence[SourceResult],
    path: str | os.PathLike[str],
    title: str,
    definition: str = "vllm",
    price: tuple[float, int] | None = None,
) -> None:
    write_document(render(results, title, definition, price), path)
