"""The allocator-churn finding on a hand-built trace (issue 31): N cudaMalloc calls per step
in steady state, their count and their cost as host attribution's share, the host_bound time
charged to them, not the calls' duration (a call under running GPU work costs nothing).

Each step (200 µs, at T): range 'step' [T, T+190); kernel k1 launched [T, T+5) runs
[T+10, T+50); kernel k2 launched [T+90, T+95) runs [T+100, T+120). The GPU waits for the
host over [T+50, T+90) (k2's launch starts at T+90: the contract's host_bound part of the
gap). cudaMalloc calls at [T+20, T+30) (all under k1), [T+40, T+60) (half under k1) and
[T+70, T+80) (all in the gap); the first step has WARMUP more calls, in the gap after k2.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from helpers.synth import make_trace

from pytimings.analysis.attribution import attribute
from pytimings.analysis.memory import analyze_memory, memory_findings, steady_native_calls
from pytimings.model.trace import MEM_EVENT_SCHEMA, MemEventKind, Trace, conform

US = 1_000
STEPS = 6
STEP = 200 * US
CALLS = [(20, 30), (40, 60), (70, 80)]  # µs from the step's start
WARMUP = [(130, 140), (150, 160), (170, 180)]  # first step only


def _trace() -> Trace:
    api: list[dict[str, Any]] = []
    ops: list[dict[str, Any]] = []
    ranges = []
    mem: dict[str, list[int]] = {c: [] for c in MEM_EVENT_SCHEMA}
    corr = 0
    for k in range(STEPS):
        t = k * STEP
        ranges.append({"start": t, "end": t + 190 * US, "name": "step"})
        for (l0, l1), (o0, o1), name in (((0, 5), (10, 50), "k1"), ((90, 95), (100, 120), "k2")):
            corr += 1
            api.append({"start": t + l0 * US, "end": t + l1 * US, "correlation": corr})
            ops.append({"start": t + o0 * US, "end": t + o1 * US, "name": name,
                        "correlation": corr, "stream": 7})  # fmt: skip
        for c0, c1 in CALLS + (WARMUP if k == 0 else []):
            api.append({"start": t + c0 * US, "end": t + c1 * US, "name": "cudaMalloc"})
        row = {"time": t + 21 * US, "kind": int(MemEventKind.ALLOC), "bytes": 1 << 20,
               "addr": 0x1000 * (k + 1), "device_type": 1, "device": 0, "allocated": -1,
               "reserved": -1, "source": 0, "site": 0, "thread": 0, "pid": 100,
               "rank": 0}  # fmt: skip
        for c, v in row.items():
            mem[c].append(v)
    tr = make_trace(ops, sorted(api, key=lambda r: r["start"]), ranges)
    table = conform({c: np.asarray(v, dtype=MEM_EVENT_SCHEMA[c]) for c, v in mem.items()},
                    MEM_EVENT_SCHEMA)  # fmt: skip
    return dataclasses.replace(tr, mem_events=table)


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> int:
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


# independent of pytimings: the GPU-waits-for-host interval of a step, by construction
HOST_BOUND = (50, 90)
EXPECT_BOUND = sum(_overlap(c, HOST_BOUND) for c in CALLS) * US  # 10 + 10 = 20 µs per step
EXPECT_IN_CALLS = sum(c1 - c0 for c0, c1 in CALLS) * US  # 40 µs per step


def test_churn_counts_the_calls_and_charges_their_host_bound_share() -> None:
    assert EXPECT_BOUND == 20 * US and EXPECT_IN_CALLS == 40 * US
    a = attribute(_trace(), by="step")
    (d,) = a.memory.devices
    assert [w["native_alloc_calls"] for w in d.windows] == [6] + [3] * (STEPS - 1)
    assert [w["native_alloc_ns"] for w in d.windows[1:]] == [EXPECT_IN_CALLS] * (STEPS - 1)
    assert [w["native_alloc_host_bound_ns"] for w in d.windows[1:]] == [EXPECT_BOUND] * (STEPS - 1)
    assert steady_native_calls(d) == (3.0, EXPECT_IN_CALLS, EXPECT_BOUND, STEPS - 1)
    # the share agrees with the attribution's own charges of the windows' host_bound
    charges = a.host.bound_by_activity
    names = np.asarray([a.trace.strings[i] for i in charges["name"]])
    steady_rows = np.argsort(a.windows["start_ns"])[1:]
    picked = np.isin(charges["row"], steady_rows) & (names == "cudaMalloc")
    assert int(charges["ns"][picked].sum()) == EXPECT_BOUND * (STEPS - 1)

    (churn,) = [f for f in memory_findings(a.memory) if "native allocations" in f.title]
    assert churn.loss_ns == EXPECT_BOUND * (STEPS - 1)
    assert "3.0 times per step after the first" in churn.title
    assert "20.0 µs of host_bound per step charged to them (40.0 µs in the calls)" in churn.title
    assert churn.evidence["host_bound_ns_per_window"] == EXPECT_BOUND


def test_without_an_attribution_the_churn_claims_no_saving() -> None:
    r = analyze_memory(_trace(), by="step")
    (d,) = r.devices
    assert all(w["native_alloc_host_bound_ns"] is None for w in d.windows)
    (churn,) = [f for f in memory_findings(r) if "native allocations" in f.title]
    assert churn.loss_ns == 0 and "no host attribution here" in churn.title
    assert steady_native_calls(d) == pytest.approx((3.0, EXPECT_IN_CALLS, None, STEPS - 1))
