from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.recording_factory import make_recording

from pytimings.errors import TraceFormatError
from pytimings.ingest.recording import load_recording_trace, looks_like_recording
from pytimings.model.recording import RecordFlag
from pytimings.model.trace import CopyKind, OpKind, RangeKind
from pytimings.record import storage

STREAM_A = 0x7F00_0000_1000
STREAM_B = 0x7F00_0000_0100


def _saved(tmp_path: Path) -> Path:
    rows = [
        {"name": "decode_step", "kind": "compute", "start": 1000, "end": 9000, "thread": 0},
        {
            "name": "attn",
            "kind": "compute",
            "start": 1100,
            "end": 1500,
            "depth": 1,
            "gpu": (1600, 2600),
            "stream": STREAM_A,
            "payload": 3,
        },
        {
            "name": "kv_offload",
            "kind": "memory",
            "start": 2000,
            "end": 2100,
            "depth": 1,
            "gpu": (2700, 3700),
            "stream": STREAM_B,
            "nbytes": 1 << 20,
        },
        {
            "name": "allreduce",
            "kind": "comm",
            "start": 3000,
            "end": 3050,
            "depth": 1,
            "gpu": (3800, 4800),
            "stream": STREAM_A,
            "nbytes": 4096,
        },
        {"name": "bg", "kind": "host", "start": 500, "end": 700, "thread": 1},
        {
            "name": "pending",
            "kind": "compute",
            "start": 5000,
            "end": 5100,
            "flags": RecordFlag.GPU_TIMED,
        },
    ]
    rec = make_recording(
        rows,
        threads=[{"tid": 100, "name": "MainThread"}, {"tid": 101, "name": "sched"}],
        meta={"pid": 77, "rank": 1},
        dropped={"attn": 4},
    )
    return storage.save(tmp_path / "run.pyt", rec)


def test_detects_arrow_files_only(tmp_path: Path) -> None:
    head = _saved(tmp_path).read_bytes()[:1024]
    assert looks_like_recording(head)
    assert not looks_like_recording(head[:64])  # the format marker is not in 64 bytes
    other = tmp_path / "other.arrow"
    import pyarrow as pa

    with pa.OSFile(str(other), "wb") as sink, pa.ipc.new_file(sink, pa.schema([("a", pa.int8())])):
        pass
    assert not looks_like_recording(other.read_bytes())
    assert not looks_like_recording(b"SQLite format 3\x00")
    assert not looks_like_recording(b'{"traceEvents": []}')
    assert not looks_like_recording(b"")


def test_regions_become_ranges(tmp_path: Path) -> None:
    tr = load_recording_trace(_saved(tmp_path))
    s = tr.strings
    r = tr.ranges
    assert len(r) == 6
    assert set(r["kind"]) == {RangeKind.REGION}
    assert {s[i] for i in r["domain"]} == {"pytimings"}
    by_name = {s[n]: i for i, n in enumerate(r["name"])}
    assert s[r["category"][by_name["kv_offload"]]] == "memory"
    assert r["depth"][by_name["attn"]] == 1 and r["depth"][by_name["decode_step"]] == 0
    assert r["payload"][by_name["attn"]] == 3.0
    assert np.isnan(r["payload"][by_name["decode_step"]])
    assert r["thread"][by_name["bg"]] == 1
    assert set(r["pid"]) == {77} and set(r["rank"]) == {1}
    assert list(tr.threads["tid"]) == [100, 101]
    assert [s[i] for i in tr.threads["name"]] == ["MainThread", "sched"]


