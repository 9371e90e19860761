"""Every real trace in ../shared (nsys and Kineto) analysed ``--by`` its step-like ranges
and its most repeated range (contract v3): the windows of one thread never overlap on a
device, their total never exceeds the traced span, the GPU busy time they hold never
exceeds the union of the device's op intervals (computed here, independently), and the
labels sum exactly to each window."""

from __future__ import annotations

import collections
import fnmatch
from pathlib import Path

import numpy as np
import pytest
from helpers.shared_traces import trace_files

import pytimings as pt
from pytimings.analysis.partition import LABELS

pytestmark = pytest.mark.shared

STEP_RANGES = (
    "ProfilerStep#*",
    "decode_step",
    "## forward ##",
    "Optimizer.step#*",
    "[[]param|*|measure|forward]",
)
BUSY = ("compute", "comm_overlapped", "comm_exposed", "memory")


def _selections(trace: pt.Trace) -> list[str]:
    names = collections.Counter(trace.strings[int(i)] for i in trace.ranges["name"].tolist())
    bys = [p for p in STEP_RANGES if any(fnmatch.fnmatchcase(n, p) for n in names)]
    repeated = [n for n, k in names.most_common(1) if k >= 2 and n not in bys]
    return bys + repeated


def _union_length(s: np.ndarray, e: np.ndarray) -> int:
    """Length of the union of [s, e) in plain Python (independent of the kernels)."""
    total, cur_s, cur_e = 0, None, None
    for a, b in sorted(zip(s.tolist(), e.tolist(), strict=True)):
        if b <= a:
            continue
        if cur_e is None or a > cur_e:
            total += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    return total + (0 if cur_e is None else cur_e - cur_s)


def test_the_step_selections_are_found(shared_dir: Path) -> None:
    """The test below is not vacuous: the selections hold the traces' step ranges."""
    h200 = pt.load(shared_dir / "data/h200/decode_16steps_h200.sqlite")
    assert _selections(h200)[0] == "decode_step"
    hta = pt.load(shared_dir / "data/external/hta/ns_resolution_trace")
    assert _selections(hta)[:2] == ["ProfilerStep#*", "## forward ##"]


@pytest.mark.parametrize("path", trace_files(), ids=lambda p: p.name)
def test_by_windows_tile_on_every_real_trace(path: Path, shared_dir: Path) -> None:
    trace = pt.load(path)
    if len(trace.gpu_ops) == 0:
        pytest.skip("no GPU ops: only host windows")
    whole = pt.attribute(trace).windows
    span = {int(r): int(e - s) for r, s, e in zip(whole["rank"], whole["start_ns"],
                                                  whole["end_ns"], strict=True)}  # fmt: skip
    ops = trace.gpu_ops
    for by in _selections(trace):
        a = pt.attribute(trace, by=by)
        w = a.windows
        thread = trace.ranges["thread"][a.window_range_rows]
        total = sum(w[f"{x}_ns"] for x in LABELS)
        assert np.array_equal(total, w["window_ns"]), (path.name, by)
        keys = zip(w["rank"].tolist(), w["device"].tolist(), thread.tolist(), strict=True)
        for r, d, t in set(keys):
            mine = np.flatnonzero((w["rank"] == r) & (w["device"] == d) & (thread == t))
            mine = mine[np.lexsort((w["end_ns"][mine], w["start_ns"][mine]))]
            s, e = w["start_ns"][mine], w["end_ns"][mine]
            assert np.all(s[1:] >= e[:-1]), f"{path.name} --by {by}: windows overlap on GPU {d}"
            assert int(w["window_ns"][mine].sum()) <= span[r], (path.name, by)
            on = (ops["rank"] == r) & (ops["device"] == d)
            union = _union_length(ops["start"][on], ops["end"][on])
            busy = sum(int(w[f"{x}_ns"][mine].sum()) for x in BUSY)
            assert busy <= union, f"{path.name} --by {by}: GPU {d} busy counted twice"
