"""``pytimings record [options] -- CMD [ARGS...]``: record a program without changing it.

CMD is a Python script (``serve.py ...``, run with this Python), ``-m module ...``, or any
command line that starts Python processes (``python serve.py``, ``torchrun ...``). The
recording is switched on in them by a startup hook passed through the environment
(:mod:`pytimings.record.launch` describes the mechanism, which processes record, the files
and when they are saved). This process waits for CMD, forwards SIGTERM to it, ignores
SIGINT while it runs (a terminal's Ctrl-C reaches CMD itself), and exits with CMD's status.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType

from pytimings.errors import UsageError
from pytimings.record.kineto import StepRange
from pytimings.record.launch import Options, hook_environment, write_hook

LAUNCHERS = ("torchrun",)  # executables whose children are the ranks
LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "--output",
        default="recording.pyt",
        metavar="OUT",
        help="recording file (default recording.pyt); ranks write OUT with .rank{R} "
        "before the suffix",
    )
    p.add_argument(
        "--comm",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="record torch.distributed collectives and P2P with bytes and busbw (default on)",
    )
    p.add_argument(
        "--copies",
        action="store_true",
        help="record host<->device Tensor.to/copy_/cuda/cpu copies as memory regions",
    )
    p.add_argument(
        "--modules",
        metavar="PATTERN",
        help="record the forward of nn.Modules whose qualified class name matches "
        "(fnmatch, comma-separated patterns), e.g. '*DecoderLayer'",
    )
    p.add_argument(
        "--flush-every",
        type=float,
        metavar="S",
        help="save the recording so far every S seconds (same file, atomic)",
    )
    p.add_argument(
        "--kineto",
        metavar="NAME:FIRST-LAST",
        help="also write a torch.profiler trace of steps FIRST..LAST (from 0) of the --modules "
        "region NAME, beside OUT (OUT's name with .pt.trace.json)",
    )
    p.add_argument(
        "--telemetry",
        action="store_true",
        help="sample the local GPUs' power, energy, clocks and throttle reasons through NVML "
        "into the recording's telemetry table (docs/telemetry.md)",
    )
    p.add_argument(
        "--telemetry-interval",
        type=float,
        default=0.1,
        metavar="S",
        help="seconds between telemetry samples (default 0.1)",
    )
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")


def command_line(cmd: list[str]) -> tuple[list[str], bool]:
    """The argv to run for CMD and whether it is a launcher (its children are the ranks)."""
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("no command given: pytimings record [options] -- CMD [ARGS...]")
    if cmd[0] == "-m" or cmd[0].endswith(".py"):
        argv = [sys.executable, *cmd]
    else:
        argv = list(cmd)
    launcher = Path(argv[0]).name in LAUNCHERS or any(
        a == "-m" and b in LAUNCHER_MODULES for a, b in itertools.pairwise(argv)
    )
    return argv, launcher


def options(args: argparse.Namespace) -> Options:
    if args.flush_every is not None and not args.flush_every > 0:
        raise UsageError(
            f"--flush-every: must be a positive number of seconds, not {args.flush_every}"
        )
    if args.modules is not None and not args.modules.strip(" ,"):
        raise UsageError("--modules: empty pattern")
    if args.kineto is not None:
        StepRange.parse(args.kineto)
        if args.modules is None:
            raise UsageError("--kineto: steps are counted by a --modules region; give --modules")
    if not args.telemetry_interval > 0:
        raise UsageError(
            f"--telemetry-interval: must be a positive number of seconds, not "
            f"{args.telemetry_interval}"
        )
    out = Path(args.output).resolve()
    if not out.parent.is_dir():
        raise UsageError(f"-o {args.output}: directory {out.parent} does not exist")
    if out.suffix == "":
        raise UsageError(f"-o {args.output}: give the file a suffix (e.g. .pyt)")
    return Options(
        out=str(out),
        comm=args.comm,
        copies=args.copies,
        modules=args.modules,
        flush_every=args.flush_every,
        kineto=args.kineto,
        telemetry=args.telemetry_interval if args.telemetry else None,
    )


def run(args: argparse.Namespace) -> int:
    argv, launcher = command_line(args.cmd)
    opts = options(args)
    with tempfile.TemporaryDirectory(prefix="pytimings-record-") as hook_dir:
        write_hook(hook_dir)
        env = {**os.environ, **hook_environment(opts, launcher=launcher, hook_dir=hook_dir)}
        try:
            child = subprocess.Popen(argv, env=env)
        except OSError as exc:
            raise UsageError(f"cannot run {argv[0]}: {exc.strerror}") from None

        def forward(signum: int, frame: FrameType | None) -> None:
            child.send_signal(signum)

        previous = {
            signal.SIGTERM: signal.signal(signal.SIGTERM, forward),
            signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),
        }
        try:
            code = child.wait()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
    return code if code >= 0 else 128 - code
