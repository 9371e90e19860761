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
from pytimings.analysis.graph_capture import Captures
from pytimings.analysis.replay import parse_changes, replay, thread_handoffs, what_if
from pytimings.errors import UsageError
from pytimings.ingest.links import event_waits, launch_index, sync_waits
from pytimings.model.trace import ActivityKind, SyncKind
from pytimings.report.analysis_text import render_attribution
from pytimings.session import Analysis

US = 1_000


def _launch(api, ops, corr, l0, l1, k0, k1, name="k", stream=7):
    api.append({"start": l0 * US, "end": l1 * US, "correlation": corr})
    ops.append({"start": k0 * US, "end": k1 * US, "name": name, "correlation": corr,
                "stream": stream})  # fmt: skip


def _saving(trace, spec, by="step"):
    doc = what_if(attribute(trace, by=by), spec).to_dict()
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
    cp = critical_path(attribute(tr, by="step")).to_dict()
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
    links = critical_path(attribute(tr, by="step")).to_dict()["links"]
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
    fid = replay(attribute(tr, by="step")).fidelity().to_dict()
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
        ("self:=0", "nothing named after self:"),
        ("self:nosuch=0", "other forms: self:NAME, kernel:GLOB, comm:GLOB"),
        ("comm:*=0.5", r"no communication op .*\(the trace has none\)"),
        # the Python API refuses what the CLI refuses: a replay past int64 ns would wrap
        ("step=1e300", "past what int64 nanoseconds hold"),
        ("kernel:*=1e300", "past what int64 nanoseconds hold"),
    ):
        with pytest.raises(UsageError, match=msg):
            what_if(a, spec).to_dict()
    assert [c.text for c in parse_changes("a=0, kernel:g*=0.8, self:b=2, comm:*=0.5")] == [
        "a=0", "kernel:g*=0.8", "self:b=2", "comm:*=0.5",
    ]  # fmt: skip
    # a range whose name has a colon of its own is a name (Kineto's nccl:all_reduce)
    assert parse_changes("nccl:all_reduce=0")[0].kind == "inclusive"


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
    doc = what_if(a, spec).to_dict()
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
    slower = what_if(a, spec.rpartition("=")[0] + "=2").to_dict()
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
    assert wi["changes"] == [
        {"kind": "inclusive", "pattern": "scheduler", "factor": 0.0, "inclusive": True}
    ]
    assert set(wi["windows"][0]) == {
        "index", "name", "start_ns", "rank", "before_ns", "after_ns", "exact", "bound",
    }  # fmt: skip
    assert all(w["exact"] and w["bound"] == "exact" for w in wi["windows"])
    assert "saving (exact)" in text
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
    assert len(mine) == len(cp.links) == stats.events["critical_path"]
    flows = [e for e in events if e.get("cat") == "critical_path"]
    assert len(flows) == 2 * (len(cp.links) - 1)
    assert [m["name"] for m in mine][-1] == "gpu_op: consumer"


@settings(max_examples=40, deadline=None)
@given(_steps())
def test_every_finding_carries_a_saving_within_its_loss(tr):
    a = attribute(tr, by="step")
    for f in Analysis(a).findings:
        assert "saving_ns" in f.evidence
        if f.saving_ns is not None:
            assert 0 <= f.saving_ns <= f.loss_ns, f.title


def _memo_agrees(a):
    # each fix's saving with the memo the unchanged replay filled equals its saving from
    # replays that compute everything afresh
    from pytimings.analysis.savings import Savings

    fixes = [f.fix for f in Analysis(a).findings if f.fix is not None]
    sv = Savings(a)
    assert sv.memo or all(b.after_ns is None for b in sv.base)
    for fix in fixes:
        kept = sv.saving_ns(fix)
        memo, sv.memo = sv.memo, None
        assert sv.saving_ns(fix) == kept
        sv.memo = memo
    return len(fixes)


@settings(max_examples=40, deadline=None)
@given(_steps())
def test_savings_with_the_replay_memo_equal_fresh_replays(tr):
    _memo_agrees(attribute(tr, by="step"))
    _memo_agrees(attribute(tr))


def test_savings_with_the_replay_memo_equal_fresh_replays_on_the_example():
    from pytimings.commands.example import example_path
    from pytimings.ingest import load

    tr = load(str(example_path()))
    assert _memo_agrees(attribute(tr, by="decode_step")) >= 3
    assert _memo_agrees(attribute(tr)) >= 1


