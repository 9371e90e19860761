"""Findings on synthetic traces: what the numbers show, and nothing they do not."""

from __future__ import annotations

import pytest
from helpers.synth import make_trace

from pytimings.analysis.attribution import attribute
from pytimings.analysis.findings import graphs, host_bound_gaps, host_windows, kernels, memory
from pytimings.model.trace import CopyKind, MemKind, OpKind, Trace
from pytimings.session import Analysis

MS = 1_000_000


def stepped_trace(stall_from: int = 2, steps: int = 6):
    """`steps` windows 'step' of 3 kernels; from step `stall_from` on, the host spends 20 ms
    inside range 'plan' (calling cuModuleLoadData for 1 ms of it) before launching 'attn'."""
    ops, api, ranges = [], [], []
    t = 0
    corr = 0
    for s in range(steps):
        step = {"start": t, "end": t, "name": "step", "payload": float(s)}
        ranges.append(step)
        t += 100_000  # the host prepares 0.1 ms before the first launch
        for name in ("norm", "attn", "mlp"):
            if name == "attn" and s >= stall_from:
                ranges.append({"start": t, "end": t + 20 * MS, "name": "plan", "depth": 1})
                api.append({"start": t + 5 * MS, "end": t + 6 * MS, "name": "cuModuleLoadData"})
                t += 20 * MS
            corr += 1
            api.append({"start": t, "end": t + 5_000, "correlation": corr})
            ops.append({"start": t + 10_000, "end": t + 60_000, "name": name, "correlation": corr})
            t += 70_000
        step["end"] = t
    return make_trace(ops, api, ranges)


def test_host_stall_before_one_kernel_is_named_with_what_the_host_did():
    a = attribute(stepped_trace(), by="step")
    f = next(x for x in Analysis(a).findings if x.layer == "scheduling")
    assert f.evidence["op_name"] == "attn"
    assert f.evidence["gaps"] == 4 and f.evidence["window_rows"] == [2, 3, 4, 5]
    # the innermost activities of the contract's host attribution, over exactly these
    # gaps: 'plan' self time 19 ms and cuModuleLoadData 1 ms per gap, and the 10 µs of
    # 'step' between the previous kernel's end and 'plan'
    acts = f.evidence["host_activities"]
    assert [(x["kind"], x["name"], x["ns"], x["gaps"]) for x in acts] == [
        ("range", "plan", 76 * MS, 4),
        ("cuda_api", "cuModuleLoadData", 4 * MS, 4),
        ("range", "step", 40_000, 4),
    ]
    assert acts[0]["window_rows"] == [2, 3, 4, 5]
    assert acts[0]["share"] == 76 * MS / f.evidence["total_ns"]
    assert "kernel 'attn': 4 gaps in 4 of 6 step windows (3-6)" in f.title
    # the second activity holds 5% (< ACTIVITY_MIN_SHARE): only the first is named
    assert f.title.endswith("meanwhile thread 'python3' is in range 'plan' 95.0% "
                            "(76.00 ms in 4 gaps, 4 windows)")  # fmt: skip
    assert f.evidence["sync_wait"] is None
    # most windows are slow: no tail to report (p99 ~ p50)
    assert not [x for x in Analysis(a).findings if x.layer == "application"]
    b = attribute(stepped_trace(stall_from=4), by="step")
    tail = next(x for x in Analysis(b).findings if x.layer == "application")
    assert (
        "p99 20.31 ms vs p50 0.31 ms (65.52x); in the slowest 2 windows "
        "host_bound grows most (+20.00 ms" in tail.title
    )


def test_no_finding_without_its_numbers():
    a = attribute(stepped_trace(stall_from=99), by="step")
    layers = [f.layer for f in Analysis(a).findings]
    assert "parallel" not in layers  # no communication at all
    assert "memory" not in layers  # no copies
    # the 0.1 ms at each step start is host_bound, named after the kernel that ends it;
    # the 10 µs the host takes between launches, after the others
    sched = {f.evidence["op_name"]: f for f in Analysis(a).findings if f.layer == "scheduling"}
    assert (
        sched["norm"].evidence["at_window_start"]
        and "first op of each window" in sched["norm"].title
    )
    assert sched["norm"].evidence["median_ns"] == 100_000  # then 10 µs launch_overhead
    assert not sched["attn"].evidence["at_window_start"]
    assert sched["attn"].evidence["median_ns"] == 10_000
    graphs = [f for f in Analysis(a).findings if "CUDA graph" in f.title]
    assert graphs and graphs[0].title.startswith(
        "6 of 6 step windows launch the same 3 kernels, none from a CUDA graph"
    )


