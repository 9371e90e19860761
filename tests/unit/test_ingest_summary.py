"""trace_summary on small exports with hand-computed answers, and its statistics vs numpy."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from helpers import nsys_synth as syn
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimings.analysis.summary import _group_stats, api_display_name, trace_summary
from pytimings.ingest.kineto import load_kineto
from pytimings.ingest.nsys import load_nsys
from pytimings.report.summary_text import render_summary


def test_summary_of_a_small_export(tmp_path: Path) -> None:
    s = trace_summary(load_nsys(syn.basic(tmp_path / "t.sqlite")))
    k = s["kernels"]
    assert k["name"].tolist() == ["kernA", "kernB"]
    assert k["total_ns"].tolist() == [100, 50]
    assert np.allclose(k["share"], [100 / 150, 50 / 150])
    m = s["memory"]
    assert m["operation"].tolist() == ["[CUDA memcpy Host-to-Device]", "[CUDA memset]"]
    assert m["bytes"].tolist() == [1024, 64]
    assert np.allclose(m["gbps"], [1024 / 20, 64 / 10])
    r = s["ranges"]
    row = {n: i for i, n in enumerate(r["name"].tolist())}
    # outer [90, 180) holds all four launches: ops run 200..440, busy 100+50+20+10
    i = row["outer"]
    assert (r["gpu_ops"][i], r["proj_total_ns"][i], r["gpu_busy_ns"][i]) == (4, 240, 180)
    i = row["inner"]  # [115, 135): only the launch at 120 (kernB, 300..350)
    assert (r["gpu_ops"][i], r["proj_total_ns"][i], r["gpu_busy_ns"][i]) == (1, 50, 50)
    assert r["style"].tolist()[row["reg"]] == "StartEnd"
    a = s["api"]
    assert dict(zip(a["name"].tolist(), a["count"].tolist(), strict=True)) == {
        "cudaLaunchKernel": 2,
        "cudaMemcpyAsync": 1,
        "cudaMemsetAsync": 1,
    }
    text = render_summary(s)
    assert "Kernels (rank 0, device 0)" in text and "kernA" in text


def test_top_keeps_the_largest_per_scope(tmp_path: Path) -> None:
    s = trace_summary(load_nsys(syn.basic(tmp_path / "t.sqlite")), top=1)
    assert s["kernels"]["name"].tolist() == ["kernA"]


def test_api_display_names_follow_nsys_stats() -> None:
    assert api_display_name("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert api_display_name("cudaLaunchKernelExC_v11060") == "cudaLaunchKernelExC_v11060"
    assert api_display_name("cuLaunchKernel") == "cuLaunchKernel"


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10**12)), min_size=1, max_size=40))
def test_group_statistics_match_numpy(rows: list[tuple[int, int]]) -> None:
    gid_raw = np.array([r[0] for r in rows])
    _, gid = np.unique(gid_raw, return_inverse=True)
    values = np.array([r[1] for r in rows], dtype=np.int64)
    stats = _group_stats(gid.astype(np.int64), values)
    for g in range(int(gid.max()) + 1):
        v = values[gid == g]
        assert stats["count"][g] == len(v)
        assert stats["total_ns"][g] == int(v.sum())
        assert np.isclose(stats["p50_ns"][g], np.percentile(v, 50), rtol=1e-12)
        assert np.isclose(stats["p99_ns"][g], np.percentile(v, 99), rtol=1e-12)
        assert (stats["min_ns"][g], stats["max_ns"][g]) == (v.min(), v.max())


def test_launch_index_links_within_rank_and_process(tmp_path: Path) -> None:
    from pytimings.ingest import load
    from pytimings.ingest.links import launch_index

    a, b = syn.basic(tmp_path / "r_rank0.sqlite"), syn.basic(tmp_path / "r_rank1.sqlite")
    tr = load(a, b, workers=1)
    idx = launch_index(tr)
    assert np.all(idx >= 0)
    api = tr.api_calls
    for col in ("rank", "pid", "correlation"):
        assert np.array_equal(api[col][idx], tr.gpu_ops[col])
    assert not np.any(api["kind"][idx] == 2)  # never a sync row


def test_launch_index_has_no_key_collisions_for_large_ids(tmp_path: Path) -> None:
    from pytimings.ingest.links import launch_index

    c1, c2 = 5, 5 ^ (3 << 23)  # would alias under a (pid << 23) ^ corr key
    p1, p2 = 1 << 24, 2 << 24
    tr = load_nsys(
        syn.basic(
            tmp_path / "t.sqlite",
            CUPTI_ACTIVITY_KIND_KERNEL=[
                (200, 300, 0, 1, 7, c1, p1, 1),
                (210, 260, 0, 1, 7, c2, p2, 2),
            ],
            CUPTI_ACTIVITY_KIND_RUNTIME=[
                (100, 110, 0, p1 | 1, c2, 3),
                (105, 115, 0, p2 | 2, c1, 3),
            ],
            CUPTI_ACTIVITY_KIND_MEMCPY=[],
            CUPTI_ACTIVITY_KIND_MEMSET=[],
        )
    )
    assert launch_index(tr).tolist() == [-1, -1]


@pytest.mark.shared
def test_cpu_ops_table_matches_an_independent_reading(shared_dir: Path) -> None:
    """cpu_ops of the H200 Kineto capture: per operator name as written, count, total,
    mean and p50/p99 recomputed from the JSON with the standard library and numpy."""
    path = shared_dir / "data/h200/decode_16steps_h200.pt.trace.json.gz"
    with gzip.open(path, "rb") as f:
        events = json.loads(f.read(), parse_float=Decimal)["traceEvents"]
    by_name: dict[str, list[int]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op" and e.get("ph") == "X":
            end = round((e["ts"] + e["dur"]) * 1000)  # Decimal: exact, ties to even
            by_name[e["name"]].append(end - round(e["ts"] * 1000))
    tr = load_kineto(path)
    t = trace_summary(tr, top=10)["cpu_ops"]
    totals = sorted(((sum(v), n) for n, v in by_name.items()), reverse=True)
    assert len(t) == 10 and set(t["rank"].tolist()) == {0}
    assert t["total_ns"].tolist() == [s for s, _ in totals[:10]]
    for i, name in enumerate(t["name"].tolist()):
        v = np.array(by_name[name])
        assert t["count"][i] == len(v) and t["total_ns"][i] == v.sum()
        assert np.isclose(t["mean_ns"][i], v.mean())
        assert np.allclose([t["p50_ns"][i], t["p99_ns"][i]], np.quantile(v, [0.5, 0.99]))
    text = render_summary({"cpu_ops": t})
    assert text.startswith("CPU ops") and t["name"][0] in text
    full = trace_summary(tr)["cpu_ops"]
    assert int(full["count"].sum()) == sum(len(v) for v in by_name.values())


def test_cpu_ops_table_only_for_traces_with_cpu_ops(tmp_path: Path) -> None:
    assert "cpu_ops" not in trace_summary(load_nsys(syn.basic(tmp_path / "t.sqlite")))


@pytest.mark.shared
def test_os_calls_table_matches_the_export(shared_dir: Path) -> None:
    """os_calls of an Nsight export with OS runtime calls: per call name, count and total
    read from its OSRT_API table with sqlite3: the calls (eventClass 27), not the markers
    of profiling starting and finishing."""
    import sqlite3

    path = shared_dir / "data/external/nsys_extrap/ex-gpu.s10.sqlite"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        want = {
            n: (c, t)
            for n, c, t in db.execute(
                "SELECT s.value, COUNT(*), SUM(o.end - o.start) FROM OSRT_API o "
                "JOIN StringIds s ON s.id = o.nameId WHERE o.eventClass = 27 GROUP BY s.value"
            )
        }
    t = trace_summary(load_nsys(path))["os_calls"]
    got = {
        n: (int(c), int(s)) for n, c, s in zip(t["name"], t["count"], t["total_ns"], strict=True)
    }
    assert got == want and max(want.values())[0] > 0
    text = render_summary({"os_calls": t})
    assert text.startswith("OS runtime calls") and "ioctl" in text and "OS call" in text
    # a trace without OS calls has no such table
    assert "os_calls" not in trace_summary(
        load_kineto(shared_dir / "data/h200/decode_16steps_h200.pt.trace.json.gz")
    )


def test_ranges_keep_the_bytes_they_say_they_moved() -> None:
    """``summary`` of a recording dropped the bytes and GB/s its record-time summary showed
    (issue 46): per range, the bytes summed and over those ranges' time; none: no column."""
    from helpers.synth import make_trace

    from pytimings.analysis.summary import trace_summary
    from pytimings.report.summary_text import render_summary

    trace = make_trace([], ranges=[
        {"start": 0, "end": 1_000, "name": "kv_copy", "bytes": 1_000_000},
        {"start": 2_000, "end": 2_500, "name": "kv_copy", "bytes": 1_000_000},
        {"start": 3_000, "end": 4_000, "name": "step"},
    ])  # fmt: skip
    r = trace_summary(trace)["ranges"]
    by_name = {str(n).split(":")[-1]: i for i, n in enumerate(r["name"])}
    assert r["bytes"][by_name["kv_copy"]] == 2_000_000
    assert r["gbps"][by_name["kv_copy"]] == pytest.approx(2_000_000 / 1_500)  # bytes/ns = GB/s
    assert np.isnan(r["bytes"][by_name["step"]]) and np.isnan(r["gbps"][by_name["step"]])
    assert "GB/s" in render_summary({"ranges": r})
    bare = make_trace([], ranges=[{"start": 0, "end": 10, "name": "step"}])
    assert "GB/s" not in render_summary({"ranges": trace_summary(bare)["ranges"]})


