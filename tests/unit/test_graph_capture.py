"""Graph-replayed GPU ops charged through the graph's capture: the captured launch calls
between begin and end capture, matched to a replay's GPU ops by exact sequence (kinds, and
kernel names where the capture holds them) or, for named captures, by an alignment covering
95% of both; everything not charged counted by reason."""

from __future__ import annotations

import itertools
import random
import time
from typing import Any

from helpers.synth import make_trace, shuffled

from pytimings.analysis.attribution import attribute
from pytimings.analysis.graph_capture import Captures, align
from pytimings.analysis.op_table import op_table
from pytimings.cli import main
from pytimings.commands.example import example_path
from pytimings.model.trace import OpKind
from pytimings.report.ops_text import render_graph_replays, render_ops


def _capture(t0: int, ops: list[tuple[str, str]], corr0: int) -> tuple[list, list]:
    """A capture on thread 0 at t0: per (op name, launch call name) an op around its launch
    call; returns (host_ops, api rows)."""
    host: list[dict[str, Any]] = []
    api: list[dict[str, Any]] = [
        {"name": "cudaStreamBeginCapture", "start": t0, "end": t0 + 2, "correlation": corr0}
    ]
    t = t0 + 10
    for i, (op, call) in enumerate(ops):
        if op:
            host.append({"name": op, "start": t, "end": t + 8})
        api.append({"name": call, "start": t + 2, "end": t + 4, "correlation": corr0 + 1 + i})
        t += 10
    api.append(
        {"name": "cudaStreamEndCapture_v10000", "start": t, "end": t + 2, "correlation": corr0 + 99}
    )
    return host, api


def _replay(corr: int, t0: int, seq: list[tuple[str, int, int]]) -> tuple[list, list]:
    """One graph launch at t0 running ``seq`` (name, kind, duration) back to back."""
    api = [{"name": "cudaGraphLaunch", "start": t0, "end": t0 + 5, "correlation": corr}]
    ops, t = [], t0 + 100
    for name, kind, dur in seq:
        ops.append({"name": name, "kind": kind, "start": t, "end": t + dur, "correlation": corr})
        t += dur
    return ops, api


K, M = int(OpKind.KERNEL), int(OpKind.MEMSET)
SEQ = [("gemm_a", K, 100), ("Memset (Device)", M, 7), ("elementwise_b", K, 30)]
CAPTURED = [
    ("aten::mm", "cudaLaunchKernel"),
    ("aten::zero_", "cudaMemsetAsync"),
    ("aten::add", "cudaLaunchKernel"),
]


def _trace(captures: list[list[tuple[str, str]]], replays: int = 2):
    host, api, ops = [], [], []
    for i, c in enumerate(captures):
        h, a = _capture(1000 * i, c, 100 * (i + 1))
        host += h
        api += a
    for r in range(replays):
        o, a = _replay(10_000 + r, 50_000 + 1000 * r, SEQ)
        ops += o
        api += a
    return make_trace(ops, api, host_ops=host)


def _by_code(t):
    return {u["code"]: u["kernel_ns"] for u in t.attribution["unattributed"]}


def _check_sums(t):
    a = t.attribution
    assert a["attributed_ns"] + sum(u["kernel_ns"] for u in a["unattributed"]) == a["kernel_ns"]


def test_a_capture_in_the_trace_charges_each_replayed_op_to_its_captured_op():
    for tr in (_trace([CAPTURED]), shuffled(_trace([CAPTURED]), 3)):
        t = op_table(attribute(tr))
        rows = {r["name"]: r for r in t.ops}
        # two replays: each op's kernel time twice, two calls, all from graph replays
        assert rows["aten::mm"]["kernel_ns"] == 200 and rows["aten::mm"]["calls"] == 2
        assert rows["aten::zero_"]["kernel_ns"] == 14
        assert rows["aten::add"]["graph_kernel_ns"] == 60 and rows["aten::add"]["graph_calls"] == 2
        a = t.attribution
        assert a["graph_kernel_ns"] == a["graph_attributed_ns"] == 2 * 137
        assert a["graph_replays"]["launches"] == 2 and a["graph_replays"]["matched_launches"] == 2
        assert a["unattributed"] == []
        _check_sums(t)


def test_a_replay_that_differs_from_every_capture_stays_unattributed():
    # one node fewer: no captured graph has the replay's sequence
    t = op_table(attribute(_trace([CAPTURED[:2]])))
    assert _by_code(t) == {"graph_unmatched": 2 * 137}
    assert t.attribution["graph_attributed_ns"] == 0
    assert not [r for r in t.ops if r["graph_kernel_ns"]]
    # a copy where the replay ran a kernel: the kinds differ
    t = op_table(attribute(_trace([[CAPTURED[0], ("x", "cudaMemcpyAsync"), CAPTURED[2]]])))
    assert _by_code(t) == {"graph_unmatched": 2 * 137}
    _check_sums(t)


