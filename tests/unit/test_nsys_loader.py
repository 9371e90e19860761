"""The nsys SQLite loader on small exports written here: mapping, links, bad input, fuzz."""

from __future__ import annotations

import math
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import nsys_synth as syn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytimings.analysis.summary import trace_summary
from pytimings.errors import TraceFormatError
from pytimings.ingest.nsys import load_nsys
from pytimings.model.trace import (
    ActivityKind,
    ApiKind,
    CopyKind,
    MemKind,
    OpKind,
    RangeKind,
    SyncKind,
    Trace,
)
from pytimings.report.summary_text import render_summary


def names(tr: Trace, col: Any) -> list[str]:
    return [tr.strings[i] for i in col]


def test_basic_export_maps_every_table(tmp_path: Path) -> None:
    tr = load_nsys(syn.basic(tmp_path / "t.sqlite"))
    ops = tr.gpu_ops
    assert names(tr, ops["name"]) == [
        "kernA",
        "kernB",
        "[CUDA memcpy Host-to-Device]",
        "[CUDA memset]",
    ]
    assert ops["kind"].tolist() == [OpKind.KERNEL, OpKind.KERNEL, OpKind.MEMCPY, OpKind.MEMSET]
    assert ops["copy_kind"].tolist() == [CopyKind.NONE, CopyKind.NONE, CopyKind.HTOD, CopyKind.NONE]
    # nsys numbers memory kinds 0 pageable, 1 pinned, 2 device; the model uses CUPTI's
    assert ops["src_mem"].tolist() == [MemKind.NONE, MemKind.NONE, MemKind.PINNED, MemKind.NONE]
    assert ops["dst_mem"].tolist() == [MemKind.NONE, MemKind.NONE, MemKind.DEVICE, MemKind.DEVICE]
    assert ops["bytes"].tolist() == [0, 0, 1024, 64]
    assert ops["pid"].tolist() == [syn.PID] * 4
    assert ops["graph"].tolist() == [-1] * 4
    api = tr.api_calls
    assert api["correlation"].tolist() == [1, 2, 3, 4]
    assert set(api["kind"].tolist()) == {ApiKind.RUNTIME}
    assert tr.threads["pid"].tolist() == [syn.PID] and tr.threads["tid"].tolist() == [syn.PID]
    assert names(tr, tr.threads["name"]) == ["main"]
    rg = tr.ranges
    assert names(tr, rg["name"]) == ["outer", "reg", "inner"]  # sorted by start
    assert rg["kind"].tolist() == [
        RangeKind.NVTX_PUSHPOP,
        RangeKind.NVTX_STARTEND,
        RangeKind.NVTX_PUSHPOP,
    ]
    assert rg["depth"].tolist() == [0, 0, 1]  # start/end ranges nest among themselves only
    assert tr.meta["schema_version"] == "3.20.3" and tr.dropped == {}


def test_ops_link_to_launch_calls_within_their_process(tmp_path: Path) -> None:
    other = 999 << 24
    tr = load_nsys(
        syn.basic(
            tmp_path / "t.sqlite",
            CUPTI_ACTIVITY_KIND_KERNEL=[
                (200, 300, 0, 1, 7, 1, syn.GPID, 1),
                (210, 260, 1, 1, 7, 1, other, 2),
            ],
            CUPTI_ACTIVITY_KIND_RUNTIME=[
                (100, 110, 0, syn.GTID, 1, 3),
                (105, 115, 1, other | 5, 1, 3),
            ],
        )
    )
    ops, api = tr.gpu_ops.take(tr.gpu_ops["kind"] == OpKind.KERNEL), tr.api_calls
    assert sorted(ops["pid"].tolist()) == [syn.PID, 999]
    assert ops["correlation"].tolist() == [1, 1]  # the same id in two processes is fine
    for i in range(len(ops)):
        j = np.flatnonzero(
            (api["pid"] == ops["pid"][i]) & (api["correlation"] == ops["correlation"][i])
        )
        assert len(j) == 1
    assert sorted(api["kind"].tolist()) == [ApiKind.RUNTIME, ApiKind.DRIVER]
    assert sorted(tr.threads["pid"].tolist()) == [syn.PID, 999]


