"""``pytimings ops``: the GPU time per launching op and shape, its perf model and roofline,
and the time per category (docs/ops.md)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from pytimings.analysis.graph_capture import Captures
from pytimings.analysis.ops import GpuSpec, gpu_spec
from pytimings.console import progress
from pytimings.errors import UsageError
from pytimings.fileout import write_text
from pytimings.report.ops_text import render_ops
from pytimings.session import Options, analyze


def add_gpu_spec_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--gpu-spec",
        metavar="NAME|FILE",
        help="the GPU whose peaks the roofline uses (a name from the table, or a JSON file "
        "with name, peak_tflops, peak_tb_s); default: the GPU the trace names",
    )


def chosen_gpu(args: argparse.Namespace) -> GpuSpec | None:
    return gpu_spec(args.gpu_spec) if getattr(args, "gpu_spec", None) else None


def add_capture_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--capture",
        action="append",
        metavar="FILE",
        help="a trace of the CUDA/HIP graph captures (Kineto, nsys; repeatable): kernels the "
        "graphs replay are charged to the ops that launched them while capturing",
    )


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
    p.add_argument("traces", nargs="+", metavar="TRACE", help="trace files (Kineto, nsys)")
    p.add_argument("--by", metavar="NAME_OR_GLOB", help="only GPU ops in these ranges' windows")
    p.add_argument("--json", metavar="OUT", help="also write ops, categories, op_attribution, gpu")
    p.add_argument("--top", type=int, default=20, metavar="N", help="rows shown (default 20)")
    add_gpu_spec_argument(p)
    add_capture_argument(p)
    progress.add_quiet_argument(p)


def options(args: argparse.Namespace) -> Options:
    """The session's options from the command line."""
    return Options(by=args.by, gpu=chosen_gpu(args), captures=load_captures(args))


def run(args: argparse.Namespace) -> int:
    from pytimings.ingest import load

    if args.top < 1:
        raise UsageError(f"--top {args.top}: must be at least 1")
    progress.configure(args.quiet)
    opts = options(args)
    trace = load(*args.traces)
    result = analyze(trace, opts)
    with progress.task("Charging GPU ops to their ops"):
        table = result.ops
    print(render_ops(table, args.top))
    if args.json:
        write_text(args.json, json.dumps(table.doc(), indent=2) + "\n", "--json")
        print(f"\nwrote {args.json}")
    return 0
