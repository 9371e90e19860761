"""Every public trace in ../shared/data/external (and ../shared/data/h200) analysed, with and
without its step range: no finding's title claims what its evidence does not show.

The checker is a table: a pattern of a claim a title can make -> the condition its
evidence must meet. A title that matches a pattern must pass its condition; a title with a
causal word that no pattern covers fails; every capture finding names the labels it
distorts, and by how much.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.shared_traces import trace_files

import pytimings as pt
from pytimings._native import _intervals as iv
from pytimings.analysis.capture import DRIFT_MIN_NS, DRIFT_MIN_R2
from pytimings.analysis.classes import COMM_KERNEL_NAMES
from pytimings.analysis.comm_hints import HINTS
from pytimings.analysis.finding import Finding
from pytimings.analysis.findings import (
    GPU_BOUND_SHARE,
    HOST_RANK_BUSY_SHARE,
    HOST_SIDE_LAYERS,
    HOST_WINDOW_SHARE,
    TINY_BLAME_SHARE,
)
from pytimings.analysis.kernel_findings import CPU_PLAUSIBLE_TFLOPS
from pytimings.analysis.memory import FRAGMENTATION_SHARE, GROWTH_ALPHA, gib
from pytimings.analysis.replay import CROSS_THREAD_NOTE, what_if
from pytimings.analysis.savings import NO_FIX_NOTE
from pytimings.cli import main
from pytimings.console.text import duration
from pytimings.errors import UsageError
from pytimings.ingest.names import is_synchronizing, op_range_parts, short_kernel_name
from pytimings.report.analysis_text import render_attribution
from pytimings.session import Analysis

pytestmark = pytest.mark.shared

Check = Callable[[dict[str, Any], re.Match[str]], bool]


def _near(shown: str, value: float) -> bool:
    """A percentage as a title prints it (one decimal) against its evidence fraction."""
    return abs(float(shown) - 100 * value) <= 0.051


def _top_activity(e: dict[str, Any]) -> str:
    """The name of the activity a finding is about: the first of a host-bound gap group's,
    the host-window finding's own."""
    return str(e["host_activities"][0]["name"] if "host_activities" in e else e["name"])


def _activity(
    e: dict[str, Any], kind: str, name: str, share: str, time: str, gaps: str, windows: str | None
) -> bool:
    """A host activity a title names is in the evidence with that share, time, gaps and
    (when the title counts them) windows."""
    return any(
        (x["kind"], x["name"]) == (kind, name)
        and _near(share, x["share"])
        and duration(x["ns"]) == time
        and x["gaps"] == int(gaps)
        and (windows is None or len(x["window_rows"]) == int(windows))
        for x in e["host_activities"]
    )


_CATEGORY = re.compile(
    r"(?:category: |, )(\w+) ([\d.]+)% \(([\d.]+ \S+)\)(?: at ([\d.]+)% of (\w+) peak "
    r"\(([\d.]+) TFLOP/s over ([\d.]+)% of its GPU time\))?"
)


def _categories(e: dict[str, Any], m: re.Match[str]) -> bool:
    """The kernel layer's categories: the GPUs busy enough for the kernels to set the time,
    each category named with its share of the busy time and, for a rate, its modelled
    ops' FLOPs over their time against the dtype's peak."""
    cats = {c["category"]: c for c in e["categories"]}
    named = list(_CATEGORY.finditer(m.group(3)))
    ok = (
        duration(e["busy_ns"]) == m.group(1)
        and _near(m.group(2), e["busy_ns"] / e["window_ns"])
        and e["threshold"] == GPU_BOUND_SHARE <= e["min_busy_share"]
        and len(named) == len(cats) > 0
        and sum(c["busy_ns"] for c in cats.values()) <= e["busy_ns"]
    )
    for c in named:
        x = cats.get(c.group(1))
        ok = ok and x is not None and _near(c.group(2), x["busy_ns"] / e["busy_ns"])
        ok = ok and duration(x["busy_ns"]) == c.group(3)
        if c.group(4) is not None:
            r = x["rate"]
            ok = ok and r["dtype"] == c.group(5) and f"{r['tflops_s']:.1f}" == c.group(6)
            ok = ok and _near(c.group(4), r["tflops_s"] / r["peak_tflops_s"])
            ok = ok and _near(c.group(7), r["modelled_share"]) and r["modelled_share"] <= 1
    return bool(ok)


