"""PyTorch-profiler (Kineto) Chrome-trace JSON -> the event model.

Design (measured in benches/bench_ingest_kineto.py, numbers in benches/RESULTS.md):

* One native pass, bounded memory: the file is decompressed in 1 MiB pieces (``isal``'s
  igzip, 2-3x faster than zlib) and each piece goes to ``pytimings._native._jsonscan.Scanner``
  (Cython, without the GIL). It parses every ``traceEvents`` element completely (validating:
  strings, escapes, UTF-8, numbers, nesting) and writes the fields the model reads straight
  into growable C arrays, one set of columns per table; no Python object is made per event.
  Names are interned once in a C hash table; ``ts``/``dur`` go from their decimal text to
  integer ns exactly. Peak memory is the columns plus a few pieces, never the decompressed
  file: the scan runs on helper threads that never take the GIL while this thread
  decompresses the next piece (files up to 256 KiB: on the calling thread). With two or
  more CPUs, pieces that start at a guessed element boundary are scanned by worker
  scanners at once and absorbed in order only where proved equal to the sequential scan
  (``Loader._read_split``); columns of 64 KiB or more are mappings of their own, so each
  gives its pages back as soon as numpy has it. Pieces are read (``readinto``) into a few
  reused buffers (``_Blocks``), not a fresh MiB each: freed pieces at the top of malloc's
  heap were trimmed and their pages faulted in again, 1/3 of a load's page faults.
* There is no JSON library to link instead: none ships on PyPI as a C/C++ build dependency
  (simdjson's and yyjson's headers are in no wheel), and Python-level decoders (msgspec, the
  design this replaced) build an object per event, which cost two thirds of a load.
* What the scanner leaves to this module is small: the skeleton (the document without its
  events: deviceProperties, distributedInfo, displayTimeUnit, ...; decoded with ``json``
  once checked by the scanner's validator), the few distinct strings (decoded once each),
  pid/tid and args written as strings (ROCm: ``"stream": "0x0"``) and the rare times the
  integer path does not take (exponents, signs, > 12 fraction digits: exact ``Decimal``).
  Links, thread rows and nesting depth are vectorised numpy.
* Events the model has no table for (instant events, ``gpu_user_annotation``, ...) are
  validated and counted in ``Trace.dropped``; ``[memory]`` events (``profile_memory=True``)
  become ``mem_events`` (:mod:`pytimings.ingest.memory`).

Time units: Kineto writes ``ts`` and ``dur`` in microseconds whatever ``displayTimeUnit``
says: "ms" (or absent) marks microsecond precision, "ns" nanosecond precision (three
decimals; see ``hta/ns_resolution_trace``: its 1-second capture window only fits
microseconds). Both become ``start_ns = round(ts * 1000)`` and
``end_ns = round((ts + dur) * 1000)``, computed exactly from the decimal text (ties to
even). ``baseTimeNanoseconds`` (added by Kineto to turn ``ts`` into Unix time) is kept in
``meta["base_time_ns"]``; times stay on the trace's own timeline, like nsys times.

Links: a GPU op's ``correlation`` comes from its args; only if some op or call lacks one do
the ``ac2g`` flows (gathered in the same pass) complete the links (flows whose id disagrees
with args are counted in ``meta["flow_mismatches"]``). A GPU op's ``pid``
is the host process of its launching call (Kineto puts GPU rows under pid = device). Several
GPU ops may share a correlation only when launched by one CUDA/HIP graph launch (they get
``graph`` = that launch's correlation id) or when the launch predates the capture window
(``meta["ops_without_launch"]``). Kineto built with CUDA 12+ writes a GPU op's CUPTI
``"graph id"`` and ``"graph node id"`` args (libkineto/src/CuptiActivity.cpp,
``getGraphNodeMetadata``; 0 outside graphs): a node id > 0 marks a replay too (when its
graph launch predates the window) and becomes ``gpu_ops.graph_node``, a per-file index as
Nsight's (-1: none). Any other repeated
correlation id is an error, as is a negative duration or an unknown ``displayTimeUnit``.

Host activities: ``cpu_op`` (2021-era ``Operator``) and ``python_function`` events become
``host_ops`` rows of kind CPU_OP and PYTHON on their (pid, tid) thread, names as written
(python_function names carry their file:line); a cpu_op's ``args`` column is the string
``[Input Dims, Input type, Concrete Inputs, Input Strides]`` (their JSON text as written,
absent ones null). ``gpu_user_annotation`` events are
GPU-timeline copies of ``user_annotation`` ranges (one or more per range and stream), not
ranges (docs/attribution.md): they are counted in ``Trace.dropped`` under
``GPU_ANNOTATION_DROPPED`` and not loaded.
CPU-only traces load their host annotations and host activities (and API calls, if any); a
trace with nothing the model holds is an error rather than an empty result.
"""

from __future__ import annotations

import collections
import contextlib
import decimal
import json
import os
import re
import threading
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from isal import igzip
from isal.isal_zlib import error as IsalError  # not an OSError subclass

from pytimings._native import _jsonscan
from pytimings.arrays import first_of_runs, unique
from pytimings.errors import TraceFormatError
from pytimings.ingest._nesting import nesting_depth
from pytimings.ingest._times import TIME_LIMIT_NS, implausible_time
from pytimings.ingest.kineto_comm import comm_columns
from pytimings.ingest.memory import kineto_mem_events
from pytimings.ingest.names import is_graph_launch
from pytimings.model.trace import (
    EVENT_SCHEMA,
    SCHEMAS,
    SYNC_SCHEMA,
    ActivityKind,
    ApiKind,
    CopyKind,
    MemKind,
    OpKind,
    RangeKind,
    SyncKind,
    Trace,
    conform,
)
from pytimings.table import Table

__all__ = ["GPU_ANNOTATION_DROPPED", "load_kineto", "looks_like_kineto"]

# Decompressed bytes per scanner feed: large enough that per-feed overhead vanishes,
# small enough that the pieces in flight stay a few MB.
CHUNK_BYTES = 1 << 20
# Files up to this size (as stored, gzip or not) are scanned without the helper thread
INLINE_BYTES = 256 << 10
# Scanners that scan pieces of traceEvents at once (None: one per CPU this process may run
# on, at most 4); below 2, one helper thread scans the pieces in order
SPLIT_SCANNERS: int | None = None


def _split_scanners() -> int:
    if SPLIT_SCANNERS is not None:
        return SPLIT_SCANNERS
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return min(cpus, 4)


I64 = npt.NDArray[np.int64]
Cols = dict[str, npt.NDArray[Any]]

