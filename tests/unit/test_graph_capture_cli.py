"""``--capture`` on ``diff`` and ``export``: graph-replayed kernels charged to the ops that
launched them while the graph was captured, on each side of a diff (a capture given to both
sides matched by content, refused only when it matches neither) and on the Perfetto slices;
Kineto traces written here, so the right charge of every kernel is known."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytimings.cli import main

MM = {"Input Dims": [[8, 4], [4, 2]], "Input type": ["float", "float"]}
ADD = {"Input Dims": [[8, 2], [8, 2]], "Input type": ["float", "float"]}
SUB = {"Input Dims": [[8, 2], [8, 2]], "Input type": ["float", "float"]}


def _ev(cat: str, name: str, ts: int, dur: int, pid: int = 1, tid: int = 1, **args: Any) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}  # fmt: skip


def _kernel(name: str, ts: int, dur: int, corr: int) -> dict:
    return _ev("kernel", name, ts, dur, pid=0, tid=7, correlation=corr, device=0, stream=7)


def _replays(path: Path, durations: list[int], replays: int = 3) -> Path:
    """An eager aten::mm launching triton_poi_fused_0 (10 µs), then ``replays`` graph
    launches each running triton_poi_fused_i for durations[i] µs, back to back."""
    events = [
        _ev("cpu_op", "aten::mm", 10, 20, **MM),
        _ev("cuda_runtime", "cudaLaunchKernel", 12, 5, correlation=1),
        _kernel("triton_poi_fused_0", 40, 10, 1),
    ]
    for r in range(replays):
        t = 100 + 100 * r
        events.append(_ev("cuda_runtime", "cudaGraphLaunch", t, 5, correlation=10 + r))
        for i, d in enumerate(durations):
            events.append(_kernel(f"triton_poi_fused_{i}", t + 10, d, 10 + r))
            t += d
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _capture(path: Path, ops: list[tuple[str, dict]], also: Path | None = None) -> Path:
    """One captured graph: per (op, its args) the op around a cudaLaunchKernel call (on a
    thread of its own; ``also``: a trace whose events the file holds too)."""
    events = json.loads(also.read_text())["traceEvents"] if also else []
    events.append(_ev("cuda_runtime", "cudaStreamBeginCapture", 10, 2, tid=2, correlation=901))
    t = 20
    for i, (name, args) in enumerate(ops):
        events.append(_ev("cpu_op", name, t, 10, tid=2, **args))
        events.append(_ev("cuda_runtime", "cudaLaunchKernel", t + 2, 3, tid=2, correlation=902 + i))
        t += 20
    events.append(_ev("cuda_runtime", "cudaStreamEndCapture", t, 2, tid=2, correlation=999))
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _diff(capsys: Any, tmp_path: Path, *argv: str) -> tuple[dict, str]:
    out = tmp_path / "d.json"
    assert main(["diff", *argv, "--json", str(out), "--quiet", "--resamples", "100"]) == 0
    return json.loads(out.read_text()), capsys.readouterr().out


def _row(doc: dict, name: str) -> dict:
    (row,) = [r for r in doc["ops"] if r["name"] == name]
    return row


def _codes(a: dict) -> dict[str, int]:
    return {u["code"]: u["kernel_ns"] for u in a["unattributed"]}


def test_diff_charges_both_sides_replays_through_a_capture_given_to_both(tmp_path, capsys):
    base = [str(_replays(tmp_path / f"b{i}.json", [20, 5])) for i in range(2)]
    new = str(_replays(tmp_path / "n.json", [30, 5]))
    cap = str(_capture(tmp_path / "cap.json", [("aten::mm", MM), ("aten::add", ADD)]))
    doc, text = _diff(capsys, tmp_path, "--base", *base, "--new", new, "--capture", cap)
    # per window: the eager mm kernel and the three replays' nodes
    mm, add = _row(doc, "aten::mm"), _row(doc, "aten::add")
    assert (mm["base_ns"], mm["new_ns"]) == (10_000 + 3 * 20_000, 10_000 + 3 * 30_000)
    assert (add["base_ns"], add["new_ns"]) == (3 * 5_000, 3 * 5_000)
    assert add["input_dims"] == [[8, 2], [8, 2]]
    cats = {r["name"]: (r["base_ns"], r["new_ns"]) for r in doc["op_categories"]}
    assert cats["gemm"] == (70_000, 100_000) and cats["elementwise"] == (15_000, 15_000)
    b, n = doc["op_attribution"]["base"], doc["op_attribution"]["new"]
    assert (b["graph_kernel_ns"], b["graph_attributed_ns"]) == (2 * 75_000, 2 * 75_000)
    assert (n["graph_kernel_ns"], n["graph_attributed_ns"]) == (105_000, 105_000)
    assert _codes(b) == _codes(n) == {}
    g = b["graph_replays"]
    assert (g["launches"], g["matched_launches"]) == (6, 6)  # two files, three each
    assert [(c["source"], c["graphs"], c["matched_launches"]) for c in g["captures"]] == [
        (cap, 1, 6)  # one capture file, counted once
    ]
    assert g["refused"] == [] and "refused" not in text
    assert "base: graph replays: 0.15 ms of GPU time; 0.15 ms charged" in text
    # without the capture the replayed kernels stay unattributed, by their reason
    doc, _ = _diff(capsys, tmp_path, "--base", *base, "--new", new)
    assert not [r for r in doc["ops"] if r["name"] == "aten::add"]
    assert _row(doc, "aten::mm")["base_ns"] == 10_000
    assert _codes(doc["op_attribution"]["new"]) == {"graph_no_capture": 105_000}
    g = doc["op_attribution"]["new"]["graph_replays"]
    assert (g["launches"], g["matched_launches"], g["captures"]) == (3, 0, [])


def test_each_files_own_captures_charge_its_replays_and_are_named_after_it(tmp_path, capsys):
    ops = [("aten::mm", MM), ("aten::add", ADD)]
    base = [
        str(_capture(tmp_path / f"b{i}.json", ops, _replays(tmp_path / f"r{i}.json", [20, 5])))
        for i in range(2)
    ]
    new = str(_replays(tmp_path / "n.json", [30, 5]))
    doc, _ = _diff(capsys, tmp_path, "--base", *base, "--new", new)
    b = doc["op_attribution"]["base"]
    assert b["graph_attributed_ns"] == b["graph_kernel_ns"] == 2 * 75_000
    got = [
        (c["source"], c["graphs"], c["matched_launches"]) for c in b["graph_replays"]["captures"]
    ]
    assert got == [(f"{p} (its own captures)", 1, 3) for p in base]
    assert _row(doc, "aten::add")["verdict"] == "removed"


def test_a_capture_for_one_side_charges_that_side_only(tmp_path, capsys):
    base = str(_replays(tmp_path / "b.json", [20, 5]))
    new = str(_replays(tmp_path / "n.json", [30, 5]))
    cap = str(_capture(tmp_path / "cap.json", [("aten::mm", MM), ("aten::add", ADD)]))
    doc, _ = _diff(capsys, tmp_path, "--base", base, "--new", new, "--new-capture", cap)
    assert _row(doc, "aten::add")["verdict"] == "added"
    assert _codes(doc["op_attribution"]["base"]) == {"graph_no_capture": 75_000}
    assert doc["op_attribution"]["new"]["graph_attributed_ns"] == 105_000
    # each side its own: the same graph captured with other ops on the base side
    other = str(_capture(tmp_path / "other.json", [("aten::bmm", MM), ("aten::sub", SUB)]))
    doc, _ = _diff(
        capsys, tmp_path, "--base", base, "--new", new,
        "--base-capture", other, "--new-capture", cap,
    )  # fmt: skip
    assert _row(doc, "aten::sub")["verdict"] == "removed"
    assert _row(doc, "aten::add")["verdict"] == "added"
    assert _row(doc, "aten::bmm")["base_ns"] == 60_000
    # a capture for both sides and one for a side: the side's matched as given alone
    four = str(_capture(tmp_path / "four.json", [("aten::mm", MM)] * 4))
    doc, _ = _diff(
        capsys, tmp_path, "--base", base, "--new", new, "--capture", four, "--new-capture", cap
    )
    assert (_row(doc, "aten::add")["new_ns"], _row(doc, "aten::mm")["new_ns"]) == (15_000, 100_000)
    g = doc["op_attribution"]["new"]["graph_replays"]
    assert [(c["source"], c["matched_launches"]) for c in g["captures"]] == [(four, 0), (cap, 3)]
    assert len(g["refused"]) == 1 and g["refused"][0].startswith(f"{four}: refused:")


def test_a_capture_matching_neither_side_is_refused_and_one_matching_a_side_is_not(
    tmp_path, capsys
):
    base = str(_replays(tmp_path / "b.json", [20, 5]))
    new = str(_replays(tmp_path / "n.json", [30, 5, 5]))  # another graph: three kernels
    two = str(_capture(tmp_path / "two.json", [("aten::mm", MM), ("aten::add", ADD)]))
    ops3 = [("aten::mm", MM), ("aten::add", ADD), ("aten::sub", SUB)]
    three = str(_capture(tmp_path / "three.json", ops3))
    four = str(_capture(tmp_path / "four.json", [("aten::mm", MM)] * 4))
    doc, text = _diff(
        capsys, tmp_path, "--base", base, "--new", new,
        "--capture", two, "--capture", three, "--capture", four,
    )  # fmt: skip
    b, n = doc["op_attribution"]["base"], doc["op_attribution"]["new"]
    assert b["graph_attributed_ns"] == 75_000 and n["graph_attributed_ns"] == 120_000
    refused = [line.strip() for line in text.splitlines() if "refused:" in line]
    # only the capture no replay of either side has, once per side, one line each
    want = (
        f"{four}: refused: none of its 1 captured graphs matches one of the 3 replayed graph "
        "launches (no captured graph has a replayed graph's sequence of GPU ops); their "
        "kernels stay unattributed"
    )
    assert refused == [want, want]
    assert b["graph_replays"]["refused"] == n["graph_replays"]["refused"] == [want]


def test_diff_refuses_bad_capture_options_in_one_line(tmp_path, capsys):
    base = str(_replays(tmp_path / "b.json", [20, 5]))
    cap = str(_capture(tmp_path / "cap.json", [("aten::mm", MM), ("aten::add", ADD)]))
    for extra, said in (
        (["--base-capture", base], f"--base-capture {base}: no graph capture in it"),
        (["--capture", cap, "--new-capture", cap], f"--new-capture {cap}: given already"),
    ):
        assert main(["diff", "--base", base, "--new", base, *extra, "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and said in err, err


def _slices(path: Path) -> list[dict]:
    doc = json.loads(path.read_text())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in events if e.get("args", {}).get("graph") is not None]


def test_export_gives_replayed_kernels_the_op_and_category_of_their_capture(tmp_path, capsys):
    trace = str(_replays(tmp_path / "t.json", [20, 5]))
    cap = str(_capture(tmp_path / "cap.json", [("aten::mm", MM), ("aten::add", ADD)]))
    out = tmp_path / "p.json"
    assert main(["export", trace, "--perfetto", str(out), "--capture", cap, "--quiet"]) == 0
    assert "3 of 3 launches matched" in capsys.readouterr().out
    got = sorted((e["name"], e["args"].get("op"), e["args"]["op_category"]) for e in _slices(out))
    assert (
        got
        == [("triton_poi_fused_0", "aten::mm", "gemm")] * 3
        + [("triton_poi_fused_1", "aten::add", "elementwise")] * 3
    )
    # without it they carry no op, and their kernel names' category
    assert main(["export", trace, "--perfetto", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert {e["args"].get("op") for e in _slices(out)} == {None}
    assert "gemm" not in {e["args"]["op_category"] for e in _slices(out)}


def test_export_refuses_a_capture_that_matches_nothing_and_conflicting_options(tmp_path, capsys):
    trace = str(_replays(tmp_path / "t.json", [20, 5]))
    four = str(_capture(tmp_path / "four.json", [("aten::mm", MM)] * 4))
    out = tmp_path / "p.json"
    assert main(["export", trace, "--perfetto", str(out), "--capture", four, "--quiet"]) == 0
    refused = [line for line in capsys.readouterr().out.splitlines() if "refused:" in line]
    assert len(refused) == 1 and f"{four}: refused: none of its 1 captured graphs" in refused[0]
    assert {e["args"].get("op") for e in _slices(out)} == {None}
    argv = ["export", trace, "--perfetto", str(out), "--capture", four, "--no-attribution"]
    assert main([*argv, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not with --no-attribution" in err, err