def test_findings_rank_by_saving_and_h200_stalls_save_their_whole_loss():
    from pytimings.commands.example import example_path
    from pytimings.ingest import load

    a = attribute(load(str(example_path())), by="decode_step")
    found = Analysis(a).findings
    stalls = [f for f in found if f.layer == "scheduling"]
    assert len(stalls) >= 2
    for f in stalls:  # the GPU idles through each stall: removing it saves all of it
        assert f.saving_ns == f.loss_ns
    keyed = [f.loss_ns if f.saving_ns is None else f.saving_ns for f in found[1:]]
    assert keyed == sorted(keyed, reverse=True)  # after the hardware summary
    assert all("saving_ns" in d["evidence"] for d in Analysis(a).to_document()["findings"])


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
    (f,) = [f for f in Analysis(a).findings if f.layer == "scheduling"]
    assert f.loss_ns > 0 and f.saving_ns == 0


@settings(max_examples=40, deadline=None)
@given(_steps(), st.integers(0, 2**16))
def test_replay_and_savings_do_not_depend_on_row_order(tr, seed):
    from helpers.synth import shuffled

    a, b = attribute(tr, by="step"), attribute(shuffled(tr, seed), by="step")
    for spec in ("work=0", "kernel:k*=0.5"):
        assert what_if(a, spec).to_dict() == what_if(b, spec).to_dict()
    assert critical_path(a).to_dict() == critical_path(b).to_dict()
    assert [f.saving_ns for f in Analysis(a).findings] == [
        f.saving_ns for f in Analysis(b).findings
    ]


def test_work_of_several_threads_makes_savings_lower_bounds():
    """A stall on one thread while another thread, busy meanwhile (it never falls quiet
    across the stall's end: no handoff), launches later and ends the window: the replay
    keeps the other thread's work where it was, and says the saving is a floor."""
    ops, api = [], []
    _launch(api, ops, 1, 40, 45, 46, 60, name="mine")  # after a 40 µs stall on thread 0
    api.append({"start": 50 * US, "end": 55 * US, "correlation": 2, "thread": 1})
    ops.append({"start": 56 * US, "end": 90 * US, "name": "theirs", "correlation": 2, "stream": 8})
    threads = ({"pid": 100, "tid": 100, "name": "main"}, {"pid": 100, "tid": 101, "name": "bg"})
    ranges = [{"start": 0, "end": 40 * US, "name": "stall"}]
    bg = [{"start": 10 * US, "end": 20 * US, "name": "poll", "thread": 1,
           "kind": ActivityKind.CPU_OP}]  # fmt: skip
    tr = make_trace(ops, api, ranges, threads=threads, host_ops=bg)
    assert thread_handoffs(tr).at.size == 0
    a = attribute(tr)
    doc = what_if(a, "stall=0").to_dict()
    assert doc["note"] and "lower bound" in doc["note"]
    assert doc["total_saving_ns"] == 0  # 'theirs' on thread 1 still ends the window at 90
    found = Analysis(a).findings
    hb = [f for f in found if f.layer == "scheduling"]
    assert hb and all("lower bound" in f.evidence["saving_note"] for f in hb)
    # a floor of nothing is no saving known: the finding ranks by its loss and says why
    # (issue 45: not 'fixing it saves 0.0 µs')
    assert all(f.saving_ns is None for f in hb)
    assert all(f.evidence["saving_note"].startswith("the replay shows 0.0 µs, a lower") for f in hb)
    text = " ".join(render_attribution(a, found, ["t"]).split())
    assert "fixing it saves 0.0 µs" not in text
    for f in hb:  # as the JSON says it: one line for all, or beside the finding
        assert f.evidence["saving_note"] in text


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
    (f,) = [f for f in Analysis(a).findings if f.layer == "scheduling"]
    assert f.evidence["op_name"] == "theirs"
    assert f.saving_ns is None and "other than the windows' ranges" in f.evidence["saving_note"]


def _scheduler_with_a_sleep(nested=False):
    """'step' 0-100 µs holds 'scheduler' 0-50 µs, inside it an OS sleep 5-45 µs; the
    step's one kernel is launched at 50 µs: the GPU waits for the host through it all."""
    ops, api = [], []
    _launch(api, ops, 1, 50, 55, 60, 90)
    ranges = [
        {"start": 0, "end": 100 * US, "name": "step"},
        {"start": 0, "end": 50 * US, "name": "scheduler", "depth": 1},
    ]
    if nested:  # the same name again inside it (a recursive scheduler)
        ranges.append({"start": 10 * US, "end": 20 * US, "name": "scheduler", "depth": 2})
    sleep = [{"start": 5 * US, "end": 45 * US, "name": "nanosleep", "kind": ActivityKind.OS}]
    return make_trace(ops, api, ranges, host_ops=sleep)