# category -> code; the scanner's classes 0-9 are these categories, one each (the rows'
# "cat" column holds the code)
CAT_CODES: dict[str, int] = {
    "kernel": _jsonscan.CLASS_KERNEL,
    "gpu_memcpy": _jsonscan.CLASS_MEMCPY,
    "gpu_memset": _jsonscan.CLASS_MEMSET,
    "cuda_runtime": _jsonscan.CLASS_RUNTIME,
    "cuda_driver": _jsonscan.CLASS_DRIVER,
    "cuda_sync": _jsonscan.CLASS_SYNC,
    "user_annotation": _jsonscan.CLASS_ANNOTATION,
    "gpu_user_annotation": _jsonscan.CLASS_GPU_ANNOTATION,
    "cpu_op": _jsonscan.CLASS_CPU_OP,
    "python_function": _jsonscan.CLASS_PYTHON,
}
_CAT_NAMES = {code: name for name, code in CAT_CODES.items()}
# host activity categories -> their ActivityKind
_HOST_KIND = {
    _jsonscan.CLASS_CPU_OP: ActivityKind.CPU_OP,
    _jsonscan.CLASS_PYTHON: ActivityKind.PYTHON,
}
GPU_ANNOTATION_DROPPED = "gpu_user_annotation (GPU-timeline copies of ranges; not ranges)"

_OP_KIND = np.array([OpKind.KERNEL, OpKind.MEMCPY, OpKind.MEMSET], dtype=np.int8)

# Kineto's memcpy/memset names: "Memcpy HtoD (Pageable -> Device)", "Memset (Device)"
_MEMCPY_NAME = re.compile(r"^Memcpy (\w+) \(([^)]*?) -> ([^)]*)\)")
_MEMSET_NAME = re.compile(r"^Memset \(([^)]*)\)")
_COPY_KINDS = {k.name.replace("TO", "to"): k for k in CopyKind if k.value > 0}
_MEM_KINDS = {
    "Pageable": MemKind.PAGEABLE,
    "Pinned": MemKind.PINNED,
    "Device": MemKind.DEVICE,
    "Array": MemKind.ARRAY,
    "Managed": MemKind.MANAGED,
    "Device Static": MemKind.DEVICE_STATIC,
    "Managed Static": MemKind.MANAGED_STATIC,
    "Unknown": MemKind.UNKNOWN,
    "Host": MemKind.UNKNOWN,  # ROCm: pinned or pageable is not recorded
}

_KNOWN_UNITS = {None, "ms", "ns"}
_TOO_DEEP = "JSON nested too deeply {}: arrays/objects deeper than the decoder's limit"


# top-level keys only Chrome-trace/Kineto JSON writes
_MARKERS = (
    b'"traceEvents"',
    b'"schemaVersion"',
    b'"deviceProperties"',
    b'"distributedInfo"',
    b'"displayTimeUnit"',
    b'"baseTimeNanoseconds"',
)


UTF8_BOM = b"\xef\xbb\xbf"


def looks_like_kineto(head: bytes) -> bool:
    """True when the first bytes (gunzipped) look like a Chrome trace / Kineto JSON object.

    Needs one of Kineto's top-level keys within ``head``: Kineto writes them first, but
    other writers may put other keys before them (TraceLens' Qwen trace has 26 KB of
    "metadata" first), so pass 64 KB, or fall back on the file name (``*.json[.gz]``).
    """
    text = head.lstrip(UTF8_BOM + b" \t\r\n")
    return text.startswith(b"{") and any(m in text for m in _MARKERS)


_LIMIT_US = decimal.Decimal(TIME_LIMIT_NS) / 1000


def _exact(ts: bytes, dur: bytes | None) -> tuple[int, int]:
    """Exact ``round(ts*1000)``, ``round((ts+dur)*1000)`` for text the fast path defers.
    A value beyond ±2^62 ns (``1e999999999``) is refused before any arithmetic on it."""
    ctx = decimal.Context(  # per call: a context records flags, so it is not shared
        prec=80, rounding=decimal.ROUND_HALF_EVEN, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN
    )
    t = ctx.create_decimal(ts.decode())
    d = ctx.create_decimal(dur.decode()) if dur is not None else decimal.Decimal(0)
    for field, v, text in (("ts", t, ts), ("dur", d, dur or b"")):
        if not v.is_finite():
            raise ValueError(f"{field} {text.decode()[:40]} is not a finite number")
        if v.copy_abs() > _LIMIT_US:
            raise ValueError(
                f"{field} {text.decode()[:40]} us is outside ±2^62 ns (a corrupt time)"
            )
    start = int(ctx.multiply(t, 1000).to_integral_value(decimal.ROUND_HALF_EVEN))
    end = int(ctx.multiply(ctx.add(t, d), 1000).to_integral_value(decimal.ROUND_HALF_EVEN))
    return start, end


def _open(path: str) -> tuple[Any, bool]:
    """The file as a binary stream, gunzipped when it is gzip (by content, not name)."""
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return igzip.open(path, "rb"), True  # type: ignore[no-untyped-call]
    return open(path, "rb"), False


_ISAL_ERROR = cast("type[Exception]", IsalError)  # its stubs call it an instance


# The scanner fills the same slots (_jsonscan.COLUMNS) for every group, and a slot holds
# another field in some groups: what it holds there, where that is not the slot's own name.
# _Reader._rows asks for and hands back columns by these names.
_SLOT_NAMES: dict[int, dict[str, str]] = {
    # args "graph node id" (Kineto built with CUDA 12+; 0 outside graphs)
    _jsonscan.GROUP_GPU: {"a": "graph_node"},
    # a cuda_sync's args "wait_on_stream" and "wait_on_cuda_event_record_corr_id"
    _jsonscan.GROUP_API: {"a": "wait_stream", "b": "wait_record"},
    # a flow event's ts, its phase (0 's', 1 'f') and id
    _jsonscan.GROUP_FLOW: {"start": "ts", "cat": "phase", "correlation": "id"},
    # a [memory] event's args: Bytes, Addr, Device Type, Device Id, Total Allocated/Reserved
    _jsonscan.GROUP_MEM: {
        "correlation": "bytes",
        "device": "addr",
        "stream": "device_type",
        "bytes": "device",
        "a": "allocated",
        "b": "reserved",
    },
}
# the columns each group is read with
_EVENT_COLS = ("start", "end", "name", "cat", "pid", "tid", "index")
_ARG_COLS = ("correlation", "device", "stream", "bytes")
_FLOW_COLS = ("ts", "phase", "id", "pid", "tid", "index")
_MEM_COLS = ("start", "index", *_SLOT_NAMES[_jsonscan.GROUP_MEM].values(), "pid", "tid")