def test_nvtx_domains_categories_payloads_registered_strings(tmp_path: Path) -> None:
    g = syn.GTID
    nvtx = [
        # start, end, eventType, rangeId, category, color, text, gtid, endGtid, textId, domainId,
        # uint64, int64, double, uint32, int32, float
        (1, None, 75, None, None, None, "probe", g, None, None, 1),
        (1, None, 33, None, 2, None, "host", g, None, None, 1),
        (10, 20, 59, None, 2, None, "step", g, None, None, 1, None, 7),
        (11, 12, 59, None, None, None, None, g, None, 7, 1, None, None, 2.5),
        (13, 14, 59, None, None, None, "u", g, None, None, 0, 42),
        (15, 15, 34, None, None, None, "mark", g),
        (16, None, 59, None, None, None, "open", g),
    ]
    tr = load_nsys(syn.basic(tmp_path / "t.sqlite", NVTX_EVENTS=nvtx))
    rg = tr.ranges
    assert names(tr, rg["name"]) == ["step", "reg", "u"]
    assert names(tr, rg["domain"]) == ["probe", "probe", ""]
    assert names(tr, rg["category"]) == ["host", "", ""]
    assert rg["payload"].tolist() == [7.0, 2.5, 42.0]
    assert rg["depth"].tolist() == [0, 1, 1]
    assert tr.dropped == {"nvtx_marks": 1, "nvtx_ranges_open_at_capture_end": 1}


def test_nvtx_rows_of_other_types_are_counted_and_ranges_come_in_start_order(
    tmp_path: Path,
) -> None:
    g = syn.GTID
    nvtx = [  # start, end, eventType, rangeId, category, color, text, gtid
        (30, 40, 59, None, None, None, "late", g),
        (10, 20, 59, None, None, None, "early", g),
        (12, None, 44, None, None, None, None, g),
        (13, None, 99, None, None, None, None, g),
        (14, None, 44, None, None, None, None, g),
    ]
    tr = load_nsys(syn.basic(tmp_path / "t.sqlite", NVTX_EVENTS=nvtx))
    assert names(tr, tr.ranges["name"]) == ["early", "late"]
    assert tr.dropped == {"nvtx_event_type_44_rows": 2, "nvtx_event_type_99_rows": 1}


def test_sync_records_are_their_own_table_on_the_thread_of_their_call(tmp_path: Path) -> None:
    none = 0xFFFFFFFF  # CUPTI's "no stream" / "no event"
    tr = load_nsys(
        syn.basic(
            tmp_path / "t.sqlite",
            CUPTI_ACTIVITY_KIND_SYNCHRONIZATION=[
                (111, 119, 0, 1, 7, 2, syn.GPID, 3, none),
                (121, 129, 0, 1, 9, 3, syn.GPID, 2, 42),
                (500, 510, 0, 1, none, 77, syn.GPID, 4, none),
                (600, 610, 0, 1, none, 1, syn.GPID, 9, 5),
            ],
            CUPTI_ACTIVITY_KIND_CUDA_EVENT=[(0, 1, 7, 4, syn.GPID, 42)],
        )
    )
    assert len(tr.api_calls) == 4  # the records are not API calls (nor host activities)
    s = tr.syncs
    assert s["kind"].tolist() == [
        SyncKind.STREAM_SYNC,
        SyncKind.STREAM_WAIT_EVENT,
        SyncKind.CONTEXT_SYNC,
        SyncKind.UNKNOWN,
    ]
    assert s["stream"].tolist() == [7, 9, -1, -1]
    assert s["event"].tolist() == [-1, 42, -1, 5]
    assert s["correlation"].tolist() == [2, 3, 77, 1]
    assert s["thread"].tolist() == [0, 0, -1, 0]  # the third has no API call with its id
    assert tr.meta["sync_rows_without_api_call"] == 1
    assert tr.meta["sync_rows_of_unknown_type"] == 1  # type 9, kept as unknown
    e = tr.events
    assert [e[c].tolist() for c in ("stream", "event", "correlation")] == [[7], [42], [4]]