def test_gpu_spans_become_ops_linked_to_a_launch_call(tmp_path: Path) -> None:
    tr = load_recording_trace(_saved(tmp_path))
    s = tr.strings
    ops, calls = tr.gpu_ops, tr.api_calls
    assert len(ops) == 3 and len(calls) == 3
    names = [s[i] for i in ops["name"]]
    assert names == ["attn", "kv_offload", "allreduce"]
    assert list(ops["kind"]) == [OpKind.KERNEL, OpKind.MEMCPY, OpKind.KERNEL]
    assert list(ops["copy_kind"]) == [CopyKind.NONE, CopyKind.UNKNOWN, CopyKind.NONE]
    assert list(ops["bytes"]) == [0, 1 << 20, 0]
    # raw handles numbered by value: STREAM_B < STREAM_A
    assert list(ops["stream"]) == [1, 0, 1]
    assert tr.meta["streams"] == [STREAM_B, STREAM_A]
    assert list(ops["start"]) == [1600, 2700, 3800]
    # each op's launch call is its region's host span: launch latency = queue delay
    by_corr = {c: i for i, c in enumerate(calls["correlation"])}
    assert len(set(ops["correlation"])) == 3
    for i, c in enumerate(ops["correlation"]):
        j = by_corr[c]
        assert s[calls["name"][j]] == "pytimings.region"
        assert ops["start"][i] - calls["start"][j] == [500, 700, 800][i]
    assert len(tr.devices) == 1
    assert tr.dropped == {
        "GPU timing requested but not resolved (no GPU op)": 1,
        "dropped by the recorder's memory cap: attn": 4,
    }


def test_rank_only_when_the_recording_knows_it(tmp_path: Path) -> None:
    tr = load_recording_trace(_saved(tmp_path))
    assert tr.meta["rank"] == 1 and set(tr.gpu_ops["rank"]) == {1}
    rec = make_recording([{"name": "a", "start": 0, "end": 1}], meta={"pid": 1})
    tr = load_recording_trace(storage.save(tmp_path / "norank.pyt", rec))
    assert "rank" not in tr.meta  # pytimings.load() then takes it from the file name/order
    assert set(tr.ranges["rank"]) == {0}


def test_not_a_recording(tmp_path: Path) -> None:
    p = tmp_path / "x.pyt"
    p.write_bytes(b"ARROW1\x00\x00pytimings.recording/1 garbage")
    with pytest.raises(TraceFormatError, match=str(p)):
        load_recording_trace(p)


_TRUNCATE_AFTER_LOAD = """
import os, sys
from pytimings.ingest.recording import load_recording_trace
tr = load_recording_trace(sys.argv[1])
os.truncate(sys.argv[1], 0)  # the trace must hold no mapping of the file
print(sum(int(tr.table(t)[c].sum()) for t in ("ranges", "api_calls") for c in ("start", "end")))
"""


def test_a_recording_truncated_after_loading_is_still_read(tmp_path: Path) -> None:
    """Issue 17 item 3: arrays over an mmap of a file truncated later faulted with SIGBUS."""
    rows = [{"name": f"r{i}", "start": 10 * i, "end": 10 * i + 5} for i in range(50_000)]
    path = storage.save(tmp_path / "big.pyt", make_recording(rows, meta={"pid": 1}))
    want = load_recording_trace(path)
    total = sum(
        int(want.table(t)[c].sum()) for t in ("ranges", "api_calls") for c in ("start", "end")
    )
    done = subprocess.run(
        [sys.executable, "-c", _TRUNCATE_AFTER_LOAD, str(path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(total)


def test_regions_nested_deeper_than_int16_load(tmp_path: Path) -> None:
    """The recorder saves depths as uint16; every loader used to reject a whole file whose
    regions nest 32,768 deep or more (an int16 model column). 40,000 nested regions, real
    recorder, load back with their depths."""
    import contextlib

    import pytimings as pt

    rec = pt.Recorder()
    n = 40_000
    with contextlib.ExitStack() as stack:
        for _ in range(n):
            stack.enter_context(rec.region("deep"))
    path = tmp_path / "deep.pyt"
    pt.save(path, rec)
    tr = load_recording_trace(path)
    assert len(tr.ranges) == n
    assert sorted(tr.ranges["depth"].tolist()) == list(range(n))
