"""Progress bars for long work: on a terminal only, only after about a second, never with
``--quiet``.

One context manager, :func:`task`, used by loading, exporting and analysing. The bar (rich)
is drawn on stderr, so stdout stays clean for results; it is started by a timer only when
the work is still running after ``PYTIMINGS_PROGRESS_DELAY_S`` seconds (default 1), so quick
commands print nothing extra. When stderr is not a terminal nothing is drawn at all.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

DEFAULT_DELAY_S = 1.0
_quiet = False


def configure(quiet: bool) -> None:
    """Silence (or allow) progress bars for the rest of this process (the CLIs' --quiet)."""
    global _quiet
    _quiet = quiet


def _delay_s() -> float:
    raw = os.environ.get("PYTIMINGS_PROGRESS_DELAY_S")
    if raw is None:
        return DEFAULT_DELAY_S
    try:
        return max(0.0, float(raw))
    except ValueError:
        return DEFAULT_DELAY_S


def enabled() -> bool:
    """Whether a bar may be drawn: not quiet, and stderr is a terminal."""
    return not _quiet and sys.stderr.isatty()


class Task:
    """Handle given by :func:`task`: ``advance(n)`` and ``total`` updates; cheap when hidden."""

    __slots__ = ("_bar", "_done", "_id", "_lock", "_total")

    def __init__(self, total: int | None) -> None:
        self._total = total
        self._done = 0
        self._bar: Any = None
        self._id: Any = None
        self._lock = threading.Lock()

    def advance(self, n: int = 1) -> None:
        self._done += n
        bar = self._bar
        if bar is not None:
            bar.update(self._id, completed=self._done)

    def set_total(self, total: int | None) -> None:
        self._total = total
        bar = self._bar
        if bar is not None:
            bar.update(self._id, total=total)

    def _start(self, description: str) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        with self._lock:
            if self._bar is not None:
                return
            bar = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(file=sys.stderr),
                transient=True,
            )
            self._id = bar.add_task(description, total=self._total, completed=self._done)
            bar.start()
            self._bar = bar

    def _stop(self) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.stop()
                self._bar = None


@contextmanager
def task(description: str, total: int | None = None) -> Iterator[Task]:
    """A unit of possibly long work; a bar appears if it outlasts the delay on a terminal.

    ``total=None`` draws a spinner without a count (e.g. one file being parsed).
    """
    t = Task(total)
    timer: threading.Timer | None = None
    if enabled():
        timer = threading.Timer(_delay_s(), t._start, args=(description,))
        timer.daemon = True
        timer.start()
    try:
        yield t
    finally:
        if timer is not None:
            timer.cancel()
            timer.join()
            t._stop()
