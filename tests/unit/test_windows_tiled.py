"""Contract v3: the ``--by`` windows of one thread tile (never overlap). A GPU-bound
pipeline whose host runs ahead (host steps of 1 ms launching 5 ms kernels) is the case the
old rule (window = [range start, end of its GPU work)) counted several times over."""

from __future__ import annotations

import numpy as np
from helpers.synth import make_trace, shuffled

from pytimings.analysis.attribution import attribute
from pytimings.analysis.critical_path import critical_path
from pytimings.analysis.partition import LABELS
from pytimings.analysis.windows import tiled
from pytimings.session import Analysis

MS, US = 1_000_000, 1_000
STEPS = 8


def gpu_bound_pipeline():
    """Host step i is [i ms, i+1 ms) and launches one 5 ms kernel at i ms + 100 µs; the
    kernels run back to back on one stream from 120 µs on."""
    ops, api, ranges = [], [], []
    k_end = 0
    for i in range(STEPS):
        l0 = i * MS + 100 * US
        api.append({"start": l0, "end": l0 + 10 * US, "correlation": i + 1})
        k0 = max(l0 + 20 * US, k_end)
        k_end = k0 + 5 * MS
        ops.append({"start": k0, "end": k_end, "name": "gemm", "correlation": i + 1})
        ranges.append({"start": i * MS, "end": (i + 1) * MS, "name": "step", "payload": float(i)})
    return make_trace(ops, api, ranges)


def test_gpu_bound_windows_tile_and_sum_to_the_gpu_span():
    tr = gpu_bound_pipeline()
    a = attribute(tr, by="step")
    w = a.windows
    s, e = w["start_ns"], w["end_ns"]
    # independent: the kernels' own intervals, computed from the rows above
    k_s = np.sort(tr.gpu_ops["start"])
    k_e = np.sort(tr.gpu_ops["end"])
    assert s.tolist() == [0, *k_e[:-1].tolist()]  # step i starts where kernel i-1 ends
    assert e.tolist() == k_e.tolist()
    assert np.all(s[1:] >= e[:-1])  # they tile
    assert int(w["window_ns"].sum()) == int(k_e[-1]) - 0  # the GPU span from the first step
    busy = sum(int(w[f"{x}_ns"].sum()) for x in ("compute", "comm_overlapped", "comm_exposed"))
    assert busy == int(w["compute_ns"].sum()) == int((k_e - k_s).sum()) == STEPS * 5 * MS
    assert a.per_window_stats()["window_ns"]["p50"] == 5 * MS  # the GPU's period
    for i in range(len(w)):
        assert sum(int(w[f"{x}_ns"][i]) for x in LABELS) == int(w["window_ns"][i])
    # the host windows keep each range's own extent
    hw = a.host_windows()
    assert [(h["start_ns"], h["end_ns"]) for h in hw] == [
        (i * MS, (i + 1) * MS) for i in range(STEPS)
    ]
    assert Analysis(a).to_document()["host_totals"]["window_ns"] == STEPS * MS


def test_gpu_bound_critical_path_stays_on_the_gpu():
    a = attribute(gpu_bound_pipeline(), by="step")
    for k in range(2, STEPS + 1):
        links = critical_path(a, window=k).to_dict()["links"]
        kinds = {lk["kind"] for lk in links}
        assert "before window" not in kinds, links  # the old windows: ~80% "before window"
        gpu = sum(lk["end_ns"] - lk["start_ns"] for lk in links if lk["kind"] == "gpu_op")
        assert gpu == 5 * MS


def test_gpu_bound_what_if_is_exact_and_event_order_free():
    from pytimings.analysis.replay import replay

    a = attribute(gpu_bound_pipeline(), by="step")
    assert all(w.after_ns == w.before_ns for w in replay(a).windows)
    b = attribute(shuffled(gpu_bound_pipeline(), 3), by="step")
    for c in a.windows.columns:
        np.testing.assert_array_equal(a.windows[c], b.windows[c])


def test_tiling_rule_nested_ties_and_threads():
    # thread 0: [0, 100) with a nested [10, 20) and a later [30, 140); thread 1 untouched
    start = np.asarray([30, 0, 10, 5], dtype=np.int64)
    end = np.asarray([140, 100, 20, 50], dtype=np.int64)
    thread = np.asarray([0, 0, 0, 1], dtype=np.int32)
    rank = np.zeros(4, dtype=np.int16)
    s, e = tiled(start, end, rank, thread, ["a", "a", "a", "a"])
    assert list(zip(s.tolist(), e.tolist(), strict=True)) == [
        (100, 140),  # starts where [0, 100) ends
        (0, 100),
        (100, 100),  # nested, left with no length: an entry of length 0
        (5, 50),  # another thread: its own extent
    ]
    # equal starts: the shorter first, then the longer one from its end
    s, e = tiled(
        np.asarray([0, 0], dtype=np.int64), np.asarray([50, 20], dtype=np.int64),
        np.zeros(2, dtype=np.int16), np.zeros(2, dtype=np.int32), ["x", "x"],
    )  # fmt: skip
    assert (s.tolist(), e.tolist()) == ([20, 0], [50, 20])


def test_nested_selection_keeps_zero_length_entries():
    ops = [{"start": 10, "end": 80, "correlation": 1}]
    api = [{"start": 2, "end": 5, "correlation": 1}]
    ranges = [
        {"start": 0, "end": 100, "name": "layer"},
        {"start": 20, "end": 30, "name": "layer", "depth": 1},
    ]
    a = attribute(make_trace(ops, api, ranges), by="layer")
    w = a.windows
    assert sorted(zip(w["start_ns"].tolist(), w["end_ns"].tolist(), strict=True)) == [
        (0, 100),
        (100, 100),
    ]
    assert int(w["window_ns"].sum()) == 100 and int(w["compute_ns"].sum()) == 70
    assert len(a.host_windows()) == 2 and a.host_windows()[1]["window_ns"] == 10


def test_critical_path_follows_ops_other_threads_launched():
    """The step's last kernel waits in stream order for a long one launched by another
    thread (an autograd thread): the path walks through it as measured, not 'before
    window' (seen on the HTA ns_resolution trace: 98.9% 'before window (untraced)')."""
    ops = [
        {"start": 100 * US, "end": 900 * US, "name": "backward_gemm", "correlation": 1},
        {"start": 900 * US, "end": 1000 * US, "name": "optimizer_step", "correlation": 2},
    ]
    api = [
        {"start": 50 * US, "end": 60 * US, "correlation": 1, "thread": 1},
        {"start": 70 * US, "end": 80 * US, "correlation": 2, "thread": 0},
    ]
    ranges = [{"start": 0, "end": 90 * US, "name": "step", "thread": 0}]
    threads = [{"pid": 100, "tid": 100, "name": "main"}, {"pid": 100, "tid": 101, "name": "bw"}]
    a = attribute(make_trace(ops, api, ranges, threads), by="step")
    links = critical_path(a, window=1).to_dict()["links"]
    got = {(lk["kind"], lk["name"]): lk["end_ns"] - lk["start_ns"] for lk in links}
    assert ("before window", "") not in got, links
    assert got[("gpu_op", "backward_gemm")] == 800 * US
    assert got[("gpu_op", "optimizer_step")] == 100 * US
