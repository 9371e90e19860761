"""Kineto loader on crafted traces: exact times, links, metadata, bad input, fuzzing."""

from __future__ import annotations

import decimal
import gzip
import json
import threading
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pytimings._native import _jsonscan
from pytimings.analysis.attribution import attribute
from pytimings.analysis.replay import replay, what_if
from pytimings.errors import TraceFormatError
from pytimings.ingest import kineto
from pytimings.ingest.kineto import GPU_ANNOTATION_DROPPED, load_kineto, looks_like_kineto
from pytimings.ingest.links import event_waits, launch_index
from pytimings.model.trace import (
    STRING_COLUMNS,
    ActivityKind,
    ApiKind,
    CopyKind,
    MemKind,
    OpKind,
    RangeKind,
    SyncKind,
    Trace,
)

HOST_PID, HOST_TID, DEV, STREAM = 4242, 4243, 0, 7


def ns(text: str) -> int:
    """Independent exact round(x * 1000), ties to even."""
    return int((Decimal(text) * 1000).to_integral_value(decimal.ROUND_HALF_EVEN))


def ev(
    ph: str,
    cat: str | None,
    name: str,
    ts: str,
    dur: str | None = None,
    *,
    pid: Any = HOST_PID,
    tid: Any = HOST_TID,
    args: dict[str, Any] | None = None,
    **extra: Any,
) -> str:
    """One event as JSON text, with ts/dur written verbatim (exact decimal text)."""
    parts = [f'"ph": "{ph}"']
    if cat is not None:
        parts.append(f'"cat": "{cat}"')
    parts += [
        f'"name": {json.dumps(name)}',
        f'"pid": {json.dumps(pid)}',
        f'"tid": {json.dumps(tid)}',
        f'"ts": {ts}',
    ]
    if dur is not None:
        parts.append(f'"dur": {dur}')
    for k, v in extra.items():
        parts.append(f'"{k}": {json.dumps(v)}')
    if args is not None:
        parts.append(f'"args": {json.dumps(args)}')
    return "{" + ", ".join(parts) + "}"


def doc(events: list[str], **top: Any) -> bytes:
    head = {"schemaVersion": 1, **top}
    inner = ",\n  ".join(events)
    body = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in head.items())
    return f'{{{body}, "traceEvents": [\n  {inner}\n]}}'.encode()


def launch(corr: int, ts: str, name: str = "cudaLaunchKernel", dur: str = "5.0") -> str:
    return ev("X", "cuda_runtime", name, ts, dur, args={"correlation": corr, "cbid": 211})


def kernel(corr: int | None, ts: str, dur: str = "10.0", name: str = "k") -> str:
    args: dict[str, Any] = {"device": DEV, "stream": STREAM}
    if corr is not None:
        args["correlation"] = corr
    return ev("X", "kernel", name, ts, dur, pid=DEV, tid=STREAM, args=args)


BASIC = [
    ev("M", None, "thread_name", "0", pid=HOST_PID, tid=HOST_TID, args={"name": "main "}),
    ev("X", "user_annotation", "step", "1000.0", "100.0"),
    ev("X", "user_annotation", "inner", "1010.0", "20.0"),
    launch(1, "1011.5"),
    kernel(1, "1020.25", "4.5", name="gemm"),
    launch(2, "1031.0", name="cudaMemcpyAsync"),
    ev(
        "X",
        "gpu_memcpy",
        "Memcpy HtoD (Pageable -> Device)",
        "1040.0",
        "2.0",
        pid=DEV,
        tid=STREAM,
        args={"device": DEV, "stream": STREAM, "correlation": 2, "bytes": 4096},
    ),
    launch(3, "1050.0", name="cudaMemsetAsync"),
    ev(
        "X",
        "gpu_memset",
        "Memset (Device)",
        "1060.0",
        "1.0",
        pid=DEV,
        tid=STREAM,
        args={"device": DEV, "stream": STREAM, "correlation": 3, "bytes": 64},
    ),
    ev("X", "cuda_driver", "cuLaunchKernelEx", "1070.0", "3.0", args={"correlation": 4}),
    kernel(4, "1075.0", "1.0", name="nvjet"),
    ev(
        "X",
        "gpu_user_annotation",
        "step",
        "1020.0",
        "60.0",
        pid=DEV,
        tid=STREAM,
        args={"External id": 1},
    ),
    ev("X", "cpu_op", "aten::mm", "1011.0", "9.0", args={"Input Dims": [[1, 2]]}),
    ev("X", "python_function", "model.py(12): forward", "1010.5", "10.25", args={"Python id": 3}),
    ev("s", "ac2g", "ac2g", "1011.5", id=1),
    ev("f", "ac2g", "ac2g", "1020.25", pid=DEV, tid=STREAM, id=1, bp="e"),
]
TOP = {
    "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 1}],
    "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8},
    "displayTimeUnit": "ms",
    "baseTimeNanoseconds": 1700000000000000000,
}


def write(tmp_path: Path, data: bytes, name: str = "t.json", gz: bool = False) -> Path:
    p = tmp_path / (name + (".gz" if gz else ""))
    p.write_bytes(gzip.compress(data) if gz else data)
    return p


