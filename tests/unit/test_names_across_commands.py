"""One name per thing across commands: ranges with or without their NVTX domain, kernel
names shortened alike in summary and findings, counts with the right plural, ROCm copies
and HIP calls under their own names."""

from __future__ import annotations

import pytest
from helpers.synth import make_trace

from pytimings.analysis.attribution import attribute
from pytimings.analysis.finding import plural
from pytimings.analysis.findings import host_bound_gaps
from pytimings.analysis.summary import trace_summary
from pytimings.errors import UsageError
from pytimings.model.trace import CopyKind, OpKind
from pytimings.report.summary_text import render_summary

LONG = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
    "float, true>(int, float, c10::BFloat16 const*)"
)


def _ranged(domain: str = "probe"):
    """Two 'step' ranges in `domain`, one 'step' range in the default domain, one kernel each."""
    ops, api, ranges = [], [], []
    for i, dom in enumerate((domain, domain, "")):
        t = i * 1_000_000
        ranges.append({"start": t, "end": t + 500_000, "name": "step", "domain": dom})
        api.append({"start": t + 100_000, "end": t + 105_000, "correlation": i + 1})
        ops.append({"start": t + 110_000, "end": t + 200_000, "name": LONG, "correlation": i + 1})
    return make_trace(ops, api, ranges)


def test_by_accepts_the_name_with_or_without_its_domain():
    tr = _ranged()
    labels = sorted(trace_summary(tr)["ranges"]["name"].tolist())
    assert labels == ["probe:step", "step"]  # as summary prints them
    assert len(attribute(tr, by="step").windows) == 3  # every domain
    a = attribute(tr, by="probe:step")
    assert len(a.windows) == 2 and a.windows["start_ns"].tolist() == [0, 1_000_000]
    assert len(attribute(tr, by="probe:st*").windows) == 2  # globs see the label too
    with pytest.raises(UsageError, match="'other:step' matches no range; closest"):
        attribute(tr, by="other:step")


def test_a_range_name_with_a_colon_is_matched_as_a_name_first():
    ops = [{"start": 10, "end": 20, "correlation": 1}]
    api = [{"start": 0, "end": 5, "correlation": 1}]
    tr = make_trace(ops, api, [{"start": 0, "end": 30, "name": "aten::mm", "domain": "x"}])
    assert len(attribute(tr, by="aten::mm").windows) == 1
    assert len(attribute(tr, by="x:aten::mm").windows) == 1


def test_findings_name_kernels_as_summary_does():
    a = attribute(_ranged(), by="step")
    short = trace_summary(a.trace)["kernels"]["name"][0]
    assert short.startswith("vectorized_layer_norm_kernel<") and short != LONG
    f = host_bound_gaps(a)[0]
    assert f"kernel '{short}'" in f.title
    assert f.evidence["op_name"] == LONG  # the evidence keeps the full name


def test_plurals():
    assert [plural(n, "gap") for n in (0, 1, 2)] == ["0 gaps", "1 gap", "2 gaps"]
    assert plural(1, "copy", "copies") == "1 copy" and plural(3, "copy", "copies") == "3 copies"
    ops = [{"start": 110_000, "end": 200_000, "correlation": 1}]
    api = [{"start": 100_000, "end": 105_000, "correlation": 1}]
    tr = make_trace(ops, api, [{"start": 0, "end": 300_000, "name": "step"}])
    a = attribute(tr, by="step")
    (f,) = host_bound_gaps(a)
    assert ": 1 gap in 1 of 1 step window (1)" in f.title
    assert "in 1 call" not in f.title  # no calls met: none listed


def _copy_trace(runtime: str, device: str):
    ops = [
        {"start": 10, "end": 20, "kind": OpKind.MEMCPY, "copy_kind": CopyKind.HTOD,
         "bytes": 8, "name": "Memcpy HtoD (Host -> Device)", "correlation": 1},
        {"start": 30, "end": 40, "kind": OpKind.MEMSET, "name": "Memset (Device)"},
    ]  # fmt: skip
    api = [{"start": 0, "end": 5, "correlation": 1, "name": f"{runtime}MemcpyAsync"}]
    tr = make_trace(ops, api)
    tr.strings[int(tr.devices["name"][0])] = device
    return tr


def test_rocm_copies_and_hip_calls_keep_their_names():
    hip = trace_summary(_copy_trace("hip", "AMD Instinct MI250X"))
    assert hip["memory"]["operation"].tolist() == ["[HIP memcpy Host-to-Device]", "[HIP memset]"]
    assert "HIP API calls" in render_summary(hip, "HIP")
    cuda = trace_summary(_copy_trace("cuda", "NVIDIA H200"))
    assert cuda["memory"]["operation"].tolist() == ["[CUDA memcpy Host-to-Device]", "[CUDA memset]"]
    assert "CUDA API calls" in render_summary(cuda)
    # a ROCm capture without HIP calls in it: the device name decides
    amd = trace_summary(_copy_trace("cuda", "AMD Radeon Graphics"))
    assert amd["memory"]["operation"][0] == "[HIP memcpy Host-to-Device]"
