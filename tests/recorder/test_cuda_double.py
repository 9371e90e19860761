"""The CUDA path against the fake runtime in tests/native/fake_cudart.c (loaded in a fresh
process through PYTIMINGS_CUDART, or found already loaded): no synchronising call on the hot
path, pooled events, GPU times on the host clock, sampling, graph-capture fallback, anchors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pytimings as pt
from pytimings import _core
from pytimings.model.recording import NO_TIME, RecordFlag

RunScript = Callable[..., Any]  # the run_script fixture (conftest.py)
RunFake = Callable[..., Any]  # the run_fake fixture (below)

PRELUDE = """
import ctypes, json, os, time, threading, warnings
import numpy as np
import pytimings as pt
from pytimings.record.recorder import Recorder

def fake_lib(path=None):
    lib = ctypes.CDLL(path or os.environ["PYTIMINGS_CUDART"])
    lib.fake_cuda_counter.restype = ctypes.c_longlong
    lib.fake_cuda_counter.argtypes = [ctypes.c_char_p]
    lib.fake_cuda_launch.argtypes = [ctypes.c_size_t, ctypes.c_longlong]
    lib.fake_cuda_set_capturing.argtypes = [ctypes.c_size_t, ctypes.c_int]
    return lib

COUNTERS = ("created", "destroyed", "records", "records_while_capturing", "queries", "elapsed",
            "event_syncs", "stream_syncs", "device_syncs")

def counters(lib):
    return {k: lib.fake_cuda_counter(k.encode()) for k in COUNTERS}

def dump(rec):
    cols = {k: v.tolist() for k, v in rec.records.items()}
    cols["name"] = [rec.strings[i] for i in rec.records["name"]]
    return {"records": cols, "meta": rec.meta, "dropped": rec.dropped}
"""

LAUNCH_NS = 300_000  # the fake GPU's launch latency: dominates host noise in these checks


def rows(result: dict[str, Any], name: str) -> dict[str, np.ndarray]:
    cols = result["records"]
    sel = np.array(cols["name"]) == name
    return {k: np.asarray(v)[sel] for k, v in cols.items()}


@pytest.fixture
def fake_env(fake_cudart: Path) -> dict[str, str]:
    return {"PYTIMINGS_CUDART": str(fake_cudart), "FAKE_CUDA_LAUNCH_NS": str(LAUNCH_NS)}


@pytest.fixture
def run_fake(run_script: RunScript, fake_env: dict[str, str]) -> RunFake:
    """run_fake(body, **env) runs PRELUDE + ``body`` in a fresh interpreter against the fake
    runtime (``fake_env``, updated with ``env``)."""

    def run(body: str, **env: str) -> Any:
        return run_script(PRELUDE + body, **{**fake_env, **env})

    return run


def test_hot_path_never_synchronises_and_events_are_pooled(run_fake: RunFake) -> None:
    out = run_fake(
        """
r = Recorder(anchor_interval_s=0)
S = 0x1000
with r.region("warm", stream=S):
    pass
lib = fake_lib()
c0 = counters(lib)
for i in range(200):
    with r.region("k", kind="compute", stream=S, nbytes=1 << 20):
        lib.fake_cuda_launch(S, 50_000)
c1 = counters(lib)
r.flush()
c2 = counters(lib)
for i in range(200):
    with r.region("k", kind="compute", stream=S, nbytes=1 << 20):
        lib.fake_cuda_launch(S, 50_000)
c3 = counters(lib)
time.sleep(0.05)  # let the fake GPU drain the 10 ms queued above
with r.region("probe", stream=S):
    pass