def _under_roofline(e: dict[str, Any], m: re.Match[str]) -> bool:
    """An op under its roofline: its row's numbers, the bound its intensity gives against
    the ridge point, the fraction its achieved rate is of the roof, and the time at the
    roof (its time x the fraction) with the saving (the rest)."""
    name, dims, dtype, cat, calls, time, share, bound, rate, unit = m.groups()[:10]
    frac, gpu, roof_ns, less = m.groups()[10:]
    shown = list(e["input_dims"])
    while shown and shown[-1] in ([], None, ""):
        shown.pop()
    f = e["roofline_fraction"]
    if e["intensity"] == 0 or e["intensity"] < e["peak_tflops"] / e["peak_tb_s"]:
        want_bound, achieved, roof = "memory", e["tb_s"], e["peak_tb_s"]
    else:
        want_bound, achieved, roof = "compute", e["tflops_s"], e["peak_tflops"]
    return bool(
        (e["name"], e["dtype"] or "untyped", e["category"], e["calls"])
        == (name, dtype, cat, int(calls))
        and dims == str(shown).replace("'", '"')
        and duration(e["kernel_ns"]) == time
        and _near(share, e["kernel_share"])
        and bound == e["bound"] == want_bound
        and unit == ("TB/s" if bound == "memory" else "TFLOP/s")
        and rate == (f"{achieved:.2f}" if bound == "memory" else f"{achieved:.1f}")
        and abs(f - achieved / roof) <= 1e-9 * max(1.0, f)
        and _near(frac, f)
        and 0 <= f < 1
        and gpu == e["gpu"]
        and abs(e["at_roof_ns"] - e["kernel_ns"] * f) <= e["gpu_ops"] / 2  # each op in ns
        and e["potential_ns"] == e["kernel_ns"] - e["at_roof_ns"]
        and (duration(e["at_roof_ns"]), duration(e["potential_ns"])) == (roof_ns, less)
    )


