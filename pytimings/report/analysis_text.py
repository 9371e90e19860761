"""``pytimings analyze`` as text: where each window's time went per device, the per-window
statistics, the slowest windows, launch latency, collectives and the findings."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.analysis.finding import Finding, pct, plural
from pytimings.analysis.partition import LABELS
from pytimings.analysis.result import Attribution
from pytimings.analysis.savings import NO_FIX_NOTE
from pytimings.console.text import duration, table
from pytimings.report.host_text import host_bound_lines, host_window_lines


def render_attribution(a: Attribution, findings: Sequence[Finding], paths: Sequence[str]) -> str:
    """``a`` as text, ``findings`` (ranked) at its end; ``paths``: the files analysed."""
    w = a.windows
    out: list[str] = []
    names = ", ".join(Path(p).name for p in paths)
    scope = (
        f"by {a.by}: {plural(len(w), 'window entry', 'window entries')}" if a.by else "whole trace"
    )
    if a.by or len(a.host.windows):
        scope += f", {plural(len(a.host.windows), 'host window')}"
    out.append(f"pytimings analyze  {names}  ({scope})")
    dropped = {k: v for k, v in a.trace.dropped.items() if v}
    if a.ignored:
        ignored = ", ".join(f"{k} {v}" for k, v in a.ignored.items())
        out.append(f"ignored by the partition: {ignored}")
    if dropped:
        out.append(
            "not represented by the loader: "
            + ", ".join(f"{k} {v}" for k, v in sorted(dropped.items()))
        )
    if len(w) == 0:  # a CPU-only trace: the host windows are the answer
        out += [
            "",
            "The trace has no GPU ops: the host view of each window only."
            if a.by
            else "The trace has no GPU ops: the host view of each thread over the whole trace "
            "(--by NAME: one window per instance of a range).",
        ]
        out += host_window_lines(a)
        out += _finding_lines(findings)
        return "\n".join(out)
    # per device
    keys = sorted({(int(r), int(d)) for r, d in zip(w["rank"], w["device"], strict=False)})
    header = ["label"]
    for r, d in keys:
        tag = f"r{r} GPU {d}" if len({k[0] for k in keys}) > 1 else f"GPU {d}"
        header += [tag, "share"]
    rows = []
    for lab in ("window", *LABELS):
        row = [lab]
        for r, d in keys:
            m = (w["rank"] == r) & (w["device"] == d)
            v = int(w[f"{lab}_ns"][m].sum())
            tot = max(1, int(w["window_ns"][m].sum()))
            row += [duration(v), pct(v / tot)]
        rows.append(row)
    out += ["", "Where the time went (per device, all windows)"]
    out += table(header, rows, "l" + "rr" * len(keys))
    out += host_bound_lines(a)
    if a.by is not None:
        out += per_window_lines(a)
        out += host_window_lines(a)
    slow = a.slowest(5)
    t0 = int(w["start_ns"].min()) if len(w) else 0
    payload = a.trace.ranges["payload"]

    def label(s: dict[str, Any]) -> str:  # its number is --window N's and the findings'
        rr = int(a.window_range_rows[s["row"]])
        if rr >= 0 and not np.isnan(payload[rr]):
            return f"#{s['index']} {s['name']} (payload {payload[rr]:g})"
        return f"#{s['index']} {s['name']}"

    rows = [
        [
            label(s),
            duration(s["start_ns"] - t0),
            str(s["rank"]),
            str(s["device"]),
            duration(s["window_ns"]),
            f"{s['dominant']} ({pct(s['dominant_ns'] / max(1, s['window_ns']))})",
        ]
        for s in slow
    ]
    out += ["", "Slowest windows (#N: the window's number, as --window N and findings count)"]
    out += table(
        ["window", "starts (from 1st)", "rank", "GPU", "length", "dominant label"], rows, "lrrrrl"
    )
    lat: dict[str, Any] = a.launch_latency.summary()
    out += ["", "Launch latency (op start - launch call start)"]
    out.append(
        f"  {plural(lat['count'], 'op')}: p50 {duration(lat['p50'])}, p99 {duration(lat['p99'])}, "
        f"max {duration(lat['max'])}"
        + (f"; {lat['negative']} negative (clock skew)" if lat["negative"] else "")
        + (
            f"; {plural(a.launches.unlinked, 'op')} carry a correlation id no launch call has"
            if a.launches.unlinked
            else ""
        )
    )
    if a.graphs:
        out += ["", "Graph replays (ops run by a CUDA/HIP graph launch)"]
        multi = len({g["rank"] for g in a.graphs}) > 1
        rows = [
            [
                f"r{g['rank']} GPU {g['device']}" if multi else f"GPU {g['device']}",
                f"{g['launches']:,}",
                f"{g['ops']:,}",
                ", ".join(f"{n} {c:,}" for n, c in g["launch_calls"].items()) or "-",
            ]
            for g in a.graphs
        ]
        out += table(["device", "launches", "ops", "launch calls"], rows, "lrrl")
    if a.collectives is not None:
        c = a.collectives
        out += ["", "Collectives across ranks (clocks aligned by collective end times)"]
        rows = []
        for r in sorted(c.clock_offset_ns):
            m = c.table["rank"] == r
            sk = c.table["skew_ns"][m]
            rows.append(
                [
                    str(r),
                    duration(c.clock_offset_ns[r]),
                    duration(float(np.median(sk))) if sk.size else "-",
                    duration(int(c.table["wait_ns"][m].sum())),
                    str(c.last_counts.get(r, 0)),
                    *_exposed_cells(c.exposed, r),
                ]
            )
        head = ["rank", "clock offset", "median skew", "wait", "last"]
        head += ["exposed", "waiting", "transfer"]
        out += table(head, rows, "r" * len(head))
    out += _bandwidth_lines(a)
    out += _finding_lines(findings)
    return "\n".join(out)


MAX_NAME_TABLES = 8  # more range names under one --by pattern: one pooled table, named


def per_window_lines(a: Attribution) -> list[str]:
    """The label statistics over the --by windows: one table per range name when the
    pattern matched several (a glob over decode_step, layer and scheduler pools unlike
    windows), pooled and said so past MAX_NAME_TABLES names (ProfilerStep#1..#N)."""
    names = np.asarray(a.windows["name"], dtype=object)
    distinct = sorted(set(names.tolist()))
    groups: list[tuple[str, npt.NDArray[np.intp] | None]]
    if len(distinct) == 1:
        groups = [(f"Per {a.by} window", None)]
    elif len(distinct) <= MAX_NAME_TABLES:
        groups = [
            (f"Per {name} window (one of {len(distinct)} ranges --by {a.by} matches)",
             np.flatnonzero(names == name))
            for name in distinct
        ]  # fmt: skip
    else:
        shown = ", ".join(distinct[:3])
        groups = [
            (f"Per {a.by} window, pooled over the {len(distinct)} range names it matches "
             f"({shown}, ...)", None)
        ]  # fmt: skip
    out: list[str] = []
    for title, rows in groups:
        cells = [
            [lab.removesuffix("_ns"), str(st["count"]), duration(st["mean"]), duration(st["p50"]),
             duration(st["p99"]), duration(st["max"])]
            for lab, st in a.per_window_stats(rows).items()
        ]  # fmt: skip
        out += ["", title, *table(["label", "n", "mean", "p50", "p99", "max"], cells, "lrrrrr")]
    return out


def _exposed_cells(exposed: dict[int, dict[str, int]], rank: int) -> list[str]:
    """A rank's exposed collective time, of it waiting for peers and transfer."""
    e = exposed.get(rank, {"exposed_ns": 0, "waiting_ns": 0, "transfer_ns": 0})
    return [duration(e["exposed_ns"]), duration(e["waiting_ns"]), duration(e["transfer_ns"])]


def _gbps(v: float) -> str:
    return "-" if v is None or np.isnan(v) else f"{v:,.2f}"


def _bandwidth_lines(a: Attribution) -> list[str]:
    """Per rank and collective: calls, bytes, nccl-tests algbw and busbw (GB/s)."""
    s = a.comm_bandwidth.summary
    if len(s) == 0:
        return []
    multi = len(set(s["rank"].tolist())) > 1
    rows = []
    for i in range(len(s)):
        sized, calls = int(s["sized_calls"][i]), int(s["calls"][i])
        groups = s["group_sizes"][i]
        rows.append(
            [
                *([str(s["rank"][i])] if multi else []),
                str(s["collective"][i]),
                f"{calls:,}" if sized == calls else f"{calls:,} ({calls - sized:,} no size)",
                f"{int(s['bytes'][i]) / 1e6:,.1f}",
                ", ".join(map(str, groups)) or "-",
                _gbps(float(s["algbw_gbps"][i])),
                _gbps(float(s["busbw_gbps"][i])),
            ]
        )
    head = [*(["rank"] if multi else []), "collective", "calls", "MB", "ranks", "algbw", "busbw"]
    return [
        "",
        "Collectives: bandwidth (nccl-tests algbw = bytes / time, busbw = algbw x bus factor; "
        "GB/s)",
        *table(head, rows, ("r" if multi else "") + "lrrrrr"),
    ]


def savings_head(found: Sequence[Finding]) -> tuple[str, str | None]:
    """The findings' heading, and the one line that says why no saving is shown when the
    replay gives none (its reasons; None when some finding has a saving)."""
    if any(f.saving_ns is not None for f in found):
        return "capture findings first, then by what fixing each saves, else by loss", None
    why = sorted(
        {str(f.evidence["saving_note"]) for f in found if f.evidence.get("saving_note")}
        - {NO_FIX_NOTE}
    )
    return "capture findings first, then by loss", (
        "No saving shown: " + ("; ".join(why) if why else f"{NO_FIX_NOTE} for any finding")
    )


def saving_text(f: Finding, none_line: str | None) -> str:
    """What a finding's line adds about its saving: the replayed saving with its caveat, or
    why there is none (unless the one line above says it for all)."""
    note = f.evidence.get("saving_note")  # e.g. the saving is a lower bound: say so
    if f.saving_ns is not None:
        return f" (fixing it saves {duration(f.saving_ns)}{f'; {note}' if note else ''})"
    if none_line is not None or not note or note == NO_FIX_NOTE:
        return ""
    return f" ({note})" if note.startswith("no saving") else f" (saving unknown: {note})"


def _finding_lines(found: Sequence[Finding]) -> list[str]:
    if not found:  # a line that says so, not a header over nothing
        return ["", "Findings: none (no loss the rules look for is large enough to name)"]
    head, none_line = savings_head(found)
    out = ["", f"Findings ({head})"]
    if none_line is not None:
        out += textwrap.wrap(none_line, width=100, subsequent_indent="   ")
    for i, f in enumerate(found, 1):
        out += textwrap.wrap(
            f"{i}. [{f.layer}] {f.title}{saving_text(f, none_line)}",
            width=100,
            subsequent_indent="   ",
        )
    return out