rec = r.recording()
print(json.dumps({"status": pt.cuda_status(), "c": [c0, c1, c2, c3], **dump(rec)}))
"""
    )
    assert "(PYTIMINGS_CUDART)" in out["status"] and "CUDA 12.4" in out["status"]
    c0, c1, c2, c3 = out["c"]
    for a, b in ((c0, c1), (c2, c3)):  # two hot loops
        assert b["event_syncs"] == a["event_syncs"]
        assert b["stream_syncs"] == a["stream_syncs"] == 0
        assert b["device_syncs"] == a["device_syncs"] == 0
        assert b["queries"] == a["queries"]  # not even a non-blocking query
        assert b["records"] - a["records"] == 400
    assert c1["created"] - c0["created"] <= 400 + 8
    assert c3["created"] == c2["created"]  # the second loop reused the first loop's events
    assert c2["event_syncs"] > c1["event_syncs"]  # flush is where waiting happens

    k = rows(out, "k")
    assert len(k["name"]) == 400
    assert np.all(k["flags"] & RecordFlag.GPU_TIMED) and np.all(
        k["flags"] & RecordFlag.GPU_RESOLVED
    )
    assert np.all(k["stream"] == 0x1000) and np.all(k["nbytes"] == 1 << 20)
    dur = k["gpu_end_ns"] - k["gpu_start_ns"]
    assert np.all(dur >= 50_000 - 1_000)  # each region holds one 50 us kernel (float ms)
    order = np.argsort(k["start_ns"])
    gs, ge = k["gpu_start_ns"][order], k["gpu_end_ns"][order]
    assert np.all(gs[1:] >= ge[:-1] - 1_000)  # one stream: GPU intervals in issue order
    assert np.all(gs >= k["start_ns"][order])  # the GPU starts after the host launches

    probe = rows(out, "probe")  # idle GPU: queue delay = the fake's launch latency
    delay = int(probe["gpu_start_ns"][0] - probe["start_ns"][0])
    assert LAUNCH_NS - 250_000 < delay <= LAUNCH_NS + 10_000
    assert out["meta"]["gpu_pending"] == 0
    assert out["meta"]["gpu_anchors"][0]["uncertainty_ns"] < 100_000


def test_sample_every_times_every_nth_instance(run_fake: RunFake) -> None:
    out = run_fake(
        """
r = Recorder()
with r.region("warm", stream=7):
    pass
lib = fake_lib()
c0 = counters(lib)
for i in range(32):
    with r.region("sampled", stream=7, sample_every=16, payload=i):
        pass
for i in range(8):
    with r.region("quarter", stream=7, sample_every=4, payload=i):
        pass
c1 = counters(lib)
print(json.dumps({"c": [c0, c1], **dump(r.recording())}))
"""
    )
    c0, c1 = out["c"]
    assert c1["records"] - c0["records"] == 2 * (2 + 2)
    for name, every in (("sampled", 16), ("quarter", 4)):
        r = rows(out, name)
        timed = (r["flags"] & RecordFlag.GPU_RESOLVED) != 0
        assert sorted(r["payload"][timed].tolist()) == list(range(0, len(r["payload"]), every))
        assert np.all(r["flags"] & RecordFlag.HAS_STREAM)
        assert np.all(r["gpu_start_ns"][~timed] == NO_TIME)


def test_graph_capture_falls_back_to_host_with_one_notice(run_fake: RunFake) -> None:
    out = run_fake(
        """
r = Recorder()
lib = fake_lib()
CAP = 0x2000
with r.region("before", stream=CAP):
    pass
lib.fake_cuda_set_capturing(CAP, 1)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for i in range(3):
        with r.region("captured", stream=CAP):
            with r.region("inner", stream=CAP, kind="comm"):
                pass
lib.fake_cuda_set_capturing(CAP, 0)
with r.region("after", stream=CAP):
    pass
out = dump(r.recording())
out["warnings"] = [str(w.message) for w in caught]
out["categories"] = [w.category.__name__ for w in caught]
out["c"] = counters(lib)
print(json.dumps(out))
"""
    )
    assert len(out["warnings"]) == 1 and out["categories"] == ["RuntimeWarning"]
    assert "graph capture" in out["warnings"][0] and "'captured'" in out["warnings"][0]
    assert out["c"]["records_while_capturing"] == 0
    for name in ("captured", "inner"):
        r = rows(out, name)
        assert len(r["name"]) == 3
        assert np.all(r["flags"] & RecordFlag.GRAPH_CAPTURE)
        assert not np.any(r["flags"] & RecordFlag.GPU_TIMED)
        assert np.all(r["end_ns"] > r["start_ns"])  # host time still recorded
    for name in ("before", "after"):
        assert rows(out, name)["flags"][0] & RecordFlag.GPU_RESOLVED
    assert out["meta"]["capture_fallbacks"] == 6


def test_capture_notice_raises_under_error_filter_without_leaking_the_region(
    run_fake: RunFake,
) -> None:
    out = run_fake(
        """
