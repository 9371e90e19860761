"""``pytimings analyze``: where each window's time went, per device, then the findings."""

from __future__ import annotations

import argparse
import textwrap
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from pytimings.analysis.attribution import LABELS, Attribution, attribute
from pytimings.analysis.findings import ms, pct
from pytimings.errors import UsageError
from pytimings.ingest.processes import add_processes_argument, print_hint
from pytimings.report import progress, tables
from pytimings.report.text import table

EXAMPLE = "decode_16steps_h200.sqlite"
EXAMPLE_BY = "decode_step"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "traces", nargs="*", metavar="TRACE", help="trace files (nsys SQLite/report, Kineto JSON)"
    )
    p.add_argument("--by", metavar="NAME_OR_GLOB", help="one window per instance of these ranges")
    p.add_argument(
        "--json", metavar="OUT", help="also write the result as JSON (pytimings.attribution/1)"
    )
    p.add_argument(
        "--device", type=int, action="append", metavar="N", help="only device N (repeatable)"
    )
    p.add_argument(
        "--rank", type=int, action="append", metavar="N", help="only rank N (repeatable)"
    )
    add_processes_argument(p)
    p.add_argument(
        "--example",
        action="store_true",
        help=f"analyse the bundled H200 Nsight Systems capture (default --by {EXAMPLE_BY})",
    )
    p.add_argument(
        "--executor",
        choices=("local", "dask"),
        default="local",
        help="where per-rank files are analysed when several are given: local processes "
        "(default) or a Dask cluster (one task per rank; only results travel)",
    )
    p.add_argument(
        "--scheduler",
        metavar="tcp://HOST:PORT",
        help="the Dask scheduler to use (default: a LocalCluster of processes here)",
    )
    p.add_argument(
        "--workers", type=int, default=None, metavar="N", help="worker processes (local or Dask)"
    )
    p.add_argument("--html", metavar="OUT", help="also write a self-contained HTML report")
    tables.add_arguments(p, "the windows table")
    progress.add_quiet_argument(p)


def example_path() -> Path:
    return Path(str(resources.files("pytimings") / "examples" / EXAMPLE))


def run(args: argparse.Namespace) -> int:
    from pytimings.ingest import _expand, load

    progress.configure(args.quiet)
    paths: list[str] = list(args.traces)
    by = args.by
    if args.example:
        if paths:
            raise UsageError("--example analyses the bundled capture; give no TRACE with it")
        paths = [str(example_path())]
        by = by or EXAMPLE_BY
    if not paths:
        raise UsageError("give at least one TRACE file (or --example)")
    per_rank_tasks = len(_expand(paths)) > 1 or args.executor == "dask" or args.scheduler
    if per_rank_tasks:
        from pytimings.analysis.ranks import analyze_ranks

        result = analyze_ranks(
            *paths,
            by=by,
            devices=args.device,
            ranks=args.rank,
            executor=args.executor,
            scheduler=args.scheduler,
            workers=args.workers,
            processes_as_ranks=args.processes_as_ranks,
        )
    else:
        trace = load(*paths, workers=args.workers, processes_as_ranks=args.processes_as_ranks)
        if not args.processes_as_ranks:
            print_hint(trace)
        with progress.task("Attributing"):
            result = attribute(trace, by=by, devices=args.device, ranks=args.rank)
    print(render(result, paths))
    for written in tables.write(args, {"windows": result.windows}):
        print(f"\nwrote {written}")
    if args.html:
        from pytimings.report.html import write_html

        title = "pytimings analyze " + ", ".join(Path(p).name for p in paths)
        with progress.task("Writing the HTML report"):
            write_html(result, args.html, title, has_events=not per_rank_tasks)
        print(f"\nwrote {args.html}")
    if args.json:
        try:
            Path(args.json).write_text(result.to_json() + "\n")
        except OSError as exc:
            raise UsageError(f"--json {args.json}: cannot write ({exc.strerror or exc})") from None
        print(f"\nwrote {args.json}")
    return 0


