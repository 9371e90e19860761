"""Host attribution: the compiled innermost-activity sweep against its brute-force twin
(helpers.host_twin), attribute()'s host_bound charges and host windows on hand-built and
random traces (sums, tie rules, event-order independence), and CPU-only traces."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import host_twin
from helpers.synth import make_trace, shuffled
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimings._native import _host
from pytimings.analysis.attribution import attribute
from pytimings.analysis.findings import host_bound_gaps
from pytimings.analysis.host import interval_charges
from pytimings.model.trace import ACTIVITY_KIND_NAMES, ActivityKind
from pytimings.session import Analysis

US = 1000
UNTRACED = int(ActivityKind.UNTRACED)
NAMES = ["", "b", "a", "c"]  # string ids 0..3; by text: "" < a < b < c


# ------------------------------------------------------------- the kernel vs its twin


@st.composite
def activities(draw):
    n = draw(st.integers(0, 12))
    rows = []
    for _ in range(n):
        s = draw(st.integers(0, 40))
        rows.append(
            (
                s,
                s + draw(st.integers(0, 25)),
                draw(st.integers(0, 4)),  # cuda_api .. range
                draw(st.integers(1, 3)),  # name id
                draw(st.integers(0, 2)),  # thread
            )
        )
    return rows


@st.composite
def queries(draw):
    n = draw(st.integers(0, 6))
    out = []
    for _ in range(n):
        s = draw(st.integers(-5, 60))
        e = s + draw(st.integers(0, 30))
        out.append((s, e, draw(st.integers(0, 2)), draw(st.integers(0, 3))))
    return out


def _kernel(
    acts, qs, perm, n_parts=1, chunk_rows=1 << 20, block_rows=4096, only_kind=-1, by_rows=False
):
    """The kernel on the activities in the row order ``perm`` (unsorted), dealt into
    ``n_parts`` tables (row i to part i % n_parts), thread by thread, as the twin's dict
    (``by_rows``: each table read through the index of its rows on the thread, backwards)."""
    ordered = [acts[i] for i in perm]
    parts = [ordered[j::n_parts] for j in range(n_parts)]
    rank = np.array([0, 2, 1, 3], dtype=np.int32)  # the rank of NAMES[i] by text
    got = []

    def cols(j, dt):
        return [np.array([a[j] for a in p], dtype=dt) for p in parts]

    for t in {q[2] for q in qs}:
        mq = sorted((q for q in qs if q[2] == t), key=lambda q: q[0])
        got.append(
            _host.thread_charges(
                cols(0, np.int64),
                cols(1, np.int64),
                cols(2, np.int8),
                cols(3, np.int32),
                cols(4, np.int32),
                np.full(n_parts, -1, dtype=np.int8),
                t,
                only_kind,
                rank,
                np.array([q[0] for q in mq], dtype=np.int64),
                np.array([q[1] for q in mq], dtype=np.int64),
                np.array([q[3] for q in mq], dtype=np.int64),
                len(NAMES),
                UNTRACED,
                chunk_rows,
                block_rows,
                rows=[
                    np.array([i for i, a in enumerate(p) if a[4] == t][::-1], dtype=np.int64)
                    for p in parts
                ]
                if by_rows
                else None,
            )
        )
    return _charge_dict(got)


def _charge_dict(got):
    rows, label, ns = (
        np.concatenate([p[i] for p in got] or [[]]).astype(np.int64) for i in range(3)
    )
    out: dict[tuple[int, int, str], int] = {}
    for r, lab, v in zip(rows.tolist(), label.tolist(), ns.tolist(), strict=True):
        key = (r, lab // len(NAMES), NAMES[lab % len(NAMES)])
        assert v > 0
        out[key] = out.get(key, 0) + v
    return out


def _brute(acts, qs):
    return host_twin.charges([(s, e, k, NAMES[n], t) for s, e, k, n, t in acts], qs, UNTRACED)


@settings(max_examples=300, deadline=None)
@given(
    activities(),
    queries(),
    st.randoms(use_true_random=False),
    st.integers(1, 3),
    st.sampled_from([1, 2, 3, 1 << 20]),
    st.sampled_from([1, 2, 5, 4096]),
)
def test_kernel_matches_brute_force_in_any_row_order(acts, qs, rnd, n_parts, chunk, block):
    """Any row order, any split into tables, any chunk and block size: the same charges
    as the twin (small chunks and blocks: the sweep crosses chunks, skips blocks)."""
    want = _brute(acts, qs)
    perm = list(range(len(acts)))
    assert _kernel(acts, qs, perm, n_parts, chunk, block) == want
    rnd.shuffle(perm)
    assert _kernel(acts, qs, perm, n_parts, chunk, block) == want
    assert _kernel(acts, qs, perm, n_parts, chunk, block, by_rows=True) == want
    for qid in {q[3] for q in qs}:  # each query id's charges sum to its queries' length
        total = sum(max(0, e - s) for s, e, _, i in qs if i == qid)
        assert sum(v for (i, _, _), v in want.items() if i == qid) == total


@settings(max_examples=150, deadline=None)
@given(activities(), queries(), st.sampled_from([1, 2, 1 << 20]))
def test_kernel_of_one_kind_sees_only_that_kind(acts, qs, chunk):
    """only_kind (the innermost range): the charges of the activities of that kind alone."""
    rng = int(ActivityKind.RANGE)
    want = _brute([a for a in acts if a[2] == rng], qs)
    assert _kernel(acts, qs, range(len(acts)), 2, chunk, 2, only_kind=rng) == want


@settings(max_examples=150, deadline=None)
@given(activities(), queries())
def test_kernel_reads_a_constant_kind_per_table(acts, qs):
    """Tables whose rows all have one kind (ranges, API calls) are given that kind instead
    of a column: the same charges; with only_kind, tables of another kind are skipped."""
    rank = np.array([0, 2, 1, 3], dtype=np.int32)
    by_kind = [[a for a in acts if a[2] == k] for k in range(5)]

    def run(only):
        got = []
        for t in {q[2] for q in qs}:
            mq = sorted((q for q in qs if q[2] == t), key=lambda q: q[0])
            col = lambda j, dt, rows: np.array([a[j] for a in rows], dtype=dt)  # noqa: E731
            got.append(
                _host.thread_charges(
                    [col(0, np.int64, p) for p in by_kind],
                    [col(1, np.int64, p) for p in by_kind],
                    [None] * 5,
                    [col(3, np.int32, p) for p in by_kind],
                    [col(4, np.int32, p) for p in by_kind],
                    np.arange(5, dtype=np.int8),
                    t,
                    only,
                    rank,
                    col(0, np.int64, mq),
                    col(1, np.int64, mq),
                    col(3, np.int64, mq),
                    len(NAMES),
                    UNTRACED,
                )
            )
        return _charge_dict(got)

    assert run(-1) == _brute(acts, qs)
    rng = int(ActivityKind.RANGE)
    assert run(rng) == _brute([a for a in acts if a[2] == rng], qs)


def test_kernel_on_chains_of_overlapping_activities():
    """A chain of activities each overlapping the next (none nested): each ends buried
    under a later start, so the heap is compacted as it grows; far apart starts (2**62):
    the sort keys cannot hold start and row together. Both against the twin."""
    chain = [(10 * i, 10 * i + 25, 2 + i % 2, 1 + i % 3, 0) for i in range(300)]
    inner = [(10 * i + 3, 10 * i + 5, 0, 2, 0) for i in range(0, 300, 7)]
    qs = [(0, 1500, 0, 0), (1400, 3100, 0, 1), (2995, 3005, 0, 2)]
    acts = chain + inner
    for chunk in (1 << 20, 16):
        assert _kernel(acts, qs, range(len(acts))[::-1], 2, chunk, 8) == _brute(acts, qs)
    far = [(-(2**62), -(2**62) + 9, 2, 1, 0), (0, 5, 3, 2, 0), (2**62, 2**62 + 7, 4, 3, 0)]
    far += [(2, 4, 0, 1, 0), (2**62 + 1, 2**62 + 3, 2, 2, 0)]
    qs = [(-(2**62) - 2, 2**62 + 10, 0, 0), (1, 3, 0, 1)]
    for chunk in (1 << 20, 1):
        assert _kernel(far, qs, [4, 2, 0, 3, 1], 2, chunk) == _brute(far, qs)


def test_kernel_tie_rules():
    """Same start: the earlier end is innermost; same extent: the lower kind, then the
    name's text (not its id)."""
    acts = [
        (0, 10, ActivityKind.RANGE, 1, 0),  # range "b" [0, 10)
        (0, 6, ActivityKind.RANGE, 1, 0),  # range "b" [0, 6): same start, ends first
        (2, 4, ActivityKind.PYTHON, 1, 0),  # python "b" [2, 4) ...
        (2, 4, ActivityKind.CPU_OP, 3, 0),  # ... and cpu_op "c": cpu_op wins
        (7, 9, ActivityKind.CPU_OP, 1, 0),  # cpu_op "b" [7, 9) ...
        (7, 9, ActivityKind.CPU_OP, 2, 0),  # ... and cpu_op "a": "a" wins by text
    ]
    for perm in (range(len(acts)), [5, 3, 1, 4, 2, 0]):
        got = _kernel(acts, [(0, 12, 0, 0)], perm)
        assert got == {
            (0, ActivityKind.RANGE, "b"): 2 + 2 + 1 + 1,  # [0,2) [4,6) [6,7) [9,10)
            (0, ActivityKind.CPU_OP, "c"): 2,
            (0, ActivityKind.CPU_OP, "a"): 2,
            (0, UNTRACED, ""): 2,
        }