warnings.simplefilter("error")
r = Recorder()
lib = fake_lib()
lib.fake_cuda_set_capturing(5, 1)
try:
    with r.region("captured", stream=5):
        pass
    raised = False
except RuntimeWarning:
    raised = True
with r.region("next"):  # the failed enter left nothing open: depth 0
    pass
print(json.dumps({"raised": raised, **dump(r.recording())}))
"""
    )
    assert out["raised"]
    assert out["records"]["name"] == ["next"] and out["records"]["depth"] == [0]


def test_drain_without_sync_leaves_running_work_pending(run_fake: RunFake) -> None:
    out = run_fake(
        """
r = Recorder()
lib = fake_lib()
with r.region("long", stream=9):
    lib.fake_cuda_launch(9, 300_000_000)  # 0.3 s of GPU work
s0 = counters(lib)["event_syncs"]
early = r.recording(sync=False)
s1 = counters(lib)["event_syncs"]
late = r.recording()
print(json.dumps({"early": dump(early), "late": dump(late), "syncs": s1 - s0}))
"""
    )
    assert out["syncs"] == 0
    assert out["early"]["records"]["name"] == []
    assert out["early"]["meta"]["gpu_pending"] == 1
    late = rows(out["late"], "long")
    assert late["flags"][0] & RecordFlag.GPU_RESOLVED
    assert late["gpu_end_ns"][0] - late["gpu_start_ns"][0] >= 300_000_000 - 100_000
    assert out["late"]["meta"]["gpu_pending"] == 0


def test_anchor_residual_reports_gpu_clock_drift(run_fake: RunFake) -> None:
    out = run_fake(
        """
r = Recorder(anchor_interval_s=0)
with r.region("a", stream=3):
    pass
r.flush()           # re-anchors
time.sleep(0.3)
with r.region("b", stream=3):
    pass
r.flush()           # re-anchors again, 0.3 s later
print(json.dumps(dump(r.recording())))
""",
        FAKE_CUDA_DRIFT_PPM="200",
    )
    anchors = out["meta"]["gpu_anchors"]
    assert len(anchors) >= 3 and anchors[0]["residual_ns"] is None
    i = max(range(1, len(anchors)), key=lambda j: anchors[j]["host_ns"] - anchors[j - 1]["host_ns"])
    last, prev = anchors[i], anchors[i - 1]  # the pair around the 0.3 s sleep
    span = last["host_ns"] - prev["host_ns"]
    assert span > 0.29e9
    expected = -span * 200e-6  # a fast GPU clock predicts the anchor late
    tolerance = last["uncertainty_ns"] + prev["uncertainty_ns"] + 2_000 + span * 2**-24
    assert abs(last["residual_ns"] - expected) <= tolerance


def test_threads_with_their_own_streams(run_fake: RunFake) -> None:
    out = run_fake(
        """
r = Recorder()
lib = fake_lib()
def work(i):
    for k in range(150):
        with r.region("t", stream=0x100 + i, payload=i):
            lib.fake_cuda_launch(0x100 + i, 1000)
        if k % 50 == 0:
            r.flush()
ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
print(json.dumps(dump(r.recording())))
"""
    )
    t = rows(out, "t")
    assert len(t["name"]) == 8 * 150
    assert np.all(t["flags"] & RecordFlag.GPU_RESOLVED)
    assert np.all(t["stream"] == 0x100 + t["payload"])
    assert np.all(t["gpu_end_ns"] - t["gpu_start_ns"] >= 1000 - 500)


def test_runtime_already_loaded_is_preferred(run_script: RunScript, fake_cudart: Path) -> None:
    out = run_script(
        PRELUDE
        + f"""
