"""``--example``: the bundled capture (16 LLM decode steps on an H200, Nsight Systems
SQLite) in place of a trace path, for ``analyze``, ``summary`` and ``export``; each says
which file it read, so a newcomer can open it with other tools too."""

from __future__ import annotations

import argparse
from importlib import resources
from pathlib import Path

from pytimings.errors import UsageError

EXAMPLE = "decode_16steps_h200.sqlite"
EXAMPLE_BY = "decode_step"  # its step range


def example_path() -> Path:
    return Path(str(resources.files("pytimings") / "examples" / EXAMPLE))


def add_example_argument(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--example", action="store_true", help=f"{what} the bundled H200 Nsight Systems capture"
    )


def paths_or_example(args: argparse.Namespace, paths: list[str], noun: str) -> list[str]:
    """``paths``, or the bundled capture with ``--example`` (its path printed)."""
    if args.example:
        if paths:
            raise UsageError(f"--example reads the bundled capture; give no {noun} with it")
        path = example_path()
        print(f"example: {path}")
        return [str(path)]
    if not paths:
        raise UsageError(f"give at least one {noun} (or --example)")
    return paths
