from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers.recording_factory import make_recording

from pytimings.errors import TraceFormatError, UsageError
from pytimings.ingest import recording_file
from pytimings.model.recording import RECORD_SCHEMA, RecordFlag, Recording
from pytimings.record import storage
from pytimings.record.summary import summary


def _recording() -> Recording:
    rows = [
        {"name": "step", "kind": "compute", "start": 10, "end": 90, "depth": 0, "thread": 0},
        {
            "name": "kv_copy",
            "kind": "memory",
            "start": 20,
            "end": 30,
            "gpu": (25, 40),
            "stream": 2**63 + 5,
            "nbytes": 4096,
            "depth": 1,
            "thread": 1,
        },
        {
            "name": "all_reduce",
            "kind": "comm",
            "start": 50,
            "end": 60,
            "payload": -7,
            "flags": RecordFlag.ERROR,
            "thread": 1,
        },
        {"name": "tick", "kind": "user kind é", "start": 70, "end": 70, "flags": RecordFlag.MARK},
    ]
    return make_recording(
        rows,
        threads=[{"tid": 11, "name": "MainThread"}, {"tid": 12, "name": "worker ✓"}],
        meta={
            "pid": 99,
            "clock": "CLOCK_MONOTONIC",
            "wall_offset_ns": 1_700_000_000,
            "nested": {"a": [1, 2]},
        },
        dropped={"step": 3, "gone": 1},
    )


@pytest.fixture(autouse=True)
def _not_in_a_torchrun_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


def test_round_trip_keeps_everything(tmp_path: Path) -> None:
    rec = _recording()
    path = storage.save(tmp_path / "run.pyt", rec)
    back = recording_file.load_recording(path)
    # the names and kinds the records use, and each record names the same strings
    used = sorted({int(i) for c in ("name", "kind") for i in rec.records[c]})
    assert back.strings == [rec.strings[i] for i in used]
    for c in ("name", "kind"):
        assert [back.strings[i] for i in back.records[c]] == [
            rec.strings[i] for i in rec.records[c]
        ]
    assert back.threads == rec.threads
    assert back.meta == rec.meta
    assert back.dropped == rec.dropped
    assert list(back.records) == list(RECORD_SCHEMA)
    for c, dt in RECORD_SCHEMA.items():
        assert back.records[c].dtype == np.dtype(dt)
        if c not in ("name", "kind"):  # those are renumbered (checked above)
            assert np.array_equal(back.records[c], rec.records[c]), c
    assert str(summary(path)) == str(summary(rec))  # summary() also takes a path
    assert not (tmp_path / "run.pyt.tmp").exists()


def test_saved_meta_gets_the_torchrun_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    back = recording_file.load_recording(storage.save(tmp_path / "r.pyt", _recording()))
    assert back.meta["rank"] == 3 and back.meta["world_size"] == 8
    rec = _recording()
    rec.meta["rank"] = 5  # what the recording says wins
    assert recording_file.load_recording(storage.save(tmp_path / "s.pyt", rec)).meta["rank"] == 5


def test_empty_recording_round_trips(tmp_path: Path) -> None:
    rec = make_recording([], threads=[], meta={})
    back = recording_file.load_recording(storage.save(tmp_path / "e.pyt", rec))
    assert all(len(v) == 0 for v in back.records.values())
    assert back.threads == [] and back.strings == []  # no record uses a string


def test_file_is_plain_arrow_with_a_versioned_schema(tmp_path: Path) -> None:
    path = storage.save(tmp_path / "run.pyt", _recording())
    reader = pa.ipc.open_file(path)
    assert reader.schema.metadata[b"pytimings.format"] == b"pytimings.recording/1"
    tables = recording_file.load_tables(path)
    assert set(tables) == {"records", "strings", "threads"}
    assert tables["records"].num_rows == 4
    assert tables["records"].schema.field("start_ns").type == pa.int64()


@pytest.fixture
def provider() -> Iterator[list[object]]:
    returned: list[object] = [pa.table({"request": [1, 2], "ttft_ns": [5, None]})]
    storage.register_table_provider("requests", lambda: returned[0])
    yield returned
    storage.unregister_table_provider("requests")