def test_captured_graphs_with_one_structure_and_different_ops_are_ambiguous():
    other = [("aten::bmm", c) for _, c in CAPTURED]
    t = op_table(attribute(_trace([CAPTURED, other])))
    assert _by_code(t) == {"graph_ambiguous": 2 * 137}
    # the same ops captured twice (one graph per batch size, same shapes): no ambiguity
    t = op_table(attribute(_trace([CAPTURED, CAPTURED])))
    assert t.attribution["graph_attributed_ns"] == 2 * 137
    _check_sums(t)


def test_a_captured_launch_with_no_op_around_it_is_counted():
    t = op_table(attribute(_trace([[CAPTURED[0], ("", "cudaMemsetAsync"), CAPTURED[2]]])))
    assert _by_code(t) == {"capture_no_op": 2 * 7}
    assert t.attribution["graph_attributed_ns"] == 2 * 130
    _check_sums(t)


def test_a_driver_launch_inside_the_runtime_launch_is_one_node():
    host, api = _capture(0, CAPTURED, 100)
    # cuLaunchKernel inside the first cudaLaunchKernel (12..14), listed before it
    api.insert(1, {"name": "cuLaunchKernel", "start": 12, "end": 13, "correlation": 150})
    ops, a = _replay(10_000, 50_000, SEQ)
    caps = Captures()
    src = caps.add(make_trace([], api, host_ops=host), "cap")
    assert src.graphs == 1 and src.nodes == 3
    t = op_table(attribute(make_trace(ops, a)), captures=caps)
    assert t.attribution["graph_attributed_ns"] == 137


def test_a_capture_that_never_ends_gives_no_graph():
    host, api = _capture(0, CAPTURED, 100)
    caps = Captures()
    src = caps.add(make_trace([], api[:-1], host_ops=host), "cap")
    assert src.graphs == 0 and src.incomplete == 1


def test_kernel_names_where_the_capture_holds_them_must_agree():
    host, api = _capture(0, CAPTURED, 100)
    # the capture trace also holds the launched GPU ops (names); nsys demangler style on
    # one side, Kineto's on the other compare equal after normalisation
    named = [
        {
            "name": "void gemm_a<(int)512, (int)1>(float *)",
            "start": 500,
            "end": 510,
            "correlation": 101,
        },
        {"name": "Memset (Device)", "kind": M, "start": 520, "end": 521, "correlation": 102},
        {"name": "elementwise_b", "start": 530, "end": 540, "correlation": 103},
    ]
    ops, a = _replay(10_000, 50_000, [("void gemm_a<512, 1>(float*)", K, 100), *SEQ[1:]])
    caps = Captures()
    src = caps.add(make_trace(named, api, host_ops=host), "cap")
    assert src.named == 2  # the kernels; a memset is compared by kind
    t = op_table(attribute(make_trace(ops, a)), captures=caps)
    assert t.attribution["graph_attributed_ns"] == 137
    named[2]["name"] = "elementwise_c"
    caps = Captures()
    caps.add(make_trace(named, api, host_ops=host), "cap")
    t = op_table(attribute(make_trace(ops, a)), captures=caps)
    assert _by_code(t) == {"kernel_mismatch": 137}
    (refusal,) = t.attribution["graph_replays"]["refused"]
    assert refusal.startswith("cap: refused: ") and "'elementwise_b'" in refusal
    assert "'elementwise_c'" in refusal and "node 2 of 3" in refusal


def test_without_any_capture_replayed_ops_keep_the_no_capture_reason():
    ops, a = _replay(10_000, 50_000, SEQ)
    t = op_table(attribute(make_trace(ops, a)))
    assert _by_code(t) == {"graph_no_capture": 137}


def test_the_text_marks_graph_time_and_says_when_there_is_no_replay():
    t = op_table(attribute(_trace([CAPTURED])))
    text = render_ops(t, 10)
    head = text.splitlines()[1]
    assert "graph time" in head
    (line,) = [x for x in text.splitlines() if x.startswith("graph replays:")]
    assert line.startswith("graph replays: 0.3 µs of GPU time; 0.3 µs charged")
    assert "2 of 2 launches matched: the trace (1 graphs, 2 launches matched)" in line
    # captures given, no replay in the trace: said, nothing charged
    host, api = _capture(0, CAPTURED, 100)
    caps = Captures()
    caps.add(make_trace([], api, host_ops=host), "cap")
    eager = make_trace(
        [{"name": "k", "start": 0, "end": 5, "correlation": 1}],
        [{"start": 0, "end": 1, "correlation": 1}],
    )
    t = op_table(attribute(eager), captures=caps)
    assert t.attribution["graph_replays"]["launches"] == 0
    assert render_graph_replays(t.attribution) == [
        "graph replays: none in the trace; the 1 captured graphs charge nothing"
    ]
    assert "graph time" not in render_ops(t, 10)


