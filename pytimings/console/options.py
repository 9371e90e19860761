"""The options the commands share, each declared here once: one spelling (old spellings kept
as aliases), one meaning, one help text, one parser for its values.

A command adds the ones that make sense for it (``add_json(parser, "pytimings.diff/1")``).
An option's help is its meaning; where a command says what it writes or reads, that detail
follows after :data:`DETAIL` (``tests/unit/test_option_consistency.py`` compares the
meanings of every option of every subcommand, and fails on one name with two meanings or
one meaning under two spellings).

Durations (:func:`duration`) take units: ``100ms``, ``1s``, ``5m``, ``1h``; a bare number
is seconds. ``-`` is standard input where a command reads a file (:data:`STDIN`), and
standard output where it writes one.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from pytimings.console.args import SEED, bounded_int, finite_float, nonempty, top_rows
from pytimings.errors import install_hint

__all__ = [
    "DETAIL",
    "add_by",
    "add_capture",
    "add_comm_kernels",
    "add_critical_path",
    "add_device_rank",
    "add_example",
    "add_html",
    "add_json",
    "add_knee_pct",
    "add_labels",
    "add_no_table",
    "add_out",
    "add_plot",
    "add_processes_as_ranks",
    "add_quiet",
    "add_seed",
    "add_telemetry",
    "add_top",
    "add_workers",
    "duration",
]

DETAIL = "; "  # an option's meaning, then what this command does with it

WORKERS = bounded_int(1, 4096)

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(h|m|s|ms|us|µs)?\s*$")
_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, None: 1.0}


def duration(text: str) -> float:
    """A positive duration in seconds: ``1h``, ``30m``, ``90s``, ``250ms``, ``500us``, or a
    bare number of seconds (``0.1``). The type of every duration and interval option."""
    found = _DURATION.match(text)
    if found is None or not float(found.group(1)) > 0:
        raise argparse.ArgumentTypeError(
            f"expected a positive time like 100ms, 1s, 5m or 1h (bare numbers are seconds), "
            f"got {text!r}"
        )
    return float(found.group(1)) * _SECONDS[found.group(2)]


duration.__name__ = "duration"  # argparse names the type in its messages


def _help(meaning: str, detail: str | None) -> str:
    return meaning if detail is None else f"{meaning}{DETAIL}{detail}"


def add_out(
    parser: argparse.ArgumentParser, detail: str, *, aliases: tuple[str, ...] = (), **kw: Any
) -> None:
    """``-o/--out PATH``: the file (or directory) a command writes; ``aliases``: spellings
    users have from before (``record --output``)."""
    parser.add_argument(
        "-o", "--out", *aliases, dest="out", metavar="PATH",
        help=_help("where to write the output", detail),
        **kw,
    )  # fmt: skip


def add_json(parser: argparse.ArgumentParser, document: str) -> None:
    """``--json OUT``: the result as a JSON document (``document`` names its schema)."""
    parser.add_argument(
        "--json",
        metavar="OUT",
        help=_help("also write the result as JSON to OUT ('-': standard output)", document),
    )


def add_html(parser: argparse.ArgumentParser, detail: str | None = None) -> None:
    parser.add_argument(
        "--html", metavar="OUT", help=_help("write a self-contained HTML report to OUT", detail)
    )


def add_plot(parser: argparse.ArgumentParser, detail: str) -> None:
    parser.add_argument(
        "--plot",
        metavar="OUT.png",
        help=_help(f"write a plot to OUT (needs matplotlib: {install_hint('plot')})", detail),
    )


def add_top(parser: argparse.ArgumentParser, default: int) -> None:
    """``--top N|all``: rows shown per table; files written always hold every row."""
    parser.add_argument(
        "--top",
        type=top_rows,
        default=default,
        metavar="N",
        help="rows shown per table, 0 or 'all' for every row (files written hold every row)",
    )


def add_quiet(parser: argparse.ArgumentParser) -> None:
    """``-q/--quiet``: one meaning on every command (results still print)."""
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress bars or progress lines, even on a terminal (results still print)",
    )


def add_no_table(parser: argparse.ArgumentParser, detail: str) -> None:
    parser.add_argument(
        "--no-table", action="store_true", help=_help("print no result table", detail)
    )


def add_example(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--example",
        action="store_true",
        help="read the bundled capture (16 LLM decode steps on an H200, Nsight Systems "
        "SQLite) instead of trace files",
    )


def add_by(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--by",
        metavar="NAME_OR_GLOB",
        type=nonempty,
        help="windows are the instances of these ranges (default: one per rank and device)",
    )


def add_device_rank(parser: argparse.ArgumentParser) -> None:
    """``--device N`` and ``--rank N``; with several rank files, a device is looked for on
    every rank (refused only when no rank has it)."""
    parser.add_argument(
        "--device",
        type=int,
        action="append",
        metavar="N",
        help="only device N (repeatable; with several rank files, on the ranks that have it)",
    )
    parser.add_argument(
        "--rank", type=int, action="append", metavar="N", help="only rank N (repeatable)"
    )


def add_processes_as_ranks(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--processes-as-ranks",
        action="store_true",
        help="each process with GPU ops in a file is a rank (a multi-process capture in one "
        "file, e.g. nsys profile torchrun); ranks follow the device ids when each process "
        "used its own GPU, else the pids; with several files, each file's after the last",
    )


def add_workers(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers",
        type=WORKERS,
        default=None,
        metavar="N",
        help="processes that load (threads for nsys exports) or analyse the files in "
        "parallel (default: one per core)",
    )


def add_comm_kernels(parser: argparse.ArgumentParser, config_name: str) -> None:
    """``--comm-kernel GLOB`` and ``--config FILE`` (:mod:`pytimings.commands.comm_rules`
    reads them)."""
    parser.add_argument(
        "--comm-kernel",
        action="append",
        default=[],
        metavar="GLOB",
        help="kernels whose name (full or short, any case) matches GLOB are communication, "
        "on top of the built-in names (repeatable)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help=f"a TOML file with [classify] comm_kernels = [GLOB, ...] (default: ./{config_name} "
        "when present)",
    )


def add_gpu_spec(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gpu-spec",
        metavar="NAME|FILE",
        help="the GPU whose peaks the roofline uses (a name from the table, or a JSON file "
        "with name, peak_tflops, peak_tb_s); default: the GPU the trace names",
    )


def add_capture(parser: argparse.ArgumentParser, detail: str | None = None) -> None:
    parser.add_argument(
        "--capture",
        action="append",
        metavar="FILE",
        help=_help(
            "a trace of CUDA/HIP graph captures (Kineto or nsys, repeatable): kernels the "
            "graphs replay are charged to the ops that launched them while capturing",
            detail,
        ),
    )


def add_critical_path(parser: argparse.ArgumentParser, detail: str) -> None:
    parser.add_argument(
        "--critical-path",
        action="store_true",
        help=_help(
            "the chain of host time, launches, waits and GPU ops that sets the slowest "
            "window's length (docs/replay.md)",
            detail,
        ),
    )


def add_telemetry(parser: argparse.ArgumentParser, detail: str) -> None:
    """``--telemetry`` and ``--telemetry-interval`` (a duration)."""
    parser.add_argument(
        "--telemetry",
        action="store_true",
        help=_help("sample the local GPUs through NVML (docs/telemetry.md)", detail),
    )
    parser.add_argument(
        "--telemetry-interval",
        type=duration,
        default="100ms",
        metavar="TIME",
        help="time between telemetry samples (100ms, 1s; bare numbers are seconds)",
    )


def add_labels(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--labels", default=None, help="comma-separated names, one per run file or group"
    )


def add_knee_pct(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--knee-pct",
        type=finite_float,
        default=10.0,
        help="the rise of the mean TPOT that marks the knee, in percent",
    )


def add_seed(parser: argparse.ArgumentParser, detail: str) -> None:
    parser.add_argument(
        "--seed", type=SEED, default=0, help=_help("seed of the random numbers", detail)
    )
