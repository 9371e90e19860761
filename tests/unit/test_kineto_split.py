"""traceEvents scanned in pieces on several scanners at once (``kineto._read_split``) gives
exactly the sequential scan's results and errors, whatever the input: the split is forced
on small inputs by shrinking the piece size and the inline threshold."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytimings._native import _jsonscan
from pytimings.errors import TraceFormatError
from pytimings.ingest import kineto
from pytimings.model.trace import TABLES, Trace


def _fingerprint(tr: Trace) -> str:
    """Every table's columns as bytes (string ids as ids), the strings in order, meta,
    dropped: equal exactly when the two loads are identical."""
    h = hashlib.sha256()
    for name in TABLES:
        table = getattr(tr, name)
        for col in table.columns:
            a = np.ascontiguousarray(table[col])
            h.update(f"{name}.{col}:{a.dtype.str}:".encode())
            h.update(a.tobytes())
    h.update(repr(tr.strings).encode())
    h.update(repr(sorted(tr.meta.items(), key=str)).encode())
    h.update(repr(sorted(tr.dropped.items())).encode())
    return h.hexdigest()


def _load(
    path: Path, monkeypatch: pytest.MonkeyPatch, scanners: int, chunk: int
) -> tuple[str, list[int]]:
    """(fingerprint or "error: message", the loader's piece counts)."""
    with monkeypatch.context() as m:
        m.setattr(kineto, "SPLIT_SCANNERS", scanners)
        m.setattr(kineto, "CHUNK_BYTES", chunk)
        m.setattr(kineto, "INLINE_BYTES", 0 if scanners else 1 << 40)
        loader = kineto._Loader(str(path))
        try:
            loader.read()
            out = _fingerprint(loader.finish())
        except TraceFormatError as e:
            out = f"error: {e}"
    return out, loader.split


def _same(path: Path, monkeypatch: pytest.MonkeyPatch, chunks: tuple[int, ...]) -> list[int]:
    """Split loads (2 and 3 scanners, several piece sizes) equal the sequential one; the
    piece counts summed over them."""
    want, _ = _load(path, monkeypatch, 0, 1 << 20)
    total = [0, 0, 0]
    for chunk in chunks:
        for n in (2, 3):
            got, split = _load(path, monkeypatch, n, chunk)
            assert got == want, (chunk, n)
            total = [a + b for a, b in zip(total, split, strict=True)]
    return total


def _event(k: int, rng: random.Random) -> dict[str, Any]:
    ts = 1000 + 7 * k + rng.random()
    kind = k % 9
    pid: Any = 7 if rng.random() < 0.9 else "7"
    if kind == 0:
        return {
            "ph": "X",
            "cat": "kernel",
            "name": f"k{k % 13}",
            "pid": 0,
            "tid": 7,
            "ts": round(ts, 3),
            "dur": 2.5,
            "args": {"correlation": k, "device": 0, "stream": 7, "graph node id": 0},
        }
    if kind == 1:
        return {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": pid,
            "tid": 11,
            "ts": round(ts - 3, 3),
            "dur": 1,
            "args": {"correlation": k - 1},
        }
    if kind == 2:
        # nested arrays of objects, written as Kineto writes elements: "},\n  {" inside args
        return {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"aten::op{k % 5}\nx",
            "pid": pid,
            "tid": 11,
            "ts": round(ts, 3),
            "dur": 3,
            "args": {
                "Input Dims": [[1, k % 4], []],
                "Input type": ["float", ""],
                "Concrete Inputs": [{"a": [1, {"b": 2}]}, {"c": "},\n  {"}],
            },
        }
    if kind == 3:
        return {
            "ph": "X",
            "cat": "python_function",
            "name": f"f.py({k % 3}): g",
            "pid": 7,
            "tid": 11,
            "ts": round(ts, 3),
            "dur": 4,
            "args": {"Python id": k},
        }
    if kind == 4:
        return {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"step {k % 4}",
            "pid": 7,
            "tid": 11,
            "ts": round(ts, 3),
            "dur": 50,
        }
    if kind == 5:
        return {
            "ph": "s" if k % 2 else "f",
            "id": k,
            "pid": 7,
            "tid": 11,
            "ts": ts,
            "cat": "ac2g",
            "name": "ac2g",
        }
    if kind == 6:
        return {
            "ph": "i",
            "cat": "cpu_instant_event",
            "name": "x",
            "pid": 7,
            "tid": 11,
            "ts": ts,
            "s": "t",
        }
    if kind == 7:
        return {
            "ph": "i",
            "name": "[memory]",
            "pid": 7,
            "tid": 11,
            "ts": ts,
            "args": {
                "Device Type": 1,
                "Device Id": 0,
                "Addr": 100 + k,
                "Bytes": 512,
                "Total Allocated": 4096,
                "Total Reserved": 8192,
            },
        }
    return {
        "ph": "M",
        "name": "thread_name",
        "pid": 7,
        "tid": 11 + k % 3,
        "args": {"name": f"thread {k % 3}"},
    }


def _trace(n: int, seed: int = 0, minified: bool = False, events_last: bool = True) -> bytes:
    rng = random.Random(seed)
    events = [_event(k, rng) for k in range(n)]
    doc: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "G"}]}
    if not events_last:
        doc = {"traceEvents": events, **doc, "traceName": "x\n]}"}
    else:
        doc["traceEvents"] = events
    if minified:
        return json.dumps(doc, separators=(",", ":")).encode()
    # Kineto's layout: one element per few lines, "  },\n  {" between elements
    head = json.dumps({k: v for k, v in doc.items() if k != "traceEvents"}, indent=2)[:-2]
    body = ",\n".join("  " + json.dumps(e, indent=4).replace("\n}", "\n  }") for e in events)
    if events_last:
        return f'{head},\n  "traceEvents": [\n{body}\n]\n}}\n'.encode()
    return f'{{\n  "traceEvents": [\n{body}\n  ],{head[1:]}\n}}\n'.encode()


