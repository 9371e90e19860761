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
from pytimings.record.telemetry import TelemetrySamples, load_telemetry


def recording_telemetry(path: str) -> TelemetrySamples | None:
    """The telemetry samples of the recording at ``path`` (None: not a recording, or one
    without samples)."""
    if detect_format(path) != "recording":
        return None
    samples = load_telemetry(path)
    return samples if samples is not None and len(samples.t_ns) else None


def telemetry_per_window(
    samples: TelemetrySamples, result: Attribution
) -> list[dict[str, Any] | None]:
    """Per row of ``result.windows``, its telemetry (None: no sample of its GPU in it)."""
    w = result.windows
    return window_telemetry(samples, w["start_ns"], w["end_ns"], w["device"])
