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
import fcntl
import hashlib
import itertools
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType

from pytimings.console.options import add_out, add_telemetry, duration
from pytimings.errors import UsageError
from pytimings.fileout import private_dir
from pytimings.record.kineto import StepRange
from pytimings.record.launch import Options, hook_environment, write_hook
from pytimings.record.memory import check_period

LAUNCHERS = ("torchrun",)  # executables whose children are the ranks
LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_out(
        p,
        "the recording file; ranks write it with .rank{R} before the suffix",
        aliases=("--output",),
        default="recording.pyt",
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
        type=duration,
        metavar="TIME",
        help="save the recording so far this often (same file, atomic; 30s, 5m)",
    )
    p.add_argument(
        "--kineto",
        metavar="NAME:FIRST-LAST",
        help="also write a torch.profiler trace of steps FIRST..LAST (from 0) of the --modules "
        "region NAME, beside OUT (OUT's name with .pt.trace.json)",
    )
    add_telemetry(
        p, "power, energy, clocks and throttle reasons, into the recording's telemetry table"
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
    if args.flush_every is not None and not 0 < args.flush_every <= threading.TIMEOUT_MAX:
        # (past TIMEOUT_MAX the flush thread's wait raised OverflowError: no flush, exit 0)
        raise UsageError(
            f"--flush-every: must be a positive number of seconds up to "
            f"{threading.TIMEOUT_MAX:.0f}, not {args.flush_every}"
        )
    if args.modules is not None and not args.modules.strip(" ,"):
        raise UsageError("--modules: empty pattern")
    if args.kineto is not None:
        steps = StepRange.parse(args.kineto)
        if args.modules is None:
            raise UsageError("--kineto: steps are counted by a --modules region; give --modules")
        steps.check_counted_by([p.strip() for p in args.modules.split(",") if p.strip()])
    try:
        check_period("--telemetry-interval", args.telemetry_interval)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    out = Path(args.out).resolve()
    if not out.parent.is_dir():
        raise UsageError(f"-o {args.out}: directory {out.parent} does not exist")
    if out.suffix == "":
        raise UsageError(f"-o {args.out}: give the file a suffix (e.g. .pyt)")
    if out.is_dir():
        raise UsageError(f"-o {args.out}: is a directory")
    _check_writable(out, args.out)
    return Options(
        out=str(out),
        comm=args.comm,
        copies=args.copies,
        modules=args.modules,
        flush_every=args.flush_every,
        kineto=args.kineto,
        telemetry=args.telemetry_interval if args.telemetry else None,
    )


def _check_writable(out: Path, given: str) -> None:
    """Refuse, before the program runs, an OUT the recording could not be saved to: a file
    is made and removed beside it (the saves write there, then rename), and an existing OUT
    must be writable too (the check as root passes permission bits, so it writes)."""
    try:
        with tempfile.NamedTemporaryFile(dir=out.parent, prefix=f".{out.name}.", suffix=".probe"):
            pass
        if out.exists():
            with out.open("ab"):
                pass
    except OSError as exc:
        raise UsageError(f"-o {given}: cannot be written ({exc.strerror})") from None


def _lock(out: Path, given: str) -> int:
    """Hold a lock on OUT for the whole run: a second ``record -o`` of the same file at once
    would overwrite the first's recording, both reporting success. The lock file lives in
    this user's private directory (:func:`~pytimings.fileout.private_dir`), named by OUT's
    path, so nothing is left beside OUT and no other user can hold or plant it."""
    key = hashlib.sha256(str(out).encode()).hexdigest()[:32]
    lock_path = private_dir("record-locks") / f"{key}.lock"
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise UsageError(
            f"-o {given}: cannot take the lock {lock_path} ({exc.strerror or exc})"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise UsageError(
            f"-o {given}: another pytimings record is writing it now; give another -o"
        ) from None
    return fd


def _outputs(out: Path) -> dict[Path, tuple[int, int]]:
    """OUT and OUT.rank{R} files there now, with (inode, mtime): saves replace a file by
    renaming a new one over it, so a file this run wrote has a new inode."""
    found = [out, *out.parent.glob(f"{out.stem}.rank*{out.suffix}")]
    return {p: (st.st_ino, st.st_mtime_ns) for p in found if p.is_file() for st in [p.stat()]}


def run(args: argparse.Namespace) -> int:
    argv, launcher = command_line(args.cmd)
    if argv[0] == sys.executable and argv[1].endswith(".py") and not Path(argv[1]).is_file():
        raise UsageError(f"{argv[1]}: no such script")
    opts = options(args)
    out = Path(opts.out)
    lock = _lock(out, args.out)
    try:
        before = _outputs(out)
        code = _run(argv, launcher, opts)
    finally:
        os.close(lock)
    after = _outputs(out)
    if not any(before.get(p) != st for p, st in after.items()):
        print(
            f"pytimings record: no recording written to {args.out}: {argv[0]} started no "
            "Python process that ran to a save (exit status "
            f"{code if code >= 0 else 128 - code})",
            file=sys.stderr,
        )
    return code if code >= 0 else 128 - code


def _run(argv: list[str], launcher: bool, opts: Options) -> int:
    """Run CMD with the hook; its raw wait status."""
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
    return code
