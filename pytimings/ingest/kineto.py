"""PyTorch-profiler (Kineto) Chrome-trace JSON -> the event model.

Design (measured in benches/bench_ingest_kineto.py, numbers in benches/RESULTS.md):

* Streaming, bounded memory: the file is decompressed in 1 MiB pieces (``isal``'s igzip,
  2-3x faster than zlib). Decoding the whole document at once with msgspec held the JSON text
  plus every event object (peak ~4.4x the JSON size on df_index_resolver, 237 MB), far over
  the memory budget; streaming peaks at ~1x the JSON size, most of it the interpreter,
  numpy and msgspec (34 MB before the first byte is read).
* ``pytimings._native._jsonscan.Splitter`` (Cython, without the GIL) cuts the
  ``traceEvents`` array into complete elements and sorts them by ``cat`` into per-class
  buffers; the rest of the document (the skeleton: deviceProperties, distributedInfo,
  displayTimeUnit, ...) is kept. It runs on a helper thread that never takes the GIL, one
  piece ahead of the decoder (files up to 256 KiB: on the calling thread).
* msgspec decodes each class buffer into small typed Structs (unknown fields are skipped in
  C; ``ts``/``dur`` kept as their JSON text, ``msgspec.Raw``, for exact ns). Host events
  (``cpu_op``, ``python_function``: often 10-100x the kernels) decode into a smaller Struct
  without ``args`` (their args, input shapes and the like, are skipped in C). Events the
  model has no table for (instant events, ``gpu_user_annotation``, ...) and flows are only
  validated (one msgspec skip pass, no objects) and counted in ``Trace.dropped``.
  The splitter checks UTF-8 (msgspec does not check the values it skips) in the elements
  that have a byte >= 0x80.
* ``pytimings._native._kineto`` (Cython) turns the Structs into column arrays with exact
  integer-ns times; links, thread rows and nesting depth are vectorised numpy.

Time units: Kineto writes ``ts`` and ``dur`` in microseconds whatever ``displayTimeUnit``
says: "ms" (or absent) marks microsecond precision, "ns" nanosecond precision (three
decimals; see ``hta/ns_resolution_trace``: its 1-second capture window only fits
microseconds). Both become ``start_ns = round(ts * 1000)`` and
``end_ns = round((ts + dur) * 1000)``, computed exactly from the decimal text (ties to
even). ``baseTimeNanoseconds`` (added by Kineto to turn ``ts`` into Unix time) is kept in
``meta["base_time_ns"]``; times stay on the trace's own timeline, like nsys times.

Links: a GPU op's ``correlation`` comes from its args; only if some op or call lacks one is
the file read a second time for its ``ac2g`` flows, which then complete the links (flows
whose id disagrees with args are counted in ``meta["flow_mismatches"]``). A GPU op's ``pid``
is the host process of its launching call (Kineto puts GPU rows under pid = device). Several
GPU ops may share a correlation only when launched by one CUDA/HIP graph launch (they get
``graph`` = that launch's correlation id; Kineto records no graph id) or when the launch
predates the capture window (``meta["ops_without_launch"]``). Any other repeated
correlation id is an error, as is a negative duration or an unknown ``displayTimeUnit``.

Host activities: ``cpu_op`` (2021-era ``Operator``) and ``python_function`` events become
``host_ops`` rows of kind CPU_OP and PYTHON on their (pid, tid) thread, names as written
(python_function names carry their file:line). ``gpu_user_annotation`` events are
GPU-timeline copies of ``user_annotation`` ranges (one or more per range and stream), not
ranges (docs/attribution.md): they are counted in ``Trace.dropped`` under
``GPU_ANNOTATION_DROPPED`` and not loaded.
CPU-only traces load their host annotations and host activities (and API calls, if any); a
trace with nothing the model holds is an error rather than an empty result.
"""

from __future__ import annotations

import contextlib
import decimal
import os
import re
import threading
from collections.abc import Callable, Generator
from typing import Any, ClassVar, cast

import msgspec
import numpy as np
import numpy.typing as npt
from isal import igzip
from isal.isal_zlib import error as IsalError  # not an OSError subclass