class _Blocks:
    """The (decompressed) file in blocks read into reused bytearrays.

    A fresh ~1 MiB ``bytes`` per block churns the top of malloc's heap: freed blocks are
    trimmed away and the next ones fault their pages in again (on the H200x16 trace that
    was a fifth of a load's CPU, most of it in the kernel). Blocks are read with
    ``readinto`` into buffers that go back to the pool (``give``) once no scanner reads
    them, so a load allocates a handful of buffers, not one per MiB."""

    def __init__(self, loader: _Loader, stream: Any, gzipped: bool) -> None:
        self.loader = loader
        self.stream = stream
        self.gzipped = gzipped
        self.pool: list[bytearray] = []

    def take(self, prefix: bytes, size: int) -> tuple[bytearray, int]:
        """A buffer holding ``prefix`` and then up to ``size`` bytes read, and how many
        bytes it holds (``len(prefix)`` at the end of the file)."""
        k = len(prefix)
        buf = self._buffer(k + size)
        buf[:k] = prefix
        try:
            with memoryview(buf) as view:
                got = self.stream.readinto(view[k : k + size])
        except (EOFError, OSError, ValueError, _ISAL_ERROR) as e:
            what = "corrupt or truncated gzip data" if self.gzipped else "read error"
            raise self.loader.fail(f"{what} ({e})") from None
        return buf, k + got

    def first(self, size: int) -> tuple[bytearray, int]:
        """The first block (a UTF-8 byte-order mark turned into spaces, JSON whitespace, so
        that offsets stay the file's); an empty file is refused."""
        buf, n = self.take(b"", size)
        if not n:
            raise self.loader.fail("empty file (no JSON)")
        if buf.startswith(UTF8_BOM):
            buf[:3] = b"   "
        return buf, n

    def join(self, carry: bytes, block: bytearray, n: int) -> tuple[bytearray, int]:
        """``carry`` followed by ``block[:n]`` in one buffer, and its length."""
        if not carry:
            return block, n
        k = len(carry)
        buf = self._buffer(k + n)
        buf[:k] = carry
        buf[k : k + n] = memoryview(block)[:n]
        self.give(block)
        return buf, k + n

    def give(self, buf: bytes | bytearray) -> None:
        """``buf`` is read by no scanner any more: reuse it (bytes are left to Python)."""
        if type(buf) is bytearray:
            self.pool.append(buf)

    def _buffer(self, need: int) -> bytearray:
        while self.pool:
            buf = self.pool.pop()
            if len(buf) >= need:
                return buf
        # room for a block and the few KiB of an incomplete element before it
        return bytearray(max(need, CHUNK_BYTES + (CHUNK_BYTES >> 3)))


