"""``--format``/``--out`` for the CLIs: write the tables a command computed.

One table goes to the file ``--out``; several go into the directory ``--out``, one file
``<name>.<format>`` each. The writing itself is :meth:`pytimings.table.Table.write`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path

from pytimings.console.options import DETAIL, add_out
from pytimings.errors import UsageError
from pytimings.table import WRITE_FORMATS, Table


def add_arguments(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--format",
        choices=WRITE_FORMATS,
        help=f"write the tables in this format to --out{DETAIL}{what}",
    )
    add_out(p, f"--format writes {what} there")


def check(args: argparse.Namespace) -> None:
    """Refuse, before any work, ``--format`` without ``--out`` and the other way round, and
    an ``--out`` that cannot be made: its nearest existing ancestor must be a writable
    directory (``--out`` is a file, or a directory made with its parents)."""
    if (args.format is None) != (args.out is None):
        raise UsageError("--format and --out go together")
    if args.out is None:
        return
    ancestor = Path(os.path.abspath(args.out)).parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UsageError(f"--out {args.out}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise UsageError(f"--out {args.out}: directory {ancestor} is not writable")


def write(args: argparse.Namespace, tables: Mapping[str, Table]) -> list[str]:
    """Write ``tables`` as ``args.format`` to ``args.out``; the paths written (none when
    no ``--format`` was given)."""
    check(args)
    fmt, out = args.format, args.out
    if fmt is None or out is None:
        return []
    if len(tables) == 1:
        (table,) = tables.values()
        table.write(out, fmt)
        return [os.fspath(out)]
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"--out {out}: cannot create the directory ({exc.strerror or exc})"
        ) from None
    paths = []
    for name, table in tables.items():
        path = Path(out) / f"{name}.{fmt}"
        table.write(path, fmt)
        paths.append(os.fspath(path))
    return paths
