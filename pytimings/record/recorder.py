"""Regions, marks and the Recorder: host time, CUDA-event GPU time and NVTX around user code.

The hot path is native (``pytimings._core``): ``region(...)`` returns a small object whose
``__enter__``/``__exit__`` stamp CLOCK_MONOTONIC, record pooled CUDA events on the given
stream and push/pop an NVTX range, writing into per-thread buffers without locks. This module
only wires it up and turns drained buffers into a :class:`~pytimings.model.recording.Recording`.

Semantics worth knowing:

* ``stream=None`` (the default) times the host only; pass a ``torch.cuda.Stream`` or a raw
  ``cudaStream_t`` int (``0`` is the legacy default stream) to also time the GPU.
* Regions nest per thread and must close in LIFO order on the thread that opened them; the
  same region object may be entered again while open (recursion).
* Inside CUDA graph capture no timing event is recorded (it would become part of the graph):
  that instance is timed on the host + NVTX only, flagged ``GRAPH_CAPTURE``, with a one-time
  ``RuntimeWarning``.
* While the recorder is disabled ``region()`` returns one shared do-nothing object.
* GPU times are placed on the host clock through anchors: an event on the legacy default
  stream whose completion is polled (bracketed by host stamps). The first GPU-timed region on
  a device takes the first anchor (a one-time wait for work already queued there); each
  :meth:`Recorder.flush` retakes it (at most every ``anchor_interval_s``) and reports the
  residual against the previous one in ``meta["gpu_anchors"]``. GPU durations come from each
  region's own event pair and are exact whatever the anchor's age; absolute placement loses
  float precision with distance from the anchor (about 1 us after 10 s), so long runs should
  flush now and then. Events are resolved at flush/recording(), or, once a thread has made
  4096 events without a drain, by non-blocking queries on a later region end.
* Regions rely on the GIL (not for free-threaded builds) and are strictly nested per thread,
  so they do not span ``await`` points of interleaved tasks.
* Regions never closed are counted by name in ``meta["open_regions"]``: open at
  ``recording()``/``save``, open when their thread exited, or exited from another thread
  (that exit raises; the opening thread drops the region at its next region or mark, so its
  later regions are not nested under it).
* After ``os.fork()`` the child's recorders start empty (nothing recorded before the fork,
  drained or not, no drop or open counts): the parent keeps those, so both processes can
  save without counting anything twice. Regions open on the forking thread close in the
  child without a record (the parent records them); GPU timing is unavailable in a forked
  child (CUDA does not survive fork), so its GPU regions are flagged GPU_FAILED. A fork while
  another thread drains is safe (the recorder's locks are taken around fork).
"""

from __future__ import annotations

import functools
import inspect
import os
import socket
import weakref
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, overload

import numpy as np
import numpy.typing as npt

from pytimings import _core
from pytimings.model.recording import RECORD_SCHEMA, Recording

P = ParamSpec("P")
R = TypeVar("R")

_RECORD_BYTES = sum(np.dtype(dt).itemsize for dt in RECORD_SCHEMA.values())


