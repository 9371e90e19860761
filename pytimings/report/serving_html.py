"""A self-contained HTML report of serving runs (plotly, its JavaScript inlined).

Sources are load-generator run files (``pytimings.serving/1``) and pytimings recordings
holding a "requests" table. Every number comes from :mod:`pytimings.serving.metrics`
(``serving_metrics``, per concurrency level over all its rounds) and every CDF sample and
the knee from :mod:`pytimings.serving.compare` (``level_data``, ``sweep``), so the page
agrees with ``pytimings compare`` and the run file's own figures.

Sections: the CDFs of TTFT and ITL (one panel per concurrency level, one curve per run);
the throughput-latency curve over the concurrency levels (output token throughput against
TPOT and ITL p50 and p99, the knee marked); the table of serving metrics with the failed
requests counted by kind (with ``--gpu-price``, the cost per million output tokens); for
soak runs, each interval's TTFT and TPOT over time and the drift verdict of every figure.
A recording is one level, its concurrency the peak number of requests in flight; it has no
window of its own, so its duration is its requests' span.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.errors import UsageError
from pytimings.record.requests import load_requests
from pytimings.report.html import _go, page, write_document
from pytimings.serving._format import fmt_num
from pytimings.serving.compare import level_data, sweep
from pytimings.serving.cost import cost_per_mtok_usd
from pytimings.serving.metrics import ServingMetrics, measured, peak_concurrency, serving_metrics
from pytimings.serving.runfile import Level, Round, Run, load_run
from pytimings.serving.trend import DRIFT_HEADERS, drift_cells, run_drift

# a CDF is drawn through at most this many of its values, each at its exact rank
MAX_CDF_POINTS = 2000
PALETTE = (
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
_ARROW_MAGIC = b"ARROW1"
# where each run's knee label sits, so knees at the same throughput stay readable
_KNEE_TEXT_AT = ("bottom right", "top right", "bottom left", "top left")


@dataclass(frozen=True)
class Source:
    """One input: a run file, or a recording wrapped as a run of one level."""

    label: str
    run: Run
    recorded: bool  # a recording: one level, concurrency = peak in flight, no window


@dataclass(frozen=True)
class LevelResult:
    concurrency: int
    metrics: ServingMetrics
    ttft_ms: npt.NDArray[np.float64]  # per request (CDF samples)
    itl_ms: npt.NDArray[np.float64]  # per gap (vllm) or per request (genai-perf, llmperf)
    warmup_requests: int


@dataclass(frozen=True)
class SourceResult:
    source: Source
    levels: list[LevelResult]
    knee: int | None
    knee_rule: str


def load_source(path: str | os.PathLike[str], label: str) -> Source:
    """A run file or a recording with a "requests" table; TraceFormatError otherwise."""
    where = os.fspath(path)
    try:
        with open(where, "rb") as f:
            head = f.read(len(_ARROW_MAGIC))
    except OSError:
        head = b""  # load_run names the file and the reason
    if head != _ARROW_MAGIC:
        return Source(label, load_run(where), recorded=False)
    records = load_requests(where)
    t0 = min(r.start_ns for r in records)
    t1 = max(max(r.end_ns or r.start_ns, *(r.chunk_ns or [0])) for r in records)
    rounds = [Round(0, t0, t1, records, errors={}, summary={})]
    level = Level(peak_concurrency(records), None, rounds, summary={}, warmup={})
    return Source(label, Run(where, {}, [level]), recorded=True)


def analyse(sources: Sequence[Source], definition: str, knee_pct: float) -> list[SourceResult]:
    out = []
    for s in sources:
        levels = []
        for lv in sorted(s.run.levels, key=lambda x: x.concurrency):
            records = [q for rd in lv.rounds for q in rd.records]
            windows = None if s.recorded else [(rd.start_ns, rd.end_ns) for rd in lv.rounds]
            m = serving_metrics(records, definition, windows=windows)
            if any(measured(rd.records) for rd in lv.rounds):
                d = level_data(lv, definition, s.run.path)
                ttft, itl = d.ttft, d.itl
            else:  # nothing succeeded: the table counts the failures, no curve to draw
                ttft = itl = np.empty(0)
            levels.append(
                LevelResult(lv.concurrency, m, ttft, itl, int(lv.warmup.get("requests", 0)))
            )
        sw = sweep(s.run, definition, knee_pct)
        out.append(SourceResult(s, levels, sw["knee"], sw["knee_rule"]))
    return out


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
    for i, r in enumerate(results):
        for lv in r.levels:
            values = lv.ttft_ms if metric == "ttft" else lv.itl_ms
            if values.size == 0:
                continue
            k = facets.index(
                next(f for f in facets if f[1:] == (r.source.recorded, lv.concurrency))
            )
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
    fig.update_yaxes(title_text="fraction", range=[0, 1.02], col=1)
    fig.update_layout(title=title, height=120 + 300 * rows)
    return fig


def _curve_figure(results: Sequence[SourceResult]) -> Any:
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=["TPOT (time per output token)", "ITL (inter-token latency)"],
        horizontal_spacing=0.08,
    )
    for i, r in enumerate(results):
        lvs = [lv for lv in r.levels if lv.metrics.completed]
        x = [lv.metrics.output_throughput for lv in lvs]
        text = [f"c={lv.concurrency}" for lv in lvs]
        for col, stat in ((1, "tpot"), (2, "itl")):
            for q, dash in (("median", "solid"), ("p99", "dash")):
                y = [getattr(getattr(lv.metrics, stat), q) for lv in lvs]
                name = f"{r.source.label} {'p50' if q == 'median' else 'p99'}"
                fig.add_scatter(
                    x=x,
                    y=y,
                    mode="lines+markers+text" if q == "median" else "lines+markers",
                    text=text if q == "median" else None,
                    textposition="top left",
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
                    annotation_text=f"knee {r.source.label}: c={r.knee}",
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
        cells += [fmt_num(s.mean), fmt_num(s.median), fmt_num(s.p99)]
    if price is not None:
        cells.append(fmt_num(cost_per_mtok_usd(m.output_throughput, *price), 3))
    return cells


def run_cost(r: SourceResult, price: tuple[float, int]) -> float:
    """USD per million output tokens over all of a run's levels (their tokens over their time)."""
    tokens = sum(lv.metrics.output_tokens for lv in r.levels)
    seconds = sum(lv.metrics.duration_s for lv in r.levels)
    return cost_per_mtok_usd(tokens / seconds if seconds > 0 else math.nan, *price)