def test_memory_findings():
    ops = [
        {"start": 0, "end": 10 * MS, "name": "gemm", "correlation": 1},
        {
            "start": 10 * MS,
            "end": 15 * MS,
            "kind": OpKind.MEMCPY,
            "copy_kind": CopyKind.DTOH,
            "src_mem": MemKind.DEVICE,
            "dst_mem": MemKind.PAGEABLE,
            "bytes": 10**8,
            "name": "copy",
            "correlation": 2,
        },
    ]
    a = attribute(make_trace(ops), by=None)
    titles = [f.title for f in Analysis(a).findings if f.layer == "memory"]
    assert any(t.startswith("memory (memcpy/memset") and "33.3%" in t for t in titles)
    assert any(t.startswith("1 memcpy uses pageable host memory (5.00 ms") for t in titles)
    assert any(t.endswith("; 1 memcpy moves 100.0 MB") for t in titles)
    # two more copies the trace gave no size (the loaders record 0): the bytes are a floor
    more = [{**ops[1], "start": 15 * MS + i, "end": 15 * MS + i + 1, "bytes": 0,
             "correlation": 3 + i} for i in range(2)]  # fmt: skip
    found = [f for f in Analysis(attribute(make_trace(ops + more))).findings if f.layer == "memory"]
    (mem,) = [f for f in found if f.title.startswith("memory (")]
    assert mem.title.endswith("; 3 memcpys move at least 100.0 MB (2 with no byte count)")
    assert (mem.evidence["bytes"], mem.evidence["unknown_bytes"]) == (10**8, 2)
    (pg,) = [f for f in found if "pageable" in f.title]
    assert pg.title.endswith(", at least 100.0 MB (2 with no byte count))")


def _two_ranks(kernels: tuple[int, int]) -> Trace:
    traces = []
    for r, n in enumerate(kernels):
        ops = [
            {"start": i * MS, "end": i * MS + 5_000, "correlation": i, "rank": r} for i in range(n)
        ]
        ops.append(
            {
                "start": n * MS,
                "end": n * MS + MS,
                "kind": OpKind.MEMCPY,
                "copy_kind": CopyKind.HTOD,
                "src_mem": MemKind.PAGEABLE,
                "dst_mem": MemKind.DEVICE,
                "bytes": 1000,
                "name": "copy",
                "rank": r,
            }
        )
        api = [
            {"start": i * MS - 1000, "end": i * MS, "correlation": i, "rank": r} for i in range(n)
        ]
        threads = [{"pid": 100, "tid": 100, "name": "python3", "rank": r}]
        traces.append(make_trace(ops, api, threads=threads))
    return Trace.merge(traces)


def test_kernel_and_memory_findings_count_only_the_selected_rank():
    a = attribute(_two_ranks((2, 5)), ranks=[0])
    (k,) = kernels(a)
    assert k.evidence["kernels"] == 2 and "2 of 2 eager kernels" in k.title
    mem = {f.title.split(" ")[1]: f for f in memory(a)}
    assert mem["memcpy"].evidence["pageable_copies"] == 1  # not rank 1's copy
    assert next(f for f in memory(a) if "memory (" in f.title).evidence["memcpys"] == 1
    b = attribute(_two_ranks((2, 5)))
    assert kernels(b)[0].evidence["kernels"] == 7


