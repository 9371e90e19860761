"""A forked child records and drains normally, whatever the parent's other threads were doing
(a drain releases the GIL while holding the recorder's lock: a child forked then used to hang
on its first drain), and starts empty, so parent and child never count a record twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import RunScript

FORKS = 50

STRESS = """
import json, os, signal, sys, threading, time
import pytimings as pt

FORKS, OUT = int(sys.argv[1]), sys.argv[2]
r = pt.Recorder()
stop = threading.Event()
bursts = [0, 0, 0]

def record(i):
    while not stop.is_set():
        for _ in range(200):
            with r.region(f"work{i}"):
                with r.region("inner"):
                    pass
        bursts[i] += 1
        time.sleep(0.0005)

def flush():  # every entry point that drains, back to back
    while not stop.is_set():
        r.flush()
        r.recording(sync=False)
        pt.summary(r)
        r.clear()

# CPython does not reset its import locks in a child: a thread inside a lazy import (numpy
# does some on first use) at fork time would hang the child there, whatever the recorder
# does. Do every first use once before the threads start.
with r.region("warm"):
    pass
pt.summary(r)
pt.save(os.path.join(OUT, "warm.pytimings"), r)
r.clear()
threads = [threading.Thread(target=record, args=(i,)) for i in range(3)]
threads.append(threading.Thread(target=flush))
for t in threads:
    t.start()
while not all(bursts):
    time.sleep(0.001)
codes, hung = [], 0
for k in range(FORKS):
    with r.region("forked_here"):  # open across the fork: recorded by the parent only
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                with r.region("child", payload=k):
                    pass
                rec = r.recording()
                names = [rec.strings[i] for i in rec.records["name"]]
                pt.summary(r)
                if k % 10 == 0:
                    pt.save(os.path.join(OUT, f"child{k}.pytimings"), r)
                code = 0 if names == ["child"] and rec.meta["open_regions"] == {} else 4
            finally:
                os._exit(code)
    deadline = time.monotonic() + 10
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            codes.append(os.waitstatus_to_exitcode(status))
            break
        if time.monotonic() > deadline:  # a hang: fail, never wait forever
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            hung += 1
            break
        time.sleep(0.002)
    if hung:
        break
stop.set()
for t in threads:
    t.join()
rec = r.recording()
names = [rec.strings[i] for i in rec.records["name"]]
print(json.dumps({"codes": codes, "hung": hung, "child_in_parent": names.count("child"),
                  "open": rec.meta["open_regions"]}))
"""


@pytest.mark.slow
def test_fork_while_other_threads_record_and_drain(run_script: RunScript, tmp_path: Path) -> None:
    out = run_script(
        f"import sys; sys.argv = ['x', '{FORKS}', {str(tmp_path)!r}]\n" + STRESS,
        PYTIMINGS_CUDART="/nonexistent",
    )
    assert out["hung"] == 0  # (before the fix: a child hung on its first drain)
    assert out["codes"] == [0] * FORKS  # each child saw exactly its own record, nothing open
    assert out["child_in_parent"] == 0 and out["open"] == {}
    from pytimings.ingest.recording_file import load_recording

    for k in range(0, FORKS, 10):
        child = load_recording(tmp_path / f"child{k}.pytimings")
        assert [child.strings[i] for i in child.records["name"]] == ["child"]
        assert child.records["payload"].tolist() == [k]


def test_a_region_open_across_fork_is_recorded_once(run_script: RunScript) -> None:
    """Parent and child both close the region that was open when the thread forked; only
    the parent records it, and neither holds the other's records."""
    out = run_script(
        """
        import json, os
        import pytimings as pt

        r = pt.Recorder()
        with r.region("before"):
            pass
        r.flush()  # drained into Python before the fork: the parent's too
        with r.region("before_pending"):
            pass
        with r.region("open_across"):
            pid = os.fork()
            if pid == 0:
                with r.region("child"):
                    pass
        rec = r.recording()
        names = sorted(rec.strings[i] for i in rec.records["name"])
        if pid == 0:
            ok = names == ["child"] and rec.meta["open_regions"] == {} and not rec.dropped
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"child": os.waitstatus_to_exitcode(status), "parent": names}))
        """,
        PYTIMINGS_CUDART="/nonexistent",
    )
    assert out == {"child": 0, "parent": ["before", "before_pending", "open_across"]}


def test_gpu_regions_after_fork_never_touch_the_parents_events(
    run_script: RunScript, fake_cudart: Path
) -> None:
    """Against the fake CUDA runtime: the parent's pending GPU records, pooled events and
    anchors are forgotten in the child (never queried or destroyed there); the child's own
    GPU region is timed with its own events and anchor."""
    out = run_script(
        """
        import ctypes, json, os
        import pytimings as pt
        from pytimings.model.recording import RecordFlag

        lib = ctypes.CDLL(os.environ["PYTIMINGS_CUDART"])
        lib.fake_cuda_counter.restype = ctypes.c_longlong
        lib.fake_cuda_counter.argtypes = [ctypes.c_char_p]
        r = pt.Recorder()
        for _ in range(3):
            with r.region("parent_gpu", stream=0):
                pass  # left pending: no flush before the fork
        destroyed = lib.fake_cuda_counter(b"destroyed")
        pid = os.fork()
        if pid == 0:
            gone = lib.fake_cuda_counter(b"destroyed") - destroyed
            with r.region("child_gpu", stream=0):
                pass
            rec = r.recording()
            names = [rec.strings[i] for i in rec.records["name"]]
            resolved = bool(rec.records["flags"][0] & RecordFlag.GPU_RESOLVED)
            ok = names == ["child_gpu"] and resolved and gone == 0
            ok = ok and len(rec.meta["gpu_anchors"]) == 1 and rec.meta["gpu_pending"] == 0
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        rec = r.recording()
        names = [rec.strings[i] for i in rec.records["name"]]
        flags = rec.records["flags"].tolist()
        print(json.dumps({"child": os.waitstatus_to_exitcode(status), "parent": names,
                          "resolved": [bool(f & RecordFlag.GPU_RESOLVED) for f in flags]}))
        """,
        PYTIMINGS_CUDART=str(fake_cudart),
    )
    assert out == {"child": 0, "parent": ["parent_gpu"] * 3, "resolved": [True] * 3}
