"""``trace_summary`` agrees with Nsight Systems' own ``nsys stats`` on the same exports.

Definitional notes (checked here, documented in pytimings/ingest/summary.py):
- nsys stats aggregates over all processes and devices of an export, so the comparison uses
  ``per_device=False``; nsys groups kernels by the raw demangled name, pytimings by the
  normalised name (on these files the two groupings coincide, which the test checks).
- nsys prints means rounded to 0.1 ns; compared within 0.05 ns.
- nsys stats drops a 4-character ``_vNNNN`` API version suffix; so does pytimings.
- NVTX range names are "domain:name"; nsys writes ":name" when the domain is unnamed.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytimings.analysis.summary import trace_summary
from pytimings.ingest import load
from pytimings.ingest.names import normalize_kernel_name
from pytimings.table import Table

pytestmark = pytest.mark.shared

CASES = [
    ("h200/decode_16steps_h200.sqlite", "h200/nsys_stats/decode_16steps_h200"),
    ("external/nsys_ai/mfu_2gpu_before.sqlite", "external/nsys_ai/nsys_stats/mfu_2gpu_before"),
]


@pytest.fixture(scope="module", params=CASES, ids=["h200", "mfu_2gpu_before"])
def case(request: pytest.FixtureRequest, shared_dir: Path) -> tuple[dict[str, Table], Path]:
    export, stats = request.param
    return trace_summary(
        load(shared_dir / "data" / export), per_device=False
    ), shared_dir / "data" / stats


def _csv(prefix: Path, report: str) -> list[dict[str, str]]:
    with open(f"{prefix}_{report}.csv", newline="") as f:
        return list(csv.DictReader(f))


def _row(t: Table, i: int, cols: list[str]) -> tuple[Any, ...]:
    return tuple(float(t[c][i]) for c in cols)


def _check(t: Table, i: int, r: dict[str, str], count_col: str) -> None:
    got = _row(t, i, ["count", "total_ns", "p50_ns", "min_ns", "max_ns"])
    want = tuple(
        float(r[c]) for c in (count_col, "Total Time (ns)", "Med (ns)", "Min (ns)", "Max (ns)")
    )
    assert got == want, r
    assert abs(t["mean_ns"][i] - float(r["Avg (ns)"])) <= 0.05 + 1e-9, r


def test_kernels(case: tuple[dict[str, Table], Path]) -> None:
    s, stats = case
    k = s["kernels"]
    rows = _csv(stats, "cuda_gpu_kern_sum")
    index = {k["full_name"][i]: i for i in range(len(k))}
    assert len(index) == len(rows) == len({normalize_kernel_name(r["Name"]) for r in rows})
    for r in rows:
        i = index[normalize_kernel_name(r["Name"])]
        _check(k, i, r, "Instances")
        assert round(100 * k["share"][i], 1) == pytest.approx(float(r["Time (%)"]), abs=0.051)


def test_memory_operations(case: tuple[dict[str, Table], Path]) -> None:
    s, stats = case
    m = s["memory"]
    rows = _csv(stats, "cuda_gpu_mem_time_sum")
    assert sorted(m["operation"].tolist()) == sorted(r["Operation"] for r in rows)
    for r in rows:
        _check(m, m["operation"].tolist().index(r["Operation"]), r, "Count")


def test_api_calls(case: tuple[dict[str, Table], Path]) -> None:
    s, stats = case
    a = s["api"]
    # API calls only, as cuda_api_sum: synchronization records are a table of their own
    calls = {a["name"][i]: i for i in range(len(a))}
    assert len(calls) == len(a) and set(a["kind"].tolist()) <= {"runtime", "driver"}
    rows = _csv(stats, "cuda_api_sum")
    assert set(calls) == {r["Name"] for r in rows}
    for r in rows:
        _check(a, calls[r["Name"]], r, "Num Calls")


def _range_index(g: Table) -> dict[tuple[str, str], int]:
    return {(g["style"][i], g["name"][i]): i for i in range(len(g))}


def _key(r: dict[str, str]) -> tuple[str, str]:
    name = r["Range"]
    return r["Style"], name[1:] if name.startswith(":") else name


def test_nvtx_ranges(case: tuple[dict[str, Table], Path]) -> None:
    s, stats = case
    g = s["ranges"]
    index = _range_index(g)
    rows = _csv(stats, "nvtx_sum")
    assert len(rows) == len(g)
    for r in rows:
        _check(g, index[_key(r)], r, "Instances")


def test_nvtx_gpu_projection(case: tuple[dict[str, Table], Path]) -> None:
    s, stats = case
    g = s["ranges"]
    index = _range_index(g)
    rows = _csv(stats, "nvtx_gpu_proj_sum")
    projected = {k for k, i in index.items() if g["gpu_ops"][i] > 0}
    assert projected == {_key(r) for r in rows}
    for r in rows:
        i = index[_key(r)]
        assert (int(g["proj_total_ns"][i]), int(g["gpu_ops"][i]), int(g["proj_instances"][i])) == (
            int(r["Total Proj Time (ns)"]),
            int(r["Total GPU Ops"]),
            int(r["Range Instances"]),
        ), r


def test_cli_summary_prints_and_writes_json(shared_dir: Path, tmp_path: Path) -> None:
    import json

    out = tmp_path / "s.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytimings.cli",
            "summary",
            str(shared_dir / "data" / CASES[0][0]),
            "--json",
            str(out),
            "--top",
            "3",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "probe:decode_step" in done.stdout and "Kernels (rank 0, device 0)" in done.stdout
    doc = json.loads(out.read_text())
    assert doc["schema"] == "pytimings.summary/1"
    assert len(doc["tables"]["kernels"]) == 17  # every kernel: --top cuts the screen only
    assert done.stdout.count("nvjet") <= 3
    assert doc["tables"]["kernels"][0]["name"] == "nvjet_sm90_tst_256x8_64x6_4x1_v_bz_NNT"
