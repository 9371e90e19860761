"""Kineto loader on crafted traces: exact times, links, metadata, bad input, fuzzing."""

from __future__ import annotations

import decimal
import gzip
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytimings.analysis import _kineto
from pytimings.errors import TraceFormatError
from pytimings.ingest import kineto
from pytimings.ingest._model import STRING_COLUMNS, CopyKind, MemKind, OpKind, RangeKind, Trace
from pytimings.ingest.kineto import load_kineto, looks_like_kineto

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

    r = tr.ranges
    assert [tr.strings[i] for i in r["name"]] == ["step", "inner", "step"]
    assert list(r["kind"]) == [RangeKind.ANNOTATION, RangeKind.ANNOTATION, RangeKind.GPU_ANNOTATION]
    assert list(r["depth"]) == [0, 1, 0]
    assert list(r["thread"]) == [0, 0, -1]
    assert list(r["device"]) == [-1, -1, DEV]

    assert tr.strings[tr.devices["name"][0]] == "NVIDIA H200"
    assert tr.meta["rank"] == 3 and tr.meta["world_size"] == 8
    assert tr.meta["base_time_ns"] == 1700000000000000000
    assert tr.dropped == {"cpu_op events (not modelled)": 1}


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
    fast = _kineto.exact_ns_fast(ts.encode(), dur.encode())
    assert fast is None or fast == want


json_numbers = st.builds(
    lambda i, f: f"{i}.{f}" if f else str(i),
    st.integers(min_value=0, max_value=4 * 10**15),
    st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=16)),
)


@given(json_numbers, json_numbers)
@settings(max_examples=300)
def test_fast_path_agrees_with_its_python_twin(ts: str, dur: str) -> None:
    fast = _kineto.exact_ns_fast(ts.encode(), dur.encode())
    if fast is not None:
        assert fast == kineto._exact(ts.encode(), dur.encode())


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_chunk_boundaries_do_not_matter(
    tmp_path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = doc([*BASIC, ev("X", "cpu_op", 'a "quoted" \\ name {[', "1.0", "1.0")], **TOP)
    p = write(tmp_path, data)
    ref = load_kineto(p)
    monkeypatch.setattr(kineto, "CHUNK_BYTES", chunk)
    got = load_kineto(p)
    assert_same(ref, got)


def assert_same(a: Trace, b: Trace) -> None:
    """Equal tables, comparing strings rather than ids (ids depend on decode order)."""
    for name in ("gpu_ops", "api_calls", "ranges", "threads", "devices"):
        ta, tb = a.table(name), b.table(name)
        for col in ta.columns:
            va, vb = ta[col], tb[col]
            if col in STRING_COLUMNS[name]:
                va = [a.strings[i] for i in va]
                vb = [b.strings[i] for i in vb]
            np.testing.assert_array_equal(va, vb, err_msg=f"{name}.{col}")
    assert a.dropped == b.dropped


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


def test_cuda_sync_rows_go_to_the_calling_thread(tmp_path: Path) -> None:
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
    a = tr.api_calls
    assert list(a["kind"]) == [0, 2]
    assert list(a["thread"]) == [0, 0]
    assert list(a["pid"]) == [HOST_PID, HOST_PID]


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


def expect_error(path: Path, *fragments: str) -> TraceFormatError:
    with pytest.raises(TraceFormatError) as info:
        load_kineto(path)
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


def test_invalid_json_in_an_unmodelled_event(tmp_path: Path) -> None:
    bad = doc(BASIC, **TOP).replace(b'"Input Dims": [[1, 2]]', b'"Input Dims": [[1, 2],]')
    expect_error(write(tmp_path, bad), "invalid JSON at byte")


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
            b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1}]}',
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
    for _ in range(n_other):
        events.append(ev("X", "cpu_op", "op", draw(times), "1", args={"x": [1, {"y": "]"}]}))
    order = draw(st.permutations(range(len(events))))
    events = [events[i] for i in order]
    want = {"kernels": sorted(starts), "annotations": n_ann, "other": n_other, "calls": n_kernels}
    return doc(events, **TOP), want


@given(traces())
@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURE_OK)
def test_random_valid_traces_round_trip(tmp_path: Path, case: tuple[bytes, dict[str, Any]]) -> None:
    data, want = case
    tr = load_kineto(write(tmp_path, data, gz=True))
    g = tr.gpu_ops
    assert sorted(zip(g["start"].tolist(), g["end"].tolist(), strict=True)) == want["kernels"]
    assert len(tr.api_calls) == want["calls"]
    assert len(tr.ranges) == want["annotations"]
    assert tr.dropped.get("cpu_op events (not modelled)", 0) == want["other"]


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
        tr = load_kineto(p)
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
