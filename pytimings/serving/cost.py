"""Serving cost: US dollars per million output tokens, from throughput and the GPU price.

``cost_per_mtok_usd = usd_per_gpu_hour * gpus / 3600 / output_tokens_per_s * 1e6``: what
the GPUs cost for the time they take to produce a million output tokens at the measured
output token throughput (the benchmark window's, under the metric definition in use). Input
tokens are not counted separately: their cost is in the time the run took.
"""

from __future__ import annotations

import argparse
import math
import sys

from pytimings.errors import UsageError


def cost_per_mtok_usd(output_tokens_per_s: float, usd_per_gpu_hour: float, gpus: int) -> float:
    """USD per million output tokens; NaN when nothing was produced."""
    if not output_tokens_per_s > 0:
        return math.nan
    return usd_per_gpu_hour * gpus / 3600.0 / output_tokens_per_s * 1e6


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--gpu-price",
        type=float,
        default=None,
        metavar="USD_PER_GPU_HOUR",
        help="add the cost per million output tokens at this GPU price",
    )
    p.add_argument(
        "--gpus",
        type=int,
        default=None,
        help="GPUs the server used (with --gpu-price; 1 if not given)",
    )


def price_from_args(args: argparse.Namespace) -> tuple[float, int] | None:
    """(USD per GPU hour, GPUs) when --gpu-price was given; UsageError on bad values."""
    if args.gpu_price is None:
        if args.gpus is not None:
            raise UsageError("--gpus needs --gpu-price")
        return None
    if args.gpus is None:
        print("note: --gpu-price without --gpus: the cost assumes 1 GPU", file=sys.stderr)
        args.gpus = 1
    if not (args.gpu_price > 0 and math.isfinite(args.gpu_price)):
        raise UsageError(f"--gpu-price must be a positive number, got {args.gpu_price}")
    if args.gpus < 1:
        raise UsageError(f"--gpus must be >= 1, got {args.gpus}")
    return float(args.gpu_price), int(args.gpus)
