"""Aligned plain-text tables: the one renderer every command's text output uses."""

from __future__ import annotations

import math
from collections.abc import Sequence


def column_widths(lines: Sequence[Sequence[str]]) -> list[int]:
    """The width of each column: its longest cell over ``lines`` (header included)."""
    return [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    align: str,
    *,
    underline: bool = True,
    strip: bool = True,
) -> list[str]:
    """The lines of a table, columns two spaces apart.

    ``align`` has one 'l' (left) or 'r' (right) per column; ``underline`` adds a line of dashes
    under the headers; ``strip`` drops trailing blanks from each line.
    """
    widths = column_widths([headers, *rows])

    def line(cells: Sequence[str]) -> str:
        text = "  ".join(
            c.ljust(w) if a == "l" else c.rjust(w)
            for c, w, a in zip(cells, widths, align, strict=False)
        )
        return text.rstrip() if strip else text

    head = [line(headers), line(["-" * w for w in widths])] if underline else [line(headers)]
    return [*head, *(line(r) for r in rows)]


def duration(ns: float | None) -> str:
    """A time in ns as every text table prints it, the unit chosen by magnitude: µs below
    0.1 ms, ms below 10 s, else s ('40.8 µs', '264.22 ms', '12.35 s'); "-" for None or NaN
    (a statistic without samples)."""
    if ns is None or math.isnan(ns):
        return "-"
    if abs(ns) >= 10e9:
        return f"{ns / 1e9:.2f} s"
    return f"{ns / 1e6:.2f} ms" if abs(ns) >= 100_000 else f"{ns / 1e3:.1f} µs"


def duration_ms(ms: float | None) -> str:
    """:func:`duration` of a time given in ms (the serving metrics' unit)."""
    return duration(None if ms is None else ms * 1e6)


def signed_duration(ns: float) -> str:
    """:func:`duration` with a '+' before a positive time (a change: '+1.20 ms', '-40.8 µs')."""
    return ("+" if ns > 0 else "") + duration(ns)
