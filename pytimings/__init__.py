"""pytimings: record, attribute and measure where GPU inference latency goes."""

from __future__ import annotations

from pytimings._core import now_ns
from pytimings.errors import PytimingsError, TraceFormatError, UsageError

__version__ = "0.1.0"

__all__ = [
    "PytimingsError",
    "TraceFormatError",
    "UsageError",
    "__version__",
    "now_ns",
]
