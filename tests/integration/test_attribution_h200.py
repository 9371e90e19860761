"""Attribution on the real H200 captures in ../shared/data/h200 (and the bundled copy)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from pytimings._native import _intervals as iv
from pytimings.analysis.attribution import attribute
from pytimings.analysis.partition import LABELS
from pytimings.commands.example import example_path
from pytimings.session import Analysis

pytestmark = pytest.mark.shared


@pytest.fixture(scope="module")
def nsys_trace(shared_dir):
    from pytimings.ingest import load

    return load(shared_dir / "data/h200/decode_16steps_h200.sqlite")


@pytest.fixture(scope="module")
def steps(nsys_trace):
    return attribute(nsys_trace, by="decode_step")


def _sums_exactly(a):
    total = sum(a.windows[f"{x}_ns"] for x in LABELS)
    np.testing.assert_array_equal(total, a.windows["window_ns"])
    assert (a.windows["window_ns"] > 0).all()


def test_bundled_example_is_the_shared_capture(shared_dir):
    assert (
        example_path().read_bytes()
        == (shared_dir / "data/h200/decode_16steps_h200.sqlite").read_bytes()
    )


def test_labels_sum_exactly(nsys_trace, steps):
    _sums_exactly(steps)
    _sums_exactly(attribute(nsys_trace))
    _sums_exactly(attribute(nsys_trace, by="layer"))


def test_every_decode_step_shows_the_host_bound_scheduler_gap(nsys_trace, steps):
    """Steps 2-16 each have >= 0.9 ms of host_bound time while the launching thread is
    inside that step's ~1 ms 'scheduler' range (the workload sleeps 1 ms there). Step 1 is
    different in the data (not as the data README says): during its scheduler sleep the
    GPU is still draining the prefill's queued kernels, so that time is compute, not idle."""
    tr = nsys_trace
    w = steps.windows
    assert len(w) == 16
    g = steps.gaps
    rg = tr.ranges
    sched = np.flatnonzero(np.asarray(tr.strings, dtype=object)[rg["name"]] == "scheduler")
    assert sched.size == 16
    for i in range(16):
        m = (g.window_row == i) & (g.host_bound_end > g.g0)
        hs, he = g.g0[m], g.host_bound_end[m]
        inside = sched[
            (rg["start"][sched] >= w["start_ns"][i]) & (rg["end"][sched] <= w["end_ns"][i])
        ]
        assert inside.size == 1
        ov = int(iv.overlap_lengths(rg["start"][inside], rg["end"][inside], hs, he)[0])
        if i == 0:
            assert ov < 0.1e6
            # ops submitted before the sleep began keep the GPU busy through most of it
            early = steps.launches.start < rg["start"][inside[0]]
            early &= steps.launches.start != np.iinfo(np.int64).min
            assert tr.gpu_ops["end"][early].max() > rg["start"][inside[0]] + 0.9e6
        else:
            length = int(rg["end"][inside[0]] - rg["start"][inside[0]])
            assert ov >= 0.9e6 and ov >= 0.9 * length, (i, ov, length)


def test_findings_surface_the_per_step_host_stall_before_one_kernel(steps):
    """From the third step on, the host stalls ~30 ms before the cuDNN SDPA kernel. The
    top scheduling finding names that kernel, the windows, the ranges the host thread was
    in and the CUDA API calls it made meanwhile."""
    f = next(x for x in Analysis(steps).findings if x.layer == "scheduling")
    e = f.evidence
    assert "sdpa" in e["op_name"] and "flash_fprop" in e["op_name"]
    assert e["gaps"] == 14 and e["window_rows"] == list(range(2, 16))
    assert 20e6 < e["median_ns"] < 50e6
    # the innermost activity of the contract's host attribution over these gaps: the
    # 'layer' range's self time (nsys has no aten ops), in every gap
    top = e["host_activities"][0]
    assert (top["kind"], top["name"], top["gaps"]) == ("range", "layer", 14)
    assert top["window_rows"] == list(range(2, 16)) and top["share"] > 0.9
    # the same charges as the contract's per-window lists, which hold these gaps and more
    per_window = sum(
        x["ns"]
        for w in Analysis(steps).to_document()["windows"][2:16]
        for x in w["host_bound_by_activity"]
        if (x["kind"], x["name"]) == ("range", "layer")
    )
    assert top["ns"] <= per_window < top["ns"] + 0.05 * e["total_ns"]
    assert e["sync_wait"] is None
    assert "14 of 16 decode_step windows (3-16)" in f.title
    assert "is in range 'layer' 96.9% (409.33 ms in 14 gaps, 14 windows)" in f.title
    sched = [x for x in Analysis(steps).findings if "in range 'scheduler'" in x.title]
    assert sched and sched[0].evidence["at_window_start"]
    assert 0.9e6 < sched[0].evidence["median_ns"] < 1.5e6


