"""pytimings: record, attribute and measure where GPU inference latency goes.

The public API is imported lazily (PEP 562) so that ``import pytimings`` stays cheap on
laptops that only analyse traces; each name is cached in the module after first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from pytimings.errors import PytimingsError, TraceFormatError, UsageError

try:
    from pytimings._core import now_ns
except ModuleNotFoundError as _exc:  # a source checkout that was never built
    if _exc.name != "pytimings._core":
        raise
    raise ImportError(
        "pytimings' native extension (pytimings._core) is not built here: this looks like a "
        "source checkout. Install it with `pip install .` (or, to work on it, "
        "`pip install --no-build-isolation -e .` after `pip install scikit-build-core "
        "pybind11 cython nvidia-nvtx-cu12`), then import pytimings from outside the "
        "checkout's root or through that install."
    ) from None

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY: dict[str, str] = {
    # recording (recorder.py, cuda.py)
    "region": "pytimings.record.recorder",
    "timed": "pytimings.record.recorder",
    "mark": "pytimings.record.recorder",
    "Recorder": "pytimings.record.recorder",
    "default_recorder": "pytimings.record.recorder",
    "flush": "pytimings.record.recorder",
    "cuda_available": "pytimings.record.cuda",
    "cuda_status": "pytimings.record.cuda",
    # recordings: summary, save/load, torch.distributed
    "summary": "pytimings.record.summary",
    "Summary": "pytimings.record.summary",
    "save": "pytimings.record.storage",
    "instrument_torch_distributed": "pytimings.record.distributed",
    "uninstrument": "pytimings.record.distributed",
    # traces
    "load": "pytimings.ingest",
    "Trace": "pytimings.model.trace",
    # analysis
    "attribute": "pytimings.analysis.attribution",
    "analyze": "pytimings.session",
    "Analysis": "pytimings.session",
    "Options": "pytimings.session",
    # serving
    "request": "pytimings.record.requests",
    "sample_memory": "pytimings.record.memory",
    "sample_telemetry": "pytimings.record.telemetry",
    "serving_metrics": "pytimings.serving.metrics",
}

__all__ = [
    "PytimingsError",
    "TraceFormatError",
    "UsageError",
    "__version__",
    "now_ns",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytimings' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
