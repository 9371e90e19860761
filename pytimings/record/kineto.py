"""``pytimings record --kineto NAME:FIRST-LAST``: a torch.profiler (Kineto) trace of a few steps.

A step is one forward of a module recorded by ``--modules`` whose region name (the class's
qualname) is NAME; steps are counted from 0 per process, and FIRST..LAST (inclusive) are
profiled: the profiler starts as step FIRST begins and stops when step LAST ends. The trace
(Chrome JSON, CPU and CUDA activities) is written beside the recording, named like it with
``.pt.trace.json`` for its suffix (``run.rank0.pyt`` -> ``run.rank0.pt.trace.json``), so
``pt.load`` and ``pytimings analyze`` read it. If the program ends during the range, what was
captured is written at exit; the recording's meta (``record.kineto``) says which steps the
file holds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytimings.errors import UsageError

_SYNTAX = re.compile(r"^(?P<name>[^:]+):(?P<first>\d+)-(?P<last>\d+)$")


@dataclass(frozen=True)
class StepRange:
    name: str
    first: int
    last: int

    @classmethod
    def parse(cls, text: str) -> StepRange:
        m = _SYNTAX.match(text.strip())
        if m is None:
            raise UsageError(f"--kineto {text!r}: expected NAME:FIRST-LAST, e.g. Decoder:5-8")
        first, last = int(m["first"]), int(m["last"])
        if last < first:
            raise UsageError(f"--kineto {text!r}: the last step comes before the first")
        return cls(m["name"], first, last)

    def __str__(self) -> str:
        return f"{self.name}:{self.first}-{self.last}"


def trace_path(recording: Path) -> Path:
    """Where the Kineto trace of the recording at ``recording`` goes."""
    return recording.with_name(recording.stem + ".pt.trace.json")


class StepCapture:
    """Counts steps and profiles the range; ``path()`` says where to write, when it is time."""

    def __init__(self, steps: StepRange, path: Callable[[], Path]) -> None:
        self.steps = steps
        self._path = path
        self._step = 0  # the step about to begin
        self._profiler: Any = None
        self.written: dict[str, Any] | None = None  # what the file holds, once written
        self._disarmed = False

    def disarm(self) -> None:
        """In a forked child: never profile, never write (the file is the parent's)."""
        self._disarmed = True
        self._profiler = None

    def enter(self) -> None:
        if self._disarmed:
            return
        if self._step == self.steps.first and self._profiler is None and self.written is None:
            import torch

            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self._profiler = torch.profiler.profile(activities=activities)
            self._profiler.__enter__()

    def exit(self) -> None:
        if self._step == self.steps.last:
            self._write(self.steps.last)
        self._step += 1

    def close(self) -> None:
        """At exit: write what a range still running has captured."""
        if self._profiler is not None:
            self._write(self._step - 1)

    def _write(self, last: int) -> None:
        prof, self._profiler = self._profiler, None
        if prof is None:
            return
        prof.__exit__(None, None, None)
        path = self._path()
        prof.export_chrome_trace(str(path))
        self.written = {
            "path": str(path),
            "steps": [self.steps.first, last],
            "name": self.steps.name,
        }
