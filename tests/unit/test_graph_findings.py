"""Graph replays per (rank, device) (``analyze --json`` key ``graphs``) and the kernel finding
that tells eager launch overhead from graph-replayed work and from a few long gaps."""

from __future__ import annotations

import json

from helpers.synth import make_trace

from pytimings.analysis.attribution import attribute
from pytimings.analysis.findings import LONG_LAUNCH_GAP_NS, TINY_KERNEL_NS, graphs, kernels
from pytimings.session import Analysis

US = 1_000


def replayed(launch: str = "cudaGraphLaunch_v10000", replays: int = 4, per: int = 10):
    """`replays` graph launches, each running `per` 3 µs kernels 2 µs apart; 40 µs between
    replays while the host launches the next one; a range 'step' around each launch."""
    ops, api, ranges = [], [], []
    t = 0
    for r in range(replays):
        corr = 100 + r
        ranges.append({"start": t, "end": t + 10 * US, "name": "step"})
        api.append({"start": t, "end": t + 8 * US, "name": launch, "correlation": corr})
        s = t + 20 * US
        for i in range(per):
            ops.append({"start": s, "end": s + 3 * US, "name": f"k{i}", "correlation": corr})
            s += 5 * US
        t = s + 40 * US
    return make_trace(ops, api, ranges)


def eager(n: int = 40, gap: int = 6 * US, dur: int = 3 * US, long_at: int | None = None):
    """`n` eager kernels of `dur`, each launched `gap` after the previous one ended (the
    call starts 1 µs after it, so 1 µs host_bound and the rest launch_overhead); at
    `long_at` one blocking hipMemcpyWithStream-like launch call lasts 5 ms (its op starts
    4 µs after it returns: launch_overhead with or without contract v2's 50 µs bound)."""
    ops, api = [], []
    t = 0
    for i in range(n):
        call = 5_000 * US if i == long_at else US
        start = t + US + call + 4 * US if i == long_at else t + gap
        api.append({"start": t + US, "end": t + US + call, "correlation": i + 1})
        ops.append({"start": start, "end": start + dur, "name": "tiny", "correlation": i + 1})
        t = start + dur
    return make_trace(ops, api)


def test_graphs_key_counts_launches_ops_and_calls():
    for launch in ("cudaGraphLaunch_v10000", "hipGraphLaunch", "cudaGraphLaunch_ptsz"):
        a = attribute(replayed(launch))
        assert a.graphs == [
            {"rank": 0, "device": 0, "launches": 4, "ops": 40, "launch_calls": {launch: 4}}
        ]
        assert Analysis(a).to_document()["graphs"] == a.graphs
    # graph ids without the launch call in the trace: one launch per correlation id
    ops = [
        {"start": 10 * i, "end": 10 * i + 5, "graph": 7, "correlation": i // 3} for i in range(6)
    ]
    assert attribute(make_trace(ops)).graphs == [
        {"rank": 0, "device": 0, "launches": 2, "ops": 6, "launch_calls": {}}
    ]


def test_no_graphs_key_entries_without_graph_work():
    assert attribute(eager()).graphs == []


def test_graph_replayed_work_is_not_blamed_on_tiny_kernels():
    a = attribute(replayed())
    (k,) = kernels(a)
    ev = k.evidence
    assert ev["graph_kernels"] == 40 and ev["eager_kernels"] == 0
    assert ev["graph_gap_launch_overhead_ns"] == a.totals["launch_overhead_ns"] > 0
    assert not ev["tiny_kernels_named"]
    assert "run under" not in k.title and "before graph-replayed ops" in k.title
    assert "40 kernels replayed from graphs" in k.title


def test_tiny_eager_kernels_are_named_when_short_gaps_hold_the_overhead():
    a = attribute(eager())
    (k,) = kernels(a)
    ev = k.evidence
    lo = a.totals["launch_overhead_ns"]
    # per kernel: 1 µs host_bound, then 5 µs until it starts; the first call opens the
    # window, so the first gap is device_wait
    assert lo == 39 * 5 * US
    assert ev["short_gap_launch_overhead_ns"] == lo and ev["long_gaps"] == 0
    assert ev["tiny_kernels"] == 40 and ev["tiny_kernels_named"]
    assert f"40 of 40 eager kernels (100.0%) run under {TINY_KERNEL_NS // US}.0 µs" in k.title


def test_a_few_long_gaps_are_not_blamed_on_tiny_kernels():
    a = attribute(eager(long_at=20))
    (k,) = kernels(a)
    ev = k.evidence
    assert ev["long_gaps"] == 1
    assert ev["longest_gap_launch_overhead_ns"] == 5_004 * US >= LONG_LAUNCH_GAP_NS
    assert (
        ev["short_gap_launch_overhead_ns"] + ev["long_gap_launch_overhead_ns"]
        == (a.totals["launch_overhead_ns"])
    )
    assert not ev["tiny_kernels_named"] and "run under" not in k.title
    assert "in 1 gap of 1.00 ms or more (longest 5.00 ms)" in k.title


def test_repeated_windows_finding_sees_graph_launch_calls():
    # Kineto style: the graph's ops carry no graph id, only their graph-launch call
    a = attribute(replayed(), by="step")
    assert len(a.windows) == 4
    assert graphs(a) == []


def _kineto_rank(path, rank: int, launch: str) -> None:
    """A Kineto file of one rank: one graph launch running three kernels (one correlation)."""
    ev = [
        {"ph": "X", "cat": "cuda_runtime", "name": launch, "pid": 1, "tid": 2, "ts": 1000.0,
         "dur": 5.0, "args": {"correlation": 9}},
    ] + [
        {"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 1010.0 + 10 * i,
         "dur": 4.0, "args": {"device": 0, "stream": 7, "correlation": 9}}
        for i in range(3)
    ]  # fmt: skip
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": rank}, "traceEvents": ev}
    path.write_text(json.dumps(doc))


def test_graphs_travel_with_per_rank_tasks(tmp_path):
    from pytimings.ingest import load
    from pytimings.session import analyze

    files = [tmp_path / "r0.json", tmp_path / "r1.json"]
    _kineto_rank(files[0], 0, "cudaGraphLaunch")
    _kineto_rank(files[1], 1, "hipGraphLaunch")
    want = [
        {"rank": r, "device": 0, "launches": 1, "ops": 3, "launch_calls": {name: 1}}
        for r, name in ((0, "cudaGraphLaunch"), (1, "hipGraphLaunch"))
    ]
    assert attribute(load(*files)).graphs == want
    assert analyze(files, workers=1).attribution.graphs == want
