"""The ``pytimings`` command: thin; parse arguments, call the library, print.

Each subcommand lives in the module that owns its responsibility and exposes
``add_arguments(parser)`` and ``run(args) -> int``; this file only wires them up, importing
a subcommand's module only when that subcommand runs (startup stays fast).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from pytimings.errors import PytimingsError

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "summary": (
        "pytimings.commands.summary",
        "Summarise traces: kernels, copies, ranges, API calls",
    ),
    "analyze": ("pytimings.commands.analyze", "Attribute end-to-end latency in traces"),
    "ops": (
        "pytimings.commands.ops",
        "GPU time per launching op and shape: perf model, roofline, categories",
    ),
    "diff": ("pytimings.commands.diff", "A/B of two sets of traces with confidence intervals"),
    "overhead": ("pytimings.bench.overhead", "Measure the recorder's per-region overhead here"),
    "loadgen": ("pytimings.serving.loadgen", "Drive an OpenAI-compatible server, save latencies"),
    "compare": ("pytimings.serving.compare", "Compare serving runs (A/B) with confidence limits"),
    "join": (
        "pytimings.commands.join",
        "Join a loadgen run with an engine recording: client TTFT by part",
    ),
    "bench": ("pytimings.bench.cli", "Copy, latency, collective and KV-cache benchmarks"),
    "export": (
        "pytimings.commands.export",
        "Export traces/recordings for Perfetto or chrome://tracing",
    ),
    "report": ("pytimings.commands.report", "Serving runs as an HTML report: CDFs, knee"),
    "record": (
        "pytimings.commands.record",
        "Run a Python program recorded without code changes (per rank, clock-aligned)",
    ),
}


def _build_parser(chosen: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pytimings",
        description="Timing and trace analysis for GPU inference.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:  # only the chosen subcommand's module is imported
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser = _build_parser(chosen)
    args = parser.parse_args(argv)
    try:
        return int(args._module.run(args))
    except PytimingsError as exc:
        print(f"pytimings {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
