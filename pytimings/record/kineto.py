"""``pytimings record --kineto NAME:FIRST-LAST``: a torch.profiler (Kineto) trace of a few steps.

A step is one forward of a module recorded by ``--modules`` whose region name (the class's
qualname) is NAME. torch.profiler records the operators of the thread that starts it only (its
callbacks are thread-local) and must be stopped in that thread: stopped from another, torch
raises an ``AssertionError`` or crashes in the export, and a profiler left running in a thread
that has ended crashes the process at exit (torch 2.13). So steps are counted from 0 per
thread, the first thread to begin its step FIRST owns the capture, and only that thread stops
it: when its step LAST ends, when it ends itself before that (a thread-local finalizer), or at
exit when it is the exiting thread. The trace (Chrome JSON, CPU and CUDA activities) is
written beside the recording, named like it with ``.pt.trace.json`` for its suffix
(``run.rank0.pyt`` -> ``run.rank0.pt.trace.json``), so ``pt.load`` and ``pytimings analyze``
read it. The recording's meta (``record.kineto``) says which steps of which thread the file
holds, or, with ``path`` null, why no trace was written (printed on stderr too): the owner is
a thread still running at exit, the program runs its own torch.profiler then (a second one
would end it), or torch raised while starting, stopping or writing the profile; what torch
raises never reaches the program.
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
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

    def check_counted_by(self, patterns: list[str]) -> None:
        """Refuse, before the program runs, a NAME that no ``--modules`` pattern can match:
        its steps are forwards of a class whose qualified name (``module.NAME``) a pattern
        matches. Only a certain miss is refused (a pattern's literal end after its last
        ``*`` is not an end of ``.NAME``); whether steps past the last one ran is known at
        exit (:meth:`StepCapture.close`)."""
        if any(_may_match(pattern, "." + self.name) for pattern in patterns):
            return
        raise UsageError(
            f"--kineto {self}: no --modules pattern ({', '.join(patterns)}) can match a class "
            f"named {self.name!r} (patterns match 'module.ClassName'; NAME is the class name)"
        )


def _may_match(pattern: str, dotted_name: str) -> bool:
    """Whether fnmatch ``pattern`` may match some ``<module>`` + ``dotted_name``."""
    if "?" in pattern or "[" in pattern:
        return True  # not worth deciding: never refused
    if "*" not in pattern:
        return pattern.endswith(dotted_name)
    return dotted_name.endswith(pattern.rsplit("*", 1)[1])


def trace_path(recording: Path) -> Path:
    """Where the Kineto trace of the recording at ``recording`` goes."""
    return recording.with_name(recording.stem + ".pt.trace.json")


class StepCapture:
    """Counts each thread's steps and profiles the range in the thread that owns it (the
    module docstring); ``path()`` says where to write, when it is time. ``written`` is what
    the recording's meta says: the file and its steps, or a note why there is none."""

    def __init__(self, steps: StepRange, path: Callable[[], Path]) -> None:
        self.steps = steps
        self._path = path
        self._local = threading.local()  # .step: this thread's step about to begin
        self._lock = threading.Lock()
        self._owner: int | None = None  # ident of the thread that started the profiler
        self._owner_name: str | None = None
        self._owner_last = -1  # the last step the owner has ended
        self._profiler: Any = None
        self._abandoned: Any = None  # a profiler its running owner keeps (never stopped)
        self.written: dict[str, Any] | None = None
        self._disarmed = False
        self._most_steps = 0  # the most steps one thread has begun (said when none is FIRST)

    def disarm(self) -> None:
        """In a forked child: never profile, never write (the file is the parent's)."""
        self._disarmed = True
        self._profiler = None

    def enter(self) -> None:
        step = getattr(self._local, "step", 0)
        self._most_steps = max(self._most_steps, step + 1)
        if self._disarmed or step != self.steps.first:
            return
        with self._lock:
            if self._owner is not None:  # another thread's (or this one's earlier) capture
                return
            self._owner = threading.get_ident()
            self._owner_name = threading.current_thread().name
            self._owner_last = self.steps.first - 1
        try:
            import torch

            if getattr(torch.autograd.profiler, "_is_profiler_enabled", False):
                self._note(
                    f"the program's own torch.profiler is running at step {self.steps.first} "
                    "(a second profiler in the process would end the program's)"
                )
                return
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            prof: Any = torch.profiler.profile(activities=activities)
            prof.__enter__()
        except Exception as exc:
            self._note(f"torch.profiler did not start: {type(exc).__name__}: {exc}")
            return
        self._profiler = prof
        self._local.at_end = _AtThreadEnd(self)

    def exit(self) -> None:
        step = getattr(self._local, "step", 0)
        self._local.step = step + 1
        if self._owner == threading.get_ident():
            self._owner_last = step
            if step == self.steps.last:
                self._write(step)

    def close(self) -> None:
        """At exit: write what a range still running has captured, if this thread owns it;
        say why there is no trace when step FIRST never began."""
        if self._disarmed:
            return
        if self._owner is None:
            ran = (
                f"no thread began more than {self._most_steps} (steps 0-{self._most_steps - 1})"
                if self._most_steps
                else "no forward of a --modules class of that name ran"
            )
            self._note(f"step {self.steps.first} of {self.steps.name} never began: {ran}")
            return
        if self._profiler is None:
            return
        if self._owner == threading.get_ident():
            self._write(self._owner_last)
            return
        with self._lock:
            prof, self._profiler = self._profiler, None
        if prof is None:
            return
        self._abandoned = prof
        self._note(
            f"thread {self._owner_name!r} started torch.profiler at its step "
            f"{self.steps.first} and was still running at exit, before its step "
            f"{self.steps.last} ended; the profiler can be stopped only in that thread"
        )

    def thread_ended(self) -> None:
        """The owner thread is ending (its thread-local finalizer): write what it captured."""
        self._write(self._owner_last)

    def _write(self, last: int) -> None:
        with self._lock:
            prof, self._profiler = self._profiler, None
        if prof is None:
            return
        path = self._path()
        try:
            prof.__exit__(None, None, None)
            prof.export_chrome_trace(str(path))
        except Exception as exc:
            self._note(f"torch.profiler failed to write {path}: {type(exc).__name__}: {exc}")
            return
        self.written = {
            "path": str(path),
            "steps": [self.steps.first, last],
            "name": self.steps.name,
            "thread": self._owner_name,
            "note": None,
        }

    def _note(self, why: str) -> None:
        """No trace: say why, in the meta and once on stderr."""
        self._profiler = None
        self.written = {
            "path": None,
            "steps": None,
            "name": self.steps.name,
            "thread": self._owner_name,
            "note": why,
        }
        print(f"pytimings record: no Kineto trace of {self.steps}: {why}", file=sys.stderr)


class _AtThreadEnd:
    """Kept in the owner thread's ``threading.local``: CPython frees it in that thread as the
    thread ends, where the profiler can still be stopped."""

    def __init__(self, capture: StepCapture) -> None:
        self._capture = capture

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # never "Exception ignored" in the program's output
            self._capture.thread_ended()
