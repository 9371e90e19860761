"""pytimings: record, attribute and measure where GPU inference latency goes.

The public API is imported lazily (PEP 562) so that ``import pytimings`` stays cheap on
laptops that only analyse traces; each name is cached in the module after first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from pytimings._core import now_ns
from pytimings.errors import PytimingsError, TraceFormatError, UsageError

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY: dict[str, str] = {
    # recording (recorder.py, cuda.py)
    "region": "pytimings.recorder",
    "timed": "pytimings.recorder",
    "mark": "pytimings.recorder",
    "Recorder": "pytimings.recorder",
    "default_recorder": "pytimings.recorder",
    "flush": "pytimings.recorder",
    "cuda_available": "pytimings.cuda",
    "cuda_status": "pytimings.cuda",
    # recordings: summary, save/load, torch.distributed
    "summary": "pytimings.region_stats",
    "Summary": "pytimings.region_stats",
    "save": "pytimings.storage",
    "instrument_torch_distributed": "pytimings.distributed",
    "uninstrument": "pytimings.distributed",
    # traces
    "load": "pytimings.ingest",
    "Trace": "pytimings.ingest._model",
    # analysis
    "attribute": "pytimings.analysis.attribution",
    # serving
    "request": "pytimings.serving.record",
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