def test_kernel_rejects_bad_input():
    z = np.zeros(2, dtype=np.int64)
    one = [np.array([0, 5], dtype=np.int64)]
    i32 = np.zeros(2, np.int32)
    i8 = np.zeros(2, np.int8)

    def call(q_s=z[:0], name=i32, kind=i8, ends=None, n_names=1):
        return _host.thread_charges(
            one,
            ends if ends is not None else [z + 9],
            [kind],
            [name],
            [i32],
            np.full(1, -1, np.int8),
            0,
            -1,
            np.zeros(2, np.int32),
            q_s,
            q_s + 1,
            q_s * 0,
            n_names,
            UNTRACED,
        )

    with pytest.raises(ValueError, match="not sorted by start"):
        call(q_s=np.array([5, 0], dtype=np.int64))
    q = np.array([0], dtype=np.int64)
    with pytest.raises(ValueError, match="name id is out of range"):
        call(q, name=np.array([0, 1], np.int32))
    with pytest.raises(ValueError, match="kind is not a kind"):
        call(q, kind=np.array([0, 9], np.int8))
    with pytest.raises(ValueError, match="columns differ in length"):
        call(q, ends=[z[:1]])
    with pytest.raises(ValueError, match="row index is out of range"):
        _host.thread_charges(one, [z + 9], [None], [i32], [i32], np.zeros(1, np.int8), 0, -1,
                             i32, q, q + 1, q, 1, UNTRACED, rows=[np.array([2])])  # fmt: skip
    with pytest.raises(ValueError, match="part lists differ"):
        _host.thread_charges(one, [], [None], [i32], [i32], np.zeros(1, np.int8), 0, -1,
                             i32, q, q, q, 1, UNTRACED)  # fmt: skip
    assert [a.tolist() for a in call(q)] == [[0], [0], [1]]  # [0, 1) in the activity 0