def test_cuda_backtrace_duplicates_are_counted_not_loaded(tmp_path: Path) -> None:
    runtime = [
        (100, 110, 0, syn.GTID, 1, 3),
        (99, 111, 67, syn.GTID, 1, 3),
        (120, 130, 0, syn.GTID, 2, 3),
        (140, 150, 0, syn.GTID, 3, 4),
        (160, 170, 0, syn.GTID, 4, 5),
    ]
    tr = load_nsys(syn.basic(tmp_path / "t.sqlite", CUPTI_ACTIVITY_KIND_RUNTIME=runtime))
    assert len(tr.api_calls) == 4
    assert tr.dropped == {"cuda_backtrace_duplicate_rows": 1}


def test_graph_kernels_may_share_a_correlation_id(tmp_path: Path) -> None:
    kernels = [
        (200, 300, 0, 1, 7, 1, syn.GPID, 1, 1, 11, 5),
        (300, 350, 0, 1, 7, 1, syn.GPID, 2, 2, 12, 5),
    ]
    tr = load_nsys(syn.basic(tmp_path / "t.sqlite", CUPTI_ACTIVITY_KIND_KERNEL=kernels))
    assert tr.gpu_ops["graph"][:2].tolist() == [5, 5]
    assert tr.meta["graph_ops_sharing_correlation"] == 2


def test_duplicate_correlation_ids_are_an_error(tmp_path: Path) -> None:
    kernels = [(200, 300, 0, 1, 7, 1, syn.GPID, 1), (300, 350, 0, 1, 7, 1, syn.GPID, 2)]
    p = syn.basic(tmp_path / "dup.sqlite", CUPTI_ACTIVITY_KIND_KERNEL=kernels)
    with pytest.raises(
        TraceFormatError, match=r"dup\.sqlite: 2 GPU ops share a correlation id"
    ) as e:
        load_nsys(p)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("table", "row"),
    [
        ("CUPTI_ACTIVITY_KIND_KERNEL", [(300, 200, 0, 1, 7, 1, syn.GPID, 1)]),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", [(110, 100, 0, syn.GTID, 1, 3)]),
        ("NVTX_EVENTS", [(50, 40, 59, None, None, None, "x", syn.GTID)]),
    ],
)
def test_negative_durations_are_an_error(tmp_path: Path, table: str, row: list[Any]) -> None:
    p = syn.basic(tmp_path / "neg.sqlite", **{table: row})
    with pytest.raises(TraceFormatError, match=r"neg\.sqlite: 1 .* end before they start"):
        load_nsys(p)


@pytest.mark.parametrize(
    ("name", "from_basic", "damage", "problem"),
    [
        ("other", False, "CREATE TABLE t (a)", "not an Nsight Systems export"),
        ("nostr", True, "DROP TABLE StringIds", "lacks its StringIds table"),
        (
            "cols",
            True,
            'ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN "correlationId" TO "corr"',
            r"CUPTI_ACTIVITY_KIND_KERNEL lacks column.*correlationId",
        ),
    ],
    ids=["not_an_nsys_export", "without_stringids", "table_lacking_needed_columns"],
)
def test_damaged_export_is_an_error(
    tmp_path: Path, name: str, from_basic: bool, damage: str, problem: str
) -> None:
    """An SQLite file that is not an export, or an export missing a table or column."""
    p = tmp_path / f"{name}.sqlite"
    if from_basic:
        syn.basic(p)
    syn.execute(p, damage)
    with pytest.raises(TraceFormatError, match=problem):
        load_nsys(p)


