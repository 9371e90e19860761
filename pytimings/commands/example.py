"""``--example`` (:func:`pytimings.console.options.add_example`): the bundled capture (16
LLM decode steps on an H200, Nsight Systems SQLite) in place of a trace path, for every
command that reads traces; each says which file it read, so a newcomer can open it with
other tools too."""

from __future__ import annotations

import argparse
from importlib import resources
from pathlib import Path

from pytimings.errors import UsageError

EXAMPLE = "decode_16steps_h200.sqlite"
EXAMPLE_BY = "decode_step"  # its step range


def example_path() -> Path:
    return Path(str(resources.files("pytimings") / "examples" / EXAMPLE))


def paths_or_example(args: argparse.Namespace, paths: list[str], noun: str) -> list[str]:
    """``paths``, or the bundled capture with ``--example`` (:func:`say_example` names it
    once the options are checked)."""
    if args.example:
        if paths:
            raise UsageError(f"--example reads the bundled capture; give no {noun} with it")
        return [str(example_path())]
    if not paths:
        raise UsageError(f"give at least one {noun} (or --example)")
    return paths


def say_example(args: argparse.Namespace) -> None:
    """Print which file ``--example`` read (after every check: nothing precedes an error)."""
    if args.example:
        print(f"example: {example_path()}")
