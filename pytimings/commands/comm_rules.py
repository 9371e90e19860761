"""Users' communication rules for the commands that attribute (analyze, diff, export):
``--comm-kernel GLOB`` (repeatable) and a TOML config file.

The config file is ``--config FILE`` when given, else ``pytimings.toml`` in the current
directory when there is one::

    [classify]
    comm_kernels = ["*my_a2a_dispatch*", "fused_moe_combine*"]

Its globs come first, then the command line's; each is checked (one line naming the file
or option, exit 2, when one is malformed or the file is not what it should be).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pytimings.analysis.classes import check_comm_glob
from pytimings.console import options
from pytimings.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CONFIG_NAME = "pytimings.toml"
KNOWN = {"classify": {"comm_kernels"}}


def add_arguments(p: argparse.ArgumentParser) -> None:
    options.add_comm_kernels(p, CONFIG_NAME)


def _read(path: Path, origin: str) -> dict[str, Any]:
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise UsageError(f"{origin} {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{origin} {path}: cannot read it ({exc})") from None
    try:
        doc: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from None
    return doc


def config_comm_kernels(path: Path, origin: str = "--config") -> list[str]:
    """The ``[classify] comm_kernels`` globs of a config file, checked."""
    doc = _read(path, origin)
    for table, value in doc.items():
        if table not in KNOWN or not isinstance(value, dict):
            raise UsageError(f"{path}: unknown table [{table}]; known: [classify]")
        for key in value:
            if key not in KNOWN[table]:
                known = ", ".join(sorted(KNOWN[table]))
                raise UsageError(f"{path}: unknown key {table}.{key}; known: {known}")
    globs = doc.get("classify", {}).get("comm_kernels", [])
    if not isinstance(globs, list):
        raise UsageError(f"{path}: classify.comm_kernels must be a list of globs")
    return [check_comm_glob(g, f"{path}: classify.comm_kernels") for g in globs]


def _config_file(args: argparse.Namespace) -> Path | None:
    """The config file a command reads: ``--config``, else ``./pytimings.toml`` when there is
    one, else none."""
    if args.config is not None:
        return Path(args.config)
    return Path(CONFIG_NAME) if Path(CONFIG_NAME).is_file() else None


def config_path(args: argparse.Namespace) -> str | None:
    """The absolute path of the config file read, for the JSON documents' ``config_file``."""
    path = _config_file(args)
    return None if path is None else str(path.resolve())


def comm_kernels(args: argparse.Namespace) -> tuple[str, ...]:
    """The comm-kernel globs a command runs with: the config file's, then the options'. A
    config file read is said on stderr: it changes the classification silently otherwise."""
    path = _config_file(args)
    from_file: list[str] = []
    if path is not None:
        from_file = config_comm_kernels(path, "--config" if args.config else CONFIG_NAME)
        globs = ", ".join(from_file) or "none"
        print(f"pytimings: read {path.resolve()}: comm kernels {globs}", file=sys.stderr)
    return (*from_file, *(check_comm_glob(g, "--comm-kernel") for g in args.comm_kernel))