# claim in a title -> what its evidence must hold
CLAIMS: list[tuple[str, Check]] = [
    # kernel layer: categories, ops under the roofline, compute on the host
    (
        r"the GPU's busy time \(([\d.]+ \S+), ([\d.]+)% of \S+ time\) by op (category: .*)$",
        _categories,
    ),
    (
        r"'([^']+)' (\[.*\]) \((\w+), (\w+)\): (\d+) calls?, ([\d.]+ \S+) of GPU time "
        r"\(([\d.]+)% of all\), (memory|compute)-bound at ([\d.]+) (TB/s|TFLOP/s) = ([\d.]+)% "
        r"of the (\S+)'s .*?; at its roof its kernels would take ([\d.]+ \S+): "
        r"up to ([\d.]+ \S+) less$",
        _under_roofline,
    ),
    (
        r"cpu_op '([^']+)' launches no GPU work in (\d+) calls? \(([\d.]+ \S+) of host time, "
        r"(\S+) GFLOP by its shapes, (\S+) TFLOP/s\): it computes on the host while its "
        r"rank's GPUs idle ([\d.]+ \S+) of it$",
        lambda e, m: (
            (e["name"], e["calls"], e["launches"]) == (m.group(1), int(m.group(2)), 0)
            and duration(e["op_ns"]) == m.group(3)
            and f"{e['gflop']:.3g}" == m.group(4)
            and e["gflop"] > 0
            and f"{e['tflops_s']:.3g}" == m.group(5)
            and e["tflops_s"] == pytest.approx(e["gflop"] / e["op_ns"] * 1e6)
            and e["tflops_s"] <= CPU_PLAUSIBLE_TFLOPS
            and duration(e["gpu_idle_ns"]) == m.group(6)
            and 0 < e["gpu_idle_ns"] <= e["op_ns"]
        ),
    ),
    # kernels: tiny kernels set beside launch_overhead only where the short eager gaps hold it
    (
        r"run under [\d.]+ µs",
        lambda e, m: (
            e["tiny_kernels_named"]
            and e["tiny_kernels"] > 0
            and e["short_gap_launch_overhead_ns"] >= TINY_BLAME_SHARE * e["launch_overhead_ns"]
        ),
    ),
    (r"before graph-replayed ops", lambda e, m: e["graph_gap_launch_overhead_ns"] > 0),
    (r"replayed from graphs", lambda e, m: e["graph_kernels"] > 0),
    (
        r"in (\d+) gaps? of [\d.]+ ms or more",
        lambda e, m: e["long_gaps"] == int(m.group(1)) > 0,
    ),
    (
        r"launch_overhead is [\d.]+% of \S+ time \(([^,)]+)",
        lambda e, m: duration(e["launch_overhead_ns"]) == m.group(1),
    ),
    (
        r"none from a \w+ graph",
        lambda e, m: e["graph_kernels"] == 0 and e["repeating_windows"] >= 3,
    ),
    # scheduling: the innermost host activities charged for the gaps, and sync waits
    (
        r"\b(cuda_api|os|cpu_op|python|range) '([^']*)' ([\d.]+)% \(([\d.]+ \S+) in (\d+) gaps?"
        r"(?:, (\d+) windows?)?\)",
        lambda e, m: _activity(e, *m.groups()),
    ),
    (
        r"no traced activity ([\d.]+)% \(([\d.]+ \S+) in (\d+) gaps?(?:, (\d+) windows?)?\)",
        lambda e, m: _activity(e, "untraced", "", *m.groups()),
    ),
    (
        r"the host waits in (\S+) for the GPU",
        lambda e, m: (
            e["sync_wait"]["name"] == m.group(1) == _top_activity(e)
            and is_synchronizing(m.group(1))
        ),
    ),
    (
        r"on the GPUs meanwhile: nothing the trace shows",
        lambda e, m: e["sync_wait"]["gpu_busy_ns"] == 0 and not e["sync_wait"]["gpu_ops"],
    ),
    (
        r"on the GPUs meanwhile: '([^']+)' on GPU (\d+) ([\d.]+)%",
        lambda e, m: (
            short_kernel_name(e["sync_wait"]["gpu_ops"][0]["name"]) == m.group(1)
            and e["sync_wait"]["gpu_ops"][0]["device"] == int(m.group(2))
            and _near(m.group(3), e["sync_wait"]["gpu_ops"][0]["share"])
        ),
    ),
    # host windows: the activity holding the most self time
    (
        r"^(\w+) '([^']*)' holds ([\d.]+)% of the host time",
        lambda e, m: (
            (e["kind"], e["name"]) == (m.group(1), m.group(2))
            and _near(m.group(3), e["share"])
            and e["share"] >= HOST_WINDOW_SHARE
        ),
    ),
    (
        r"the thread waits there: it launches no GPU work in it and the GPUs are busy "
        r"([\d.]+)% of its ([\d.]+ \S+), so",
        lambda e, m: (
            e["waiting"]
            and e["launches"] == 0
            and e["gpu_busy_share"] >= GPU_BOUND_SHARE
            and _near(m.group(1), e["gpu_busy_share"])
            and duration(e["activity_ns"]) == m.group(2)
        ),
    ),
    (
        r"; the GPUs are busy ([\d.]+)% of its ([\d.]+ \S+) \(the thread launches (\d+) GPU ops?",
        lambda e, m: (
            e["gpu_bound"]
            and not e["waiting"]
            and e["launches"] == int(m.group(3)) > 0
            and e["gpu_busy_share"] >= GPU_BOUND_SHARE
            and _near(m.group(1), e["gpu_busy_share"])
            and duration(e["activity_ns"]) == m.group(2)
        ),
    ),
    (r"the GPU idles ([\d.]+ \S+) of it\)", lambda e, m: duration(e["gpu_idle_ns"]) == m.group(1)),
    (r"first op of each window", lambda e, m: e["at_window_start"]),
    # hardware: the GPU-bound finding
    (
        r"the GPUs? (?:is|are) the bottleneck: .*? busy (?:at least )?([\d.]+)%",
        lambda e, m: (
            e["threshold"] == GPU_BOUND_SHARE <= e["min_busy_share"]
            and all(d["busy_ns"] >= GPU_BOUND_SHARE * d["window_ns"] for d in e["devices"])
            and _near(m.group(1), e["min_busy_share"])
        ),
    ),
    (
        r"idle ([\d.]+ \S+) in all: no host-side change saves more",
        lambda e, m: (
            duration(e["idle_ns"]) == m.group(1) and e["idle_ns"] == e["window_ns"] - e["busy_ns"]
        ),
    ),
    (
        r"the host runs ([\d.]+ \S+) ahead of the GPU \(launch latency p50\)",
        lambda e, m: duration(e["launch_latency_p50_ns"]) == m.group(1),
    ),
    (
        r"p50 ([\d.]+ \S+), the GPU busy ([\d.]+ \S+) of it \(p50\)",
        lambda e, m: (
            duration(e["window_p50_ns"]) == m.group(1)
            and duration(e["window_busy_p50_ns"]) == m.group(2)
        ),
    ),
    # capture
    (
        r"runs nothing the trace shows",
        lambda e, m: e["visible_busy_ns"] == 0 and e["min_wait_ns"] >= e["threshold_ns"],
    ),
    (
        r"clocks disagree by at least",
        lambda e, m: e["ops_before_launch"] > 0 and e["clock_offset_ns"] > 0,
    ),
    (
        r"clocks drift apart",
        lambda e, m: (
            e["worst"]["r2"] >= DRIFT_MIN_R2 and abs(e["worst"]["drift_ns"]) >= DRIFT_MIN_NS
        ),
    ),
    (r"cut short", lambda e, m: e["cut_windows"] > 0),
    # unclassified communication: the kernels named match no comm rule, each hints at
    # communication by its name or shares a stream with comm kernels, and overlaps compute
    (
        r"(\d+) kernels? on (\d+) side streams? \(.*\) overlaps? compute for ([\d.]+ \S+) "
        r"and looks? like communication \(.*\) but match(?:es)? no comm rule",
        lambda e, m: (
            e["unclassified_kernels"] == int(m.group(1)) == sum(k["kernels"] for k in e["kernels"])
            and len(e["streams"]) == int(m.group(2))
            and duration(e["under_compute_ns"]) == m.group(3)
            and e["under_compute_ns"] > 0
            and all(
                not any(r in k["name"].lower() for r in COMM_KERNEL_NAMES)
                and (k["hints"] or k["on_comm_stream"] > 0)
                and set(k["hints"]) <= set(HINTS)
                for k in e["kernels"]
            )
        ),
    ),
    (
        r"moves ([\d.]+ \S+) to comm_overlapped and ([\d.]+ \S+) to comm_exposed",
        lambda e, m: (
            duration(e["if_comm_ns"]["comm_overlapped"]) == m.group(1)
            and duration(e["if_comm_ns"]["comm_exposed"]) == m.group(2)
        ),
    ),
    (r"no launch call in the trace", lambda e, m: e["ops_without_launch"] > 0),
    # memory, parallel, application
    (r"use?s? pageable host memory", lambda e, m: e["pageable_copies"] > 0),
    (r"memcpys? moves? ([\d.]+) MB", lambda e, m: e["unknown_bytes"] == 0),
    (
        r"at least ([\d.]+) MB \((\d+) with no byte count\)",
        lambda e, m: (
            e["unknown_bytes"] == int(m.group(2)) > 0 and f"{e['bytes'] / 1e6:.1f}" == m.group(1)
        ),
    ),
    (
        r"only ([\d.]+)% of communication overlaps compute",
        lambda e, m: _near(m.group(1), e["overlap_ratio"]),
    ),
    # memory layer (space): peak, headroom, who holds it, fragmentation, churn, growth
    (
        r"peak (\S+ \S+) allocated of (\S+ \S+) \(([\d.]+)%\)",
        lambda e, m: (
            gib(e["peak_allocated_bytes"]) == m.group(1)
            and gib(e["capacity_bytes"]) == m.group(2)
            and _near(m.group(3), e["peak_allocated_bytes"] / e["capacity_bytes"])
        ),
    ),
    (
        r"`([^`]+)` holds (\S+ \S+) of it",
        lambda e, m: (
            e["live_at_peak_by_op"][0]["name"] == m.group(1)
            and gib(e["live_at_peak_by_op"][0]["bytes"]) == m.group(2)
        ),
    ),
    (
        r"reserved - allocated = (\S+ \S+) at the peak \(([\d.]+)% of the (\S+ \S+)",
        lambda e, m: (
            gib(e["fragmentation_bytes"]) == m.group(1)
            and _near(m.group(2), e["fragmentation_bytes"] / e["reserved_at_peak_bytes"])
            and gib(e["reserved_at_peak_bytes"]) == m.group(3)
            and e["fragmentation_bytes"]
            == e["reserved_at_peak_bytes"] - e["peak_allocated_bytes"]
            >= FRAGMENTATION_SHARE * e["reserved_at_peak_bytes"]
        ),
    ),
    (
        r"called ([\d.]+) times per \S+ after the first, (\S+ \S+) of host_bound per \S+ "
        r"charged to them \((\S+ \S+) in the calls\)",
        lambda e, m: (
            f"{e['calls_per_window']:.1f}" == m.group(1)
            and duration(e["host_bound_ns_per_window"]) == m.group(2)
            and duration(e["ns_per_window"]) == m.group(3)
        ),
    ),
    (
        r"live memory grows (\S+ \S+) per \S+ over (\d+) \S+ windows \(p = (\S+) < ([\d.]+)\)"
        r"(?:, held by `([^`]+)`(?: in `([^`]+)`)?)?",
        lambda e, m: (
            e["growing"]
            and gib(e["slope_bytes_per_window"]) == m.group(1)
            and e["windows"] == int(m.group(2))
            and e["p_value"] < float(m.group(4)) == GROWTH_ALPHA
            and (m.group(5) is None or e["held_by"]["name"] == m.group(5))
            and (m.group(6) is None or e["held_by"]["range"] == m.group(6))
        ),
    ),
    (r"rank (\d+) arrives last", lambda e, m: e["straggler"] == int(m.group(1))),
    # collectives: the exposed time split by the ranks' arrivals; one rank's low busbw
    (
        r"of the ([\d.]+ \S+) they are exposed, ([\d.]+ \S+) \(([\d.]+)%\) is waiting for peers",
        lambda e, m: (
            duration(e["exposed_ns"]) == m.group(1)
            and duration(e["waiting_exposed_ns"]) == m.group(2)
            and _near(m.group(3), e["waiting_exposed_ns"] / e["exposed_ns"])
        ),
    ),
    (r"reach busbw ([\d,.]+) GB/s", lambda e, m: f"{e['busbw_gbps']:,.2f}" == m.group(1)),
    (
        r"with one rank of ([\d/]+) loaded",
        lambda e, m: (
            e["ranks_loaded"] == 1
            and "/".join(map(str, e["group_sizes"])) == m.group(1)
            and min(e["group_sizes"]) > 1
        ),
    ),
    (
        r"([\d.]+ \S+) \(([\d.]+)%\) of their time is beyond the fastest call",
        lambda e, m: (
            duration(e["beyond_fastest_ns"]) == m.group(1)
            and _near(m.group(2), e["beyond_fastest_ns"] / e["time_ns"])
            and e["repeated_size_calls"] > 1
        ),
    ),
    (r"windows? (\w+) grows most", lambda e, m: e["grows"] == m.group(1)),
]
# causal wording no pattern above backs
UNBACKED = re.compile(r"\b(because|caused by|causes|due to|leads to|results in|blames?)\b", re.I)