def test_names_used_marks_the_ids_present():
    got = _host.names_used([np.array([3, 1, 3], np.int32), np.array([], np.int32)], 5)
    assert got.tolist() == [0, 1, 0, 1, 0]
    with pytest.raises(ValueError, match="out of range"):
        _host.names_used([np.array([5], np.int32)], 5)


# ------------------------------------------------------------- attribute()


def worked_example(host_ops=(), ranges=()):
    """docs/attribution.md section 9."""
    return make_trace(
        ops=[
            {"name": "gemm", "start": 20 * US, "end": 45 * US, "correlation": 1},
            {
                "name": "ncclAllReduce",
                "start": 30 * US,
                "end": 55 * US,
                "correlation": 2,
                "stream": 8,
            },
            {
                "name": "memcpy",
                "kind": 1,
                "copy_kind": 1,
                "bytes": 1 << 20,
                "start": 60 * US,
                "end": 70 * US,
                "correlation": 3,
            },
            {"name": "relu", "start": 85 * US, "end": 95 * US, "correlation": 4},
        ],
        api=[
            {"name": "cudaLaunchKernel", "start": 10 * US, "end": 15 * US, "correlation": 1},
            {"name": "cudaLaunchKernel", "start": 16 * US, "end": 18 * US, "correlation": 2},
            {"name": "cudaMemcpyAsync", "start": 50 * US, "end": 52 * US, "correlation": 3},
            {"name": "cudaLaunchKernel", "start": 75 * US, "end": 80 * US, "correlation": 4},
        ],
        ranges=[{"name": "step", "start": 0, "end": 100 * US}, *ranges],
        host_ops=host_ops,
    )


