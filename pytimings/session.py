"""One analysis of a capture (a session, in pyinstrument's sense): :func:`analyze` loads the
traces, attributes them (:func:`pytimings.analysis.attribution.attribute`, or per-rank
tasks, :mod:`pytimings.analysis.ranks`) and returns an :class:`Analysis`, which computes
the rest on first use: findings (every registered rule where its data is,
:data:`pytimings.analysis.findings.REGISTRY`), the op table, the replay's fidelity,
what-ifs, the critical path, telemetry and GPU metrics per window. The ``pytimings.attribution/3``
document (:meth:`Analysis.to_document`) and the text ``pytimings analyze`` prints
(:meth:`Analysis.report`) are made here and nowhere else.

It sits above ``report/`` (docs/architecture.md): the renderers there take the typed parts
an :class:`Analysis` holds and only format them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from pytimings.analysis import savings
from pytimings.analysis.attribution import attribute
from pytimings.analysis.collectives import Collectives
from pytimings.analysis.critical_path import CriticalPath, critical_path
from pytimings.analysis.finding import Finding, pct, plural
from pytimings.analysis.findings import ranked, run_rules
from pytimings.analysis.graph_capture import Captures
from pytimings.analysis.hardware import gpu_metric_findings
from pytimings.analysis.memory import MemoryResult
from pytimings.analysis.name_checks import check_repeats, check_trace_options, check_what_if
from pytimings.analysis.op_table import LazyOpTable, OpTable
from pytimings.analysis.ops import GpuSpec
from pytimings.analysis.replay import Fidelity, WhatIf, replay, what_if
from pytimings.analysis.result import Attribution
from pytimings.analysis.window_telemetry import (
    gpu_metrics_per_window,
    nsys_gpu_metrics,
    recording_telemetry,
    telemetry_per_window,
)
from pytimings.console import progress
from pytimings.console.text import duration
from pytimings.errors import UsageError
from pytimings.ingest import expand_paths, load
from pytimings.model.samples import TelemetrySamples
from pytimings.model.trace import Trace
from pytimings.report.analysis_text import render_attribution
from pytimings.report.ops_text import render_graph_replays
from pytimings.report.replay_text import render_critical_path, render_fidelity, render_what_if
from pytimings.report.telemetry_text import render_window_gpu_metrics, render_window_telemetry

__all__ = ["Analysis", "Options", "analyze"]

EXECUTORS = ("local", "dask")


@dataclass(frozen=True)
class Options:
    """What an analysis is asked (each field is the ``pytimings analyze`` flag of its name).

    ``by``: a range name or glob, one window per instance (None: one whole-trace window per
    rank). ``devices``/``ranks``: only these (None: all). ``comm_kernels``: kernel-name
    globs that are communication. ``gpu``: the GPU whose peaks the op table's roofline uses
    (None: the one the trace names). ``captures``: graph captures replayed kernels are
    charged through. ``processes_as_ranks``: each process with GPU ops is a rank.
    ``what_if``: a ``--what-if`` spec; ``critical_path`` (with ``window``: its number, else
    the slowest) and ``replay`` put those parts of the replay in the report (the document
    has the replay whenever the events are here). ``executor``/``scheduler``/``workers``:
    where several per-rank files are analysed (local processes or Dask); they are loaded
    together instead when the replay needs them (``what_if``, ``critical_path``).
    ``config_file``: the ``pytimings.toml`` the comm kernels were read from (the document
    names it). ``html``: the windows will be drawn, so a trace with none on the selected
    ranks and devices is refused before any work."""

    by: str | None = None
    devices: tuple[int, ...] | None = None
    ranks: tuple[int, ...] | None = None
    comm_kernels: tuple[str, ...] = ()
    gpu: GpuSpec | None = None
    captures: Captures | None = None
    processes_as_ranks: bool = False
    what_if: str | None = None
    critical_path: bool = False
    window: int | None = None
    replay: bool = False
    executor: str = "local"
    scheduler: str | None = None
    workers: int | None = None
    config_file: str | None = None
    html: bool = False

    @property
    def replaying(self) -> bool:
        """Whether the report holds the replay (and several files are loaded together)."""
        return self.what_if is not None or self.critical_path

    @property
    def dask(self) -> bool:
        return self.executor == "dask" or self.scheduler is not None

    def rank_tasks(self, n_files: int) -> bool:
        """Whether ``n_files`` files are analysed by per-rank tasks: several files, unless
        the replay needs their events together, or any number on Dask."""
        return (n_files > 1 and not self.replaying) or self.dask

    def check_files(self, n_files: int, capturing: bool) -> None:
        """Refuse graph captures (``capturing``: given, read or not yet) where ``n_files``
        files go to per-rank tasks."""
        if capturing and self.rank_tasks(n_files):
            raise UsageError(
                "--capture goes with one trace file (per-rank tasks return no per-op table)"
            )

    def check(self) -> None:
        """Refuse options that do not go together, before anything is read."""
        if self.executor not in EXECUTORS:
            raise UsageError(f"--executor {self.executor!r}: choose one of {', '.join(EXECUTORS)}")
        if self.window is not None and not self.critical_path:
            raise UsageError("--window goes with --critical-path")
        if self.dask and self.replaying:
            raise UsageError(
                "--what-if and --critical-path replay the ranks' events in this process: "
                "not with --executor dask or --scheduler (Dask tasks return only results)"
            )
        if self.what_if is not None:
            check_repeats(self.what_if)


@dataclass
class Analysis:
    """The attribution of a capture (plain data) and, computed on first use, everything
    read from it. ``has_events``: False where per-rank tasks analysed the files (they send
    back results, not events: no replay, what-if or critical path, and the attribution's
    ``trace`` holds only the communication ops)."""

    attribution: Attribution
    options: Options = field(default_factory=Options)
    paths: tuple[str, ...] = ()  # the files or directories given (none: a loaded Trace)
    files: tuple[str, ...] = ()  # the files they name
    has_events: bool = True
    # given, not computed (per-rank tasks: the ranks' findings and op tables, merged on
    # the client)
    _findings: list[Finding] | None = field(default=None, repr=False)
    _ops: OpTable | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        """One screen: what was analysed, where the time went, the parts to ask for."""
        a = self.attribution
        where = ", ".join(Path(p).name for p in self.paths) or "a loaded trace"
        scope = f"by {a.by}: {plural(len(a.windows), 'window entry', 'window entries')}"
        events = "events here" if self.has_events else "per-rank tasks: no events here"
        totals = a.totals
        total = totals.pop("window_ns")
        top = sorted(totals.items(), key=lambda kv: -kv[1])[:3]
        shares = ", ".join(f"{k[:-3]} {pct(v / max(1, total))}" for k, v in top if v)
        lines = [
            f"Analysis of {where} ({scope if a.by else 'whole trace'}; {events})",
            f"  {duration(total)} in the windows" + (f": {shares}" if shares else ""),
        ]
        if "findings" in self.__dict__ or self._findings is not None:
            lines.append(f"  {plural(len(self.findings), 'finding')}")
        lines += [
            "  .attribution .findings .ops .categories .memory .collectives .telemetry",
            "  .gpu_metrics .replay .what_if(spec) .critical_path(n); .report() .to_document()",
        ]
        return "\n".join(lines)

    # ------------------------------------------------------------------ the parts

    @property
    def ops(self) -> OpTable:
        """The per-op table (ops, categories, per-window categories, op attribution)."""
        return self._op_source.get()

    @property
    def categories(self) -> list[dict[str, Any]]:
        """GPU time by op category over all windows (``ops.window_categories``: per window)."""
        return self.ops.categories

    @cached_property
    def _op_source(self) -> LazyOpTable:
        """The op table the findings read too (one, computed on first use)."""
        opts = self.options
        return LazyOpTable(self.attribution, opts.gpu, opts.captures, _table=self._ops)

    @cached_property
    def findings(self) -> list[Finding]:
        """Every registered rule's findings with their replayed savings, ranked
        (:func:`pytimings.analysis.findings.ranked`)."""
        if self._findings is not None:
            return self._findings
        a = self.attribution
        total = a.totals["window_ns"]
        # savings only for what is reported (each needs a replay)
        found = ranked(run_rules(a, self._op_source), total)
        savings.add_savings(a, found)
        return ranked(found, total)

    @property
    def memory(self) -> MemoryResult:
        return self.attribution.memory

    @property
    def collectives(self) -> Collectives | None:
        return self.attribution.collectives

    @cached_property
    def replay(self) -> Fidelity:
        """How well the unchanged replay reproduces the windows."""
        self._need_events("the replay")
        with progress.task("Replaying the windows"):
            return replay(self.attribution, captures=self.options.captures).fidelity()

    def what_if(self, changes: str) -> WhatIf:
        """Each window before and after ``changes`` (a ``--what-if`` spec)."""
        self._need_events("--what-if")
        check_what_if(self.attribution.trace, changes)
        return what_if(self.attribution, check_repeats(changes), self.options.captures)

    def critical_path(self, window: int | None = None) -> CriticalPath:
        """The chain that sets window ``window``'s length (default: the slowest)."""
        self._need_events("--critical-path")
        return critical_path(self.attribution, window, self.options.captures)

    @cached_property
    def telemetry(self) -> TelemetrySamples | None:
        """The GPU telemetry of the one recording analysed (None: none)."""
        if not self.has_events or not self.files:
            return None
        return recording_telemetry(self.files[0])

    @cached_property
    def gpu_metrics(self) -> TelemetrySamples | None:
        """The GPU metrics of the one Nsight export analysed (None: none)."""
        if len(self.files) != 1 or self.options.dask:
            return None
        return nsys_gpu_metrics(self.files[0])

    @cached_property
    def gpu_metric_findings(self) -> list[Finding]:
        """Findings from the GPU metrics (the document lists them after ``findings``)."""
        if self.gpu_metrics is None:
            return []
        ops = self.attribution.trace.gpu_ops
        return gpu_metric_findings(self.gpu_metrics, ops["start"], ops["end"], ops["device"])

    def _need_events(self, what: str) -> None:
        if not self.has_events:
            raise UsageError(
                f"{what} replays the ranks' events, which per-rank tasks do not send back: "
                "load the files together"
            )

    def _windows(self) -> list[dict[str, Any]]:
        """The document's window entries: the attribution's, with telemetry and metrics."""
        doc_windows: list[dict[str, Any]] = self._document["windows"]
        return doc_windows

    # ------------------------------------------------------------------ the outputs

    @cached_property
    def _document(self) -> dict[str, Any]:
        """The document's attribution part, telemetry and GPU metrics (what the report
        reads too)."""
        a = self.attribution
        doc = a.document([f.to_dict() for f in self.findings + self.gpu_metric_findings])
        if self.telemetry is not None:
            per_window = telemetry_per_window(self.telemetry, a)
            for entry, samples in zip(doc["windows"], per_window, strict=True):
                entry["telemetry"] = samples
        if self.gpu_metrics is not None:
            per_window = gpu_metrics_per_window(self.gpu_metrics, a)
            for entry, means in zip(doc["windows"], per_window, strict=True):
                entry["gpu_metrics"] = means
        return doc

    def to_document(self) -> dict[str, Any]:
        """The ``pytimings.attribution/3`` document (what ``analyze --json`` writes)."""
        doc = dict(self._document)
        doc["config_file"] = self.options.config_file
        if self.has_events:
            doc["replay"] = self.replay.to_dict()
            if self.options.what_if is not None:
                doc["what_if"] = self._what_if.to_dict()
            if self.options.critical_path:
                doc["critical_path"] = self._critical_path.to_dict()
        with progress.task("Charging GPU ops to their ops"):
            table = self.ops
        doc.update(table.doc())
        doc["windows"] = [
            {**entry, "categories": cats}
            for entry, cats in zip(doc["windows"], table.window_categories, strict=True)
        ]
        return doc

    @cached_property
    def _what_if(self) -> WhatIf:
        assert self.options.what_if is not None
        return self.what_if(self.options.what_if)

    @cached_property
    def _critical_path(self) -> CriticalPath:
        return self.critical_path(self.options.window)

    def report(self) -> str:
        """The text ``pytimings analyze`` prints (before the files it writes)."""
        opts = self.options
        parts = [render_attribution(self.attribution, self.findings, self.paths)]
        if self.telemetry is not None:
            parts.append(render_window_telemetry(self._windows()))
        if self.gpu_metrics is not None:
            titles = [f.title for f in self.gpu_metric_findings]
            parts.append(render_window_gpu_metrics(self._windows(), titles))
        if self.has_events and (opts.replay or opts.replaying):
            parts.append(render_fidelity(self.replay))
            if opts.what_if is not None:
                parts.append(render_what_if(self._what_if))
            if opts.critical_path:
                parts.append(render_critical_path(self._critical_path))
        if opts.captures is not None:
            parts.append("\n".join(render_graph_replays(self.ops.attribution)))
        return "\n\n".join(parts)


