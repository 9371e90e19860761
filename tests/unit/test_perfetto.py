"""Perfetto / Chrome trace-event export: the format's rules, exact times, and the content
(every op, range and API call drawn once; attribution lanes equal the attribution)."""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from decimal import Decimal
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.recording_factory import make_recording
from helpers.synth import make_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimings.analysis.attribution import attribute
from pytimings.analysis.ops import CATEGORIES
from pytimings.analysis.partition import BUSY_LABELS, LABELS
from pytimings.cli import main
from pytimings.ingest import load
from pytimings.model.trace import ACTIVITY_KIND_NAMES, Trace
from pytimings.record import storage
from pytimings.report.perfetto import nested_lanes, write_perfetto
from pytimings.report.segments import label_segments
from pytimings.session import Analysis

EXAMPLE = (
    Path(__file__).resolve().parents[2] / "pytimings" / "examples" / "decode_16steps_h200.sqlite"
)


def _ns(ts: Any) -> int:
    """A trace-event timestamp (µs) in integer ns; fails if it is not a whole ns, or if
    Perfetto's reading of it (a double, ``llround(ts * 1000)``) would differ."""
    d = Decimal(str(ts)) * 1000
    assert d == d.to_integral_value(), ts
    assert round(float(str(ts)) * 1000.0) == int(d), ts
    return int(d)


def check_trace_events(path: Path) -> dict[str, Any]:
    """The trace-event format as Perfetto and chrome://tracing read it, checked strictly."""
    raw = path.read_text()
    doc = json.loads(raw, parse_float=Decimal)  # keep the written decimals exactly
    # Perfetto would read ts as ns under displayTimeUnit "ns", chrome://tracing as µs
    assert "displayTimeUnit" not in doc
    events = doc["traceEvents"]
    procs: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    tracks: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    slices: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    flows: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
    for ev in events:
        ph = ev["ph"]
        assert ph in ("X", "M", "i", "s", "f", "C"), ev
        if ph == "C":  # a counter (memory): numbers in args, a whole-ns time
            assert isinstance(ev["name"], str) and ev["pid"] in procs
            assert all(isinstance(v, int) for v in ev["args"].values()) and ev["args"]
            assert _ns(ev["ts"]) >= 0
        if ph == "M":
            assert ev["name"] in (
                "process_name",
                "process_sort_index",
                "thread_name",
                "thread_sort_index",
            )
            if ev["name"] == "process_name":
                assert ev["pid"] not in procs
                procs[ev["pid"]] = ev["args"]["name"]
            if ev["name"] == "thread_name":
                key = (ev["pid"], ev["tid"])
                assert key not in threads
                threads[key] = ev["args"]["name"]
        elif ph == "X":
            assert isinstance(ev["name"], str) and isinstance(ev["cat"], str)
            assert isinstance(ev["args"], dict)
            s, d = _ns(ev["ts"]), _ns(ev["dur"])
            assert s >= 0 and d >= 0
            tracks[(ev["pid"], ev["tid"])].append((s, s + d))
            slices[(ev["pid"], ev["tid"])].append(ev)
        elif ph in ("s", "f"):
            assert ph not in flows[ev["id"]], f"flow {ev['id']} has two {ph} events"
            assert ph == "s" or ev["bp"] == "e"
            flows[ev["id"]][ph] = ev
        elif ph == "i":  # findings (global) or a request's token instants (on its track)
            assert ev["s"] in ("g", "t") and _ns(ev["ts"]) >= 0
            assert ev["s"] == "g" or (ev["pid"], ev["tid"]) in threads
    tids = [tid for _, tid in threads]
    assert len(tids) == len(set(tids)), "thread ids are unique across processes"
    for key, sl in tracks.items():
        assert key in threads and key[0] in procs, f"unnamed track {key}"
        starts = [s for s, _ in sl]
        assert starts == sorted(starts), f"track {threads[key]} not in time order"
        stack: list[int] = []
        for s, e in sl:  # any two slices on a track: disjoint or nested
            while stack and stack[-1] <= s:
                stack.pop()
            assert not stack or e <= stack[-1], f"slices overlap on {threads[key]}"
            stack.append(e)
    # each flow binds to a slice on its track: a launch call to the op it launched
    indexed = {
        key: ([a for a, _ in tracks[key]], [b for _, b in tracks[key]], evs)
        for key, evs in slices.items()
    }
    for fid, ends in flows.items():
        assert set(ends) == {"s", "f"}, f"flow {fid} is not one s and one f"
        call = _innermost(indexed[(ends["s"]["pid"], ends["s"]["tid"])], _ns(ends["s"]["ts"]))
        op = _innermost(indexed[(ends["f"]["pid"], ends["f"]["tid"])], _ns(ends["f"]["ts"]))
        assert call["cat"] == "cuda_api" and op["cat"] in ("compute", "comm", "memory", "gpu")
        assert call["args"]["correlation"] == op["args"]["correlation"]
    return {
        "doc": doc,
        "procs": procs,
        "threads": threads,
        "tracks": tracks,
        "events": events,
        "flows": len(flows),
    }