def test_worked_example_of_the_docs():
    doc = Analysis(attribute(worked_example())).to_document()
    assert doc["schema"] == "pytimings.attribution/3"
    w = doc["windows"][0]
    assert {k: w[k] for k in w if k.endswith("_ns")} == {
        "start_ns": 0,
        "end_ns": 100 * US,
        "window_ns": 100 * US,
        "compute_ns": 20 * US,
        "comm_overlapped_ns": 15 * US,
        "comm_exposed_ns": 10 * US,
        "memory_ns": 10 * US,
        "host_bound_ns": 15 * US,
        "launch_overhead_ns": 20 * US,
        "device_wait_ns": 5 * US,
        "idle_other_ns": 5 * US,
    }
    step = [{"kind": "range", "name": "step", "ns": 15 * US}]
    assert w["host_bound_by_activity"] == step and w["host_bound_by_range"] == step
    assert doc["totals"]["host_bound_by_activity"] == step
    assert doc["host_windows"] == [] and doc["host_totals"] == {"window_ns": 0, "by_activity": []}
    doc = Analysis(attribute(worked_example(), by="step")).to_document()
    assert doc["host_windows"] == [
        {
            "name": "step",
            "start_ns": 0,
            "end_ns": 100 * US,
            "rank": 0,
            "window_ns": 100 * US,
            "by_activity": [
                {"kind": "range", "name": "step", "ns": 86 * US},
                {"kind": "cuda_api", "name": "cudaLaunchKernel", "ns": 12 * US},
                {"kind": "cuda_api", "name": "cudaMemcpyAsync", "ns": 2 * US},
            ],
        }
    ]
    assert doc["host_totals"]["window_ns"] == 100 * US


