"""The data every layer shares, defined once: :mod:`~pytimings.model.trace` (the columnar
event model every trace format lands in), :mod:`~pytimings.model.recording` (what the
native recorder hands back, and the recording file format's keys) and
:mod:`~pytimings.model.requests` (one serving request's timeline, written by the load
generator and the in-engine request log alike), :mod:`~pytimings.model.samples` (GPU
telemetry and memory samples taken beside a trace) and :mod:`~pytimings.model.comm`
(collective sizes and bus factors). Imports nothing above it.
"""
