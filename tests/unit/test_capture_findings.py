"""Capture findings on hand-built traces with known answers, each with a trace where the
cause is absent and the finding must not appear."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.synth import make_trace

from pytimings.analysis.attribution import attribute
from pytimings.analysis.capture import (
    DRIFT_MIN_NS,
    LATE_START_NS,
    before_launch,
    clock_drift,
    cut_windows,
    late_starts,
    unlinked_ops,
)
from pytimings.analysis.findings import ranked
from pytimings.session import Analysis

US = 1_000
MS = 1_000_000


def _late(wait: int, busy_meanwhile: bool = False):
    """op a [10, 20) µs launched by [0, 5); op b launched by [30, 35) µs starts `wait` after
    that call returned; with `busy_meanwhile` a kernel on another stream runs in between."""
    ops = [
        {"start": 10 * US, "end": 20 * US, "name": "a", "correlation": 1},
        {"start": 35 * US + wait, "end": 45 * US + wait, "name": "b", "correlation": 2},
    ]
    api = [
        {"start": 0, "end": 5 * US, "correlation": 1},
        {"start": 30 * US, "end": 35 * US, "correlation": 2},
    ]
    if busy_meanwhile:
        ops.append({"start": 40 * US, "end": 30 * US + wait, "name": "c", "stream": 9})
    return make_trace(ops, api)


def test_an_op_starting_long_after_its_call_with_nothing_visible_is_a_capture_finding():
    a = attribute(_late(2 * MS))
    (f,) = late_starts(a)
    ev = f.evidence
    assert ev["ops"] == 1 and ev["min_wait_ns"] == ev["max_wait_ns"] == 2 * MS
    assert ev["op_names"] == ["b"] and ev["visible_busy_ns"] == 0
    d = ev["distorts"]
    assert d["launch_overhead_ns"] + d["device_wait_ns"] == 2 * MS == f.loss_ns
    # what the labels hold after the call returned: launch_overhead from 35 µs on, the rest
    # device_wait (with the 50 µs pick-up bound of contract v2, most of it)
    assert d["launch_overhead_ns"] == a.totals["launch_overhead_ns"] - 5 * US
    assert d["device_wait_ns"] == a.totals["device_wait_ns"] - 10 * US  # a's 10 µs gap
    # one op has one delay (not '2.00 ms to 2.00 ms')
    assert f.title.startswith("capture: 1 op ('b') starts 2.00 ms after the launch")
    # listed first, before the larger hardware loss: every other number is read through it
    top = ranked([*Analysis(a).findings], a.totals["window_ns"])
    assert (top[0].title, top[0].loss_ns) == (f.title, f.loss_ns) and top[1].layer == "hardware"
    assert top[1].loss_ns > f.loss_ns


@pytest.mark.parametrize(
    "trace", [_late(LATE_START_NS // 2), _late(2 * MS, busy_meanwhile=True)], ids=["short", "busy"]
)
def test_no_late_start_when_short_or_when_the_gpu_is_seen_busy(trace):
    assert late_starts(attribute(trace)) == []


def test_ops_before_their_launch_call_give_the_clock_offset():
    ops = [
        {"start": 10 * US, "end": 20 * US, "name": "a", "correlation": 1},
        {"start": 90 * US, "end": 95 * US, "name": "b", "correlation": 2},
    ]
    api = [
        {"start": 0, "end": 5 * US, "correlation": 1},
        {"start": 100 * US, "end": 105 * US, "correlation": 2},
    ]
    a = attribute(make_trace(ops, api))
    (f,) = before_launch(a)
    ev = f.evidence
    assert ev["ops_before_launch"] == 1 and ev["linked_ops"] == 2
    assert ev["clock_offset_ns"] == 10 * US
    # the gap [20, 90) µs ends at b, whose call starts after it: host_bound whole
    assert ev["distorts"] == {"host_bound_ns": 70 * US} and f.loss_ns == 70 * US
    assert a.launch_latency.summary()["negative"] == 1
    assert "clocks disagree by at least 10.0 µs" in f.title
    assert before_launch(attribute(_late(0))) == []


def _stepped(last_range_end: int):
    ops, api, ranges = [], [], []
    for i in range(2):
        t = i * 100 * US
        ranges.append({"start": t, "end": t + 50 * US, "name": "step"})
        api.append({"start": t + 10 * US, "end": t + 15 * US, "correlation": i + 1})
        ops.append({"start": t + 20 * US, "end": t + 40 * US, "correlation": i + 1})
    ranges[-1]["end"] = last_range_end
    return make_trace(ops, api, ranges)


def test_a_window_whose_range_ends_with_the_capture_is_cut():
    tr = _stepped(160 * US)  # the last range ends after its op (140 µs): with the capture
    tr.dropped["nvtx_ranges_open_at_capture_end"] = 2
    a = attribute(tr, by="step")
    (f,) = cut_windows(a)
    ev = f.evidence
    assert ev["cut_windows"] == 1 and ev["window_rows"] == [1]
    assert ev["window_ns"] == 60 * US == f.loss_ns
    assert ev["distorts"] == {
        "compute_ns": 20 * US, "host_bound_ns": 10 * US, "launch_overhead_ns": 10 * US,
        "idle_other_ns": 20 * US,
    }  # fmt: skip
    assert ev["open_ranges_not_loaded"] == 2
    assert "1 step window (number 2) ends where the capture ends" in f.title
    assert "2 ranges still open at the capture's end were not loaded" in f.title
    # the last range closes before its GPU work ends: the capture goes on after it
    assert cut_windows(attribute(_stepped(130 * US), by="step")) == []
    assert cut_windows(attribute(tr)) == []  # no --by: no range windows


def test_ops_without_a_launch_call_leave_their_gaps_unsplit():
    ops = [
        {"start": 10 * US, "end": 20 * US, "correlation": 1},
        {"start": 50 * US, "end": 60 * US, "correlation": -1},
        {"start": 60 * US, "end": 70 * US, "correlation": 3, "stream": 9},  # starts at its end
    ]
    api = [{"start": 0, "end": 5 * US, "correlation": 1}, {"start": 55 * US, "end": 56 * US,
                                                          "correlation": 3}]  # fmt: skip
    a = attribute(make_trace(ops, api))
    (f,) = unlinked_ops(a)
    ev = f.evidence
    assert ev["ops_without_launch"] == 1 and ev["ops"] == 3
    assert (
        ev["distorts"] == {"idle_other_ns": 30 * US} == {"idle_other_ns": a.totals["idle_other_ns"]}
    )
    assert "1 of 3 GPU ops (33.3%) has no launch call" in f.title
    assert unlinked_ops(attribute(_late(0))) == []


def _drifting(step_drift: int, n: int = 64):
    """A kernel every ms, launched onto an idle GPU; its start after the call returned grows
    by `step_drift` per ms (the GPU clock runs slow against the host's)."""
    ops, api = [], []
    for i in range(n):
        t = i * MS
        api.append({"start": t, "end": t + 5 * US, "correlation": i + 1})
        s = t + 15 * US + i * step_drift
        ops.append({"start": s, "end": s + 20 * US, "correlation": i + 1})
    return make_trace(ops, api)


def test_a_trend_in_the_launch_to_start_delay_is_clock_drift():
    a = attribute(_drifting(2 * US))
    (f,) = clock_drift(a)
    w = f.evidence["worst"]
    span = 62 * (MS + 2 * US)  # ops 1..63 end host_bound gaps (op 0's call opens the window)
    assert w["drift_ns"] == pytest.approx(span * 2 * US / (MS + 2 * US), rel=0.02)
    assert w["ppm"] == pytest.approx(2 * US / (MS + 2 * US) * 1e6, rel=0.02)
    assert w["r2"] > 0.99 and abs(w["drift_ns"]) >= DRIFT_MIN_NS
    assert "the GPU and host clocks drift apart" in f.title
    assert set(f.evidence["distorts"]) == {"host_bound_ns", "launch_overhead_ns"}
    assert clock_drift(attribute(_drifting(0))) == []
    assert clock_drift(attribute(_drifting(200))) == []  # 12.4 µs in all: under the bound


def test_late_starts_of_different_delays_read_as_a_span():
    from pytimings.analysis.capture import _delays_text

    assert _delays_text(np.array([2 * MS, 149 * MS])) == "2.00 ms to 149.00 ms"
    assert _delays_text(np.array([149 * MS, 149 * MS + 1])) == "149.00 ms"
