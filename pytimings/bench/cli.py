"""``pytimings bench``: copy, latency, collective and KV-cache transfer benchmarks.

Thin: parse arguments, call the benchmark modules, print the table, write JSON and plots.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pytimings.bench.report import (
    BenchReport,
    render_text,
    write_json,
    write_plot,
)
from pytimings.bench.sizes import parse_size, parse_sweep
from pytimings.console import options
from pytimings.errors import UsageError, install_hint
from pytimings.fileout import check_writable

SIZES_HELP = "copy sizes: BEGIN:END (swept by --factor) or one size, K/M/G suffixes"


def _outputs(p: argparse.ArgumentParser, plotted: str) -> None:
    """--json, --plot (``plotted``: what the plot draws against size), -q and --no-table."""
    options.add_json(p, "pytimings.bench/1")
    options.add_plot(p, f"plot {plotted} against size")
    options.add_quiet(p)
    options.add_no_table(p, "the --json file has it")


def _sampling(p: argparse.ArgumentParser, samples: int, warmup: int) -> None:
    p.add_argument(
        "--samples",
        type=int,
        default=samples,
        help="timed samples per row (median, min, max reported)",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=warmup,
        help=f"unmeasured warm-up repetitions first{options.DETAIL}samples",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", metavar="BENCH", required=True)
    fmt = parser.formatter_class  # defaults shown, as the top level

    copy = sub.add_parser(
        "copy", help="host<->device, device-local and peer copy bandwidth", formatter_class=fmt
    )
    copy.add_argument("--sizes", default="4K:1G", help=SIZES_HELP)
    copy.add_argument("--factor", type=int, default=2, help="size step factor")
    copy.add_argument(
        "--rotate",
        default="256M",
        help="rotate through buffers of at least this "
        "many bytes per side so caches never hold a copy's data (default 256M)",
    )
    copy.add_argument("--peer-size", help="size of the peer matrices (default: largest size)")
    _sampling(copy, 10, 3)
    _outputs(copy, "bandwidth")

    lat = sub.add_parser(
        "latency", help="small-copy and event latency, apart from launch cost", formatter_class=fmt
    )
    lat.add_argument("--sizes", default="4:64K", help=SIZES_HELP)
    lat.add_argument("--factor", type=int, default=4, help="size step factor")
    lat.add_argument("--batch", type=int, default=64, help="operations per spin-blocked batch")
    _sampling(lat, 20, 3)
    _outputs(lat, "GPU time per operation")

    coll = sub.add_parser(
        "collective", help="nccl-tests-style collective sweep (under torchrun)", formatter_class=fmt
    )
    coll.add_argument(
        "--op",
        required=True,
        help="all_reduce, all_gather, reduce_scatter, "
        "all_to_all, broadcast or sendrecv; several comma-separated run in one "
        "launch",
    )
    coll.add_argument("-b", "--minbytes", default="8", help="smallest size (default 8)")
    coll.add_argument("-e", "--maxbytes", default="1G", help="largest size (default 1G)")
    coll.add_argument("-f", "--stepfactor", type=int, default=2, help="size factor (default 2)")
    coll.add_argument("-w", "--warmup-iters", type=int, default=5, help="default 5")
    coll.add_argument("-n", "--iters", type=int, default=20, help="timed iterations (default 20)")
    coll.add_argument("--dtype", default="float32", help="element type")
    coll.add_argument(
        "--placement",
        default="both",
        help="out-of-place, in-place or both (rows only for the forms torch.distributed offers)",
    )
    coll.add_argument("--backend", default="auto", help="nccl, gloo or auto (nccl with CUDA)")
    coll.add_argument(
        "--env-ab",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="also run the sweep with this environment (several NAME=VALUE "
        "separated by spaces form one variant; repeat for more variants) and "
        "report each variant's change against the baseline",
    )
    coll.add_argument("--record-env", action="append", default=[], help=argparse.SUPPRESS)
    _outputs(coll, "busbw")

    kv = sub.add_parser(
        "kv", help="KV-cache block transfer patterns (paged vs contiguous)", formatter_class=fmt
    )
    kv.add_argument("--layers", type=int, default=32, help="transformer layers of the model")
    kv.add_argument("--kv-heads", type=int, default=8, help="key/value heads per layer")
    kv.add_argument("--head-dim", type=int, default=128, help="elements per head")
    kv.add_argument(
        "--dtype", default="bfloat16", help=f"element type{options.DETAIL}the KV cache's"
    )
    kv.add_argument("--block-size", type=int, default=16, help="tokens per block (default 16)")
    kv.add_argument(
        "--blocks",
        default="16:1024",
        help="blocks moved: a count or BEGIN:END swept by factor 2 (default 16:1024)",
    )
    _sampling(kv, 10, 2)
    _outputs(kv, "effective bandwidth")


_PLACEMENTS = {"both": (False, True), "out-of-place": (False,), "in-place": (True,)}


def run(args: argparse.Namespace) -> int:
    if getattr(args, "samples", 1) < 1:
        raise UsageError(f"--samples {args.samples}: need at least one sample")
    if getattr(args, "warmup", 0) < 0:
        raise UsageError(f"--warmup {args.warmup}: must be 0 or more")
    if args.json:
        check_writable("--json", args.json)
    if args.plot:
        check_writable("--plot", args.plot)
    if args.bench == "collective":
        return _collective(args)
    if args.bench == "copy":
        from pytimings.bench import copy

        report, missing = copy.copy_report(
            parse_sweep(args.sizes, args.factor),
            parse_size(args.rotate, "--rotate"),
            args.samples,
            args.warmup,
            parse_size(args.peer_size, "--peer-size") if args.peer_size else None,
        )
        _emit(report, args, "gbps", ["path", "engine"], "bandwidth (GB/s)")
        if missing:
            raise UsageError(missing)
    elif args.bench == "latency":
        from pytimings.bench import latency

        if args.batch < 1:
            raise UsageError(f"--batch {args.batch}: need at least one operation per batch")
        report = latency.latency_report(
            parse_sweep(args.sizes, args.factor), args.batch, args.samples, args.warmup
        )
        _emit(report, args, "gpu_us", ["path"], "GPU time per operation (µs)")
    else:
        from pytimings.bench import kv

        shape = kv.KVShape(args.layers, args.kv_heads, args.head_dim, args.dtype, args.block_size)
        report = kv.kv_report(
            shape, parse_sweep(args.blocks, 2, "--blocks"), args.samples, args.warmup
        )
        _emit(report, args, "gbps", ["path", "pattern"], "effective bandwidth (GB/s)")
    return 0


def _collective(args: argparse.Namespace) -> int:
    from pytimings.bench import collective, envab, system
    from pytimings.bench.sizes import size_sweep

    placements = _PLACEMENTS.get(args.placement)
    if placements is None:
        raise UsageError(f"--placement {args.placement!r}: choose {', '.join(_PLACEMENTS)}")
    cfg = collective.SweepConfig(
        ops=tuple(op.strip() for op in args.op.split(",") if op.strip()),
        sizes=size_sweep(
            parse_size(args.minbytes, "-b/--minbytes"),
            parse_size(args.maxbytes, "-e/--maxbytes"),
            args.stepfactor,
            "-b/-e/-f",
        ),
        dtype=args.dtype,
        warmup=args.warmup_iters,
        iters=args.iters,
        placements=placements,
        quiet=args.quiet,
    )
    cfg.validate()
    if system.torch_or_none() is None:
        raise UsageError(
            "collective runs on torch.distributed, and torch is not installed "
            f"({install_hint('torch')})"
        )
    variants: list[tuple[str, dict[str, str]]] = [(envab.BASELINE, {})]
    variants += [(text, envab.parse_variant(text)) for text in args.env_ab]
    rank, world, _ = collective.world_from_env()
    report: BenchReport | None
    if len(variants) == 1:
        report = collective.collective_report(cfg, args.backend, args.record_env)
    else:
        names = sorted({name for _, settings in variants for name in settings})
        child = [
            sys.executable,
            "-m",
            "pytimings.cli",
            "bench",
            "collective",
            "--op",
            ",".join(cfg.ops),
            "-b",
            str(cfg.sizes[0]),
            "-e",
            str(cfg.sizes[-1]),
            "-f",
            str(args.stepfactor),
            "-w",
            str(cfg.warmup),
            "-n",
            str(cfg.iters),
            "--dtype",
            cfg.dtype,
            "--placement",
            args.placement,
            "--backend",
            args.backend,
            "--quiet",
            "--no-table",
        ]
        child += [arg for name in names for arg in ("--record-env", name)]
        runs = envab.run_variants(child, variants, rank, world)
        report = envab.compare(runs, [label for label, _ in variants]) if runs else None
    if report is None:
        return 0
    group = ["variant", "op", "in_place"] if len(variants) > 1 else ["op", "in_place"]
    _emit(report, args, "busbw_gbps", group, "busbw (GB/s)")
    wrong = [r for r in report.rows if not r["valid"]]
    if wrong:
        where = sorted({(r["op"], r["size_bytes"]) for r in wrong})
        print(
            f"pytimings bench: collective gave wrong results in {len(wrong)} row(s): {where}",
            file=sys.stderr,
        )
        return 1
    return 0


def _emit(report: BenchReport, args: Any, plot_y: str, plot_groups: list[str], ylabel: str) -> None:
    if not args.no_table:
        print(render_text(report), flush=True)
    if args.json:
        write_json(report, args.json)
    if args.plot:
        write_plot(report, args.plot, plot_y, plot_groups, ylabel)