def test_a_name_scales_the_activity_and_what_is_inside_it_self_only_its_own_time():
    tr = _scheduler_with_a_sleep()
    a = attribute(tr, by="step")
    charged = {
        c["name"]: c["ns"] for c in Analysis(a).to_document()["totals"]["host_bound_by_range"]
    }
    # the whole range, the sleep in it included (its host_bound share: 50 µs)
    assert _saving(tr, "scheduler=0") == 50 * US == charged["scheduler"]
    assert _saving(tr, "scheduler=0.5") == 25 * US
    assert _saving(tr, "self:scheduler=0") == 10 * US  # 50 µs minus the 40 µs sleep
    assert _saving(tr, "self:nanosleep=0") == _saving(tr, "nanosleep=0") == 40 * US
    # where changes overlap their factors multiply: the self time goes, the sleep halves
    assert _saving(tr, "scheduler=0.5,self:scheduler=0") == 30 * US
    # a name nested in itself is scaled once, not once per level
    assert _saving(_scheduler_with_a_sleep(nested=True), "scheduler=0.5") == 25 * US
    doc = what_if(a, "self:scheduler=0,kernel:k=0.5").to_dict()
    assert doc["changes"] == [
        {"kind": "self", "pattern": "scheduler", "factor": 0.0, "inclusive": False},
        {"kind": "kernel", "pattern": "k", "factor": 0.5, "inclusive": False},
    ]
    assert doc["spec"] == "self:scheduler=0,kernel:k=0.5"


def _all_reduce(ranks=(0, 1)):
    """An all-reduce on two ranks: rank 0 arrives at 10 µs, rank 1 at 70 µs, both end at
    100 µs: rank 0 waits 60 µs for its peer inside it, each transfers for 30 µs."""
    ops, api = [], []
    name = "ncclKernel_AllReduce_RING_LL_Sum_float"
    for r, (l0, k0) in zip((0, 1), ((0, 10), (60, 70)), strict=True):
        if r in ranks:
            api.append({"start": l0 * US, "end": (l0 + 5) * US, "correlation": 1, "rank": r})
            ops.append({"start": k0 * US, "end": 100 * US, "name": name, "correlation": 1,
                        "rank": r})  # fmt: skip
    return make_trace(ops, api)


def test_comm_changes_scale_the_transfer_not_the_wait_for_peers():
    a = attribute(_all_reduce(), by=None)
    doc = what_if(a, "comm:*=0.5").to_dict()
    saving = {w["rank"]: w["before_ns"] - w["after_ns"] for w in doc["windows"]}
    assert saving == {0: 15 * US, 1: 15 * US}  # half of each rank's 30 µs transfer
    assert all(w["exact"] for w in doc["windows"]) and doc["note"] is None
    assert what_if(a, "comm:all_reduce=0").to_dict()["total_saving_ns"] == 60 * US
    assert what_if(a, "comm:ncclKernel_AllReduce*=0").to_dict()["total_saving_ns"] == 60 * US
    with pytest.raises(UsageError, match=r"no communication op .*kinds here: all_reduce"):
        what_if(a, "comm:all_gather=0.5").to_dict()
    # one rank alone: its wait is unknown, the whole duration is scaled: an upper bound
    one = what_if(attribute(_all_reduce(ranks=(0,)), by=None), "comm:*=0.5").to_dict()
    assert one["total_saving_ns"] == 45 * US
    assert [w["bound"] for w in one["windows"]] == ["upper bound"]
    assert "wait for peers" in one["note"]


def _sync_on_stream_1(kind=SyncKind.STREAM_SYNC, record=True):
    """'a' on stream 1 (10-50 µs) and 'b' on stream 2 (10-51 µs), then a synchronize of
    stream 1 (or of an event recorded after 'a') from 20 to 52 µs, then 'c' on stream 1
    (launched 53-55 µs, 60-100 µs). The inference would tie the call to 'b', the op that
    ended last inside it; the record says it waited for 'a'."""
    ops, api = [], []
    _launch(api, ops, 1, 0, 5, 10, 50, name="a", stream=1)
    api.append({"start": 5 * US, "end": 6 * US, "correlation": 9, "name": "cudaEventRecord"})
    _launch(api, ops, 2, 6, 8, 10, 51, name="b", stream=2)
    call = "cudaStreamSynchronize" if kind == SyncKind.STREAM_SYNC else "cudaEventSynchronize"
    api.append({"start": 20 * US, "end": 52 * US, "correlation": 10, "name": call})
    _launch(api, ops, 3, 53, 55, 60, 100, name="c", stream=1)
    sync = {"start": 20 * US, "end": 52 * US, "kind": kind, "correlation": 10,
            "stream": 1 if kind == SyncKind.STREAM_SYNC else -1,
            "event": 4 if kind == SyncKind.EVENT_SYNC else -1}  # fmt: skip
    return make_trace(
        ops, api, [{"start": 0, "end": 56 * US, "name": "step"}],
        syncs=[sync] if record else (), events=[{"stream": 1, "event": 4, "correlation": 9}],
    )  # fmt: skip


