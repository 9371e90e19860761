"""``pytimings summary``: load traces, print what ran per rank and device, write tables."""

from __future__ import annotations

import argparse
import json

from pytimings.analysis.summary import summary_json, trace_summary
from pytimings.commands.example import paths_or_example, say_example
from pytimings.console import options, progress
from pytimings.fileout import write_text
from pytimings.ingest import load
from pytimings.ingest.names import trace_vendor
from pytimings.ingest.processes import print_hint
from pytimings.report import tables as report_tables
from pytimings.report.summary_text import render_summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths", nargs="*", metavar="PATH", help="trace files or directories of per-rank traces"
    )
    options.add_example(parser)
    options.add_json(parser, "the tables")
    options.add_top(parser, 15)
    parser.add_argument(
        "--all-devices",
        action="store_true",
        help="aggregate over ranks and devices, as nsys stats does",
    )
    options.add_workers(parser)
    options.add_processes_as_ranks(parser)
    report_tables.add_arguments(parser, "the tables (a directory: one file per table)")


def run(args: argparse.Namespace) -> int:
    progress.configure(args.quiet)
    args.paths = paths_or_example(args, list(args.paths), "PATH")
    say_example(args)
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
