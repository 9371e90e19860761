"""``pytimings diff``: A/B of two sets of captures, per label, kernel and collective, with
bootstrap confidence intervals, verdicts and an optional CI gate (``--fail-on``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from pytimings.analysis.attribution import attribute
from pytimings.analysis.diff import crossed, diff, parse_thresholds
from pytimings.analysis.result import Attribution
from pytimings.commands import comm_rules
from pytimings.console import progress
from pytimings.console.args import SEED, nonempty, top_rows
from pytimings.errors import UsageError
from pytimings.fileout import write_text
from pytimings.ingest import load
from pytimings.ingest.processes import add_processes_argument
from pytimings.report.diff import render_html, render_text
from pytimings.report.html import write_document


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--base", nargs="+", required=True, metavar="TRACE",
        help="the baseline: one or more captures (several are pooled; a directory of "
        "per-rank traces is one capture)",
    )  # fmt: skip
    p.add_argument("--new", nargs="+", required=True, metavar="TRACE", help="the candidate")
    p.add_argument("--by", metavar="NAME_OR_GLOB", help="one window per instance of these ranges")
    p.add_argument("--json", metavar="OUT", help="also write the diff as JSON (pytimings.diff/1)")
    p.add_argument("--html", metavar="OUT", help="also write a self-contained HTML page")
    p.add_argument(
        "--fail-on", metavar="SPEC", type=nonempty,
        help="exit 1 when a significant change crosses one of these thresholds: "
        "NAME>VALUE or NAME<VALUE with %%, ns, us or ms, comma-separated, e.g. 'window>+5%%'",
    )  # fmt: skip
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap replicates")
    p.add_argument("--seed", type=SEED, default=0, help="bootstrap seed")
    p.add_argument(
        "--top",
        type=top_rows,
        default=20,
        metavar="N",
        help="rows shown per table, 0 or 'all' for every row (the --json file has every row)",
    )
    add_processes_argument(p)
    comm_rules.add_arguments(p)
    progress.add_quiet_argument(p)


def _side(
    paths: Sequence[str], by: str | None, processes_as_ranks: bool, kernels: Sequence[str]
) -> list[Attribution]:
    """One attribution per capture (each loaded on its own, so that it stays a group)."""
    out = []
    for path in paths:
        trace = load(path, processes_as_ranks=processes_as_ranks)
        try:
            out.append(attribute(trace, by=by, comm_kernels=kernels))
        except UsageError as exc:
            raise UsageError(f"{path}: {exc}") from None
    return out


def run(args: argparse.Namespace) -> int:
    progress.configure(args.quiet)
    if args.resamples < 100:
        raise UsageError(f"--resamples must be >= 100, got {args.resamples}")
    thresholds = parse_thresholds(args.fail_on) if args.fail_on else []
    kernels = comm_rules.comm_kernels(args)
    base = _side(args.base, args.by, args.processes_as_ranks, kernels)
    new = _side(args.new, args.by, args.processes_as_ranks, kernels)
    doc = diff(base, new, resamples=args.resamples, seed=args.seed)
    doc["base"], doc["new"] = list(args.base), list(args.new)
    hits = crossed(doc, thresholds)
    print(render_text(doc, top=args.top))
    if args.json:
        write_text(args.json, json.dumps(doc, indent=1) + "\n", "--json")
    if args.html:
        title = f"pytimings diff: {' '.join(args.new)} vs {' '.join(args.base)}"
        write_document(render_html(doc, title), args.html)
    for th, row in hits:
        pct = "-" if row["delta_pct"] is None else f"{row['delta_pct']:+.1f}%"
        print(
            f"--fail-on {th.text}: {row['name']} {row['verdict']}, "
            f"{row['delta_ns']:+.0f} ns ({pct}) per window",
            file=sys.stderr,
        )
    return 1 if hits else 0
