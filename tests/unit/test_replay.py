"""The replay (pytimings.analysis.replay) on hand-built traces with known answers, and its
properties on random ones: removing nothing saves nothing, a saving never exceeds the time
removed, making anything faster never makes a window longer."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.synth import make_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimings.analysis.attribution import attribute
from pytimings.analysis.critical_path import critical_path
from pytimings.analysis.finding import ms
from pytimings.analysis.replay import parse_changes, replay, what_if
from pytimings.errors import UsageError
from pytimings.ingest.links import event_waits, launch_index
from pytimings.model.trace import SyncKind
from pytimings.report.analysis_text import render_attribution

US = 1_000


def _launch(api, ops, corr, l0, l1, k0, k1, name="k", stream=7):
    api.append({"start": l0 * US, "end": l1 * US, "correlation": corr})
    ops.append({"start": k0 * US, "end": k1 * US, "name": name, "correlation": corr,
                "stream": stream})  # fmt: skip


def _saving(trace, spec, by="step"):
    doc = what_if(attribute(trace, by=by), spec)
    assert doc["windows"], doc["excluded"]
    return sum(w["before_ns"] - w["after_ns"] for w in doc["windows"])


def test_a_host_stall_at_the_step_start_saves_all_of_it():
    ops, api = [], []
    _launch(api, ops, 1, 40, 45, 50, 90)
    ranges = [
        {"start": 0, "end": 50 * US, "name": "step"},
        {"start": 0, "end": 40 * US, "name": "stall", "depth": 1},
    ]
    tr = make_trace(ops, api, ranges)
    assert _saving(tr, "stall=0") == 40 * US
    assert _saving(tr, "stall=0.5") == 20 * US


def test_the_same_stall_hidden_under_a_long_kernel_saves_nothing():
    ops, api = [], []
    _launch(api, ops, 1, 0, 2, 3, 200, name="long")
    _launch(api, ops, 2, 42, 47, 201, 230, name="next")
    ranges = [
        {"start": 0, "end": 50 * US, "name": "step"},
        {"start": 2 * US, "end": 42 * US, "name": "stall", "depth": 1},
    ]
    tr = make_trace(ops, api, ranges)
    assert _saving(tr, "stall=0") == 0
    assert _saving(tr, "kernel:long=0.5") == (200 - 3) * US // 2


def test_two_streams_joined_by_an_event_wait():
    ops, api = [], []
    _launch(api, ops, 1, 0, 5, 10, 100, name="producer", stream=1)
    _launch(api, ops, 2, 12, 15, 102, 130, name="consumer", stream=2)  # waits for producer
    tr = make_trace(ops, api, [{"start": 0, "end": 20 * US, "name": "step"}])
    assert _saving(tr, "kernel:producer=0.5") == 45 * US
    cp = critical_path(attribute(tr, by="step"))
    kinds = [(lk["kind"], lk["name"]) for lk in cp["links"]]
    assert ("wait", "producer") in kinds and ("gpu_op", "consumer") in kinds
    assert sum(lk["share"] for lk in cp["links"]) == pytest.approx(1.0)


def _recorded_join(record_after_producer=True, wait=True):
    """'producer' on stream 1 (10-99 µs), cudaEventRecord of event 5 on stream 1 (corr 10),
    cudaStreamWaitEvent of stream 2 on it (corr 11), 'consumer' on stream 2 (100-130 µs);
    a short 'decoy' on stream 3 (92-100 µs) ends later than the producer, so that the
    inference (the latest end on another stream) would pick it."""
    ops, api = [], []
    if record_after_producer:
        _launch(api, ops, 1, 0, 5, 10, 99, name="producer", stream=1)
    api.append({"start": 6 * US, "end": 7 * US, "correlation": 10, "name": "cudaEventRecord"})
    if not record_after_producer:
        _launch(api, ops, 1, 7, 8, 10, 99, name="producer", stream=1)
    api.append({"start": 8 * US, "end": 9 * US, "correlation": 11, "name": "cudaStreamWaitEvent"})
    _launch(api, ops, 3, 90, 91, 92, 100, name="decoy", stream=3)
    _launch(api, ops, 2, 12, 15, 100, 130, name="consumer", stream=2)
    events = [{"stream": 1, "event": 5, "correlation": 10}]
    syncs = [
        {
            "start": 8 * US,
            "end": 9 * US,
            "kind": SyncKind.STREAM_WAIT_EVENT,
            "stream": 2,
            "event": 5,
            "correlation": 11,
        }
    ]
    rng = [{"start": 0, "end": 95 * US, "name": "step"}]
    return make_trace(ops, api, rng, syncs=syncs if wait else (), events=events)


def test_a_recorded_event_wait_is_read_not_inferred():
    tr = _recorded_join()
    waiting, awaited = event_waits(tr, launch_index(tr))
    names = [tr.strings[i] for i in tr.gpu_ops["name"]]
    assert [(names[w], names[a]) for w, a in zip(waiting, awaited, strict=True)] == [
        ("consumer", "producer")
    ]
    # halving the producer (89 µs) moves the consumer 44.5 µs earlier: it then ends at
    # 85.5 µs, before the decoy (100 µs), which ends the window
    assert _saving(tr, "kernel:producer=0.5") == 30 * US
    assert _saving(tr, "kernel:decoy=0.5") == 0


def test_an_event_never_waited_on_or_recorded_before_any_op_is_no_dependency():
    for tr in (_recorded_join(wait=False), _recorded_join(record_after_producer=False)):
        waiting, awaited = event_waits(tr, launch_index(tr))
        assert waiting.size == 0 and awaited.size == 0


def test_a_sync_call_ends_when_its_kernel_ends_and_the_host_moves_with_it():
    ops, api = [], []
    _launch(api, ops, 1, 0, 5, 10, 100, name="big")
    api.append({"start": 6 * US, "end": 102 * US, "name": "cudaStreamSynchronize"})
    _launch(api, ops, 2, 103, 108, 110, 120, name="after")
    tr = make_trace(ops, api, [{"start": 0, "end": 120 * US, "name": "step"}])
    assert _saving(tr, "kernel:big=0.5") == 45 * US
    links = critical_path(attribute(tr, by="step"))["links"]
    assert [lk["kind"] for lk in links if lk["kind"] in ("sync", "gpu_op")] == [
        "gpu_op", "sync", "gpu_op",
    ]  # fmt: skip


def test_a_graph_launch_replays_its_ops_in_stream_order():
    ops, api = [], []
    api.append({"start": 0, "end": 10 * US, "correlation": 1, "name": "cudaGraphLaunch"})
    for name, (s, e) in (("a", (12, 20)), ("b", (21, 30)), ("c", (31, 50))):
        ops.append({"start": s * US, "end": e * US, "name": name, "correlation": 1, "graph": 3})
    tr = make_trace(ops, api, [{"start": 0, "end": 11 * US, "name": "step"}])
    assert _saving(tr, "kernel:b=0") == 9 * US


def test_an_op_waiting_for_what_the_capture_does_not_show_excludes_its_window():
    ops, api = [], []
    _launch(api, ops, 1, 0, 5, 300, 310)  # 295 µs after its launch, nothing before it
    tr = make_trace(ops, api, [{"start": 0, "end": 10 * US, "name": "step"}])
    fid = replay(attribute(tr, by="step")).fidelity()
    assert (
        fid["windows"] == 0
        and "after everything the capture shows" in (fid["excluded"][0]["reason"])
    )


def test_bad_changes_are_one_line_errors():
    tr = make_trace([{"start": 0, "end": 10, "correlation": 1}], [{"start": 0, "end": 1,
                    "correlation": 1}], [{"start": 0, "end": 5, "name": "step"}])  # fmt: skip
    a = attribute(tr, by="step")
    for spec, msg in (
        ("step", "expected NAME=FACTOR"),
        ("step=x", "not a number"),
        ("step=-1", ">= 0"),
        ("nosuch=0", "no range or host activity"),
        ("kernel:nosuch=0", "no GPU op"),
    ):
        with pytest.raises(UsageError, match=msg):
            what_if(a, spec)
    assert [c.text for c in parse_changes("a=0, kernel:g*=0.8")] == ["a=0", "kernel:g*=0.8"]


@st.composite
def _steps(draw):
    """Random decode-like steps: host work, launches on two streams, a sync now and then."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    ops, api, ranges = [], [], []
    t, corr = 0, 0
    for step in range(int(rng.integers(1, 4))):
        s0 = t
        for _ in range(int(rng.integers(1, 6))):
            work = int(rng.integers(0, 50)) * US
            ranges.append({"start": t, "end": t + work, "name": "work", "depth": 1})
            t += work
            corr += 1
            l_end = t + int(rng.integers(1, 8)) * US
            api.append({"start": t, "end": l_end, "correlation": corr})
            stream = int(rng.integers(1, 3))
            prev = max((o["end"] for o in ops if o["stream"] == stream), default=0)
            k0 = max(l_end + int(rng.integers(0, 20)) * US, prev + int(rng.integers(0, 3)) * US)
            k1 = k0 + int(rng.integers(1, 80)) * US
            ops.append({"start": k0, "end": k1, "correlation": corr, "stream": stream,
                        "name": "k0" if corr == 1 else f"k{int(rng.integers(0, 3))}"})  # fmt: skip
            t = l_end
            if rng.random() < 0.3:  # wait for that kernel
                end = max(k1, t) + int(rng.integers(1, 5)) * US
                api.append({"start": t, "end": end, "name": "cudaStreamSynchronize"})
                t = end
        ranges.append({"start": s0, "end": t, "name": "step", "payload": float(step)})
    return make_trace(ops, api, ranges)