lib = fake_lib({str(fake_cudart)!r})   # as torch would have loaded it
r = Recorder()
with r.region("x", stream=1):
    pass
print(json.dumps({{"status": pt.cuda_status(), "available": pt.cuda_available(),
                  "floor": pt._core.event_record_floor_ns(1, 1000), **dump(r.recording())}}))
""",
        PYTIMINGS_CUDART="/nonexistent/libcudart.so",  # never consulted: a copy is loaded
    )
    assert "(already loaded)" in out["status"] and str(fake_cudart) in out["status"]
    assert out["available"] is True and out["floor"] > 0
    assert out["records"]["flags"][0] & RecordFlag.GPU_RESOLVED


def test_no_device_and_missing_runtime_degrade_to_host_timing(
    run_script: RunScript, fake_cudart: Path
) -> None:
    code = (
        PRELUDE
        + """
r = Recorder()
with r.region("x", stream=1):
    pass
try:
    pt._core.event_record_floor_ns(0, 10)
    floor_error = None
except RuntimeError as e:
    floor_error = str(e)
print(json.dumps({"status": pt.cuda_status(), "available": pt.cuda_available(),
                  "floor_error": floor_error, **dump(r.recording())}))
"""
    )
    no_dev = run_script(code, PYTIMINGS_CUDART=str(fake_cudart), FAKE_CUDA_DEVICES="0")
    assert no_dev["available"] is False and "no CUDA device" in no_dev["status"]
    assert no_dev["records"]["flags"][0] & RecordFlag.GPU_FAILED
    assert "not available" in no_dev["floor_error"]
    missing = run_script(code, PYTIMINGS_CUDART="/nonexistent/libcudart.so.12")
    assert missing["available"] is False
    assert missing["status"].startswith("PYTIMINGS_CUDART=/nonexistent/libcudart.so.12 could not")
    flags = missing["records"]["flags"][0]
    assert flags & RecordFlag.HAS_STREAM and not flags & (
        RecordFlag.GPU_TIMED | RecordFlag.GPU_FAILED
    )


def test_event_record_floor_without_cuda_raises() -> None:
    if pt.cuda_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        _core.event_record_floor_ns(0, 10)


def test_long_runs_without_flush_reuse_events(run_fake: RunFake) -> None:
    out = run_fake(
        """
r = Recorder()
lib = fake_lib()
c0 = counters(lib)
for i in range(6000):
    with r.region("loop", stream=4):
        pass
c1 = counters(lib)
print(json.dumps({"c": [c0, c1], **dump(r.recording())}))
""",
        FAKE_CUDA_LAUNCH_NS="2000",
    )
    c0, c1 = out["c"]
    assert c1["event_syncs"] == c0["event_syncs"]  # resolved with non-blocking queries only
    assert c1["created"] - c0["created"] <= 4096 + 64  # not 12000: finished events reused
    loop = rows(out, "loop")
    assert len(loop["name"]) == 6000
    assert np.all(loop["flags"] & RecordFlag.GPU_RESOLVED)


def test_exited_threads_destroy_their_events(run_fake: RunFake) -> None:
    out = run_fake(
        """
r = Recorder()
lib = fake_lib()
with r.region("main", stream=1):
    pass
r.flush()
c0 = counters(lib)
def work(i):
    for _ in range(3):
        with r.region("t", stream=0x300 + i):
            pass
ts = [threading.Thread(target=work, args=(i,)) for i in range(50)]
[t.start() for t in ts]; [t.join() for t in ts]
time.sleep(0.2)  # thread exit hooks run after join() returns
rec = r.recording()
rec = r.recording()  # the second drain releases what the first resolved
print(json.dumps({"c": [c0, counters(lib)], **dump(rec)}))
"""
    )
    c0, c1 = out["c"]
    created = c1["created"] - c0["created"]
    destroyed = c1["destroyed"] - c0["destroyed"]
    assert created >= 50 * 6  # each thread made its own events
    assert destroyed == created  # ...and all of them went away with it
    assert len(rows(out, "t")["name"]) == 150