def test_a_synchronize_ends_when_the_op_its_record_names_ends():
    for kind in (SyncKind.STREAM_SYNC, SyncKind.EVENT_SYNC):
        tr = _sync_on_stream_1(kind)
        call, awaited, kinds = sync_waits(tr, launch_index(tr))
        assert [tr.strings[tr.gpu_ops["name"][k]] for k in awaited] == ["a"]
        assert list(kinds) == [kind] and list(tr.api_calls["correlation"][call]) == [10]
        assert replay(attribute(tr, by="step")).fidelity().to_dict()["max_error"] == 0.0
        # halving 'a' (40 µs) ends the call 20 µs earlier (2 µs after 'a', as measured):
        # the host, 'c' and the window's end move with it: 100 -> 80 µs
        assert _saving(tr, "kernel:a=0.5") == 20 * US, kind
        assert _saving(tr, "kernel:b=0.5") == 0, kind
    # without the record the call is tied to 'b', the last op to end inside it
    tr = _sync_on_stream_1(record=False)
    assert _saving(tr, "kernel:a=0.5") == 0 and _saving(tr, "kernel:b=0.5") > 0


def _dependencies(trace, by="step"):
    fid = replay(attribute(trace, by=by)).fidelity().to_dict()
    (w,) = fid["per_window"]
    assert fid["dependencies"] == w["dependencies"]
    return {k: v for k, v in w["dependencies"].items() if v}


def test_each_window_counts_its_dependencies_by_source():
    assert _dependencies(_recorded_join()) == {"stream_wait": 1}
    assert _dependencies(_recorded_join(wait=False)) == {"inferred": 1}  # read by its effect
    assert _dependencies(_sync_on_stream_1()) == {"stream_sync": 1}
    assert _dependencies(_sync_on_stream_1(SyncKind.EVENT_SYNC)) == {"event_sync": 1}
    assert _dependencies(_sync_on_stream_1(record=False)) == {"sync_inferred": 1}
    ops, api = [], []
    _launch(api, ops, 1, 0, 5, 10, 100)
    assert _dependencies(make_trace(ops, api, [{"start": 0, "end": 20 * US, "name": "step"}])) == {}


def _late_rank(steps=False):
    """An all-reduce on two ranks: rank 0 arrives at 20 µs (after 'pre', 10-20 µs), rank 1
    at 70 µs after a 60 µs host 'stall'; both end at 100 µs and run 'post' (100-110 µs).
    Rank 0 waits 50 µs for rank 1 inside it; each transfers for 30 µs. ``steps``: a 'step'
    range on each rank around its launches."""
    ar = "ncclKernel_AllReduce_RING_LL_Sum_float"
    ops, api = [], []
    for r, pid in ((0, 100), (1, 200)):
        at = {"rank": r, "pid": pid, "thread": r}
        if r == 0:
            calls = [(1, 0, 5, 10, 20, "pre"), (2, 6, 8, 20, 100, ar), (3, 9, 10, 100, 110, "post")]
        else:
            calls = [(2, 60, 65, 70, 100, ar), (3, 66, 67, 100, 110, "post")]
        for corr, l0, l1, k0, k1, name in calls:
            api.append({"start": l0 * US, "end": l1 * US, "correlation": corr, **at})
            ops.append({"start": k0 * US, "end": k1 * US, "name": name, "correlation": corr,
                        "rank": r, "pid": pid})  # fmt: skip
    threads = [{"pid": 100, "tid": 100, "name": "python3", "rank": 0},
               {"pid": 200, "tid": 200, "name": "python3", "rank": 1}]  # fmt: skip
    ranges = [{"start": 0, "end": 60 * US, "name": "stall", "rank": 1, "pid": 200, "thread": 1}]
    if steps:
        ranges += [
            {"start": 0, "end": 11 * US, "name": "step", "rank": 0, "pid": 100, "thread": 0},
            {"start": 0, "end": 70 * US, "name": "step", "rank": 1, "pid": 200, "thread": 1},
        ]
    return make_trace(ops, api, ranges, threads=threads)