def test_nsys_stats_agree_on_kernel_time(shared_dir, nsys_trace):
    """The GPU busy time of kernels equals the union of the kernel rows nsys stats sums."""
    import csv

    with open(shared_dir / "data/h200/nsys_stats/decode_16steps_h200_cuda_gpu_kern_sum.csv") as f:
        rows = list(csv.DictReader(f))
    col = next(c for c in rows[0] if c.startswith("Total Time"))
    total_stats = sum(int(float(r[col])) for r in rows)
    ops = nsys_trace.gpu_ops
    k = ops["kind"] == 0
    assert int((ops["end"][k] - ops["start"][k]).sum()) == total_stats
    a = attribute(nsys_trace)
    busy = a.totals["compute_ns"] + a.totals["comm_overlapped_ns"] + a.totals["comm_exposed_ns"]
    assert busy <= total_stats  # union of kernels (plus comm copies) never exceeds their sum


def test_cli_example_and_json(tmp_path):
    out = tmp_path / "a.json"
    r = subprocess.run(
        [sys.executable, "-m", "pytimings.cli", "analyze", "--example", "--json", str(out)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert "Where the time went" in r.stdout and "Findings" in r.stdout
    assert "cudnn_generated_fort_native_sdpa" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["schema"] == "pytimings.attribution/3" and len(doc["windows"]) == 16
    assert doc["totals"]["window_ns"] == sum(w["window_ns"] for w in doc["windows"])


def test_cli_by_matching_nothing_exits_2_with_closest_names():
    r = subprocess.run(
        [sys.executable, "-m", "pytimings.cli", "analyze", "--example", "--by", "decode_stp"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    line = r.stderr.strip()
    assert "\n" not in line and "closest range names: decode_step" in line


def test_kineto_twin_names_the_cudnn_attention_op_holding_the_host_stall(shared_dir):
    """The Kineto capture of the same workload has aten ops and no step ranges: over the
    whole trace, the top host-bound finding names aten::_cudnn_attention_forward, the op
    the host thread is inside for ~90% of all host_bound time."""
    from pytimings.ingest import load

    tr = load(shared_dir / "data/h200/decode_16steps_h200.pt.trace.json.gz")
    a = attribute(tr)
    f = next(x for x in Analysis(a).findings if x.layer == "scheduling")
    e = f.evidence
    assert "sdpa" in e["op_name"] and e["gaps"] == 14
    top = e["host_activities"][0]
    assert (top["kind"], top["name"]) == ("cpu_op", "aten::_cudnn_attention_forward")
    assert top["share"] > 0.99 and top["gaps"] == 14
    assert "is in cpu_op 'aten::_cudnn_attention_forward' 99.9%" in f.title
    totals = Analysis(a).to_document()["totals"]
    first = totals["host_bound_by_activity"][0]
    assert first["name"] == "aten::_cudnn_attention_forward"
    assert 0.85 < first["ns"] / totals["host_bound_ns"] < 0.95
    # independently: those ops' extents on the launching thread cover at least that time
    g = a.gaps
    rows = f.fix.host_bound
    thread = int(a.launches.thread[g.op[rows[0]]])
    ho = tr.host_ops
    mine = np.flatnonzero(
        (ho["thread"] == thread) & (np.asarray(tr.strings, dtype=object)[ho["name"]]
                                    == "aten::_cudnn_attention_forward")
    )  # fmt: skip
    mine = mine[np.argsort(ho["start"][mine], kind="stable")]
    us, ue = iv.union(ho["start"][mine], ho["end"][mine])
    order = np.argsort(g.g0[rows], kind="stable")
    gs, ge = iv.union(g.g0[rows][order], g.host_bound_end[rows][order])
    assert int(iv.overlap_lengths(gs, ge, us, ue).sum()) >= top["ns"]


def test_nsys_and_kineto_captures_agree_on_kernel_time(shared_dir, nsys_trace):
    """Two runs of one workload, two formats: the GPU-time labels agree within 5%."""
    from pytimings.ingest import load

    k = attribute(load(shared_dir / "data/h200/decode_16steps_h200.pt.trace.json.gz")).totals
    n = attribute(nsys_trace).totals
    _sums = [("compute_ns",), ("compute_ns", "comm_overlapped_ns", "comm_exposed_ns", "memory_ns")]
    for labels in _sums:
        kv, nv = sum(k[x] for x in labels), sum(n[x] for x in labels)
        assert abs(kv - nv) <= 0.05 * nv, (labels, kv, nv)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device", "3"], "device 3 not in the trace; it has devices 0"),
        (["--rank", "1"], "rank 1 not in the trace; it has ranks 0"),
        # checked before loading (it used to fail after the whole report was printed)
        (
            ["--json", "/nonexistent/dir/a.json"],
            "--json /nonexistent/dir/a.json: directory /nonexistent/dir does not exist",
        ),
        (["extra.sqlite"], "--example reads the bundled capture; give no TRACE with it"),
    ],
)
def test_cli_bad_arguments_exit_2_with_one_line(args, message):
    r = subprocess.run(
        [sys.executable, "-m", "pytimings.cli", "analyze", "--example", *args],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_cli_whole_trace_and_device_filter(tmp_path):
    out = tmp_path / "w.json"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytimings.cli",
            "analyze",
            str(example_path()),
            "--device",
            "0",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert [w["name"] for w in doc["windows"]] == ["trace"]
    assert set(doc["totals"]) == {
        "window_ns",
        *(f"{x}_ns" for x in LABELS),
        "host_bound_by_activity",
        "host_bound_by_range",
    }


def test_kineto_host_view_names_the_aten_op_of_each_long_stall(shared_dir, steps):
    """The Kineto capture of the workload has cpu_ops (and no decode_step ranges: NVTX is
    not in Kineto traces). Each of its 14 long host stalls (> 10 ms of host_bound before
    the cuDNN SDPA kernel) is charged, almost all of it, to the aten operator the launching
    thread was inside: aten::_cudnn_attention_forward. The nsys capture, with no cpu_ops,
    can only name the NVTX range (layer)."""
    from pytimings.analysis.host import HostActivities, combined
    from pytimings.ingest import load

    tr = load(shared_dir / "data/h200/decode_16steps_h200.pt.trace.json.gz")
    a = attribute(tr)
    g = a.gaps
    long = np.flatnonzero(g.host_bound_end - g.g0 > 10e6)
    assert long.size == 14
    names = {tr.strings[i] for i in tr.gpu_ops["name"][g.op[long]]}
    assert len(names) == 1 and "sdpa" in names.pop()
    thread = a.launches.thread[g.op[long]]
    ((_, acts),) = HostActivities.per_thread(tr, g.g0[long], g.host_bound_end[long], thread)
    c = combined(  # per stall: largest first
        [acts.charge(g.g0[long], g.host_bound_end[long], np.arange(long.size, dtype=np.int64))],
        acts.name_rank,
    )
    for i in range(long.size):
        mine = c.take(np.flatnonzero(c["row"] == i))
        top = tr.strings[int(mine["name"][0])]
        assert top == "aten::_cudnn_attention_forward", (i, top)
        assert mine["ns"][0] >= 0.95 * mine["ns"].sum()
    doc = Analysis(a).to_document()
    top = doc["totals"]["host_bound_by_activity"][0]
    assert (top["kind"], top["name"]) == ("cpu_op", "aten::_cudnn_attention_forward")
    # the nsys capture of the same workload names the range its thread was in
    nsys = Analysis(steps).to_document()["totals"]["host_bound_by_activity"][0]
    assert (nsys["kind"], nsys["name"]) == ("range", "layer")