class _Loader:
    def __init__(self, path: str) -> None:
        self.path = path
        self.scanner = _jsonscan.Scanner()
        self.ids: dict[str, int] = {"": 0}
        self.strings: list[str] = [""]
        self.keys: dict[Any, int] = {}
        self.dropped: dict[str, int] = {}
        self.ops_without_launch = 0
        self.syncs_without_call = 0
        self.texts: list[str | None] = []  # the scanner's strings, by its ids
        self.name_ids = np.zeros(0, dtype=np.int32)  # scanner string id -> trace string id
        self.split = [0, 0, 0]  # pieces: absorbed from workers, rescanned, sequential only

    def fail(self, problem: str) -> TraceFormatError:
        return TraceFormatError(self.path, problem)

    # ---- reading --------------------------------------------------------------------
    def read(self) -> None:
        """One pass over the file: this thread decompresses piece k+1 while a helper
        thread scans piece k (without ever taking the GIL, see ``Scanner.serve``); at most
        two pieces are in flight. Files of at most ``INLINE_BYTES`` are scanned on this
        thread: for them the helper costs more than it saves."""
        try:
            stream, gzipped = _open(self.path)
            threaded = os.fstat(stream.fileno()).st_size > INLINE_BYTES
        except OSError as e:
            raise self.fail(f"cannot read: {e.strerror or e}") from None
        with stream:
            blocks = _Blocks(self, stream, gzipped)
            if threaded and _split_scanners() >= 2:
                self._read_split(blocks, _split_scanners())
            else:
                self._read_sequential(blocks, threaded)

    def _read_sequential(self, blocks: _Blocks, threaded: bool) -> None:
        """The pieces in order on one scanner (on a helper thread when ``threaded``)."""
        scanner = self.scanner
        helper = None
        if threaded:
            helper = threading.Thread(
                target=scanner.serve, name="pytimings-kineto-scanner", daemon=True
            )
            helper.start()
        size = CHUNK_BYTES
        try:
            block, n = blocks.first(size)
            carry = b""
            while True:
                final = n == 0
                buf, hi = blocks.join(carry, block, n)
                try:
                    if helper is not None:
                        scanner.submit(buf, final, 0, hi)
                        if not final:  # while the helper scans
                            block, n = blocks.take(b"", size)
                        used = scanner.result()
                    else:
                        used = scanner.feed(buf, final, hi)
                        if not final:
                            block, n = blocks.take(b"", size)
                except _jsonscan.ScanError as e:
                    raise self.fail(str(e)) from None
                if final:
                    return
                carry = bytes(buf[used:hi])
                blocks.give(buf)
                # an event larger than the piece is scanned again with more data: grow
                # the read so that a huge event costs O(size), not O(size^2)
                size = max(CHUNK_BYTES, len(carry))
        finally:
            if helper is not None:  # after an error too: the helper ends its scan first
                scanner.close()
                helper.join()

    def _read_split(self, blocks: _Blocks, n_workers: int) -> None:
        """``read`` with the traceEvents elements scanned on ``n_workers`` scanners at once.

        Each decompressed block is cut after its last guessed element boundary
        (``_jsonscan.split_point``: a newline between ',' and '{'); a piece that starts at
        such a guess goes to a free worker scanner (``begin_elements``), one that does not
        (the first, one after a block without a guess: minified JSON, the last) waits for
        the sequential scanner. The sequential scanner takes the pieces in order: a
        worker's piece is ``absorb``ed when its scan is proved equal to the sequential one
        (see ``Scanner.absorb``), else (a wrong guess, any error) it is scanned again
        sequentially, so that results and errors are the sequential scan's for every
        input. At most ``n_workers + 1`` pieces are in flight; each piece's buffer goes
        back to ``blocks`` once no scanner reads it."""
        seq = self.scanner
        workers = [_jsonscan.Scanner() for _ in range(n_workers)]
        threads = [
            threading.Thread(target=sc.serve, name="pytimings-kineto-scanner", daemon=True)
            for sc in (seq, *workers)
        ]
        for t in threads:
            t.start()
        free = collections.deque(workers)
        # (data, lo, hi, document offset of data[lo], worker or None)
        inflight: collections.deque[tuple[bytearray, int, int, int, _jsonscan.Scanner | None]]
        inflight = collections.deque()
        carry = b""  # what the sequential scanner has not consumed (an incomplete element)
        job: tuple[bytes | bytearray, int, int] | None = None  # the sequential scanner's piece
        size = CHUNK_BYTES

        def wait_seq() -> None:
            nonlocal job, carry, size
            if job is not None:
                buf, lo, hi = job
                job = None
                used = seq.result()
                carry = bytes(buf[lo + used : hi])
                blocks.give(buf)
                # an event larger than the piece is scanned again with more data: grow the
                # read so that a huge event costs O(size), not O(size^2)
                size = max(CHUNK_BYTES, len(carry))

        def settle() -> None:
            nonlocal job
            data, lo, hi, at, w = inflight.popleft()
            piece: bytes | bytearray = data
            if w is not None:
                try:
                    ok = w.result() == hi - lo
                except _jsonscan.ScanError:
                    ok = False
                free.append(w)
                wait_seq()
                if ok and seq.absorb(w, at + hi - lo):
                    self.split[0] += 1
                    blocks.give(data)
                    return
                self.split[1] += 1
            else:
                self.split[2] += 1
            wait_seq()
            if carry:
                piece, lo, hi = carry + data[lo:hi], 0, len(carry) + hi - lo
                blocks.give(data)
            seq.submit(piece, False, lo, hi)
            job = (piece, lo, hi)

        def push(data: bytearray, lo: int, hi: int, at: int, guess: bool) -> None:
            w = None
            if guess:
                while not free:
                    settle()
                w = free.popleft()
                w.begin_elements(at)
                w.submit(data, False, lo, hi)
            inflight.append((data, lo, hi, at, w))
            while len(inflight) > n_workers or (
                inflight and inflight[0][4] is None and job is None
            ):
                settle()

        try:
            data, n = blocks.first(size)
            guessed, at = False, 0  # whether data starts at a guess; its document offset
            while n:
                g = _jsonscan.split_point(data, 1, n)
                pending = bytes(data[g:n]) if g >= 0 else b""
                nxt, m = blocks.take(pending, size)
                if m == len(pending):  # data is the last piece (it closes traceEvents)
                    push(data, 0, n, at, False)
                    blocks.give(nxt)
                    break
                if g < 0:  # no guess in data (minified JSON)
                    push(data, 0, n, at, guessed)
                    data, n, guessed, at = nxt, m, False, at + n
                else:
                    push(data, 0, g, at, guessed)
                    data, n, guessed, at = nxt, m, True, at + g
            while inflight:
                settle()
            wait_seq()
            seq.feed(carry, True)
        except _jsonscan.ScanError as e:
            raise self.fail(str(e)) from None
        finally:  # after an error too: each helper ends its scan first
            for sc in (seq, *workers):
                sc.close()
            for t in threads:
                t.join()

    # ---- the scanner's columns -> rows --------------------------------------------------
    def _rows(self, group: int, names: tuple[str, ...], new_keys: bool = True) -> Cols:
        """A group's columns by the names they have in that group (:data:`_SLOT_NAMES`),
        with their deferred values and times resolved."""
        renamed = _SLOT_NAMES.get(group, {})
        slot_of = {name: slot for slot, name in renamed.items()}
        slots = tuple(slot_of.get(name, name) for name in names)
        cols = self.scanner.columns(group, slots)
        self._resolve_values(group, cols, new_keys)
        self._resolve_times(group, cols)
        if "name" in cols and group != _jsonscan.GROUP_META:
            cols["name"] = self.name_ids[cols["name"]]
        return {name: cols[slot] for name, slot in zip(names, slots, strict=True)}

    def _resolve_values(self, group: int, cols: Cols, new_keys: bool) -> None:
        """pid/tid and args the scanner left as strings (or null): each distinct one
        resolved once. ``new_keys``: unknown non-numeric pid/tid strings get new keys
        (else -1: metadata and memory events only refer to the events' keys)."""
        deferred = self.scanner.deferred_values(group)
        if len(deferred) == 0:
            return
        code = deferred[:, 2] * 2 + deferred[:, 3]
        distinct = unique(code)
        values = np.empty(len(distinct), dtype=np.int64)
        # a code is a string id (-1: null) times 2 plus how the value is resolved
        sids = [int(packed) >> 1 for packed in distinct.tolist()]
        texts = self.scanner.texts([sid for sid in sids if sid >= 0])
        by_sid = dict(zip([sid for sid in sids if sid >= 0], texts, strict=True))
        for position, packed in enumerate(distinct.tolist()):
            text = by_sid.get(packed >> 1)
            as_key = packed & 1 == _jsonscan.DEFER_KEY
            value = _key(text, self.keys, new_keys) if as_key else _int(text)
            if not -(1 << 63) <= value < 1 << 63:
                row = int(np.flatnonzero(code == packed)[0])
                slot = _jsonscan.COLUMNS[int(deferred[row, 0])]
                field = _SLOT_NAMES.get(group, {}).get(slot, slot)
                at = f"traceEvents (byte {int(deferred[row, 4])})"
                raise self.fail(f"{at}: {field} {text} does not fit in 64 bits")
            values[position] = value
        got = values[np.searchsorted(distinct, code)]
        for col in unique(deferred[:, 0]).tolist():
            in_col = deferred[:, 0] == col
            cols[_jsonscan.COLUMNS[col]][deferred[in_col, 1]] = got[in_col]

    def _resolve_times(self, group: int, cols: Cols) -> None:
        for _, row, ts, dur, at in self.deferred_times.get(group, []):
            where = f"traceEvents[{int(cols['index'][row])}] (byte {at})"
            try:
                start, end = _exact(ts, dur)
            except (ValueError, decimal.InvalidOperation) as e:
                raise self.fail(f"{where}: bad timestamp: {e}") from None
            if end < start:
                raise self.fail(f"{where}: negative duration (dur={(dur or b'').decode()})")
            cols["start"][row] = start
            if "end" in cols:
                cols["end"][row] = end
        if "end" in cols:
            odd = implausible_time(cols["start"], cols["end"])
            if odd is not None:
                row, column, value = odd
                field = "ts" if column == "start" else "ts + dur"
                raise self.fail(
                    f"traceEvents[{cols['index'][row]}]: {field} is {value} ns, outside "
                    "±2^62 ns (a corrupt time)"
                )

    def _strings(self) -> None:
        """The scanner's names into the trace's string table (each decoded once)."""
        self.texts = self.scanner.strings()
        ids = np.zeros(len(self.texts), dtype=np.int32)
        for k, s in enumerate(self.texts):
            if s is not None:
                ids[k] = _intern(s, self.ids, self.strings)
        self.name_ids = ids

    def _drop(self, reason: str, n: int) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + n

    def _count_dropped(self) -> None:
        sc = self.scanner
        counted = sc.counted()
        texts = sc.texts([s for _, s, _ in counted if s >= 0])
        at = iter(texts)
        for cls, sid, n in counted:
            text = next(at) if sid >= 0 else ""
            if cls == _jsonscan.CLASS_OTHER:
                self._drop(f"{text} events (not modelled)", n)
            elif cls == _jsonscan.CLASS_NOCAT:
                self._drop(f"events without cat (ph={text!r}, not modelled)", n)
            else:
                what = f"{_CAT_NAMES[cls]} events with ph={text!r} (only complete 'X' events)"
                self._drop(what, n)
        if sc.class_count(_jsonscan.CLASS_GPU_ANNOTATION):
            self._drop(GPU_ANNOTATION_DROPPED, sc.class_count(_jsonscan.CLASS_GPU_ANNOTATION))

    # ---- the document around the events ----------------------------------------------
    def skeleton(self) -> dict[str, Any]:
        sp = self.scanner
        raw = sp.skeleton
        bad = _jsonscan.check_json(raw)
        if bad is not None:
            b, what = bad
            if what.startswith("nested deeper"):
                raise self.fail(_TOO_DEEP.format("outside traceEvents"))
            starts = [s for s, _ in sp.skeleton_map]
            k = max(int(np.searchsorted(starts, b, side="right")) - 1, 0)
            s, d = sp.skeleton_map[k] if sp.skeleton_map else (0, 0)
            raise self.fail(f"invalid JSON at byte {d + b - s}: {what}")
        try:
            doc = json.loads(raw)
        except RecursionError:
            raise self.fail(_TOO_DEEP.format("outside traceEvents")) from None
        if not isinstance(doc, dict) or not sp.saw_events:
            raise self.fail("not a Kineto/Chrome trace: no traceEvents array")
        return doc

    # ---- assembling the model -------------------------------------------------------
    def finish(self) -> Trace:
        doc = self.skeleton()
        sc = self.scanner
        if sc.n_elements == 0:
            raise self.fail("the trace has no events (traceEvents is empty)")
        unit = doc.get("displayTimeUnit")
        if unit not in _KNOWN_UNITS:
            raise self.fail(f"unknown displayTimeUnit {unit!r} (Kineto writes 'ms' or 'ns')")
        dist = doc.get("distributedInfo")
        rank = world = None
        if dist is not None:
            if not isinstance(dist, dict):
                raise self.fail("distributedInfo is not an object")
            rank, world = dist.get("rank"), dist.get("world_size")
            for k, v in (("rank", rank), ("world_size", world)):
                if v is not None and (not isinstance(v, int) or v < 0 or v > 32767):
                    raise self.fail(f"distributedInfo.{k} is not a valid rank number: {v!r}")
        base = doc.get("baseTimeNanoseconds")
        if base is not None and not isinstance(base, int):
            raise self.fail(f"baseTimeNanoseconds is not an integer: {base!r}")
        r = 0 if rank is None else int(rank)

        self._count_dropped()
        self._strings()
        self.deferred_times: dict[int, list[tuple[int, int, bytes, bytes | None, int]]] = {}
        for t in sc.deferred_times():
            self.deferred_times.setdefault(t[0], []).append(t)
        # rows in time order, ties in document order
        # args: an NCCL kernel's collective args text (kineto_comm)
        gpu_cols = (*_EVENT_COLS, *_ARG_COLS, "args", "graph_node")
        gpu = _by_time(self._rows(_jsonscan.GROUP_GPU, gpu_cols))
        # external: a call's and a cpu_op's "External id" (the innermost op open at a call)
        api_cols = (*_EVENT_COLS, *_ARG_COLS, "wait_stream", "wait_record", "external")
        api = _by_time(self._rows(_jsonscan.GROUP_API, api_cols))
        rng = _by_time(self._rows(_jsonscan.GROUP_RANGES, (*_EVENT_COLS, *_ARG_COLS)))
        host = _by_time(self._rows(_jsonscan.GROUP_HOST, (*_EVENT_COLS, "args", "external")))
        if len(gpu["start"]) + len(api["start"]) + len(rng["start"]) + len(host["start"]) == 0:
            raise self.fail(
                "no events pytimings models: no GPU kernels/memcpys/memsets, CUDA/HIP API "
                "calls, user annotations, cpu_ops or python functions"
            )
        # the args texts of cpu_ops (trace strings: host_ops.args) and NCCL kernels
        args_texts = sc.op_args()
        used = np.zeros(len(args_texts) + 1, dtype=bool)
        used[host["args"]] = True
        op_ids = np.zeros(len(args_texts) + 1, dtype=np.int32)
        for i in np.flatnonzero(used[1:]).tolist():
            op_ids[i + 1] = _intern(args_texts[i], self.ids, self.strings)
        host["args"] = op_ids[host["args"]]
        gpu.update(comm_columns(gpu.pop("args"), args_texts))

        mismatches = 0
        sync = api["cat"] == CAT_CODES["cuda_sync"]
        if sc.class_count(_jsonscan.CLASS_FLOW) and (
            (gpu["correlation"] < 0).any() or (api["correlation"][~sync] < 0).any()
        ):
            problem = sc.flow_problem()
            if problem is not None:
                raise self.fail(str(problem))
            flows = self._rows(_jsonscan.GROUP_FLOW, _FLOW_COLS)
            mismatches = _link_flows(gpu, api, flows)
        meta_rows = self._rows(_jsonscan.GROUP_META, ("name", "args", "pid", "tid"), False)
        threads, thread_of = self._threads(api, rng, host, meta_rows, r)
        main_pid = _main_pid(api, rng, host)

        # each group's columns are let go once its table is made (a smaller peak of memory)
        gpu_ops = self._gpu_ops(gpu, api, main_pid, r)
        del gpu
        api_calls, syncs, events = self._api_calls(api, thread_of, r)
        del api
        ranges = self._ranges(rng, thread_of, r)
        del rng
        host_ops = self._host_ops(host, thread_of, r)
        del host
        devices = self._devices(doc.get("deviceProperties"), r)
        mem = self._rows(_jsonscan.GROUP_MEM, _MEM_COLS, False)
        mem_events = kineto_mem_events(mem, thread_of, r)

        meta: dict[str, Any] = {
            "format": "kineto",
            "path": self.path,
            "tool_version": None,  # Kineto records no profiler version
            "schema_version": doc.get("schemaVersion"),
            "display_time_unit": unit,
            "base_time_ns": base,
            "rank": rank,
            "world_size": world,
            "backend": dist.get("backend") if dist else None,
            "trace_name": doc.get("traceName"),
            "processes": self._process_names(meta_rows),
            "events": sc.n_elements,
            # flows are read only when some args lack a correlation
            "flow_mismatches": mismatches,
            "ops_without_launch": self.ops_without_launch,
            "sync_rows_without_api_call": self.syncs_without_call,
        }
        # everything Kineto says about the devices and the process groups, as written
        meta["device_properties"] = doc.get("deviceProperties") or []
        meta["distributed_info"] = dist or {}
        for k in ("cupti_version", "cuda_runtime_version", "cuda_driver_version", "trace_id"):
            if k in doc:
                meta[k] = doc[k]
        return Trace(
            gpu_ops=gpu_ops,
            api_calls=api_calls,
            ranges=ranges,
            host_ops=host_ops,
            threads=threads,
            devices=devices,
            syncs=syncs,
            events=events,
            strings=self.strings,
            meta=meta,
            dropped=self.dropped,
            mem_events=mem_events,
        )

    def _meta_names(self, meta_rows: Cols, which: str) -> list[tuple[int, int, str]]:
        """(pid key, tid key, args.name) of the 'M' events named ``which``, in order."""
        names = self.scanner.texts(meta_rows["name"].tolist())
        sel = [k for k, n in enumerate(names) if n == which and meta_rows["args"][k] >= 0]
        values = self.scanner.texts([int(meta_rows["args"][k]) for k in sel])
        p, t = meta_rows["pid"], meta_rows["tid"]
        return [(int(p[k]), int(t[k]), v) for k, v in zip(sel, values, strict=True)]

    def _threads(
        self,
        api: Cols,
        rng: Cols,
        host: Cols,
        meta_rows: Cols,
        rank: int,
    ) -> tuple[Table, Callable[[I64, I64], npt.NDArray[np.int32]]]:
        call = api["cat"] != CAT_CODES["cuda_sync"]
        # the distinct pairs of each table, then of their union: the keys of one table
        # at a time are held, not of all of them (a smaller peak of memory while loading)
        each = [
            _unique_pairs(api["pid"][call], api["tid"][call]),
            _unique_pairs(rng["pid"], rng["tid"]),
            _unique_pairs(host["pid"], host["tid"]),
        ]
        pairs = _unique_pairs(*np.concatenate(each).T)
        names = {(p, t): name.strip() for p, t, name in self._meta_names(meta_rows, "thread_name")}
        ids, strings = self.ids, self.strings
        name_ids = [_intern(names.get((int(p), int(t)), ""), ids, strings) for p, t in pairs]
        table = conform(
            {
                "pid": pairs[:, 0],
                "tid": pairs[:, 1],
                "name": np.asarray(name_ids, dtype=np.int32),
                "rank": np.full(len(pairs), rank),
            },
            SCHEMAS["threads"],
        )

        def thread_of(p: I64, t: I64) -> npt.NDArray[np.int32]:
            if len(pairs) == 0:
                return np.full(len(p), -1, dtype=np.int32)
            return _lookup_pairs(pairs, p, t)

        return table, thread_of

    def _process_names(self, meta_rows: Cols) -> dict[int, str]:
        return {p: name for p, _, name in self._meta_names(meta_rows, "process_name")}

    def _gpu_ops(
        self,
        gpu: dict[str, npt.NDArray[Any]],
        api: dict[str, npt.NDArray[Any]],
        main_pid: int,
        rank: int,
    ) -> Table:
        n = len(gpu["start"])
        cat = gpu["cat"]
        kind = _OP_KIND[cat]
        copy_kind = np.full(n, CopyKind.NONE, dtype=np.int8)
        src = np.full(n, MemKind.NONE, dtype=np.int8)
        dst = np.full(n, MemKind.NONE, dtype=np.int8)
        for nid in unique(gpu["name"][cat > 0]):
            sel = (gpu["name"] == nid) & (cat > 0)
            ck, sk, dk = _copy_kinds(self.strings[nid])
            copy_kind[sel], src[sel], dst[sel] = ck, sk, dk
        device = np.where(gpu["device"] >= 0, gpu["device"], gpu["pid"])
        stream = np.where(gpu["stream"] >= 0, gpu["stream"], gpu["tid"])
        corr = gpu["correlation"]
        # the launching call: host pid, graph launches, ROCm copy sizes
        launch = _lookup_corr(api, corr)
        found = launch >= 0
        pid = np.full(n, main_pid, dtype=np.int64)
        pid[found] = api["pid"][launch[found]]
        nbytes = gpu["bytes"].copy()
        need = (cat > 0) & (nbytes < 0) & found
        nbytes[need] = api["bytes"][launch[need]]
        unknown = int(np.count_nonzero((cat > 0) & (nbytes < 0)))
        if unknown:
            self._drop("memcpy/memset byte counts (not recorded; bytes set to 0)", unknown)
        nbytes[kind == OpKind.KERNEL] = gpu["comm_bytes"][kind == OpKind.KERNEL]
        nbytes = np.maximum(nbytes, 0)
        graph = np.full(n, -1, dtype=np.int64)
        launch_ids = unique(api["name"])
        graph_ids = [i for i in launch_ids if is_graph_launch(self.strings[i])]
        by_graph_launch = found.copy()
        by_graph_launch[found] = np.isin(api["name"][launch[found]], graph_ids)
        node = gpu.pop("graph_node")
        # a graph node id marks a graph replay even where the launch call is not in the trace
        replayed = by_graph_launch | (node > 0)
        graph[replayed] = corr[replayed]
        nodes = unique(node[node > 0])
        if nodes.size > np.iinfo(np.int32).max:
            raise self.fail(f"{nodes.size} distinct CUDA graph node ids: more than the model holds")
        graph_node = np.where(node > 0, np.searchsorted(nodes, node), -1).astype(np.int32)
        self.ops_without_launch = int(np.count_nonzero(~found))
        self._check_duplicates(pid, corr, by_graph_launch | ~found)
        return conform(
            {
                "start": gpu["start"],
                "end": gpu["end"],
                "name": gpu["name"],
                "kind": kind,
                "copy_kind": copy_kind,
                "src_mem": src,
                "dst_mem": dst,
                "bytes": nbytes,
                "device": device,
                "stream": stream,
                "correlation": corr,
                "pid": pid,
                "rank": np.full(n, rank),
                "graph": graph,
                "graph_node": graph_node,
                "collective": gpu["collective"],
                "group_size": gpu["group_size"],
            },
            SCHEMAS["gpu_ops"],
        )

    def _check_duplicates(self, pid: I64, corr: I64, exempt: npt.NDArray[np.bool_]) -> None:
        """One API call launches one GPU op, except graph launches. Ops whose launching
        call is not in the trace (launched before the capture window) are exempt: their
        launch cannot be checked; they are counted in meta["ops_without_launch"]."""
        sel = (corr >= 0) & ~exempt
        if not sel.any():
            return
        p, c = pid[sel], corr[sel]
        order = np.lexsort((c, p))
        p, c = p[order], c[order]
        dup = np.flatnonzero((p[1:] == p[:-1]) & (c[1:] == c[:-1]))
        if len(dup):
            k = int(dup[0])
            raise self.fail(
                f"duplicate correlation id {int(c[k])} among GPU ops of process "
                f"{int(p[k])} (its launching call is not a graph launch; "
                f"{len(dup)} duplicate(s))"
            )

    def _api_calls(
        self,
        api: dict[str, npt.NDArray[Any]],
        thread_of: Callable[[I64, I64], npt.NDArray[np.int32]],
        rank: int,
    ) -> tuple[Table, Table, Table]:
        """The API calls, the ``cuda_sync`` records (not host activities: each describes
        the call with its correlation id, on that call's thread and pid), and the event
        records the stream-wait-event records name (``_event_records``)."""
        sync = api["cat"] == CAT_CODES["cuda_sync"]
        calls = {k: v[~sync] for k, v in api.items()} if sync.any() else api
        kind = np.full(len(calls["start"]), ApiKind.RUNTIME, dtype=np.int8)
        kind[calls["cat"] == CAT_CODES["cuda_driver"]] = ApiKind.DRIVER
        api_calls = conform(
            {
                "start": calls["start"],
                "end": calls["end"],
                "name": calls["name"],
                "kind": kind,
                "thread": thread_of(calls["pid"], calls["tid"]),
                "correlation": calls["correlation"],
                "pid": calls["pid"],
                "rank": np.full(len(kind), rank),
                "external": calls["external"],
            },
            SCHEMAS["api_calls"],
        )
        sync_rows = {name: column[sync] for name, column in api.items()}
        launch = _lookup_corr(calls, sync_rows["correlation"])
        ok = launch >= 0
        thread = np.full(len(launch), -1, dtype=np.int32)
        thread[ok] = api_calls["thread"][launch[ok]]
        pid = np.full(len(launch), -1, dtype=np.int64)
        pid[ok] = calls["pid"][launch[ok]]
        self.syncs_without_call = int(len(ok) - np.count_nonzero(ok))
        names, at = np.unique(sync_rows["name"], return_inverse=True)
        kinds = [_SYNC_KINDS.get(self.strings[n], SyncKind.UNKNOWN) for n in names.tolist()]
        # the event a stream-wait-event / event-sync record waits for (newer Kineto; -1:
        # absent, older Kineto or host syncs of a stream)
        waits = {
            "stream": np.maximum(sync_rows["wait_stream"], -1),
            "record": np.maximum(sync_rows["wait_record"], -1),
        }
        syncs = conform(
            {
                "start": sync_rows["start"],
                "end": sync_rows["end"],
                "kind": np.asarray(kinds, dtype=np.int8)[at.reshape(-1)],
                "device": sync_rows["device"],
                # CUPTI's 0xFFFFFFFF: no stream
                "stream": np.where(sync_rows["stream"] == 0xFFFFFFFF, -1, sync_rows["stream"]),
                # an event is named by its record call (Kineto's event ids repeat: see
                # _event_records)
                "event": waits["record"],
                "correlation": sync_rows["correlation"],
                "thread": thread,
                "pid": pid,
                "rank": np.full(len(launch), rank),
            },
            SYNC_SCHEMA,
        )
        return api_calls, syncs, _event_records(calls, sync_rows, pid, waits, rank)

    def _ranges(
        self,
        rng: dict[str, npt.NDArray[Any]],
        thread_of: Callable[[I64, I64], npt.NDArray[np.int32]],
        rank: int,
    ) -> Table:
        n = len(rng["start"])
        thread = thread_of(rng["pid"], rng["tid"])
        return conform(
            {
                "start": rng["start"],
                "end": rng["end"],
                "name": rng["name"],
                "kind": np.full(n, RangeKind.ANNOTATION, dtype=np.int8),
                "thread": thread,
                "device": np.full(n, -1),
                "domain": np.zeros(n),
                "category": np.zeros(n),
                "depth": nesting_depth(thread.astype(np.int64), rng["start"], rng["end"]),
                "payload": np.full(n, np.nan),
                "pid": rng["pid"],
                "rank": np.full(n, rank),
                # Kineto writes a collective's size on its NCCL kernel and its
                # record_param_comms cpu_op (gpu_ops.bytes), never on an annotation
                "bytes": np.full(n, -1),
            },
            SCHEMAS["ranges"],
        )

    def _host_ops(
        self,
        host: dict[str, npt.NDArray[Any]],
        thread_of: Callable[[I64, I64], npt.NDArray[np.int32]],
        rank: int,
    ) -> Table:
        kind = np.empty(len(host["start"]), dtype=np.int8)
        for cls, k in _HOST_KIND.items():
            kind[host["cat"] == cls] = k
        return conform(
            {
                "start": host["start"],
                "end": host["end"],
                "name": host["name"],
                "kind": kind,
                "thread": thread_of(host["pid"], host["tid"]),
                "pid": host["pid"],
                "rank": np.full(len(kind), rank, dtype=np.int16),
                "args": host["args"],
                "external": host["external"],
            },
            SCHEMAS["host_ops"],
        )

    def _devices(self, props: Any, rank: int) -> Table:
        if props is None:
            props = []
        if not isinstance(props, list) or not all(isinstance(p, dict) for p in props):
            raise self.fail("deviceProperties is not a list of objects")
        dev, names = [], []
        for p in props:
            d = p.get("id")
            if not isinstance(d, int):
                raise self.fail(f"deviceProperties entry without an integer id: {p!r:.80}")
            dev.append(d)
            names.append(_intern(str(p.get("name", "")), self.ids, self.strings))
        return conform(
            {"device": dev, "name": names, "rank": np.full(len(dev), rank)},
            SCHEMAS["devices"],
        )