class Recorder:
    """A recorder of regions and marks. ``pytimings.region`` uses :func:`default_recorder`.

    ``max_records`` (or ``max_bytes``, counted at the row size of RECORD_SCHEMA, 72 bytes)
    caps how many records are kept until :meth:`clear`; records beyond it are counted by name
    in ``Recording.dropped``, never lost silently (a drop with no memory left to count it by
    name under ``<dropped out of memory, name not counted>``; a region entered with no memory
    for a deeper stack, or on a thread with no memory left for its first region's state, is
    not recorded and counted as dropped, under that name for the latter). The cap covers
    records only: region names and kinds live in one process-wide table that no recorder frees
    (NVTX handles point into it), bounded at 65,536 distinct strings (about 24 MB) and 64 MiB
    of their text; names beyond are recorded as ``<names beyond the limit>`` and counted at
    each use (``meta["names_over_limit"]``, with a one-time ``RuntimeWarning``), none of them
    kept. A name that changes per call (``region(f"decode {request_id}")``) reaches the limit:
    give the varying part as ``payload=`` instead. A save writes
    only the names its records use. ``anchor_interval_s`` is the least time between two
    GPU-clock anchors (retaken at :meth:`flush`).
    """

    region: _core.RegionFactory
    """``region(name, kind="host", stream=None, nbytes=None, payload=None, sample_every=None)``

    A context manager timing its body. ``kind`` is ``"compute"``, ``"comm"``, ``"memory"``,
    ``"host"`` or any string (it becomes the NVTX category); ``nbytes`` the bytes moved;
    ``payload`` an int shown in NVTX and kept in the record; ``sample_every=N`` GPU-times
    only every N-th instance of this name per thread.
    """

    def __init__(
        self,
        *,
        max_records: int | None = None,
        max_bytes: int | None = None,
        anchor_interval_s: float = 1.0,
        start: bool = True,
    ) -> None:
        if max_records is not None and max_bytes is not None:
            raise ValueError("Recorder: give max_records or max_bytes, not both")
        if max_bytes is not None:
            if max_bytes < 0:
                raise ValueError(f"Recorder: max_bytes must be >= 0, got {max_bytes}")
            max_records = max_bytes // _RECORD_BYTES
        if anchor_interval_s < 0:
            raise ValueError(f"Recorder: anchor_interval_s must be >= 0, got {anchor_interval_s}")
        self._native = _core.Recorder(max_records, round(anchor_interval_s * 1e9))
        self.region = self._native.regions
        self._parts: list[dict[str, npt.NDArray[Any]]] = [_empty_columns()]
        self._merged = True  # _parts is one part sorted by start_ns
        _LIVE.add(self)
        if start:
            self.start()

    # --- lifecycle
    def start(self) -> None:
        """Start (or restart) recording; samples the wall-clock offset."""
        self._native.start()

    def stop(self) -> None:
        """Stop recording new regions and resolve what is outstanding (may wait on the GPU)."""
        self._native.stop()
        self.flush()

    def enable(self) -> None:
        """Record again after :meth:`disable`."""
        self._native.enable()

    def disable(self) -> None:
        """Make ``region()`` return a do-nothing object until :meth:`enable`."""
        self._native.disable()

    @property
    def enabled(self) -> bool:
        """True while regions are being recorded (started and enabled)."""
        return self._native.active

    # --- recording
    def mark(self, name: str, kind: str = "host", payload: int | None = None) -> None:
        """An instant: a record with start == end (flag MARK) and an NVTX mark."""
        self.region.mark(name, kind, payload)

    @overload
    def timed(self, name: Callable[P, R], /) -> Callable[P, R]: ...
    @overload
    def timed(
        self,
        name: str | None = None,
        kind: str = "host",
        stream: Any = None,
        nbytes: int | None = None,
        payload: int | None = None,
        sample_every: int | None = None,
    ) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
    def timed(
        self,
        name: str | Callable[P, R] | None = None,
        kind: str = "host",
        stream: Any = None,
        nbytes: int | None = None,
        payload: int | None = None,
        sample_every: int | None = None,
    ) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
        """Decorator: each call of the function is a region (named by its qualname unless
        ``name`` is given). Usable bare (``@timed``) or with arguments."""
        if callable(name):
            return self.timed()(name)
        if name is not None and not isinstance(name, str):
            raise TypeError(f"timed(): name must be a str or None, not {type(name).__name__}")

        def decorate(fn: Callable[P, R]) -> Callable[P, R]:
            if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
                raise TypeError(
                    f"timed(): {fn.__qualname__} is a coroutine function; regions are per-thread "
                    "and strictly nested, so wrap synchronous sections with region() instead"
                )
            # Built once, outside the call path; entering it checks the recorder's state.
            reg = self.region.make(
                name or fn.__qualname__, kind, stream, nbytes, payload, sample_every
            )

            @functools.wraps(fn)
            def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
                with reg:  # closes the region (and its NVTX range) on exceptions too
                    return fn(*args, **kwargs)

            return wrapper

        return decorate

    # --- draining
    def flush(self) -> None:
        """Move finished records out of the native buffers, waiting for outstanding GPU events
        (never call it inside CUDA graph capture), and re-anchor the GPU clock."""
        self._absorb(self._native.drain(True))

    def recording(self, *, sync: bool = True) -> Recording:
        """Everything recorded since start/clear, with the tables its ids point into.

        ``sync=True`` first waits for outstanding GPU events (like :meth:`flush`); with
        ``sync=False`` records whose GPU work is still running are left for a later call
        (``meta["gpu_pending"]`` counts them). Rows are sorted by host start time; the
        columns are read-only (shared with the recorder, not copied).
        """
        self._absorb(self._native.drain(sync))
        if len(self._parts) > 1 or not self._merged:
            merged = {k: np.concatenate([p[k] for p in self._parts]) for k in RECORD_SCHEMA}
            order = np.argsort(merged["start_ns"], kind="stable")
            self._parts = [{k: _frozen(v[order]) for k, v in merged.items()}]
            self._merged = True
        records = self._parts[0]
        strings = _core.strings()
        meta: dict[str, Any] = {
            **self._native.meta(),
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
            "boot_id": boot_id(),
            "names_over_limit": _core.names_over_limit(),
            "cuda_status": _core.cuda_status(),
            "record_bytes": _RECORD_BYTES,
            "open_regions": {strings[i]: n for i, n in self._native.open_regions().items()},
        }
        dropped = {strings[i]: n for i, n in self._native.dropped().items()}
        return Recording(
            records=dict(records),  # read-only columns, shared until the next merge
            strings=strings,
            threads=self._native.threads(),
            meta=meta,
            dropped=dropped,
        )

    def clear(self) -> None:
        """Discard every record and drop count (memory cap budget included), and the count of
        regions that can no longer close (regions open now stay open)."""
        self._native.clear()
        self._forget()

    def _forget(self) -> None:
        self._parts = [_empty_columns()]
        self._merged = True

    def _absorb(self, cols: dict[str, npt.NDArray[Any]]) -> None:
        if len(cols["start_ns"]):
            self._parts.append(cols)  # merged (once) by recording()
            self._merged = False