@pytest.mark.parametrize("gz", [False, True])
def test_basic_trace(tmp_path: Path, gz: bool) -> None:
    tr = load_kineto(write(tmp_path, doc(BASIC, **TOP), gz=gz))
    g = tr.gpu_ops
    names = [tr.strings[i] for i in g["name"]]
    assert names == ["gemm", "Memcpy HtoD (Pageable -> Device)", "Memset (Device)", "nvjet"]
    assert list(g["kind"]) == [OpKind.KERNEL, OpKind.MEMCPY, OpKind.MEMSET, OpKind.KERNEL]
    assert list(g["start"]) == [ns("1020.25"), ns("1040.0"), ns("1060.0"), ns("1075.0")]
    assert list(g["end"]) == [ns("1024.75"), ns("1042.0"), ns("1061.0"), ns("1076.0")]
    assert list(g["copy_kind"]) == [CopyKind.NONE, CopyKind.HTOD, CopyKind.NONE, CopyKind.NONE]
    assert list(g["src_mem"])[:3] == [MemKind.NONE, MemKind.PAGEABLE, MemKind.NONE]
    assert list(g["dst_mem"])[:3] == [MemKind.NONE, MemKind.DEVICE, MemKind.DEVICE]
    assert list(g["bytes"]) == [0, 4096, 64, 0]
    assert list(g["correlation"]) == [1, 2, 3, 4]
    assert set(g["pid"]) == {HOST_PID}  # the launching host process, not the device row
    assert set(g["device"]) == {DEV} and set(g["stream"]) == {STREAM}
    assert set(g["rank"]) == {3} and set(g["graph"]) == {-1}

    a = tr.api_calls
    assert [tr.strings[i] for i in a["name"]] == [
        "cudaLaunchKernel",
        "cudaMemcpyAsync",
        "cudaMemsetAsync",
        "cuLaunchKernelEx",
    ]
    assert list(a["kind"]) == [0, 0, 0, 1]
    assert list(a["correlation"]) == [1, 2, 3, 4]
    th = tr.threads
    assert len(th) == 1 and tr.strings[th["name"][0]] == "main"
    assert (th["pid"][0], th["tid"][0]) == (HOST_PID, HOST_TID)
    assert set(a["thread"]) == {0}

    r = tr.ranges  # the gpu_user_annotation copy of "step" is not a range
    assert [tr.strings[i] for i in r["name"]] == ["step", "inner"]
    assert list(r["kind"]) == [RangeKind.ANNOTATION, RangeKind.ANNOTATION]
    assert list(r["depth"]) == [0, 1]
    assert list(r["thread"]) == [0, 0]
    assert list(r["device"]) == [-1, -1]

    h = tr.host_ops  # in time order, names as written, on the thread of the ranges
    assert [tr.strings[i] for i in h["name"]] == ["model.py(12): forward", "aten::mm"]
    assert list(h["kind"]) == [ActivityKind.PYTHON, ActivityKind.CPU_OP]
    assert list(h["start"]) == [ns("1010.5"), ns("1011.0")]
    assert list(h["end"]) == [ns("1020.75"), ns("1020.0")]
    assert list(h["thread"]) == [0, 0] and set(h["pid"]) == {HOST_PID} and set(h["rank"]) == {3}

    assert tr.strings[tr.devices["name"][0]] == "NVIDIA H200"
    assert tr.meta["rank"] == 3 and tr.meta["world_size"] == 8
    assert tr.meta["base_time_ns"] == 1700000000000000000
    assert tr.dropped == {GPU_ANNOTATION_DROPPED: 1}


def test_exact_times_where_floats_drift(tmp_path: Path) -> None:
    # 1.7e15 us: a float64 holds it to 0.25 us; ts*1000 as a float to 256 ns
    ts, dur = "1712195495519695.812", "63.813"
    assert round(float(ts) * 1000) != ns(ts)  # the naive way is wrong here
    tr = load_kineto(write(tmp_path, doc([launch(1, ts, dur=dur)], displayTimeUnit="ns")))
    assert tr.api_calls["start"][0] == 1712195495519695812
    assert tr.api_calls["end"][0] == 1712195495519759625
    assert tr.meta["display_time_unit"] == "ns"


@pytest.mark.parametrize(
    ("ts", "dur"),
    [
        ("1.0005", "0"),  # tie -> even (1000)
        ("1.0015", "0"),  # tie -> even (1002)
        ("0.0004", "0.0001"),  # end is a tie made by the sum
        ("0.0006", "0.0009"),
        ("5219341043348.053", "40.502"),
        ("1623142623460111", "25"),
        ("1.5e3", "2E-3"),  # exponents: exact fallback
        ("0.30000000000000004", "0.1"),  # more digits than the fast path keeps
        ("12.999999999999", "0.0000000000005"),
        ("3999999999999999.9995", "1"),
        ("4000000000000001.5", "0.5"),  # beyond the fast path's range
    ],
)
def test_exact_ns_matches_decimal(ts: str, dur: str) -> None:
    want = (ns(ts), ns(str(Decimal(ts) + Decimal(dur))))
    assert kineto._exact(ts.encode(), dur.encode()) == want
    fast = _jsonscan.exact_ns_fast(ts.encode(), dur.encode())
    assert fast is None or fast == want


json_numbers = st.builds(
    lambda i, f: f"{i}.{f}" if f else str(i),
    st.integers(min_value=0, max_value=4 * 10**15),
    st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=16)),
)


@given(json_numbers, json_numbers)
@settings(max_examples=300)
def test_fast_path_agrees_with_its_python_twin(ts: str, dur: str) -> None:
    fast = _jsonscan.exact_ns_fast(ts.encode(), dur.encode())
    if fast is not None:
        assert fast == kineto._exact(ts.encode(), dur.encode())


@pytest.mark.parametrize(
    ("ts", "dur"),
    [
        ("1.0005", "0"),
        ("1.0015", "0.0000"),
        ("0.0004", "0.0001"),
        ("0", "0.5"),
        ("5219341043348.053", "40.502"),
        ("1623142623460111", "25"),
        ("1.5e3", "2E-3"),  # exponent: the exact fallback
        ("-0.5", "1"),  # sign: the exact fallback
        ("12.9999999999990000", "0.0000000000005"),  # digits past 12: zeros, then not
        ("3999999999999999.9995", "1"),
        ("4000000000000000", "0.0004"),  # the fast path's bound itself
        ("4000000000000001.5", "0.5"),  # beyond it
        ("4611686018427387.903", "0"),  # near the ±2^62 ns bound of a load
    ],
)
def test_scanner_times_match_decimal(tmp_path: Path, ts: str, dur: str) -> None:
    # the scanner converts a ts/dur from the parts its number parse kept (or defers it):
    # the same ns as the decimal rounding, through a whole load
    tr = load_kineto(write(tmp_path, doc([launch(1, ts, dur=dur)])))
    assert tr.api_calls["start"][0] == ns(ts)
    assert tr.api_calls["end"][0] == ns(str(Decimal(ts) + Decimal(dur)))


