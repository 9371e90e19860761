"""The memory layer against independent recomputations: every Kineto trace in ../shared with
[memory] events walked here event by event; the Nsight export with memory usage events
re-read with sqlite3; snapshot pickles written here (and one that tries to run code);
real CPU captures with a planted leak and without; the growth test's false-positive rate."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import sqlite3
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pytimings as pt
from pytimings.analysis.memory import GROWTH_ALPHA, analyze_memory, memory_findings
from pytimings.console.text import duration
from pytimings.errors import TraceFormatError
from pytimings.model.trace import MemEventKind
from pytimings.report.memory_text import render_memory
from pytimings.session import Analysis
from pytimings.stats import mann_kendall

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
HOST_CATS = {  # category -> the contract's kind order (lower: innermost on ties)
    "cuda_runtime": 0, "cuda_driver": 0, "cpu_op": 2, "Operator": 2, "python_function": 3,
    "user_annotation": 4,
}  # fmt: skip
KIND_NAME = {0: "cuda_api", 2: "cpu_op", 3: "python", 4: "range"}


def _memory_traces() -> list[Path]:
    if not SHARED.is_dir():
        return []
    out = []
    for p in sorted(SHARED.rglob("*.json*")):
        opener: Any = gzip.open if p.name.endswith(".gz") else open
        if p.stat().st_size < 8 << 20:
            with opener(p, "rb") as f:
                if b'"[memory]"' in f.read():
                    out.append(p)
    return out


def _ns(x: Decimal) -> int:
    return int((x * 1000).to_integral_value())


def _walk(path: Path) -> dict[tuple[int, int], dict[str, Any]]:
    """Per (device type, device id): peak, counts, unmatched frees, live bytes at the peak
    by innermost host activity, recomputed from the JSON here."""
    opener: Any = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        doc = json.load(f, parse_float=Decimal)
    evs = doc["traceEvents"]
    mem = [(i, e) for i, e in enumerate(evs) if e.get("name") == "[memory]"]
    acts: dict[tuple[Any, Any], list[tuple[int, int, int, str]]] = {}
    for e in evs:
        k = HOST_CATS.get(e.get("cat", ""))
        if k is not None and e.get("ph") == "X":
            s = _ns(Decimal(e["ts"]))
            acts.setdefault((e["pid"], e["tid"]), []).append(
                (s, _ns(Decimal(e["ts"]) + Decimal(e.get("dur", 0))), k, e["name"])
            )
    out: dict[tuple[int, int], dict[str, Any]] = {}
    mem.sort(key=lambda ie: (_ns(Decimal(ie[1]["ts"])), ie[0]))
    for key in sorted({(e["args"]["Device Type"], e["args"]["Device Id"]) for _, e in mem}):
        rows = [e for _, e in mem if (e["args"]["Device Type"], e["args"]["Device Id"]) == key]
        a = [e["args"] for e in rows]
        has_totals = all("Total Allocated" in x for x in a)
        level = (
            [x["Total Allocated"] for x in a] if has_totals
            else list(np.cumsum([x["Bytes"] for x in a]))
        )  # fmt: skip
        peak = max(range(len(level)), key=lambda i: (level[i], -i))
        live: dict[int, list[int]] = {}  # addr -> open allocation indices
        freed_at: dict[int, int] = {}
        unmatched = no_addr = 0
        for i, x in enumerate(a):
            addr = x.get("Addr", -1)
            if x["Bytes"] >= 0:
                if addr >= 0:
                    live.setdefault(addr, []).append(i)
            elif addr >= 0 and live.get(addr):
                freed_at[live[addr].pop()] = i
            elif addr >= 0:
                unmatched += 1
            else:
                no_addr += 1
        by_op: dict[tuple[str, str], list[int]] = {}
        for i, x in enumerate(a):
            if (
                x["Bytes"] < 0
                or x.get("Addr", -1) < 0
                or i > peak
                or freed_at.get(i, 1 << 62) <= peak
            ):
                continue
            t = _ns(Decimal(rows[i]["ts"]))
            around = [c for c in acts.get((rows[i]["pid"], rows[i]["tid"]), []) if c[0] <= t < c[1]]
            if around:
                s, e, k, name = min(around, key=lambda c: (-c[0], c[1], c[2], c[3]))
                op = (KIND_NAME[k], name)
            else:
                op = ("untraced", "")
            acc = by_op.setdefault(op, [0, 0])
            acc[0] += x["Bytes"]
            acc[1] += 1
        out[key] = {
            "peak": int(level[peak]),
            "peak_at_ns": _ns(Decimal(rows[peak]["ts"])),
            "allocs": sum(x["Bytes"] >= 0 for x in a),
            "frees": sum(x["Bytes"] < 0 for x in a),
            "unmatched": unmatched,
            "no_addr": no_addr + sum(x["Bytes"] >= 0 and x.get("Addr", -1) < 0 for x in a),
            "by_op": sorted(
                ((b, c, k, n) for (k, n), (b, c) in by_op.items()),
                key=lambda r: (-r[0], -r[1], r[2], r[3]),
            ),
        }
    return out


@pytest.mark.shared
@pytest.mark.parametrize("path", _memory_traces(), ids=lambda p: p.name)
def test_kineto_memory_equals_a_walk_of_the_events(path: Path, shared_dir: Path) -> None:
    want = _walk(path)
    got = {(d.device_type, d.device): d for d in analyze_memory(pt.load(path)).devices}
    assert set(got) == set(want)
    for key, w in want.items():
        d = got[key]
        assert d.peak_allocated_bytes == w["peak"], key
        assert d.peak_at_ns == w["peak_at_ns"], key
        assert (d.allocs, d.frees, d.unmatched_frees) == (w["allocs"], w["frees"], w["unmatched"])
        assert d.without_address == w["no_addr"]
        ops = [(o.bytes, o.allocs, o.kind, o.name) for o in d.live_at_peak_by_op]
        assert ops == w["by_op"], key


@pytest.mark.shared
def test_nsight_memory_usage_events_equal_the_table(shared_dir: Path) -> None:
    path = shared_dir / "data" / "external" / "nsys_extrap" / "concurrent.s8_profile8.sqlite"
    db = sqlite3.connect(path)
    rows = db.execute(
        "SELECT bytes, memKind, memoryOperationType, deviceId FROM CUDA_GPU_MEMORY_USAGE_EVENTS"
        " ORDER BY start, rowid"
    ).fetchall()
    (total,) = db.execute("SELECT totalMemory FROM TARGET_INFO_GPU WHERE id = 0").fetchone()
    trace = pt.load(path)
    assert len(trace.mem_events) == len(rows)
    dev = [(b if op == 0 else -b) for b, kind, op, d in rows if kind == 2]
    level = np.cumsum(dev)
    got = {(d.device_type, d.device): d for d in analyze_memory(trace).devices}
    g = got[(1, 0)]
    assert g.peak_allocated_bytes == int(level.max())
    assert g.capacity_bytes == total
    assert (g.allocs, g.frees) == (sum(b > 0 for b in dev), sum(b < 0 for b in dev))
    assert g.unmatched_frees == 0 and g.live_at_end_bytes == int(level[-1])


# ---- snapshots --------------------------------------------------------------------------
def _frames(name: str) -> list[dict[str, Any]]:
    return [
        {"filename": "/x/model.py", "line": 7, "name": name},
        {"filename": "??", "line": 0, "name": "main"},
    ]


def _act(action: str, addr_mb: int, size_mb: int, t_us: int, site: str = "") -> dict[str, Any]:
    mb = 1 << 20
    out = {"action": action, "addr": addr_mb * mb, "size": size_mb * mb, "stream": 0}
    return {**out, "time_us": t_us, **({"frames": _frames(site)} if site else {})}


def _snapshot() -> dict[str, Any]:
    """The documented torch.cuda.memory._snapshot() layout: two segments on device 0, one
    block live at the snapshot; the trace: segment, three allocations, two frees."""
    mb = 1 << 20
    return {
        "segments": [
            {"device": 0, "address": 1000 * mb, "total_size": 20 * mb, "stream": 0,
             "segment_type": "large", "allocated_size": 4 * mb, "active_size": 4 * mb,
             "blocks": [{"address": 1000 * mb, "size": 4 * mb, "requested_size": 4 * mb,
                         "state": "active_allocated", "frames": _frames("keep")},
                        {"address": 1004 * mb, "size": 16 * mb, "state": "inactive"}]},
        ],
        "device_traces": [[
            _act("segment_alloc", 1000, 20, 10),
            _act("alloc", 1000, 4, 11, "keep"),
            _act("alloc", 1004, 8, 12, "tmp"),
            _act("free_requested", 1004, 8, 13),
            _act("free_completed", 1004, 8, 13),
            _act("alloc", 1004, 2, 14, "tmp2"),
            _act("free_completed", 1004, 2, 15),
            _act("free_completed", 999, 1, 16),  # a block allocated before the trace
        ]],
        "allocator_settings": {},
    }  # fmt: skip


def test_a_snapshot_pickle_loads_with_its_peak_and_sites(tmp_path: Path) -> None:
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(_snapshot(), protocol=4))
    mb = 1 << 20
    trace = pt.load(path)
    (d,) = analyze_memory(trace).devices
    # at the end 4 MiB are live; counted back: 4 + 1 (the free of the unknown block) ...
    assert d.peak_allocated_bytes == 13 * mb and d.peak_at_ns == 12_000
    assert d.peak_reserved_bytes == 20 * mb and d.fragmentation_bytes == 7 * mb
    assert (d.allocs, d.frees, d.unmatched_frees, d.unmatched_free_bytes) == (3, 3, 1, mb)
    assert [(o.kind, o.bytes) for o in d.live_at_peak_by_op] == [
        ("frame", 8 * mb),
        ("frame", 4 * mb),
    ]
    assert d.live_at_peak_by_op[0].name == "tmp (/x/model.py:7)"
    assert d.live_at_end_bytes == 4 * mb
    # the text gives the peak's time from the trace's start, not a raw timestamp (issue 46)
    result = analyze_memory(trace)
    first = int(trace.mem_events["time"].min())
    assert result.start_ns == first
    text = render_memory(result, [])
    assert f"live at the peak ({duration(12_000 - first)} into the trace)" in text, text


@pytest.mark.parametrize(
    ("field", "value"),
    [("size", 2**70), ("size", float("inf")), ("time_us", 2**62), ("time_us", float("nan")),
     ("addr", -(2**64)), ("size", True)],
)  # fmt: skip
def test_snapshot_numbers_past_int64_or_not_integers_are_one_line(
    tmp_path: Path, field: str, value: Any
) -> None:
    """2**70 or an infinite size or time was an OverflowError traceback (issue 47 #25)."""
    snap = _snapshot()
    snap["device_traces"][0][2][field] = value
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=4))
    with pytest.raises(TraceFormatError, match=r"device_traces\[0\]\[2\] lacks .* not an int"):
        pt.load(path)