def _innermost(track: tuple[list[int], list[int], list[dict[str, Any]]], ts: int) -> Any:
    """The deepest slice of a (time-ordered, nested) track holding ``ts``: the last one
    starting at or before ``ts`` that still holds it, as Perfetto binds a flow."""
    starts, ends, events = track
    i = bisect.bisect_right(starts, ts) - 1
    while i >= 0 and ends[i] < ts:
        i -= 1
    assert i >= 0, f"no slice at {ts}"
    return events[i]


def _by_track(info: dict[str, Any], predicate: Any) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for ev in info["events"]:
        if ev["ph"] == "X" and predicate(ev):
            key = (ev["pid"], ev["tid"])
            out[f"{info['procs'][key[0]]} / {info['threads'][key]}"].append(ev)
    return out


def _check_content(trace: Trace, path: Path, analysis: Analysis | None) -> dict[str, Any]:
    """``path`` holds ``trace`` and (when given) the attribution lanes, op categories and
    findings of ``analysis``."""
    a = analysis.attribution if analysis is not None else None
    info = check_trace_events(path)
    origin = info["doc"]["otherData"]["pytimings_origin_ns"]
    x = [ev for ev in info["events"] if ev["ph"] == "X"]
    ops = [ev for ev in x if ev["cat"] in ("compute", "comm", "memory", "gpu")]
    # every GPU op once, with its exact times and name
    got = sorted(
        (_ns(e["ts"]) + origin, _ns(e["ts"]) + _ns(e["dur"]) + origin, e["name"]) for e in ops
    )
    o = trace.gpu_ops
    want = sorted(
        (int(s), int(max(e, s)), trace.strings[int(n)])
        for s, e, n in zip(o["start"], o["end"], o["name"], strict=True)
    )
    assert got == want
    host_ranges = int(np.count_nonzero(trace.ranges["device"] < 0))
    assert sum(ev["cat"] == "range" for ev in x) == host_ranges
    assert sum(ev["cat"] == "cuda_api" for ev in x) == len(trace.api_calls)
    # every host activity once, exact times, its name and kind, on its own thread's track
    h, th = trace.host_ops, trace.threads
    got_h = sorted(
        (
            _ns(e["ts"]) + origin,
            _ns(e["ts"]) + _ns(e["dur"]) + origin,
            e["name"],
            e["cat"],
            info["threads"][(e["pid"], e["tid"])].split(" (overlap")[0],
        )
        for e in x
        if e["cat"] in ("cpu_op", "python", "os")
    )
    want_h = sorted(
        (
            int(st),
            int(max(en, st)),
            trace.strings[int(n)],
            ACTIVITY_KIND_NAMES[int(k)],
            f"{trace.strings[int(th['name'][t])] or 'thread'} (tid {int(th['tid'][t])})",
        )
        for st, en, n, k, t in zip(
            h["start"], h["end"], h["name"], h["kind"], h["thread"], strict=True
        )
    )
    assert got_h == want_h
    # a flow per GPU op whose correlation id has a call in its (rank, pid)
    api = trace.api_calls
    calls = set(
        zip(api["rank"].tolist(), api["pid"].tolist(), api["correlation"].tolist(), strict=True)
    )
    linked = sum(
        c >= 0 and (r, p, c) in calls
        for r, p, c in zip(
            o["rank"].tolist(), o["pid"].tolist(), o["correlation"].tolist(), strict=True
        )
    )
    assert info["flows"] == linked
    if a is not None:
        lanes = _by_track(info, lambda ev: ev["cat"] == "attribution")
        w = a.windows
        assert len(lanes) == len(w)
        for i in range(len(w)):
            r, d = int(w["rank"][i]), int(w["device"][i])
            lane = next(v for k, v in lanes.items() if k.startswith(f"rank {r} GPU {d}"))
            per = dict.fromkeys(LABELS, 0)
            for ev in lane:
                per[ev["name"]] += _ns(ev["dur"])
            assert per == {x: int(w[f"{x}_ns"][i]) for x in LABELS}
            # the lane tiles the window without gaps
            assert _ns(lane[0]["ts"]) + origin == int(w["start_ns"][i])
            ends = [_ns(ev["ts"]) + _ns(ev["dur"]) for ev in lane]
            assert [_ns(ev["ts"]) for ev in lane[1:]] == ends[:-1]
            assert ends[-1] + origin == int(w["end_ns"][i])
        # the op-category lane: per category the busy split of the op table, in all the
        # busy labels' time (the instants some GPU op runs), stretches never overlapping
        cats = _by_track(info, lambda ev: ev["cat"] == "op_category")
        table = analysis.ops
        assert len(cats) == len(w)
        for i in range(len(w)):
            r, d = int(w["rank"][i]), int(w["device"][i])
            lane = next(v for k, v in cats.items() if k.startswith(f"rank {r} GPU {d}"))
            per: dict[str, int] = defaultdict(int)
            for ev in lane:
                per[ev["name"]] += _ns(ev["dur"])
            assert per == {c["category"]: c["busy_ns"] for c in table.window_categories[i]}
            assert sum(per.values()) == sum(int(w[f"{x}_ns"][i]) for x in BUSY_LABELS)
            spans = sorted((_ns(ev["ts"]), _ns(ev["ts"]) + _ns(ev["dur"])) for ev in lane)
            assert all(b <= c for (_, b), (c, _) in pairwise(spans))
        assert all(ev["args"]["op_category"] in CATEGORIES for ev in ops)
        n_find = sum(ev["ph"] == "i" for ev in info["events"])
        assert n_find == len(analysis.findings)
    return info


