"""Traces of every supported format into one :class:`~pytimings.model.trace.Trace`.

The facade of the ingest layer: :func:`load` (several files, ranks, processes as ranks:
:mod:`pytimings.ingest.loader`) and :func:`detect_format` (:mod:`pytimings.ingest.detect`).
One module per format turns a file into the model: :mod:`~pytimings.ingest.nsys` (Nsight
Systems SQLite), :mod:`~pytimings.ingest.kineto` (PyTorch profiler JSON),
:mod:`~pytimings.ingest.recording` (pytimings recordings).
"""

from __future__ import annotations

from pytimings.ingest.detect import detect_format, export_report, is_trace
from pytimings.ingest.loader import assign_ranks, expand_paths, load, load_file, set_rank

__all__ = [
    "assign_ranks",
    "detect_format",
    "expand_paths",
    "export_report",
    "is_trace",
    "load",
    "load_file",
    "set_rank",
]