@given(json_numbers, json_numbers)
@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_scanner_times_agree_with_decimal(tmp_path: Path, ts: str, dur: str) -> None:
    assume(Decimal(ts) + Decimal(dur) < Decimal(2**62) / 1000)  # a load's bound
    tr = load_kineto(write(tmp_path, doc([launch(1, ts, dur=dur)])))
    assert tr.api_calls["start"][0] == ns(ts)
    assert tr.api_calls["end"][0] == ns(str(Decimal(ts) + Decimal(dur)))


# integers of every length, so that each digit count and each 8-digit block boundary of the
# scanner's number parse is met, with int64's edges and the first values past them
int_texts = st.one_of(
    st.integers(min_value=1, max_value=20).flatmap(
        lambda k: st.integers(min_value=10 ** (k - 1) if k > 1 else 0, max_value=10**k - 1)
    ),
    st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, 10**19, 10**25]),
).map(str)


@given(int_texts, st.sampled_from(["", " ", "\n    "]))
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_scanner_integers_of_every_length(tmp_path: Path, text: str, space: str) -> None:
    event = launch(7, "10.5").replace('"correlation": 7', f'"correlation": {space}{text}{space}')
    path = write(tmp_path, doc([event]))
    if int(text) >= 2**63:
        with pytest.raises(TraceFormatError, match=f"args.correlation {text} does not fit"):
            load_kineto(path)
        return
    assert int(load_kineto(path).api_calls["correlation"][0]) == int(text)


def python_utf8_bad(data: bytes) -> int:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start
    return -1


@given(st.one_of(st.binary(max_size=40), st.text(max_size=20).map(str.encode)))
@settings(max_examples=500)
def test_utf8_check_agrees_with_python(data: bytes) -> None:
    assert _jsonscan.utf8_bad(data) == python_utf8_bad(data)


@pytest.mark.parametrize(
    "data",
    [
        b"\xc0\x80",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\xe0\x80\x80",
        b"abcdefgh\xff",
        "héllo wörld ≥ 𝄞".encode(),
        b"\xf0\x9f\x98",
    ],
)
def test_utf8_check_edge_cases(data: bytes) -> None:
    assert _jsonscan.utf8_bad(data) == python_utf8_bad(data)


