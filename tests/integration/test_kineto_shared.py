"""Every Kineto trace in ../shared loads, with counts and times checked against an
independent reading of the same file with the standard library (json + Decimal)."""

from __future__ import annotations

import decimal
import fnmatch
import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytimings.ingest.kineto import GPU_ANNOTATION_DROPPED, load_kineto, looks_like_kineto
from pytimings.model.trace import ActivityKind, ApiKind, OpKind, RangeKind, Trace

pytestmark = pytest.mark.shared

# every Kineto/Chrome-trace JSON file in ../shared (checked against the tree below)
KINETO_FILES = [
    "external/hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "external/hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "external/hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "external/hta/df_index_resolver/df_index_resolver.json.gz",
    "external/hta/nccl_parser_config/nccl_data.json.gz",
    "external/hta/negative_queue_length_values_check/rank0.json.gz",
    "external/hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "external/hta/trace_diff/control/control.json.gz",
    "external/hta/trace_diff/test/test.json.gz",
    "external/hta/trace_filter/sampled_rank-0.json.gz",
    "external/hta/trace_filter/sampled_rank-1.json.gz",
    "external/hta/triton_example/triton_example.json.gz",
    "external/hta/with_gpu_user_annotation/step_based_trace_2543932.json.gz",
    "external/kineto/docs_traces/after_fix_trace.json",
    "external/kineto/docs_traces/before_fix_trace.json",
    "external/kineto/tb_plugin_samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    *[
        f"external/param/dlrm_kineto/worker{r}_step_12.{ts}.pt.trace.json.gz"
        for r, ts in enumerate(
            [
                "1694128201545",
                "1694128201556",
                "1694128201554",
                "1694128201557",
                "1694128201547",
                "1694128201549",
                "1694128201553",
                "1694128201553",
            ]
        )
    ],
    "external/tracelens/b200/eager_trace.json.gz",
    "external/tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "external/tracelens/h100/Falconsai_nsfw_image_detection__1016002.json.gz",
    "external/tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "external/tracelens/h100/facebook_timesformer-base-finetuned-k400__1016002.json.gz",
    "external/tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
    "h200/decode_16steps_h200.pt.trace.json.gz",
]
LARGE = {
    "df_index_resolver.json.gz",
    "control.json.gz",
    "test.json.gz",
    "google_owlv2-large-patch14-ensemble__1016001.json.gz",
    "facebook_timesformer-base-finetuned-k400__1016002.json.gz",
}

GPU_CATS = {
    "kernel": OpKind.KERNEL,
    "Kernel": OpKind.KERNEL,
    "gpu_memcpy": OpKind.MEMCPY,
    "Memcpy": OpKind.MEMCPY,
    "gpu_memset": OpKind.MEMSET,
    "Memset": OpKind.MEMSET,
}
API_CATS = {
    "cuda_runtime": ApiKind.RUNTIME,
    "Runtime": ApiKind.RUNTIME,
    "cuda_driver": ApiKind.DRIVER,
}
RANGE_CATS = {"user_annotation": RangeKind.ANNOTATION}
HOST_CATS = {
    "cpu_op": ActivityKind.CPU_OP,
    "Operator": ActivityKind.CPU_OP,  # 2021-era name
    "python_function": ActivityKind.PYTHON,
}


def exact_ns(v: Any) -> int:
    return int((Decimal(v) * 1000).to_integral_value(decimal.ROUND_HALF_EVEN))


def _num(v: Any) -> Any:
    """A pid/tid as a number (2021-era traces write some tids as numeric strings)."""
    return int(v) if isinstance(v, str) and v.lstrip("-").isdigit() else v