def _table(results: Sequence[SourceResult], price: tuple[float, int] | None) -> str:
    priced = '<th rowspan="2">USD/Mtok</th>' if price is not None else ""
    head1 = (
        '<tr><th rowspan="2">run</th><th rowspan="2">conc</th><th rowspan="2">completed</th>'
        '<th rowspan="2">failed (by kind)</th><th rowspan="2">req/s</th>'
        '<th rowspan="2">out tok/s</th>'
        + "".join(f'<th colspan="3">{name} (ms)</th>' for _, name in STATS)
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
    parts = [f"<h1>{html.escape(title)}</h1>"]
    figs = [
        _cdf_figure(results, "ttft", "TTFT CDF (time to first token), per concurrency level"),
        _cdf_figure(results, "itl", "ITL CDF (inter-token latency), per concurrency level"),
        _curve_figure(results),
    ]
    if any(lv.intervals for r in results for lv in r.source.run.levels):
        figs.append(_soak_figure(results))
    for k, fig in enumerate(figs):
        parts.append(
            fig.to_html(full_html=False, include_plotlyjs=k == 0, config={"responsive": True})
        )
    notes_html = "".join(
        f'<p class="note">{html.escape(n)}</p>' for n in notes(results, definition, price)
    )
    parts.append(f"<h2>Serving metrics</h2>{_table(results, price)}{notes_html}")
    drift = [d for r in results for d in run_drift(r.source.label, r.source.run)]
    if drift:
        parts.append(f"<h2>Drift over the soak intervals</h2>{_drift_table(drift)}")
    return page(title, "\n".join(parts))


def write_report(
    sources: Sequence[Source],
    path: str | os.PathLike[str],
    title: str,
    definition: str = "vllm",
    knee_pct: float = 10.0,
    price: tuple[float, int] | None = None,
) -> list[SourceResult]:
    results = analyse(sources, definition, knee_pct)
    write_document(render(results, title, definition, price), path)
    return results
