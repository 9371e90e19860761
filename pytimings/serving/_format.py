"""Aligned plain-text tables for the serving commands (first column left, others right)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from pytimings.console.text import table


def fmt_num(x: float | int | None, digits: int = 2) -> str:
    """A number for a table cell: "-" when missing or NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, int):
        return str(x)
    return f"{x:.{digits}f}"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """First column left, the others right, headers underlined."""
    return "\n".join(table(headers, rows, "l" + "r" * (len(headers) - 1)))