@pytest.mark.parametrize(
    ("text", "bad"),
    [(b"aten::mm", b"aten::\xffmm"), (b'"External id"', b'"External \xffid"')],
    ids=["host-event", "unmodelled-event"],
)
def test_invalid_utf8(tmp_path: Path, text: bytes, bad: bytes) -> None:
    expect_error(write(tmp_path, doc(BASIC, **TOP).replace(text, bad)), "not valid UTF-8")


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_chunk_boundaries_do_not_matter(
    tmp_path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = doc([*BASIC, ev("X", "cpu_op", 'a "quoted" \\ name {[', "1.0", "1.0")], **TOP)
    p = write(tmp_path, data)
    ref = load_kineto(p)
    monkeypatch.setattr(kineto, "CHUNK_BYTES", chunk)
    got = load_both_ways(p)
    assert_same(ref, got)


def assert_same(a: Trace, b: Trace) -> None:
    """Equal tables, comparing strings rather than ids (ids depend on decode order)."""
    for name in ("gpu_ops", "api_calls", "ranges", "host_ops", "threads", "devices"):
        ta, tb = a.table(name), b.table(name)
        for col in ta.columns:
            va, vb = ta[col], tb[col]
            if col in STRING_COLUMNS[name]:
                va = [a.strings[i] for i in va]
                vb = [b.strings[i] for i in vb]
            np.testing.assert_array_equal(va, vb, err_msg=f"{name}.{col}")
    assert a.dropped == b.dropped


def test_an_event_larger_than_a_piece(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = ev("X", "user_annotation", "x" * 5000, "1.0", "2.0")
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 100)
    tr = load_both_ways(write(tmp_path, doc([big, *BASIC])))
    assert len(tr.strings[tr.ranges["name"][0]]) == 5000


def test_flows_complete_missing_correlation(tmp_path: Path) -> None:
    events = [
        ev("X", "cuda_runtime", "cudaLaunchKernel", "10.0", "5.0", args={"cbid": 211}),
        ev("s", "ac2g", "ac2g", "10.0", id=77),
        kernel(None, "20.0"),
        ev("f", "ac2g", "ac2g", "20.0", pid=DEV, tid=STREAM, id=77, bp="e"),
    ]
    tr = load_kineto(write(tmp_path, doc(events)))
    assert list(tr.api_calls["correlation"]) == [77]
    assert list(tr.gpu_ops["correlation"]) == [77]
    assert list(tr.gpu_ops["pid"]) == [HOST_PID]
    assert tr.meta["flow_mismatches"] == 0


def test_graph_launch_may_share_a_correlation(tmp_path: Path) -> None:
    events = [launch(9, "1.0", name="cudaGraphLaunch"), kernel(9, "2.0"), kernel(9, "3.0")]
    tr = load_kineto(write(tmp_path, doc(events)))
    assert list(tr.gpu_ops["graph"]) == [9, 9]


def test_cuda_sync_records_go_to_the_calling_thread(tmp_path: Path) -> None:
    events = [
        ev("X", "cuda_runtime", "cudaStreamSynchronize", "1.0", "9.0", args={"correlation": 5}),
        ev(
            "X",
            "cuda_sync",
            "Stream Sync",
            "2.0",
            "7.0",
            pid=DEV,
            tid=STREAM,
            args={"correlation": 5, "stream": STREAM, "device": DEV},
        ),
    ]
    tr = load_kineto(write(tmp_path, doc(events)))
    a, s = tr.api_calls, tr.syncs
    assert list(a["kind"]) == [ApiKind.RUNTIME]  # the record is not an API call
    assert [list(s[c]) for c in ("kind", "stream", "device", "correlation")] == [
        [SyncKind.STREAM_SYNC],
        [STREAM],
        [DEV],
        [5],
    ]
    assert list(s["thread"]) == [0] and list(s["pid"]) == [HOST_PID]
    assert tr.meta["sync_rows_without_api_call"] == 0


def _wait_event(corr: int, ts: str, stream: int, on_stream: int, record: int) -> list[str]:
    """A cudaStreamWaitEvent call and its cuda_sync record naming the event's record call
    (newer Kineto); every event is id 1, as Kineto writes them."""
    call = ev("X", "cuda_runtime", "cudaStreamWaitEvent", ts, "0.5", args={"correlation": corr})
    args = {"correlation": corr, "stream": stream, "device": DEV, "wait_on_stream": on_stream,
            "wait_on_cuda_event_record_corr_id": record, "wait_on_cuda_event_id": 1}  # fmt: skip
    rec = ev("X", "cuda_sync", "Stream Wait Event", ts, "0.1", pid=DEV, tid=stream, args=args)
    return [call, rec]


def _on(stream: int, corr: int, ts: str, dur: str, name: str) -> str:
    args = {"device": DEV, "stream": stream, "correlation": corr}
    return ev("X", "kernel", name, ts, dur, pid=DEV, tid=stream, args=args)


def test_kineto_event_waits_are_read_by_their_record_call(tmp_path: Path) -> None:
    """'producer' on stream 1 (10-99 µs), recorded (call 10) and waited on by stream 2 (call
    11) before 'consumer' (100-130 µs); a 'side' kernel on stream 3 recorded (call 12) as
    event id 1 too, between the two: keyed by event id the wait would read the side
    kernel. A 'decoy' on stream 3 (92-100 µs) is what the inference would pick."""
    events = [
        ev("X", "user_annotation", "step", "0.0", "95.0"),
        launch(4, "1.0", dur="1.0"), _on(3, 4, "3.0", "2.0", "side"),
        launch(1, "2.5", dur="2.5"), _on(1, 1, "10.0", "89.0", "producer"),
        ev("X", "cuda_runtime", "cudaEventRecord", "6.0", "0.5", args={"correlation": 10}),
        ev("X", "cuda_runtime", "cudaEventRecord", "7.0", "0.5", args={"correlation": 12}),
        *_wait_event(14, "7.6", 4, 3, 12),
        *_wait_event(11, "8.0", 2, 1, 10),
        launch(2, "12.0", dur="3.0"), _on(2, 2, "100.0", "30.0", "consumer"),
        launch(3, "90.0", dur="1.0"), _on(3, 3, "92.0", "8.0", "decoy"),
    ]  # fmt: skip
    tr = load_kineto(write(tmp_path, doc(events)))
    e = tr.events
    cols = (e["correlation"].tolist(), e["stream"].tolist(), e["event"].tolist())
    ev_rows = {c: (st, ev_) for c, st, ev_ in zip(*cols, strict=True)}
    assert ev_rows == {10: (1, 10), 12: (3, 12)}  # the event named by its record call
    sy = tr.syncs
    assert set(sy["kind"].tolist()) == {SyncKind.STREAM_WAIT_EVENT}
    assert sorted(zip(sy["correlation"].tolist(), sy["event"].tolist(), strict=True)) == [
        (11, 10), (14, 12),
    ]  # fmt: skip
    waiting, awaited = event_waits(tr, launch_index(tr))
    names = [tr.strings[i] for i in tr.gpu_ops["name"]]
    # the wait on stream 4 has nothing after it to hold back
    assert [(names[w], names[a]) for w, a in zip(waiting, awaited, strict=True)] == [
        ("consumer", "producer")
    ]
    a = attribute(tr, by="step")
    assert replay(a).fidelity().to_dict()["max_error"] == 0.0
    # halving the producer (89 µs) moves the consumer 44.5 µs earlier: it ends at 85.5 µs,
    # before the decoy (100 µs), which then ends the window: 130 -> 100 µs
    doc_ = what_if(a, "kernel:producer=0.5").to_dict()
    assert [w["before_ns"] - w["after_ns"] for w in doc_["windows"]] == [30_000]


def test_rocm_copy_bytes_from_the_hip_call(tmp_path: Path) -> None:
    events = [
        ev(
            "X",
            "cuda_runtime",
            "hipMemcpyWithStream",
            "1.0",
            "9.0",
            args={"correlation": 117, "size": "2560", "stream": "0x0", "kind": "1"},
        ),
        ev(
            "X",
            "gpu_memcpy",
            "Memcpy HtoD (Host -> Device)",
            "3.0",
            "1.0",
            pid=2,
            tid=0,
            args={"device": 2, "stream": 0, "correlation": 117, "kind": "HtoD"},
        ),
    ]
    tr = load_kineto(write(tmp_path, doc(events)))
    g = tr.gpu_ops
    assert list(g["bytes"]) == [2560]
    assert list(g["copy_kind"]) == [CopyKind.HTOD]
    assert list(g["src_mem"]) == [MemKind.UNKNOWN] and list(g["dst_mem"]) == [MemKind.DEVICE]
    assert list(g["device"]) == [2]


def test_cpu_only_trace_loads_ranges(tmp_path: Path) -> None:
    events = [ev("X", "user_annotation", "gloo:all_reduce", "1.0", "2.0")]
    tr = load_kineto(write(tmp_path, doc(events)))
    assert len(tr.gpu_ops) == 0 and len(tr.api_calls) == 0 and len(tr.ranges) == 1


def test_looks_like_kineto() -> None:
    assert looks_like_kineto(doc(BASIC, **TOP)[:4096])
    assert looks_like_kineto(b'\n{"schemaVersion": 1, "deviceProperties": [')
    assert not looks_like_kineto(b"SQLite format 3\x00")
    assert not looks_like_kineto(b'[{"ph": "X"}]')
    assert not looks_like_kineto(b'{"records": []}')


def load_both_ways(path: Path) -> Trace:
    """load_kineto splitting on the calling thread and on the helper thread: the same
    tables or the same error."""
    got: list[Trace | TraceFormatError] = []
    saved = kineto.INLINE_BYTES
    for inline_bytes in (1 << 40, 0):
        kineto.INLINE_BYTES = inline_bytes
        try:
            got.append(load_kineto(path))
        except TraceFormatError as e:
            got.append(e)
        finally:
            kineto.INLINE_BYTES = saved
    here, helper = got
    if isinstance(here, TraceFormatError):
        assert str(here) == str(helper)
        raise here
    assert isinstance(helper, Trace), helper
    assert_same(here, helper)
    return here


def expect_error(path: Path, *fragments: str) -> TraceFormatError:
    with pytest.raises(TraceFormatError) as info:
        load_both_ways(path)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(str(path))
    for f in fragments:
        assert f in msg, msg
    return info.value


def test_truncated_gzip(tmp_path: Path) -> None:
    data = gzip.compress(doc(BASIC, **TOP))
    p = tmp_path / "t.json.gz"
    p.write_bytes(data[: len(data) // 2])
    expect_error(p, "truncated gzip")


def test_invalid_json_names_the_byte(tmp_path: Path) -> None:
    data = doc(BASIC, **TOP)
    bad = data.replace(b'"bytes": 4096', b'"bytes": 40x96')
    at = bad.index(b"x96")
    err = expect_error(write(tmp_path, bad), "invalid JSON at byte")
    assert f"byte {at}" in err.problem


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        (b'"Input Dims": [[1, 2]]', b'"Input Dims": [[1, 2],]'),  # skipped args of a cpu_op
        (b'"External id": 1', b'"External id": 1,'),  # a gpu_user_annotation, not loaded
    ],
    ids=["skipped-args", "unmodelled-event"],
)
def test_invalid_json_in_what_is_not_loaded(tmp_path: Path, text: bytes, bad: bytes) -> None:
    expect_error(write(tmp_path, doc(BASIC, **TOP).replace(text, bad)), "invalid JSON at byte")


def test_invalid_json_outside_the_events(tmp_path: Path) -> None:
    bad = doc(BASIC, **TOP).replace(b'"world_size": 8', b'"world_size": 8,,')
    expect_error(write(tmp_path, bad), "invalid JSON at byte")


def test_unbalanced_quote_is_located(tmp_path: Path) -> None:
    bad = doc(BASIC, **TOP).replace(b'"name": "nvjet"', b'"name": nvjet"')
    expect_error(write(tmp_path, bad), "invalid JSON at byte", "traceEvents[")


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b'{"records": [1, 2]}', "no traceEvents"),
        (b"[1, 2, 3]", "not a JSON object"),
        (b'{"traceEvents": {}}', "not an array"),
        (b'{"traceEvents": [1]}', "traceEvents[0] is not a JSON object"),
        (b'{"traceEvents": []}', "no events"),
        (
            b'{"traceEvents": [{"ph": "X", "cat": "overhead", "name": "a", "ts": 1, "dur": 1}]}',
            "no events pytimings models",
        ),
        (
            b'{"traceEvents": [{"ph": "X", "cat": "gpu_user_annotation", "name": "a", "ts": 1, '
            b'"dur": 1}]}',
            "no events pytimings models",
        ),
        (b'{"traceEvents": []} x', "after the end"),
        (b"", "empty file"),
        (b'{"traceEvents": [{"ph": "X"}', "truncated"),
    ],
)
def test_not_a_trace(tmp_path: Path, data: bytes, fragment: str) -> None:
    expect_error(write(tmp_path, data), fragment)


