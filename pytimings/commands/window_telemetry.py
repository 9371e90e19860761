"""GPU telemetry per window in ``pytimings analyze`` (docs/telemetry.md): when the one trace
analysed is a recording holding a ``telemetry`` table (``record --telemetry``,
``pytimings.sample_telemetry``), each window entry gets its GPU's samples in the window
(:func:`pytimings.analysis.hardware.window_telemetry`); the recording's samples and regions
share one clock (CLOCK_MONOTONIC)."""

from __future__ import annotations

from typing import Any

from pytimings.analysis.hardware import window_telemetry
from pytimings.analysis.result import Attribution
from pytimings.ingest.detect import detect_format
from pytimings.record.telemetry import load_telemetry


def telemetry_per_window(path: str, result: Attribution) -> list[dict[str, Any] | None] | None:
    """Per row of ``result.windows``, its telemetry (None: no sample of its GPU in it);
    None when ``path`` is not a recording with telemetry."""
    if detect_format(path) != "recording":
        return None
    samples = load_telemetry(path)
    if samples is None or not len(samples.t_ns):
        return None
    w = result.windows
    return window_telemetry(samples, w["start_ns"], w["end_ns"], w["device"])