def _write(tmp_path: Path, data: bytes, name: str = "t.json") -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_split_point_finds_the_last_boundary() -> None:
    assert _jsonscan.split_point(b'[{"a": 1},\n  {"b": 2},\n {}]') == 23
    assert _jsonscan.split_point(b'[{"a": 1},{"b": 2}]') == -1  # minified: no guess
    assert _jsonscan.split_point(b'{"a": [1,\n 2]}') == -1  # not before a '{'
    assert _jsonscan.split_point(b"[\n{}]") == -1  # not after a ','
    assert _jsonscan.split_point(b"[{},\n\n \n\t{}]") == 8
    assert _jsonscan.split_point(b"\n{", 1) == -1
    # a reused buffer: only data[lo:hi] is looked at, bytes or bytearray
    buf = bytearray(b'[{"a": 1},\n  {"b": 2},\n {}]')
    assert _jsonscan.split_point(buf) == 23
    assert _jsonscan.split_point(buf, 1, 22) == 11
    assert _jsonscan.split_point(buf, 12, 22) == -1
    with pytest.raises(TypeError, match="bytes or bytearray"):
        _jsonscan.split_point(memoryview(buf))  # type: ignore[arg-type]


def test_feed_scans_only_up_to_hi() -> None:
    doc = b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}'
    sc = _jsonscan.Scanner()
    buf = bytearray(doc + b"garbage that is not JSON")
    assert sc.feed(buf, True, len(doc)) == len(doc)
    with pytest.raises(ValueError, match="bad end"):
        _jsonscan.Scanner().feed(buf, True, len(buf) + 1)


@pytest.mark.parametrize("scanners", [0, 1, 3])
def test_a_load_reuses_a_few_buffers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scanners: int
) -> None:
    """Pieces are read into pooled bytearrays (a fresh MiB per piece re-faults the heap's
    pages): however many pieces, a load makes only the few buffers in flight at once."""
    path = _write(tmp_path, _trace(600))
    taken: list[bytearray] = []  # every buffer handed out (kept alive: ids stay unique)
    buffer = kineto._Blocks._buffer

    def counted(self: kineto._Blocks, need: int) -> bytearray:
        taken.append(buffer(self, need))
        return taken[-1]

    monkeypatch.setattr(kineto._Blocks, "_buffer", counted)
    want, _ = _load(path, monkeypatch, 0, 1 << 20)
    taken.clear()
    got, _ = _load(path, monkeypatch, scanners, 2048)
    assert got == want
    assert len(taken) > 40  # many pieces...
    assert len({id(b) for b in taken}) <= max(scanners, 1) + 3  # ...in a few buffers