def test_negative_duration(tmp_path: Path) -> None:
    events = [launch(1, "10.0", dur="-2.5")]
    expect_error(write(tmp_path, doc(events)), "negative duration", "traceEvents[0]")


def test_duplicate_correlation(tmp_path: Path) -> None:
    events = [launch(1, "1.0"), kernel(1, "2.0"), kernel(1, "3.0")]
    expect_error(write(tmp_path, doc(events)), "duplicate correlation id 1")


def test_unknown_time_unit(tmp_path: Path) -> None:
    expect_error(
        write(tmp_path, doc(BASIC, displayTimeUnit="fortnights")),
        "unknown displayTimeUnit 'fortnights'",
    )


def test_bad_timestamp_text(tmp_path: Path) -> None:
    events = [ev("X", "cuda_runtime", "x", '"soon"', "1.0", args={"correlation": 1})]
    expect_error(write(tmp_path, doc(events)), "ts is not a number")


def test_timestamp_out_of_range(tmp_path: Path) -> None:
    events = [launch(1, "1e30")]
    expect_error(write(tmp_path, doc(events)), "timestamp")


def test_missing_file(tmp_path: Path) -> None:
    expect_error(tmp_path / "nope.json", "cannot read")


# ---- property tests ---------------------------------------------------------------
FIXTURE_OK = [HealthCheck.function_scoped_fixture]  # tmp_path is reused; files are rewritten

times = st.builds(lambda i, f: f"{i}.{f:03d}", st.integers(0, 2 * 10**15), st.integers(0, 999))


@st.composite
def traces(draw: st.DrawFn) -> tuple[bytes, dict[str, Any]]:
    n_kernels = draw(st.integers(0, 6))
    n_ann = draw(st.integers(0 if n_kernels else 1, 4))  # something the model holds
    n_host = draw(st.integers(0, 4))
    n_gpu_ann = draw(st.integers(0, 3))
    n_other = draw(st.integers(0, 4))
    events, starts = [], []
    for c in range(n_kernels):
        t0, d = draw(times), draw(times)
        events.append(launch(c + 1, t0, dur="1.0"))
        events.append(kernel(c + 1, t0, d, name=draw(st.text(max_size=8))))
        starts.append((ns(t0), ns(str(Decimal(t0) + Decimal(d)))))
    for _ in range(n_ann):
        events.append(
            ev("X", "user_annotation", draw(st.text(max_size=5)), draw(times), draw(times))
        )
    host = []
    for _ in range(n_host):
        cat = draw(st.sampled_from(["cpu_op", "Operator", "python_function"]))
        name, t0, d = draw(st.text(max_size=8)), draw(times), draw(times)
        events.append(ev("X", cat, name, t0, d, pid=draw(st.integers(1, 3)), args={"x": [1]}))
        kind = ActivityKind.PYTHON if cat == "python_function" else ActivityKind.CPU_OP
        host.append((ns(t0), ns(str(Decimal(t0) + Decimal(d))), name, int(kind)))
    for _ in range(n_gpu_ann):
        events.append(ev("X", "gpu_user_annotation", "s", draw(times), "1", pid=DEV, tid=STREAM))
    for _ in range(n_other):
        events.append(ev("X", "overhead", "op", draw(times), "1", args={"x": [1, {"y": "]"}]}))
    order = draw(st.permutations(range(len(events))))
    events = [events[i] for i in order]
    want = {
        "kernels": sorted(starts),
        "annotations": n_ann,
        "host": sorted(host),
        "gpu_annotations": n_gpu_ann,
        "other": n_other,
        "calls": n_kernels,
    }
    return doc(events, **TOP), want


