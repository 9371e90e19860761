"""The one launch link (pytimings.ingest.links) that summary and analyze both use."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.synth import make_trace, shuffled

from pytimings.analysis.attribution import attribute
from pytimings.analysis.launches import link_launches
from pytimings.ingest.links import launch_index, unlinked
from pytimings.model.trace import SyncKind, Trace
from pytimings.session import Analysis

THREADS = [
    {"pid": 100, "tid": 100, "name": "main"},
    {"pid": 100, "tid": 101, "name": "other"},
]


def test_shared_ids_pick_the_earliest_call_then_the_lowest_thread():
    ops = [
        {"start": 100, "end": 200, "correlation": 7},
        {"start": 300, "end": 400, "correlation": 8},
    ]
    api = [
        {"start": 20, "end": 30, "correlation": 7, "thread": 1},
        {"start": 20, "end": 30, "correlation": 7, "thread": 0},
        {"start": 50, "end": 60, "correlation": 8, "thread": 0},
        {"start": 40, "end": 45, "correlation": 8, "thread": 1},
    ]
    tr = make_trace(ops, api, threads=THREADS)
    for t in (tr, *(shuffled(tr, s) for s in range(5))):
        idx = launch_index(t)
        api_t = t.api_calls
        got = sorted(
            (int(t.gpu_ops["correlation"][i]), int(api_t["start"][r]), int(api_t["thread"][r]))
            for i, r in enumerate(idx)
        )
        assert got == [(7, 20, 0), (8, 40, 1)]


def _two_processes(corr: int) -> Trace:
    traces = []
    for r in (0, 1):
        ops = [{"start": 100, "end": 200, "correlation": corr + r, "rank": r}]
        api = [{"start": 10 + r, "end": 20, "correlation": corr + r, "rank": r}]
        traces.append(
            make_trace(ops, api, threads=[{"pid": 100, "tid": 100, "name": "m", "rank": r}])
        )
    return Trace.merge(traces)


def test_ids_beyond_2_40_link_across_processes():
    tr = _two_processes((1 << 62) + 5)
    idx = launch_index(tr)
    assert (idx >= 0).all()
    np.testing.assert_array_equal(tr.api_calls["correlation"][idx], tr.gpu_ops["correlation"])
    np.testing.assert_array_equal(tr.api_calls["rank"][idx], tr.gpu_ops["rank"])
    a = attribute(tr)  # was: UsageError "correlation ids above 2**40 cannot be joined"
    assert a.launches.unlinked == 0 and (a.launches.api_row >= 0).all()


def test_unlinked_ops_are_counted_and_reported():
    ops = [
        {"start": 100, "end": 200, "correlation": 1},
        {"start": 300, "end": 400, "correlation": 2},  # its call is not in the trace
        {"start": 500, "end": 600},  # no id at all: not 'unlinked'
    ]
    tr = make_trace(ops, [{"start": 10, "end": 20, "correlation": 1}])
    assert unlinked(tr, launch_index(tr)) == 1
    a = attribute(tr)
    assert a.launches.unlinked == 1
    assert Analysis(a).to_document()["launch_latency"]["unlinked_ops"] == 1


def test_summary_and_analyze_use_the_same_links(tmp_path):
    from helpers import nsys_synth as syn

    from pytimings.ingest import load

    tr = load(syn.basic(tmp_path / "r_rank0.sqlite"), syn.basic(tmp_path / "r_rank1.sqlite"))
    np.testing.assert_array_equal(link_launches(tr).api_row, launch_index(tr))
    assert (launch_index(tr) >= 0).all()


def test_summary_and_analyze_project_ranges_alike():
    from pytimings.analysis.summary import trace_summary
    from pytimings.analysis.windows import range_windows as _range_windows
    from pytimings.ingest.links import project

    ops = [
        {"start": 100, "end": 200, "correlation": 1},
        {"start": 300, "end": 450, "correlation": 2},
        {"start": 500, "end": 510, "correlation": 3},
    ]
    api = [
        {"start": 10, "end": 20, "correlation": 1},
        {"start": 30, "end": 40, "correlation": 2},
        {"start": 60, "end": 70, "correlation": 3, "thread": 1},  # another thread
    ]
    ranges = [
        {"start": 0, "end": 50, "name": "step"},
        {"start": 25, "end": 5, "name": "bad"},  # ends before it starts: zero-length
    ]
    tr = make_trace(ops, api, ranges, THREADS)
    count, first, last, busy = project(tr, launch_index(tr))
    assert count.tolist() == [2, 0] and first.tolist() == [100, 0]
    assert last.tolist() == [450, 0] and busy.tolist() == [250, 0]
    # busy=False (what analyze --by asks for): the same count and span, no union computed
    c2, f2, l2, b2 = project(tr, launch_index(tr), busy=False)
    assert (c2.tolist(), f2.tolist(), l2.tolist(), b2.tolist()) == (
        [2, 0],
        [100, 0],
        [450, 0],
        [0, 0],
    )
    rows = {n: i for i, n in enumerate(trace_summary(tr)["ranges"]["name"])}
    t = trace_summary(tr)["ranges"]
    assert t["gpu_ops"][rows["step"]] == 2 and t["proj_total_ns"][rows["step"]] == 350
    assert t["gpu_ops"][rows["bad"]] == 0  # was -1: a negative count of ops
    w = _range_windows(tr, link_launches(tr), "step", np.asarray([0], dtype=np.int16))
    assert w.end.tolist() == [450]


def test_a_ranges_gpu_busy_time_is_the_union_of_its_ops():
    """Two streams: ops that overlap count once in a range's busy time (a sum of durations
    would exceed its span); nested ranges each get the union of their own ops."""
    from pytimings.analysis.summary import trace_summary
    from pytimings.ingest.links import project, union_lengths

    rng = np.random.default_rng(5)
    ops, api = [], []
    for i in range(60):
        s = int(rng.integers(0, 5_000))
        ops.append({"start": s, "end": s + int(rng.integers(0, 400)), "correlation": i,
                    "stream": 7 + i % 3})  # fmt: skip
        api.append({"start": 10 * i, "end": 10 * i + 5, "correlation": i})
    ranges = [
        {"start": 0, "end": 600, "name": "outer"},
        {"start": 100, "end": 300, "name": "inner", "depth": 1},
        {"start": 320, "end": 330, "name": "none", "depth": 1},  # launches nothing
    ]
    tr = make_trace(ops, api, ranges, THREADS)
    count, _, _, busy = project(tr, launch_index(tr))
    for i, (lo, hi) in enumerate([(0, 600), (100, 300), (320, 330)]):
        mine = [o for o, a in zip(ops, api, strict=True) if lo <= a["start"] < hi]
        covered = np.zeros(6_000, dtype=bool)
        for o in mine:
            covered[o["start"] : o["end"]] = True
        assert count[i] == len(mine) and busy[i] == covered.sum()
    assert busy[0] < sum(o["end"] - o["start"] for o in ops)  # the ops overlap
    t = trace_summary(tr)["ranges"]
    rows = {n: i for i, n in enumerate(t["name"])}
    assert [int(t["gpu_busy_ns"][rows[n]]) for n in ("outer", "inner", "none")] == busy.tolist()
    # the group-by-group path (keys that would overflow) gives the same lengths
    lo, hi = np.array([0, 2, 1], np.int64), np.array([3, 4, 1], np.int64)
    s, e = np.array([0, 5, 2**61, 2**61 + 3], np.int64), np.array([4, 9, 2**61 + 5, 2**61 + 9])
    assert union_lengths(lo, hi, s, e).tolist() == [4 + 4 + 5, 9, 0]


# ------------------------------------------------ recorded event waits (vectorised)


def _waits_trace(seed: int) -> Trace:
    """Random records and waits over 2 ranks x 2 processes x 2 devices x 3 streams, with
    correlation ids reused across processes and calls sharing an id, start ties, events
    recorded before any op or never, waits whose call is missing, and other sync kinds."""
    rng = np.random.default_rng(seed)
    procs = [(r, p) for r in (0, 1) for p in (100, 200)]
    ops, api, syncs, events = [], [], [], []
    for r, p in procs:
        for i in range(int(rng.integers(0, 25))):  # launches on the process's streams
            t = int(rng.integers(0, 60)) * 10  # coarse: start ties
            api.append({"start": t, "end": t + 5, "correlation": i, "rank": r, "pid": p})
            if rng.random() < 0.9:
                ops.append({"start": t + 50, "end": t + 80, "correlation": i, "rank": r,
                            "pid": p, "device": int(rng.integers(0, 2)),
                            "stream": int(rng.integers(1, 4))})  # fmt: skip
        for i in range(1000, 1000 + int(rng.integers(0, 12))):  # records and waits
            t = int(rng.integers(0, 60)) * 10
            if rng.random() < 0.9:  # else the call is missing
                api.append({"start": t, "end": t + 2, "correlation": i, "rank": r, "pid": p})
                if rng.random() < 0.2:  # a second call with the id, later: not the one
                    api.append({"start": t + 7, "end": t + 9, "correlation": i, "rank": r,
                                "pid": p})  # fmt: skip
            ev, dev, stream = (
                int(rng.integers(0, 4)),
                int(rng.integers(0, 2)),
                int(rng.integers(1, 4)),
            )
            if rng.random() < 0.5:
                events.append({"device": dev, "stream": stream, "event": ev, "correlation": i,
                               "pid": p, "rank": r})  # fmt: skip
            else:
                kind = SyncKind.STREAM_WAIT_EVENT if rng.random() < 0.85 else SyncKind.EVENT_SYNC
                syncs.append({"start": t, "end": t + 2, "kind": kind, "device": dev,
                              "stream": stream, "event": ev if rng.random() < 0.95 else -1,
                              "correlation": i, "pid": p, "rank": r})  # fmt: skip
    threads = [{"pid": p, "tid": p, "name": "main", "rank": r} for r, p in procs]
    return shuffled(make_trace(ops, api, (), threads, syncs=syncs, events=events), seed)


def test_event_waits_match_the_python_loop_on_random_captures():
    from helpers.links_twin import event_waits as loop_waits

    from pytimings.ingest.links import event_waits

    pairs = 0
    for seed in range(300):
        tr = _waits_trace(seed)
        li = launch_index(tr)
        got, want = event_waits(tr, li), loop_waits(tr, li)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == np.int64 and g.tolist() == w.tolist(), seed
        pairs += got[0].size
    assert pairs > 150  # the captures do wait on recorded work


@pytest.mark.shared
def test_event_waits_match_the_python_loop_on_real_nsys_captures(shared_dir):
    from helpers.links_twin import event_waits as loop_waits

    from pytimings.ingest import load
    from pytimings.ingest.links import event_waits

    found = 0
    for path in sorted(shared_dir.glob("data/**/*.sqlite")):
        tr = load(path)
        li = launch_index(tr)
        got, want = event_waits(tr, li), loop_waits(tr, li)
        for g, w in zip(got, want, strict=True):
            assert g.tolist() == w.tolist(), path
        found += len(tr.events)
    assert found  # some capture records CUDA events (the H200 decode one does)


def _brute_links_and_projection(tr: Trace) -> tuple[list[int], list[tuple[int, int, int, int]]]:
    """The contract's link and projection, one op and one range at a time."""
    ops, api, rg = tr.gpu_ops, tr.api_calls, tr.ranges
    best: dict[tuple[int, int, int], tuple[int, int, int]] = {}
    for j in range(len(api)):
        c = int(api["correlation"][j])
        if c < 0:
            continue
        k = (int(api["rank"][j]), int(api["pid"][j]), c)
        cand = (int(api["start"][j]), int(api["thread"][j]), j)
        if k not in best or cand[:2] < best[k][:2]:
            best[k] = cand
    link = []
    for i in range(len(ops)):
        k = (int(ops["rank"][i]), int(ops["pid"][i]), int(ops["correlation"][i]))
        link.append(best[k][2] if k[2] >= 0 and k in best else -1)
    proj = []
    for r in range(len(rg)):
        s, t = int(rg["start"][r]), int(rg["thread"][r])
        e = max(int(rg["end"][r]), s)
        mine = [
            i
            for i, j in enumerate(link)
            if j >= 0 and t >= 0 and int(api["thread"][j]) == t and s <= int(api["start"][j]) < e
        ]
        if not mine:
            proj.append((0, 0, 0, 0))
            continue
        covered: set[int] = set()
        for i in mine:
            covered.update(range(int(ops["start"][i]), int(ops["end"][i])))
        proj.append(
            (
                len(mine),
                min(int(ops["start"][i]) for i in mine),
                max(int(ops["end"][i]) for i in mine),
                len(covered),
            )
        )
    return link, proj