def test_snapshot_sizes_that_add_up_past_int64_are_one_line(tmp_path: Path) -> None:
    snap = _snapshot()
    huge = 1 << 50
    snap["device_traces"][0] += [_act("alloc", i, 0, 20 + i) for i in range(1 << 13)]
    for a in snap["device_traces"][0][8:]:
        a["size"] = huge
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=4))
    with pytest.raises(TraceFormatError, match=r"device 0's allocations .* past 2\*\*62"):
        pt.load(path)


def test_a_snapshot_of_shared_references_is_refused_before_it_expands(tmp_path: Path) -> None:
    """A 26 KB pickle of repeated memo references expanded to 592 MB and 13 s (issue 47
    #21); a read visits at most one container per byte of the file."""
    block = {"address": 0, "size": 1, "state": "active_allocated"}
    segment = {"device": 0, "total_size": 1, "blocks": [block] * 3000}
    snap = {"segments": [segment] * 3000, "device_traces": [[_act("alloc", 0, 1, 1)]]}
    path = tmp_path / "bomb.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=4))
    assert path.stat().st_size < 64 << 10
    with pytest.raises(TraceFormatError, match="shared references expand"):
        pt.load(path)


def test_frame_lists_torch_shares_between_actions_are_read_once(tmp_path: Path) -> None:
    snap = _snapshot()
    shared = _frames("step")
    snap["device_traces"][0] += [
        {**_act("alloc", 2000 + i, 1, 100 + i), "frames": shared} for i in range(20_000)
    ]
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=4))
    (d,) = analyze_memory(pt.load(path)).devices
    assert d.allocs == 3 + 20_000