Source = str | os.PathLike[str]


def analyze(
    sources: Source | Trace | Sequence[Source], options: Options | None = None, **changes: Any
) -> Analysis:
    """Analyse trace files (or directories of per-rank files), or a loaded ``Trace``.

    ``options`` (:class:`Options`), with ``changes`` to its fields on top:
    ``pt.analyze("run.sqlite", by="decode_step")``. Several files are analysed by per-rank
    tasks (``executor``), unless the replay needs their events together (``what_if``,
    ``critical_path``); a Trace is analysed here."""
    opts = replace(options or Options(), **_as_tuples(changes))
    opts.check()
    if isinstance(sources, Trace):
        return _analyze_trace(sources, opts, (), ())
    listed = [sources] if isinstance(sources, str | os.PathLike) else list(sources)
    files = expand_paths(listed)
    opts.check_files(len(files), opts.captures is not None)
    paths = tuple(str(p) for p in listed)
    if opts.rank_tasks(len(files)):
        return _analyze_ranks(paths, files, opts)
    trace = load(*files, workers=opts.workers, processes_as_ranks=opts.processes_as_ranks)
    return _analyze_trace(trace, opts, paths, tuple(files))


def _as_tuples(changes: dict[str, Any]) -> dict[str, Any]:
    """Keyword changes with their sequences as tuples (``devices=[0, 1]``): Options is
    frozen; one glob given as a string is one glob."""
    out = dict(changes)
    for key in ("devices", "ranks", "comm_kernels"):
        value = out.get(key)
        if isinstance(value, str):
            out[key] = (value,)
        elif value is not None:
            out[key] = tuple(value)
    return out


