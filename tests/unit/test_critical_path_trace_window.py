"""The critical path of the whole-trace window (``analyze --critical-path`` without ``--by``,
issue 30 item 14): the walk starts from what ends the trace, a host thread's range or call as
well as a GPU op, so the links tile the window (the expected chains are worked out by hand);
before, a trace that ended on the host was one link ``before window``, 100%."""

from __future__ import annotations

import pytest
from helpers.synth import make_trace

from pytimings.analysis.attribution import attribute
from pytimings.analysis.critical_path import critical_path

US = 1_000


def _trace(step_range: bool = True):  # type: ignore[no-untyped-def]
    """Thread python3: range 'step' 0-150 µs (with ``step_range``), a launch 10-15 µs of
    kernel 'k' (20-100 µs), a cudaStreamSynchronize 16-101 µs, then host time to 150 µs;
    without the range a launch of 'tail' (130-150 µs) whose kernel runs 135-140 µs ends it."""
    api = [
        {"start": 10 * US, "end": 15 * US, "correlation": 1},
        {"start": 16 * US, "end": 101 * US, "name": "cudaStreamSynchronize"},
    ]
    ops = [{"start": 20 * US, "end": 100 * US, "name": "k", "correlation": 1, "stream": 7}]
    ranges = []
    if step_range:
        ranges.append({"start": 0, "end": 150 * US, "name": "step"})
    else:
        api.append({"start": 130 * US, "end": 150 * US, "correlation": 2})
        ops.append({"start": 135 * US, "end": 140 * US, "name": "tail", "correlation": 2})
    return make_trace(ops, api, ranges)


def _links(cp: dict) -> list[tuple[str, str, int, int]]:  # type: ignore[type-arg]
    return [(lk["kind"], lk["name"], lk["start_ns"], lk["end_ns"]) for lk in cp["links"]]


def test_a_trace_ending_in_a_host_range_is_walked_back_from_it() -> None:
    cp = critical_path(attribute(_trace())).to_dict()
    assert cp["window"]["name"] == "trace"
    assert (cp["window"]["start_ns"], cp["window"]["end_ns"]) == (0, 150 * US)
    # by hand: host in 'step' after the sync, the sync's wait for 'k', 'k', its submission
    # delay and launch call, the host time in 'step' before the launch
    assert _links(cp) == [
        ("host", "step", 0, 10 * US),
        ("launch", "cudaLaunchKernel", 10 * US, 15 * US),
        ("submission", "cudaLaunchKernel", 15 * US, 20 * US),
        ("gpu_op", "k", 20 * US, 100 * US),
        ("sync", "cudaStreamSynchronize", 100 * US, 101 * US),
        ("host", "step", 101 * US, 150 * US),
    ]
    assert sum(lk["share"] for lk in cp["links"]) == pytest.approx(1.0)
    # the same window named by its range walks the same chain
    assert _links(cp) == _links(critical_path(attribute(_trace(), by="step")).to_dict())


def test_a_trace_ending_in_a_launch_call_is_walked_back_from_it() -> None:
    cp = critical_path(attribute(_trace(step_range=False))).to_dict()
    assert cp["window"]["end_ns"] == 150 * US
    # the trace starts at the first launch (10 µs); walked back from the 'tail' launch call:
    # untraced host time back to the sync, then the same chain as above
    assert _links(cp) == [
        ("launch", "cudaLaunchKernel", 10 * US, 15 * US),
        ("submission", "cudaLaunchKernel", 15 * US, 20 * US),
        ("gpu_op", "k", 20 * US, 100 * US),
        ("sync", "cudaStreamSynchronize", 100 * US, 101 * US),
        ("host", "", 101 * US, 130 * US),
        ("host", "cudaLaunchKernel", 130 * US, 150 * US),
    ]
    assert sum(lk["share"] for lk in cp["links"]) == pytest.approx(1.0)