def test_kineto_bytes_that_would_wrap_the_running_sum_are_one_line(tmp_path: Path) -> None:
    """Without Total Allocated the level is a running sum of int64 bytes: three allocations
    of 2**62 showed a peak of 2**62 and never-freed -2**63, silently (issue 47 #16)."""
    events: list[dict[str, Any]] = [
        {"name": "[memory]", "ph": "i", "s": "t", "ts": 1 + i, "pid": 1, "tid": 1,
         "args": {"Bytes": 2**62, "Addr": 4096 * (i + 1), "Device Type": 1, "Device Id": 0}}
        for i in range(3)
    ]  # fmt: skip
    events.append({"ph": "X", "cat": "cpu_op", "name": "op", "ts": 0, "dur": 10, "pid": 1,
                   "tid": 1})  # fmt: skip
    path = tmp_path / "wrap.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    with pytest.raises(TraceFormatError, match="add up past int64"):
        analyze_memory(pt.load(path))
    events[1]["args"]["Bytes"] = events[2]["args"]["Bytes"] = 2**60  # within int64: exact
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    (d,) = analyze_memory(pt.load(path)).devices
    assert d.peak_allocated_bytes == 2**62 + 2**61


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (self.marker,))


def test_a_pickle_that_would_run_code_is_refused_with_one_line(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps({"segments": [_Evil(str(marker))]}, protocol=4))
    with pytest.raises(TraceFormatError, match="refused"):
        pt.load(path)
    assert not marker.exists()
    done = subprocess.run(  # the pytimings this interpreter imports (installed in CI)
        [sys.executable, "-m", "pytimings.cli", "memory", str(path)],
        capture_output=True, text=True, check=False, cwd=path.parent,
    )  # fmt: skip
    assert done.returncode == 2 and not marker.exists()
    assert len(done.stderr.strip().splitlines()) == 1 and "posix.mkdir" in done.stderr