def test_a_valid_trace_splits_and_loads_identically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, _trace(600))
    absorbed, _, sequential = _same(path, monkeypatch, (512, 4096, 1 << 16))
    assert absorbed > 50  # the split happened
    assert sequential >= 6  # the first and last pieces of each load


def test_gzip_and_guesses_inside_args_are_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gzip

    path = _write(tmp_path, gzip.compress(_trace(400, seed=3)), "t.json.gz")
    absorbed, rescanned, _ = _same(path, monkeypatch, (97, 300, 2048))
    # small pieces cut inside the nested arrays of objects in args: wrong guesses
    assert absorbed > 0 and rescanned > 0


def test_minified_json_is_scanned_sequentially(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, _trace(300, minified=True))
    absorbed, rescanned, sequential = _same(path, monkeypatch, (1000,))
    assert absorbed == rescanned == 0 and sequential > 10


def test_trace_events_before_other_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, _trace(300, events_last=False))
    absorbed, _, _ = _same(path, monkeypatch, (700, 5000))
    assert absorbed > 0


def _errors(data: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, data)
    want, _ = _load(path, monkeypatch, 0, 1 << 20)
    assert want.startswith("error: ")
    for chunk in (300, 4096):
        assert _load(path, monkeypatch, 2, chunk)[0] == want
        assert _load(path, monkeypatch, 3, chunk)[0] == want


@pytest.mark.parametrize(
    "old,new",
    [
        (b'"dur": 4', b'"dur": -4'),  # negative duration
        (b'"dur": 2.5', b'"dur": "2.5"'),  # dur not a number
        (b'"tid": 7', b'"tid": [7]'),  # bad type (a kernel's)
        (b"},\n  {", b"}\n  {"),  # missing comma
        (b"},\n  {", b"},\n  ,{"),  # stray comma
        (b'"name"', b'"na\x01me"'),  # control character in a string
        (b'"name": "k', b'"name": "\xff'),  # bad UTF-8
        (b"2.5", b"2.5.5"),  # bad number
        (b'"ac2g",', b'"ac2g", "tid": {},'),  # a flow's problem (raised: flows needed)
        (b"[]", b"[tru]"),  # bad literal in nested args
    ],
)
def test_errors_in_the_second_half_are_the_sequential_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old: bytes, new: bytes
) -> None:
    data = _trace(400, seed=1)
    at = data.index(old, len(data) * 2 // 3)
    bad = data[:at] + new + data[at + len(old) :]
    if old == b'"ac2g",':  # flows are read only when a correlation is missing
        bad = bad.replace(b'"correlation": 9,', b'"correlation": null,', 1)
    _errors(bad, tmp_path, monkeypatch)


def test_truncated_inside_trace_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _trace(300)
    cut = data.index(b"},\n  {", len(data) // 2) + 4  # right after a boundary
    _errors(data[:cut], tmp_path, monkeypatch)
    _errors(data[: cut + 30], tmp_path, monkeypatch)


def test_escaped_newlines_in_strings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # names whose JSON text holds "\n" escapes that spell the boundary "},\n  {"
    data = _trace(300).replace(b'"name": "k', b'"name": "},\\n  {\\"k')
    path = _write(tmp_path, data)
    absorbed, _, _ = _same(path, monkeypatch, (256, 4096))
    assert absorbed > 0


def test_differential_fuzz(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutated documents: the split and the sequential scan agree on results or errors."""
    rng = random.Random(27)
    base = _trace(120, seed=5)
    tokens = [b"\n", b",", b"{", b"}", b"[", b"]", b'"', b"\\", b",\n  {", b"},\n  {", b"\n]"]
    path = tmp_path / "f.json"
    for case in range(150):
        data = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            op = rng.random()
            if op < 0.4:
                data[at:at] = rng.choice(tokens)
            elif op < 0.7:
                del data[at : at + rng.randint(1, 6)]
            else:
                data[at] = rng.randrange(256)
        path.write_bytes(bytes(data))
        want, _ = _load(path, monkeypatch, 0, 1 << 20)
        chunk = rng.choice((64, 200, 1000, 5000))
        got, _ = _load(path, monkeypatch, rng.choice((2, 3)), chunk)
        assert got == want, (case, chunk)
