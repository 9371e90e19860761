"""Hostile Kineto traces and inputs read once, made from the real H200 capture in the test
(issue 17, items 6, 8, 9, 11): escaped categories, a BOM, a gzip cut short, huge ids and
times, deep nesting, a FIFO and a pipe on stdin."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import threading
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pytimings as pt
from pytimings.errors import TraceFormatError
from pytimings.ingest import loader
from pytimings.model.trace import Trace

pytestmark = pytest.mark.shared
INT64 = (-(2**63), 2**63 - 1)


@pytest.fixture(scope="module")
def raw(shared_dir: Path) -> bytes:
    return gzip.decompress(
        (shared_dir / "data/h200/decode_16steps_h200.pt.trace.json.gz").read_bytes()
    )


def _first_kernel(raw: bytes) -> int:
    """Offset of the first kernel event's '"ph": "X", "cat": "kernel"'."""
    return raw.index(b'"ph": "X", "cat": "kernel"')


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _one_line_error(path: Path, match: str) -> str:
    with pytest.raises(TraceFormatError, match=match) as err:
        pt.load(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: ") and "\n" not in msg
    return msg


def test_escaped_category_bom_and_plain_give_the_same_trace(raw: bytes, tmp_path: Path) -> None:
    base = pt.load(_write(tmp_path, "plain.json", raw))
    assert len(base.gpu_ops) == 1075
    escaped = raw.replace(b'"cat": "kernel"', b'"cat": "k\\u0065rnel"')
    key = raw.replace(b'"cat": "cuda_runtime"', b'"c\\u0061t": "cuda_runtime"')
    for name, data in (
        ("esc.json", escaped),
        ("key.json", key),
        ("bom.json", b"\xef\xbb\xbf" + raw),
    ):
        tr = pt.load(_write(tmp_path, name, data))
        assert len(tr.gpu_ops) == len(base.gpu_ops) and len(tr.api_calls) == len(base.api_calls)
        assert (tr.gpu_ops["start"] == base.gpu_ops["start"]).all()
        assert tr.dropped == base.dropped


@pytest.mark.parametrize("cut", [1, 2, 5, 9, 12, 30])
def test_gzip_cut_in_its_first_bytes_is_truncated(raw: bytes, tmp_path: Path, cut: int) -> None:
    path = _write(tmp_path, "cut.json.gz", gzip.compress(raw)[:cut])
    _one_line_error(path, "truncated")


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        (b'"pid": 0', b'"pid": 99999999999999999999', r"traceEvents\[\d+\] .*pid 9+ does not fit"),
        (
            b'"correlation": ',
            b'"correlation": 1' + b"0" * 25 + b', "x": ',
            r"args.correlation 10+ does",
        ),
        (b'"ts": ', b'"ts": 1e999999999, "x": ', r"ts 1e999999999 us is outside ±2\^62 ns"),
        (b'"ts": ', b'"ts": -9.2e15, "x": ', r"ts -9.2e15 us is outside"),
        (b'"dur": ', b'"dur": 4.7e15, "x": ', r"dur 4.7e15 us is outside"),
        (
            b'"args": {',
            b'"args": {"deep": ' + b"[" * 1000 + b"]" * 1000 + b", ",
            "nested too deeply",
        ),
    ],
)
def test_bad_fields_name_the_field(
    raw: bytes, tmp_path: Path, old: bytes, new: bytes, match: str
) -> None:
    at = raw.index(old, _first_kernel(raw))
    path = _write(tmp_path, "bad.json", raw[:at] + new + raw[at + len(old) :])
    _one_line_error(path, match)


_EDGES = [INT64[0], INT64[1], 2**62 // 1000 + 1, -(2**62 // 1000) - 1, 4 * 10**15, -1, 0]
_FRACS = ["", ".5", ".999", "e3", "e-3"]
_FIELDS = [b'"ts": ', b'"dur": ']


@settings(max_examples=40, deadline=None)
@given(
    value=st.sampled_from(_EDGES) | st.integers(*INT64),
    frac=st.sampled_from(_FRACS),
    field=st.sampled_from(_FIELDS),
)
def test_int64_edge_times_are_refused_or_plausible(
    raw: bytes, tmp_path_factory: pytest.TempPathFactory, value: int, frac: str, field: bytes
) -> None:
    """Property: one ts or dur set to an int64 edge (in us) is refused with a line naming
    it, or the trace's times all lie within ±2^62 ns."""
    _check_time(raw, tmp_path_factory.mktemp("k") / "t.json", value, frac, field)


@pytest.mark.slow
def test_int64_edge_time_corpus(raw: bytes, tmp_path: Path) -> None:
    """The fuzzer's seed corpus: every edge value, spelling and field."""
    for i, (value, frac, field) in enumerate(
        (v, f, d) for v in _EDGES for f in _FRACS for d in _FIELDS
    ):
        _check_time(raw, tmp_path / f"{i}.json", value, frac, field)


def _check_time(raw: bytes, path: Path, value: int, frac: str, field: bytes) -> None:
    at = raw.index(field, _first_kernel(raw))
    text = f"{value}{frac}".encode()
    path.write_bytes(raw[:at] + field + text + b', "x": ' + raw[at + len(field) :])
    try:
        tr = pt.load(path)
    except TraceFormatError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(f"{path}: ")
        return
    for t in (tr.gpu_ops, tr.api_calls, tr.ranges):
        for times in (t["start"], t["end"]):
            assert (times > -(2**62)).all() and (times < 2**62).all()


def test_a_fifo_is_read_once(raw: bytes, tmp_path: Path) -> None:
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    data = gzip.compress(raw)

    def feed() -> None:
        with fifo.open("wb") as f:
            f.write(data)

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        tr = pt.load(fifo)
    finally:
        feeder.join(timeout=30)
    assert len(tr.gpu_ops) == 1075 and tr.meta["path"] == str(fifo)


def test_a_pipe_on_stdin_is_read_once(raw: bytes, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytimings.cli", "summary", "/dev/stdin"],
        input=raw[: len(raw) // 2],  # half a trace: the error names /dev/stdin
        capture_output=True,
        timeout=120,
    )
    err = done.stderr.decode().strip()
    assert done.returncode == 2 and err.count("\n") == 0 and "/dev/stdin" in err, err
    good = subprocess.run(
        [sys.executable, "-m", "pytimings.cli", "summary", "/dev/stdin"],
        input=raw,
        capture_output=True,
        timeout=120,
    )
    assert good.returncode == 0, good.stderr.decode()[-2000:]


def test_worker_process_errors_name_their_file(raw: bytes, tmp_path: Path) -> None:
    """Errors cross the process boundary whole (TraceFormatError once failed to unpickle,
    which broke the pool), and a worker that dies is an error naming its file."""
    good = _write(tmp_path, "rank0.json", raw)
    bad = _write(tmp_path, "rank1.json", raw[: len(raw) // 2])
    with pytest.raises(TraceFormatError, match=rf"^{bad}: ") as err:
        pt.load(good, bad, workers=2)  # Kineto files load in worker processes
    assert "\n" not in str(err.value)
    died: Future[Trace] = Future()
    died.set_exception(BrokenProcessPool("a child process terminated abruptly"))
    with pytest.raises(TraceFormatError, match=rf"^{bad}: a worker process died while it loaded"):
        loader._result(str(bad), died)