def test_a_faster_rank_moves_the_ranks_it_meets_at_a_collective():
    a = attribute(_late_rank(), by=None)
    fid = replay(a).fidelity().to_dict()
    assert fid["windows"] == 2 and fid["max_error"] == 0.0
    assert [w["dependencies"]["collective"] for w in fid["per_window"]] == [1, 1]
    doc = what_if(a, "stall=0").to_dict()
    saving = {w["rank"]: w["before_ns"] - w["after_ns"] for w in doc["windows"]}
    # rank 1 reaches the all-reduce at 10 µs, rank 0 at 20 µs: both end at 20 + 30 µs and
    # run 'post' until 60 µs instead of 110 µs
    assert saving == {0: 50 * US, 1: 50 * US}
    # twice the bandwidth: half of the 30 µs transfer, nothing of rank 0's 50 µs wait
    doc = what_if(a, "comm:*=0.5").to_dict()
    assert {w["rank"]: w["before_ns"] - w["after_ns"] for w in doc["windows"]} == {
        0: 15 * US, 1: 15 * US,
    }  # fmt: skip
    # rank 0 arriving earlier only waits longer for rank 1
    assert what_if(a, "kernel:pre=0").to_dict()["total_saving_ns"] == 0
    # (rank 0 alone keeps its measured all-reduce duration: it would end 10 µs earlier)
    one = what_if(attribute(_late_rank(), by=None, ranks=[0]), "kernel:pre=0").to_dict()
    assert one["total_saving_ns"] == 10 * US


def test_findings_savings_replay_the_ranks_together():
    # the stall on rank 1 is what both ranks wait for: removing it ends the all-reduce at
    # 50 µs on both ranks (50 µs saved on each), where rank 1 replayed alone saved 60 µs
    # and rank 0 nothing; removing communication time saves only the transfers (rank 0
    # still waits for rank 1 until 70 µs): 30 µs on each rank, not the 110 µs of both
    # all-reduces' measured durations
    def saving(a, title):
        (f,) = [f for f in Analysis(a).findings if f.title.startswith(title)]
        return f.saving_ns

    both = attribute(_late_rank(), by=None)
    assert saving(both, "host_bound before kernel") == 2 * 50 * US
    assert saving(both, "comm_exposed is") == 2 * 30 * US
    alone = attribute(_late_rank(), by=None, ranks=[1])
    assert saving(alone, "host_bound before kernel") == 60 * US  # as measured