def test_provider_tables_are_saved_and_loaded(tmp_path: Path, provider: list[object]) -> None:
    path = storage.save(tmp_path / "run.pyt", _recording())
    tables = recording_file.load_tables(path)
    assert tables["requests"].to_pydict() == {"request": [1, 2], "ttft_ns": [5, None]}
    provider[0] = None  # a provider with nothing to add is skipped
    assert "requests" not in recording_file.load_tables(
        storage.save(tmp_path / "b.pyt", _recording())
    )
    provider[0] = "not a table"
    with pytest.raises(UsageError, match="requests"):
        storage.save(tmp_path / "c.pyt", _recording())


def test_provider_names_are_checked() -> None:
    with pytest.raises(UsageError):
        storage.register_table_provider("records", lambda: None)
    with pytest.raises(UsageError):
        storage.register_table_provider("x", 3)  # type: ignore[arg-type]


def _write(path: Path, table: pa.Table) -> Path:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return path


def _rewrite(src: Path, dst: Path, edit) -> Path:
    t = pa.ipc.open_file(src).read_all()
    return _write(dst, edit(t))


def _bad_files(tmp_path: Path) -> list[tuple[str, Path, str]]:
    good = storage.save(tmp_path / "good.pyt", _recording())
    data = good.read_bytes()
    cases = []
    text = tmp_path / "text.pyt"
    text.write_text("step,1,2\n")
    cases.append(("text", text, "not a readable Arrow IPC file"))
    cut = tmp_path / "cut.pyt"
    cut.write_bytes(data[: len(data) // 2])
    cases.append(("truncated", cut, "not a readable Arrow IPC file"))
    empty = tmp_path / "empty.pyt"
    empty.write_bytes(b"")
    cases.append(("empty", empty, "not a readable Arrow IPC file"))
    cases.append(
        (
            "other arrow",
            _write(tmp_path / "o.arrow", pa.table({"a": [1]})),
            "not a pytimings recording",
        )
    )

    def with_meta(key: bytes, value: bytes):
        def edit(t: pa.Table) -> pa.Table:
            return t.replace_schema_metadata({**t.schema.metadata, key: value})

        return edit

    cases.append(
        (
            "newer version",
            _rewrite(
                good, tmp_path / "v2.pyt", with_meta(b"pytimings.format", b"pytimings.recording/2")
            ),
            "version 2 is not supported",
        )
    )
    cases.append(
        (
            "other format",
            _rewrite(good, tmp_path / "f.pyt", with_meta(b"pytimings.format", b"something/1")),
            "unknown format",
        )
    )
    cases.append(
        (
            "bad meta",
            _rewrite(good, tmp_path / "m.pyt", with_meta(b"pytimings.meta", b"{oops")),
            "pytimings.meta is not valid JSON",
        )
    )
    cases.append(
        (
            "bad dropped",
            _rewrite(
                good,
                tmp_path / "d.pyt",
                with_meta(b"pytimings.dropped", json.dumps({"a": -1}).encode()),
            ),
            "non-negative",
        )
    )
    cases.append(
        (
            "no strings",
            _rewrite(good, tmp_path / "s.pyt", lambda t: t.drop_columns(["strings"])),
            "table 'strings' is missing",
        )
    )

    def records_edit(fn):
        def edit(t: pa.Table) -> pa.Table:
            rec = pa.Table.from_struct_array(t.column("records").chunk(0).values)
            rec = fn(rec)
            arr = storage._as_list_column(rec)
            i = t.schema.get_field_index("records")
            return t.set_column(i, pa.field("records", arr.type, nullable=False), [arr])

        return edit

    cases.append(
        (
            "missing column",
            _rewrite(good, tmp_path / "c.pyt", records_edit(lambda r: r.drop_columns(["payload"]))),
            "record column 'payload' is missing",
        )
    )
    cases.append(
        (
            "wrong dtype",
            _rewrite(
                good,
                tmp_path / "t.pyt",
                records_edit(
                    lambda r: r.set_column(
                        r.schema.get_field_index("start_ns"),
                        "start_ns",
                        r.column("start_ns").cast(pa.float64()),
                    )
                ),
            ),
            "record column 'start_ns' is float64, expected int64",
        )
    )
    cases.append(
        (
            "dangling id",
            _rewrite(
                good,
                tmp_path / "i.pyt",
                records_edit(
                    lambda r: r.set_column(
                        r.schema.get_field_index("name"),
                        "name",
                        pa.array([0, 1, 2, 99], pa.uint32()),
                    )
                ),
            ),
            "refers to entry 99 of strings",
        )
    )
    return cases


def test_bad_files_raise_one_clear_error_naming_the_file(tmp_path: Path) -> None:
    for label, path, problem in _bad_files(tmp_path):
        with pytest.raises(TraceFormatError) as info:
            recording_file.load_recording(path)
        assert info.value.path == str(path), label
        assert problem in str(info.value), (label, str(info.value))
        assert "\n" not in str(info.value)
    with pytest.raises(TraceFormatError, match="no such file"):
        recording_file.load_recording(tmp_path / "missing.pyt")


def test_save_load_a_real_recording(tmp_path: Path) -> None:
    from pytimings.record.recorder import Recorder

    rec = Recorder(max_records=5)
    for i in range(8):
        with rec.region("step", kind="compute", nbytes=i, payload=-i):
            rec.mark("tick")
    path = storage.save(tmp_path / "real.pyt", rec)
    want = rec.recording()
    back = recording_file.load_recording(path)
    for c in RECORD_SCHEMA:
        if c in ("name", "kind"):  # renumbered to the strings the file holds
            got = [back.strings[i] for i in back.records[c]]
            assert got == [want.strings[i] for i in want.records[c]], c
        else:
            assert np.array_equal(back.records[c], want.records[c]), c
    assert set(back.strings) == {"step", "compute", "tick", "host"}  # only what is used
    assert back.threads == want.threads
    assert back.dropped == want.dropped and sum(back.dropped.values()) == 11
    assert back.meta == json.loads(json.dumps(want.meta))


@pytest.fixture(scope="module")
def good_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = storage.save(tmp_path_factory.mktemp("fuzz") / "good.pyt", _recording())
    return path.read_bytes()


@pytest.mark.slow
def test_corrupt_files_load_or_fail_cleanly(
    good_bytes: bytes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Truncated or bit-flipped recordings: a Recording (and a Trace), or one
    TraceFormatError; never another exception."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from pytimings.ingest.recording import load_recording_trace

    tmp = tmp_path_factory.mktemp("fuzzed")

    @settings(
        max_examples=300,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(
        cut=st.integers(0, len(good_bytes)),
        flips=st.lists(
            st.tuples(st.integers(0, len(good_bytes) - 1), st.integers(1, 255)), max_size=4
        ),
    )
    def check(cut: int, flips: list[tuple[int, int]]) -> None:
        data = bytearray(good_bytes)
        for at, mask in flips:
            data[at] ^= mask
        path = tmp / "f.pyt"
        path.write_bytes(bytes(data[:cut]) if cut < len(data) else bytes(data))
        try:
            rec = recording_file.load_recording(path)
            recording_file.load_tables(path)
            trace = load_recording_trace(path)
        except TraceFormatError as exc:
            assert exc.path == str(path)
        else:
            assert set(rec.records) == set(RECORD_SCHEMA)
            assert len(trace.ranges) == len(rec.records["name"])

    check()


def test_save_writes_through_a_symlink_and_into_a_device(tmp_path: Path) -> None:
    """save() keeps what the path points at (it used to replace a link or /dev/null with a
    regular file) and names a full disk in one line."""
    import os
    import stat

    rec = _recording()
    target = tmp_path / "runs" / "rec.pytimings"
    target.parent.mkdir()
    link = tmp_path / "latest.pytimings"
    link.symlink_to(target)
    storage.save(link, rec)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert recording_file.load_recording(target).records["start_ns"].tolist() == [10, 20, 50, 70]
    storage.save("/dev/null", rec)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    if os.path.exists("/dev/full"):
        with pytest.raises(UsageError, match=r"^/dev/full: cannot write \(No space left"):
            storage.save("/dev/full", rec)


def test_concurrent_saves_to_one_path_all_succeed(tmp_path: Path) -> None:
    """120 threads saving to one path (54 of them used to collide on one temporary name):
    none fails and the file is one complete recording."""
    import threading

    rec = _recording()
    out = tmp_path / "rec.pytimings"
    errors: list[BaseException] = []
    barrier = threading.Barrier(120)

    def one() -> None:
        barrier.wait()
        try:
            storage.save(out, rec)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(120)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    back = recording_file.load_recording(out)
    assert back.records["start_ns"].tolist() == [10, 20, 50, 70]
    assert [p.name for p in tmp_path.iterdir()] == ["rec.pytimings"]
