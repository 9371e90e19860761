"""``pytimings diff``: A/B of two sets of captures, per label, kernel and collective, with
bootstrap confidence intervals, verdicts and an optional CI gate (``--fail-on``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from pytimings.analysis.diff import crossed, diff, parse_thresholds
from pytimings.analysis.graph_capture import Captures
from pytimings.commands import comm_rules
from pytimings.commands.ops import read_captures
from pytimings.console import options, progress
from pytimings.console.args import nonempty
from pytimings.console.text import signed_duration
from pytimings.errors import UsageError
from pytimings.fileout import write_text
from pytimings.ingest import load
from pytimings.report.diff import render_html, render_text
from pytimings.report.html import write_document
from pytimings.session import Analysis, Options, analyze


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--base", nargs="+", required=True, metavar="TRACE",
        help="the baseline: one or more captures (several are pooled; a directory of "
        "per-rank traces is one capture)",
    )  # fmt: skip
    p.add_argument("--new", nargs="+", required=True, metavar="TRACE", help="the candidate")
    options.add_by(p)
    options.add_json(p, "pytimings.diff/1")
    options.add_html(p)
    p.add_argument(
        "--fail-on", metavar="SPEC", type=nonempty,
        help="exit 1 when a significant change crosses one of these thresholds: "
        "NAME>VALUE or NAME<VALUE with %%, ns, us or ms, comma-separated, e.g. 'window>+5%%'",
    )  # fmt: skip
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap replicates")
    options.add_seed(p, "the bootstrap's")
    options.add_top(p, 20)
    options.add_capture(
        p,
        "both sides' replays, matched by content to each side's graphs (refused only when "
        "it matches neither side)",
    )
    for flag, side in (("--base-capture", "the baseline's"), ("--new-capture", "the candidate's")):
        p.add_argument(
            flag, action="append", metavar="FILE",
            help=f"as --capture, for {side} replays only (repeatable)",
        )  # fmt: skip
    options.add_processes_as_ranks(p)
    comm_rules.add_arguments(p)


def _side(paths: Sequence[str], side: Options) -> list[Analysis]:
    """One analysis per capture (each loaded on its own, so that it stays a group), its
    graph replays matched to ``side.captures``."""
    out = []
    for path in paths:
        trace = load(path, processes_as_ranks=side.processes_as_ranks)
        try:
            out.append(analyze(trace, side))
        except UsageError as exc:
            raise UsageError(f"{path}: {exc}") from None
    return out


_CAPTURE_OPTIONS = ("--capture", "--base-capture", "--new-capture")


def _captures(args: argparse.Namespace) -> tuple[Captures | None, Captures | None]:
    """The base side's and the new side's graph captures (``--capture`` files on both)."""
    files = {opt: getattr(args, opt[2:].replace("-", "_")) or [] for opt in _CAPTURE_OPTIONS}
    seen: dict[str, str] = {}
    for opt, paths in files.items():
        for path in paths:
            if path in seen:
                raise UsageError(f"{opt} {path}: given already (with {seen[path]})")
            seen[path] = opt
    read = {opt: read_captures(paths, opt) if paths else None for opt, paths in files.items()}
    shared = read["--capture"]

    def with_shared(own: Captures | None) -> Captures | None:
        return own if shared is None else shared if own is None else shared.joined(own)

    return with_shared(read["--base-capture"]), with_shared(read["--new-capture"])


def _short(paths: list[str]) -> str:
    """A side in a page title: its file's name, or how many files (all listed below it)."""
    return Path(paths[0]).name if len(paths) == 1 else f"({len(paths)} files)"


def session_options(args: argparse.Namespace) -> Options:
    """The session's options both sides share (each side adds its graph captures)."""
    return Options(
        by=args.by,
        comm_kernels=tuple(comm_rules.comm_kernels(args)),
        processes_as_ranks=args.processes_as_ranks,
    )


def run(args: argparse.Namespace) -> int:
    progress.configure(args.quiet)
    if args.resamples < 100:
        raise UsageError(f"--resamples must be >= 100, got {args.resamples}")
    thresholds = parse_thresholds(args.fail_on) if args.fail_on else []
    shared = session_options(args)
    base_caps, new_caps = _captures(args)
    base = _side(args.base, replace(shared, captures=base_caps))
    new = _side(args.new, replace(shared, captures=new_caps))
    doc = diff(
        [s.attribution for s in base], [s.attribution for s in new], args.resamples,
        args.seed, shared_captures=args.capture or (),
        tables=([s.ops for s in base], [s.ops for s in new]),
    )  # fmt: skip
    doc["base"], doc["new"] = list(args.base), list(args.new)
    doc["config_file"] = comm_rules.config_path(args)
    hits = crossed(doc, thresholds)
    print(render_text(doc, top=args.top))
    if args.json:
        write_text(args.json, json.dumps(doc, indent=1) + "\n", "--json")
    if args.html:
        title = f"pytimings diff: base {_short(args.base)} → new {_short(args.new)}"
        write_document(render_html(doc, title), args.html)
    for th, row in hits:
        pct = "-" if row["delta_pct"] is None else f"{row['delta_pct']:+.1f}%"
        print(
            f"--fail-on {th.text}: {row['name']} {row['verdict']}, "
            f"{signed_duration(row['delta_ns'])} ({pct}) per window",
            file=sys.stderr,
        )
    return 1 if hits else 0
