"""The ``pytimings.diff/1`` document (:mod:`pytimings.analysis.diff`) as text and as one
self-contained HTML page (plain tables, no scripts)."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

from pytimings.analysis.diff import SIGNIFICANT, TOO_FEW_WINDOWS
from pytimings.analysis.memory import gib
from pytimings.console.text import duration, signed_duration, table
from pytimings.ingest.names import short_kernel_name
from pytimings.report.html import page
from pytimings.report.ops_text import render_graph_replays

SECTIONS = ("labels", "kernels", "ops", "op_categories", "host_activities", "collectives")
HEADERS = ["section", "name", "base", "new", "delta", "delta %", "95% CI", "verdict"]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1f}%"


def _ci(row: dict[str, Any]) -> str:
    """The ratio's interval in %, else the difference's in time (a base of 0, or a
    replicate without the op), else none."""
    lo, hi = row["ci_low_pct"], row["ci_high_pct"]
    if lo is not None and hi is not None:
        return f"[{lo:+.1f}%, {hi:+.1f}%]"
    lo, hi = row.get("ci_low_ns"), row.get("ci_high_ns")
    return "-" if lo is None or hi is None else f"[{signed_duration(lo)}, {signed_duration(hi)}]"


def _name(section: str, row: dict[str, Any]) -> str:
    if section == "kernels":
        return short_kernel_name(row["name"], 60)
    if section == "ops":  # an op and its shapes
        text = f"{row['name']} {json.dumps(row['input_dims'])}"
        return text if len(text) <= 60 else text[:59] + "…"
    return str(row["name"])


def _cells(section: str, row: dict[str, Any]) -> list[str]:
    return [
        section, _name(section, row), duration(row["base_ns"]), duration(row["new_ns"]),
        signed_duration(row["delta_ns"]), _pct(row["delta_pct"]), _ci(row), row["verdict"],
    ]  # fmt: skip


def _by_size(rows: Sequence[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    return sorted(rows, key=lambda sr: (-abs(sr[1]["delta_ns"]), sr[0], sr[1]["name"]))


def scope_line(doc: dict[str, Any]) -> str:
    w, f = doc["windows"], doc["files"]
    entries = doc.get("window_entries", w)
    by = (
        f"by {doc['by']}"
        if doc["by"]
        else "whole-trace windows (one per capture: its ranks and devices together)"
    )

    def count(n: int, what: str) -> str:
        return f"{n} {what}{'' if n == 1 else 's'}"

    def side(k: str) -> str:
        more = f" ({entries[k]} device entries)" if entries[k] != w[k] and doc["by"] else ""
        return f"{count(w[k], 'window')}{more} from {count(f[k], 'file')}"

    return (
        f"base: {side('base')}; new: {side('new')}; {by}; a window is one sample (its "
        f"devices together), a verdict needs {doc.get('min_windows', 2)} per side"
    )


def render_text(doc: dict[str, Any], top: int | None = 20) -> str:
    """Significant changes (and ops added or removed) largest first, in time per window;
    everything within noise in one line. ``top``: rows shown per kind (None: all)."""
    top = top if top is not None else len(doc["kernels"]) + len(doc["labels"]) + 1_000_000
    rows = [(s, r) for s in SECTIONS for r in doc.get(s, [])]
    out = [scope_line(doc)]
    if any(r["verdict"] == TOO_FEW_WINDOWS for _, r in rows):
        out.append(
            "A side has a single window: no confidence interval, nothing can be called "
            f"better or worse (verdict '{TOO_FEW_WINDOWS}'). Use --by NAME for one window per "
            "range instance, or give several captures per side."
        )
    shown = _by_size([sr for sr in rows if sr[1]["verdict"] in (*SIGNIFICANT, TOO_FEW_WINDOWS)])
    changed = _by_size([sr for sr in rows if sr[1]["verdict"] in ("added", "removed")])
    noise = [sr for sr in rows if sr[1]["verdict"] == "within noise"]
    title = (
        "changes without a confidence interval"
        if not any(r["verdict"] in SIGNIFICANT for _, r in shown)
        else "significant changes"
    )
    if shown:
        out += ["", f"{title}, largest first (time per window):"]
        out += table(HEADERS, [_cells(s, r) for s, r in shown[:top]], "llrrrrll")
        if len(shown) > top:
            out.append(f"... and {len(shown) - top} more (see --json)")
    else:
        out += ["", "no significant change."]
    if changed:
        out += ["", "only on one side (time per window):"]
        out += table(HEADERS, [_cells(s, r) for s, r in changed[:top]], "llrrrrll")
        if len(changed) > top:
            out.append(f"... and {len(changed) - top} more (see --json)")
    if noise:
        counts = ", ".join(
            f"{sum(1 for s, _ in noise if s == sec)} {sec.replace('_', ' ')}"
            for sec in SECTIONS
            if any(s == sec for s, _ in noise)
        )
        big_s, big = _by_size(noise)[0]
        out += [
            "",
            f"within noise: {counts} (largest: {_name(big_s, big)} "
            f"{signed_duration(big['delta_ns'])}, {_pct(big['delta_pct'])})",
        ]
    out += _graph_lines(doc.get("op_attribution") or {})
    out += _memory_lines(doc.get("memory") or [])
    return "\n".join(out)


def _graph_lines(sides: dict[str, dict[str, Any]]) -> list[str]:
    """Per side with graph replays: what its captures charged, and their refusals."""
    out = []
    for side in ("base", "new"):
        lines = render_graph_replays(sides[side]) if side in sides else []
        if lines:
            out += ["", f"{side}: {lines[0]}", *lines[1:]]
    return out


def _memory_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Peak allocated per device, base -> new, and the op whose live bytes changed most."""
    out = ["", "device memory (peak allocated, base -> new):"] if rows else []
    for r in rows:
        b, n = r["base_peak_allocated_bytes"], r["new_peak_allocated_bytes"]
        line = f"  {r['device']}: {'-' if b is None else gib(b)} -> {'-' if n is None else gib(n)}"
        if r["delta_bytes"] is not None:
            line += f" ({'+' if r['delta_bytes'] >= 0 else '-'}{gib(abs(r['delta_bytes']))})"
        top = r["live_at_peak_by_op"][0] if r["live_at_peak_by_op"] else None
        if top and top["delta_bytes"]:
            sign = "+" if top["delta_bytes"] > 0 else "-"
            line += f"; most changed at the peak: {top['name'] or top['kind']} "
            line += f"{sign}{gib(abs(top['delta_bytes']))}"
        out.append(line)
    return out