from pytimings._native import _jsonscan, _kineto
from pytimings.errors import TraceFormatError
from pytimings.ingest._nesting import nesting_depth
from pytimings.ingest._times import TIME_LIMIT_NS, implausible_time
from pytimings.ingest.kineto_comm import COMM_COLUMNS, COMM_KEY, comm_columns
from pytimings.ingest.memory import KinetoMemory
from pytimings.ingest.names import is_graph_launch
from pytimings.model.trace import (
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
    concat_columns,
    conform,
)
from pytimings.table import Table

__all__ = ["GPU_ANNOTATION_DROPPED", "load_kineto", "looks_like_kineto"]

# Decompressed bytes per splitter feed: large enough that per-feed overhead vanishes,
# small enough that the decoded Structs of one piece stay a few MB.
CHUNK_BYTES = 1 << 20
# Files up to this size (as stored, gzip or not) are split without the helper thread
INLINE_BYTES = 256 << 10

I64 = npt.NDArray[np.int64]


_NO_RAW = msgspec.Raw(b"")


class _Args(msgspec.Struct, gc=False):
    # ROCm runtime calls write some of these as strings ("stream": "0x0", "size": "2560")
    correlation: int | str | None = None
    device: int | str | None = None
    stream: int | str | None = None
    bytes: int | str | None = None
    size: int | str | None = None
    # NCCL kernels (PyTorch 2.1+): the collective's call, as record_param_comms has it; JSON
    # text, decoded only for the kernels that have them (pytimings.ingest.kineto_comm)
    collective: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Collective name")
    in_nelems: msgspec.Raw = msgspec.field(default=_NO_RAW, name="In msg nelems")
    out_nelems: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Out msg nelems")
    group_size: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Group size")
    dtype: msgspec.Raw = msgspec.field(default=_NO_RAW, name="dtype")


class _Event(msgspec.Struct, gc=False):
    ph: str = ""  # no "cat": the splitter has put each category in its own buffer
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: msgspec.Raw = _NO_RAW  # the number's JSON text (msgspec cannot make Raw optional)
    dur: msgspec.Raw = _NO_RAW
    args: _Args | None = None


class _TimedEvent(msgspec.Struct, gc=False):
    """The fields every host-side event of a span has (its args differ by kind)."""

    ph: str = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: msgspec.Raw = _NO_RAW
    dur: msgspec.Raw = _NO_RAW


class _HostEvent(_TimedEvent, gc=False):
    args: ClassVar[None] = None  # not decoded: nothing in a host event's args is kept


class _OpArgs(msgspec.Struct, gc=False):
    # record_shapes: kept as their JSON text (interned per distinct value, parsed only for
    # the ops that launched GPU work: pytimings.analysis.op_calls)
    dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")
    types: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Concrete Inputs")
    strides: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Strides")


class _CpuOpEvent(_TimedEvent, gc=False):
    shapes: _OpArgs | None = msgspec.field(default=None, name="args")
    args: ClassVar[None] = None  # _kineto.event_rows reads no args of host events


