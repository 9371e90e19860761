from __future__ import annotations

import pytest

from pytimings.bench.sizes import format_size, parse_size, parse_sweep, size_sweep
from pytimings.errors import UsageError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8", 8),
        ("4K", 4096),
        ("4k", 4096),
        ("16M", 16 << 20),
        ("1G", 1 << 30),
        ("2KiB", 2048),
        ("3KB", 3072),
        ("1T", 1 << 40),
        (" 64 ", 64),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "K", "1.5M", "-4K", "4X", "4 K M"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(UsageError, match="expected bytes"):
        parse_size(text)


def test_sweep_is_geometric_and_inclusive() -> None:
    assert parse_sweep("4K:1G") == [4096 << i for i in range(19)]
    assert size_sweep(8, 1 << 30, 2)[-1] == 1 << 30
    assert size_sweep(8, 100, 4) == [8, 32]  # end not on the grid: stops below it
    assert parse_sweep("1M") == [1 << 20]


@pytest.mark.parametrize(
    ("text", "factor", "match"),
    [
        ("1G:4K", 2, "ends below"),
        ("0:4K", 2, "at least 1"),
        ("4K:1M", 1, "factor"),
        ("1:2:3", 2, "BEGIN:END"),
    ],
)
def test_bad_sweeps(text: str, factor: int, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        parse_sweep(text, factor)


def test_format_size_roundtrips() -> None:
    for n in (1, 8, 1000, 1536, 4096, 3 << 20, 1 << 30):
        assert parse_size(format_size(n)) == n
    assert format_size(4096) == "4K"