def check(f: Finding) -> list[str]:
    """What is wrong with one finding's title against its evidence (nothing: [])."""
    bad = []
    for pattern, cond in CLAIMS:
        for m in re.finditer(pattern, f.title):
            try:
                ok = bool(cond(f.evidence, m))
            except (KeyError, IndexError, TypeError) as exc:
                ok = False
                pattern += f" (evidence lacks {exc})"
            if not ok:
                bad.append(f"{pattern!r} not backed: {f.title}")
    if UNBACKED.search(f.title):
        bad.append(f"causal word without evidence: {f.title}")
    if f.layer == "capture":
        d = f.evidence.get("distorts")
        if not d or not all(isinstance(v, int) and v >= 0 for v in d.values()):
            bad.append(f"capture finding without the labels it distorts: {f.title}")
    return bad


def test_the_checker_rejects_an_unbacked_claim():
    f = Finding(
        "kernel",
        "launch_overhead is 97.8%: 370 of 555 eager kernels (66.7%) run under 10.0 µs",
        1,
        {"tiny_kernels_named": False, "tiny_kernels": 370, "short_gap_launch_overhead_ns": 0,
         "launch_overhead_ns": 100},
    )  # fmt: skip
    assert check(f) and "run under" in check(f)[0]
    assert check(Finding("capture", "capture: x", 0, {}))
    assert check(Finding("kernel", "slow because of tiny kernels", 0, {}))
    assert not check(Finding("capture", "capture: x", 0, {"distorts": {"idle_other_ns": 5}}))
    acts = [{"kind": "cpu_op", "name": "aten::mul", "ns": 2_000_000, "share": 1.0, "gaps": 2,
             "window_rows": [0]}]  # fmt: skip
    ok = "meanwhile thread 't' is in cpu_op 'aten::mul' 100.0% (2.00 ms in 2 gaps)"
    assert not check(Finding("scheduling", ok, 1, {"host_activities": acts, "sync_wait": None}))
    assert check(Finding("scheduling", ok.replace("100.0", "90.0"), 1,
                         {"host_activities": acts, "sync_wait": None}))  # fmt: skip
    assert check(Finding("scheduling", ok.replace("gaps)", "gaps, 2 windows)"), 1,
                         {"host_activities": acts, "sync_wait": None}))  # fmt: skip
    # a wait claimed for a call that does not synchronize, or with no sync evidence
    wait = ok + "; the host waits in aten::mul for the GPU"
    sync = {"name": "aten::mul", "gpu_busy_ns": 0, "gpu_ops": []}
    assert check(Finding("scheduling", wait, 1, {"host_activities": acts, "sync_wait": sync}))
    assert check(Finding("scheduling", wait, 1, {"host_activities": acts, "sync_wait": None}))
    acts[0]["name"] = sync["name"] = "aten::item"
    idle = ok.replace("mul", "item") + (
        "; the host waits in aten::item for the GPU; on the GPUs meanwhile: nothing the trace shows"
    )
    assert not check(Finding("scheduling", idle, 1, {"host_activities": acts, "sync_wait": sync}))
    sync["gpu_busy_ns"] = 5
    assert check(Finding("scheduling", idle, 1, {"host_activities": acts, "sync_wait": sync}))
    # unclassified communication: a kernel a comm rule names, or one with no hint and no
    # comm stream, is not backed
    k = {
        "name": "void moe::ep_dispatch<8>()",
        "hints": ["dispatch", "ep"],
        "kernels": 2,
        "on_comm_stream": 0,
        "under_compute_ns": 100_000,
        "ns": 130_000,
    }
    ev = {"unclassified_kernels": 2, "streams": [[0, 0, 21]], "under_compute_ns": 100_000,
          "kernels": [k], "if_comm_ns": {"comm_overlapped": 100_000, "comm_exposed": 30_000},
          "distorts": {"compute_ns": 130_000}}  # fmt: skip
    t = (
        "capture: 2 kernels on 1 side stream ('ep_dispatch<8>') overlap compute for 0.10 ms "
        "and look like communication (names with 'dispatch') but match no comm rule, so they "
        "count as compute; if they communicate, classifying them (--comm-kernel GLOB per "
        "name, e.g. 'ep_dispatch*') moves 0.10 ms to comm_overlapped and 30.0 µs to comm_exposed"
    )
    assert not check(Finding("capture", t, 1, ev))
    assert check(Finding("capture", t.replace("30.0 µs", "40.0 µs"), 1, ev))
    assert check(Finding("capture", t.replace("for 0.10", "for 0.20"), 1, ev))
    k["name"] = "void moe::all2all_dispatch<8>()"
    assert check(Finding("capture", t, 1, ev))
    k.update(name="void moe::ep_dispatch<8>()", hints=[])
    assert check(Finding("capture", t, 1, ev))
    host = {"kind": "range", "name": "sleepy", "share": 0.1}
    assert check(Finding("host", "range 'sleepy' holds 10.0% of the host time", 1, host))
    # a wait claimed for a thread that launches, or while the GPUs idle
    wait = {"waiting": True, "gpu_bound": True, "launches": 0, "gpu_busy_share": 0.99,
            "activity_ns": 2_000_000,
            "gpu_idle_ns": 20_000}  # fmt: skip
    said = (
        "the thread waits there: it launches no GPU work in it and the GPUs are busy 99.0% "
        "of its 2.00 ms, so it does not limit the step (the GPU idles 20.0 µs of it)"
    )
    assert not check(Finding("host", said, 1, wait))
    assert check(Finding("host", said, 1, {**wait, "launches": 3}))
    assert check(Finding("host", said.replace("99.0", "90.0"), 1, {**wait, "gpu_busy_share": 0.9}))
    bound = {"threshold": GPU_BOUND_SHARE, "min_busy_share": 0.97, "idle_ns": 3_000_000,
             "window_ns": 100_000_000, "busy_ns": 97_000_000, "launch_latency_p50_ns": 4e6,
             "devices": [{"busy_ns": 97_000_000, "window_ns": 100_000_000}]}  # fmt: skip
    said = ("the GPU is the bottleneck: GPU 0 is busy 97.0% of trace time (idle 3.00 ms in all: "
            "no host-side change saves more); the host runs 4.00 ms ahead of the GPU (launch "
            "latency p50)")  # fmt: skip
    assert not check(Finding("hardware", said, 1, bound))
    assert check(Finding("hardware", said, 1, {**bound, "launch_latency_p50_ns": 1e6}))
    assert check(Finding("hardware", said.replace("97.0", "90.0"), 1,
                         {**bound, "min_busy_share": 0.9}))  # fmt: skip


