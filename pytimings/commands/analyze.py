"""``pytimings analyze``: where each window's time went, per device, then the findings."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pytimings.analysis.attribution import attribute
from pytimings.analysis.critical_path import critical_path
from pytimings.analysis.hardware import gpu_metric_findings
from pytimings.analysis.name_checks import check_repeats, check_trace_options
from pytimings.analysis.op_table import ops_of
from pytimings.analysis.replay import replay, what_if
from pytimings.analysis.window_telemetry import (
    gpu_metrics_per_window,
    nsys_gpu_metrics,
    recording_telemetry,
    telemetry_per_window,
)
from pytimings.commands import comm_rules
from pytimings.commands.example import EXAMPLE_BY, paths_or_example, say_example
from pytimings.commands.ops import add_gpu_spec_argument, chosen_gpu, load_captures
from pytimings.console import options, progress
from pytimings.console.args import nonempty
from pytimings.errors import UsageError, install_hint
from pytimings.fileout import write_text
from pytimings.ingest.processes import print_hint
from pytimings.report import tables
from pytimings.report.analysis_text import render_attribution
from pytimings.report.ops_text import render_graph_replays
from pytimings.report.replay_text import render_critical_path, render_fidelity, render_what_if
from pytimings.report.telemetry_text import render_window_gpu_metrics, render_window_telemetry


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "traces",
        nargs="*",
        metavar="TRACE",
        help="trace files (nsys SQLite/report, Kineto JSON, pytimings recordings .pyt)",
    )
    options.add_example(p)  # with --by decode_step unless given
    options.add_by(p)
    options.add_json(
        p,
        "pytimings.attribution/3: the labels per window and device with "
        "host_bound_by_activity/host_bound_by_range, host_windows, host_totals",
    )
    options.add_device_rank(p)
    options.add_processes_as_ranks(p)
    comm_rules.add_arguments(p)
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
    options.add_workers(p)
    p.add_argument(
        "--what-if",
        metavar="SPEC",
        type=nonempty,
        help="replay each window with durations changed: NAME=F scales a range or host "
        "activity with everything inside it (scheduler=0 removes it), self:NAME=F only its "
        "self time, kernel:GLOB=F matching GPU ops, comm:GLOB=F the transfer part of comm "
        "ops by name or kind (comm:all_reduce=0.5); comma-separated",
    )
    options.add_critical_path(p, "with --window N, window N's")
    p.add_argument("--window", type=int, metavar="N", help="with --critical-path: window N")
    options.add_html(p, f"needs plotly: {install_hint('html')}")
    tables.add_arguments(p, "the windows table")
    add_gpu_spec_argument(p)
    options.add_capture(p)


def run(args: argparse.Namespace) -> int:
    from pytimings.ingest import expand_paths, load

    progress.configure(args.quiet)
    paths = paths_or_example(args, list(args.traces), "TRACE")
    by = args.by or (EXAMPLE_BY if args.example else None)
    dask = args.executor == "dask" or args.scheduler
    replaying = args.what_if or args.critical_path
    # several per-rank files are analysed by per-rank tasks, unless they are replayed:
    # then they are loaded as one trace, their ranks meeting at their collectives
    per_rank_tasks = (len(expand_paths(paths)) > 1 and not replaying) or dask
    if args.window is not None and not args.critical_path:
        raise UsageError("--window goes with --critical-path")
    if dask and replaying:
        raise UsageError(
            "--what-if and --critical-path replay the ranks' events in this process: "
            "not with --executor dask or --scheduler (Dask tasks return only results)"
        )
    if per_rank_tasks and args.capture:
        raise UsageError(
            "--capture goes with one trace file (per-rank tasks return no per-op table)"
        )
    changes = check_repeats(args.what_if) if args.what_if else []  # refused before loading
    gpu = chosen_gpu(args)
    captures = load_captures(args)
    kernels = comm_rules.comm_kernels(args)
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
            comm_kernels=kernels,
            gpu=gpu,
        )
    else:
        trace = load(*paths, workers=args.workers, processes_as_ranks=args.processes_as_ranks)
        check_trace_options(  # before any analysis is done or printed
            trace, by=by, ranks=args.rank, devices=args.device, what_if=args.what_if,
            window=args.window, html=bool(args.html),
        )  # fmt: skip
        if not args.processes_as_ranks:
            print_hint(trace)
        with progress.task("Attributing"):
            result = attribute(
                trace, by=by, devices=args.device, ranks=args.rank, comm_kernels=kernels
            )
    result.gpu = gpu
    result.captures = captures
    say_example(args)
    print(render_attribution(result, paths))
    doc = result.to_dict()
    doc["config_file"] = comm_rules.config_path(args)
    samples = None if per_rank_tasks else recording_telemetry(str(expand_paths(paths)[0]))
    if samples is not None:
        for w, t in zip(doc["windows"], telemetry_per_window(samples, result), strict=True):
            w["telemetry"] = t
        print("\n" + render_window_telemetry(doc["windows"]))
    files = expand_paths(paths)
    metrics = nsys_gpu_metrics(str(files[0])) if len(files) == 1 and not dask else None
    if metrics is not None:  # an Nsight export with --gpu-metrics-devices: docs/telemetry.md
        for w, m in zip(doc["windows"], gpu_metrics_per_window(metrics, result), strict=True):
            w["gpu_metrics"] = m
        g = result.trace.gpu_ops
        found = gpu_metric_findings(metrics, g["start"], g["end"], g["device"])
        doc["findings"] += [f.to_dict() for f in found]
        print("\n" + render_window_gpu_metrics(doc["windows"], [f.title for f in found]))
    if not per_rank_tasks and (args.json or args.what_if or args.critical_path):
        with progress.task("Replaying the windows"):
            doc["replay"] = replay(result).fidelity()
        print("\n" + render_fidelity(doc["replay"]))
        if changes:
            doc["what_if"] = what_if(result, changes)
            print("\n" + render_what_if(doc["what_if"]))
        if args.critical_path:
            doc["critical_path"] = critical_path(result, args.window)
            print("\n" + render_critical_path(doc["critical_path"]))
    if args.json or captures is not None:  # per-rank tasks: the ranks' tables, merged
        with progress.task("Charging GPU ops to their ops"):
            ops = ops_of(result)
        doc.update(ops.doc())
        for w, cats in zip(doc["windows"], ops.window_categories, strict=True):
            w["categories"] = cats
        if captures is not None:
            print("\n" + "\n".join(render_graph_replays(ops.attribution)))
    windows = result.windows.with_columns(payload=result.payloads())  # NaN: none
    for written in tables.write(args, {"windows": windows}):
        print(f"\nwrote {written}")
    if args.html:
        from pytimings.report.html import write_html

        title = "pytimings analyze " + (
            Path(files[0]).name if len(files) == 1 else f"({len(files)} files)"
        )
        with progress.task("Writing the HTML report"):
            write_html(result, args.html, title, has_events=not per_rank_tasks,
                       telemetry=samples if samples is not None else metrics,
                       files=[str(f) for f in files])  # fmt: skip
        print(f"\nwrote {args.html}")
    if args.json:
        write_text(args.json, json.dumps(doc, indent=2) + "\n", "--json")
        print(f"\nwrote {args.json}")
    return 0