@given(traces())
@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURE_OK)
def test_random_valid_traces_round_trip(tmp_path: Path, case: tuple[bytes, dict[str, Any]]) -> None:
    data, want = case
    tr = load_both_ways(write(tmp_path, data, gz=True))
    g = tr.gpu_ops
    assert sorted(zip(g["start"].tolist(), g["end"].tolist(), strict=True)) == want["kernels"]
    assert len(tr.api_calls) == want["calls"]
    assert len(tr.ranges) == want["annotations"]
    h = tr.host_ops
    got = zip(
        h["start"].tolist(), h["end"].tolist(), h["name"].tolist(), h["kind"].tolist(), strict=True
    )
    assert sorted((s, e, tr.strings[n], k) for s, e, n, k in got) == want["host"]
    # each host op sits on the thread of its own (pid, tid)
    assert (tr.threads["pid"][h["thread"]] == h["pid"]).all()
    assert tr.dropped.get(GPU_ANNOTATION_DROPPED, 0) == want["gpu_annotations"]
    assert tr.dropped.get("overhead events (not modelled)", 0) == want["other"]


@given(traces(), st.data())
@settings(max_examples=80, deadline=None, suppress_health_check=FIXTURE_OK)
def test_corruption_raises_only_trace_format_error(
    tmp_path: Path, case: tuple[bytes, dict[str, Any]], data: st.DataObject
) -> None:
    raw, _ = case
    how = data.draw(st.sampled_from(["truncate", "flip", "insert", "gzip-truncate"]))
    pos = data.draw(st.integers(0, len(raw) - 1))
    if how == "truncate":
        bad, gz = raw[:pos], False
    elif how == "flip":
        bad, gz = raw[:pos] + bytes([data.draw(st.integers(0, 255))]) + raw[pos + 1 :], False
    elif how == "insert":
        extra = data.draw(st.sampled_from([b"{", b"]", b'"', b",", b"\\"]))
        bad, gz = raw[:pos] + extra + raw[pos:], False
    else:
        z = gzip.compress(raw)
        bad, gz = z[: data.draw(st.integers(0, len(z) - 1))], True
    p = tmp_path / ("c.json.gz" if gz else "c.json")
    p.write_bytes(bad)
    try:
        reference = json.loads(gzip.decompress(bad) if gz else bad)
    except Exception:
        reference = None
    try:
        tr = load_both_ways(p)
    except TraceFormatError:
        return
    # accepted: then the bytes were a valid JSON trace and the result is all of it
    assert reference is not None
    kernels = [
        e
        for e in reference["traceEvents"]
        if isinstance(e, dict) and e.get("cat") == "kernel" and e.get("ph") == "X"
    ]
    assert len(tr.gpu_ops) == len(kernels)


# ---- the scanner against the json module ------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
CATS = {
    "kernel": 0,
    "gpu_memcpy": 1,
    "Memset": 2,
    "cuda_runtime": 3,
    "cuda_driver": 4,
    "cuda_sync": 5,
    "user_annotation": 6,
    "gpu_user_annotation": 7,
    "cpu_op": 8,
    "Operator": 8,
    "python_function": 9,
    "ac2g": 10,
}
# keys whose type the loader checks (random values there are errors, tested elsewhere)
TYPED = {"cat", "ph", "name", "pid", "tid", "ts", "dur", "id", "args"}
events_st = st.lists(
    st.builds(
        lambda extra, cat, x: {
            **extra,
            **({} if cat is None else {"cat": cat}),
            **({"ph": "X", "name": x, "ts": 1.5, "dur": 2, "pid": 1, "tid": 2} if x else {}),
        },
        st.dictionaries(st.text(max_size=6).filter(lambda k: k not in TYPED), json_values),
        st.one_of(st.none(), st.sampled_from([*CATS, "cpu_instant_event", "cät", 'a"b', ""])),
        st.one_of(st.none(), st.text(min_size=1, max_size=5)),
    ),
    max_size=12,
)
_NAMES_OF_GROUP = {
    _jsonscan.GROUP_GPU: (0, 1, 2),
    _jsonscan.GROUP_API: (3, 4, 5),
    _jsonscan.GROUP_RANGES: (6,),
    _jsonscan.GROUP_HOST: (8, 9),
}


def scan(text: bytes, chunk: int) -> _jsonscan.Scanner:
    """The scanner fed ``text`` in pieces of ``chunk`` bytes (as the loader feeds it)."""
    sc = _jsonscan.Scanner()
    carry, i = b"", 0
    while True:
        block = text[i : i + chunk]
        i += chunk
        buf = carry + block
        used = sc.feed(buf, not block)
        carry = buf[used:]
        if not block:
            return sc


@given(events_st, json_values, st.sampled_from([None, 0, 2]), st.integers(1, 64), st.booleans())
@settings(max_examples=200, deadline=None)
def test_scanner_reads_like_json(
    events: list[dict[str, Any]], other: Any, indent: int | None, chunk: int, ascii_only: bool
) -> None:
    text = json.dumps(
        {"a": other, "traceEvents": events, "z": [other]}, indent=indent, ensure_ascii=ascii_only
    ).encode()
    sc = scan(text, chunk)
    assert sc.finished and sc.n_elements == len(events)
    want = Counter(
        _jsonscan.CLASS_NOCAT if "cat" not in e else CATS.get(e["cat"], _jsonscan.CLASS_OTHER)
        for e in events
    )
    for c in range(_jsonscan.N_CLASS):
        assert sc.class_count(c) == want[c], c
    strings = sc.strings()
    for group, classes in _NAMES_OF_GROUP.items():  # the complete events' rows, in order
        cols = sc.columns(group, ("name", "index", "start", "end", "pid", "tid"))
        rows = [k for k, e in enumerate(events) if "ph" in e and CATS.get(e.get("cat")) in classes]
        assert cols["index"].tolist() == rows
        assert [strings[i] for i in cols["name"].tolist()] == [events[k]["name"] for k in rows]
        assert set(cols["start"].tolist()) <= {1500} and set(cols["end"].tolist()) <= {3500}
    assert json.loads(sc.skeleton) == {"a": other, "traceEvents": [], "z": [other]}
    # other categories counted by their text, events without ph by ph ""
    counted = sc.counted()
    texts = sc.texts([s for _, s, _ in counted if s >= 0])
    others = {
        t: n
        for (c, s, n), t in zip([x for x in counted if x[1] >= 0], texts, strict=True)
        if c == _jsonscan.CLASS_OTHER
    }
    want_other = Counter(e["cat"] for e in events if "cat" in e and e["cat"] not in CATS)
    assert others == dict(want_other)