STEP_RANGES = ("decode_step", "ProfilerStep#*")


@pytest.mark.parametrize("path", trace_files(), ids=lambda p: p.name)
def test_no_title_claims_what_its_evidence_does_not_show(path: Path, shared_dir: Path) -> None:
    trace = pt.load(path)
    names = {trace.strings[int(i)] for i in set(trace.ranges["name"].tolist())}
    bys: list[str | None] = [None]
    bys += [p for p in STEP_RANGES if any(fnmatch.fnmatchcase(n, p) for n in names)]
    for by in bys:
        try:
            a = pt.attribute(trace, by=by)
        except UsageError as exc:
            assert "no GPU ops" in str(exc)  # a CPU-only capture: only its host windows
            continue
        found = Analysis(a).findings
        problems = [p for f in found for p in check(f)]
        assert not problems, f"{path.name} --by {by}:\n" + "\n".join(problems)
        lat = Analysis(a).to_document()["launch_latency"]
        for i, f in enumerate(found):
            e = f.evidence
            if f.title.startswith(("the GPU is the bottleneck", "the GPUs are the bottleneck")):
                assert e["launch_latency_p50_ns"] == (lat["p50"] if lat["count"] else None)
            # no finding blames a thread that launches nothing while the GPUs are busy
            if f.layer == "host":
                busy = e["gpu_busy_share"] >= GPU_BOUND_SHARE
                assert busy == e["gpu_bound"] == ("so it does not limit the step" in f.title)
                waits = busy and e["launches"] == 0
                assert waits == e["waiting"] == ("the thread waits there" in f.title)
            # such a thread ranks after every finding that is not a capture one
            if e.get("gpu_bound"):
                assert all(x.layer == "capture" or x.evidence.get("gpu_bound") for x in found[i:])
        _check_savings_and_order(a, found)
        # one name rule: no host table lists an emit_nvtx range by its seq/op_id suffix
        charged = set(a.host.bound_by_activity["name"].tolist())
        charged |= set(a.host.by_activity["name"].tolist())
        suffixed = [a.trace.strings[i] for i in charged if op_range_parts(a.trace.strings[i])[1]]
        assert not suffixed, suffixed[:3]