def independent(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        doc = json.loads(f.read(), parse_float=Decimal)
    complete = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    cats = Counter(e.get("cat") for e in complete)
    out: dict[str, Any] = {"doc": doc}
    out["gpu"] = Counter({GPU_CATS[c]: n for c, n in cats.items() if c in GPU_CATS})
    out["api"] = Counter({API_CATS[c]: n for c, n in cats.items() if c in API_CATS})
    out["syncs"] = cats.get("cuda_sync", 0)
    out["ranges"] = Counter({RANGE_CATS[c]: n for c, n in cats.items() if c in RANGE_CATS})
    kern = [e for e in complete if e.get("cat") in ("kernel", "Kernel")]
    out["kernel_times"] = sorted(
        (exact_ns(e["ts"]), exact_ns(Decimal(e["ts"]) + Decimal(e["dur"]))) for e in kern
    )
    copies = [e for e in complete if e.get("cat") in ("gpu_memcpy", "Memcpy")]
    out["copy_bytes"] = sum(int(e["args"].get("bytes", 0)) for e in copies)
    out["host"] = sorted(
        (
            exact_ns(e["ts"]),
            exact_ns(Decimal(e["ts"]) + Decimal(e["dur"])),
            e["name"],
            int(HOST_CATS[e["cat"]]),
            _num(e["pid"]),
            _num(e["tid"]),
        )
        for e in complete
        if e.get("cat") in HOST_CATS
    )
    out["gpu_user_annotation"] = sum(
        1 for e in doc["traceEvents"] if e.get("cat") == "gpu_user_annotation"
    )
    return out


def counts(values: np.ndarray) -> Counter[int]:
    keys, n = np.unique(values, return_counts=True)
    return Counter(dict(zip(keys.tolist(), n.tolist(), strict=True)))


@pytest.mark.parametrize(
    "rel",
    [pytest.param(r, marks=pytest.mark.slow) if Path(r).name in LARGE else r for r in KINETO_FILES],
    ids=lambda r: Path(r).name[:40],
)
def test_shared_trace_matches_independent_reading(shared_dir: Path, rel: str) -> None:
    path = shared_dir / "data" / rel
    want = independent(path)
    tr = load_kineto(path)
    assert counts(tr.gpu_ops["kind"]) == want["gpu"]
    assert counts(tr.api_calls["kind"]) == want["api"]
    assert len(tr.syncs) == want["syncs"]  # cuda_sync: records, not API calls
    assert counts(tr.ranges["kind"]) == want["ranges"]
    k = tr.gpu_ops.take(tr.gpu_ops["kind"] == OpKind.KERNEL)
    assert sorted(zip(k["start"].tolist(), k["end"].tolist(), strict=True)) == want["kernel_times"]
    copies = tr.gpu_ops["kind"] == OpKind.MEMCPY
    if want["copy_bytes"]:
        assert int(tr.gpu_ops["bytes"][copies].sum()) == want["copy_bytes"]
    # host activities: times, names as written, kinds and (pid, tid) of their thread
    h, th = tr.host_ops, tr.threads
    got = zip(
        h["start"].tolist(),
        h["end"].tolist(),
        [tr.strings[i] for i in h["name"]],
        h["kind"].tolist(),
        th["pid"][h["thread"]].tolist(),
        th["tid"][h["thread"]].tolist(),
        strict=True,
    )
    assert sorted(got) == want["host"]
    assert (h["thread"] >= 0).all()
    assert not any(r.split()[0] in HOST_CATS for r in tr.dropped)  # none counted as dropped
    assert tr.dropped.get(GPU_ANNOTATION_DROPPED, 0) == want["gpu_user_annotation"]

    doc = want["doc"]
    dist = doc.get("distributedInfo") or {}
    assert tr.meta["rank"] == dist.get("rank")
    assert tr.meta["world_size"] == dist.get("world_size")
    expect_rank = dist.get("rank", 0)
    for name in ("gpu_ops", "api_calls", "ranges", "host_ops"):
        assert set(tr.table(name)["rank"].tolist()) <= {expect_rank}
    assert len(tr.devices) == len(doc.get("deviceProperties", []))
    # GPU ops link to launching calls: the host pid of the call with the same correlation
    g, a = tr.gpu_ops, tr.api_calls
    call_pid = dict(zip(a["correlation"].tolist(), a["pid"].tolist(), strict=True))
    for c, p in zip(g["correlation"].tolist(), g["pid"].tolist(), strict=True):
        if c in call_pid:
            assert p == call_pid[c]
    assert (tr.gpu_ops["end"] >= tr.gpu_ops["start"]).all()


def test_h200_kineto_counts(shared_dir: Path) -> None:
    tr = load_kineto(shared_dir / "data/h200/decode_16steps_h200.pt.trace.json.gz")
    assert counts(tr.gpu_ops["kind"]) == {OpKind.KERNEL: 1047, OpKind.MEMCPY: 16, OpKind.MEMSET: 12}
    assert tr.meta["rank"] == 0 and tr.meta["world_size"] == 1
    assert tr.strings[tr.devices["name"][0]] == "NVIDIA H200"
    assert tr.meta["device_properties"][0]["totalGlobalMem"] == 150109880320
    assert tr.meta["distributed_info"]["backend"] == "nccl"
    # the 16 copies: DtoH of the sampled token each step and the side-stream kv_transfer
    copies = tr.gpu_ops.take(tr.gpu_ops["kind"] == OpKind.MEMCPY)
    assert (copies["copy_kind"] > 0).all()


def test_ns_resolution_trace_is_microseconds_with_ns_digits(shared_dir: Path) -> None:
    HTA = shared_dir / "data/external/hta"
    """displayTimeUnit "ns": ts is still in microseconds. The capture (file name
    Apr_03_18_51_38, 'Tracing starting in 6s ... end in 7s') lands on 2024-04-04 UTC and
    lasts about a second only if read as microseconds."""
    path = HTA / "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    tr = load_kineto(path)
    assert tr.meta["display_time_unit"] == "ns"
    start = int(tr.api_calls["start"].min())
    span = int(tr.api_calls["end"].max()) - start
    assert 1712102400 * 10**9 < start < 1712275200 * 10**9  # 2024-04-03..05 in ns
    assert 0.1e9 < span < 2e9
    # nanosecond digits survive: not all starts are whole microseconds
    assert (tr.gpu_ops["start"] % 1000 != 0).any()


def test_amd_trace(shared_dir: Path) -> None:
    HTA = shared_dir / "data/external/hta"
    tr = load_kineto(HTA / "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert counts(tr.gpu_ops["kind"])[OpKind.KERNEL] == 14
    names = {tr.strings[i] for i in tr.api_calls["name"]}
    assert any(n.startswith("hip") for n in names)
    copies = tr.gpu_ops.take(tr.gpu_ops["kind"] == OpKind.MEMCPY)
    assert len(copies) == 2 and (copies["bytes"] > 0).all()  # sizes from the hip calls
    assert set(tr.gpu_ops["device"].tolist()) == {2}
    assert len(tr.ranges) == 3 and tr.dropped[GPU_ANNOTATION_DROPPED] == 2


def test_cpu_only_trace(shared_dir: Path) -> None:
    """No GPU ops: loads its gloo annotations (host ranges) and says what it dropped."""
    HTA = shared_dir / "data/external/hta"
    tr = load_kineto(HTA / "cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    assert len(tr.gpu_ops) == 0 and len(tr.api_calls) == 0
    assert len(tr.ranges) == 11
    assert tr.meta["rank"] == 34 and tr.meta["world_size"] == 300
    assert len(tr.host_ops) == 4 and set(tr.host_ops["kind"].tolist()) == {ActivityKind.CPU_OP}


@pytest.mark.slow
def test_graph_launches_share_correlations(shared_dir: Path) -> None:
    path = shared_dir / "data/external/hta/trace_diff/test/test.json.gz"
    events = independent(path)["doc"]["traceEvents"]
    graph_corr = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") == "cuda_runtime" and e["name"] == "cudaGraphLaunch"
    }
    want = sum(
        1
        for e in events
        if e.get("cat") in GPU_CATS
        and e.get("ph") == "X"
        and e["args"].get("correlation") in graph_corr
    )
    assert want > 1000  # this capture replays CUDA graphs
    tr = load_kineto(path)
    g = tr.gpu_ops
    graph = g["graph"] >= 0
    assert int(graph.sum()) == want
    assert len(np.unique(g["correlation"][~graph])) == int((~graph).sum())


def test_ranks_merge_into_one_trace(shared_dir: Path) -> None:
    """Per-rank files load into one Trace with a rank column (Trace.merge)."""
    paths = sorted((shared_dir / "data/external/param/dlrm_kineto").glob("worker*.json.gz"))
    parts = [load_kineto(p) for p in paths]
    merged = Trace.merge(parts)
    assert sorted(set(merged.gpu_ops["rank"].tolist())) == list(range(8))
    assert len(merged.gpu_ops) == sum(len(p.gpu_ops) for p in parts)
    for r, part in enumerate(parts):
        mine = merged.gpu_ops["rank"] == r
        names = sorted(merged.strings[i] for i in merged.gpu_ops["name"][mine])
        assert names == sorted(part.strings[i] for i in part.gpu_ops["name"])


def test_detection_from_the_first_64_kb(shared_dir: Path) -> None:
    data = shared_dir / "data"
    kineto_files = {data / rel for rel in KINETO_FILES}
    seen = 0
    for path in sorted(p for p in data.rglob("*") if p.is_file()):
        with path.open("rb") as f:
            head = f.read(65536)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as g:
                head = g.read(65536)
        assert looks_like_kineto(head) == (path in kineto_files), path
        seen += path in kineto_files
    assert seen == len(KINETO_FILES)


@pytest.mark.parametrize(
    ("rel", "by", "steps"),
    [
        (
            "external/hta/with_gpu_user_annotation/step_based_trace_2543932.json.gz",
            "Optimizer.step*",
            5,
        ),
        ("external/tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "ProfilerStep#*", 1),
    ],
    ids=["optimizer-steps", "profiler-step"],
)
def test_gpu_user_annotations_are_not_windows(
    shared_dir: Path, rel: str, by: str, steps: int
) -> None:
    """Each of these traces has a gpu_user_annotation copy of every step range: one window
    per step (the user_annotation) per device, none for the copies, no duplicates."""
    import pytimings as pt

    path = shared_dir / "data" / rel
    events = independent(path)["doc"]["traceEvents"]
    copies = [e for e in events if e.get("cat") == "gpu_user_annotation"]
    assert any(fnmatch.fnmatchcase(e["name"], by) for e in copies)  # the copies are there
    tr = load_kineto(path)
    w = pt.attribute(tr, by=by).windows
    n_dev = len(np.unique(tr.gpu_ops["device"]))
    assert len(w) == steps * n_dev
    keys = list(zip(w["start_ns"].tolist(), w["device"].tolist(), strict=True))
    assert len(set(keys)) == len(keys)
    assert tr.dropped[GPU_ANNOTATION_DROPPED] == len(copies)