@pytest.mark.parametrize("pad", range(0, 70))
def test_scanner_escapes_and_specials_at_every_block_offset(pad: int) -> None:
    # strings are searched 16 bytes at a time: put an escaped quote, an escaped backslash
    # before a quote, structural bytes inside a string and a non-ASCII character at every
    # offset around the block edges
    tricky = "a" * pad + '\\"}]{[:,\\\\' + "é" + "b" * (pad % 7)
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": tricky,
            "ts": 1,
            "dur": 1,
            tricky: {tricky: 1},
            "args": {tricky: [tricky, {"k": 1}], "correlation": 7},
        },
        {"cat": "overhead", tricky: tricky, "x": {"cat": "kernel"}},
        {"name": tricky},
    ]
    for ensure_ascii in (True, False):
        text = json.dumps({"traceEvents": events, "z": tricky}, ensure_ascii=ensure_ascii)
        sc = scan(text.encode(), 1 << 20)
        counts = [sc.class_count(c) for c in range(_jsonscan.N_CLASS)]
        assert counts[_jsonscan.CLASS_KERNEL] == counts[_jsonscan.CLASS_OTHER] == 1
        assert counts[_jsonscan.CLASS_NOCAT] == 1 and sum(counts) == 3
        cols = sc.columns(_jsonscan.GROUP_GPU, ("name", "correlation"))
        assert sc.strings()[int(cols["name"][0])] == tricky
        assert cols["correlation"].tolist() == [7]
        assert json.loads(sc.skeleton) == {"traceEvents": [], "z": tricky}


@pytest.mark.parametrize("at", [*range(0, 40), 1000, 4095])
def test_scanner_finds_bad_utf8_anywhere_in_a_long_event(at: int) -> None:
    # ASCII runs skip the UTF-8 check; a byte >= 0x80 at any offset must bring it back
    name = b"n" * at + b"\xff" + b"n" * 70
    text = b'{"traceEvents": [{"cat": "cpu_op", "name": "' + name + b'"}]}'
    with pytest.raises(_jsonscan.ScanError, match="not valid UTF-8") as e:
        _jsonscan.Scanner().feed(text, True)
    assert e.value.offset == text.index(b"\xff")


@pytest.mark.parametrize(
    ("event", "problem"),
    [
        (b'{"cat": "kernel", "x": [1, 2,]}', "invalid JSON at byte"),
        (b'{"cat": "kernel", "x": 01}', "invalid JSON at byte"),
        (b'{"cat": "kernel", "x": "a\x01"}', "control character"),
        (b'{"cat": "kernel", "x": "\\q"}', "bad escape"),
        (b'{"cat": "kernel", "x": tru}', "not a JSON value"),
        (b'{"cat": "kernel" "x": 1}', "expected ','"),
        (b'{"cat": "kernel", "ph": 1}', "Expected `str`, got `int`"),
        (b'{"cat": "kernel", "pid": 1.5}', "Expected `int | str | null`, got `float`"),
        (b'{"cat": "kernel", "args": [1]}', "Expected `object | null`, got `array`"),
        (b'{"cat": "kernel", "args": {"stream": true}}', "args.stream"),
        (b'{"ph": "X", "cat": "kernel", "ts": 1, "dur": 1, "tid": 1e3}', "got `float`"),
        (b'{"ph": "X", "cat": "kernel", "ts": 1}', "has no dur"),
        (b'{"ph": "X", "cat": "kernel", "dur": 1}', "has no ts"),
        (b'{"ph": "X", "cat": "kernel", "ts": "1", "dur": 1}', "ts is not a number"),
        (
            b'{"ph": "X", "cat": "kernel", "ts": 1, "dur": 2, "pid": 18446744073709551616}',
            "pid 18446744073709551616 does not fit",
        ),
        (b'{"name": "[memory]", "ts": 1, "args": {"Bytes": "8"}}', "Bytes is not an integer"),
        (b'{"name": "[memory]", "ts": 1, "args": {"Addr": 1}}', "without ts or args.Bytes"),
    ],
)
def test_scanner_refuses_bad_events(event: bytes, problem: str) -> None:
    text = b'{"traceEvents": [{"cat": "overhead"}, ' + event + b"]}"
    with pytest.raises(_jsonscan.ScanError) as e:
        _jsonscan.Scanner().feed(text, True)
    assert problem in str(e.value) and "\n" not in str(e.value)
    assert e.value.index == 1 and e.value.element_offset == text.index(event)


def test_scanner_refuses_deep_nesting_inside_an_event() -> None:
    deep = b"[" * 1000 + b"]" * 1000
    _jsonscan.Scanner().feed(b'{"traceEvents": [{"x": ' + deep[2:-2] + b"}]}", True)
    with pytest.raises(_jsonscan.ScanError, match="nested too deeply"):
        _jsonscan.Scanner().feed(b'{"traceEvents": [{"x": ' + deep + b"}]}", True)


def test_check_json_agrees_with_json() -> None:
    for good in (b'{"a": [1, -0.5e+3, "\\u00e9", true, null, {}]}', b" [] ", b'"x"'):
        assert _jsonscan.check_json(good) is None
        json.loads(good)
    for bad, at in ((b'{"a": [1,]}', 9), (b'{"a" 1}', 5), (b"[1] 2", 4), (b'{"a": NaN}', 6)):
        assert _jsonscan.check_json(bad) is not None and _jsonscan.check_json(bad)[0] == at
        with pytest.raises(json.JSONDecodeError if b"NaN" not in bad else ValueError):
            json.loads(bad, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))