def _check_savings_and_order(a: Any, found: list[Finding]) -> None:
    """Issue 45's claims about savings and order, on one analysis:

    - no saving is offered for host time spent waiting in a synchronizing call for device
      work the trace does not show (the finding says so instead);
    - on a window set whose GPUs are busy at least HOST_RANK_BUSY_SHARE, no host-side
      finding ranks above a GPU-side one unless it saves more;
    - the text's heading says "by what fixing each saves" only where some finding has a
      saving; else it ranks by loss and one line gives the replay's reason, and a finding
      without a saving that has a reason shows it."""
    for f in found:
        sync = f.evidence.get("sync_wait")
        if sync and sync["gpu_busy_ns"] == 0 and f.fix is not None:
            assert f.saving_ns is None, f.title
            assert "device work the trace does not show" in f.evidence["saving_note"]
    hw = next((f for f in found if f.layer == "hardware" and "busy_ns" in f.evidence), None)
    if hw is not None and hw.evidence["busy_ns"] >= HOST_RANK_BUSY_SHARE * hw.evidence["window_ns"]:
        for i, f in enumerate(found):
            if f.layer not in HOST_SIDE_LAYERS:
                continue
            for g in found[i + 1 :]:
                if g.layer in ("capture", *HOST_SIDE_LAYERS) or g.evidence.get("gpu_bound"):
                    continue
                worth = g.loss_ns if g.saving_ns is None else g.saving_ns
                assert (f.saving_ns or 0) >= worth, (f.title, g.title)
    text = " ".join(render_attribution(a, found, ["t"]).split())
    if not found:
        return
    saved = any(f.saving_ns is not None for f in found)
    assert ("then by what fixing each saves" in text) == saved
    assert ("No saving shown:" in text) == (not saved)
    if saved:
        for f in found:
            note = f.evidence.get("saving_note")
            if f.saving_ns is None and note and note != NO_FIX_NOTE:
                assert note in text, (f.title, note)