def test_host_bound_goes_to_the_innermost_op_and_range():
    """The worked example plus, on thread 0, a cpu_op [2, 8) µs with a python frame [3, 5)
    inside it and a nested range 'inner' [6, 9) µs (it starts last, so it is innermost
    over [6, 9)): host_bound [0, 10) and [70, 75) µs."""
    tr = worked_example(
        host_ops=[
            {"name": "aten::mm", "start": 2 * US, "end": 8 * US},
            {
                "name": "model.py(12): forward",
                "kind": ActivityKind.PYTHON,
                "start": 3 * US,
                "end": 5 * US,
            },
        ],
        ranges=[{"name": "inner", "start": 6 * US, "end": 9 * US, "depth": 1}],
    )
    w = Analysis(attribute(tr)).to_document()["windows"][0]
    assert w["host_bound_by_activity"] == [
        {"kind": "range", "name": "step", "ns": 8 * US},  # [0,2) [9,10) [70,75)
        {"kind": "range", "name": "inner", "ns": 3 * US},  # [6,9)
        {"kind": "cpu_op", "name": "aten::mm", "ns": 2 * US},  # [2,3) [5,6); ties: kind order
        {"kind": "python", "name": "model.py(12): forward", "ns": 2 * US},  # [3,5)
    ]
    assert w["host_bound_by_range"] == [
        {"kind": "range", "name": "step", "ns": 12 * US},
        {"kind": "range", "name": "inner", "ns": 3 * US},
    ]
    assert w["host_bound_ns"] == 15 * US


def test_cpu_only_trace_gives_host_windows():
    tr = make_trace(
        [],
        ranges=[
            {"name": "step", "start": 0, "end": 100},
            {"name": "step", "start": 100, "end": 160},
            {"name": "sleepy", "start": 20, "end": 70, "depth": 1},
        ],
        host_ops=[{"name": "aten::add", "start": 110, "end": 150}],
    )
    a = attribute(tr, by="step")
    assert len(a.windows) == 0 and a.totals["window_ns"] == 0
    doc = Analysis(a).to_document()
    assert [w["by_activity"] for w in doc["host_windows"]] == [
        [
            {"kind": "range", "name": "sleepy", "ns": 50},
            {"kind": "range", "name": "step", "ns": 50},
        ],
        [
            {"kind": "cpu_op", "name": "aten::add", "ns": 40},
            {"kind": "range", "name": "step", "ns": 20},
        ],
    ]
    assert doc["host_totals"] == {
        "window_ns": 160,
        "by_activity": [
            {"kind": "range", "name": "step", "ns": 70},
            {"kind": "range", "name": "sleepy", "ns": 50},
            {"kind": "cpu_op", "name": "aten::add", "ns": 40},
        ],
    }
    # without --by: each thread's host view over the whole trace
    (w,) = Analysis(attribute(tr)).to_document()["host_windows"]
    assert (w["name"], w["start_ns"], w["end_ns"]) == ("python3", 0, 160)


def test_os_calls_only_trace_gives_each_threads_host_view():
    """No GPU ops, no ranges: OS runtime calls on two threads. Without --by, one host
    window per thread from its first call's start to its last one's end."""
    from pytimings.report.analysis_text import render_attribution

    os_call = {"kind": ActivityKind.OS}
    threads = ({"pid": 1, "tid": 10, "name": "main"}, {"pid": 1, "tid": 11, "name": ""})
    host = [
        {**os_call, "name": "poll", "start": 0, "end": 700 * US},
        {**os_call, "name": "ioctl", "start": 800 * US, "end": 1000 * US},
        {**os_call, "name": "pthread_cond_wait", "start": 100 * US, "end": 400 * US, "thread": 1},
    ]
    tr = make_trace([], host_ops=host, threads=threads)
    a = attribute(tr)
    doc = Analysis(a).to_document()
    assert doc["windows"] == []
    assert [(w["name"], w["start_ns"], w["end_ns"]) for w in doc["host_windows"]] == [
        ("main", 0, 1000 * US),
        ("tid 11", 100 * US, 400 * US),
    ]
    assert doc["host_windows"][0]["by_activity"] == [
        {"kind": "os", "name": "poll", "ns": 700 * US},
        {"kind": "os", "name": "ioctl", "ns": 200 * US},
        {"kind": "untraced", "name": "", "ns": 100 * US},
    ]
    assert doc["host_totals"]["window_ns"] == 1300 * US
    (f,) = Analysis(a).findings
    assert f.title.startswith("os 'poll' holds 53.8% of the host time in 2 thread host windows")
    text = render_attribution(a, Analysis(a).findings, ["osrt"])
    assert "host view of each thread over the whole trace" in text and "--by NAME" in text
    assert "Host time of thread 'main' (1.00 ms from its first activity to its last" in text
    assert "Host time of thread 'tid 11'" in text


