"""The one time formatter of the text tables (issue 46: ops printed '264220.0 µs')."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

from pytimings.console.text import duration


def test_one_time_formatter_picks_the_unit_by_magnitude() -> None:
    assert [duration(x) for x in (40_800, 264_220_000, 9_999_000_000, 12_345_000_000, -50_000)] == [
        "40.8 µs", "264.22 ms", "9999.00 ms", "12.35 s", "-50.0 µs",
    ]  # fmt: skip


def test_a_statistic_without_samples_is_a_dash() -> None:
    assert duration(math.nan) == "-"


PACKAGE = Path(__file__).resolve().parents[2] / "pytimings"
TIME_UNITS = ("ns", "µs", "us", "ms", "s")
POWERS_OF_TEN = {1e3, 1e6, 1e9, 1e-3, 1e-6, 1e-9}
FORMATTER_NAME = re.compile(r"_?(ms|us|ns|(fmt|format)_(ns|us|ms|time|duration|seconds?))")


def _scaled_time_texts(tree: ast.AST) -> list[str]:
    """f-string pieces that print a value scaled by a power of ten followed by a time unit
    ('{x / 1e6:.3f} ms'): a formatter of their own."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.JoinedStr):
            continue
        for cur, nxt in zip(node.values, node.values[1:], strict=False):
            if not (isinstance(cur, ast.FormattedValue) and isinstance(nxt, ast.Constant)):
                continue
            unit = re.match(r" (\w+)\b", str(nxt.value))
            value = cur.value
            if (
                unit
                and unit.group(1) in TIME_UNITS
                and isinstance(value, ast.BinOp)
                and isinstance(value.op, (ast.Div, ast.Mult))
                and isinstance(value.right, ast.Constant)
                and float(value.right.value) in POWERS_OF_TEN
            ):
                found.append(f"line {node.lineno}: {ast.unparse(value)}{nxt.value[:4]}")
    return found


def test_no_other_time_formatter_in_the_package() -> None:
    """Every text that prints a time goes through console.text.duration: no module scales
    ns by hand into a unit, and no function named like a time formatter sits beside it."""
    own = PACKAGE / "console" / "text.py"
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == own:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(PACKAGE.parent)
        offenders += [f"{where} {text}" for text in _scaled_time_texts(tree)]
        offenders += [
            f"{where} def {node.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef)
            and FORMATTER_NAME.fullmatch(node.name)
            and node.returns is not None
            and ast.unparse(node.returns) == "str"  # a formatter, not a unit conversion
        ]
    assert not offenders, offenders
    assert _scaled_time_texts(ast.parse('f"{x / 1e6:.3f} ms"'))  # the scan sees one
