"""``pytimings analyze``: where each window's time went, per device, then the findings."""

from __future__ import annotations

import argparse
from importlib import resources
from pathlib import Path

from pytimings.analysis.attribution import attribute
from pytimings.console import progress
from pytimings.errors import UsageError
from pytimings.ingest.processes import add_processes_argument, print_hint
from pytimings.report import tables
from pytimings.report.analysis_text import render_attribution

EXAMPLE = "decode_16steps_h200.sqlite"
EXAMPLE_BY = "decode_step"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "traces", nargs="*", metavar="TRACE", help="trace files (nsys SQLite/report, Kineto JSON)"
    )
    p.add_argument("--by", metavar="NAME_OR_GLOB", help="one window per instance of these ranges")
    p.add_argument(
        "--json",
        metavar="OUT",
        help="also write the result as JSON (pytimings.attribution/2: the labels per window "
        "and device with host_bound_by_activity/host_bound_by_range, host_windows, host_totals)",
    )
    p.add_argument(
        "--device", type=int, action="append", metavar="N", help="only device N (repeatable)"
    )
    p.add_argument(
        "--rank", type=int, action="append", metavar="N", help="only rank N (repeatable)"
    )
    add_processes_argument(p)
    p.add_argument(
        "--example",
        action="store_true",
        help=f"analyse the bundled H200 Nsight Systems capture (default --by {EXAMPLE_BY})",
    )
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
    p.add_argument("--html", metavar="OUT", help="also write a self-contained HTML report")
    tables.add_arguments(p, "the windows table")
    progress.add_quiet_argument(p)


def example_path() -> Path:
    return Path(str(resources.files("pytimings") / "examples" / EXAMPLE))


def run(args: argparse.Namespace) -> int:
    from pytimings.ingest import expand_paths, load

    progress.configure(args.quiet)
    paths: list[str] = list(args.traces)
    by = args.by
    if args.example:
        if paths:
            raise UsageError("--example analyses the bundled capture; give no TRACE with it")
        paths = [str(example_path())]
        by = by or EXAMPLE_BY
    if not paths:
        raise UsageError("give at least one TRACE file (or --example)")
    per_rank_tasks = len(expand_paths(paths)) > 1 or args.executor == "dask" or args.scheduler
    if per_rank_tasks:
        from pytimings.analysis.ranks import analyze_ranks

        result = analyze_ranks(
            *paths,
            by=by,
            devices=args.device,
            ranks=args.rank,
            executor=args.executor,
            scheduler=args.scheduler,
            workers=args.workers,
            processes_as_ranks=args.processes_as_ranks,
        )
    else:
        trace = load(*paths, workers=args.workers, processes_as_ranks=args.processes_as_ranks)
        if not args.processes_as_ranks:
            print_hint(trace)
        with progress.task("Attributing"):
            result = attribute(trace, by=by, devices=args.device, ranks=args.rank)
    print(render_attribution(result, paths))
    for written in tables.write(args, {"windows": result.windows}):
        print(f"\nwrote {written}")
    if args.html:
        from pytimings.report.html import write_html

        title = "pytimings analyze " + ", ".join(Path(p).name for p in paths)
        with progress.task("Writing the HTML report"):
            write_html(result, args.html, title, has_events=not per_rank_tasks)
        print(f"\nwrote {args.html}")
    if args.json:
        try:
            Path(args.json).write_text(result.to_json() + "\n")
        except OSError as exc:
            raise UsageError(f"--json {args.json}: cannot write ({exc.strerror or exc})") from None
        print(f"\nwrote {args.json}")
    return 0
