from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.recording_factory import make_recording

from pytimings._native import _stats
from pytimings.analysis.grouped import grouped_stats, grouped_stats_numpy
from pytimings.errors import UsageError
from pytimings.model.recording import RecordFlag
from pytimings.record.summary import Summary, summary

QS = (0.0, 0.25, 0.5, 0.9, 0.99, 1.0)


def _cases() -> list[tuple[str, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    big = rng.integers(0, 2**40, 5000)
    return [
        ("empty", np.empty(0, np.int64), np.empty(0, np.int64)),
        ("one", np.array([3]), np.array([42])),
        ("ties", np.array([1, 1, 1, 2, 2]), np.array([5, 5, 5, 7, 7])),
        ("random", rng.integers(0, 20, 2000), rng.integers(0, 10**6, 2000)),
        ("wide", rng.integers(-5, 5, 5000), big),
        ("negative", rng.integers(0, 3, 300), rng.integers(-(10**9), 10**9, 300)),
    ]


@pytest.mark.parametrize(("label", "keys", "values"), _cases(), ids=lambda c: str(c)[:12])
@pytest.mark.parametrize("impl", [grouped_stats, grouped_stats_numpy])
def test_grouped_stats_matches_numpy_quantile(label, keys, values, impl) -> None:
    g = impl(keys, values, QS)
    uniq = np.unique(keys)
    assert np.array_equal(g.keys, uniq)
    for i, k in enumerate(uniq):
        v = values[keys == k]
        assert g.counts[i] == len(v)
        assert g.sums[i] == int(v.sum())
        assert g.maxs[i] == v.max()
        # exact: the kernel uses numpy's interpolation formula
        assert np.array_equal(g.quantiles[i], np.quantile(v, QS)), label


@pytest.mark.parametrize(("label", "keys", "values"), _cases(), ids=lambda c: str(c)[:12])
def test_cython_kernel_and_python_twin_agree(label, keys, values) -> None:
    a = grouped_stats(keys, values, QS)
    b = grouped_stats_numpy(keys, values, QS)
    for f in ("keys", "counts", "sums", "maxs", "quantiles"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), (label, f)


def test_kernel_rejects_unsorted_input_and_bad_quantiles() -> None:
    q = np.array([0.5])
    with pytest.raises(ValueError, match="keys are not sorted"):
        _stats.grouped_stats_sorted(np.array([2, 1]), np.array([1, 1]), q)
    with pytest.raises(ValueError, match="values are not sorted"):
        _stats.grouped_stats_sorted(np.array([1, 1]), np.array([2, 1]), q)
    with pytest.raises(ValueError, match="quantiles"):
        grouped_stats([1], [1], [1.5])
    with pytest.raises(ValueError, match="quantiles"):
        grouped_stats_numpy([1], [1], [-0.1])


def _rows() -> list[dict]:
    rows = []
    # 100 host-only "step" instances of 1..100 µs
    for i in range(100):
        rows.append(
            {
                "name": "step",
                "kind": "compute",
                "start": 10_000 * i,
                "end": 10_000 * i + 1000 * (i + 1),
            }
        )
    # 10 GPU-timed copies, 1 MB each, GPU 2 µs (500 GB/s), queued 300 ns after host start
    for i in range(10):
        s = 2_000_000 + 10_000 * i
        rows.append(
            {
                "name": "kv_copy",
                "kind": "memory",
                "start": s,
                "end": s + 5000,
                "gpu": (s + 300 + i, s + 2300 + i),
                "stream": 7,
                "nbytes": 1_000_000,
            }
        )
    # all_reduce among 4 ranks: 8 MB in 4 µs (algbw 2000, busbw 2000 * 1.5)
    for i in range(4):
        s = 3_000_000 + 10_000 * i
        rows.append(
            {
                "name": "dist.all_reduce",
                "kind": "comm",
                "start": s,
                "end": s + 4000,
                "nbytes": 8_000_000,
                "payload": 4,
            }
        )
    # async all_gather: enqueue time only, no bandwidth
    rows.append(
        {
            "name": "dist.all_gather.async",
            "kind": "comm",
            "start": 4_000_000,
            "end": 4_000_100,
            "nbytes": 1000,
            "payload": 4,
        }
    )
    rows.append(
        {
            "name": "tick",
            "kind": "host",
            "start": 5_000_000,
            "end": 5_000_000,
            "flags": RecordFlag.MARK,
        }
    )
    rows.append(
        {
            "name": "step",
            "kind": "compute",
            "start": 6_000_000,
            "end": 6_000_050,
            "flags": RecordFlag.ERROR,
        }
    )
    rows.append(
        {
            "name": "late",
            "kind": "compute",
            "start": 7_000_000,
            "end": 7_000_010,
            "flags": RecordFlag.GPU_TIMED,
        }
    )
    return rows


@pytest.fixture
def summ() -> Summary:
    return summary(make_recording(_rows(), dropped={"step": 5, "never_kept": 2}))


def test_counts_and_host_statistics_follow_the_records(summ: Summary) -> None:
    step = summ["step"]
    host = np.array([1000 * (i + 1) for i in range(100)] + [50])
    assert step["count"] == 101
    assert step["kind"] == "compute"
    assert step["errors"] == 1
    assert step["host_total_ns"] == host.sum()
    assert step["host_mean_ns"] == pytest.approx(host.mean())
    for q in (50, 90, 99):
        assert step[f"host_p{q}_ns"] == np.percentile(host, q)
    assert step["host_max_ns"] == 100_000
    assert step["gpu_count"] == 0 and step["gpu_p50_ns"] is None
    assert summ["tick"]["count"] == 1 and summ["tick"]["host_mean_ns"] is None


def test_gpu_queue_and_bandwidth(summ: Summary) -> None:
    kv = summ["kv_copy"]
    assert kv["gpu_count"] == 10
    assert kv["gpu_p50_ns"] == 2000 and kv["gpu_max_ns"] == 2000
    queue = np.array([300 + i for i in range(10)])
    assert kv["queue_p50_ns"] == np.percentile(queue, 50)
    assert kv["queue_p99_ns"] == np.percentile(queue, 99)
    assert kv["nbytes"] == 10_000_000 and kv["nbytes_per_call"] == 1_000_000
    assert kv["bandwidth_gbps"] == pytest.approx(500.0)  # GPU time, not host time
    assert kv["algbw_gbps"] is None  # not a collective
    late = summ["late"]
    assert late["gpu_pending"] == 1 and late["gpu_count"] == 0


def test_gpu_timed_instances_without_gpu_time_are_left_out_of_bandwidth() -> None:
    # 2 copies with GPU time (1 MB in 2 µs: 500 GB/s) and 2 whose GPU timing failed or is
    # pending: their host time (100 ns enqueue) would claim 10000 GB/s, so they must not count
    rows = [
        {
            "name": "h2d",
            "kind": "memory",
            "start": 10_000 * i,
            "end": 10_000 * i + 5000,
            "gpu": (10_000 * i + 100, 10_000 * i + 2100),
            "stream": 7,
            "nbytes": 1_000_000,
        }
        for i in range(2)
    ]
    rows += [
        {
            "name": "h2d",
            "kind": "memory",
            "start": 50_000 + i,
            "end": 50_100 + i,
            "stream": 7,
            "nbytes": 1_000_000,
            "flags": f,
        }
        for i, f in enumerate((RecordFlag.GPU_TIMED | RecordFlag.GPU_FAILED, RecordFlag.GPU_TIMED))
    ]
    rows += [
        {
            "name": "dist.all_reduce",
            "kind": "comm",
            "start": 90_000,
            "end": 94_000,
            "nbytes": 8_000_000,
            "payload": 2,
        },
        {
            "name": "dist.all_reduce",
            "kind": "comm",
            "start": 95_000,
            "end": 95_100,
            "nbytes": 8_000_000,
            "payload": 2,
            "stream": 7,
            "flags": RecordFlag.GPU_TIMED,
        },
    ]
    s = summary(make_recording(rows))
    h2d = s["h2d"]
    assert h2d["gpu_failed"] == 1 and h2d["gpu_pending"] == 1
    assert h2d["nbytes"] == 4_000_000 and h2d["nbytes_count"] == 4  # every byte counted
    assert h2d["bandwidth_gbps"] == pytest.approx(500.0)
    assert h2d["nbytes_untimed"] == 2
    ar = s["dist.all_reduce"]
    assert ar["algbw_gbps"] == pytest.approx(2000.0) and ar["nbytes_untimed"] == 1
    assert ar["busbw_gbps"] == pytest.approx(2000.0)
    header = str(s).splitlines()[1].split()
    assert "untimed" in header
    assert s["dist.all_reduce"]["bandwidth_gbps"] == pytest.approx(2000.0)
    assert "untimed" not in str(summary(make_recording(rows[:2]))).splitlines()[1].split()


def test_collective_algbw_and_busbw(summ: Summary) -> None:
    ar = summ["dist.all_reduce"]
    assert ar["algbw_gbps"] == pytest.approx(2000.0)
    assert ar["busbw_gbps"] == pytest.approx(2000.0 * 2 * 3 / 4)
    ag = summ["dist.all_gather.async"]
    assert ag["nbytes"] == 1000
    assert ag["bandwidth_gbps"] is None and ag["algbw_gbps"] is None


def test_drops_are_counted_and_printed(summ: Summary) -> None:
    assert summ["step"]["dropped"] == 5
    assert summ["never_kept"]["count"] == 0 and summ["never_kept"]["dropped"] == 2
    assert summ.dropped_total == 7
    text = str(summ)
    assert "dropped" in text.splitlines()[1]
    assert text.splitlines()[-1] == (
        f"records: {summ.total_count} kept, 7 dropped (recorder memory cap: step 5, never_kept 2)"
    )


def test_table_is_aligned_with_readable_units(summ: Summary) -> None:
    lines = str(summ).splitlines()
    header = lines[1]
    body = lines[2:-1]
    assert len(body) == len(summ)
    assert {len(line) for line in body} | {len(header)} == {len(header)}  # every row aligned
    step_line = next(line for line in body if line.startswith("step "))
    assert "µs" in step_line
    assert body[0].startswith("step ")  # largest total host time first


def test_conversions(summ: Summary) -> None:
    d = summ.to_dict()
    assert d["schema"] == "pytimings.summary/1"
    json.dumps(d)  # NaN became None: valid JSON
    assert [r["name"] for r in d["regions"]] == list(summ.table["name"])
    df = summ.to_pandas()
    assert list(df["count"]) == [r["count"] for r in d["regions"]]
    at = summ.to_arrow()
    assert at.num_rows == len(summ) and "busbw_gbps" in at.column_names


def test_empty_recording_and_bad_source() -> None:
    s = summary(make_recording([]))
    assert len(s) == 0
    assert str(s).splitlines()[-1] == "records: 0 kept, 0 dropped"
    with pytest.raises(UsageError, match="expected a Recorder"):
        summary(42)


def test_mixed_kinds_are_joined() -> None:
    s = summary(
        make_recording(
            [
                {"name": "x", "kind": "compute", "start": 0, "end": 1},
                {"name": "x", "kind": "comm", "start": 0, "end": 1},
            ]
        )
    )
    assert s["x"]["kind"] == "comm|compute"


# -- with the real recorder ------------------------------------------------------------------


def test_instrumented_toy_loop_summary_counts_match_what_ran() -> None:
    import threading

    from pytimings.record.recorder import Recorder

    rec = Recorder()
    ran = {"decode_step": 0, "attn": 0, "kv_copy": 0, "bg": 0, "failing": 0}

    @rec.timed("decode_step", kind="compute")
    def step(i: int) -> None:
        ran["decode_step"] += 1
        with rec.region("attn", kind="compute", payload=i):
            ran["attn"] += 1
        if i % 3 == 0:
            with rec.region("kv_copy", kind="memory", nbytes=4096):
                ran["kv_copy"] += 1

    for i in range(50):
        step(i)
    lock = threading.Lock()

    def background() -> None:
        for _ in range(25):
            with rec.region("bg"):
                with lock:
                    ran["bg"] += 1

    threads = [threading.Thread(target=background) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for _ in range(2):
        with pytest.raises(KeyError), rec.region("failing"):
            ran["failing"] += 1
            raise KeyError("x")
    rec.mark("done")

    s = summary(rec)
    for name, n in ran.items():
        assert s[name]["count"] == n, name
    assert s["failing"]["errors"] == 2
    assert s["done"]["count"] == 1
    assert s["kv_copy"]["nbytes"] == 4096 * ran["kv_copy"]
    assert s.dropped_total == 0
    # host statistics agree with an independent computation over the raw records
    r = rec.recording()
    sel = np.array([r.strings[i] == "decode_step" for i in r.records["name"]])
    host = (r.records["end_ns"] - r.records["start_ns"])[sel]
    assert s["decode_step"]["host_total_ns"] == host.sum()
    assert s["decode_step"]["host_p99_ns"] == np.percentile(host, 99)
    # summary() keeps the records: a second summary sees the same counts
    assert summary(rec)["attn"]["count"] == 50


def test_records_over_the_cap_are_counted_and_printed() -> None:
    from pytimings.record.recorder import Recorder

    rec = Recorder(max_records=10)
    for _ in range(30):
        with rec.region("capped"):
            pass
    s = summary(rec)
    assert s["capped"]["count"] == 10 and s["capped"]["dropped"] == 20
    assert s.dropped_total == 20
    assert "20 dropped (recorder memory cap: capped 20)" in str(s)


def test_pt_summary_is_the_function_whatever_was_imported_first() -> None:
    import subprocess
    import sys

    code = (
        "import pytimings.record.summary, pytimings.record.storage, pytimings.record.distributed\n"
        "import pytimings as pt\n"
        "assert callable(pt.summary) and pt.Summary is pytimings.record.summary.Summary\n"
        "assert callable(pt.save) and callable(pt.instrument_torch_distributed)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_synchronization_records_are_their_own_table_not_api_rows() -> None:
    from helpers.synth import make_trace

    from pytimings.analysis.summary import trace_summary
    from pytimings.model.trace import SyncKind

    api = [
        {"start": 0, "end": 100, "name": "cudaStreamSynchronize", "correlation": 1},
        {"start": 200, "end": 260, "name": "cudaStreamSynchronize", "correlation": 2},
        {"start": 300, "end": 310, "name": "cudaStreamWaitEvent", "correlation": 3},
    ]
    syncs = [
        {"start": 2, "end": 98, "kind": SyncKind.STREAM_SYNC, "correlation": 1},
        {"start": 201, "end": 259, "kind": SyncKind.STREAM_SYNC, "correlation": 2},
        {"start": 301, "end": 309, "kind": SyncKind.STREAM_WAIT_EVENT, "correlation": 3},
    ]
    tables = trace_summary(make_trace([], api, syncs=syncs))

    def rows(t, *cols):
        return sorted(zip(*(t[c].tolist() for c in cols), strict=True))

    assert rows(tables["api"], "name", "count", "total_ns") == [
        ("cudaStreamSynchronize", 2, 160), ("cudaStreamWaitEvent", 1, 10),
    ]  # fmt: skip
    assert rows(tables["syncs"], "waited_for", "count", "total_ns") == [
        ("Stream sync", 2, 154), ("Stream wait sync", 1, 8),
    ]  # fmt: skip
    assert "syncs" not in trace_summary(make_trace([], api))
