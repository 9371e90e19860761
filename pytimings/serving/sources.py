"""The inputs of ``pytimings report`` loaded, joined and measured, so that its renderers
(:mod:`pytimings.report.serving_html`, :mod:`pytimings.report.serving_text`) only format.

Sources are load-generator run files (``pytimings.serving/2``, or another tool's result
file, :mod:`pytimings.serving.foreign`) and pytimings recordings holding a "requests" table.
A recording is one level, its concurrency the peak number of requests in flight; it has no
window of its own, so its duration is its requests' span. A recording given right after a
run file is joined with it (:mod:`pytimings.serving.join`): its requests are placed at the
run's levels and rounds (each round's window moved onto the engine clock; the engine's
warm-up requests counted apart).

Every number comes from :mod:`pytimings.serving.metrics` (``serving_metrics``, per
concurrency level over all its rounds) and every CDF sample and the knee from
:mod:`pytimings.serving.compare` (``level_data``, ``sweep``), so the report agrees with
``pytimings compare`` and the run file's own figures; the findings, drift verdicts (soak
intervals, a recording's memory samples) and each joined level's slowest requests are
computed here too.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.errors import TraceFormatError
from pytimings.ingest.recording_file import load_memory, load_requests
from pytimings.model.samples import MemorySamples
from pytimings.serving.compare import level_data, sweep
from pytimings.serving.cost import cost_per_mtok_usd
from pytimings.serving.findings import Finding, run_findings, saturation, speculative_ab
from pytimings.serving.foreign import load_any
from pytimings.serving.join import Clock, auto_clock, join, shares_ids, slowest, split_engine
from pytimings.serving.metrics import ServingMetrics, measured, peak_concurrency, serving_metrics
from pytimings.serving.runfile import Level, Round, Run
from pytimings.serving.trend import memory_drift, run_drift

__all__ = [
    "SLOWEST",
    "Joined",
    "LevelResult",
    "Source",
    "SourceResult",
    "analyse",
    "join_recordings",
    "load_source",
    "run_cost",
]

SLOWEST = 6  # requests kept per joined level for the phase timelines
_ARROW_MAGIC = b"ARROW1"


@dataclass(frozen=True)
class Joined:
    """A recording joined with the run file before it (:mod:`pytimings.serving.join`)."""

    run_label: str
    doc: dict[str, Any]  # pytimings.join/1
    clock: Clock
    outside: int  # engine requests in no level and no level's warm-up


@dataclass(frozen=True)
class Source:
    """One input: a run file, or a recording wrapped as a run of one level, or a recording
    joined with a run file: the run's levels and rounds, holding the engine's requests."""

    label: str
    run: Run
    recorded: bool  # a recording: one level, concurrency = peak in flight, no window
    joined: Joined | None = None
    unjoined: str | None = None  # the run file a recording followed but matched no request of
    memory: MemorySamples | None = None  # a recording's pytimings.sample_memory() samples


@dataclass(frozen=True)
class LevelResult:
    concurrency: int
    metrics: ServingMetrics
    ttft_ms: npt.NDArray[np.float64]  # per request (CDF samples)
    itl_ms: npt.NDArray[np.float64]  # per gap (vllm) or per request (genai-perf, llmperf)
    warmup_requests: int


@dataclass(frozen=True)
class SourceResult:
    source: Source
    levels: list[LevelResult]
    knee: int | None
    knee_rule: str
    findings: list[Finding] = dataclasses.field(default_factory=list)  # engine and saturation
    drift: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # soak intervals
    memory_drift: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # a joined recording: per level, its SLOWEST requests by client E2E (join's rows)
    slowest: list[tuple[int, list[dict[str, Any]]]] = dataclasses.field(default_factory=list)


def load_source(path: str | os.PathLike[str], label: str) -> Source:
    """A run file or a recording with a "requests" table; TraceFormatError otherwise."""
    where = os.fspath(path)
    try:
        with open(where, "rb") as file:
            head = file.read(len(_ARROW_MAGIC))
    except OSError:
        head = b""  # load_run names the file and the reason
    if head != _ARROW_MAGIC:
        return Source(label, load_any(where), recorded=False)
    records = load_requests(where)
    if not records:
        raise TraceFormatError(where, "its requests table has no rows (no request was recorded)")
    first = min(record.start_ns for record in records)
    last = max(
        max(record.end_ns or record.start_ns, *(record.chunk_ns or [0])) for record in records
    )
    rounds = [Round(0, first, last, records, errors={}, summary={})]
    level = Level(peak_concurrency(records), None, rounds, summary={}, warmup={})
    return Source(label, Run(where, {}, [level]), recorded=True, memory=load_memory(where))


def join_recordings(sources: Sequence[Source], tolerance_ns: int = 5_000_000) -> list[Source]:
    """Each recording given right after a run file, joined with it (the clock as ``join
    --clock auto`` finds it, matching by start time within ``tolerance_ns``) and split into
    the run's levels and rounds; a recording that matches none of the run's requests stays
    one panel (a note says so)."""
    out = list(sources)
    for i in range(1, len(out)):
        before, source = out[i - 1], out[i]
        if not source.recorded or before.recorded:
            continue
        engine = [record for rnd in source.run.levels[0].rounds for record in rnd.records]
        mode = auto_clock(before.run, source.run.path)
        if mode == "estimate" and not shares_ids(before.run, engine):
            out[i] = dataclasses.replace(source, unjoined=before.run.path)
            continue
        doc, clock = join(before.run, engine, source.run.path, mode, tolerance_ns)
        if not doc["matched"]:
            out[i] = dataclasses.replace(source, unjoined=before.run.path)
            continue
        split = split_engine(before.run, engine, doc, clock)
        out[i] = dataclasses.replace(
            source,
            run=Run(source.run.path, {}, split.levels),
            recorded=False,
            joined=Joined(before.label, doc, clock, split.outside),
        )
    return out


def _level_result(source: Source, level: Level, definition: str) -> LevelResult:
    records = [record for rnd in level.rounds for record in rnd.records]
    windows = None if source.recorded else [(rnd.start_ns, rnd.end_ns) for rnd in level.rounds]
    metrics = serving_metrics(records, definition, windows=windows)
    if any(measured(rnd.records) for rnd in level.rounds):
        data = level_data(level, definition, source.run.path)
        ttft, itl = data.ttft, data.itl
    else:  # nothing succeeded: the table counts the failures, no curve to draw
        ttft = itl = np.empty(0)
    warmup = int(level.warmup.get("requests", 0))
    return LevelResult(level.concurrency, metrics, ttft, itl, warmup)


def analyse(sources: Sequence[Source], definition: str, knee_pct: float) -> list[SourceResult]:
    """Each source's levels measured, its knee, findings, drift verdicts and (joined) the
    slowest requests of each level."""
    out: list[SourceResult] = []
    for source in sources:
        by_concurrency = sorted(source.run.levels, key=lambda level: level.concurrency)
        levels = [_level_result(source, level, definition) for level in by_concurrency]
        swept = sweep(source.run, definition, knee_pct)
        found = [] if source.recorded else run_findings(source.label, source.run, definition)
        found += [] if source.recorded else saturation(source.label, swept["levels"])
        if out and not source.recorded and not out[0].source.recorded:
            base = out[0].source
            found += speculative_ab(base.label, base.run, source.label, source.run, definition)
        memory = source.memory
        joined = source.joined
        out.append(
            SourceResult(
                source,
                levels,
                swept["knee"],
                swept["knee_rule"],
                found,
                drift=run_drift(source.label, source.run),
                memory_drift=[]
                if memory is None
                else memory_drift(source.label, source.run.path, memory),
                slowest=[] if joined is None else slowest(joined.doc, SLOWEST),
            )
        )
    return out


def run_cost(result: SourceResult, price: tuple[float, int]) -> float:
    """USD per million output tokens over all of a run's levels (their tokens over their time)."""
    tokens = sum(level.metrics.output_tokens for level in result.levels)
    seconds = sum(level.metrics.duration_s for level in result.levels)
    return cost_per_mtok_usd(tokens / seconds if seconds > 0 else math.nan, *price)
