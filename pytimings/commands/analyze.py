"""``pytimings analyze``: where each window's time went, per device, then the findings."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from pytimings.commands import comm_rules
from pytimings.commands.example import EXAMPLE_BY, paths_or_example, say_example
from pytimings.commands.ops import chosen_gpu, load_captures
from pytimings.console import options, progress
from pytimings.console.args import nonempty
from pytimings.errors import install_hint
from pytimings.fileout import write_text
from pytimings.ingest import expand_paths
from pytimings.ingest.processes import print_hint
from pytimings.report import tables
from pytimings.session import Options, analyze


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "traces",
        nargs="*",
        metavar="TRACE",
        help="trace files (nsys SQLite/report, Kineto JSON, pytimings recordings .pyt)",
    )
    options.add_example(p)  # with --by decode_step unless given
    options.add_by(p)
    options.add_json(
        p,
        "pytimings.attribution/3: the labels per window and device with "
        "host_bound_by_activity/host_bound_by_range, host_windows, host_totals",
    )
    options.add_device_rank(p)
    options.add_processes_as_ranks(p)
    comm_rules.add_arguments(p)
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
    options.add_workers(p)
    p.add_argument(
        "--what-if",
        metavar="SPEC",
        type=nonempty,
        help="replay each window with durations changed: NAME=F scales a range or host "
        "activity with everything inside it (scheduler=0 removes it), self:NAME=F only its "
        "self time, kernel:GLOB=F matching GPU ops, comm:GLOB=F the transfer part of comm "
        "ops by name or kind (comm:all_reduce=0.5); comma-separated",
    )
    options.add_critical_path(p, "with --window N, window N's")
    p.add_argument("--window", type=int, metavar="N", help="with --critical-path: window N")
    options.add_html(p, f"needs plotly: {install_hint('html')}")
    tables.add_arguments(p, "the windows table")
    options.add_gpu_spec(p)
    options.add_capture(p)


def session_options(args: argparse.Namespace, paths: list[str]) -> Options:
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
        config_file=comm_rules.config_path(args),
        html=bool(args.html),
    )
    opts.check()
    opts.check_files(len(expand_paths(paths)), capturing=bool(args.capture))
    return replace(opts, captures=load_captures(args))


def run(args: argparse.Namespace) -> int:
    progress.configure(args.quiet)
    paths = paths_or_example(args, list(args.traces), "TRACE")
    result = analyze(paths, session_options(args, paths))
    if result.has_events and not args.processes_as_ranks:
        print_hint(result.attribution.trace)
    say_example(args)
    print(result.report())
    a = result.attribution
    windows = a.windows.with_columns(payload=a.payloads())  # NaN: none
    for written in tables.write(args, {"windows": windows}):
        print(f"\nwrote {written}")
    if args.html:
        from pytimings.report.html import write_html

        title = "pytimings analyze " + (
            Path(result.files[0]).name if len(result.files) == 1 else f"({len(result.files)} files)"
        )
        telemetry = result.telemetry if result.telemetry is not None else result.gpu_metrics
        with progress.task("Writing the HTML report"):
            write_html(a, result.findings, result.ops, args.html, title, result.has_events,
                       telemetry, files=list(result.files))  # fmt: skip
        print(f"\nwrote {args.html}")
    if args.json:
        write_text(args.json, json.dumps(result.to_document(), indent=2) + "\n", "--json")
        print(f"\nwrote {args.json}")
    return 0