def _intern(s: str, ids: dict[str, int], strings: list[str]) -> int:
    i = ids.get(s)
    if i is None:
        i = ids[s] = len(strings)
        strings.append(s)
    return i


def _key(text: str | None, keys: dict[Any, int], new: bool) -> int:
    """A pid/tid written as a string (or null, ``None``) -> its integer key: a numeric
    string its number, any other a stable negative id, given on first sight when ``new``
    (else -1: metadata and memory events refer only to the events' keys)."""
    k = keys.get(text)
    if k is not None:
        return k
    if text is not None and text.strip().lstrip("-").isdigit():
        with contextlib.suppress(ValueError):  # "--1", "²": digits to isdigit, not to int
            k = int(text)
    if k is None:
        if not new:
            return -1
        k = -1000 - len(keys)
    if new:
        keys[text] = k
    return k


def _int(text: str | None) -> int:
    """An args integer written as a string ("0x0", "2560"), -1 when it is not one."""
    try:
        return int(text or "", 0)
    except ValueError:
        return -1


def _copy_kinds(name: str) -> tuple[int, int, int]:
    m = _MEMCPY_NAME.match(name)
    if m:
        ck = _COPY_KINDS.get(m.group(1), CopyKind.UNKNOWN)
        return (
            ck,
            _MEM_KINDS.get(m.group(2), MemKind.UNKNOWN),
            _MEM_KINDS.get(m.group(3), MemKind.UNKNOWN),
        )
    m = _MEMSET_NAME.match(name)
    if m:
        return CopyKind.NONE, MemKind.NONE, _MEM_KINDS.get(m.group(1), MemKind.UNKNOWN)
    return CopyKind.UNKNOWN, MemKind.UNKNOWN, MemKind.UNKNOWN


