"""A real trace's graph replays (HTA's torch.compile + CUDA graphs A100 trace, 70 graph
launches of 14 graphs) charged through the capture traces written for them in
tests/data/kineto/graph_capture (README there), checked against the matching computed here
from the raw JSON."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from pytimings.analysis.attribution import attribute
from pytimings.analysis.graph_capture import Captures
from pytimings.analysis.op_table import op_table
from pytimings.ingest import load

pytestmark = pytest.mark.shared

HERE = Path(__file__).resolve().parent.parent / "data" / "kineto" / "graph_capture"
REPLAY = "data/external/hta/negative_queue_length_values_check/rank0.json.gz"
KIND = {"kernel": "kernel", "gpu_memset": "memset", "gpu_memcpy": "copy"}
LAUNCH_KIND = {"cudaLaunchKernel": "kernel", "cudaMemsetAsync": "memset"}


def _ns(ts: float) -> int:
    return round(ts * 1000)


def _replays(path: Path) -> list[list[tuple[str, str, int]]]:
    """Per graph launch: its GPU ops (kind, name, ns) in start order."""
    events = json.loads(gzip.open(path).read())["traceEvents"]
    launches = {e["args"]["correlation"] for e in events if e.get("name") == "cudaGraphLaunch"}
    by = defaultdict(list)
    for e in events:
        if e.get("cat") in KIND and e.get("args", {}).get("correlation") in launches:
            by[e["args"]["correlation"]].append(e)
    return [
        [
            (KIND[e["cat"]], e["name"], _ns(e["ts"] + e["dur"]) - _ns(e["ts"]))
            for e in sorted(ops, key=lambda e: e["ts"])
        ]
        for ops in by.values()
    ]


def _captured(path: Path) -> list[list[tuple[str, str | None, str]]]:
    """Per captured graph: (kind, kernel name or None, op name) per launch call."""
    events = json.loads(path.read_text())["traceEvents"]
    names = {  # kernel names (copies and memsets: compared by kind)
        e["args"]["correlation"]: e["name"]
        for e in events
        if e.get("cat") == "kernel" and "correlation" in e.get("args", {})
    }
    cpu = [e for e in events if e.get("cat") == "cpu_op"]
    graphs: list[list[tuple[str, str | None, str]]] = []
    current: list[tuple[str, str | None, str]] | None = None
    for e in sorted((e for e in events if e.get("cat") == "cuda_runtime"), key=lambda e: e["ts"]):
        if e["name"] == "cudaStreamBeginCapture":
            current = []
        elif e["name"] == "cudaStreamEndCapture":
            assert current is not None
            graphs.append(current)
            current = None
        elif current is not None and e["name"] in LAUNCH_KIND:
            (op,) = [
                c for c in cpu if c["ts"] <= e["ts"] and e["ts"] + e["dur"] <= c["ts"] + c["dur"]
            ]
            current.append(
                (LAUNCH_KIND[e["name"]], names.get(e["args"]["correlation"]), op["name"])
            )
    return graphs


def _expected(replays, captured):
    """Per op name its replayed ns, and per reason code the ns not charged."""
    charged: dict[str, int] = defaultdict(int)
    refused: dict[str, int] = defaultdict(int)
    for ops in replays:
        kinds = [k for k, _, _ in ops]
        same = [g for g in captured if [k for k, _, _ in g] == kinds]
        fits = [
            g
            for g in same
            if all(n is None or n == r[1] for (_, n, _), r in zip(g, ops, strict=True))
        ]
        ns = sum(d for _, _, d in ops)
        if not same:
            refused["graph_unmatched"] += ns
        elif not fits:
            refused["kernel_mismatch"] += ns
        elif len({tuple(op for _, _, op in g) for g in fits}) > 1:
            refused["graph_ambiguous"] += ns
        else:
            for (_, _, op), (_, _, d) in zip(fits[0], ops, strict=True):
                charged[op] += d
    return dict(charged), dict(refused)


@pytest.fixture(scope="module")
def replay(shared_dir):
    path = shared_dir / REPLAY
    return path, attribute(load(path)), _replays(path)


@pytest.mark.parametrize(
    "capture, n_charged_graphs",
    [("capture_kinds.json", 5), ("capture_named.json", 11), ("capture_other.json", 0)],
)
def test_replays_are_charged_as_the_captures_say(replay, capture, n_charged_graphs):
    _, result, replays = replay
    assert len(replays) == 70
    captured = _captured(HERE / capture)
    charged, refused = _expected(replays, captured)
    assert len({op.split(".")[0] for op in charged}) == n_charged_graphs
    caps = Captures()
    caps.add(load(HERE / capture), capture)
    t = op_table(result, captures=caps)
    got = {r["name"]: r["graph_kernel_ns"] for r in t.ops if r["graph_kernel_ns"]}
    assert got == charged
    calls = {r["name"]: r["graph_calls"] for r in t.ops if r["graph_kernel_ns"]}
    assert set(calls.values()) <= {5}  # each captured op once per replay, 5 replays
    a = t.attribution
    graph_codes = {"graph_unmatched", "kernel_mismatch", "graph_ambiguous", "capture_no_op"}
    codes = {u["code"]: u["kernel_ns"] for u in a["unattributed"] if u["code"] in graph_codes}
    assert codes == refused
    assert a["graph_attributed_ns"] == sum(charged.values())
    assert a["graph_kernel_ns"] == sum(d for ops in replays for _, _, d in ops)
    assert a["graph_attributed_ns"] + sum(refused.values()) == a["graph_kernel_ns"]
    assert a["attributed_ns"] + sum(u["kernel_ns"] for u in a["unattributed"]) == a["kernel_ns"]
    assert bool(a["graph_replays"]["refused"]) == (n_charged_graphs == 0)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytimings.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_cli_refuses_a_capture_that_matches_nothing_in_one_line(replay, tmp_path):
    path, _, _ = replay
    p = _cli("ops", str(path), "--capture", str(HERE / "capture_other.json"), "-q")
    assert p.returncode == 0, p.stderr
    refusal = [line for line in p.stdout.splitlines() if "refused:" in line]
    assert len(refusal) == 1 and "capture_other.json: refused: none of its 1 captured" in refusal[0]
    # a file with no capture in it is bad input: one line, exit 2
    p = _cli("ops", str(path), "--capture", str(path), "-q")
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "no graph capture in it" in p.stderr


def test_analyze_carries_the_graph_attribution(replay, tmp_path):
    path, _, _ = replay
    out = tmp_path / "a.json"
    p = _cli(
        "analyze",
        str(path),
        "--capture",
        str(HERE / "capture_named.json"),
        "--json",
        str(out),
        "-q",
    )
    assert p.returncode == 0, p.stderr
    assert "graph replays:" in p.stdout and "55 of 70 launches matched" in p.stdout
    doc = json.loads(out.read_text())
    g = doc["op_attribution"]["graph_replays"]
    assert g["launches"] == 70 and g["matched_launches"] == 55
    assert any(r["graph_kernel_ns"] for r in doc["ops"])


def test_diff_and_export_charge_the_real_replays_as_the_capture_says(replay, tmp_path):
    path, _, replays = replay
    capture = HERE / "capture_named.json"
    charged, refused = _expected(replays, _captured(capture))
    out = tmp_path / "d.json"
    p = _cli(
        "diff", "--base", str(path), "--new", str(path), "--new-capture", str(capture),
        "--json", str(out), "-q", "--resamples", "100",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    got = {r["name"]: r for r in doc["ops"] if r["name"] in charged}
    assert {k: r["new_ns"] for k, r in got.items()} == charged
    assert {r["verdict"] for r in got.values()} == {"added"}  # the base side has no capture
    graph_codes = {"graph_unmatched", "kernel_mismatch", "graph_ambiguous", "graph_no_capture"}
    codes = {
        side: {u["code"]: u["kernel_ns"] for u in a["unattributed"] if u["code"] in graph_codes}
        for side, a in doc["op_attribution"].items()
    }
    assert codes["new"] == refused
    assert codes["base"] == {"graph_no_capture": sum(d for ops in replays for _, _, d in ops)}
    perfetto = tmp_path / "p.json"
    p = _cli("export", str(path), "--perfetto", str(perfetto), "--capture", str(capture), "-q")
    assert p.returncode == 0, p.stderr
    events = json.loads(perfetto.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    ns: dict[str, int] = defaultdict(int)
    for e in events:
        if e.get("ph") == "X" and e.get("args", {}).get("op") in charged:
            ns[e["args"]["op"]] += round(e["dur"] * 1000)
    assert dict(ns) == charged
