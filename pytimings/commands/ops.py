"""``pytimings ops``: the GPU time per launching op and shape, its perf model and roofline,
and the time per category (docs/ops.md)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from pytimings.analysis.graph_capture import Captures
from pytimings.analysis.name_checks import check_trace_options
from pytimings.analysis.ops import GpuSpec, gpu_spec
from pytimings.commands import comm_rules
from pytimings.commands.example import paths_or_example, say_example
from pytimings.console import options, progress
from pytimings.errors import UsageError
from pytimings.fileout import write_text
from pytimings.report.ops_text import render_ops
from pytimings.session import Options, analyze


def chosen_gpu(args: argparse.Namespace) -> GpuSpec | None:
    return gpu_spec(args.gpu_spec) if getattr(args, "gpu_spec", None) else None


def load_captures(args: argparse.Namespace) -> Captures | None:
    """The graphs captured in the ``--capture`` files; a file with none is a usage error."""
    files = getattr(args, "capture", None)
    return read_captures(files, "--capture") if files else None


def read_captures(files: Sequence[str], option: str) -> Captures:
    """The graphs captured in ``files`` (given with ``option``); a file with none is a
    usage error."""
    from pytimings.ingest import load

    caps = Captures()
    for path in files:
        with progress.task(f"Reading the capture {path}"):
            src = caps.add(load(path), str(path))
        if not src.graphs:
            never = f" ({src.incomplete} begin-capture calls never end)" if src.incomplete else ""
            raise UsageError(
                f"{option} {path}: no graph capture in it: no cudaStreamBeginCapture ... "
                f"cudaStreamEndCapture pair on a thread{never}"
            )
    return caps


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("traces", nargs="*", metavar="TRACE", help="trace files (Kineto, nsys)")
    options.add_example(p)
    options.add_by(p)
    options.add_json(p, "ops, categories, op_attribution, gpu")
    options.add_top(p, 20)
    options.add_device_rank(p)
    options.add_processes_as_ranks(p)
    comm_rules.add_arguments(p)
    options.add_gpu_spec(p)
    options.add_capture(p)


def session_options(args: argparse.Namespace) -> Options:
    """The session's options from the command line."""
    return Options(
        by=args.by,
        devices=tuple(args.device) if args.device else None,
        ranks=tuple(args.rank) if args.rank else None,
        comm_kernels=tuple(comm_rules.comm_kernels(args)),
        gpu=chosen_gpu(args),
        captures=load_captures(args),
        processes_as_ranks=args.processes_as_ranks,
    )


def run(args: argparse.Namespace) -> int:
    from pytimings.ingest import load

    paths = paths_or_example(args, list(args.traces), "TRACE")
    progress.configure(args.quiet)
    opts = session_options(args)
    trace = load(*paths, processes_as_ranks=args.processes_as_ranks)
    check_trace_options(trace, by=args.by, ranks=args.rank, devices=args.device)
    say_example(args)
    result = analyze(trace, opts)
    with progress.task("Charging GPU ops to their ops"):
        table = result.ops
    print(render_ops(table, args.top))
    if args.json:
        write_text(args.json, json.dumps(table.doc(), indent=2) + "\n", "--json")
        print(f"\nwrote {args.json}")
    return 0