def test_summary_of_host_only_rank_recordings_keeps_their_busbw(tmp_path: Path) -> None:
    """Issue 46: ``summary`` of the wrappers' host-only recordings shows the busbw the
    record-time summary showed, the same number (an independent computation over the same
    records), per rank; asynchronous calls and barriers get none."""
    from helpers.recording_factory import make_recording

    import pytimings as pt
    from pytimings.record import storage

    def comm(name: str, start: int, dur: int, nbytes: int, group: int) -> dict[str, int | str]:
        return {"name": name, "kind": "comm", "start": start, "end": start + dur,
                "nbytes": nbytes, "payload": group}  # fmt: skip

    paths = []
    for rank in (0, 1):
        rows = [
            comm("dist.all_reduce", 0, 4_000 + rank, 8_000_000, 2),
            comm("dist.all_reduce", 10_000, 6_000, 8_000_000, 2),
            comm("dist.all_gather_into_tensor", 20_000, 5_000, 4_000_000, 4),
            comm("dist.all_gather_into_tensor", 30_000, 3_000, 4_000_000, 2),
            comm("dist.all_reduce.async", 40_000, 100, 8_000_000, 2),
            comm("dist.isend", 50_000, 100, 1_000_000, 2),
            comm("dist.barrier", 60_000, 900, 0, 2),
        ]
        rec = make_recording(rows, meta={"pid": 100 + rank, "rank": rank, "world_size": 2})
        paths.append(storage.save(tmp_path / f"run.rank{rank}.pyt", rec))
    ranges = trace_summary(pt.load(*paths))["ranges"]
    for rank, path in enumerate(paths):
        recorded = pt.summary(path)
        for row in recorded:
            label = "pytimings:" + row["name"]
            i = int(np.flatnonzero((ranges["rank"] == rank) & (ranges["name"] == label))[0])
            busbw = float(ranges["busbw_gbps"][i])
            if row["busbw_gbps"] is None:
                assert np.isnan(busbw), row["name"]
            else:
                assert busbw == pytest.approx(row["busbw_gbps"], rel=1e-12), row["name"]
    i = int(np.flatnonzero(ranges["name"] == "pytimings:dist.all_gather_into_tensor")[0])
    # (4 MB * 3/4 + 4 MB * 1/2) / 8 µs, by hand
    assert float(ranges["busbw_gbps"][i]) == pytest.approx((3e6 + 2e6) / 8_000)
    text = render_summary(trace_summary(pt.load(*paths)))
    assert "busbw" in text and "Ranges (rank 1)" in text