def _analyze_trace(
    trace: Trace, opts: Options, paths: tuple[str, ...], files: tuple[str, ...]
) -> Analysis:
    check_trace_options(  # before any analysis is done or printed
        trace, by=opts.by, ranks=opts.ranks, devices=opts.devices, what_if=opts.what_if,
        window=opts.window, html=opts.html,
    )  # fmt: skip
    with progress.task("Attributing"):
        a = attribute(
            trace, by=opts.by, devices=opts.devices, ranks=opts.ranks,
            comm_kernels=opts.comm_kernels,
        )  # fmt: skip
    return Analysis(a, opts, paths, files)


def _analyze_ranks(paths: tuple[str, ...], files: list[str], opts: Options) -> Analysis:
    from pytimings.analysis.ranks import analyze_ranks

    merged = analyze_ranks(
        *files, by=opts.by, devices=opts.devices, ranks=opts.ranks, executor=opts.executor,
        scheduler=opts.scheduler, workers=opts.workers,
        processes_as_ranks=opts.processes_as_ranks, comm_kernels=opts.comm_kernels,
        gpu=opts.gpu,
    )  # fmt: skip
    if opts.html and len(merged.attribution.windows) == 0:  # before anything is printed
        raise UsageError(
            "--html draws the GPU windows, and these traces have none on the selected ranks "
            "and devices (host-only captures: the text report has the host view)"
        )
    return Analysis(
        merged.attribution, opts, paths, tuple(files), has_events=False,
        _findings=merged.findings, _ops=merged.ops,
    )  # fmt: skip