RESNET = "kineto/tb_plugin_samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def test_removing_the_data_loader_saves_what_the_gaps_it_holds_allow(shared_dir: Path) -> None:
    """The kineto ResNet-50 sample: the host_bound before each 'Memcpy HtoD' (the DataLoader
    on the main thread, the autograd thread waiting its turn). Removing that host time
    saves more than nothing and at most the gaps' host_bound (before: 0.0 µs, as the
    autograd thread's launches stayed where they were), and at most the idle gaps before
    those copies, computed here from the op table alone; removing the loader saves at
    least the host_bound it holds and at most its time in the window."""
    trace = pt.load(shared_dir / "data" / "external" / RESNET)
    a = pt.attribute(trace)
    (f,) = [
        f for f in Analysis(a).findings if f.evidence.get("op_name", "").startswith("Memcpy HtoD")
    ]
    ops = trace.gpu_ops
    order = np.argsort(ops["start"], kind="stable")
    busy_e = iv.union(ops["start"][order], ops["end"][order])[1]
    copies = [i for i, n in enumerate(ops["name"].tolist())
              if trace.strings[n].startswith("Memcpy HtoD")]  # fmt: skip
    idle = []
    for i in copies:  # the idle time before each copy since the GPU last ran anything
        before = busy_e[busy_e <= ops["start"][i]]
        idle.append(int(ops["start"][i] - (before.max() if before.size else ops["start"][i])))
    gaps = sum(sorted(idle)[-f.evidence["gaps"] :])
    assert f.saving_ns is not None and 0 < f.saving_ns <= f.loss_ns <= gaps
    # the loader itself: its instances clipped to the window, and the host_bound in them
    nid = trace.strings.index(LOADER)
    ho = trace.host_ops
    mine = np.flatnonzero(ho["name"] == nid)
    mine = mine[np.argsort(ho["start"][mine], kind="stable")]
    w0, w1 = int(ops["start"].min()), int(ops["end"].max())
    ls, le = np.maximum(ho["start"][mine], w0), np.minimum(ho["end"][mine], w1)
    g = a.gaps
    k = np.argsort(g.g0, kind="stable")
    held = int(iv.overlap_lengths(ls, le, *iv.union(g.g0[k], g.host_bound_end[k])).sum())
    saved = what_if(a, f"{LOADER}=0").total_saving_ns
    assert held <= saved <= int(np.maximum(le - ls, 0).sum())


def test_a_gpu_side_finding_leads_on_a_gpu_bound_trace(shared_dir: Path) -> None:
    """HTA's trace-diff control trace (GPU 83.6% busy by ProfilerStep*): before, the top
    finding was "range '## backward ##' holds 44.3% of the host time"."""
    path = shared_dir / "data" / "external" / "hta" / "trace_diff" / "control" / "control.json.gz"
    found = pt.analyze(path, by="ProfilerStep*").findings
    first = next(f for f in found if f.layer != "capture")
    assert first.layer not in HOST_SIDE_LAYERS, first.title
    backward = next(f for f in found if "'## backward ##' holds" in f.title)
    assert found.index(backward) > found.index(first)


