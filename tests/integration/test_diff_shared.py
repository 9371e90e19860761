"""``pytimings diff`` on real before/after pairs in ../shared/data/external, checked against
sums computed here straight from the files (sqlite3, json), and the bootstrap's
false-positive rate on random halves of the H200 decode windows."""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from helpers.bootstrap_check import binomial_band, false_positives

from pytimings.analysis.diff import TOO_FEW_WINDOWS
from pytimings.cli import main
from pytimings.ingest.names import normalize_kernel_name

pytestmark = pytest.mark.shared


def run_diff(tmp: Path, *args: str) -> dict[str, Any]:
    out = tmp / "d.json"
    assert main(["diff", "-q", *args, "--resamples", "400", "--json", str(out)]) == 0
    return dict(json.loads(out.read_text()))


def agree(
    doc: dict[str, Any], base: dict[str, float], new: dict[str, float], verdicts: bool = True
) -> None:
    """Each kernel's means per window equal the independent ones, and every verdict points
    the way the independent sums do."""
    k = {r["name"]: r for r in doc["kernels"] if r["name"] in base or r["name"] in new}
    assert k.keys() == base.keys() | new.keys()
    for name, r in k.items():
        b, n = base.get(name, 0.0), new.get(name, 0.0)
        assert r["base_ns"] == pytest.approx(b, rel=1e-6, abs=5), name
        assert r["new_ns"] == pytest.approx(n, rel=1e-6, abs=5), name
        if r["verdict"] == "worse":
            assert n > b, name
        elif r["verdict"] == "better":
            assert n < b, name
        elif r["verdict"] == "added":
            assert b == 0 < n, name
        elif r["verdict"] == "removed":
            assert n == 0 < b, name
    assert any(r["verdict"] in ("better", "worse") for r in k.values()) == verdicts


def nsys_kernels_per_window(path: Path) -> dict[str, float]:
    """Kernel time per name over the capture, per device (the whole-trace windows)."""
    db = sqlite3.connect(path)
    rows = db.execute(
        "SELECT s.value, k.deviceId, SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName GROUP BY s.value, k.deviceId"
    ).fetchall()
    devices = {d for _, d, _ in rows}
    out: dict[str, float] = defaultdict(float)
    for name, _, total in rows:
        out[normalize_kernel_name(name)] += total / len(devices)
    return dict(out)


def test_nsys_ai_mfu_before_after(shared_dir: Path, tmp_path: Path) -> None:
    d = shared_dir / "data/external/nsys_ai"
    before, after = d / "mfu_2gpu_before.sqlite", d / "mfu_2gpu_after.sqlite"
    doc = run_diff(tmp_path, "--base", str(before), "--new", str(after), "--processes-as-ranks")
    # one whole-trace window per rank (GPU), both ranks of a capture one sample: the two
    # GPUs ran together, so they are no evidence of spread
    assert doc["window_entries"] == {"base": 2, "new": 2}
    assert doc["windows"] == {"base": 1, "new": 1}
    assert {r["verdict"] for r in doc["labels"]} == {TOO_FEW_WINDOWS}
    agree(doc, nsys_kernels_per_window(before), nsys_kernels_per_window(after), verdicts=False)
    # the collective: its mean duration per instance and rank, as the kernels show it
    coll = {r["name"]: r for r in doc["collectives"]}
    db = sqlite3.connect(before)
    (mean,) = db.execute(
        "SELECT AVG(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
        "ON s.id = k.demangledName WHERE s.value LIKE 'ncclDevKernel_SendRecv%'"
    ).fetchone()
    (time,) = [r for n, r in coll.items() if "SendRecv" in n and n.endswith(" time")]
    assert time["base_ns"] == pytest.approx(mean)


def kineto_step_kernels(path: Path) -> tuple[dict[str, float], int]:
    """Kernel time per name per ProfilerStep, a kernel counted in the step whose thread
    launched it while inside the step (the runtime call with its correlation id)."""
    ev = json.load(gzip.open(path))["traceEvents"]
    steps = [
        e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep")
    ]
    launch = {
        e["args"]["correlation"]: e
        for e in ev
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    out: dict[str, float] = defaultdict(float)
    for k in (e for e in ev if e.get("cat") == "kernel"):
        call = launch.get(k["args"].get("correlation"))
        if call is None:
            continue
        for s in steps:
            if s["tid"] == call["tid"] and s["ts"] <= call["ts"] < s["ts"] + s["dur"]:
                out[normalize_kernel_name(k["name"])] += k["dur"] * 1000 / len(steps)
    return dict(out), len(steps)


def test_hta_trace_diff_control_vs_test(shared_dir: Path, tmp_path: Path) -> None:
    d = shared_dir / "data/external/hta/trace_diff"
    control, test = d / "control/control.json.gz", d / "test/test.json.gz"
    doc = run_diff(tmp_path, "--base", str(control), "--new", str(test), "--by", "ProfilerStep*")
    base, n_base = kineto_step_kernels(control)
    new, n_new = kineto_step_kernels(test)
    assert doc["windows"] == {"base": n_base, "new": n_new} == {"base": 6, "new": 6}
    agree(doc, base, new)


def test_nsys_and_kineto_spellings_of_one_workload_match(shared_dir: Path, tmp_path: Path) -> None:
    """The H200 workload captured by both profilers (two runs): every kernel, memcpy and
    memset name is on both sides, with the same count (1,047 + 16 + 12 ops each)."""
    d = shared_dir / "data/h200"
    doc = run_diff(
        tmp_path, "--base", str(d / "decode_16steps_h200.sqlite"),
        "--new", str(d / "decode_16steps_h200.pt.trace.json.gz"),
    )  # fmt: skip
    k = doc["kernels"]
    assert [r["name"] for r in k if r["base_count"] != r["new_count"]] == []
    assert sum(r["base_count"] for r in k) == 1047 + 16 + 12
    assert {r["verdict"] for r in k} == {TOO_FEW_WINDOWS}


@pytest.mark.slow
def test_false_positive_rate_on_halves_of_the_h200_decode_windows(shared_dir: Path) -> None:
    """Random halves of one capture's decode steps: about 5% of the 200 splits get a verdict
    on the window length (binomial band as in tests/unit/test_diff.py)."""
    import pytimings as pt

    a = pt.attribute(pt.load(shared_dir / "data/h200/decode_16steps_h200.sqlite"), by="decode_step")
    window = a.windows["window_ns"].astype(np.float64)
    assert len(window) >= 16

    def halves(rng: np.random.Generator) -> tuple[npt.NDArray[np.float64], ...]:
        perm = rng.permutation(len(window))
        return window[perm[: len(window) // 2]], window[perm[len(window) // 2 :]]

    hits = false_positives(halves)
    lo, hi = binomial_band()
    assert lo <= hits <= hi, (hits, lo, hi)
