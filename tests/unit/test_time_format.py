"""The one time formatter of the text tables (issue 46: ops printed '264220.0 µs')."""

from __future__ import annotations

import math

from pytimings.console.text import duration


def test_one_time_formatter_picks_the_unit_by_magnitude() -> None:
    assert [duration(x) for x in (40_800, 264_220_000, 9_999_000_000, 12_345_000_000, -50_000)] == [
        "40.8 µs", "264.22 ms", "9999.00 ms", "12.35 s", "-50.0 µs",
    ]  # fmt: skip


def test_a_statistic_without_samples_is_a_dash() -> None:
    assert duration(math.nan) == "-"