class _Flow(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    id: int | str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: msgspec.Raw = _NO_RAW


class _Meta(msgspec.Struct, gc=False):
    ph: str = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    args: dict[str, Any] | None = None


# (class, JSON array of its elements, document offsets, element indices, buffer offsets)
_Piece = tuple[int, bytes, "I64", "I64", "I64"]
_FLOW_DECODER = msgspec.json.Decoder(list[_Flow])
# category -> code; the splitter's classes 0-9 are these categories, one each
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
# the table each category's rows go to
_GROUP = {
    **dict.fromkeys(("kernel", "gpu_memcpy", "gpu_memset"), "gpu"),
    **dict.fromkeys(("cuda_runtime", "cuda_driver", "cuda_sync"), "api"),
    "user_annotation": "ranges",
}
_GROUP_OF = {CAT_CODES[c]: g for c, g in _GROUP.items()}
# host activity categories -> their ActivityKind
_HOST_KIND = {
    _jsonscan.CLASS_CPU_OP: ActivityKind.CPU_OP,
    _jsonscan.CLASS_PYTHON: ActivityKind.PYTHON,
}
GPU_ANNOTATION_DROPPED = "gpu_user_annotation (GPU-timeline copies of ranges; not ranges)"
_EVENT_DECODER = msgspec.json.Decoder(list[_Event])
_HOST_DECODER = msgspec.json.Decoder(list[_HostEvent])
_DECODERS: dict[int, msgspec.json.Decoder[Any]] = {
    **dict.fromkeys(_GROUP_OF, _EVENT_DECODER),
    **dict.fromkeys(_HOST_KIND, _HOST_DECODER),
    _jsonscan.CLASS_CPU_OP: msgspec.json.Decoder(list[_CpuOpEvent]),
    # validated only (one skip pass, no objects); flows: see _Loader.read(flows_only=True)
    _jsonscan.CLASS_GPU_ANNOTATION: msgspec.json.Decoder(msgspec.Raw),
    _jsonscan.CLASS_FLOW: msgspec.json.Decoder(msgspec.Raw),
    _jsonscan.CLASS_NOCAT: msgspec.json.Decoder(list[_Meta]),
    _jsonscan.CLASS_OTHER: msgspec.json.Decoder(msgspec.Raw),
}

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
_BYTE_OFFSET = re.compile(r"\(byte (\d+)\)")
_PATH_INDEX = re.compile(r"`\$\[(\d+)\]")


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


class _Loader:
    def __init__(self, path: str) -> None:
        self.path = path
        self.splitter = _jsonscan.Splitter()
        self.ids: dict[str, int] = {"": 0}
        self.strings: list[str] = [""]
        self.keys: dict[Any, int] = {}
        self.rows: dict[str, list[dict[str, npt.NDArray[Any]]]] = {
            g: [] for g in ("gpu", "api", "ranges", "host")
        }
        self.flows: list[dict[str, npt.NDArray[Any]]] = []
        self.meta_events: list[_Meta] = []
        self.dropped: dict[str, int] = {}
        self.counts = dict.fromkeys(range(_jsonscan.N_CLASS), 0)
        self.ops_without_launch = 0
        self.memory = KinetoMemory(path)  # [memory] events: in other and cat-less buffers
        self.syncs_without_call = 0
        self.op_args_ids: dict[bytes, int] = {}
        self.comm_args = False  # the piece being converted has NCCL kernel args

    def fail(self, problem: str) -> TraceFormatError:
        return TraceFormatError(self.path, problem)

    # ---- reading --------------------------------------------------------------------
    def read(self, flows_only: bool = False) -> None:
        """One pass over the file. ``flows_only``: decode just the flow events (a second
        pass, taken only when some GPU op or API call lacks args.correlation)."""
        with contextlib.closing(self._split()) as pieces:
            for item in pieces:
                for piece in item:
                    if flows_only:
                        if piece[0] == _jsonscan.CLASS_FLOW:
                            self._convert_flows(*piece)
                    else:
                        self._decode(*piece)

    def _split(self) -> Generator[list[_Piece], None, None]:
        """The class buffers of each piece of the file.

        This thread decompresses; a helper thread splits piece k (without ever taking the
        GIL, see ``Splitter.serve``) while this thread decodes piece k-1: one piece ahead,
        so memory stays bounded. Files of at most ``INLINE_BYTES`` are split on this
        thread: for them the helper costs more than it saves.
        """
        try:
            stream, gzipped = _open(self.path)
            threaded = os.fstat(stream.fileno()).st_size > INLINE_BYTES
        except OSError as e:
            raise self.fail(f"cannot read: {e.strerror or e}") from None
        splitter = self.splitter = _jsonscan.Splitter()
        helper = None
        if threaded:
            helper = threading.Thread(
                target=splitter.serve, name="pytimings-kineto-splitter", daemon=True
            )
            helper.start()
        carry = b""
        total = 0
        size = CHUNK_BYTES
        out = None
        try:
            with stream:
                while True:
                    try:
                        block = stream.read(size)
                    except (EOFError, OSError, ValueError, _ISAL_ERROR) as e:
                        what = "corrupt or truncated gzip data" if gzipped else "read error"
                        raise self.fail(f"{what} ({e})") from None
                    if total == 0 and block.startswith(UTF8_BOM):
                        block = b"   " + block[3:]  # JSON whitespace: offsets stay the file's
                    total += len(block)
                    final = not block
                    if final and total == 0:
                        raise self.fail("empty file (no JSON)")
                    buf = carry + block if carry else block
                    if helper is not None:
                        splitter.submit(buf, final)
                    if out is not None:
                        yield out  # decoded while the helper splits buf
                    try:
                        used = splitter.result() if helper else splitter.feed(buf, final)
                    except _jsonscan.SplitError as e:
                        raise self.fail(f"invalid JSON at byte {e.offset}: {e}") from None
                    carry = buf[used:]
                    # an event larger than the piece is scanned again with more data: grow
                    # the read so that a huge event costs O(size), not O(size^2)
                    size = max(CHUNK_BYTES, len(carry))
                    classes = range(_jsonscan.N_CLASS)
                    out = [(c, *splitter.take(c)) for c in classes if splitter.pending(c)]
                    if final:
                        yield out
                        return
        finally:
            if helper is not None:
                splitter.close()
                helper.join()

    def _convert_flows(self, cls: int, buf: bytes, doc: I64, idx: I64, pos: I64) -> None:
        try:
            flows = _FLOW_DECODER.decode(buf)
        except msgspec.DecodeError as e:  # the first pass accepted these bytes
            raise self.fail(f"changed while being read ({e})") from None
        self._convert(cls, flows, doc, idx)

    def _decode(self, cls: int, buf: bytes, doc: I64, idx: I64, pos: I64) -> None:
        try:
            evs = _DECODERS[cls].decode(buf)
        except msgspec.DecodeError as e:
            raise self.fail(self._decode_problem(str(e), doc, idx, pos)) from None
        except RecursionError:
            raise self.fail(_TOO_DEEP.format(f"in traceEvents (from byte {doc[0]})")) from None
        if cls in (_jsonscan.CLASS_OTHER, _jsonscan.CLASS_NOCAT):
            self.memory.feed(buf, idx, doc, _exact)
        # only pieces with NCCL kernel args are looked at event by event (kineto_comm)
        self.comm_args = cls == _jsonscan.CLASS_KERNEL and COMM_KEY in buf
        del buf
        self.counts[cls] += len(doc)
        self._convert(cls, evs, doc, idx)

    def _decode_problem(self, msg: str, doc: I64, idx: I64, pos: I64) -> str:
        m = _BYTE_OFFSET.search(msg)
        if m:
            b = int(m.group(1))
            k = max(int(np.searchsorted(pos, b, side="right")) - 1, 0)
            off = int(doc[k] + (b - pos[k])) if len(doc) else b
            return f"invalid JSON at byte {off}: {_BYTE_OFFSET.sub('', msg).strip()}"
        m = _PATH_INDEX.search(msg)
        if m:
            k = int(m.group(1))
            detail = msg.replace(f"$[{k}]", f"traceEvents[{idx[k]}]")
            return f"bad event at byte {doc[k]}: {detail}"
        return f"bad events: {msg}"

    def _convert(self, cls: int, evs: list[Any], doc: I64, idx: I64) -> None:
        try:
            if cls in _GROUP_OF or cls in _HOST_KIND:
                cols, skipped = _kineto.event_rows(
                    evs, cls, self.ids, self.strings, self.keys, _exact, idx
                )
                odd = implausible_time(cols["start"], cols["end"])
                if odd is not None:
                    row, column, value = odd
                    field = "ts" if column == "start" else "ts + dur"
                    raise self.fail(
                        f"traceEvents[{cols['index'][row]}]: {field} is {value} ns, outside "
                        "±2^62 ns (a corrupt time)"
                    )
                if cls in _HOST_KIND:  # the columns of args (all -1) are not kept
                    part = {k: cols[k] for k in _HOST_COLS}
                    part["args"] = self._op_args(evs, len(cols["start"]))
                    self.rows["host"].append(part)
                elif _GROUP_OF[cls] == "gpu":
                    cols.update(comm_columns(evs, len(cols["start"]), self.comm_args))
                    self.rows["gpu"].append(cols)
                else:
                    self.rows[_GROUP_OF[cls]].append(cols)
                self._drop_phases(cls, skipped)
            elif cls == _jsonscan.CLASS_FLOW and isinstance(evs, list):
                fcols, skipped = _kineto.flow_rows(evs, self.keys, _exact)
                self.flows.append(fcols)
            elif cls == _jsonscan.CLASS_NOCAT:
                for ev in evs:
                    if ev.ph == "M":
                        self.meta_events.append(ev)
                    elif ev.name != "[memory]":  # those are in self.memory
                        self._drop(f"events without cat (ph={ev.ph!r}, not modelled)", 1)
        except _kineto.RowError as e:
            k = e.index
            raise self.fail(f"traceEvents[{idx[k]}] (byte {doc[k]}): {e}") from None
        except OverflowError:  # an id or number field beyond int64 (times are bounded)
            k, problem = _too_large(evs)
            raise self.fail(f"traceEvents[{idx[k]}] (byte {doc[k]}): {problem}") from None
        except (ValueError, decimal.InvalidOperation) as e:
            raise self.fail(f"bad timestamp: {e}") from None

    def _op_args(self, evs: list[Any], n: int) -> npt.NDArray[np.int32]:
        """Per complete cpu_op event (those event_rows kept): the string id of its
        ``[Input Dims, Input type, Concrete Inputs, Input Strides]`` JSON text (absent
        ones null), 0 when it has none; each distinct text decoded and interned once."""
        out = np.zeros(n, dtype=np.int32)
        if not evs or not isinstance(evs[0], _CpuOpEvent):
            return out
        seen = self.op_args_ids
        k = 0
        for ev in evs:
            if ev.ph != "X":
                continue
            a = ev.shapes
            if a is not None and (a.dims or a.types or a.concrete or a.strides):
                key = b"[%b,%b,%b,%b]" % (
                    a.dims or b"null",
                    a.types or b"null",
                    a.concrete or b"null",
                    a.strides or b"null",
                )
                i = seen.get(key)
                if i is None:
                    i = seen[key] = _intern(key.decode(), self.ids, self.strings)
                out[k] = i
            k += 1
        return out

    def _drop(self, reason: str, n: int) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + n

    def _drop_phases(self, cls: int, skipped: dict[str, int]) -> None:
        for ph, n in skipped.items():
            self._drop(f"{_CAT_NAMES[cls]} events with ph={ph!r} (only complete 'X' events)", n)

    # ---- the document around the events ----------------------------------------------
    def skeleton(self) -> dict[str, Any]:
        sp = self.splitter
        try:
            doc = msgspec.json.decode(bytes(sp.skeleton))
        except msgspec.DecodeError as e:
            msg = str(e)
            m = _BYTE_OFFSET.search(msg)
            if m:
                b = int(m.group(1))
                starts = [s for s, _ in sp.skeleton_map]
                k = max(int(np.searchsorted(starts, b, side="right")) - 1, 0)
                s, d = sp.skeleton_map[k] if sp.skeleton_map else (0, 0)
                msg = f"at byte {d + b - s}: {_BYTE_OFFSET.sub('', msg).strip()}"
            else:
                msg = f"outside traceEvents: {msg}"
            raise self.fail(f"invalid JSON {msg}") from None
        except RecursionError:
            raise self.fail(_TOO_DEEP.format("outside traceEvents")) from None
        if not isinstance(doc, dict) or not sp.saw_events:
            raise self.fail("not a Kineto/Chrome trace: no traceEvents array")
        return doc

    # ---- assembling the model -------------------------------------------------------
    def finish(self) -> Trace:
        doc = self.skeleton()
        if self.splitter.n_elements == 0:
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

        for name, n in sorted(self.splitter.counts_of_other().items()):
            # the splitter counts a cat by its JSON text (valid: the events were decoded)
            cat = msgspec.json.decode(b'"' + name + b'"') if name else "(other categories)"
            n -= self.memory.cats.get(cat, 0) if name else 0
            if n:
                self._drop(f"{cat} events (not modelled)", n)
        if self.counts[_jsonscan.CLASS_GPU_ANNOTATION]:
            self._drop(GPU_ANNOTATION_DROPPED, self.counts[_jsonscan.CLASS_GPU_ANNOTATION])
        # rows in time order, ties in document order (the same however the file was cut)
        gpu = _by_time(concat_columns(self.rows["gpu"], _GPU_COLS, _EMPTY_DTYPES))
        api = _by_time(concat_columns(self.rows["api"], _ROW_COLS, _EMPTY_DTYPES))
        rng = _by_time(concat_columns(self.rows["ranges"], _ROW_COLS, _EMPTY_DTYPES))
        host = _by_time(concat_columns(self.rows["host"], (*_HOST_COLS, "args"), _EMPTY_DTYPES))
        self.rows.clear()  # the per-piece arrays; only the concatenation is needed now
        if len(gpu["start"]) + len(api["start"]) + len(rng["start"]) + len(host["start"]) == 0:
            raise self.fail(
                "no events pytimings models: no GPU kernels/memcpys/memsets, CUDA/HIP API "
                "calls, user annotations, cpu_ops or python functions"
            )

        mismatches = 0
        sync = api["cat"] == CAT_CODES["cuda_sync"]
        if self.counts[_jsonscan.CLASS_FLOW] and (
            (gpu["correlation"] < 0).any() or (api["correlation"][~sync] < 0).any()
        ):
            self.read(flows_only=True)
            flows = concat_columns(self.flows, ("phase", "id", "pid", "tid", "ts"), _EMPTY_DTYPES)
            mismatches = _link_flows(gpu, api, flows)
        threads, thread_of = self._threads(api, rng, host, r)
        main_pid = _main_pid(api, rng, host)

        gpu_ops = self._gpu_ops(gpu, api, main_pid, r)
        api_calls, syncs = self._api_calls(api, thread_of, r)
        ranges = self._ranges(rng, thread_of, r)
        host_ops = self._host_ops(host, thread_of, r)
        devices = self._devices(doc.get("deviceProperties"), r)
        mem_events = self.memory.table(lambda v: _py_key(v, self.keys), thread_of, r)

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
            "processes": self._process_names(),
            "events": self.splitter.n_elements,
            # flows are read (a second pass) only when some args lack a correlation
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
            strings=self.strings,
            meta=meta,
            dropped=self.dropped,
            mem_events=mem_events,
        )

    def _threads(
        self,
        api: dict[str, npt.NDArray[Any]],
        rng: dict[str, npt.NDArray[Any]],
        host: dict[str, npt.NDArray[Any]],
        rank: int,
    ) -> tuple[Table, Callable[[I64, I64], npt.NDArray[np.int32]]]:
        sync = api["cat"] == CAT_CODES["cuda_sync"]
        pid = np.concatenate([api["pid"][~sync], rng["pid"], host["pid"]])
        tid = np.concatenate([api["tid"][~sync], rng["tid"], host["tid"]])
        pairs = _unique_pairs(pid, tid)
        names: dict[tuple[int, int], str] = {}
        for ev in self.meta_events:
            if ev.name == "thread_name" and ev.args and isinstance(ev.args.get("name"), str):
                p, t = _py_key(ev.pid, self.keys), _py_key(ev.tid, self.keys)
                names[(p, t)] = ev.args["name"].strip()
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

    def _process_names(self) -> dict[int, str]:
        out: dict[int, str] = {}
        for ev in self.meta_events:
            if ev.name == "process_name" and ev.args and isinstance(ev.args.get("name"), str):
                out[_py_key(ev.pid, self.keys)] = ev.args["name"]
        return out

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
        for nid in _unique(gpu["name"][cat > 0]):
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
        launch_ids = _unique(api["name"])
        graph_ids = [i for i in launch_ids if is_graph_launch(self.strings[i])]
        g = found.copy()
        g[found] = np.isin(api["name"][launch[found]], graph_ids)
        graph[g] = corr[g]
        self.ops_without_launch = int(np.count_nonzero(~found))
        self._check_duplicates(pid, corr, g | ~found)
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
    ) -> tuple[Table, Table]:
        """The API calls, and the ``cuda_sync`` records (not host activities: each
        describes the call with its correlation id, on that call's thread and pid)."""
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
            },
            SCHEMAS["api_calls"],
        )
        rec = {k: v[sync] for k, v in api.items()}
        launch = _lookup_corr(calls, rec["correlation"])
        ok = launch >= 0
        thread = np.full(len(launch), -1, dtype=np.int32)
        thread[ok] = api_calls["thread"][launch[ok]]
        pid = np.full(len(launch), -1, dtype=np.int64)
        pid[ok] = calls["pid"][launch[ok]]
        self.syncs_without_call = int(len(ok) - np.count_nonzero(ok))
        names, at = np.unique(rec["name"], return_inverse=True)
        kinds = [_SYNC_KINDS.get(self.strings[n], SyncKind.UNKNOWN) for n in names.tolist()]
        syncs = conform(
            {
                "start": rec["start"],
                "end": rec["end"],
                "kind": np.asarray(kinds, dtype=np.int8)[at.reshape(-1)],
                "device": rec["device"],
                "stream": np.where(rec["stream"] == 0xFFFFFFFF, -1, rec["stream"]),  # CUPTI: none
                "event": np.full(len(launch), -1),  # wait_on_cuda_event_id: not decoded yet
                "correlation": rec["correlation"],
                "thread": thread,
                "pid": pid,
                "rank": np.full(len(launch), rank),
            },
            SYNC_SCHEMA,
        )
        return api_calls, syncs

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