def test_os_runtime_calls_are_host_activities(tmp_path: Path) -> None:
    """OSRT_API calls load on their thread with their names; a thread seen only there (or
    first there) is appended without moving the rows of threads already given out."""
    early = (syn.PID << 24) | 5  # sorts before GTID: must not shift the API calls' thread
    p = syn.basic(
        tmp_path / "t.sqlite",
        StringIds=[
            (3, "cudaLaunchKernel_v7000"),
            (4, "cudaMemcpyAsync_v3020"),
            (5, "cudaMemsetAsync_v3020"),
            (1, "kernA"),
            (2, "kernB"),
            (6, "main"),
            (7, "reg"),
            (8, "ioctl"),
            (9, "pthread_cond_wait"),
            (10, "marker"),
        ],
        OSRT_API=[
            (150, 160, 27, syn.GTID, 9),
            (40, 90, 27, early, 8),
            (10, 10, 31, syn.GTID, 10),
            (999, 999, 32, syn.GTID, 10),
            (5, 6, 44, syn.GTID, 8),
        ],
    )
    tr = load_nsys(p)
    h = tr.host_ops
    assert names(tr, h["name"]) == ["ioctl", "pthread_cond_wait"]  # by start
    assert h["start"].tolist() == [40, 150] and h["end"].tolist() == [90, 160]
    assert set(h["kind"].tolist()) == {ActivityKind.OS}
    th = tr.threads
    assert th["tid"][h["thread"]].tolist() == [5, syn.PID]
    assert set(th["tid"][tr.api_calls["thread"]].tolist()) == {syn.PID}
    assert set(th["tid"][tr.ranges["thread"]].tolist()) == {syn.PID}
    assert tr.dropped == {
        "osrt_profiling_started_finished_markers": 2,
        "osrt_api_event_class_44_rows": 1,
    }


def test_export_without_events(tmp_path: Path) -> None:
    p = syn.write(
        tmp_path / "empty.sqlite", {"StringIds": [(1, "x")]}, create=["CUPTI_ACTIVITY_KIND_KERNEL"]
    )
    with pytest.raises(TraceFormatError, match="contains no events"):
        load_nsys(p)


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ("4.0.0", "schema version 4.0.0 is not supported"),
        ("x.y", "unrecognised export schema version"),
    ],
)
def test_unknown_schema_versions(tmp_path: Path, version: str, message: str) -> None:
    p = syn.write(tmp_path / "v.sqlite", {"StringIds": [(1, "k")]}, schema_version=version)
    with pytest.raises(TraceFormatError, match=message):
        load_nsys(p)


def test_newer_minor_schema_loads_and_says_so(tmp_path: Path) -> None:
    p = tmp_path / "v.sqlite"
    syn.write(
        p,
        {"StringIds": [(1, "k")], "CUPTI_ACTIVITY_KIND_KERNEL": [(1, 2, 0, 1, 7, 1, syn.GPID, 1)]},
        schema_version="3.99.0",
    )
    assert load_nsys(p).meta["schema_newer_than_tested"] is True


def test_legacy_export_without_meta_table(tmp_path: Path) -> None:
    p = syn.write(
        tmp_path / "old.sqlite",
        {"StringIds": [(1, "k")], "CUPTI_ACTIVITY_KIND_KERNEL": [(1, 2, 0, 1, 7, 1, syn.GPID, 1)]},
        schema_version=None,
    )
    tr = load_nsys(p)
    assert tr.meta["meta_table"] is None and tr.meta["schema_version"] is None
    assert len(tr.gpu_ops) == 1


