"""attribute() against hand-computed partitions, the contract read literally
(intervals_twin.reference_partition) on random traces, and event-order independence."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import intervals_twin as twin
from helpers.synth import make_trace, shuffled
from hypothesis import given, settings
from hypothesis import strategies as st

import pytimings
from pytimings.analysis.attribution import attribute
from pytimings.analysis.classes import classify
from pytimings.analysis.partition import LABELS
from pytimings.errors import UsageError
from pytimings.model.trace import CopyKind, OpKind
from pytimings.session import Analysis

HTOD = {"kind": OpKind.MEMCPY, "copy_kind": CopyKind.HTOD, "name": "[CUDA memcpy HtoD]"}


def known_trace(extra_ranges=()):
    """Five ops with known gaps, overlap and launch delays (see test_known_partition)."""
    ops = [
        {"start": 10, "end": 30, "name": "gemm", "correlation": 1},
        {"start": 20, "end": 40, "name": "ncclDevKernel_AllReduce", "correlation": 2, "stream": 9},
        {"start": 50, "end": 60, "correlation": 3, **HTOD},
        {"start": 80, "end": 90, "name": "gemm", "correlation": 4},
        {"start": 100, "end": 110, "name": "softmax", "correlation": 5},
        {"start": 120, "end": 120, "kind": OpKind.MEMSET, "name": "memset", "correlation": 6},
    ]
    api = [
        {"start": 5, "end": 8, "correlation": 1},
        {"start": 6, "end": 9, "correlation": 2},
        {"start": 45, "end": 47, "correlation": 3, "name": "cudaMemcpyAsync"},
        {"start": 40, "end": 42, "correlation": 4},
        {"start": 95, "end": 97, "correlation": 5},
        {"start": 0, "end": 500, "name": "cudaEventQuery", "thread": 1},  # launches nothing
    ]
    ranges = [
        {"start": 0, "end": 50, "name": "step", "payload": 0.0},
        {"start": 50, "end": 100, "name": "step", "payload": 1.0},
        *extra_ranges,
    ]
    threads = [
        {"pid": 100, "tid": 100, "name": "python3"},
        {"pid": 100, "tid": 101, "name": "watchdog"},
    ]
    return make_trace(ops, api, ranges, threads)


def labels(row):
    return {x: int(row[f"{x}_ns"]) for x in LABELS}


def test_known_partition():
    a = attribute(known_trace())
    w = a.windows
    assert len(w) == 1 and w["name"][0] == "trace"
    # ranges start at 0; the zero-length memset at 120 ends the trace; the watchdog's
    # cudaEventQuery [0, 500) launches nothing and does not stretch it
    assert (int(w["start_ns"][0]), int(w["end_ns"][0])) == (0, 120)
    assert labels(a._row(0)) == {
        "compute": 30,
        "comm_overlapped": 10,
        "comm_exposed": 10,
        "memory": 10,
        # [0,10): L(5) > 0: 5 host_bound + 5 launch; [40,50): 5 + 5; [90,100): 5 + 5
        "host_bound": 15,
        "launch_overhead": 15,
        "device_wait": 20,  # [60,80): gemm@80 was launched at 40
        "idle_other": 10,  # [110,120): no more work
    }
    assert a.totals["window_ns"] == 120
    lat = a.launch_latency
    assert sorted(lat.latency_ns.tolist()) == [5, 5, 5, 14, 40]
    assert "in_host_bound_ns" not in lat.summary()  # dropped: see docs/attribution.md


def test_by_range_windows_extend_to_last_launched_op_and_tile():
    a = attribute(known_trace(), by="step")
    rows = [a._row(i) for i in range(len(a.windows))]
    # step 0 [0, 50) extends to its gemm's end at 90; step 1 [50, 100) starts where step 0's
    # window ends (contract v3: it was [50, 110), counting [50, 90) twice)
    assert [(r["start_ns"], r["end_ns"]) for r in rows] == [(0, 90), (90, 110)]
    assert labels(rows[0]) == {
        "compute": 20,
        "comm_overlapped": 10,
        "comm_exposed": 10,
        "memory": 10,
        "host_bound": 10,
        "launch_overhead": 10,
        "device_wait": 20,
        "idle_other": 0,
    }
    assert labels(rows[1]) == {  # [90, 100): softmax launched at 95; [100, 110) softmax
        "compute": 10,
        "comm_overlapped": 0,
        "comm_exposed": 0,
        "memory": 0,
        "host_bound": 5,
        "launch_overhead": 5,
        "device_wait": 0,
        "idle_other": 0,
    }
    assert a.window_range_rows.tolist() == [0, 1]  # rows of the 'step' ranges
    df = a.windows.to_pandas()
    assert list(df.columns[:7]) == [
        "index", "name", "start_ns", "end_ns", "device", "rank", "window_ns"
    ]  # fmt: skip
    assert a.windows.to_arrow().column("name").to_pylist() == ["step", "step"]
    stats = a.per_window_stats()
    assert stats["compute_ns"]["count"] == 2 and stats["device_wait_ns"]["p50"] == 10
    assert a.slowest(1)[0]["start_ns"] == 0 and a.slowest(1)[0]["dominant"] in (
        "compute",
        "device_wait",
    )


def test_glob_and_closest_names():
    assert len(attribute(known_trace(), by="st*").windows) == 2
    with pytest.raises(
        UsageError, match=r"--by 'stpe' matches no range; closest range names: step"
    ):
        attribute(known_trace(), by="stpe")


def test_literal_names_with_glob_characters_are_selected_exactly():
    odd = [
        {"start": 0, "end": 50, "name": "layer[0]", "depth": 1},
        {"start": 50, "end": 100, "name": "layer0", "depth": 1},
        {"start": 0, "end": 30, "name": "step*", "depth": 2},
    ]
    a = attribute(known_trace(odd), by="layer[0]")  # as a glob it matches only 'layer0'
    assert a.windows["name"].tolist() == ["layer[0]"]
    assert attribute(known_trace(odd), by="step*").windows["name"].tolist() == ["step*"]
    # a name the trace lacks is still a glob
    assert sorted(attribute(known_trace(odd), by="layer?*").windows["name"].tolist()) == [
        "layer0",
        "layer[0]",
    ]


def test_comm_range_makes_launched_ops_comm_any_enclosing_range():
    outer = {"start": 44, "end": 48, "name": "kv_transfer", "category": "COMM", "depth": 0}
    inner = {"start": 44, "end": 46, "name": "copy", "category": "compute", "depth": 1}
    tr = known_trace([outer, inner])
    cls = classify(tr)
    assert cls.tolist() == [0, 1, 1, 0, 0, 2]  # the HtoD copy launched at 45 is comm
    a = attribute(tr)
    assert labels(a._row(0))["memory"] == 0 and labels(a._row(0))["comm_exposed"] == 20


def test_user_rules_regex_and_callable():
    tr = known_trace()
    assert classify(tr, rules={"comm": "softmax"}).tolist() == [0, 1, 2, 0, 1, 2]
    assert classify(tr, rules={"memory": [lambda s: s == "gemm"]}).tolist() == [2, 1, 2, 2, 0, 2]
    with pytest.raises(UsageError, match="unknown class"):
        classify(tr, rules={"network": "x"})


def test_device_and_rank_filters():
    with pytest.raises(UsageError, match="device 3 not in the trace"):
        attribute(known_trace(), devices=[3])
    with pytest.raises(UsageError, match="rank 2 not in the trace"):
        attribute(known_trace(), ranks=[2])


def test_json_schema_keys():
    doc = Analysis(attribute(known_trace(), by="step")).to_document()
    assert doc["schema"] == "pytimings.attribution/3"
    keys = {"window_ns", *(f"{x}_ns" for x in LABELS), "host_bound_by_activity",
            "host_bound_by_range"}  # fmt: skip
    assert set(doc["totals"]) == keys
    for w in doc["windows"]:
        assert set(w) == keys | {
            "index", "name", "start_ns", "end_ns", "device", "rank", "payload", "categories"
        }  # fmt: skip
    assert [set(w) for w in doc["host_windows"]] == [
        {"name", "start_ns", "end_ns", "rank", "window_ns", "by_activity"}
    ] * 2
    assert set(doc["host_totals"]) == {"window_ns", "by_activity"}
    assert doc["totals"]["window_ns"] == sum(w["window_ns"] for w in doc["windows"])


def test_public_name():
    assert pytimings.attribute is attribute


# ---------------------------------------------------------------- random traces

NAMES = ["gemm", "ncclKernel_AllReduce", "Memcpy", "Memset", "PtoP"]


@st.composite
def random_trace(draw):
    n = draw(st.integers(1, 14))
    ops, api = [], []
    for _i in range(n):
        s = draw(st.integers(0, 80))
        ln = draw(st.integers(0, 12))
        which = draw(st.integers(0, 4))
        kind = [OpKind.KERNEL, OpKind.KERNEL, OpKind.MEMCPY, OpKind.MEMSET, OpKind.MEMCPY][which]
        ck = [CopyKind.NONE, CopyKind.NONE, CopyKind.DTOH, CopyKind.NONE, CopyKind.PTOP][which]
        corr = draw(st.integers(0, 40))
        ops.append(
            {
                "start": s,
                "end": s + ln,
                "name": NAMES[which],
                "kind": kind,
                "copy_kind": ck,
                "correlation": corr,
                "stream": draw(st.integers(0, 2)),
            }
        )
        for _ in range(draw(st.integers(0, 2))):  # 0, 1 or 2 calls with this correlation id
            ls = draw(st.integers(0, s + 3))
            th = draw(st.integers(0, 1))
            api.append({"start": ls, "end": ls + 1, "correlation": corr, "thread": th})
    nr = draw(st.integers(0, 3))
    ranges = []
    for _ in range(nr):
        s = draw(st.integers(0, 80))
        ranges.append(
            {
                "start": s,
                "end": s + draw(st.integers(0, 40)),
                "name": "w",
                "thread": draw(st.integers(0, 1)),
                "category": draw(st.sampled_from(["", "comm", "Comm", "compute"])),
            }
        )
    threads = [{"pid": 100, "tid": 100 + i, "name": f"t{i}"} for i in range(2)]
    return make_trace(ops, api, ranges, threads)


def _reference(tr, by):
    """The contract read literally, row by row in plain Python: each op's launch call
    (earliest call with its correlation id, then lowest thread), its class, the windows
    (whole trace, or per 'w' range up to the end of the last op launched from inside it on
    its thread, tiled per thread), and each window's partition. Returns
    [(start, end, labels), ...]."""
    ops, api, rg = (tr.to_pandas(t).to_dict("records") for t in ("gpu_ops", "api_calls", "ranges"))
    launch = []
    for o in ops:
        calls = [c for c in api if c["correlation"] == o["correlation"] >= 0]
        launch.append(min(calls, key=lambda c: (c["start"], c["thread"])) if calls else None)

    def in_comm_range(call):
        return any(
            r["category"].lower() == "comm"
            and r["thread"] == call["thread"]
            and r["start"] <= call["start"] < max(r["end"], r["start"])
            for r in rg
        )

    raw = []
    for o, call in zip(ops, launch, strict=True):
        comm = o["kind"] == OpKind.KERNEL and (
            "nccl" in o["name"].lower() or "allreduce" in o["name"].lower()
        )
        comm |= o["kind"] == OpKind.MEMCPY and o["copy_kind"] == CopyKind.PTOP
        comm |= call is not None and in_comm_range(call)
        cls = 1 if comm else (0 if o["kind"] == OpKind.KERNEL else 2)
        ls = (call["start"], call["end"]) if call else None
        raw.append((o["start"], o["end"], cls, ls, o["correlation"]))
    if by is None:
        launching = [c for c in launch if c is not None]
        pts = [p for o in ops for p in (o["start"], o["end"])]
        pts += [p for r in rg for p in (r["start"], r["end"])]
        pts += [p for c in launching for p in (c["start"], c["end"])]
        windows = [(min(pts), max(pts))]
    else:
        projected = []
        for r in rg:
            end = max(r["end"], r["start"])
            inside = [
                o["end"]
                for o, c in zip(ops, launch, strict=True)
                if c is not None and c["thread"] == r["thread"] and r["start"] <= c["start"] < end
            ]
            projected.append((r["thread"], r["start"], max([end, *inside])))
        # version 3: tiled per thread, in start order (ties: end); each window starts at
        # the later of its own start and the previous window's end
        windows = []
        prev_end: dict[int, int] = {}
        for th, ws, we in sorted(projected):
            ws = max(ws, prev_end.get(th, ws))
            we = max(we, ws)
            prev_end[th] = we
            windows.append((ws, we))
        windows.sort()
    return [(ws, we, twin.reference_partition(raw, ws, we)) for ws, we in windows]


def test_op_ending_a_gap_does_not_depend_on_row_order():
    """Two ops of one launch (a CUDA graph) start together after a host_bound gap: the
    finding names the same one whichever row comes first (found by the property test
    below: it used to be the lower row)."""
    ops = [
        {"start": 0, "end": 5, "name": "first", "correlation": 0},
        {"start": 10, "end": 20, "name": "gemm", "correlation": 1},
        {"start": 10, "end": 20, "name": "ncclKernel_AllReduce", "correlation": 1, "stream": 9},
    ]
    api = [{"start": 8, "end": 9, "correlation": 1}]
    named = set()
    for rows in (ops, ops[::-1]):
        f = Analysis(attribute(make_trace(rows, api))).findings
        named |= {x.evidence["op_name"] for x in f if x.layer == "scheduling"}
    assert named == {"gemm"}


def test_windows_tiled_to_one_extent_are_numbered_by_their_ranges_not_their_rows():
    """Twin ranges [0, 10) and a range [10, 10) on one thread: the second twin is tiled to
    [10, 10), the empty range's own extent. Their windows tie on every window key; their
    ranges' own starts decide the numbers (the twin first), and the host finding names the
    twins' windows 1-2, whatever the rows' order (found by the property test below)."""
    from helpers.synth import shuffled

    ops = [{"start": 2, "end": 3, "name": "gemm", "correlation": 1}]
    api = [{"start": 1, "end": 2, "correlation": 1}]
    ranges = [
        {"start": 0, "end": 10, "name": "w"},
        {"start": 10, "end": 10, "name": "w"},
        {"start": 0, "end": 10, "name": "w"},
    ]
    base = make_trace(ops, api, ranges)
    docs = set()
    for seed in range(6):
        a = attribute(shuffled(base, seed), by="w")
        assert a.windows["index"].tolist() == [1, 2, 3]
        rows = a.window_range_rows
        assert a.trace.ranges["start"][rows].tolist() == [0, 0, 10]
        docs.add(repr([f.to_dict() for f in Analysis(a).findings]))
    assert len(docs) == 1


@settings(max_examples=200, deadline=None)
@given(random_trace(), st.integers(0, 2**32 - 1))
def test_random_traces_match_contract_and_sum_exactly(tr, seed):
    for by in (None, "w"):
        if by and len(tr.ranges) == 0:
            continue
        a = attribute(tr, by=by)
        w = a.windows
        got = [
            (int(w["start_ns"][i]), int(w["end_ns"][i]), [int(w[f"{x}_ns"][i]) for x in LABELS])
            for i in range(len(w))
        ]
        assert sorted(got) == _reference(tr, by)
        assert [sum(g[2]) for g in got] == (w["end_ns"] - w["start_ns"]).tolist()
        b = attribute(shuffled(tr, seed), by=by)
        for c in a.windows.columns:
            np.testing.assert_array_equal(a.windows[c], b.windows[c])
        np.testing.assert_array_equal(
            np.sort(a.launch_latency.latency_ns), np.sort(b.launch_latency.latency_ns)
        )
        assert [f.to_dict() for f in Analysis(a).findings] == [
            f.to_dict() for f in Analysis(b).findings
        ]


def test_unusable_events_are_counted():
    tr = make_trace(
        [{"start": 10, "end": 20}, {"start": 30, "end": 25}],
        ranges=[{"start": 5, "end": 3, "name": "w"}],
    )
    a = attribute(tr)
    assert a.ignored == {
        "GPU ops ending before they start": 1,
        "ranges ending before they start (taken as zero-length)": 1,
    }
    assert Analysis(a).to_document()["ignored"] == a.ignored


def test_loader_drop_counts_are_in_the_json():
    tr = make_trace([{"start": 10, "end": 20}])
    assert Analysis(attribute(tr)).to_document()["dropped"] == {}
    tr.dropped.update({"kernels without a device": 3, "never": 0})
    doc = Analysis(attribute(tr)).to_document()
    assert doc["dropped"] == {"kernels without a device": 3} and doc["ignored"] == {}


def test_empty_trace_is_a_usage_error():
    with pytest.raises(UsageError, match="no GPU ops"):
        attribute(make_trace([]))


def test_launch_at_gap_start_is_device_wait_and_ties_pick_earliest_launch():
    # the window starts with the launch call at 0: L.start == g0, so [0, 10) is device_wait
    tr = make_trace(
        [{"start": 10, "end": 20, "correlation": 1}], [{"start": 0, "end": 1, "correlation": 1}]
    )
    assert labels(attribute(tr)._row(0))["device_wait"] == 10
    # two ops start at 50 after a gap [20, 50): the one launched first (at 15, before g0)
    # decides, not the lower correlation id launched at 30 -> device_wait, not host_bound
    tr = make_trace(
        [
            {"start": 10, "end": 20, "correlation": 1},
            {"start": 50, "end": 60, "correlation": 2},
            {"start": 50, "end": 55, "correlation": 3, "stream": 8},
        ],
        [
            {"start": 0, "end": 1, "correlation": 1},
            {"start": 30, "end": 31, "correlation": 2},
            {"start": 15, "end": 16, "correlation": 3},
        ],
    )
    got = labels(attribute(tr)._row(0))
    assert got["device_wait"] == 10 + 30 and got["host_bound"] == 0


def test_launch_overhead_ends_50us_after_the_call_returns():
    """A gap [0, 300) µs before an op whose launch call ran [100, 110) µs: host_bound until
    the call, launch_overhead until 50 µs after it returned, device_wait after that (the
    op was submitted and still did not start); the label lanes cut the gap the same way."""
    from pytimings.report.segments import label_segments

    us = 1000
    tr = make_trace(
        [{"start": 300 * us, "end": 400 * us, "correlation": 1}],
        [{"start": 100 * us, "end": 110 * us, "correlation": 1}],
        [{"start": 0, "end": 400 * us, "name": "step"}],
    )
    a = attribute(tr)
    got = labels(a._row(0))
    assert (got["host_bound"], got["launch_overhead"], got["device_wait"]) == (
        100 * us,
        60 * us,
        140 * us,
    )
    s, e, lab = label_segments(a, 0, 0)
    assert list(zip(s.tolist(), e.tolist(), [LABELS[i] for i in lab], strict=True)) == [
        (0, 100 * us, "host_bound"),
        (100 * us, 160 * us, "launch_overhead"),
        (160 * us, 300 * us, "device_wait"),
        (300 * us, 400 * us, "compute"),
    ]