def render(a: Attribution, paths: list[str]) -> str:
    w = a.windows
    out: list[str] = []
    names = ", ".join(Path(p).name for p in paths)
    scope = f"by {a.by}: {len(w)} window entries" if a.by else "whole trace"
    out.append(f"pytimings analyze  {names}  ({scope})")
    dropped = {k: v for k, v in a.trace.dropped.items() if v}
    if a.ignored:
        ignored = ", ".join(f"{k} {v}" for k, v in a.ignored.items())
        out.append(f"ignored by the partition: {ignored}")
    if dropped:
        out.append(
            "not represented by the loader: "
            + ", ".join(f"{k} {v}" for k, v in sorted(dropped.items()))
        )
    # per device
    keys = sorted({(int(r), int(d)) for r, d in zip(w["rank"], w["device"], strict=False)})
    header = ["label"]
    for r, d in keys:
        tag = f"r{r} GPU {d}" if len({k[0] for k in keys}) > 1 else f"GPU {d}"
        header += [tag, "share"]
    rows = []
    for lab in ("window", *LABELS):
        row = [lab]
        for r, d in keys:
            m = (w["rank"] == r) & (w["device"] == d)
            v = int(w[f"{lab}_ns"][m].sum())
            tot = max(1, int(w["window_ns"][m].sum()))
            row += [ms(v), pct(v / tot)]
        rows.append(row)
    out += ["", "Where the time went (per device, all windows)"]
    out += table(header, rows, "l" + "rr" * len(keys))
    if a.by is not None:
        st = a.per_window_stats()
        rows = [
            [
                lab.removesuffix("_ns"),
                str(s["count"]),
                ms(s["mean"]),
                ms(s["p50"]),
                ms(s["p99"]),
                ms(s["max"]),
            ]
            for lab, s in st.items()
        ]
        out += ["", f"Per {a.by} window"]
        out += table(["label", "n", "mean", "p50", "p99", "max"], rows, "lrrrrr")
    slow = a.slowest(5)
    t0 = int(w["start_ns"].min()) if len(w) else 0
    payload = a.trace.ranges["payload"]

    def label(s: dict[str, Any]) -> str:
        rr = int(a.window_range_rows[s["row"]])
        if rr >= 0 and not np.isnan(payload[rr]):
            return f"{s['name']} (payload {payload[rr]:g})"
        return str(s["name"])

    rows = [
        [
            label(s),
            f"{(s['start_ns'] - t0) / 1e6:.3f} ms",
            str(s["rank"]),
            str(s["device"]),
            ms(s["window_ns"]),
            f"{s['dominant']} ({pct(s['dominant_ns'] / max(1, s['window_ns']))})",
        ]
        for s in slow
    ]
    out += ["", "Slowest windows"]
    out += table(
        ["window", "starts (from 1st)", "rank", "GPU", "length", "dominant label"], rows, "lrrrrl"
    )
    lat: dict[str, Any] = a.launch_latency.summary()
    out += ["", "Launch latency (op start - launch call start)"]
    out.append(
        f"  {lat['count']} ops: p50 {ms(lat['p50'])}, p99 {ms(lat['p99'])}, max {ms(lat['max'])}; "
        f"{ms(lat['in_host_bound_ns'])} of it inside host_bound gaps"
        + (f"; {lat['negative']} negative (clock skew)" if lat["negative"] else "")
        + (
            f"; {a.launches.unlinked} ops carry a correlation id no launch call has"
            if a.launches.unlinked
            else ""
        )
    )
    if a.collectives is not None:
        c = a.collectives
        out += ["", "Collectives across ranks (clocks aligned by collective end times)"]
        rows = []
        for r in sorted(c.clock_offset_ns):
            m = c.table["rank"] == r
            sk = c.table["skew_ns"][m]
            rows.append(
                [
                    str(r),
                    ms(c.clock_offset_ns[r]),
                    ms(float(np.median(sk))) if sk.size else "-",
                    ms(int(c.table["wait_ns"][m].sum())),
                    str(c.last_counts.get(r, 0)),
                ]
            )
        out += table(["rank", "clock offset", "median skew", "wait", "last"], rows, "rrrrr")
    out += ["", "Findings (biggest losses first)"]
    for i, f in enumerate(a.findings(), 1):
        out += textwrap.wrap(f"{i}. [{f.layer}] {f.title}", width=100, subsequent_indent="   ")
    return "\n".join(out)