@st.composite
def _ranks(draw):
    """Two ranks running the same sequence of kernels and all-reduces (every 3rd op),
    each rank's host with its own random work before each launch; an all-reduce ends on
    both ranks at the later arrival plus a transfer time (measured as a real one would)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = int(rng.integers(3, 10))
    is_ar = np.arange(n) % 3 == 2
    dur = rng.integers(1, 40, size=n) * US
    ops, api, ranges = [], [], []
    t = [0, 0]
    last = [0, 0]
    for i in range(n):
        k0 = []
        for r in range(2):
            work = int(rng.integers(0, 30)) * US
            at = {"rank": r, "pid": 100 + 100 * r, "thread": r}
            ranges.append({"start": t[r], "end": t[r] + work, "name": "work", **at})
            t[r] += work
            l_end = t[r] + int(rng.integers(1, 6)) * US
            api.append({"start": t[r], "end": l_end, "correlation": i + 1, **at})
            k0.append(max(l_end + int(rng.integers(0, 10)) * US, last[r]))
            t[r] = l_end
        for r in range(2):
            k1 = max(k0) + int(dur[i]) if is_ar[i] else k0[r] + int(dur[i])
            name = "ncclAllReduce" if is_ar[i] else "k"
            ops.append({"start": k0[r], "end": k1, "correlation": i + 1, "rank": r,
                        "pid": 100 + 100 * r, "name": name})  # fmt: skip
            last[r] = k1
    threads = [{"pid": 100, "tid": 100, "name": "p", "rank": 0},
               {"pid": 200, "tid": 200, "name": "p", "rank": 1}]  # fmt: skip
    return make_trace(ops, api, ranges, threads=threads)


@settings(max_examples=60, deadline=None)
@given(_ranks(), st.sampled_from(["work", "comm:*", "kernel:k"]))
def test_ranks_replayed_together_keep_the_properties(tr, target):
    a = attribute(tr, by=None)
    fid = replay(a).fidelity().to_dict()
    assert fid["windows"] + len(fid["excluded"]) == 2
    assert fid["windows"] == 0 or fid["max_error"] == 0.0  # unchanged: exact
    for factor, faster in (("0.5", True), ("0", True), ("2", False)):
        for w in what_if(a, f"{target}={factor}").to_dict()["windows"]:
            assert (
                (w["after_ns"] <= w["before_ns"]) if faster else (w["after_ns"] >= w["before_ns"])
            )


@settings(max_examples=40, deadline=None)
@given(_ranks())
def test_savings_with_the_replay_memo_equal_fresh_replays_across_ranks(tr):
    # ranks replayed together (their collectives meet): the memo is per group of windows
    _memo_agrees(attribute(tr, by=None))
    _memo_agrees(attribute(_late_rank(), by=None))


def test_the_critical_path_crosses_to_the_rank_a_collective_waited_for():
    cp = critical_path(attribute(_late_rank(), by=None), window=1).to_dict()
    assert cp["window"]["rank"] == 0
    chain = [
        (lk["kind"], lk["name"], lk["start_ns"] // US, lk["end_ns"] // US) for lk in cp["links"]
    ]
    ar = "ncclKernel_AllReduce_RING_LL_Sum_float"
    assert chain == [
        ("host", "[rank 1] stall", 0, 60),
        ("launch", "[rank 1] cudaLaunchKernel", 60, 65),
        ("submission", "[rank 1] cudaLaunchKernel", 65, 70),
        ("gpu_op", ar, 70, 100),  # rank 0's transfer, after rank 1 arrived
        ("gpu_op", "post", 100, 110),
    ]


def test_the_nth_step_of_each_rank_is_replayed_with_the_others():
    a = attribute(_late_rank(steps=True), by="step")
    assert replay(a).fidelity().to_dict()["max_error"] == 0.0
    doc = what_if(a, "stall=0").to_dict()
    assert {w["rank"]: w["before_ns"] - w["after_ns"] for w in doc["windows"]} == {
        0: 50 * US, 1: 50 * US,
    }  # fmt: skip
    links = critical_path(a, window=1).to_dict()["links"]
    assert links[0]["name"] == "[rank 1] stall"


def _forked_graph_replay(ops=(), api=(), host_ops=()):
    """One graph launch (0-10 µs) whose graph forks a side stream for a collective and joins
    it: 'a' then 'b' (60-300 µs) on the main stream, 'ncclDevKernel_AllReduce' on the side
    stream starting 130 µs after 'a' ends, while 'b' runs (its node waited on 'a' and then
    for SMs 'b' held: an edge inside the graph the trace does not show), 'c' on the main
    stream joined after the collective; ``ops``, ``api``, ``host_ops``: more rows."""
    ops, api = list(ops), list(api)
    api.append({"start": 0, "end": 10 * US, "correlation": 1, "name": "cudaGraphLaunch"})
    nodes = (("a", 1, 12, 60), ("b", 1, 60, 300), ("ncclDevKernel_AllReduce", 2, 190, 400),
             ("c", 1, 402, 450))  # fmt: skip
    for name, stream, s, e in nodes:
        ops.append({"start": s * US, "end": e * US, "name": name, "correlation": 1,
                    "graph": 3, "stream": stream})  # fmt: skip
    return make_trace(ops, api, [{"start": 0, "end": 11 * US, "name": "step"}], host_ops=host_ops)


def test_a_graph_forking_a_side_stream_is_replayed_with_its_unread_edges_bounded():
    a = attribute(_forked_graph_replay(), by="step")
    fid = replay(a).fidelity().to_dict()
    assert fid["windows"] == 1 and fid["excluded"] == []
    (w,) = replay(a).windows
    assert w.after_ns == w.before_ns  # the unchanged replay is the measured window
    doc = what_if(a, "comm:*=0.5").to_dict()
    (row,) = doc["windows"]
    # the collective's 210 µs halve (one rank: all of it scaled as transfer) to end at 295
    # µs; 'c' starts 2 µs after it (the inferred join's gap) but not before 'b' ends (300
    # µs): it runs 300-348 µs, the window ends 102 µs earlier
    assert row["before_ns"] - row["after_ns"] == 102 * US
    assert row["bound"] == "estimate" and "graph windows" in doc["note"]
    # 'a' is not known to be the collective's edge: halving it moves only 'b' and the
    # stream after it ('c' still waits for the collective), a lower bound
    assert _saving(_forked_graph_replay(), "kernel:a=0.5") == 0


def _handed_off(b_also_busy: bool = False):
    """Thread 0 launches k0 (0-5 µs), loads (20-120), launches k1 (120-125) and falls
    quiet; thread 1, quiet until then, launches k2 (320-325), the trace's last op, on the
    same stream: thread 1 waited for thread 0 (PyTorch's main thread handing the backward
    pass to its autograd thread). ``b_also_busy``: thread 1 also works while thread 0
    loads, so it never falls quiet across thread 0's act and nothing is handed off."""
    threads = [{"pid": 100, "tid": 100, "name": "main"}, {"pid": 100, "tid": 101, "name": "bw"}]
    ops: list[dict] = []
    api: list[dict] = []
    _launch(api, ops, 1, 0, 5, 10, 20, name="k0")
    _launch(api, ops, 2, 120, 125, 130, 170, name="k1")
    _launch(api, ops, 3, 320, 325, 330, 370, name="k2")
    api[-1]["thread"] = 1
    host_ops = [{"start": 20 * US, "end": 120 * US, "name": "load", "thread": 0,
                 "kind": ActivityKind.CPU_OP}]  # fmt: skip
    if b_also_busy:
        host_ops += [{"start": s * US, "end": (s + 10) * US, "name": "poll", "thread": 1,
                      "kind": ActivityKind.CPU_OP} for s in range(0, 320, 40)]  # fmt: skip
    return make_trace(ops, api, threads=threads, host_ops=host_ops)