# ------------------------------------------------------------- random traces


@st.composite
def host_trace(draw):
    n = draw(st.integers(1, 8))
    ops, api = [], []
    for i in range(n):
        s = draw(st.integers(0, 80))
        ops.append({"start": s, "end": s + draw(st.integers(0, 10)), "correlation": i})
        ls = draw(st.integers(0, s + 3))
        api.append(
            {
                "start": ls,
                "end": ls + draw(st.integers(0, 3)),
                "correlation": i,
                "thread": draw(st.integers(0, 1)),
            }
        )
    ranges, host_ops = [], []
    for _ in range(draw(st.integers(0, 4))):
        s = draw(st.integers(0, 80))
        ranges.append(
            {
                "start": s,
                "end": s + draw(st.integers(0, 40)),
                "name": draw(st.sampled_from(["w", "v"])),
                "thread": draw(st.integers(0, 1)),
            }
        )
    for _ in range(draw(st.integers(0, 6))):
        s = draw(st.integers(0, 80))
        host_ops.append(
            {
                "start": s,
                "end": s + draw(st.integers(0, 20)),
                "name": draw(st.sampled_from(["aten::mm", "aten::add", "f.py(1): g"])),
                "kind": draw(st.sampled_from([1, 2, 3])),
                "thread": draw(st.integers(0, 1)),
            }
        )
    threads = [{"pid": 100, "tid": 100 + i, "name": f"t{i}"} for i in range(2)]
    return make_trace(ops, api, ranges, threads, host_ops=host_ops)


def _activities(tr, ranges_only=False):
    """All host activities of ``tr`` as twin tuples (start, end, kind, name, thread)."""
    s = tr.strings
    out = [
        (r["start"], r["end"], int(ActivityKind.RANGE), s[r["name"]], r["thread"])
        for r in tr.ranges.to_pandas().to_dict("records")
        if r["thread"] >= 0
    ]
    if ranges_only:
        return out
    out += [
        (r["start"], r["end"], int(ActivityKind.CUDA_API), s[r["name"]], r["thread"])
        for r in tr.api_calls.to_pandas().to_dict("records")
    ]
    out += [
        (r["start"], r["end"], r["kind"], s[r["name"]], r["thread"])
        for r in tr.host_ops.to_pandas().to_dict("records")
    ]
    return out


def _as_dict(lists, offset=0):
    return {
        (i + offset, ACTIVITY_KIND_NAMES.index(x["kind"]), x["name"]): x["ns"]
        for i, items in enumerate(lists)
        for x in items
    }


@settings(max_examples=150, deadline=None)
@given(host_trace(), st.integers(0, 2**32 - 1))
def test_random_traces_charge_the_innermost_activity(tr, seed):
    for by in (None, "w"):
        if by and "w" not in {tr.strings[i] for i in tr.ranges["name"].tolist()}:
            continue
        a = attribute(tr, by=by)
        doc = Analysis(a).to_document()
        g = a.gaps
        thread = a.launches.thread[g.op]
        qs = list(
            zip(
                g.g0.tolist(),
                g.host_bound_end.tolist(),
                thread.tolist(),
                g.window_row.tolist(),
                strict=True,
            )
        )
        for key, ranges_only in (("host_bound_by_activity", False), ("host_bound_by_range", True)):
            want = host_twin.charges(_activities(tr, ranges_only), qs, UNTRACED)
            assert _as_dict([w[key] for w in doc["windows"]]) == want
            for w in doc["windows"]:
                assert sum(x["ns"] for x in w[key]) == w["host_bound_ns"]
                assert [x["ns"] for x in w[key]] == sorted((x["ns"] for x in w[key]), reverse=True)
        hq = [
            (w["start_ns"], w["end_ns"], int(t), i)
            for i, (w, t) in enumerate(
                zip(doc["host_windows"], a.host.windows["thread"], strict=True)
            )
        ]
        want = host_twin.charges(_activities(tr), hq, UNTRACED)
        assert _as_dict([w["by_activity"] for w in doc["host_windows"]]) == want
        b = Analysis(attribute(shuffled(tr, seed), by=by)).to_document()
        for k in ("totals", "windows", "host_windows", "host_totals"):
            assert b[k] == doc[k]