# ---- real captures: a planted leak and a steady run -----------------------------------------
def _capture(path: Path, leak: bool, steps: int = 12) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = torch.nn.Linear(64, 64)
        x = torch.randn(16, 64)
        model(x)
        kept = []
        with (
            torch.no_grad(),  # no autograd graph keeping the inputs of what is kept alive
            profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
        ):
            for _ in range(steps):
                with record_function("step"):
                    y = torch.relu(model(x))
                    z = torch.cat([y, y])
                    if leak:
                        kept.append(z)
                    del y, z
    finally:
        torch.set_num_threads(threads)
    prof.export_chrome_trace(str(path))


def test_a_planted_leak_is_found_and_named(tmp_path: Path) -> None:
    path = tmp_path / "leak.json"
    _capture(path, leak=True)
    r = analyze_memory(pt.load(path), by="step")
    (d,) = r.devices
    assert d.growth is not None and d.growth["growing"]
    assert d.growth["slope_bytes_per_window"] == 2 * 16 * 64 * 4  # one cat output per step
    (f,) = [f for f in memory_findings(r) if "grows" in f.title]
    assert "held by `aten::cat` in `step`" in f.title
    assert [(o.name, o.allocs) for o in d.never_freed_by_op] == [("aten::cat", 12)]


def test_a_steady_capture_has_no_growth_finding(tmp_path: Path) -> None:
    path = tmp_path / "steady.json"
    _capture(path, leak=False)
    r = analyze_memory(pt.load(path), by="step")
    (d,) = r.devices
    assert d.growth is not None and not d.growth["growing"]
    assert not [f for f in memory_findings(r) if "grows" in f.title]
    assert d.live_at_end_bytes == 0


def test_the_growth_test_false_positive_rate_is_at_most_its_level() -> None:
    """Steady series (levels at window ends: a base plus transient allocations that come and
    go, some tied) flagged at p < GROWTH_ALPHA no more often than the level allows."""
    rng = np.random.default_rng(31)
    trials, flagged = 4000, 0
    for i in range(trials):
        n = (8, 12, 16, 32, 96)[i % 5]
        y = (1 << 30) + rng.integers(0, 8, n) * (1 << 20)
        _, _, p = mann_kendall(y)
        flagged += p < GROWTH_ALPHA
    rate = flagged / trials
    # binomial: mean <= 0.01 over 4000 trials; 3 sd above it is 0.0147
    assert rate <= GROWTH_ALPHA + 3 * (GROWTH_ALPHA * (1 - GROWTH_ALPHA) / trials) ** 0.5
    grows = [mann_kendall(np.arange(n) * 5 + rng.integers(0, 8, n))[2] for n in (12, 16, 32)]
    assert all(p < GROWTH_ALPHA for p in grows)  # and it does see a real trend