def test_pageable_copy_loss_is_the_time_not_hidden_under_compute():
    ops = [
        {"start": 0, "end": 10 * MS, "name": "gemm", "correlation": 1},
        {
            "start": 2 * MS,  # 2-7 ms: hidden under gemm; 8-12 ms: 2 ms exposed
            "end": 7 * MS,
            "kind": OpKind.MEMCPY,
            "copy_kind": CopyKind.HTOD,
            "src_mem": MemKind.PAGEABLE,
            "stream": 8,
            "name": "copy",
        },
        {
            "start": 8 * MS,
            "end": 12 * MS,
            "kind": OpKind.MEMCPY,
            "copy_kind": CopyKind.HTOD,
            "src_mem": MemKind.PAGEABLE,
            "stream": 8,
            "name": "copy",
        },
    ]
    a = attribute(make_trace(ops))
    assert a.totals["memory_ns"] == 2 * MS
    (f,) = [x for x in memory(a) if "pageable" in x.title]
    assert f.loss_ns == 2 * MS == f.evidence["exposed_ns"]
    assert f.evidence["copy_ns"] == 9 * MS


def test_launch_overhead_is_not_claimed_twice():
    a = attribute(stepped_trace(stall_from=99), by="step")
    (k,) = kernels(a)
    (g,) = graphs(a)
    lo = a.totals["launch_overhead_ns"]
    assert lo > 0 and k.loss_ns + g.loss_ns == lo
    assert g.loss_ns == lo  # every window repeats: the graph finding claims all of it
    assert k.evidence["launch_overhead_ns"] == lo
    # without repeating windows the kernel finding keeps it all
    (k,) = kernels(attribute(stepped_trace(stall_from=99)))
    assert k.loss_ns == a.totals["launch_overhead_ns"]


def test_a_sync_with_an_idle_gpu_is_a_wait_on_nothing_the_trace_shows():
    """The host sits 1 ms in cudaStreamSynchronize (its nsys synchronization record runs
    50 µs longer) before launching 'b', with no GPU op running meanwhile."""
    ops = [
        {"start": 10_000, "end": 60_000, "name": "a", "correlation": 1},
        {"start": 1_210_000, "end": 1_260_000, "name": "b", "correlation": 2},
    ]
    api = [
        {"start": 0, "end": 5_000, "correlation": 1},
        {"start": 100_000, "end": 1_100_000, "name": "cudaStreamSynchronize", "correlation": 9},
        {"start": 1_200_000, "end": 1_205_000, "correlation": 2},
    ]
    # the synchronization record of that call (nsys SYNCHRONIZATION table): not a host
    # activity, the time in the call is the call's
    syncs = [{"start": 100_000, "end": 1_150_000, "correlation": 9}]
    a = attribute(make_trace(ops, api, syncs=syncs))
    f = next(x for x in host_bound_gaps(a) if x.evidence["op_name"] == "b")
    acts = {(x["kind"], x["name"]): x["ns"] for x in f.evidence["host_activities"]}
    # gap [60 µs, 1200 µs): the call while it runs, nothing after it returns
    assert acts == {
        ("cuda_api", "cudaStreamSynchronize"): 1_000_000,
        ("untraced", ""): 140_000,
    }
    sync = f.evidence["sync_wait"]
    assert sync == {"kind": "cuda_api", "name": "cudaStreamSynchronize", "calls": 1,
                    "call_ns": 1_000_000, "gpu_busy_ns": 0, "gpu_ops": []}  # fmt: skip
    assert (
        "is in cuda_api 'cudaStreamSynchronize' 87.7% (1.00 ms in 1 gap), no traced activity "
        "12.3% (0.14 ms in 1 gap); the host waits in "
        "cudaStreamSynchronize for the GPU (1 call, 1.00 ms); on the GPUs meanwhile: "
        "nothing the trace shows" in f.title
    )


def _wait_on_other_device(kind, name, step=False):
    """Kernel 'long' runs on GPU 1 over [10, 5010) µs; the host sits in ``name`` over
    [20, 5020) µs (a cpu_op holding a runtime call that returns at 25 µs when ``kind`` is
    a cpu_op), then launches 'next' on GPU 0, which idles from 'first' (ended 15 µs) on.
    ``step``: all of it inside a range 'step' over [0, 5050) µs, attributed by it."""
    US = 1000
    ops = [
        {"start": 5 * US, "end": 15 * US, "name": "first", "correlation": 1},
        {"start": 10 * US, "end": 5010 * US, "name": "long", "correlation": 2, "device": 1},
        {"start": 5040 * US, "end": 5050 * US, "name": "next", "correlation": 3},
    ]
    api = [
        {"start": 0, "end": 2 * US, "correlation": 1},
        {"start": 3 * US, "end": 5 * US, "correlation": 2},
        {"start": 5030 * US, "end": 5035 * US, "correlation": 3},
    ]
    host_ops = []
    if kind == "cuda_api":
        api.append({"start": 20 * US, "end": 5020 * US, "name": name})
    else:
        host_ops.append({"start": 20 * US, "end": 5020 * US, "name": name})
        api.append({"start": 20 * US, "end": 25 * US, "name": "cudaMemcpyAsync"})
    ranges = [{"name": "step", "start": 0, "end": 5050 * US}] if step else []
    return attribute(make_trace(ops, api, ranges, host_ops=host_ops), by="step" if step else None)


