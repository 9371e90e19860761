"""``pytimings export``: a trace or recording as a file for other viewers (Perfetto UI,
``chrome://tracing``)."""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from pytimings.commands import comm_rules
from pytimings.commands.example import paths_or_example, say_example
from pytimings.commands.ops import load_captures
from pytimings.console import options, progress
from pytimings.errors import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "traces",
        nargs="*",
        metavar="TRACE_OR_RECORDING",
        help="trace files (nsys SQLite/report, Kineto JSON) or pytimings recordings",
    )
    options.add_example(p)
    p.add_argument(
        "--perfetto",
        metavar="OUT",
        help="write Chrome trace-event JSON (Perfetto, chrome://tracing)",
    )
    p.add_argument(
        "--no-attribution",
        action="store_true",
        help="leave out the attribution lanes and findings (faster)",
    )
    p.add_argument(
        "--no-flows", action="store_true", help="no arrows from launch calls to their GPU ops"
    )
    options.add_by(p)
    options.add_critical_path(p, "drawn as a track; needs --by (was --critical-path NAME)")
    options.add_workers(p)
    options.add_processes_as_ranks(p)
    options.add_capture(p)
    comm_rules.add_arguments(p)


def check(args: argparse.Namespace) -> None:
    """The options' own pairs, before any file is read."""
    if not args.perfetto:
        raise UsageError("give an output: --perfetto OUT")
    if args.capture and args.no_attribution:
        raise UsageError(
            "--capture charges graph-replayed kernels to ops on the attribution lanes: "
            "not with --no-attribution"
        )
    if args.critical_path and args.by is None:
        raise UsageError(
            "--critical-path follows the slowest window of the --by ranges: give --by NAME "
            "(--critical-path NAME is now --by NAME --critical-path)"
        )


def run(args: argparse.Namespace) -> int:
    from pytimings.analysis.window_telemetry import nsys_gpu_metrics
    from pytimings.ingest import load
    from pytimings.ingest.detect import detect_format
    from pytimings.ingest.loader import expand_paths
    from pytimings.ingest.recording_file import load_tables, telemetry_from_arrow
    from pytimings.model.requests import records_from_arrow
    from pytimings.model.trace import Trace
    from pytimings.report.ops_text import render_graph_replays
    from pytimings.report.perfetto import write_perfetto
    from pytimings.session import Options, analyze

    check(args)
    progress.configure(args.quiet)
    kernels = comm_rules.comm_kernels(args)
    captures = load_captures(args)
    requests = []  # each recording's request timelines, one track per request
    telemetry = []  # each recording's GPU telemetry, counter tracks
    traced = []  # files with events (a recording of request timelines only has none)
    paths = paths_or_example(args, list(args.traces), "TRACE_OR_RECORDING")
    for f in expand_paths(paths):
        tables = load_tables(f) if detect_format(f) == "recording" else {}
        if "telemetry" in tables:
            samples = telemetry_from_arrow(tables["telemetry"], f)
            if len(samples.t_ns):
                telemetry.append((os.path.basename(f), samples))
        metrics = nsys_gpu_metrics(f)  # an Nsight export's GPU metrics, counter tracks too
        if metrics is not None:
            telemetry.append((os.path.basename(f), metrics))
        if "requests" in tables:
            requests.append((os.path.basename(f), records_from_arrow(tables["requests"], f)))
            if not tables["records"].num_rows:
                continue
        traced.append(f)
    trace = (
        load(*traced, workers=args.workers, processes_as_ranks=args.processes_as_ranks)
        if traced
        else Trace.empty()
    )
    shifted = [r for r in trace.meta.get("clock_alignment", {}).get("ranks", []) if r["shift_ns"]]
    if requests and shifted:  # the request tracks would sit off their regions by the shift
        raise UsageError(
            f"rank {shifted[0]['rank']} was moved onto another rank's clock; request "
            "timelines are drawn on their own recording's clock only: export a recording "
            "with requests on its own (or with the recordings of its host)"
        )
    if telemetry and shifted:  # its samples would sit off their regions by the shift
        print(
            "telemetry not drawn: a rank was moved onto another rank's clock, and telemetry "
            "is drawn on its own recording's clock only"
        )
        telemetry = []
    if args.critical_path:  # the range named before any analysis runs
        from pytimings.analysis.windows import range_rows

        range_rows(trace, args.by, np.unique(trace.ranges["rank"]), "--by")
    say_example(args)
    shared = Options(comm_kernels=tuple(kernels), captures=captures)
    result = None
    if not args.no_attribution and len(trace.gpu_ops):
        result = analyze(trace, shared)
    path = None
    if args.critical_path:
        steps = analyze(trace, shared, by=args.by, captures=None)
        with progress.task("Replaying the windows"):
            path = steps.critical_path()
    stats = write_perfetto(
        trace, args.perfetto, result.attribution if result else None,
        ops=result.ops if result else None, findings=result.findings if result else (),
        flows=not args.no_flows, critical_path=path, requests=requests, telemetry=telemetry,
    )  # fmt: skip
    counts = ", ".join(f"{v} {k}" for k, v in sorted(stats.events.items()) if k != "metadata")
    print(f"wrote {args.perfetto}: {counts}")
    if result is not None and captures is not None:
        print("\n".join(render_graph_replays(result.ops.attribution)))
    if stats.overlap_tracks:
        print(
            f"{stats.overlap_tracks} extra track{'s' if stats.overlap_tracks > 1 else ''} "
            f"hold{'' if stats.overlap_tracks > 1 else 's'} slices that overlap without nesting",
        )
    for what, n in sorted({**trace.dropped, **stats.clamped}.items()):
        print(f"note: {what}: {n}", file=sys.stderr)
    return 0
