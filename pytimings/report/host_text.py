"""The host sections of ``pytimings analyze``'s text (and its HTML page): what the
launching thread was inside during each device's host_bound time, and with ``--by`` the
self time per host activity over each kind of window."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pytimings.analysis.finding import pct
from pytimings.analysis.host import summed
from pytimings.analysis.result import Attribution, percentiles
from pytimings.console.text import duration, table
from pytimings.model.trace import ACTIVITY_KIND_NAMES

TOP = 8  # activities shown per device / per window kind
NAME_WIDTH = 70


def _name(s: str) -> str:
    return s if len(s) <= NAME_WIDTH else s[: NAME_WIDTH - 3] + "..."


@dataclass
class HostSection:
    """One host table: its heading, column names, alignment (``l``/``r`` per column) and
    rows of text cells."""

    heading: str
    head: list[str]
    align: str
    rows: list[list[str]]

    def lines(self) -> list[str]:
        return ["", self.heading, *table(self.head, self.rows, self.align)]


def host_bound_lines(a: Attribution) -> list[str]:
    """:func:`host_bound_section` as text lines (none when it is empty)."""
    section = host_bound_section(a)
    return section.lines() if section else []


def host_window_lines(a: Attribution) -> list[str]:
    """:func:`host_window_sections` as text lines."""
    return [line for section in host_window_sections(a) for line in section.lines()]


def host_bound_section(a: Attribution) -> HostSection | None:
    """Per device: the top host activities of its host_bound time (kind, name, time,
    share of that device's host_bound); None when no device has host_bound time."""
    w, strings = a.windows, a.trace.strings
    charges = a.host.bound_by_activity
    keys = sorted({(int(r), int(d)) for r, d in zip(w["rank"], w["device"], strict=False)})
    rows = []
    for r, d in keys:
        mine = np.flatnonzero((w["rank"] == r) & (w["device"] == d))
        hb = int(w["host_bound_ns"][mine].sum())
        if hb == 0:
            continue
        top = summed(charges, strings, mine)
        tag = f"r{r} GPU {d}" if len({k[0] for k in keys}) > 1 else f"GPU {d}"
        cols = (top[c][:TOP].tolist() for c in ("kind", "name", "ns"))
        for k, n, ns in zip(*cols, strict=True):
            rows.append(
                [tag, ACTIVITY_KIND_NAMES[k], _name(strings[n]), duration(ns), pct(ns / hb)]
            )
    if not rows:
        return None
    return HostSection(
        "What the launching thread was inside during host_bound (innermost activity)",
        ["device", "kind", "name", "time", "share"],
        "lllrr",
        rows,
    )


def host_window_sections(a: Attribution) -> list[HostSection]:
    """With ``--by``: per window name, self time per host activity over its host windows
    (mean, p50, p99; a window without the activity counts 0), the largest means first.
    Without (a trace with no GPU ops): the same per thread, over its whole extent."""
    hw, strings = a.host.windows, a.trace.strings
    charges = a.host.by_activity
    out: list[HostSection] = []
    if a.by is None:  # a thread per host window; its rank too where there are several
        ranks = hw["rank"].tolist()
        several = len(set(ranks)) > 1
        groups = [
            (f"thread '{n}'" + (f" of rank {r}" if several else ""), np.array([i]))
            for i, (n, r) in enumerate(zip(hw["name"].tolist(), ranks, strict=True))
        ]
    else:
        groups = [(n, np.flatnonzero(hw["name"] == n)) for n in sorted(set(hw["name"].tolist()))]
    for wname, mine in groups:
        top = summed(charges, strings, mine)
        top = top.take(np.arange(min(TOP, len(top))))
        sel = charges.take(np.flatnonzero(np.isin(charges["row"], mine)))
        at = np.searchsorted(mine, sel["row"])  # mine is sorted: each charge's window
        rows = []
        for k, n in zip(top["kind"].tolist(), top["name"].tolist(), strict=True):
            per = np.zeros(mine.size, dtype=np.int64)
            hit = (sel["kind"] == k) & (sel["name"] == n)
            per[at[hit]] = sel["ns"][hit]
            p = percentiles(per)
            rows.append([ACTIVITY_KIND_NAMES[k], _name(strings[n]), duration(p["mean"]),
                         duration(p["p50"]), duration(p["p99"])])  # fmt: skip
        length = percentiles(hw["window_ns"][mine])
        head = (
            f"Host time of {wname} ({duration(length['mean'])} from its first activity "
            "to its last; self time per innermost activity)"
            if a.by is None
            else f"Host time per {wname} window ({mine.size} windows, mean "
            f"{duration(length['mean'])}; self time per innermost activity)"
        )
        out.append(HostSection(head, ["kind", "name", "mean", "p50", "p99"], "llrrr", rows))
    return out