@pytest.mark.parametrize("seed", range(12))
def test_links_and_projection_match_a_brute_force_twin(seed):
    """Random traces: two processes, three threads, shared and missing ids, ops out of
    correlation order, nested, overlapping, zero-length and reversed ranges; also every
    table shuffled: the compiled join and projection give the contract's answer."""
    from pytimings.ingest.links import project

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 120))
    ops, api, ranges = [], [], []
    for i in range(n):
        s = int(rng.integers(0, 3_000))
        c = int(rng.integers(-1, n + 5)) if rng.random() < 0.3 else i
        ops.append({"start": s, "end": s + int(rng.integers(0, 300)), "correlation": c,
                    "rank": int(rng.integers(0, 2))})  # fmt: skip
    for _ in range(int(rng.integers(1, 2 * n))):
        s = int(rng.integers(0, 2_000))
        c, th, rk = (
            int(x) for x in (rng.integers(-1, n + 5), rng.integers(0, 3), rng.integers(0, 2))
        )
        api.append({"start": s, "end": s + 5, "correlation": c, "thread": th, "rank": rk})
    for i in range(int(rng.integers(0, 15))):
        s = int(rng.integers(-100, 2_200))
        e = s + int(rng.integers(-50, 800))
        th, rk = int(rng.integers(-1, 4)), int(rng.integers(0, 2))
        ranges.append({"start": s, "end": e, "name": f"r{i % 3}", "thread": th, "rank": rk})
    threads = [{"pid": 100, "tid": 100 + t, "name": f"t{t}"} for t in range(4)]
    tr = make_trace(ops, api, ranges, threads)
    for t in (tr, shuffled(tr, seed)):
        link, proj = _brute_links_and_projection(t)
        got = launch_index(t)
        assert got.tolist() == link
        assert unlinked(t, got) == sum(
            1 for i, j in enumerate(link) if j < 0 and t.gpu_ops["correlation"][i] >= 0
        )
        res = project(t, got)
        assert list(zip(*(a.tolist() for a in res), strict=True)) == proj
        rows = np.arange(len(t.ranges), dtype=np.int64)[::2]
        part = project(t, got, rows, busy=False)
        assert [p.tolist() for p in part[:3]] == [[proj[r][j] for r in rows] for j in range(3)]
        assert not part[3].any()