@settings(max_examples=60, deadline=None)
@given(_steps(), st.sampled_from(["work=0", "work=0.5", "kernel:k0=0.3", "kernel:k*=0"]))
def test_replay_properties(tr, spec):
    a = attribute(tr, by="step")
    base = replay(a)
    for w in base.windows:  # unchanged: every included window reproduced exactly
        assert w.excluded is not None or w.after_ns == w.before_ns
    doc = what_if(a, spec)
    for w in doc["windows"]:
        assert w["after_ns"] <= w["before_ns"]  # faster never makes a window longer
    if spec.startswith("work"):
        factor = float(spec.split("=")[1])
        rg = tr.ranges
        work = sum(
            int(e - s) for s, e, n in zip(rg["start"], rg["end"], rg["name"], strict=True)
            if tr.strings[n] == "work"
        )  # fmt: skip
        assert doc["total_saving_ns"] <= round(work * (1 - factor)) + len(rg)  # rounding
    slower = what_if(a, spec.rpartition("=")[0] + "=2")
    for w in slower["windows"]:  # and slower never shorter
        assert w["after_ns"] >= w["before_ns"]


def test_analyze_what_if_and_critical_path_on_the_bundled_example(tmp_path, capsys):
    import json

    from pytimings.cli import main

    out = tmp_path / "a.json"
    args = ["analyze", "--example", "-q", "--what-if", "scheduler=0", "--critical-path"]
    assert main([*args, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Replay: 16 windows reproduced" in text and "What if scheduler=0" in text
    doc = json.loads(out.read_text())
    assert doc["replay"]["windows"] == 16 and doc["replay"]["max_error"] == 0.0
    wi = doc["what_if"]
    assert wi["spec"] == "scheduler=0" and len(wi["windows"]) == 16
    assert set(wi["windows"][0]) == {"index", "name", "start_ns", "before_ns", "after_ns"}
    assert wi["total_saving_ns"] == sum(w["before_ns"] - w["after_ns"] for w in wi["windows"])
    cp = doc["critical_path"]
    assert set(cp["window"]) >= {"name", "start_ns", "end_ns"}
    assert {lk["kind"] for lk in cp["links"]} <= {
        "host", "launch", "submission", "gpu_op", "gpu_latency", "wait", "sync", "before window",
    }  # fmt: skip
    assert sum(lk["share"] for lk in cp["links"]) == pytest.approx(1.0)
    starts = [lk["start_ns"] for lk in cp["links"]]
    assert starts == sorted(starts) and cp["links"][0]["start_ns"] == cp["window"]["start_ns"]
    for bad, msg in (
        (["--window", "3"], "--window goes with --critical-path"),
        (["--critical-path", "--window", "99"], "windows 1-16"),
        (["--what-if", "nosuch=0"], "no range or host activity"),
    ):
        assert main(["analyze", "--example", "-q", *bad]) == 2
        assert msg in capsys.readouterr().err


def test_perfetto_draws_the_critical_path_as_linked_slices(tmp_path):
    import json

    from pytimings.report.perfetto import write_perfetto

    ops, api = [], []
    _launch(api, ops, 1, 0, 5, 10, 100, name="producer", stream=1)
    _launch(api, ops, 2, 12, 15, 102, 130, name="consumer", stream=2)
    tr = make_trace(ops, api, [{"start": 0, "end": 20 * US, "name": "step"}])
    cp = critical_path(attribute(tr, by="step"))
    stats = write_perfetto(tr, tmp_path / "t.json", critical_path=cp)
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    (pid,) = [
        e["pid"] for e in events
        if e["ph"] == "M" and e["name"] == "process_name"
        and e["args"]["name"].startswith("critical path: step")
    ]  # fmt: skip
    mine = [e for e in events if e["ph"] == "X" and e["pid"] == pid]
    assert len(mine) == len(cp["links"]) == stats.events["critical_path"]
    flows = [e for e in events if e.get("cat") == "critical_path"]
    assert len(flows) == 2 * (len(cp["links"]) - 1)
    assert [m["name"] for m in mine][-1] == "gpu_op: consumer"


@settings(max_examples=40, deadline=None)
@given(_steps())
def test_every_finding_carries_a_saving_within_its_loss(tr):
    a = attribute(tr, by="step")
    for f in a.findings():
        assert "saving_ns" in f.evidence
        if f.saving_ns is not None:
            assert 0 <= f.saving_ns <= f.loss_ns, f.title


def test_findings_rank_by_saving_and_h200_stalls_save_their_whole_loss():
    from pytimings.commands.example import example_path
    from pytimings.ingest import load

    a = attribute(load(str(example_path())), by="decode_step")
    found = a.findings()
    stalls = [f for f in found if f.layer == "scheduling"]
    assert len(stalls) >= 2
    for f in stalls:  # the GPU idles through each stall: removing it saves all of it
        assert f.saving_ns == f.loss_ns
    keyed = [f.loss_ns if f.saving_ns is None else f.saving_ns for f in found[1:]]
    assert keyed == sorted(keyed, reverse=True)  # after the hardware summary
    assert all("saving_ns" in d["evidence"] for d in a.to_dict()["findings"])


def test_a_stall_hidden_behind_another_device_saves_nothing():
    """The GPU 0 waits for the host (host_bound) while GPU 1 runs the op that ends the
    window: the loss is real on GPU 0, and removing it shortens nothing."""
    ops, api = [], []
    _launch(api, ops, 1, 0, 5, 6, 300, name="long")
    ops[-1]["device"] = 1
    _launch(api, ops, 2, 5, 6, 7, 20, name="a")
    _launch(api, ops, 3, 40, 45, 46, 60, name="b")  # the host stalls [20, 40) first
    tr = make_trace(ops, api, [{"start": 0, "end": 50 * US, "name": "step"}])
    a = attribute(tr, by="step")
    (f,) = [f for f in a.findings() if f.layer == "scheduling"]
    assert f.loss_ns > 0 and f.saving_ns == 0


@settings(max_examples=40, deadline=None)
@given(_steps(), st.integers(0, 2**16))
def test_replay_and_savings_do_not_depend_on_row_order(tr, seed):
    from helpers.synth import shuffled

    a, b = attribute(tr, by="step"), attribute(shuffled(tr, seed), by="step")
    for spec in ("work=0", "kernel:k*=0.5"):
        assert what_if(a, spec) == what_if(b, spec)
    assert critical_path(a) == critical_path(b)
    assert [f.saving_ns for f in a.findings()] == [f.saving_ns for f in b.findings()]


def test_work_of_several_threads_makes_savings_lower_bounds():
    """A stall on one thread while another thread's later launch ends the window: the
    replay keeps the other thread's work where it was, and says the saving is a floor."""
    ops, api = [], []
    _launch(api, ops, 1, 40, 45, 46, 60, name="mine")  # after a 40 µs stall on thread 0
    api.append({"start": 50 * US, "end": 55 * US, "correlation": 2, "thread": 1})
    ops.append({"start": 56 * US, "end": 90 * US, "name": "theirs", "correlation": 2, "stream": 8})
    threads = ({"pid": 100, "tid": 100, "name": "main"}, {"pid": 100, "tid": 101, "name": "bg"})
    ranges = [{"start": 0, "end": 40 * US, "name": "stall"}]
    tr = make_trace(ops, api, ranges, threads=threads)
    a = attribute(tr)
    doc = what_if(a, "stall=0")
    assert doc["note"] and "lower bound" in doc["note"]
    assert doc["total_saving_ns"] == 0  # 'theirs' on thread 1 still ends the window at 90
    hb = [f for f in a.findings() if f.layer == "scheduling"]
    assert all("lower bound" in f.evidence["saving_note"] for f in hb)
    # the text report says so beside the saving, as the JSON does
    text = " ".join(render_attribution(a, ["t"]).split())
    for f in hb:
        assert f"(fixing it saves {ms(f.saving_ns)}; {f.evidence['saving_note']})" in text


def test_a_loss_before_ops_of_another_thread_has_no_replayed_saving():
    """--by windows replay the ops launched inside their range on its thread (the GPU
    projection); a host stall before an op another thread launched is outside that, so
    its finding says so instead of claiming it saves nothing."""
    ops, api = [], []
    _launch(api, ops, 1, 0, 5, 6, 20, name="mine")
    api.append({"start": 60 * US, "end": 65 * US, "correlation": 2, "thread": 1})
    ops.append({"start": 66 * US, "end": 90 * US, "name": "theirs", "correlation": 2})
    threads = ({"pid": 100, "tid": 100, "name": "main"}, {"pid": 100, "tid": 101, "name": "bg"})
    ranges = [
        {"start": 0, "end": 100 * US, "name": "step"},
        {"start": 20 * US, "end": 60 * US, "name": "busy", "thread": 1},
    ]
    a = attribute(make_trace(ops, api, ranges, threads=threads), by="step")
    (f,) = [f for f in a.findings() if f.layer == "scheduling"]
    assert f.evidence["op_name"] == "theirs"
    assert f.saving_ns is None and "other than the windows' ranges" in f.evidence["saving_note"]