def test_a_thread_that_waited_for_another_moves_with_it():
    """Removing thread 0's load moves its launch 100 µs earlier; thread 1, which waited for
    it, moves with it, and so does the last op (before: thread 1 stayed, saving 0)."""
    tr = _handed_off()
    h = thread_handoffs(tr)
    assert list(zip(h.thread, h.at, h.src, h.src_at, strict=True)) == [(1, 320 * US, 0, 125 * US)]
    a = attribute(tr)
    assert replay(a).fidelity().to_dict()["max_error"] == 0.0  # a handoff alone moves nothing
    assert _saving(tr, "load=0", by=None) == 100 * US
    assert _saving(tr, "load=0.5", by=None) == 50 * US


def test_threads_working_side_by_side_hand_nothing_off():
    tr = _handed_off(b_also_busy=True)
    assert thread_handoffs(tr).at.size == 0
    assert _saving(tr, "load=0", by=None) == 0  # thread 1's launch stays where it was


def test_a_wait_for_device_work_the_trace_does_not_show_offers_no_saving():
    """The host sits 1 ms in cudaDeviceSynchronize while the GPU runs nothing the trace
    shows (work of another process, a graph the capture missed), then launches k1: the
    host_bound before k1 is that wait, which no host-side change shortens. Before, the
    finding offered all of it as a saving."""
    ops, api = [], []
    _launch(api, ops, 1, 0, 2, 3, 10, name="k0")
    api.append({"start": 20 * US, "end": 1020 * US, "correlation": 9,
                "name": "cudaDeviceSynchronize"})  # fmt: skip
    _launch(api, ops, 2, 1020, 1025, 1030, 1040, name="k1")
    tr = make_trace(ops, api, [{"start": 0, "end": 1100 * US, "name": "step"}])
    a = attribute(tr, by="step")
    found = Analysis(a).findings
    (f,) = [f for f in found if f.layer == "scheduling"]
    assert f.evidence["sync_wait"]["gpu_busy_ns"] == 0
    assert f.saving_ns is None
    assert f.evidence["saving_note"].startswith("no saving offered: the host waits in")
    text = " ".join(render_attribution(a, found, ["t"]).split())
    assert f"No saving shown: {f.evidence['saving_note']}" in text  # no finding has one


FORK_CALLS = (
    ("cudaStreamBeginCapture", None), ("cudaLaunchKernel", "a"), ("cudaEventRecord", None),
    ("cudaStreamWaitEvent", None), ("cudaLaunchKernel", "ncclDevKernel_AllReduce"),
    ("cudaEventRecord", None), ("cudaLaunchKernel", "b"), ("cudaStreamWaitEvent", None),
    ("cudaLaunchKernel", "c"), ("cudaStreamEndCapture", None),
)  # fmt: skip


