"""``-`` as standard input wherever a command reads a file: the stream is copied into a
temporary file named ``stdin`` (every reader takes a path: SQLite and the format detection
need to seek), which the command reads in its place and which is removed afterwards."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pytimings.errors import UsageError

__all__ = ["STDIN", "read_stdin"]

STDIN = "-"  # as an input path
FILE_METAVARS = ("TRACE", "FILE")  # the options that name a file to read


def _input_dests(parser: argparse.ArgumentParser) -> list[str]:
    """The attributes that hold files the command reads: its positionals (a command line
    to run excepted) and the options whose value is a TRACE or a FILE."""
    return [
        action.dest
        for action in parser._actions
        if action.nargs != argparse.REMAINDER
        and (not action.option_strings or action.metavar in FILE_METAVARS)
    ]


@contextmanager
def read_stdin(args: argparse.Namespace) -> Iterator[None]:
    """Within: each ``-`` among the files ``args`` reads is a file holding standard input."""
    parser = getattr(args, "_parser", None)
    where = [
        dest
        for dest in ([] if parser is None else _input_dests(parser))
        if getattr(args, dest, None) == STDIN
        or (isinstance(getattr(args, dest, None), list) and STDIN in getattr(args, dest))
    ]
    if not where:
        yield
        return
    count = sum(
        getattr(args, dest).count(STDIN) if isinstance(getattr(args, dest), list) else 1
        for dest in where
    )
    if count > 1:
        raise UsageError("'-' given twice: standard input can be read once")
    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError("'-' reads standard input, and it is a terminal: pipe a file in")
    with tempfile.TemporaryDirectory(prefix="pytimings-stdin-") as folder:
        path = Path(folder) / "stdin"
        with path.open("wb") as copy:
            shutil.copyfileobj(sys.stdin.buffer, copy)
        (dest,) = where
        value = getattr(args, dest)
        if isinstance(value, list):
            setattr(args, dest, [str(path) if item == STDIN else item for item in value])
        else:
            setattr(args, dest, str(path))
        yield
