"""``pytimings summary``: load traces, print what ran per rank and device, write tables."""

from __future__ import annotations

import argparse
import json

from pytimings.analysis.summary import summary_json, trace_summary
from pytimings.commands.example import add_example_argument, paths_or_example
from pytimings.console import progress
from pytimings.console.args import top_rows
from pytimings.fileout import write_text
from pytimings.ingest import load
from pytimings.ingest.names import trace_vendor
from pytimings.ingest.processes import add_processes_argument, print_hint
from pytimings.report import tables as report_tables
from pytimings.report.summary_text import render_summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths", nargs="*", metavar="PATH", help="trace files or directories of per-rank traces"
    )
    add_example_argument(parser, "summarise")
    parser.add_argument(
        "--json", metavar="OUT", help="also write the tables as JSON to OUT ('-' for stdout)"
    )
    parser.add_argument(
        "--top",
        type=top_rows,
        default=15,
        metavar="N",
        help="rows shown per table and rank/device, 0 or 'all' for every row (default 15; "
        "--json and --out files always hold every row)",
    )
    parser.add_argument(
        "--all-devices",
        action="store_true",
        help="aggregate over ranks and devices, as nsys stats does",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="files loaded in parallel (threads for nsys exports, else processes)",
    )
    add_processes_argument(parser)
    report_tables.add_arguments(parser, "the tables (a directory: one file per table)")
    progress.add_quiet_argument(parser)


def run(args: argparse.Namespace) -> int:
    progress.configure(args.quiet)
    args.paths = paths_or_example(args, list(args.paths), "PATH")
    trace = load(*args.paths, workers=args.workers, processes_as_ranks=args.processes_as_ranks)
    if not args.processes_as_ranks:
        print_hint(trace)
    per_device = not args.all_devices
    tables = trace_summary(trace, top=args.top, per_device=per_device)
    print(render_summary(tables, trace_vendor(trace)))  # to stderr when --json is '-'
    if trace.dropped:
        print(
            "Not loaded (counted): "
            + ", ".join(f"{k} {v}" for k, v in sorted(trace.dropped.items()))
        )
    if (args.json or args.out) and args.top is not None:  # files are never cut by --top
        tables = trace_summary(trace, top=None, per_device=per_device)
    if args.json:
        doc = json.dumps(summary_json(trace, tables, args.paths), indent=1)
        write_text(args.json, doc + "\n", "--json")
    for written in report_tables.write(args, tables):
        print(f"wrote {written}")
    return 0