def test_non_utf8_strings_are_replaced_and_counted(tmp_path: Path) -> None:
    p = syn.basic(tmp_path / "bytes.sqlite")
    syn.execute(
        p,
        "UPDATE StringIds SET value = CAST(X'6B65726EFF41' AS TEXT) WHERE id = 1",
        "UPDATE NVTX_EVENTS SET text = CAST(X'6F7574FE6572' AS TEXT) WHERE text = 'outer'",
    )
    tr = load_nsys(p)
    assert "kern\ufffdA" in tr.strings and "out\ufffder" in tr.strings
    assert tr.meta["non_utf8_strings"] == 2


def test_unknown_string_ids_are_named_and_counted(tmp_path: Path) -> None:
    p = syn.basic(
        tmp_path / "t.sqlite", CUPTI_ACTIVITY_KIND_KERNEL=[(200, 300, 0, 1, 7, 1, syn.GPID, 99)]
    )
    tr = load_nsys(p)
    assert tr.strings[tr.gpu_ops["name"][0]] == "[kernel: unknown string id]"
    assert tr.meta["unresolved_string_ids"] == 1


@pytest.mark.parametrize("content", [b"", b"SQLite format 3\x00" + b"\x00" * 84, b"hello"])
def test_empty_and_garbage_files(tmp_path: Path, content: bytes) -> None:
    p = tmp_path / "bad.sqlite"
    p.write_bytes(content)
    with pytest.raises(TraceFormatError, match=r"bad\.sqlite: "):
        load_nsys(p)


def test_truncated_file(tmp_path: Path) -> None:
    src = syn.basic(tmp_path / "ok.sqlite")
    data = src.read_bytes()
    p = tmp_path / "cut.sqlite"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match=r"cut\.sqlite: "):
        load_nsys(p)


def test_wrong_value_types_are_an_error_not_a_cast(tmp_path: Path) -> None:
    rows = {
        "StringIds": [(1, "k")],
        "CUPTI_ACTIVITY_KIND_KERNEL": [
            (1, 2, 0, 1, 7, 1, syn.GPID, 1),
            ("soon", 3, 0, 1, 7, 2, syn.GPID, 1),
        ],
    }
    p = syn.write(tmp_path / "types.sqlite", rows, strict=False)
    with pytest.raises(TraceFormatError, match=r"types\.sqlite: "):
        load_nsys(p)


def test_missing_file() -> None:
    with pytest.raises(TraceFormatError, match=r"nope\.sqlite: cannot read"):
        load_nsys("nope.sqlite")


# -- property tests -------------------------------------------------------------------------
_value = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=0, max_value=2000),
    st.floats(allow_nan=False),
    st.text(max_size=4),
    st.binary(max_size=4),
)
_FUZZ_TABLES = [
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
    "StringIds",
    "ThreadNames",
]