def _forking_capture_rows(t0=0, named=True, ops_around=False):
    """The capture of _forked_graph_replay's graph at ``t0`` µs (FORK_CALLS): 'a' launched
    on the main stream, an event recorded after it and waited on by the side stream (the
    fork), the collective launched there, an event recorded after it, 'b' on the main
    stream, the main stream waiting on the collective's event (the join), then 'c'.
    ``named``: the capture trace holds the kernels; ``ops_around``: an op 'op_KERNEL'
    around each launch. Returns (GPU ops, api calls, host ops)."""
    api, ops, host = [], [], []
    for i, (call, kernel) in enumerate(FORK_CALLS):
        t = (t0 + i * 10) * US
        api.append({"start": t, "end": t + 5 * US, "correlation": 100 + i, "name": call})
        if kernel is not None and named:
            ops.append({"start": t + 6 * US, "end": t + 7 * US, "name": kernel,
                        "correlation": 100 + i})  # fmt: skip
        if kernel is not None and ops_around:
            host.append({"start": t - US, "end": t + 6 * US, "name": f"op_{kernel}"})
    return ops, api, host


def _forking_capture(named=True):
    ops, api, _ = _forking_capture_rows(named=named)
    return make_trace(ops, api)


def test_a_graph_forking_a_side_stream_replays_exactly_with_the_edges_its_capture_shows():
    caps = Captures()
    caps.add(_forking_capture(), "capture.json")
    a = attribute(_forked_graph_replay(), by="step")
    fid = replay(a, captures=caps).fidelity().to_dict()
    assert fid["windows"] == 1 and fid["excluded"] == []
    (w,) = replay(a, captures=caps).windows
    assert w.after_ns == w.before_ns and not w.graph_bound
    # the join read: 'c' waits for the collective (ending at 295 µs once halved) and 'b'
    # (300 µs), then its measured 2 µs after the later of them: 302-350 µs, 100 µs saved;
    # the bound is the one-rank comm change's alone
    doc = what_if(a, "comm:*=0.5", caps).to_dict()
    (row,) = doc["windows"]
    assert row["before_ns"] - row["after_ns"] == 100 * US
    assert row["bound"] == "upper bound" and "graph windows" not in (doc["note"] or "")
    # the fork read: halving 'a' (48 µs) moves 'b' and the collective 24 µs earlier (the
    # collective keeps its 130 µs after 'a'), so 'c' and the window end 24 µs earlier
    doc = what_if(a, "kernel:a=0.5", caps).to_dict()
    (row,) = doc["windows"]
    assert row["before_ns"] - row["after_ns"] == 24 * US and row["bound"] == "exact"
    # the critical path runs through the fork: 'a', the collective, then 'c'
    chain = [(lk["kind"], lk["name"]) for lk in critical_path(a, captures=caps).to_dict()["links"]]
    assert chain[2:] == [("gpu_op", "a"), ("wait", "a"), ("gpu_op", "ncclDevKernel_AllReduce"),
                         ("wait", "ncclDevKernel_AllReduce"), ("gpu_op", "c")]  # fmt: skip


def test_a_capture_naming_no_kernel_leaves_the_graph_bounded():
    # by kinds alone, any node could be any op of the replay: no edge is read
    caps = Captures()
    caps.add(_forking_capture(named=False), "capture.json")
    (w,) = replay(attribute(_forked_graph_replay(), by="step"), captures=caps).windows
    assert w.graph_bound and w.after_ns == w.before_ns


def test_a_trace_holding_its_capture_and_warmup_reads_the_edges_by_the_launching_ops():
    # a cudagraph-trees trace: the unnamed capture (ops around its launches), an eager
    # warmup launching each kernel inside the same op, and the replay: the replayed kernels
    # pair with the captured nodes through those ops
    ops, api, host = _forking_capture_rows(2000, named=False, ops_around=True)
    for i, kernel in enumerate(("a", "ncclDevKernel_AllReduce", "b", "c")):
        t = (1000 + 10 * i) * US
        host.append({"start": t, "end": t + 8 * US, "name": f"op_{kernel}"})
        _launch(api, ops, 500 + i, 1000 + 10 * i + 1, 1000 + 10 * i + 2,
                1000 + 10 * i + 3, 1000 + 10 * i + 4, name=kernel)  # fmt: skip
    a = attribute(_forked_graph_replay(ops, api, host), by="step")
    (w,) = replay(a).windows
    assert w.after_ns == w.before_ns and not w.graph_bound
    (row,) = what_if(a, "kernel:a=0.5").to_dict()["windows"]
    assert row["before_ns"] - row["after_ns"] == 24 * US and row["bound"] == "exact"