def test_per_rank_findings_of_one_rule_are_grouped(
    shared_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """PARAM's 8-rank DLRM: the host_bound before 'Memcpy HtoD' on each rank is one finding
    (before: five, each with its own 40-word caveat), the caveat said once."""
    files = sorted((shared_dir / "data" / "external" / "param" / "dlrm_kineto").glob("*.gz"))
    assert main(["analyze", *map(str, files), "--workers", "1"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    findings = text[text.index("Findings (") :]
    assert findings.count("host_bound before op 'Memcpy HtoD'") == 1
    at = findings.index("host_bound before op 'Memcpy HtoD'")
    start = findings.rindex("[scheduling] ", 0, at)
    end = re.search(r" \d+\. \[", findings[at:])
    one = findings[start : at + end.start()] if end else findings[start:]
    assert re.match(r"\[scheduling\] ranks [\d, -]+ \(\d of 8\); worst, rank \d: host_bound", one)
    assert one.count(CROSS_THREAD_NOTE) == 1  # the caveat, once


def test_emit_nvtx_ranges_are_named_by_their_op(shared_dir: Path, tmp_path: Path) -> None:
    """nsys_ai's exports with torch.autograd.profiler.emit_nvtx ranges ('aten::split,
    seq = 47513, op_id = 998980'): the host table and the diff list ops by name (before,
    the diff listed 7,453 host activities, each instance apart), and the diff's op and
    host sections name them alike."""
    d = shared_dir / "data" / "external" / "nsys_ai"
    out = tmp_path / "diff.json"
    argv = ["diff", "--base", str(d / "mfu_2gpu_before.sqlite"), "--new",
            str(d / "mfu_2gpu_after.sqlite"), "--json", str(out), "--quiet"]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    host = [h["name"] for h in doc["host_activities"]]
    ops = [o["name"] for o in doc["ops"]]
    assert not [n for n in host + ops if op_range_parts(n.removeprefix("range "))[1]]
    ranges = {n.removeprefix("range ") for n in host if n.startswith("range ")}
    assert len(set(ops) & ranges) >= 5  # the same ops, by the same names
    assert len(host) < 200


def test_the_checker_rejects_unbacked_memory_claims() -> None:
    held = [{"kind": "cpu_op", "name": "aten::mm", "bytes": 1 << 30}]
    peak = {"peak_allocated_bytes": 3 << 30, "capacity_bytes": 4 << 30, "live_at_peak_by_op": held}
    good = "cuda:0: peak 3.0 GiB allocated of 4.0 GiB (75.0%): `aten::mm` holds 1.0 GiB of it"
    assert not check(Finding("memory", good, 0, peak))
    assert check(Finding("memory", good.replace("75.0", "80.0"), 0, peak))
    assert check(Finding("memory", good.replace("aten::mm", "aten::cat"), 0, peak))
    grow = {"growing": True, "slope_bytes_per_window": 1 << 20, "windows": 12, "p_value": 0.001,
            "held_by": {"name": "aten::cat", "range": "step"}}  # fmt: skip
    title = "cpu: live memory grows 1.0 MiB per step over 12 step windows (p = 0.001 < 0.01)"
    assert not check(Finding("memory", title + ", held by `aten::cat` in `step`", 0, grow))
    assert check(Finding("memory", title + ", held by `aten::add` in `step`", 0, grow))
    assert check(Finding("memory", title, 0, {**grow, "growing": False}))


def test_the_checker_rejects_unbacked_kernel_claims() -> None:
    rate = {"dtype": "bf16", "tflops_s": 214.7, "peak_tflops_s": 1000.0, "modelled_share": 1.0}
    cats = {"busy_ns": 340_000, "window_ns": 342_020, "min_busy_share": 0.994,
            "threshold": GPU_BOUND_SHARE,
            "categories": [{"category": "gemm", "busy_ns": 320_000, "rate": rate}]}  # fmt: skip
    title = (
        "the GPU's busy time (0.34 ms, 99.4% of step time) by op category: gemm 94.1% "
        "(0.32 ms) at 21.5% of bf16 peak (214.7 TFLOP/s over 100.0% of its GPU time)"
    )
    assert not check(Finding("kernel", title, 1, cats))
    assert check(Finding("kernel", title.replace("94.1", "90.0"), 1, cats))
    assert check(Finding("kernel", title.replace("21.5%", "30.0%"), 1, cats))
    assert check(Finding("kernel", title, 1, {**cats, "min_busy_share": 0.5}))
    assert check(Finding("kernel", title + ", norm 5.9% (20.0 µs)", 1, cats))  # not in evidence
    op = {"name": "aten::mm", "input_dims": [[2048, 2048], [2048, 2048]], "dtype": "bf16",
          "category": "gemm", "calls": 4, "kernel_ns": 320_000, "kernel_share": 0.941,
          "bound": "compute", "tflops_s": 214.75, "tb_s": 0.31, "intensity": 682.7,
          "roofline_fraction": 0.21475, "gpu": "hand", "peak_tflops": 1000.0, "peak_tb_s": 2.0,
          "gpu_ops": 4, "at_roof_ns": 68_720, "potential_ns": 251_280}  # fmt: skip
    said = (
        "'aten::mm' [[2048, 2048], [2048, 2048]] (bf16, gemm): 4 calls, 0.32 ms of GPU time "
        "(94.1% of all), compute-bound at 214.8 TFLOP/s = 21.5% of the hand's bf16 peak 1000 "
        "TFLOP/s; at its roof its kernels would take 68.7 µs: up to 0.25 ms less"
    )
    assert not check(Finding("kernel", said, 1, op))
    assert check(Finding("kernel", said, 1, {**op, "intensity": 100.0}))  # under the ridge
    assert check(Finding("kernel", said, 1, {**op, "potential_ns": 300_000}))
    assert check(Finding("kernel", said, 1, {**op, "roofline_fraction": 0.3}))
    assert check(Finding("kernel", said.replace("4 calls", "5 calls"), 1, op))
    # as a per-rank report titles it, still checked
    assert check(Finding("kernel", "rank 0: " + said.replace("4 calls", "5 calls"), 1, op))
    assert not check(Finding("kernel", "rank 0: " + said, 1, op))
    host = {"name": "aten::bmm", "calls": 2, "launches": 0, "op_ns": 5000, "gflop": 0.0168,
            "tflops_s": 3.36, "gpu_idle_ns": 4000}  # fmt: skip
    said = (
        "cpu_op 'aten::bmm' launches no GPU work in 2 calls (5.0 µs of host time, 0.0168 GFLOP "
        "by its shapes, 3.36 TFLOP/s): it computes on the host while its rank's GPUs idle "
        "4.0 µs of it"
    )
    assert not check(Finding("kernel", said, 1, host))
    assert check(Finding("kernel", said, 1, {**host, "launches": 1}))
    assert check(Finding("kernel", said, 1, {**host, "gpu_idle_ns": 6000}))