@pytest.mark.parametrize(
    "kind, name",
    [("cuda_api", "cudaDeviceSynchronize"), ("cuda_api", "hipMemcpyWithStream"),
     ("cpu_op", "aten::_local_scalar_dense"), ("cpu_op", "aten::item")],
)  # fmt: skip
def test_a_synchronizing_call_names_what_the_gpus_ran_meanwhile(kind, name):
    a = _wait_on_other_device(kind, name)
    f = next(x for x in host_bound_gaps(a) if x.evidence["op_name"] == "next")
    assert f.evidence["host_activities"][0]["name"] == name
    sync = f.evidence["sync_wait"]
    assert sync["name"] == name and sync["calls"] == 1 and sync["call_ns"] == 5_000_000
    # 'long' runs on GPU 1 from 20 µs (the call's start) to 5010 µs: 4990 of its 5000 µs
    assert sync["gpu_busy_ns"] == 4_990_000
    assert sync["gpu_ops"] == [{"name": "long", "device": 1, "ns": 4_990_000, "share": 0.998}]
    assert f"the host waits in {name} for the GPU (1 call, 5.00 ms)" in f.title
    assert f.title.endswith("on the GPUs meanwhile: 'long' on GPU 1 99.8%")


@pytest.mark.parametrize("kind, name", [("cpu_op", "aten::mul"), ("cuda_api", "cudaMemcpyAsync")])
def test_a_call_that_does_not_synchronize_is_not_called_a_wait(kind, name):
    a = _wait_on_other_device(kind, name)
    f = next(x for x in host_bound_gaps(a) if x.evidence["op_name"] == "next")
    assert f.evidence["host_activities"][0]["name"] == name
    assert f.evidence["sync_wait"] is None
    assert "waits" not in f.title and "GPUs meanwhile" not in f.title


def test_a_host_window_held_by_a_synchronizing_call_names_what_the_gpus_ran():
    """The same wait inside one 'step' range [0, 5050) µs: cudaDeviceSynchronize holds 5000
    of its 5050 µs (the launch calls 9 µs, the rest the step's own time)."""
    (f,) = host_windows(_wait_on_other_device("cuda_api", "cudaDeviceSynchronize", step=True))
    assert (f.evidence["name"], f.evidence["ns"]) == ("cudaDeviceSynchronize", 5_000_000)
    sync = f.evidence["sync_wait"]
    assert (sync["calls"], sync["call_ns"], sync["gpu_busy_ns"]) == (1, 5_000_000, 4_990_000)
    assert f.title == (
        "cuda_api 'cudaDeviceSynchronize' holds 99.0% of the host time in 1 step host window "
        "(5.00 ms self time of their 5.05 ms), in 1 of them (1); the host waits in "
        "cudaDeviceSynchronize for the GPU (1 call, 5.00 ms); on the GPUs meanwhile: "
        "'long' on GPU 1 99.8%; the thread waits there: it launches no GPU work in it and the "
        "GPUs are busy 99.8% of its 5.00 ms, so it does not limit the step (the GPU idles "
        "10.0 µs of it)"
    )
    # a cpu_op that does not synchronize: named, no wait in a synchronizing call (the thread
    # still launches nothing while the GPUs are busy)
    (f,) = host_windows(_wait_on_other_device("cpu_op", "aten::mul", step=True))
    assert f.evidence["name"] == "aten::mul" and f.evidence["sync_wait"] is None
    assert "waits in" not in f.title and f.evidence["waiting"]