def _independent_counts(p: Path) -> dict[str, int]:
    db = sqlite3.connect(p)
    try:
        return {t: db.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in _FUZZ_TABLES}
    finally:
        db.close()


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_random_table_contents_load_whole_or_fail_cleanly(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    rows: dict[str, list[tuple[Any, ...]]] = {}
    for t in _FUZZ_TABLES:
        width = len(syn.TABLES[t])
        rows[t] = data.draw(st.lists(st.tuples(*[_value] * width), max_size=6), label=t)
    p = syn.write(tmp_path_factory.mktemp("fuzz") / "f.sqlite", rows, strict=False)
    try:
        tr = load_nsys(p)
    except TraceFormatError as exc:
        assert str(exc).startswith(str(p)) and "\n" not in str(exc)
        return
    counts = _independent_counts(p)
    gpu_rows = counts["CUPTI_ACTIVITY_KIND_KERNEL"] + counts["CUPTI_ACTIVITY_KIND_MEMCPY"]
    lost_ops = sum(v for k, v in tr.dropped.items() if k.startswith(("kernel", "memcpy")))
    assert len(tr.gpu_ops) + lost_ops == gpu_rows  # every row loaded or counted
    assert np.all(tr.gpu_ops["end"] >= tr.gpu_ops["start"])
    assert np.all(tr.api_calls["end"] >= tr.api_calls["start"])
    assert np.all(tr.ranges["end"] >= tr.ranges["start"])
    # whatever loads also summarises, every row counted once
    s = trace_summary(tr)
    assert int(s["kernels"]["count"].sum() + s["memory"]["count"].sum()) == len(tr.gpu_ops)
    assert int(s["api"]["count"].sum()) == len(tr.api_calls)
    assert render_summary(s)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_corrupted_bytes_never_crash(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    d = tmp_path_factory.mktemp("corrupt")
    raw = bytearray(syn.basic(d / "ok.sqlite").read_bytes())
    for _ in range(data.draw(st.integers(1, 12), label="flips")):
        i = data.draw(st.integers(0, len(raw) - 1), label="at")
        raw[i] = data.draw(st.integers(0, 255), label="byte")
    if data.draw(st.booleans(), label="truncate"):
        raw = raw[: data.draw(st.integers(0, len(raw)), label="length")]
    p = d / "bad.sqlite"
    p.write_bytes(bytes(raw))
    try:
        tr = load_nsys(p)
    except TraceFormatError as exc:
        assert str(exc).startswith(str(p))
        return
    # whatever loaded must be whole: GPU op rows equal what SQLite itself counts
    try:
        counts = _independent_counts(p)
    except sqlite3.Error:
        return
    dropped = sum(v for k, v in tr.dropped.items() if k.startswith(("kernel", "memcpy", "memset")))
    db = sqlite3.connect(p)
    memset = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET").fetchone()[0]
    db.close()
    total = counts["CUPTI_ACTIVITY_KIND_KERNEL"] + counts["CUPTI_ACTIVITY_KIND_MEMCPY"] + memset
    assert len(tr.gpu_ops) + dropped == total
    assert not any(math.isinf(x) for x in tr.ranges["payload"])


def test_loading_never_writes_to_the_file(tmp_path: Path) -> None:
    p = syn.basic(tmp_path / "ro.sqlite")
    before = p.read_bytes()
    copy = tmp_path / "copy.sqlite"
    shutil.copy(p, copy)
    load_nsys(p)
    assert p.read_bytes() == before


def test_values_too_wide_for_the_model_are_an_error(tmp_path: Path) -> None:
    kernels = [(200, 300, 70000, 1, 7, 1, syn.GPID, 1)]  # device ids are int16 in the model
    p = syn.basic(tmp_path / "wide.sqlite", CUPTI_ACTIVITY_KIND_KERNEL=kernels)
    with pytest.raises(TraceFormatError, match=r"wide\.sqlite: device values out of range"):
        load_nsys(p)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.integers(0, 30), max_size=12).map(sorted) | st.lists(st.integers(0, 30)),
        min_size=1,
        max_size=4,
    )
)
def test_merge_by_start_equals_a_stable_sort(starts: list[list[int]]) -> None:
    """Tables merged in start order, ties in part order (CUDA API calls, GPU ops): the
    interleaving path (every part sorted) and the sorting path agree with a stable argsort."""
    from pytimings.ingest.nsys import _merge_by_start

    parts = [
        {"start": np.array(s, dtype=np.int64), "tag": np.full(len(s), i, dtype=np.int8)}
        for i, s in enumerate(starts)
    ]
    for p in parts:
        p["row"] = np.arange(len(p["start"]), dtype=np.int32)
    got = _merge_by_start(parts, ("start", "tag", "row"))
    all_start = np.concatenate([p["start"] for p in parts])
    order = np.argsort(all_start, kind="stable")
    for name in ("start", "tag", "row"):
        want = np.concatenate([p[name] for p in parts])[order]
        assert got[name].tolist() == want.tolist()
        assert got[name].dtype == parts[0][name].dtype