def _one_line_error(capsys, argv: list[str], said: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert said in err, err


def test_a_capture_file_without_a_capture_is_refused_in_one_line(tmp_path, capsys):
    trace = example_path()  # the bundled H200 capture: no graph capture in it
    _one_line_error(
        capsys,
        ["ops", str(trace), "--capture", str(trace), "--quiet"],
        f"--capture {trace}: no graph capture in it",
    )
    _one_line_error(
        capsys,
        ["analyze", str(trace), "--executor", "dask", "--capture", str(trace), "--quiet"],
        "--capture goes with one trace file",
    )


def _named_capture(names: list[str], corr0: int) -> tuple[list, list, list]:
    """A capture whose trace also holds each captured launch's kernel (its name known):
    op ``op_<name>`` around each launch; returns (host_ops, api rows, GPU ops)."""
    host, api = _capture(0, [(f"op_{n}", "cudaLaunchKernel") for n in names], corr0)
    ops = [
        {"name": n, "start": 20_000 + 10 * i, "end": 20_005 + 10 * i, "correlation": corr0 + 1 + i}
        for i, n in enumerate(names)
    ]
    return host, api, ops


def test_a_replay_aligned_to_its_capture_despite_three_differences():
    # the capture recorded 101 launches; the replay's graph lacks the trailing one, skips
    # node 50 and runs a renamed kernel at node 20: 98 of its 99 ops align
    captured = [f"kernel_{i % 7}_{i}" for i in range(100)] + ["trailing_gemm"]
    replayed = [n for i, n in enumerate(captured[:100]) if i != 50]
    replayed[20] = "kernel_6_20_v2"
    host, api, ops = _named_capture(captured, 100)
    r_ops, r_api = _replay(10_000, 50_000, [(n, K, 10) for n in replayed])
    t = op_table(attribute(make_trace(ops + r_ops, api + r_api, host_ops=host)))
    a = t.attribution
    assert a["graph_kernel_ns"] == 990 and a["graph_attributed_ns"] == 980  # 98 of 99 ops
    assert _by_code(t) == {"graph_unaligned": 10}
    rows = {r["name"]: r for r in t.ops}
    assert rows["op_kernel_0_49"]["graph_kernel_ns"] == 10  # before the gap
    assert rows["op_kernel_2_51"]["graph_kernel_ns"] == 10  # after it: shifted by one
    assert "op_kernel_6_20" not in rows or rows["op_kernel_6_20"]["graph_kernel_ns"] == 0
    g = a["graph_replays"]
    assert (g["matched_launches"], g["matched_by_alignment"]) == (1, 1)
    (own,) = g["captures"]
    assert own["aligned_launches"] == 1 and g["refused"] == []
    assert own["differences"] == [
        "replayed node 20 of 99 ('kernel_6_20_v2') not in the capture",
        "captured node 20 of 101 ('kernel_6_20') not replayed",
        "captured node 50 of 101 ('kernel_1_50') not replayed",
        "captured node 100 of 101 ('trailing_gemm') not replayed",
    ]
    assert own["first_difference"] == own["differences"][0]
    text = "\n".join(render_graph_replays(t.attribution))
    assert "the trace: 1 launches matched by alignment, not exactly; unpaired: replayed" in text
    _check_sums(t)


def test_a_replay_too_far_from_every_capture_is_refused_with_its_first_difference():
    captured = [f"kernel_{i}" for i in range(40)]
    replayed = captured[:30] + [f"other_{i}" for i in range(10)]  # 75% alike: no match
    host, api, ops = _named_capture(captured, 100)
    r_ops, r_api = _replay(10_000, 50_000, [(n, K, 10) for n in replayed])
    t = op_table(attribute(make_trace(ops + r_ops, api + r_api, host_ops=host)))
    assert _by_code(t) == {"kernel_mismatch": 400}
    (own,) = t.attribution["graph_replays"]["captures"]
    assert own["first_difference"] == "node 30 of 40: replayed 'other_0', captured 'kernel_30'"


def _lcs_length(a: list[int], b: list[int]) -> int:
    """The longest common subsequence's length by the textbook O(n m) table."""
    prev = [0] * (len(b) + 1)
    for x in a:
        row = [0]
        for j, y in enumerate(b):
            row.append(prev[j] + 1 if x == y else max(prev[j + 1], row[j]))
        prev = row
    return prev[-1]


def test_align_is_a_longest_common_subsequence():
    rng = random.Random(7)
    for _ in range(200):
        a = [rng.randrange(4) for _ in range(rng.randrange(0, 40))]
        b = list(a)
        for _ in range(rng.randrange(0, 6)):  # a few edits of each kind
            op, at = rng.randrange(3), rng.randrange(len(b) + 1)
            if op == 0:
                b.insert(at, rng.randrange(6))
            elif at < len(b) and op == 1:
                b[at] = rng.randrange(6)
            elif at < len(b):
                del b[at]
        pairs = align(a, b, len(a) + len(b))
        assert pairs is not None and len(pairs) == _lcs_length(a, b)
        assert all(a[i] == b[j] for i, j in pairs)
        assert all(p[0] < q[0] and p[1] < q[1] for p, q in itertools.pairwise(pairs))
    assert align([1, 2, 3], [4, 5, 6], 5) is None  # 6 edits needed


def test_align_stays_fast_for_thousands_of_kernels():
    names = [i % 50 for i in range(5000)]
    other = [*names[:2500], 999, *names[2501:4000], *names[4001:], 7, 7]
    start = time.perf_counter()
    pairs = align(names, other, 250)
    assert pairs is not None and len(pairs) == 4998
    assert time.perf_counter() - start < 1.0


def test_a_refused_capture_without_kernel_names_still_says_where_it_parts():
    # the capture recorded one more launch than the replayed graph has, and names no
    # kernel: no alignment (kinds alone would align anything), but the first difference
    t = op_table(attribute(_trace([[*CAPTURED, ("aten::mm", "cudaLaunchKernel")]])))
    assert _by_code(t) == {"graph_unmatched": 2 * 137}
    (own,) = t.attribution["graph_replays"]["captures"]
    assert own["first_difference"] == "the first 3 nodes agree; replayed 3 ops, captured 4 nodes"
    # a copy where the replay ran a memset: parts at node 1, by kind
    t = op_table(
        attribute(_trace([[CAPTURED[0], ("x", "cudaMemcpyAsync"), CAPTURED[2], CAPTURED[2]]]))
    )
    (own,) = t.attribution["graph_replays"]["captures"]
    assert own["first_difference"] == (
        "node 1 of 3: replayed memset, captured copy (captured graph of 4 nodes)"
    )


def _eager(t0: int, calls: list[tuple[str, str]], corr0: int) -> tuple[list, list, list]:
    """An eager run (a cudagraph-tree warmup) at t0: per (op, kernel) the op around a
    launch of the kernel; returns (host_ops, api rows, GPU ops)."""
    host, api, ops = [], [], []
    for i, (op, kernel) in enumerate(calls):
        t = t0 + 10 * i
        host.append({"name": op, "start": t, "end": t + 8})
        api.append({"name": "cudaLaunchKernel", "start": t + 2, "end": t + 4,
                    "correlation": corr0 + i})  # fmt: skip
        ops.append({"name": kernel, "start": t + 5, "end": t + 7, "correlation": corr0 + i})
    return host, api, ops


def test_a_capture_naming_no_kernel_is_aligned_by_the_ops_that_launch_them():
    # a cudagraph-tree trace: an eager warmup (its kernels launched inside their ops), the
    # capture (launch calls inside the same ops, no kernel) and the graph's replay, which
    # lacks the capture's trailing node, skips node 50 and runs a kernel at node 20 that
    # no op launches eagerly: 98 of its 99 ops align by their launching ops
    calls = [(f"aten::op{i % 5}", f"kernel_{i}") for i in range(100)]
    host, api, ops = _eager(200_000, calls, 1_000)
    c_host, c_api = _capture(0, [(op, "cudaLaunchKernel") for op, _ in calls]
                             + [("aten::trailing", "cudaLaunchKernel")], 100)  # fmt: skip
    replayed = [k for i, (_, k) in enumerate(calls) if i != 50]
    replayed[20] = "kernel_20_v2"
    r_ops, r_api = _replay(10_000, 50_000, [(n, K, 10) for n in replayed])
    tr = make_trace(ops + r_ops, api + c_api + r_api, host_ops=host + c_host)
    t = op_table(attribute(tr))
    a = t.attribution
    assert a["graph_kernel_ns"] == 990 and a["graph_attributed_ns"] == 980  # 98 of 99 ops
    assert _by_code(t) == {"graph_unaligned": 10}
    rows = {r["name"]: r for r in t.ops}
    # 20 nodes per op name: op0 loses node 50, op0's share of node 20 is unaligned
    assert [rows[f"aten::op{k}"]["graph_kernel_ns"] for k in range(5)] == [180, 200, 200, 200, 200]
    g = a["graph_replays"]
    assert (g["matched_launches"], g["matched_by_alignment"]) == (1, 1)
    (own,) = g["captures"]
    assert own["named_nodes"] == 0 and g["refused"] == []
    assert own["differences"][0] == "replayed node 20 of 99 ('kernel_20_v2') not in the capture"
    assert (
        "captured node 100 of 101 ('launched in aten::trailing') not replayed"
        in (own["differences"])
    )
    _check_sums(t)
