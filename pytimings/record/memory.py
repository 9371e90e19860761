"""Memory samples over a run: the process's resident set and, when torch has initialised
CUDA, ``torch.cuda.memory_allocated``, so that a slow leak in a long-running engine shows.

::

    pytimings.sample_memory()                    # one sample, now
    stop = pytimings.sample_memory(every_s=1.0)  # one now, then every second (daemon thread)
    ...
    stop()                                       # one last sample, then the thread ends
    with pytimings.sample_memory(every_s=1.0):   # the same, as a context manager
        ...

A sample is ``(t_ns, rss_bytes, cuda_allocated_bytes)``: ``t_ns`` on ``pytimings.now_ns``
(the recorder's clock), ``rss_bytes`` the resident pages of ``/proc/self/statm`` times the
page size (Linux; elsewhere ``resource.getrusage``'s ``ru_maxrss``, the *peak* resident
set), ``cuda_allocated_bytes`` the current device's bytes held by torch's caching
allocator's tensors, or None when torch is not imported or CUDA not initialised (torch is
never imported for this). Samples land in a :class:`MemoryLog` (by default the
process-wide :func:`default_log`); ``pytimings.save`` writes it as the "memory" table
(:data:`pytimings.record.storage.BUILTIN_TABLES`): ``t_ns`` int64, ``rss_bytes`` int64,
``cuda_allocated_bytes`` int64 (null: none).
:func:`pytimings.ingest.recording_file.load_memory` reads it back; ``pytimings report``
gives its trend the soak metrics' Mann-Kendall verdict.
"""

from __future__ import annotations

import os
import sys
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from pytimings._core import now_ns
from pytimings.model.samples import MemoryRow, MemorySamples

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "MemoryLog",
    "SampleLog",
    "Sampler",
    "default_log",
    "sample_memory",
]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """The resident set now (Linux), else the peak resident set (``ru_maxrss``)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # macOS counts bytes


def cuda_allocated_bytes() -> int | None:
    """``torch.cuda.memory_allocated()`` when torch is imported and CUDA initialised."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_initialized():
        return None
    return int(cuda.memory_allocated())


RowT = TypeVar("RowT", bound=tuple[Any, ...])


class RowLog(Generic[RowT]):
    """Thread-safe list of sample rows (the memory and the telemetry logs)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: list[RowT] = []

    def _add(self, rows: list[RowT]) -> None:
        with self._lock:
            self._rows.extend(rows)

    def _sorted(self) -> list[RowT]:
        with self._lock:
            return sorted(self._rows)

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()


class MemoryLog(RowLog[MemoryRow]):
    """Thread-safe list of memory samples."""

    def sample(self) -> None:
        """Take one sample now."""
        self._add([(now_ns(), rss_bytes(), cuda_allocated_bytes())])

    def samples(self) -> MemorySamples:
        return MemorySamples.from_rows(self._sorted())

    def to_arrow(self) -> pa.Table:
        import pyarrow as pa

        samples = self.samples()
        return pa.table(
            {
                "t_ns": pa.array(samples.t_ns, pa.int64()),
                "rss_bytes": pa.array(samples.rss_bytes, pa.int64()),
                "cuda_allocated_bytes": pa.array(samples.cuda_allocated_bytes, pa.int64()),
            }
        )


class SampleLog(Protocol):
    """What a :class:`Sampler` samples into (MemoryLog, telemetry's TelemetryLog)."""

    def sample(self) -> None: ...


# the longest sampling period: a wait of 1e300 s overflows the platform's time_t, which
# killed the sampler thread at its first wait
MAX_PERIOD_S = 86_400.0


def check_period(what: str, every_s: float) -> None:
    """ValueError unless ``every_s`` is a period a Sampler can wait: (0, MAX_PERIOD_S]."""
    if not 0 < every_s <= MAX_PERIOD_S:
        raise ValueError(
            f"{what}: must be a positive number of seconds up to {MAX_PERIOD_S:g}, not {every_s}"
        )


class Sampler:
    """A background sampler: call it (or leave its ``with`` block) to stop it."""

    def __init__(self, log: SampleLog, every_s: float, name: str = "pytimings-memory") -> None:
        check_period(f"{name} every_s", every_s)
        self._log = log
        self._every_s = every_s
        self._stop = threading.Event()
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name=name, daemon=True)
        self._thread.start()
        started.wait()  # the first sample is taken before sample_memory() returns

    def _run(self, started: threading.Event) -> None:
        # sampled from the running thread: its own stack is already resident, so starting
        # the sampler is no step in the series
        try:
            self._log.sample()
        finally:  # a first sample that raises must not leave the caller waiting for it
            started.set()
        stopped = False
        while not stopped:  # the last sample too, before the thread's exit frees its stack
            stopped = self._stop.wait(self._every_s)
            self._log.sample()

    def __call__(self) -> None:
        """Stop sampling (one last sample first); calling it again does nothing."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()

    stop = __call__

    def __enter__(self) -> Sampler:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self()


_DEFAULT = MemoryLog()


def default_log() -> MemoryLog:
    """The process-wide log ``sample_memory`` writes to unless given another."""
    return _DEFAULT


def sample_memory(every_s: float | None = None, *, log: MemoryLog | None = None) -> Sampler | None:
    """One memory sample now; with ``every_s``, also one every ``every_s`` seconds from a
    daemon thread until the returned :class:`Sampler` is called (module docstring)."""
    target = _DEFAULT if log is None else log
    if every_s is None:
        target.sample()
        return None
    check_period(f"sample_memory(every_s={every_s})", every_s)
    return Sampler(target, every_s)


def default_memory_table() -> pa.Table | None:
    """The default log as the "memory" table ``pytimings.save`` writes (None: empty)."""
    return _DEFAULT.to_arrow() if len(_DEFAULT) else None
