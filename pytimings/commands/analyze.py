"""``pytimings analyze``: where each window's time went, per device, then the findings."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from pytimings.commands import comm_rules
from pytimings.commands.example import EXAMPLE_BY, add_example_argument, paths_or_example
from pytimings.commands.ops import (
    add_capture_argument,
    add_gpu_spec_argument,
    chosen_gpu,
    load_captures,
)
from pytimings.console import progress
from pytimings.console.args import nonempty
from pytimings.fileout import write_text
from pytimings.ingest import expand_paths
from pytimings.ingest.processes import add_processes_argument, print_hint
from pytimings.report import tables
from pytimings.session import Options, analyze


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "traces", nargs="*", metavar="TRACE", help="trace files (nsys SQLite/report, Kineto JSON)"
    )
    p.add_argument("--by", metavar="NAME_OR_GLOB", help="one window per instance of these ranges")
    p.add_argument(
        "--json",
        metavar="OUT",
        help="also write the result as JSON (pytimings.attribution/3: the labels per window "
        "and device with host_bound_by_activity/host_bound_by_range, host_windows, host_totals)",
    )
    p.add_argument(
        "--device", type=int, action="append", metavar="N", help="only device N (repeatable)"
    )
    p.add_argument(
        "--rank", type=int, action="append", metavar="N", help="only rank N (repeatable)"
    )
    add_processes_argument(p)
    comm_rules.add_arguments(p)
    add_example_argument(p, f"analyse (with --by {EXAMPLE_BY} unless given)")
    p.add_argument(
        "--executor",
        choices=("local", "dask"),
        default="local",
        help="where per-rank files are analysed when several are given: local processes "
        "(default) or a Dask cluster (one task per rank; only results travel)",
    )
    p.add_argument(
        "--scheduler",
        metavar="tcp://HOST:PORT",
        help="the Dask scheduler to use (default: a LocalCluster of processes here)",
    )
    p.add_argument(
        "--workers", type=int, default=None, metavar="N", help="worker processes (local or Dask)"
    )
    p.add_argument(
        "--what-if",
        metavar="SPEC",
        type=nonempty,
        help="replay each window with durations changed: NAME=F scales a range or host "
        "activity with everything inside it (scheduler=0 removes it), self:NAME=F only its "
        "self time, kernel:GLOB=F matching GPU ops, comm:GLOB=F the transfer part of comm "
        "ops by name or kind (comm:all_reduce=0.5); comma-separated",
    )
    p.add_argument(
        "--critical-path",
        action="store_true",
        help="the chain of host time, launches, waits and GPU ops that sets the slowest "
        "window's length (or --window N's)",
    )
    p.add_argument("--window", type=int, metavar="N", help="with --critical-path: window N")
    p.add_argument("--html", metavar="OUT", help="also write a self-contained HTML report")
    tables.add_arguments(p, "the windows table")
    add_gpu_spec_argument(p)
    add_capture_argument(p)
    progress.add_quiet_argument(p)


def options(args: argparse.Namespace, paths: list[str]) -> Options:
    """The session's options from the command line, checked before any file is read."""
    opts = Options(
        by=args.by or (EXAMPLE_BY if args.example else None),
        devices=tuple(args.device) if args.device else None,
        ranks=tuple(args.rank) if args.rank else None,
        comm_kernels=tuple(comm_rules.comm_kernels(args)),
        gpu=chosen_gpu(args),
        processes_as_ranks=args.processes_as_ranks,
        what_if=args.what_if,
        critical_path=args.critical_path,
        window=args.window,
        replay=bool(args.json),  # the --json document holds the replay: the text says so
        executor=args.executor,
        scheduler=args.scheduler,
        workers=args.workers,
    )
    opts.check()
    opts.check_files(len(expand_paths(paths)), capturing=bool(args.capture))
    return replace(opts, captures=load_captures(args))


def run(args: argparse.Namespace) -> int:
    progress.configure(args.quiet)
    paths = paths_or_example(args, list(args.traces), "TRACE")
    result = analyze(paths, options(args, paths))
    if result.has_events and not args.processes_as_ranks:
        print_hint(result.attribution.trace)
    print(result.report())
    a = result.attribution
    windows = a.windows.with_columns(payload=a.payloads())  # NaN: none
    for written in tables.write(args, {"windows": windows}):
        print(f"\nwrote {written}")
    if args.html:
        from pytimings.report.html import write_html

        title = "pytimings analyze " + ", ".join(Path(p).name for p in paths)
        telemetry = result.telemetry if result.telemetry is not None else result.gpu_metrics
        with progress.task("Writing the HTML report"):
            write_html(a, result.findings, result.ops, args.html, title, result.has_events,
                       telemetry)  # fmt: skip
        print(f"\nwrote {args.html}")
    if args.json:
        write_text(args.json, json.dumps(result.to_document(), indent=2) + "\n", "--json")
        print(f"\nwrote {args.json}")
    return 0