def _too_large(evs: list[Any]) -> tuple[int, str]:
    """The first event with an integer field int64 cannot hold, and which field."""
    for k, ev in enumerate(evs):
        args = getattr(ev, "args", None)
        fields = [("pid", ev.pid), ("tid", ev.tid), ("id", getattr(ev, "id", None))]
        if isinstance(args, _Args):
            fields += [(f"args.{f}", getattr(args, f)) for f in _Args.__struct_fields__]
        for name, v in fields:
            if isinstance(v, str):
                with contextlib.suppress(ValueError):
                    v = int(v, 0) if v.strip()[:2].lower() in ("0x", "0o", "0b") else int(v)
            if isinstance(v, int) and not -(1 << 63) <= v < 1 << 63:
                return k, f"{name} {v} does not fit in 64 bits"
    return 0, "an integer field does not fit in 64 bits"


def _intern(s: str, ids: dict[str, int], strings: list[str]) -> int:
    i = ids.get(s)
    if i is None:
        i = ids[s] = len(strings)
        strings.append(s)
    return i


def _py_key(v: Any, keys: dict[Any, int]) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    k = keys.get(v)
    if k is not None:
        return k
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
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

_ROW_COLS = (
    "start",
    "end",
    "name",
    "cat",
    "pid",
    "tid",
    "correlation",
    "device",
    "stream",
    "bytes",
    "index",
)
_HOST_COLS = ("start", "end", "name", "cat", "pid", "tid", "index")
_GPU_COLS = (*_ROW_COLS, *COMM_COLUMNS)
_EMPTY_DTYPES = {
    **COMM_COLUMNS,
    "name": np.int32,
    "cat": np.int8,
    "phase": np.int8,
    "args": np.int32,
}  # of an empty column


