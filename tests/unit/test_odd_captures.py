"""Capture shapes that load but hold no GPU op (issue 45 item 1): every analyze output
gives a document or one line saying why not, never a traceback.

The CUPTI range profiler writes its kernels as ``cuda_profiler_range`` events (not GPU
ops); the host side keeps its launch, stream-wait-event and synchronize calls, so the
replay's dependency graph sees synchronizing calls and no op for them to await."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_ingest_kineto import DEV, TOP, doc, ev, launch, write

from pytimings.cli import main

STREAM = 7


def _wait_event() -> list[str]:
    """A cudaEventRecord, then a cudaStreamWaitEvent and its cuda_sync record."""
    args = {"correlation": 11, "stream": STREAM, "device": DEV, "wait_on_stream": 3,
            "wait_on_cuda_event_record_corr_id": 10, "wait_on_cuda_event_id": 1}  # fmt: skip
    return [
        ev("X", "cuda_runtime", "cudaEventRecord", "5.0", "0.5", args={"correlation": 10}),
        ev("X", "cuda_runtime", "cudaStreamWaitEvent", "6.0", "0.5", args={"correlation": 11}),
        ev("X", "cuda_sync", "Stream Wait Event", "6.0", "0.1", pid=DEV, tid=STREAM, args=args),
    ]


def _stream_sync() -> list[str]:
    args = {"correlation": 13, "stream": STREAM, "device": DEV}
    return [
        ev("X", "cuda_runtime", "cudaStreamSynchronize", "40.0", "9.0", args={"correlation": 13}),
        ev("X", "cuda_sync", "Stream Sync", "41.0", "7.0", pid=DEV, tid=STREAM, args=args),
    ]


def _range_profiler() -> list[str]:
    """The range profiler's shape: a launch whose kernel is a cuda_profiler_range event
    (with its flow), waits and a synchronize."""
    kargs = {"device": DEV, "stream": STREAM, "correlation": 12}
    return [
        ev("X", "user_annotation", "ProfilerStep#1", "0.0", "100.0"),
        *_wait_event(),
        launch(12, "7.0"),
        ev("X", "cuda_profiler_range", "gemm", "10.0", "20.0", pid=DEV, tid=STREAM, args=kargs),
        ev("s", "ac2g", "ac2g", "7.0", id=12),
        ev("f", "ac2g", "ac2g", "10.0", pid=DEV, tid=STREAM, id=12, bp="e"),
        *_stream_sync(),
    ]


def _waits_only() -> list[str]:
    """Waits and a synchronize, no launch and no GPU event at all."""
    return [ev("X", "user_annotation", "step", "0.0", "100.0"), *_wait_event(), *_stream_sync()]


SHAPES = {"range_profiler": _range_profiler, "waits_no_gpu_op": _waits_only}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("by", [None, "*Step*"])
@pytest.mark.parametrize("output", ["json", "critical_path", "what_if", "html"])
def test_no_exception_escapes_analyze(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shape: str, by: str | None, output: str
) -> None:
    trace = write(tmp_path, doc(SHAPES[shape](), **TOP))
    out = tmp_path / "out"
    extra = {
        "json": ["--json", str(out)],
        "critical_path": ["--critical-path"],
        "what_if": ["--what-if", "*Step*=0"],
        "html": ["--html", str(out)],
    }[output]
    argv = ["analyze", str(trace), *(["--by", by] if by else []), *extra, "--quiet"]
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    if rc == 0:
        if output == "json":
            doc_ = json.loads(out.read_text())
            assert doc_["replay"]["windows"] == 0  # nothing the replay can hold
    else:
        assert rc == 2 and len(err.splitlines()) == 1 and "error:" in err, err