def test_bundled_h200_capture(tmp_path: Path) -> None:
    trace = load(EXAMPLE)
    a = attribute(trace)
    out = tmp_path / "h200.json"
    analysis = Analysis(a)
    stats = write_perfetto(trace, out, a, ops=analysis.ops, findings=analysis.findings)
    info = _check_content(trace, out, analysis)
    assert stats.events["gpu_op"] == len(trace.gpu_ops)
    assert any(name.startswith("rank 0 GPU") for name in info["procs"].values())
    assert any("stream" in name for name in info["threads"].values())


def _overlapping_trace() -> Trace:
    """Ranges that overlap without nesting (start/end ranges), a range ending before it
    starts, and two ops overlapping on one stream."""
    ops = [
        {"start": 100, "end": 200, "correlation": 1, "name": "gemm_µ"},
        {"start": 150, "end": 260, "correlation": 2, "name": "ncclAllReduce"},
        {
            "start": 400,
            "end": 450,
            "correlation": 3,
            "kind": 1,
            "copy_kind": 1,
            "bytes": 64,
            "stream": 9,
            "name": "memcpy",
        },
    ]
    api = [
        {"start": 10, "end": 20, "correlation": 1},
        {"start": 30, "end": 40, "correlation": 2},
        {"start": 300, "end": 310, "correlation": 3, "name": "cudaMemcpyAsync"},
    ]
    ranges = [
        {"start": 0, "end": 500, "name": "step"},
        {"start": 5, "end": 35, "name": "a", "kind": 1, "depth": 1},
        {"start": 25, "end": 45, "name": "b", "kind": 1, "depth": 1, "payload": 2.5},
        {"start": 60, "end": 50, "name": "backwards", "depth": 1},
    ]
    return make_trace(ops, api, ranges)