def _tiny_kernels_then(blocking_ms):
    """300 eager 2 µs kernels, each launched 10 µs after the previous one ended; then, when
    ``blocking_ms``, one hipMemcpyWithStream call of that length whose copy runs in its
    last 100 µs while the GPU idles."""
    ops, api = [], []
    t = 0
    for i in range(300):
        api.append({"start": t, "end": t + 3_000, "correlation": i, "name": "hipLaunchKernel"})
        ops.append({"start": t + 5_000, "end": t + 7_000, "name": "tiny", "correlation": i})
        t += 17_000
    if blocking_ms:
        end = t + blocking_ms * MS
        api.append({"start": t, "end": end, "correlation": 300, "name": "hipMemcpyWithStream"})
        copy = {"kind": OpKind.MEMCPY, "copy_kind": CopyKind.DTOH, "correlation": 300}
        ops.append({"start": end - 100_000, "end": end, "name": "Memcpy DtoH", **copy})
    return attribute(make_trace(ops, api))


def test_tiny_kernels_are_not_blamed_for_one_blocking_copy():
    a = _tiny_kernels_then(400)
    (k,) = kernels(a)
    e = k.evidence
    assert e["long_gaps"] == 1 and e["longest_gap_launch_overhead_ns"] == 400 * MS - 100_000
    assert e["tiny_kernels"] == 300 and not e["tiny_kernels_named"]
    assert "run under" not in k.title and "tiny" not in k.title
    assert "in 1 gap of 1.00 ms or more (longest 399.90 ms)" in k.title
    # the cause absent: the same kernels alone, and the short gaps hold the launch_overhead
    (k,) = kernels(_tiny_kernels_then(0))
    assert k.evidence["tiny_kernels_named"] and k.evidence["long_gaps"] == 0
    assert "300 of 300 eager kernels (100.0%) run under 10.0 µs" in k.title


def _host_only(children):
    """Host-only trace: 3 windows 'step' of 10 ms each on one thread, with the nested ranges
    ``children`` (name, start, end in ms from the window's start) in each."""
    ranges = []
    for s in range(3):
        t = s * 10 * MS
        ranges.append({"name": "step", "start": t, "end": t + 10 * MS})
        for name, lo, hi in children(s):
            ranges.append({"name": name, "start": t + lo * MS, "end": t + hi * MS, "depth": 1})
    return make_trace([], ranges=ranges)


def test_host_window_finding_names_the_activity_holding_most_self_time():
    # each window: 'work' over [0, 2) ms; window 2 adds 'wait' over [2, 9), window 3 also
    # over [9, 10). Self time: 'wait' 7 + 8 = 15 ms, 'step' 8 + 1 + 0 = 9 ms, 'work' 6 ms
    waits = [("wait", 2, 9), ("wait", 9, 10)]
    a = attribute(_host_only(lambda s: [("work", 0, 2), *waits[:s]]), by="step")
    (f,) = host_windows(a)
    assert f.layer == "host"
    e = f.evidence
    assert (e["kind"], e["name"], e["ns"], e["host_window_ns"]) == (
        "range",
        "wait",
        15 * MS,
        30 * MS,
    )
    assert e["host_window_rows"] == [1, 2] and e["host_windows"] == 3
    assert f.title == (
        "range 'wait' holds 50.0% of the host time in 3 step host windows "
        "(15.00 ms self time of their 30.00 ms), in 2 of them (2-3)"
    )
    assert [x.title for x in Analysis(a).findings] == [f.title]  # a host-only trace: the only one


def test_no_host_window_finding_when_no_activity_holds_a_large_share():
    # six ranges of 5/3 ms each, no step self time: each holds 16.7% < HOST_WINDOW_SHARE
    a = attribute(_host_only(lambda s: [(f"r{i}", 5 * i / 3, 5 * (i + 1) / 3) for i in range(6)]),
                  by="step")  # fmt: skip
    assert (
        max(x["ns"] for x in Analysis(a).to_document()["host_totals"]["by_activity"])
        < 0.2 * 30 * MS
    )
    assert host_windows(a) == []
    # the window's own self time (90%) is not an activity to name; 'work' holds 10%
    assert host_windows(attribute(_host_only(lambda s: [("work", 0, 1)]), by="step")) == []
    # without --by there are no host windows (a GPU trace: the host-bound findings instead)
    assert host_windows(attribute(stepped_trace())) == []
