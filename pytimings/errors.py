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
