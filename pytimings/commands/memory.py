"""``pytimings memory``: device memory over a capture: peaks, who holds them, churn, growth."""

from __future__ import annotations

import argparse
import json

from pytimings.analysis.memory import analyze_memory, memory_findings
from pytimings.commands.example import paths_or_example, say_example
from pytimings.console import options, progress
from pytimings.errors import UsageError
from pytimings.fileout import write_text
from pytimings.ingest import load
from pytimings.report.memory_text import render_memory
from pytimings.session import analyze

NO_EVENTS = (
    "has no memory events: capture with torch.profiler(profile_memory=True), "
    "nsys --cuda-memory-usage=true, torch.cuda.memory._snapshot(), or pytimings.sample_memory"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("traces", nargs="*", metavar="TRACE", help="trace files or memory snapshots")
    options.add_example(p)
    options.add_by(p)
    options.add_json(p, "the peaks, holders, churn, growth and findings")
    options.add_processes_as_ranks(p)


def run(args: argparse.Namespace) -> int:
    paths = paths_or_example(args, list(args.traces), "TRACE")
    progress.configure(args.quiet)
    trace = load(*paths, processes_as_ranks=args.processes_as_ranks)
    if not len(trace.mem_events):
        raise UsageError(f"{', '.join(paths)} {NO_EVENTS}")
    say_example(args)
    with progress.task("Analysing memory"):
        if args.by is not None and len(trace.gpu_ops):  # native calls' host_bound share
            result = analyze(trace, by=args.by).memory
        else:
            result = analyze_memory(trace, args.by)
        found = memory_findings(result)
    print(render_memory(result, found))
    if args.json:
        doc = {**result.details(), "findings": [f.to_dict() for f in found]}
        write_text(args.json, json.dumps(doc, indent=1) + "\n", "--json")
        print(f"\nwrote {args.json}")
    return 0
