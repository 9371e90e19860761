"""The ``pytimings`` command: thin; parse arguments, call the library, print.

Each subcommand lives in the module that owns its responsibility and exposes
``add_arguments(parser)`` and ``run(args) -> int``; this file only wires them up, importing
a subcommand's module only when that subcommand runs (startup stays fast).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence

from pytimings.console import options, progress
from pytimings.console.args import HelpFormatter
from pytimings.console.stdin import read_stdin
from pytimings.errors import DISTRIBUTION, PytimingsError, UsageError, install_hint
from pytimings.fileout import check_writable, refuse_overwriting_inputs, stdout_reserved

STDOUT = "-"  # as an output path

# the options that name a file a command writes (declared in console/options.py); --out
# may also be a directory (--format csv writes one file per table there), and record and
# loadgen check their own -o/--out
OUTPUT_OPTIONS = ("json", "html", "out", "perfetto", "plot")
CHECKED_OUTPUTS = ("json", "html", "perfetto", "plot")
# optional dependencies an output needs: (command, option) -> (module, extra)
OUTPUT_NEEDS = {
    ("analyze", "html"): ("plotly", "html"),
    ("report", "html"): ("plotly", "html"),
    ("compare", "plot"): ("matplotlib", "plot"),
    ("bench", "plot"): ("matplotlib", "plot"),
}

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "summary": (
        "pytimings.commands.summary",
        "Summarise traces: kernels, copies, ranges, API calls",
    ),
    "analyze": ("pytimings.commands.analyze", "Attribute end-to-end latency in traces"),
    "memory": (
        "pytimings.commands.memory",
        "Device memory: peaks and who holds them, allocator churn, growth",
    ),
    "ops": (
        "pytimings.commands.ops",
        "GPU time per launching op and shape: perf model, roofline, categories",
    ),
    "diff": ("pytimings.commands.diff", "A/B of two sets of traces with confidence intervals"),
    "overhead": ("pytimings.bench.overhead", "Measure the recorder's per-region overhead here"),
    "loadgen": ("pytimings.serving.loadgen", "Drive an OpenAI-compatible server, save latencies"),
    "serve-toy": (
        "pytimings.serving.toy",
        "A toy OpenAI-compatible engine (batching, queueing) to try loadgen on",
    ),
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
    "report": (
        "pytimings.commands.report",
        "Serving runs as a report: metrics table as text, --html for the page (CDFs, knee)",
    ),
    "record": (
        "pytimings.commands.record",
        "Run a Python program recorded without code changes (per rank, clock-aligned)",
    ),
}


def _build_parser(chosen: str | None, every: bool = False) -> argparse.ArgumentParser:
    """The command line, with the ``chosen`` subcommand's options (``every``: all of them,
    for the option-consistency test)."""
    parser = argparse.ArgumentParser(
        prog="pytimings",
        description="Timing and trace analysis for GPU inference.",
    )
    parser.add_argument("--version", action="version", version=f"pytimings {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(
            name, help=help_text, description=help_text, formatter_class=HelpFormatter
        )
        if every or name == chosen:  # only the chosen subcommand's module is imported
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            if not any("--quiet" in a.option_strings for a in p._actions):
                options.add_quiet(p)  # -q/--quiet on every command
            p.set_defaults(_module=module, _parser=p)
    return parser


def every_parser() -> argparse.ArgumentParser:
    """The command line with every subcommand's options (imports them all)."""
    return _build_parser(None, every=True)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)  # not "pytimings": an unrelated project's name
    except PackageNotFoundError:  # a source checkout on PYTHONPATH
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser = _build_parser(chosen)
    args, extra = parser.parse_known_args(argv)
    if extra:  # the subcommand's usage, not the top level's
        sub = getattr(args, "_parser", parser)
        sub.error(f"unrecognized arguments: {' '.join(extra)}")
    progress.configure(bool(getattr(args, "quiet", False)))
    try:
        outputs = _check_outputs(args)
        if "format" in vars(args):  # --format/--out: a pair
            from pytimings.report import tables

            tables.check(args)
        with read_stdin(args):
            if STDOUT in outputs.values():
                with stdout_reserved():
                    return int(args._module.run(args))
            return int(args._module.run(args))
    except PytimingsError as exc:
        print(f"pytimings {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _check_outputs(args: argparse.Namespace) -> dict[str, str]:
    """No output option may name one of the command's inputs (checked before any work);
    returns the outputs by flag."""
    outputs, inputs = {}, []
    for key, value in vars(args).items():
        if key.startswith("_"):
            continue
        if key in OUTPUT_OPTIONS and isinstance(value, str):
            outputs[f"--{key}"] = value
        elif isinstance(value, str):
            inputs.append(value)
        elif isinstance(value, list):
            inputs += [v for v in value if isinstance(v, str)]
    refuse_overwriting_inputs(outputs, inputs)
    for key in CHECKED_OUTPUTS:
        value = getattr(args, key, None)
        if isinstance(value, str) and value != STDOUT:
            check_writable(f"--{key}", value)
            needs = OUTPUT_NEEDS.get((args.command, key))
            if needs is not None and importlib.util.find_spec(needs[0]) is None:
                raise UsageError(f"--{key} needs {needs[0]}: {install_hint(needs[1])}")
    return outputs


if __name__ == "__main__":
    sys.exit(main())
