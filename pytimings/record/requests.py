"""Per-request timelines recorded inside an engine, on the recorder's clock.

::

    with pytimings.request(req_id, input_tokens=n) as r:
        r.phase("queue")
        ...
        r.phase("prefill")
        ...
        r.phase("decode")
        for step in ...:
            r.token()          # one token produced now (k=... for several)

Timestamps come from ``pytimings.now_ns`` (CLOCK_MONOTONIC ns), the clock the recorder
stamps regions on, so request timelines and the engine's regions (steps, all-reduce, KV
transfers) share one timeline. ``token()`` costs one clock read and one list append (a
single append of a tuple, so concurrent callers never split a (time, count) pair); when
the request ends its chunks are sorted by time once and packed into arrays (12 bytes a
chunk), so a long-running engine's log stays small -- still, save and ``clear()`` it now
and then: it keeps every request until told otherwise.

Every request lands in a :class:`RequestLog` (by default the process-wide
:func:`default_log`): finished ones, ones left by an exception (``error="exception"``,
the exception's type and message kept), and ones still open when the log is read (status
"unfinished"). None is dropped. ``pytimings.save`` writes the default log as the
"requests" table (:data:`pytimings.record.storage.BUILTIN_TABLES`), so request timelines
land in the same file as the engine's regions;
:func:`pytimings.ingest.recording_file.load_requests` reads them back.
"""

from __future__ import annotations

import threading
from array import array
from types import TracebackType
from typing import TYPE_CHECKING

from pytimings._core import now_ns
from pytimings.model.requests import RequestRecord, records_from_arrow, records_to_arrow

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ActiveRequest", "RequestLog", "default_log", "request"]


class ActiveRequest:
    """A request in flight; returned by ``request(...)``. Safe to call from several threads."""

    __slots__ = (
        "_chunk_k", "_chunk_ns", "_chunks", "_phases", "end_ns", "error", "error_detail",
        "input_tokens", "req_id", "start_ns",
    )  # fmt: skip

    def __init__(self, req_id: str, input_tokens: int | None, start_ns: int) -> None:
        self.req_id = req_id
        self.input_tokens = input_tokens
        self.start_ns = start_ns
        self.end_ns: int | None = None
        self.error: str | None = None
        self.error_detail = ""
        self._chunks: list[tuple[int, int]] = []  # while open: (time, tokens) per token()
        self._chunk_ns = array("q")  # once ended: sorted, 12 bytes a chunk instead of ~100
        self._chunk_k = array("i")
        self._phases: list[tuple[str, int]] = []

    def phase(self, name: str) -> None:
        """Enter phase ``name`` ("queue", "prefill", "decode", ...) now."""
        if not isinstance(name, str):
            raise TypeError(f"request {self.req_id!r}: phase name must be a str, got {name!r}")
        _check_text(name, f"request {self.req_id!r}: phase name")
        if self.end_ns is not None:
            raise RuntimeError(f"request {self.req_id!r}: phase() after the request ended")
        self._phases.append((name, now_ns()))

    def token(self, k: int = 1) -> None:
        """``k`` output tokens were produced now."""
        if isinstance(k, bool) or not isinstance(k, int):
            raise TypeError(f"token(k={k!r}): k must be an int")
        if not 1 <= k <= _MAX_CHUNK_TOKENS or self.end_ns is not None:
            raise (
                ValueError(f"token(k={k}): k must be at least 1 and at most {_MAX_CHUNK_TOKENS}")
                if self.end_ns is None
                else RuntimeError(f"request {self.req_id!r}: token() after the request ended")
            )
        self._chunks.append((now_ns(), k))

    def _end(self, end_ns: int) -> None:
        """Mark ended and pack the chunks (append order can differ from time order when
        several threads produce tokens, so they are sorted here, once)."""
        self.end_ns = end_ns
        chunks, self._chunks = sorted(self._chunks), []
        self._chunk_ns = array("q", [t for t, _ in chunks])
        self._chunk_k = array("i", [k for _, k in chunks])

    def snapshot(self) -> RequestRecord:
        """The request as a record (built when read, keeping the hot path short)."""
        if self.end_ns is None:
            open_chunks = sorted(self._chunks)
            chunk_ns, chunk_k = [t for t, _ in open_chunks], [k for _, k in open_chunks]
        else:
            chunk_ns, chunk_k = self._chunk_ns.tolist(), self._chunk_k.tolist()
        return RequestRecord(
            req_id=self.req_id,
            start_ns=self.start_ns,
            end_ns=self.end_ns,
            chunk_ns=chunk_ns,
            chunk_tokens=chunk_k,
            input_tokens=self.input_tokens,
            phases=sorted(self._phases, key=lambda p: p[1]),
            error=self.error,
            error_detail=self.error_detail,
        )


