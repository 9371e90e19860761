"""One request's timeline: the record every serving measurement is computed from.

A :class:`RequestRecord` holds CLOCK_MONOTONIC nanoseconds (the recorder's clock,
``pytimings.now_ns``): when the request was sent (load generator) or entered (engine), when
each streamed chunk arrived (engine: each ``token()`` call) with the number of tokens it
carried, when the request ended, its input/output token counts, the phase transitions the
engine marked, and an error kind if it failed. Both producers write it -- the load
generator's JSON (``pytimings.serving/2``) and the in-engine request log -- and
:mod:`pytimings.serving.metrics` reads only this type.

Status is derived, never stored: ``error`` set -> "error"; no ``end_ns`` -> "unfinished"
(the request was still open when the log was read); otherwise "ok". Only "ok" records enter
latency figures; the others are counted by kind.

Arrow form (the "requests" table of a saved recording), one row per request:
``req_id`` string, ``start_ns`` int64, ``end_ns`` int64 (null: unfinished), ``input_tokens``
int64 (null: unknown), ``output_tokens`` int64 (null: the sum of ``chunk_tokens``),
``chunk_ns`` list<int64>, ``chunk_tokens`` list<int32>, ``phase_names`` list<string>,
``phase_ns`` list<int64>, ``error`` string (null: none), ``error_detail`` string,
``server_id`` string (null: unknown).

``scheduled_ns`` (load generator only; null elsewhere): when the request was due -- its
arrival time in an open-loop schedule or a trace, the moment its closed-loop worker took it
-- while ``start_ns`` is when its last byte was handed to the socket (what the server can
see); ``start_ns - scheduled_ns`` is the client's own send lag, never part of TTFT. In the
Arrow form a nullable int64 column, absent in tables written before it existed.

``server_id`` is the id the server gave the response (the ``id`` of an OpenAI stream's
chunks, e.g. vLLM's "cmpl-..."), so a load generator's record can be joined with the
server's own logs or an engine's request timeline of the same request.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pytimings.errors import TraceFormatError

if TYPE_CHECKING:
    import pyarrow as pa

Status = Literal["ok", "error", "unfinished"]


@dataclass
class RequestRecord:
    """The timeline of one request, in CLOCK_MONOTONIC ns."""

    req_id: str
    start_ns: int
    end_ns: int | None = None
    chunk_ns: list[int] = field(default_factory=list)  # arrival of each token-bearing chunk
    chunk_tokens: list[int] = field(default_factory=list)  # tokens carried by each chunk
    input_tokens: int | None = None
    output_tokens: int | None = None  # authoritative count (server usage); None -> counted
    phases: list[tuple[str, int]] = field(default_factory=list)  # (name, entered at ns)
    error: str | None = None  # error kind, e.g. "http_5xx", "timeout", "exception"
    error_detail: str = ""
    server_id: str | None = None
    scheduled_ns: int | None = None  # when it was due (load generator; see the docstring)

    @property
    def status(self) -> Status:
        if self.error is not None:
            return "error"
        return "unfinished" if self.end_ns is None else "ok"

    @property
    def n_output(self) -> int:
        """Output tokens: the server's (or engine's) count when given, else the chunks' sum."""
        return self.output_tokens if self.output_tokens is not None else sum(self.chunk_tokens)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.req_id,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "chunk_ns": list(self.chunk_ns),
            "chunk_tokens": list(self.chunk_tokens),
            "phases": [[name, t] for name, t in self.phases],
            "error": self.error,
            "error_detail": self.error_detail,
            "server_id": self.server_id,
            "scheduled_ns": self.scheduled_ns,
        }

    @classmethod
    def from_json(cls, obj: Any, where: str | os.PathLike[str]) -> RequestRecord:
        """Validate and read one request object; ``where`` names it in errors."""
        if not isinstance(obj, Mapping):
            raise TraceFormatError(where, "request entry is not an object")
        try:
            rec = cls(
                req_id=str(obj["id"]),
                start_ns=_int(obj["start_ns"]),
                end_ns=_opt_int(obj.get("end_ns")),
                chunk_ns=[_int(t) for t in obj.get("chunk_ns", [])],
                chunk_tokens=[_int(k) for k in obj.get("chunk_tokens", [])],
                input_tokens=_opt_int(obj.get("input_tokens")),
                output_tokens=_opt_int(obj.get("output_tokens")),
                phases=[(str(n), _int(t)) for n, t in obj.get("phases", [])],
                error=None if obj.get("error") is None else str(obj["error"]),
                error_detail=str(obj.get("error_detail", "")),
                server_id=None if obj.get("server_id") is None else str(obj["server_id"]),
                scheduled_ns=_opt_int(obj.get("scheduled_ns")),
            )
        except KeyError as exc:
            raise TraceFormatError(where, f"request entry lacks field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise TraceFormatError(where, f"request entry has a bad value: {exc}") from None
        rec.validate(where)
        return rec

    def validate(self, where: str | os.PathLike[str]) -> None:
        """Check the invariants every consumer relies on; raise TraceFormatError if broken."""
        name = f"request {self.req_id!r}"
        times = [self.start_ns, *self.chunk_ns, *(t for _, t in self.phases)]
        if self.scheduled_ns is not None:
            times.append(self.scheduled_ns)
        if self.end_ns is not None:
            times.append(self.end_ns)
        if any(not -(2**63) <= t < 2**63 for t in times):
            raise TraceFormatError(where, f"{name}: a time beyond int64 nanoseconds")
        for counted in (self.input_tokens, self.output_tokens):
            if counted is not None and not 0 <= counted < 2**63:
                raise TraceFormatError(where, f"{name}: token count {counted} out of range")
        if len(self.chunk_ns) != len(self.chunk_tokens):
            raise TraceFormatError(where, f"{name}: chunk_ns and chunk_tokens differ in length")
        if any(k < 0 for k in self.chunk_tokens):
            raise TraceFormatError(where, f"{name}: negative token count in chunk_tokens")
        prev = self.start_ns
        for t in self.chunk_ns:
            if t < prev:
                raise TraceFormatError(where, f"{name}: chunk times go backwards or precede start")
            prev = t
        if self.end_ns is not None and self.end_ns < prev:
            raise TraceFormatError(where, f"{name}: end_ns precedes its last chunk or start")


@runtime_checkable
class RequestSource(Protocol):
    """What holds requests and hands them over as records: the recorder's live log
    (:class:`pytimings.record.requests.RequestLog`)."""

    def records(self) -> list[RequestRecord]: ...


def _int(v: Any) -> int:
    """A JSON integer that fits the int64 columns it ends up in (times, token counts)."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"expected an integer, got {v!r}")
    if not -(2**63) <= v < 2**63:
        raise ValueError(f"expected an integer in [-2**63, 2**63), got {v!r:.40}")
    return v


def _opt_int(v: Any) -> int | None:
    return None if v is None else _int(v)


def _arrow_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            ("req_id", pa.string()),
            ("start_ns", pa.int64()),
            ("end_ns", pa.int64()),
            ("input_tokens", pa.int64()),
            ("output_tokens", pa.int64()),
            ("chunk_ns", pa.list_(pa.int64())),
            ("chunk_tokens", pa.list_(pa.int32())),
            ("phase_names", pa.list_(pa.string())),
            ("phase_ns", pa.list_(pa.int64())),
            ("error", pa.string()),
            ("error_detail", pa.string()),
            ("server_id", pa.string()),
            ("scheduled_ns", pa.int64()),
        ]
    )


def records_to_arrow(records: Iterable[RequestRecord]) -> pa.Table:
    """The "requests" table: one row per request (schema in the module docstring)."""
    import pyarrow as pa

    recs = list(records)
    cols: dict[str, list[Any]] = {
        "req_id": [r.req_id for r in recs],
        "start_ns": [r.start_ns for r in recs],
        "end_ns": [r.end_ns for r in recs],
        "input_tokens": [r.input_tokens for r in recs],
        "output_tokens": [r.output_tokens for r in recs],
        "chunk_ns": [r.chunk_ns for r in recs],
        "chunk_tokens": [r.chunk_tokens for r in recs],
        "phase_names": [[n for n, _ in r.phases] for r in recs],
        "phase_ns": [[t for _, t in r.phases] for r in recs],
        "error": [r.error for r in recs],
        "error_detail": [r.error_detail for r in recs],
        "server_id": [r.server_id for r in recs],
        "scheduled_ns": [r.scheduled_ns for r in recs],
    }
    return pa.table(cols, schema=_arrow_schema())


_LATER_COLUMNS = ("scheduled_ns",)  # added later: a table written before lacks them


def records_from_arrow(
    table: pa.Table, where: str | os.PathLike[str] = "<requests table>"
) -> list[RequestRecord]:
    """Read back a "requests" table written by :func:`records_to_arrow` (validated)."""
    names = [n for n in _arrow_schema().names if n not in _LATER_COLUMNS]
    missing = [n for n in names if n not in table.column_names]
    if missing:
        raise TraceFormatError(where, f"requests table lacks columns {missing}")
    names += [n for n in _LATER_COLUMNS if n in table.column_names]
    rows = table.select(names).to_pylist()
    out = []
    for row in rows:
        rec = RequestRecord(
            req_id=row["req_id"],
            start_ns=row["start_ns"],
            end_ns=row["end_ns"],
            chunk_ns=list(row["chunk_ns"] or []),
            chunk_tokens=list(row["chunk_tokens"] or []),
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            phases=list(zip(row["phase_names"] or [], row["phase_ns"] or [], strict=True)),
            error=row["error"],
            error_detail=row["error_detail"] or "",
            server_id=row["server_id"],
            scheduled_ns=row.get("scheduled_ns"),
        )
        rec.validate(where)
        out.append(rec)
    return out


def errors_by_kind(records: Iterable[RequestRecord]) -> dict[str, int]:
    """How many of ``records`` failed, by error kind (none failed: {})."""
    out: dict[str, int] = {}
    for r in records:
        if r.error is not None:
            out[r.error] = out.get(r.error, 0) + 1
    return out


def count_by_status(records: Sequence[RequestRecord]) -> dict[str, int]:
    """Counts of ok / unfinished requests and of each error kind (never-dropped accounting)."""
    counts: dict[str, int] = {"ok": 0, "unfinished": 0}
    for r in records:
        key = r.error if r.error is not None else r.status
        counts[key] = counts.get(key, 0) + 1
    return counts