def test_overlaps_go_to_extra_tracks(tmp_path: Path) -> None:
    trace = _overlapping_trace()
    a = attribute(trace)
    out = tmp_path / "t.json"
    analysis = Analysis(a)
    stats = write_perfetto(trace, out, a, ops=analysis.ops, findings=analysis.findings)
    info = _check_content(trace, out, analysis)
    assert stats.overlap_tracks >= 2  # range b vs a (and API calls), op 2 vs op 1
    assert any("(overlap 1)" in n for n in info["threads"].values())
    assert stats.clamped == {"ranges ending before they start (drawn zero-length)": 1}
    cats = {ev["name"]: ev["cat"] for ev in info["events"] if ev["ph"] == "X"}
    assert cats["ncclAllReduce"] == "comm" and cats["memcpy"] == "memory"
    raw = out.read_text(encoding="utf-8")
    assert '"gemm_µ"' in raw and "\\u" not in raw  # UTF-8, no \u escapes


def test_exact_nanoseconds_far_from_zero(tmp_path: Path) -> None:
    """Epoch-scale ns (as Kineto gives) survive: relative to the origin, exact decimals,
    and read back exactly as Perfetto reads them, 40 days after the origin too."""
    base = 1_700_000_000_123_456_789
    late = base + 40 * 86_400 * 10**9 + 5  # odd ns: 1.005-like decimals, far out
    ops = [
        {"start": base + 1, "end": base + 1_001, "correlation": 1},
        {"start": late, "end": late + 1_005, "correlation": 2},
    ]
    api = [
        {"start": base, "end": base + 7, "correlation": 1},
        {"start": late - 10, "end": late - 3, "correlation": 2},
    ]
    trace = make_trace(ops, api)
    out = tmp_path / "t.json"
    analysis = Analysis(attribute(trace))
    write_perfetto(trace, out, analysis.attribution, ops=analysis.ops, findings=analysis.findings)
    info = _check_content(trace, out, analysis)
    assert info["doc"]["otherData"]["pytimings_origin_ns"] == base
    x = [ev for ev in info["events"] if ev.get("cat") == "compute"]
    assert str(x[0]["ts"]) == "0.001" and str(x[0]["dur"]) == "1.000"


def test_label_segments_tile_each_window() -> None:
    trace = _overlapping_trace()
    a = attribute(trace)
    s, e, lab = label_segments(a, 0, 0)
    assert int(s[0]) == int(a.windows["start_ns"][0]) and int(e[-1]) == int(a.windows["end_ns"][0])
    assert np.array_equal(s[1:], e[:-1])
    assert set(LABELS[i] for i in lab) >= {"compute", "comm_overlapped", "host_bound"}


def test_recording_export(tmp_path: Path) -> None:
    """Recorder regions on their thread, their GPU time on per-stream tracks."""
    rows = [
        {"name": "decode_step", "kind": "compute", "start": 1000, "end": 9000},
        {
            "name": "attn",
            "kind": "compute",
            "start": 1100,
            "end": 1500,
            "depth": 1,
            "gpu": (1600, 2600),
            "stream": 0x7F00,
            "payload": 3,
        },
        {
            "name": "kv_offload",
            "kind": "memory",
            "start": 2000,
            "end": 2100,
            "depth": 1,
            "gpu": (2700, 3700),
            "stream": 0x7F10,
            "nbytes": 1 << 20,
        },
    ]
    rec = make_recording(rows, meta={"pid": 77, "rank": 1})
    path = storage.save(tmp_path / "run.pyt", rec)
    out = tmp_path / "rec.json"
    assert main(["export", str(path), "--perfetto", str(out), "-q"]) == 0
    trace = load(path)
    info = _check_content(trace, out, Analysis(attribute(trace)))
    assert info["flows"] == 2  # region call -> its GPU span
    assert main(["export", str(path), "--perfetto", str(out), "--no-flows"]) == 0
    assert check_trace_events(out)["flows"] == 0
    regions = _by_track(info, lambda ev: ev["cat"] == "range")
    assert [k for k in regions] == ["rank 1 host (pid 77) / MainThread (tid 1234)"]
    assert sorted(ev["name"] for ev in regions[next(iter(regions))]) == [
        "attn",
        "decode_step",
        "kv_offload",
    ]
    streams = _by_track(info, lambda ev: ev["cat"] in ("compute", "memory"))
    assert sorted(streams) == ["rank 1 GPU 0 / stream 0", "rank 1 GPU 0 / stream 1"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), max_size=40))