def test_analyze_json_memory_has_exactly_the_documented_keys(tmp_path: Path) -> None:
    path = tmp_path / "leak.json"
    _capture(path, leak=True, steps=8)
    doc = Analysis(pt.attribute(pt.load(path), by="step")).to_document()["memory"]
    (d,) = doc["devices"]
    assert set(d) == {
        "device", "capacity_bytes", "peak_allocated_bytes", "peak_reserved_bytes",
        "peak_at_ns", "live_at_peak_by_op", "allocs", "frees", "native_alloc_calls",
        "live_at_end_bytes",
    }  # fmt: skip
    assert set(d["live_at_peak_by_op"][0]) == {"kind", "name", "bytes", "allocs"}
    assert d["allocs"] == 3 * 8 and d["live_at_end_bytes"] == 8 * 2 * 16 * 64 * 4


def test_the_perfetto_export_draws_the_allocated_counter(tmp_path: Path) -> None:
    from pytimings.report.perfetto import write_perfetto

    path = tmp_path / "leak.json"
    _capture(path, leak=True, steps=4)
    with open(path) as f:
        want = [e["args"]["Total Allocated"] for e in json.load(f)["traceEvents"]
                if e.get("name") == "[memory]"]  # fmt: skip
    out = tmp_path / "p.json"
    write_perfetto(pt.load(path), out)
    with open(out) as f:
        got = [e for e in json.load(f)["traceEvents"] if e["ph"] == "C"]
    assert [e["args"]["bytes"] for e in got] == want  # CPU: no reserved counter
    assert {e["name"] for e in got} == {"allocated"}


@pytest.mark.shared
def test_the_html_report_has_a_memory_panel(shared_dir: Path) -> None:
    pytest.importorskip("plotly")
    from pytimings.report.html import render

    path = shared_dir / "data/external/tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
    analysis = pt.analyze(path)
    page = render(analysis.attribution, analysis.findings, analysis.ops, "t")
    assert "Device memory (peaks and who holds them" in page
    assert "cuda:0 allocated" in page and "cuda:0 reserved" in page


@pytest.mark.shared
def test_diff_compares_peaks_and_live_bytes_by_op(shared_dir: Path) -> None:
    from pytimings.analysis.diff import diff

    root = shared_dir / "data/external/tracelens/h100"
    base = pt.attribute(pt.load(root / "gaunernst_bert-small-uncased__1016001.json.gz"))
    new = pt.attribute(pt.load(root / "Falconsai_nsfw_image_detection__1016002.json.gz"))
    rows = {r["device"]: r for r in diff([base], [new], resamples=50)["memory"]}
    b = {d.label: d for d in base.memory.devices}["cuda:0"]
    n = {d.label: d for d in new.memory.devices}["cuda:0"]
    r = rows["cuda:0"]
    assert r["delta_bytes"] == n.peak_allocated_bytes - b.peak_allocated_bytes
    want = {(o.kind, o.name): o.bytes for o in n.live_at_peak_by_op}
    for o in b.live_at_peak_by_op:
        want[(o.kind, o.name)] = want.get((o.kind, o.name), 0) - o.bytes
    assert {(x["kind"], x["name"]): x["delta_bytes"] for x in r["live_at_peak_by_op"]} == want


def test_a_recordings_memory_samples_are_mem_events(tmp_path: Path) -> None:
    from pytimings.record import memory

    memory.default_log().clear()
    try:
        for _ in range(5):
            pytimings_sample = pt.sample_memory()
            assert pytimings_sample is None
        want = memory.default_log().samples()
        path = tmp_path / "eng.pyt"
        pt.save(path, pt.Recorder())
    finally:
        memory.default_log().clear()
    me = pt.load(path).mem_events
    assert (me["kind"] == MemEventKind.SAMPLE).all()
    assert me["time"].tolist() == want.t_ns and me["allocated"].tolist() == want.rss_bytes
    (d,) = analyze_memory(pt.load(path)).devices
    assert (d.label, d.peak_allocated_bytes, d.allocs) == ("cpu", max(want.rss_bytes), 0)
