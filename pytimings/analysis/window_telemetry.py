"""GPU telemetry per window in ``pytimings analyze`` (docs/telemetry.md): when the one trace
analysed is a recording holding a ``telemetry`` table (``record --telemetry``,
``pytimings.sample_telemetry``), each window entry gets its GPU's samples in the window
(:func:`pytimings.analysis.hardware.window_telemetry`); the recording's samples and regions
share one clock (CLOCK_MONOTONIC). When it is an Nsight export captured with
``--gpu-metrics-devices``, each window entry gets the means of its GPU's metrics
(:func:`pytimings.analysis.hardware.window_gpu_metrics`), on the export's clock."""

from __future__ import annotations

from typing import Any

from pytimings.analysis.hardware import window_gpu_metrics, window_telemetry
from pytimings.analysis.result import Attribution
from pytimings.ingest.detect import detect_format
from pytimings.ingest.nsys_gpu_metrics import read_gpu_metrics
from pytimings.ingest.recording_file import load_telemetry
from pytimings.model.samples import TelemetrySamples

NSYS_SOURCE = "nsys_gpu_metrics"


def recording_telemetry(path: str) -> TelemetrySamples | None:
    """The telemetry samples of the recording at ``path`` (None: not a recording, or one
    without samples)."""
    if detect_format(path) != "recording":
        return None
    samples = load_telemetry(path)
    return samples if samples is not None and len(samples.t_ns) else None


def nsys_gpu_metrics(path: str) -> TelemetrySamples | None:
    """The GPU metrics of the Nsight export at ``path`` as samples (None: not an nsys
    export, or one without GPU metrics); negative values left out are said in one line."""
    if detect_format(path) != "nsys-sqlite":
        return None
    metrics = read_gpu_metrics(path)
    if metrics is None:
        return None
    if metrics.negative_values:
        print(
            f"{path}: {metrics.negative_values} GPU metric samples with a negative value left out "
            "(nsys wrote an unsigned value as signed)"
        )
    if not len(metrics.t_ns):
        return None
    return TelemetrySamples(
        metrics.t_ns,
        metrics.gpu,
        metrics.metric,
        metrics.value,
        NSYS_SOURCE,
        codes=metrics.code,
        names=metrics.labels,
    )


def telemetry_per_window(
    samples: TelemetrySamples, result: Attribution
) -> list[dict[str, Any] | None]:
    """Per row of ``result.windows``, its telemetry (None: no sample of its GPU in it)."""
    windows = result.windows
    return window_telemetry(samples, windows["start_ns"], windows["end_ns"], windows["device"])


def gpu_metrics_per_window(
    samples: TelemetrySamples, result: Attribution
) -> list[dict[str, Any] | None]:
    """Per row of ``result.windows``, its GPU's metric means (None: no sample in it)."""
    windows = result.windows
    return window_gpu_metrics(samples, windows["start_ns"], windows["end_ns"], windows["device"])
