"""Several ranks: clock alignment by collective ends, arrival skew, wait, straggler."""

from __future__ import annotations

import glob

import numpy as np
import pytest
from helpers.synth import make_trace, shuffled

from pytimings.analysis.attribution import attribute
from pytimings.analysis.partition import LABELS
from pytimings.model.trace import Trace
from pytimings.session import Analysis

RANKS = 8
DELAY = [0, 30, 10, 50, 20, 400, 5, 15]  # µs each rank arrives after the first; rank 5 last
OFFSET = [0, 1_000_000, -2_500, 7_777, 40, -123_456, 3_000_000, 9]  # rank clock offsets, ns


def eight_ranks(jitter_rank: int | None = None, overlap_us: int = 0) -> Trace:
    """10 all-reduces; on rank r the n-th starts at T_n + DELAY[r] (µs) and all end at
    T_n + 1 ms, seen through rank r's clock (shifted by OFFSET[r]). A compute kernel and
    its launch precede each collective; ``overlap_us``: on rank 0 another compute kernel
    runs the first ``overlap_us`` of each collective."""
    traces = []
    for r in range(RANKS):
        ops, api = [], []
        for n in range(10):
            t = 10_000_000 * (n + 1)
            d = DELAY[r] * 1000
            if jitter_rank == r and n % 2:
                d = 1_000  # this rank is not last every time
            ops.append(
                {
                    "start": t - 500_000 + OFFSET[r],
                    "end": t - 100_000 + OFFSET[r],
                    "name": "gemm",
                    "correlation": 2 * n,
                    "rank": r,
                    "device": r,
                }
            )
            api.append(
                {
                    "start": t - 600_000 + OFFSET[r],
                    "end": t - 590_000 + OFFSET[r],
                    "correlation": 2 * n,
                    "rank": r,
                }
            )
            ops.append(
                {
                    "start": t + d + OFFSET[r],
                    "end": t + 1_000_000 + OFFSET[r],
                    "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                    "correlation": 2 * n + 1,
                    "rank": r,
                    "device": r,
                    "stream": 9,
                }
            )
            api.append(
                {
                    "start": t - 200_000 + OFFSET[r],
                    "end": t - 190_000 + OFFSET[r],
                    "correlation": 2 * n + 1,
                    "rank": r,
                }
            )
            if overlap_us and r == 0:
                ops.append(
                    {"start": t + OFFSET[r], "end": t + overlap_us * 1000 + OFFSET[r],
                     "name": "gemm", "correlation": 100 + n, "rank": r, "device": r}
                )  # fmt: skip
                api.append({"start": t - 300_000, "end": t - 290_000, "correlation": 100 + n})
        traces.append(
            make_trace(ops, api, threads=[{"pid": 100, "tid": 100, "name": "python3", "rank": r}])
        )
    return Trace.merge(traces)


def test_skew_wait_and_straggler():
    a = attribute(eight_ranks())
    c = a.collectives
    assert c is not None and c.straggler == 5 and c.last_counts[5] == 10
    assert c.clock_offset_ns == {r: OFFSET[r] - OFFSET[0] for r in range(RANKS)}
    t = c.table
    assert len(t) == 80
    for r in range(RANKS):
        m = t["rank"] == r
        np.testing.assert_array_equal(t["skew_ns"][m], DELAY[r] * 1000)
        dur = 1_000_000 - DELAY[r] * 1000
        wait = min(dur, (max(DELAY) - DELAY[r]) * 1000)
        np.testing.assert_array_equal(t["wait_ns"][m], wait)
        np.testing.assert_array_equal(t["transfer_ns"][m], dur - wait)
    f = next(x for x in Analysis(a).findings if x.layer == "parallel" and "arrival skew" in x.title)
    assert "rank 5 arrives last in 10 of 10" in f.title
    # per rank, labels partition each rank's own window exactly
    assert len(a.windows) == RANKS
    total = sum(a.windows[f"{x}_ns"] for x in LABELS)
    np.testing.assert_array_equal(total, a.windows["window_ns"])


@pytest.mark.parametrize("overlap_us", [0, 100, 600])
def test_exposed_time_split_into_waiting_and_transfer(overlap_us: int) -> None:
    a = attribute(eight_ranks(overlap_us=overlap_us))
    c = a.collectives
    assert c is not None
    for r in range(RANKS):
        dur = 1_000_000 - DELAY[r] * 1000
        wait = min(dur, (max(DELAY) - DELAY[r]) * 1000)
        hidden = overlap_us * 1000 if r == 0 else 0  # compute runs the first part
        want_wait = 10 * max(0, wait - hidden)
        want_exposed = 10 * (dur - hidden)
        assert c.exposed[r] == {
            "exposed_ns": want_exposed,
            "waiting_ns": want_wait,
            "transfer_ns": want_exposed - want_wait,
        }
    # the whole-trace partition agrees: rank 0's comm_exposed is its collectives' exposed
    w = a.windows
    assert int(w["comm_exposed_ns"][w["rank"] == 0].sum()) == c.exposed[0]["exposed_ns"]
    f = next(x for x in Analysis(a).findings if "arrival skew" in x.title)
    exposed = sum(v["exposed_ns"] for v in c.exposed.values())
    waiting = sum(v["waiting_ns"] for v in c.exposed.values())
    assert (f.evidence["exposed_ns"], f.evidence["waiting_exposed_ns"]) == (exposed, waiting)
    assert f"of the {exposed / 1e6:.2f} ms they are exposed, {waiting / 1e6:.2f} ms" in f.title