@settings(max_examples=100, deadline=None)
@given(host_trace(), st.lists(st.tuples(st.integers(0, 90), st.integers(0, 30), st.integers(0, 1),
                                        st.integers(0, 3)), max_size=6))  # fmt: skip
def test_interval_charges_of_any_queries_match_the_twin(tr, raw):
    """host.interval_charges (what the host-bound findings charge their gaps with): any
    intervals, overlapping or not, on either thread, summed per query row."""
    qs = [(s, s + n, th, row) for s, n, th, row in raw]
    c = interval_charges(
        tr,
        np.asarray([q[0] for q in qs], dtype=np.int64),
        np.asarray([q[1] for q in qs], dtype=np.int64),
        np.asarray([q[2] for q in qs], dtype=np.int32),
        np.asarray([q[3] for q in qs], dtype=np.int64),
    )
    got = {
        (r, k, tr.strings[n]): v
        for r, k, n, v in zip(*(c[x].tolist() for x in ("row", "kind", "name", "ns")), strict=True)
    }
    want = {k: v for k, v in host_twin.charges(_activities(tr), qs, UNTRACED).items() if v}
    assert got == want


@settings(max_examples=100, deadline=None)
@given(host_trace())
def test_host_bound_findings_name_the_twins_activities_of_their_gaps(tr):
    a = attribute(tr)
    g = a.gaps
    for f in host_bound_gaps(a):
        rows = f.fix.host_bound
        qs = [
            (int(g.g0[r]), int(g.host_bound_end[r]), int(a.launches.thread[g.op[r]]), 0)
            for r in rows.tolist()
        ]
        want = {
            (k, n): v for (_, k, n), v in host_twin.charges(_activities(tr), qs, UNTRACED).items()
        }
        got = {(ACTIVITY_KIND_NAMES.index(x["kind"]), x["name"]): x["ns"]
               for x in f.evidence["host_activities"]}  # fmt: skip
        assert got == {k: v for k, v in want.items() if v}
        assert sum(got.values()) == f.evidence["total_ns"]
        per_gap = [host_twin.charges(_activities(tr), [q], UNTRACED) for q in qs]
        for x in f.evidence["host_activities"]:
            key = (0, ACTIVITY_KIND_NAMES.index(x["kind"]), x["name"])
            assert x["gaps"] == sum(1 for p in per_gap if p.get(key, 0) > 0)


def test_each_threads_section_names_its_rank_when_there_are_several():
    """Two ranks' MainThreads were two sections of one title (issue 46)."""
    from pytimings.report.analysis_text import render_attribution

    os_call = {"kind": ActivityKind.OS}
    threads = ({"pid": 1, "tid": 10, "name": "MainThread", "rank": 0},
               {"pid": 2, "tid": 20, "name": "MainThread", "rank": 1})  # fmt: skip
    host = [
        {**os_call, "name": "poll", "start": 0, "end": 700 * US},
        {**os_call, "name": "ioctl", "start": 0, "end": 300 * US, "thread": 1, "rank": 1},
    ]
    a = attribute(make_trace([], host_ops=host, threads=threads))
    text = render_attribution(a, Analysis(a).findings, ["r"])
    assert "Host time of thread 'MainThread' of rank 0 (0.70 ms" in text, text
    assert "Host time of thread 'MainThread' of rank 1 (0.30 ms" in text, text