def test_nested_lanes_property(spans: list[tuple[int, int]]) -> None:
    start = np.array([s for s, _ in spans], dtype=np.int64)
    end = start + np.array([d for _, d in spans], dtype=np.int64)
    order = np.lexsort((-end, start))
    start, end = start[order], end[order]
    lanes = nested_lanes(start, end)
    for lane in np.unique(lanes):
        m = lanes == lane
        s, e = start[m], end[m]
        for i in range(s.size):
            for j in range(i + 1, s.size):
                disjoint = e[i] <= s[j] or e[j] <= s[i]
                nested = (s[i] <= s[j] and e[j] <= e[i]) or (s[j] <= s[i] and e[i] <= e[j])
                assert disjoint or nested


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(EXAMPLE)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["pytimings export: error: give an output: --perfetto OUT"]
    assert main(["export", str(tmp_path / "nope.sqlite"), "--perfetto", "x.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such file" in err[0]
    assert main(["export", str(EXAMPLE), "--perfetto", str(tmp_path / "no" / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not exist" in err[0]  # checked before loading


@pytest.mark.shared
@pytest.mark.parametrize(
    "rel",
    [
        "h200/decode_16steps_h200.pt.trace.json.gz",  # Kineto, epoch-scale µs
        "external/hta/with_gpu_user_annotation/step_based_trace_2543932.json.gz",
        "external/nsys_ai/h100_2gpu_1s.sqlite",  # two GPUs
        "external/nsys_extrap/concurrent.s8_profile8.sqlite",  # concurrent streams
        "external/hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        "external/tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",  # python_function
        "external/nsys_extrap/ex-gpu.s10.sqlite",  # OS runtime calls
    ],
)
def test_real_captures(shared_dir: Path, tmp_path: Path, rel: str) -> None:
    trace = load(shared_dir / "data" / rel)
    a = attribute(trace)
    out = tmp_path / "t.json"
    analysis = Analysis(a)
    write_perfetto(trace, out, a, ops=analysis.ops, findings=analysis.findings)
    _check_content(trace, out, analysis)


def test_gpu_annotations_without_ops_and_a_host_only_recording(tmp_path: Path) -> None:
    """A device with only GPU-side annotations gets its track and no attribution lane; a
    recording without GPU times exports its regions alone."""
    ops = [{"start": 100, "end": 200, "correlation": 1}]
    api = [{"start": 10, "end": 20, "correlation": 1}]
    ranges = [{"start": 90, "end": 150, "name": "gpu_note", "thread": -1, "device": 1, "kind": 4}]
    trace = make_trace(ops, api, ranges)
    a = attribute(trace)
    out = tmp_path / "t.json"
    analysis = Analysis(a)
    write_perfetto(trace, out, a, ops=analysis.ops, findings=analysis.findings)
    info = _check_content(trace, out, analysis)
    notes = _by_track(info, lambda ev: ev["cat"] == "gpu_annotation")
    assert list(notes) == ["rank 0 GPU 1 / GPU annotations"]
    rec = make_recording([{"name": "load", "kind": "host", "start": 5, "end": 50}])
    path = storage.save(tmp_path / "host.pyt", rec)
    out = tmp_path / "host.json"
    assert main(["export", str(path), "--perfetto", str(out)]) == 0
    info = _check_content(load(path), out, None)
    assert [ev["name"] for ev in info["events"] if ev["ph"] == "X"] == ["load"]


def test_request_tracks_hold_each_phase_and_token(tmp_path: Path) -> None:
    """One track per request of the recording's "requests" table: the request's slice,
    its phases nested in it at their exact ns, an instant per chunk; beside the regions."""
    from pytimings.model.requests import RequestRecord, records_to_arrow

    t0 = 7_000_000_123
    reqs = [
        RequestRecord("a", t0, t0 + 9_001, [t0 + 5_003, t0 + 7_005, t0 + 8_000], [1, 2, 1],
                      input_tokens=16, phases=[("queue", t0), ("prefill", t0 + 1_234),
                                               ("decode", t0 + 5_003)]),
        RequestRecord("b", t0 + 2_000, t0 + 4_000, error="exception", error_detail="E: x"),
        RequestRecord("c", t0 + 3_000, None, [t0 + 3_500], [1], phases=[("queue", t0 + 3_000)]),
    ]  # fmt: skip
    rec = make_recording(
        [{"name": "step", "kind": "compute", "start": t0 + 100, "end": t0 + 900}],
        meta={"pid": 5},
    )
    storage.register_table_provider("requests", lambda: records_to_arrow(reqs))
    try:
        path = storage.save(tmp_path / "eng.pyt", rec)
    finally:
        storage.unregister_table_provider("requests")
    out = tmp_path / "eng.json"
    assert main(["export", str(path), "--perfetto", str(out), "-q"]) == 0
    info = check_trace_events(out)
    origin = info["doc"]["otherData"]["pytimings_origin_ns"]
    assert origin == t0  # the earliest event is a request's start
    by_name = {name: key for key, name in info["threads"].items()}
    assert info["procs"][by_name["request a"][0]] == "requests (eng.pyt)"
    for r in reqs:
        key = by_name[f"request {r.req_id}"]
        sl = [ev for ev in info["events"] if ev["ph"] == "X" and (ev["pid"], ev["tid"]) == key]
        got = [(ev["name"], origin + _ns(ev["ts"]), origin + _ns(ev["ts"]) + _ns(ev["dur"]))
               for ev in sl]  # fmt: skip
        end = r.end_ns if r.end_ns is not None else max(r.chunk_ns)  # open: to its last event
        bounds = [t for _, t in r.phases[1:]] + ([end] if r.phases else [])
        want = [(r.req_id, r.start_ns, end)] + [
            (n, t, b) for (n, t), b in zip(r.phases, bounds, strict=True)
        ]
        assert sorted(got) == sorted(want)
        tokens = [ev for ev in info["events"] if ev["ph"] == "i" and (ev["pid"], ev["tid"]) == key]
        assert [origin + _ns(ev["ts"]) for ev in tokens] == r.chunk_ns
        assert [ev["args"]["tokens"] for ev in tokens] == r.chunk_tokens
    head = next(ev for ev in info["events"] if ev["ph"] == "X" and ev["name"] == "b")
    assert head["args"] == {"status": "error", "output_tokens": 0, "error": "exception: E: x"}
    assert any(ev["ph"] == "X" and ev["name"] == "step" for ev in info["events"])  # regions too
    # a recording of request timelines only (no region) exports them alone
    storage.register_table_provider("requests", lambda: records_to_arrow(reqs))
    try:
        only = storage.save(tmp_path / "only.pyt", make_recording([]))
    finally:
        storage.unregister_table_provider("requests")
    assert main(["export", str(only), "--perfetto", str(out), "-q"]) == 0
    info = check_trace_events(out)
    assert sorted(n for n in info["threads"].values()) == ["request a", "request b", "request c"]


def test_request_tracks_refuse_a_shifted_clock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two hosts' recordings put on one timeline move a rank's regions; its requests would
    not move with them, so the export says so instead of drawing them off by the shift."""
    from pytimings.model.requests import RequestRecord, records_to_arrow

    paths = []
    for rank, offset in ((0, 10**18), (1, 10**18 + 5_000_000)):
        meta = {"rank": rank, "wall_offset_ns": offset, "wall_offset_uncertainty_ns": 10,
                "boot_id": f"host-{rank}"}  # fmt: skip
        rec = make_recording([{"name": "step", "kind": "compute", "start": 1000, "end": 9000}],
                             meta=meta)  # fmt: skip
        if rank == 1:
            table = records_to_arrow([RequestRecord("a", 2000, 5000, [3000], [1])])
            storage.register_table_provider("requests", lambda t=table: t)
        try:
            paths.append(str(storage.save(tmp_path / f"rank{rank}.pyt", rec)))
        finally:
            storage.unregister_table_provider("requests")
    assert load(*paths).meta["clock_alignment"]["ranks"][1]["shift_ns"] != 0
    assert main(["export", *paths, "--perfetto", str(tmp_path / "x.json"), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rank 1 was moved onto another rank's clock" in err
    # alone, the recording with requests exports them on its own clock
    assert main(["export", paths[1], "--perfetto", str(tmp_path / "x.json"), "-q"]) == 0