# Kineto cuda_sync event names (CUPTI's synchronization types)
_SYNC_KINDS = {
    "Event Sync": SyncKind.EVENT_SYNC,
    "Stream Wait Event": SyncKind.STREAM_WAIT_EVENT,
    "Stream Sync": SyncKind.STREAM_SYNC,
    "Context Sync": SyncKind.CONTEXT_SYNC,
}


def _by_time(rows: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    """``rows`` (the caller's own dict) put in time order, ties in document order. Each
    column is replaced as it is reordered, so that one column is copied at a time, not
    the whole group (a smaller peak of memory while loading)."""
    order = np.lexsort((rows["index"], rows["start"]))
    if (order[1:] > order[:-1]).all():
        return rows  # already in order
    for k in rows:
        rows[k] = rows[k][order]
    return rows


def _event_records(
    calls: dict[str, npt.NDArray[Any]],
    rec: dict[str, npt.NDArray[Any]],
    wait_pid: I64,
    waits: dict[str, I64],
    rank: int,
) -> Table:
    """The CUDA event records Kineto shows: a stream-wait-event or event-sync record names
    the ``cudaEventRecord`` call of the event it waits for (its correlation id) and the
    stream it was recorded on; one row per such call, in the process of that call (of the
    wait when the call is not in the trace). Records no wait names are not in Kineto
    traces. The event is named by the record call's correlation id, in these rows and in
    the sync records: Kineto's ``wait_on_cuda_event_id`` repeats (the HTA AlexNet capture
    names 18 records on 9 streams all event 1), the record call does not."""
    named = np.flatnonzero((waits["record"] >= 0) & (waits["stream"] >= 0))
    corr = waits["record"][named]
    call = _lookup_corr(calls, corr)
    pid = np.where(call >= 0, calls["pid"][np.maximum(call, 0)], wait_pid[named])
    # one row per (process, record call)
    _, first = np.unique(np.stack([pid, corr]), axis=1, return_index=True)
    first = np.sort(first)
    return conform(
        {
            "device": rec["device"][named][first],
            "stream": waits["stream"][named][first],
            "event": corr[first],
            "correlation": corr[first],
            "pid": pid[first],
            "rank": np.full(first.size, rank),
        },
        EVENT_SCHEMA,
    )


def _lookup_corr(api: dict[str, npt.NDArray[Any]], corr: I64) -> I64:
    """Row of the API call (not a sync record) with each correlation id, or -1."""
    ok = (api["correlation"] >= 0) & (api["cat"] != CAT_CODES["cuda_sync"])
    rows = np.flatnonzero(ok)
    keys = api["correlation"][rows]
    order = np.argsort(keys, kind="stable")
    keys, rows = keys[order], rows[order]
    if len(keys) == 0:
        return np.full(len(corr), -1, dtype=np.int64)
    pos = np.minimum(np.searchsorted(keys, corr), len(keys) - 1)
    hit = (keys[pos] == corr) & (corr >= 0)
    return np.where(hit, rows[pos], -1)


def _unique_pairs(p: I64, t: I64) -> I64:
    """Sorted unique (p, t) rows as an (n, 2) array."""
    if len(p) == 0:
        return np.empty((0, 2), dtype=np.int64)
    lo_p, lo_t = int(p.min()), int(t.min())
    span = int(t.max()) - lo_t + 1
    if (int(p.max()) - lo_p + 1) * span < 2**63:
        # one int64 key per row, in (p, t) order: one sort instead of a lexsort and its
        # gathered copies (less time, and a smaller peak of memory while loading)
        key = p - lo_p
        key *= span
        key += t - lo_t
        key.sort()
        u = key[first_of_runs(key)]
        return np.stack([u // span + lo_p, u % span + lo_t], axis=1)
    order = np.lexsort((t, p))
    p, t = p[order], t[order]
    keep = np.ones(len(p), dtype=bool)
    keep[1:] = (p[1:] != p[:-1]) | (t[1:] != t[:-1])
    return np.stack([p[keep], t[keep]], axis=1)


def _lookup_pairs(pairs: I64, p: I64, t: I64) -> npt.NDArray[np.int32]:
    """Row index of each (p, t) in ``pairs`` (sorted unique rows), or -1."""
    pp, tt = pairs[:, 0], pairs[:, 1]
    lo = np.searchsorted(pp, p, side="left")
    hi = np.searchsorted(pp, p, side="right")
    out = np.full(len(p), -1, dtype=np.int32)
    for q in unique(p):
        sel = p == q
        a, b = int(lo[sel][0]), int(hi[sel][0])
        if a == b:
            continue
        seg = tt[a:b]
        pos = np.minimum(np.searchsorted(seg, t[sel]), b - a - 1)
        out[sel] = np.where(seg[pos] == t[sel], a + pos, -1)
    return out


def _join(a: tuple[I64, ...], b: tuple[I64, ...]) -> I64:
    """For each row of key columns ``a``: the index of an equal row of ``b``, or -1."""
    na, nb = len(a[0]), len(b[0])
    out = np.full(na, -1, dtype=np.int64)
    if na == 0 or nb == 0:
        return out
    cols = [np.concatenate([x, y]) for x, y in zip(a, b, strict=True)]
    tag = np.concatenate([np.ones(na, np.int8), np.zeros(nb, np.int8)])
    order = np.lexsort([tag, *cols[::-1]])
    sc = [c[order] for c in cols]
    change = np.zeros(len(order), dtype=bool)
    change[0] = True
    for c in sc:
        change[1:] |= c[1:] != c[:-1]
    head = np.maximum.accumulate(np.where(change, np.arange(len(order)), 0))
    first = order[head]
    is_b = first >= na
    mine = order < na
    out[order[mine & is_b]] = first[mine & is_b] - na
    return out


def _link_flows(
    gpu: dict[str, npt.NDArray[Any]],
    api: dict[str, npt.NDArray[Any]],
    flows: dict[str, npt.NDArray[Any]],
) -> int:
    """Complete missing correlations from flows; count flows that disagree with args."""
    mismatches = 0
    for rows, phase in ((gpu, 1), (api, 0)):
        if len(rows["start"]) == 0:
            continue
        in_phase = flows["phase"] == phase
        ends = {name: column[in_phase] for name, column in flows.items()}
        hit = _join(
            (rows["pid"], rows["tid"], rows["start"]), (ends["pid"], ends["tid"], ends["ts"])
        )
        found = hit >= 0
        flow_id = np.full(len(hit), -1, dtype=np.int64)
        flow_id[found] = ends["id"][hit[found]]
        missing = (rows["correlation"] < 0) & found
        rows["correlation"][missing] = flow_id[missing]
        mismatches += int(np.count_nonzero(found & (rows["correlation"] != flow_id)))
    return mismatches


def _main_pid(
    api: dict[str, npt.NDArray[Any]],
    rng: dict[str, npt.NDArray[Any]],
    host: dict[str, npt.NDArray[Any]],
) -> int:
    pids = api["pid"][api["cat"] != CAT_CODES["cuda_sync"]]
    if len(pids) == 0:
        pids = np.concatenate([rng["pid"], host["pid"]])
    if len(pids) == 0:
        return -1
    vals = np.sort(pids)
    starts = np.flatnonzero(first_of_runs(vals))
    counts = np.diff(np.append(starts, len(vals)))
    return int(vals[starts[np.argmax(counts)]])


def load_kineto(path: str | os.PathLike[str]) -> Trace:
    """Load one Kineto trace (``.json``, ``.json.gz``, ``*.pt.trace.json[.gz]``)."""
    loader = _Loader(os.fspath(path))
    loader.read()
    return loader.finish()
