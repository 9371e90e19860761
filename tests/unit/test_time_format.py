"""The one time formatter of the text tables (issue 46: ops printed '264220.0 µs')."""

from __future__ import annotations


def test_one_time_formatter_picks_the_unit_by_magnitude() -> None:
    from pytimings.analysis.finding import ms

    assert [ms(x) for x in (40_800, 264_220_000, 9_999_000_000, 12_345_000_000, -50_000)] == [
        "40.8 µs", "264.22 ms", "9999.00 ms", "12.35 s", "-50.0 µs",
    ]  # fmt: skip
