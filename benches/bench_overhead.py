"""Per-region overhead of pytimings beside nullcontext, NVTX and torch (issue 2 targets).

Runs the same measurement as ``pytimings overhead`` and checks its result: it asserts no
absolute time, but exits 1 when a row is missing, when a row has neither a number nor a
reason, or when a row that needs no GPU produced no number. Targets are printed PASS/FAIL.

    python benches/bench_overhead.py [--iterations N] [--repeats R] [--json OUT]
"""

from __future__ import annotations

import argparse
import sys

from pytimings.bench import overhead

NEEDS_NOTHING = ("nullcontext", "pytimings_host", "pytimings_disabled")


def check(rows: list[overhead.Row]) -> list[str]:
    problems = []
    keys = [r.key for r in rows]
    for k in overhead.EXPECTED_KEYS:
        if k not in keys:
            problems.append(f"row {k} is missing")
    for r in rows:
        if r.ns is None and not r.note:
            problems.append(f"row {r.key} has neither a number nor a reason")
        if r.key in NEEDS_NOTHING and r.ns is None:
            problems.append(f"row {r.key} could not be measured: {r.note}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    overhead.add_arguments(parser)
    args = parser.parse_args(argv)
    rows = overhead.measure(args.iterations, args.repeats)
    checks = overhead.targets(rows)
    print(overhead.format_table(rows, checks, args.iterations, args.repeats))
    if args.json:
        overhead.write_json(args.json, rows, checks, args.iterations, args.repeats)
    problems = check(rows)
    for p in problems:
        print(f"bench_overhead: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
