"""Errors that are the user's to fix: the CLI prints them as one line and exits 2."""

from __future__ import annotations

import os


class PytimingsError(Exception):
    """A user mistake (bad file, bad argument). Printed without a traceback."""


class TraceFormatError(PytimingsError):
    """A trace file that cannot be read as what it claims to be."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self) -> tuple[type[TraceFormatError], tuple[str, str]]:
        # pickled by worker processes: rebuilt from (path, problem), not the message
        return (type(self), (self.path, self.problem))


class UsageError(PytimingsError):
    """A bad argument or option value."""


DISTRIBUTION = "pytimings-gpu"
"""This project's distribution name (the import name is ``pytimings``). "pytimings" on PyPI
is an unrelated project: an install hint never names it with extras."""

# extra of pyproject.toml -> what it installs (tests/unit/test_install_hints.py keeps the two
# equal), so a hint names the packages themselves and cannot resolve to another project
EXTRAS: dict[str, tuple[str, ...]] = {
    "torch": ("torch>=2.1",),
    "pandas": ("pandas>=2.0",),
    "serving": ("aiohttp>=3.9", "prometheus_client>=0.17"),
    "plot": ("matplotlib>=3.7",),
    "dask": ("dask[distributed]>=2024.1",),
    "html": ("plotly>=5.20",),
    "telemetry": ("nvidia-ml-py>=12.535", "prometheus_client>=0.17"),
    "telemetry-amd": ("amdsmi>=6.0",),
}


def install_hint(extra: str) -> str:
    """How to install what the extra ``extra`` brings: its packages by name, or from a
    checkout of this project, the extra itself (``pip install '.[html]'``)."""
    packages = " ".join(f"'{requirement}'" for requirement in EXTRAS[extra])
    return f"pip install {packages} (from a pytimings checkout: pip install '.[{extra}]')"