def _html_table(section: str, rows: Sequence[dict[str, Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS[1:])
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in _cells(section, r)[1:]) + "</tr>"
        for r in rows
    )
    return f'<table class="metrics"><tr>{head}</tr>{body}</table>'


def render_html(doc: dict[str, Any], title: str, top: int = 30) -> str:
    """The label deltas with their intervals and the ``top`` largest kernel deltas."""
    kernels = [r for _, r in _by_size([("kernels", r) for r in doc["kernels"]])][:top]
    sides = "".join(
        f"<li>{side}: {html.escape(', '.join(doc[side]))}</li>"
        for side in ("base", "new")
        if doc.get(side)
    )
    body = [
        f"<h1>{html.escape(title)}</h1>",
        f'<ul class="note">{sides}</ul>' if sides else "",
        f"<p>{html.escape(scope_line(doc))}</p>",
        '<p class="note">Means per window; 95% bootstrap interval of the delta as % of the '
        "base mean (in time where the ratio has none: a base of 0, or a resample without the "
        "op); less time is better.</p>",
        "<h2>Labels</h2>",
        _html_table("labels", doc["labels"]),
        f"<h2>Kernels and memory ops (largest {len(kernels)} deltas)</h2>",
        _html_table("kernels", kernels),
    ]
    ops = [r for _, r in _by_size([("ops", r) for r in doc.get("ops", [])])][:top]
    if ops:
        body += [f"<h2>Ops by shape (largest {len(ops)} deltas)</h2>", _html_table("ops", ops)]
    if doc.get("op_categories"):
        body += ["<h2>Op categories</h2>", _html_table("op_categories", doc["op_categories"])]
    if doc["collectives"]:
        body += ["<h2>Collectives</h2>", _html_table("collectives", doc["collectives"])]
    return page(title, "\n".join(body))
