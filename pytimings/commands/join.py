"""``pytimings join``: a load-generator run and an engine recording on one timeline, client
TTFT decomposed per concurrency level (:mod:`pytimings.serving.join`)."""

from __future__ import annotations

import argparse

from pytimings.console.args import finite_float
from pytimings.errors import UsageError

CLOCKS = ("auto", "same", "estimate")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_file", metavar="RUN.json", help="`pytimings loadgen` run file")
    p.add_argument(
        "engine", metavar="ENGINE.pyt", help="engine recording with pytimings.request timelines"
    )
    p.add_argument("--json", metavar="OUT", default=None, help="write pytimings.join/1 here")
    p.add_argument(
        "--clock",
        default="auto",
        help="same (one host: shared CLOCK_MONOTONIC), estimate (offset from the requests), "
        "auto (default: same when both files name the same host)",
    )
    p.add_argument(
        "--tolerance-ms",
        type=finite_float,
        default=5.0,
        help="longest client send -> engine start when matching by start time (no id)",
    )


def run(args: argparse.Namespace) -> int:
    from pytimings.ingest.recording_file import load_requests
    from pytimings.serving.join import auto_clock, join, render
    from pytimings.serving.runfile import load_run, write_json

    if args.clock not in CLOCKS:
        raise UsageError(f"--clock {args.clock!r}: expected one of {', '.join(CLOCKS)}")
    if not args.tolerance_ms >= 0:
        raise UsageError(f"--tolerance-ms must be >= 0, got {args.tolerance_ms}")
    run_ = load_run(args.run_file)
    engine = load_requests(args.engine)
    mode = auto_clock(run_, args.engine) if args.clock == "auto" else args.clock
    doc, clock = join(run_, engine, args.engine, mode, round(args.tolerance_ms * 1e6))
    if args.json:  # first: output piped into `head` must not lose the file
        write_json(doc, args.json)
    print(render(doc, clock))
    return 0