def test_scanner_on_a_helper_thread_matches_feed() -> None:
    events = [
        {"ph": "X", "cat": "kernel", "name": f"k{i % 7}", "ts": i, "dur": 1} for i in range(500)
    ]
    text = json.dumps({"traceEvents": events}).encode()
    here, there = _jsonscan.Scanner(), _jsonscan.Scanner()
    helper = threading.Thread(target=there.serve)
    helper.start()
    try:
        carry = b""
        for k in range(0, len(text) + 1, 1000):
            block = text[k : k + 1000]
            buf = carry + block
            there.submit(buf, not block)
            with pytest.raises(RuntimeError, match="busy"):
                there.columns(_jsonscan.GROUP_GPU, ("start",))
            with pytest.raises(RuntimeError, match="busy"):
                there.submit(buf, False)
            used = there.result()
            assert used == here.feed(buf, not block)
            carry = buf[used:]
        assert there.finished and there.n_elements == 500
        names = ("start", "end", "name", "index")
        a, b = here.columns(_jsonscan.GROUP_GPU, names), there.columns(_jsonscan.GROUP_GPU, names)
        for c in names:
            assert a[c].tolist() == b[c].tolist()
        assert a["start"].tolist() == [i * 1000 for i in range(500)]
        with pytest.raises(RuntimeError, match="nothing was submitted"):
            there.result()
        there.submit(b"]", True)  # an error comes back from result, as from feed
        with pytest.raises(_jsonscan.ScanError, match="data after the end"):
            there.result()
    finally:
        there.close()
        helper.join(timeout=10)
    assert not helper.is_alive()


def test_gpu_ops_without_any_runtime_call_load(tmp_path: Path) -> None:
    """A trace of GPU activity alone (no cuda_runtime/driver events) loads: the ops keep
    their correlation, have no launch call, and take the trace's process (review finding)."""
    path = tmp_path / "gpu_only.json"
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 13.0,
            "dur": 4.0,
            "args": {"correlation": 5, "device": 0, "stream": 7},
        },
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "step",
            "pid": 42,
            "tid": 1,
            "ts": 10.0,
            "dur": 9.0,
        },
    ]
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    tr = load_kineto(path)
    assert len(tr.gpu_ops) == 1
    assert len(tr.api_calls) == 0
    assert tr.gpu_ops["start"].tolist() == [13_000]
    assert tr.gpu_ops["pid"].tolist() == [42]


def test_a_bad_flow_is_an_error_only_when_flows_are_needed(tmp_path: Path) -> None:
    bad_flow = ev("s", "ac2g", "ac2g", "10.0", id=1.5)
    linked = [launch(1, "10.0"), kernel(1, "20.0"), bad_flow]
    tr = load_kineto(write(tmp_path, doc(linked)))  # every op has its correlation
    assert list(tr.gpu_ops["correlation"]) == [1]
    unlinked = [launch(1, "10.0"), kernel(None, "20.0"), bad_flow]
    expect_error(write(tmp_path, doc(unlinked), "u.json"), "Expected `int | str | null`", ".id")


def test_string_pids_and_tids_keep_their_threads_and_names(tmp_path: Path) -> None:
    events = [
        ev("M", None, "thread_name", "0", pid="host", tid="main", args={"name": "Main "}),
        ev("M", None, "process_name", "0", pid="host", tid=0, args={"name": "server"}),
        ev("X", "user_annotation", "step", "1.0", "5.0", pid="host", tid="main"),
        ev("X", "cpu_op", "aten::mm", "2.0", "1.0", pid="host", tid="7"),
        ev(
            "X",
            "cuda_runtime",
            "cudaLaunchKernel",
            "2.5",
            "0.5",
            pid="host",
            tid="7",
            args={"correlation": 3, "stream": "0x7"},
        ),
    ]
    tr = load_kineto(write(tmp_path, doc(events)))
    th = tr.threads
    host = int(tr.ranges["pid"][0])
    assert host < 0 and int(tr.host_ops["pid"][0]) == host  # one stable key for "host"
    main = int(tr.ranges["thread"][0])
    assert int(th["pid"][main]) == host and int(th["tid"][main]) < 0  # "main": a key too
    assert tr.strings[th["name"][main]] == "Main"  # the thread_name, stripped
    op = int(tr.host_ops["thread"][0])
    assert int(th["tid"][op]) == 7 and tr.strings[th["name"][op]] == ""  # "7" is 7
    assert list(tr.api_calls["correlation"]) == [3]
    assert tr.meta["processes"] == {host: "server"}
    assert int(tr.host_ops["thread"][0]) == int(tr.api_calls["thread"][0])  # tid "7" is 7


_SURROGATES = r"""{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU\ud801"}],
"traceEvents": [
{"ph": "X", "cat": "cpu_op", "name": "aten::mm\ud800", "ts": 0, "dur": 10, "pid": 1, "tid": 1,
 "args": {"External id": 1, "Input Dims": [[2, 2]], "Concrete Inputs": ["\udc00"]}},
{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1, "dur": 2, "pid": 1,
 "tid": 1, "args": {"correlation": 7}},
{"ph": "X", "cat": "kernel", "name": "gemm\ud800", "ts": 5, "dur": 3, "pid": 0, "tid": 7,
 "args": {"correlation": 7, "device": 0, "stream": 7}},
{"ph": "X", "cat": "user_annotation", "name": "step\udfff", "ts": 0, "dur": 12, "pid": 1,
 "tid": 1},
{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main\ud800"}},
{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "proc\ud800"}}
]}"""


def test_names_with_lone_surrogates_are_replaced_at_load_so_every_writer_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """JSON may escape a lone surrogate ("gemm\\ud800"): every writer failed with
    UnicodeEncodeError (issue 47 #27). Each is U+FFFD from the load on."""
    from pytimings.cli import main

    path = tmp_path / "odd.json"
    path.write_text(_SURROGATES)
    trace = kineto.load_kineto(path)
    for s in trace.strings:
        s.encode("utf-8")
    assert "gemm\ufffd" in trace.strings and "aten::mm\ufffd" in trace.strings
    for argv in (
        ["summary", str(path), "--json", str(tmp_path / "s.json")],
        ["export", str(path), "--perfetto", str(tmp_path / "p.json")],
        ["analyze", str(path), "--html", str(tmp_path / "a.html")],
        ["summary", str(path)],
    ):
        assert main(argv) == 0, argv
    assert "aten::mm\ufffd" in capsys.readouterr().out
