"""A benchmark's result: header (every choice made), rows, alpha-beta fits, matrices and
notes; rendered as an aligned text table, JSON (schema ``pytimings.bench/1``) or a plot.

JSON ``pytimings.bench/1``: ``{"schema", "bench": copy|latency|collective|kv, "header": {choice
or version: value}, "rows": [{column: value}], "fits": [{group columns..., "alpha_us",
"beta_gbps", "r2", "n_points"}], "matrices": [{"name", "unit", "labels", "values": rows of
src -> columns of dst, null where not measured}], "notes": [str]}``. Sizes are bytes
(``size_bytes``), times microseconds (``*_us``), bandwidths 1e9 bytes/s (``*_gbps``);
non-finite numbers are written as null.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pytimings.bench.fit import fit_alpha_beta
from pytimings.console import text
from pytimings.errors import UsageError, install_hint
from pytimings.fileout import save_figure, write_text

SCHEMA = "pytimings.bench/1"


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    fmt: str = ""  # format spec applied to the value, e.g. ".2f"


@dataclass
class Matrix:
    """A square src(row) x dst(column) matrix, as nvbandwidth prints them; None = not measured."""

    name: str
    unit: str
    labels: list[str]
    values: list[list[float | None]]


@dataclass
class BenchReport:
    bench: str
    header: dict[str, Any]
    columns: list[Column]
    rows: list[dict[str, Any]] = field(default_factory=list)
    fits: list[dict[str, Any]] = field(default_factory=list)
    matrices: list[Matrix] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "bench": self.bench,
            "header": self.header,
            "rows": [{k: _finite(v) for k, v in row.items()} for row in self.rows],
            "fits": [{k: _finite(v) for k, v in f.items()} for f in self.fits],
            "matrices": [
                {"name": m.name, "unit": m.unit, "labels": m.labels, "values": m.values}
                for m in self.matrices
            ],
            "notes": self.notes,
        }


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def add_fits(
    report: BenchReport, group_keys: Sequence[str], x: str = "size_bytes", y: str = "time_us"
) -> None:
    """Fit time = alpha + bytes/beta per group of rows sharing ``group_keys``."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in report.rows:
        if row.get(y) is not None:
            groups.setdefault(tuple(row[k] for k in group_keys), []).append(row)
    for key, rows in groups.items():
        fit = fit_alpha_beta([r[x] for r in rows], [r[y] for r in rows])
        label = dict(zip(group_keys, key, strict=True))
        if fit is None:
            report.notes.append(f"no alpha-beta fit for {_label(label)}: fewer than two sizes")
            continue
        if fit.free_alpha_us is not None:
            report.notes.append(
                f"{_label(label)}: latency below what this sweep resolves (the free fit's "
                f"{fit.free_alpha_us:.2f} µs is negative): fitted through 0, alpha 0"
            )
        if math.isinf(fit.beta_gbps):
            report.notes.append(
                f"{_label(label)}: time did not grow with size over this sweep, "
                "so the fit leaves bandwidth undetermined (beta inf/null)"
            )
        report.fits.append(
            {
                **label,
                "alpha_us": fit.alpha_us,
                "beta_gbps": fit.beta_gbps,
                "r2": fit.r2,
                "n_points": fit.n_points,
            }
        )


def _label(group: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in group.items())


def _cell(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return format(value, fmt) if fmt else str(value)


def render_table(columns: Sequence[Column], rows: Sequence[dict[str, Any]]) -> str:
    cells = [[c.title for c in columns]]
    cells += [[_cell(row.get(c.key), c.fmt) for c in columns] for row in rows]
    return "\n".join(
        text.table(cells[0], cells[1:], "r" * len(columns), underline=False, strip=False)
    )


def render_text(report: BenchReport) -> str:
    out = [f"# pytimings bench {report.bench} ({SCHEMA})"]
    out += [f"# {k}: {_header_value(v)}" for k, v in report.header.items()]
    if report.rows:
        out += ["", render_table(report.columns, report.rows)]
    for m in report.matrices:
        out += ["", f"{m.name} ({m.unit}), src(row) -> dst(column)"]
        cols = [Column("src", "")] + [Column(str(i), lab, ".2f") for i, lab in enumerate(m.labels)]
        rows = [
            {"src": lab, **{str(j): v for j, v in enumerate(vals)}}
            for lab, vals in zip(m.labels, m.values, strict=True)
        ]
        out.append(render_table(cols, rows))
    if report.fits:
        keys = [k for k in report.fits[0] if k not in ("alpha_us", "beta_gbps", "r2", "n_points")]
        cols = [Column(k, k) for k in keys] + [
            Column("alpha_us", "alpha(µs)", ".2f"),
            Column("beta_gbps", "beta(GB/s)", ".2f"),
            Column("r2", "R2", ".4f"),
            Column("n_points", "sizes"),
        ]
        out += [
            "",
            "alpha-beta fit, time = alpha + bytes/beta (least squares over the sweep)",
            render_table(cols, report.fits),
        ]
    out += [f"note: {n}" for n in report.notes]
    return "\n".join(out)


def _header_value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def write_json(report: BenchReport, path: str | os.PathLike[str]) -> None:
    write_text(path, json.dumps(report.to_json(), indent=1, allow_nan=False) + "\n", "--json")


def write_plot(
    report: BenchReport,
    path: str | os.PathLike[str],
    y: str,
    group_keys: Sequence[str],
    ylabel: str,
) -> None:
    """Bandwidth (or time) against message size, one line per group, log-log axes."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UsageError(
            f"--plot needs matplotlib, which is not installed: {install_hint('plot')}"
        ) from exc
    groups: dict[str, list[tuple[int, float]]] = {}
    for row in report.rows:
        if row.get(y) is not None and row[y] > 0:
            label = ", ".join(f"{k}={row[k]}" for k in group_keys)
            groups.setdefault(label, []).append((row["size_bytes"], row[y]))
    if not groups:
        raise UsageError(f"--plot {os.fspath(path)}: no rows with {y} to plot")
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, points in groups.items():
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel(ylabel)
    ax.set_title(f"pytimings bench {report.bench}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    try:
        save_figure(fig, path, "--plot")
    finally:
        plt.close(fig)