_LIVE: weakref.WeakSet[Recorder] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # the native side emptied itself (pthread_atfork); records already drained into Python
    # are the parent's too
    for r in list(_LIVE):
        r._forget()


os.register_at_fork(after_in_child=_after_fork_in_child)


def boot_id() -> str | None:
    """The running kernel's boot id (Linux): two files with one boot id stamped one
    CLOCK_MONOTONIC; None where the system does not say."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _frozen(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    a.setflags(write=False)
    return a


def _empty_columns() -> dict[str, npt.NDArray[Any]]:
    return {k: _frozen(np.empty(0, dtype=dt)) for k, dt in RECORD_SCHEMA.items()}


_DEFAULT = Recorder()


def default_recorder() -> Recorder:
    """The process-wide recorder behind ``pytimings.region``, ``timed``, ``mark``, ``flush``."""
    return _DEFAULT


region: _core.RegionFactory = _DEFAULT.region
"""``region(name, kind="host", stream=None, nbytes=None, payload=None, sample_every=None)``
on the default recorder; see :attr:`Recorder.region`."""

timed = _DEFAULT.timed
mark = _DEFAULT.region.mark  # native: no Python frame in between


def flush() -> None:
    """Flush the default recorder (see :meth:`Recorder.flush`)."""
    _DEFAULT.flush()


__all__ = ["Recorder", "default_recorder", "flush", "mark", "region", "timed"]