class RequestLog:
    """Thread-safe log of request timelines: finished, errored and still open."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: list[ActiveRequest] = []
        self._open: dict[int, ActiveRequest] = {}

    def _enter(self, req: ActiveRequest) -> None:
        with self._lock:
            self._open[id(req)] = req

    def _exit(self, req: ActiveRequest) -> None:
        with self._lock:
            self._open.pop(id(req), None)
            self._done.append(req)

    def records(self) -> list[RequestRecord]:
        """All requests so far, in completion order, then the open ones ("unfinished")."""
        with self._lock:
            done = list(self._done)
            still_open = list(self._open.values())
        return [r.snapshot() for r in done + still_open]

    def __len__(self) -> int:
        with self._lock:
            return len(self._done) + len(self._open)

    def clear(self) -> None:
        """Forget finished requests (open ones stay: they are still being recorded)."""
        with self._lock:
            self._done.clear()

    def to_arrow(self) -> pa.Table:
        return records_to_arrow(self.records())

    @staticmethod
    def from_arrow(table: pa.Table) -> list[RequestRecord]:
        return records_from_arrow(table)


class _RequestContext:
    __slots__ = ("_active", "_input_tokens", "_log", "_req_id")

    def __init__(self, req_id: str, input_tokens: int | None, log: RequestLog) -> None:
        self._req_id = req_id
        self._input_tokens = input_tokens
        self._log = log
        self._active: ActiveRequest | None = None

    def __enter__(self) -> ActiveRequest:
        active = ActiveRequest(self._req_id, self._input_tokens, now_ns())
        self._active = active
        self._log._enter(active)
        return active

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        active = self._active
        assert active is not None, "request context exited without being entered"
        if exc_type is not None:
            active.error, active.error_detail = "exception", f"{exc_type.__name__}: {exc}"
        active._end(now_ns())
        self._log._exit(active)


_DEFAULT = RequestLog()
# the file's limits (docs/recording-format.md): chunk_tokens is int32, input_tokens int64
_MAX_CHUNK_TOKENS = 2**31 - 1
_MAX_INPUT_TOKENS = 2**63 - 1


def _check_text(s: str, what: str) -> None:
    """Refuse, where it is given, a string the save could not write (a lone surrogate is
    not UTF-8: the whole save would fail later, losing every request)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} {s!r} is not valid Unicode (a lone surrogate)") from None


def default_log() -> RequestLog:
    """The process-wide log that ``request()`` writes to unless given another."""
    return _DEFAULT


def request(
    req_id: object, input_tokens: int | None = None, *, log: RequestLog | None = None
) -> _RequestContext:
    """Record one request's timeline: ``with request(id, input_tokens=n) as r: ...``."""
    if input_tokens is not None:
        if isinstance(input_tokens, bool) or not isinstance(input_tokens, int):
            raise TypeError(
                f"request({req_id!r}): input_tokens must be an int, got {input_tokens!r}"
            )
        if not 0 <= input_tokens <= _MAX_INPUT_TOKENS:
            raise ValueError(
                f"request({req_id!r}): input_tokens must be from 0 to {_MAX_INPUT_TOKENS}, "
                f"got {input_tokens}"
            )
    rid = str(req_id)
    _check_text(rid, "request id")
    return _RequestContext(rid, input_tokens, _DEFAULT if log is None else log)


def default_requests_table() -> pa.Table | None:
    """The default log as the "requests" table ``pytimings.save`` writes (None: empty)."""
    return _DEFAULT.to_arrow() if len(_DEFAULT) else None