def test_straggler_is_the_rank_last_most_often_and_order_free():
    tr = eight_ranks(jitter_rank=5)  # rank 5 last in 5 of 10, rank 3 in the other 5: tie
    a = attribute(tr)
    assert a.collectives.last_counts[5] == 5 and a.collectives.last_counts[3] == 5
    assert a.collectives.straggler == 3  # tie: the lowest rank
    b = attribute(shuffled(tr, 7))
    assert b.collectives.straggler == 3
    for col in a.collectives.table.columns:
        np.testing.assert_array_equal(a.collectives.table[col], b.collectives.table[col])


def test_rank_filter():
    a = attribute(eight_ranks(), ranks=[1, 5])
    assert sorted(set(a.windows["rank"].tolist())) == [1, 5]
    assert a.collectives.straggler == 5


@pytest.mark.shared
def test_param_dlrm_eight_ranks_end_to_end(shared_dir):
    from pytimings.ingest import load

    files = sorted(glob.glob(str(shared_dir / "data/external/param/dlrm_kineto/*.json.gz")))
    assert len(files) == 8
    a = attribute(load(*files))
    assert sorted(set(a.windows["rank"].tolist())) == list(range(8))
    total = sum(a.windows[f"{x}_ns"] for x in LABELS)
    np.testing.assert_array_equal(total, a.windows["window_ns"])
    assert a.collectives is not None and a.collectives.straggler in range(8)
    assert a.totals["comm_exposed_ns"] > 0
    layers = {f.layer for f in Analysis(a).findings}
    assert {"hardware", "parallel", "scheduling"} <= layers


def _together(delays: list[int]) -> Trace:
    """One all-reduce per step on each rank; rank r starts ``delays[r]`` ns after the step."""
    traces = []
    for r, d in enumerate(delays):
        ops = [
            {
                "start": 1_000_000 * (n + 1) + d,
                "end": 1_000_000 * (n + 1) + 500_000,
                "name": "ncclDevKernel_AllReduce",
                "correlation": n,
                "rank": r,
            }
            for n in range(4)
        ]
        api = [
            {"start": 1_000_000 * (n + 1) - 1000, "end": 1_000_000 * (n + 1), "correlation": n}
            for n in range(4)
        ]
        for row in api:
            row["rank"] = r
        traces.append(
            make_trace(ops, api, threads=[{"pid": 100, "tid": 100, "name": "python3", "rank": r}])
        )
    return Trace.merge(traces)


def test_ranks_arriving_together_have_no_straggler():
    # zero skew: every rank is "last"; nobody is blamed (was: rank 0, the lowest)
    c = attribute(_together([0, 0, 0])).collectives
    assert c is not None and c.straggler is None
    assert c.last_counts == {0: 0, 1: 0, 2: 0}
    np.testing.assert_array_equal(c.table["skew_ns"], 0)


def test_tie_for_last_counts_for_nobody():
    # ranks 1 and 2 arrive together, after rank 0: no unique last arriver
    c = attribute(_together([0, 5_000, 5_000])).collectives
    assert c is not None and c.straggler is None and c.last_counts == {0: 0, 1: 0, 2: 0}
    # a unique last arriver is counted
    c = attribute(_together([0, 5_000, 7_000])).collectives
    assert c is not None and c.straggler == 2 and c.last_counts == {0: 0, 1: 0, 2: 4}


def test_same_rank_file_twice_has_no_straggler():
    from pytimings.analysis.findings import collectives

    a = attribute(_together([0, 0]))  # what two copies of one rank file look like
    assert a.collectives is not None and a.collectives.straggler is None
    (f,) = collectives(a)
    assert "arrives last" not in f.title and f.evidence["straggler"] is None


def test_clock_offset_is_the_rounded_median():
    # rank 1's collectives end 1, 2 ns later than rank 0's: median 1.5 ns rounds to 2, not 1
    traces = []
    for r, extra in ((0, [0, 0]), (1, [1, 2])):
        ops = [
            {
                "start": 1_000_000 * (n + 1),
                "end": 1_000_000 * (n + 1) + 500_000 + extra[n],
                "name": "ncclDevKernel_AllReduce",
                "correlation": n,
                "rank": r,
            }
            for n in range(2)
        ]
        traces.append(
            make_trace(ops, [], threads=[{"pid": 100, "tid": 100, "name": "python3", "rank": r}])
        )
    c = attribute(Trace.merge(traces)).collectives
    assert c is not None and c.clock_offset_ns == {0: 0, 1: 2}


def test_median_ns_is_exact_and_rounds_to_nearest():
    from pytimings.analysis.collectives import _median_ns

    assert _median_ns(np.asarray([0, 3], dtype=np.int64)) == 2  # 1.5 -> 2, not truncated to 1
    assert _median_ns(np.asarray([5, -1, 2], dtype=np.int64)) == 2
    big = 1 << 60  # beyond float64's exact integers
    assert _median_ns(np.asarray([big, big + 1, big + 3, big + 4], dtype=np.int64)) == big + 2