def _by_time(rows: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    order = np.lexsort((rows["index"], rows["start"]))
    if (order[1:] > order[:-1]).all():
        return rows  # already in order
    return {k: v[order] for k, v in rows.items()}


def _unique(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Sorted unique values (np.unique imports numpy.ma on first use: ~20 ms per process)."""
    v = np.sort(a)
    return v[_first_of_runs(v)]


def _first_of_runs(v: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """True where a sorted array's value differs from the one before."""
    first = np.ones(len(v), dtype=bool)
    first[1:] = v[1:] != v[:-1]
    return first


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
    for q in _unique(p):
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
        sel = flows["phase"] == phase
        f = {k: v[sel] for k, v in flows.items()}
        hit = _join((rows["pid"], rows["tid"], rows["start"]), (f["pid"], f["tid"], f["ts"]))
        found = hit >= 0
        fid = np.full(len(hit), -1, dtype=np.int64)
        fid[found] = f["id"][hit[found]]
        missing = (rows["correlation"] < 0) & found
        rows["correlation"][missing] = fid[missing]
        mismatches += int(np.count_nonzero(found & (rows["correlation"] != fid)))
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
    starts = np.flatnonzero(_first_of_runs(vals))
    counts = np.diff(np.append(starts, len(vals)))
    return int(vals[starts[np.argmax(counts)]])


def load_kineto(path: str | os.PathLike[str]) -> Trace:
    """Load one Kineto trace (``.json``, ``.json.gz``, ``*.pt.trace.json[.gz]``)."""
    loader = _Loader(os.fspath(path))
    loader.read()
    return loader.finish()
