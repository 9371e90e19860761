"""Message sizes: ``4K``/``1M``/``1G`` suffixes (powers of 1024, as nccl-tests and nvbandwidth
read them) and geometric sweeps ``begin:end`` with a multiplication factor."""

from __future__ import annotations

import re

from pytimings.errors import UsageError

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str, what: str = "size") -> int:
    """``"4K"`` -> 4096. Integers only (a size is a whole number of bytes)."""
    m = _SIZE.match(text)
    if m is None:
        raise UsageError(f"{what} {text!r}: expected bytes like 8, 4K, 16M or 1G")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def size_sweep(begin: int, end: int, factor: int = 2, what: str = "sizes") -> list[int]:
    """begin, begin*factor, ... up to and including end (nccl-tests' -b/-e/-f)."""
    if begin <= 0:
        raise UsageError(f"{what}: the smallest value must be at least 1, got {begin}")
    if end < begin:
        raise UsageError(f"{what}: range {begin}:{end} ends below where it begins")
    if factor < 2:
        raise UsageError(f"{what}: factor must be an integer >= 2, got {factor}")
    sizes = []
    size = begin
    while size <= end:
        sizes.append(size)
        size *= factor
    return sizes


def parse_sweep(text: str, factor: int = 2, what: str = "--sizes") -> list[int]:
    """``"4K:1G"`` -> [4096, 8192, ..., 1 GiB]; a single size ``"1M"`` is a sweep of one."""
    parts = text.split(":")
    if len(parts) == 1:
        size = parse_size(parts[0], what)
        if size < 1:
            raise UsageError(f"{what} {text!r}: a size must be at least 1 byte")
        return [size]
    if len(parts) == 2:
        return size_sweep(parse_size(parts[0], what), parse_size(parts[1], what), factor, what)
    raise UsageError(f"{what} {text!r}: expected BEGIN:END such as 4K:1G, or one value")


def format_size(nbytes: int) -> str:
    """Shortest exact K/M/G form: 4096 -> '4K', 1536 -> '1536'."""
    for suffix in ("T", "G", "M", "K"):
        unit = _UNITS[suffix]
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit}{suffix}"
    return str(nbytes)
