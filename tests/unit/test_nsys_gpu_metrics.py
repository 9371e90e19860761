"""Nsight GPU metrics (issue 26 item 3): an export captured with ``--gpu-metrics-devices``
carries GPU_METRICS/TARGET_INFO_GPU_METRICS; ``analyze`` gives each window the means of its
GPU's metrics, the hardware findings read them, the Perfetto export and the HTML report draw
them. The export is built here with the documented schema (tests/helpers/nsys_synth.py); the
means and shares are recomputed from the rows written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import nsys_synth
from helpers.nsys_synth import GPID, GTID

from pytimings.cli import main
from pytimings.ingest.nsys_gpu_metrics import read_gpu_metrics, short_names

US = 1_000
STEPS = 4
TYPE = {0: 0x100, 1: 0x101}  # typeId per GPU (the low byte is the GPU)
INFO = [
    (0, "GPC Clock Frequency [MHz]", "gpc_clock_mhz"),
    (1, "SMs Active [Throughput %]", "sm_active_pct"),
    (2, "SM Issue [Throughput %]", "sm_issue_pct"),
    (3, "Tensor Active [Throughput %]", "tensor_active_pct"),
    (4, "DRAM Read Bandwidth [Throughput %]", "dram_read_pct"),
    (5, "DRAM Write Bandwidth [Throughput %]", "dram_write_pct"),
    (6, "Compute Warps in Flight [Throughput %]", "Compute Warps in Flight [Throughput %]"),
    (7, "PCIe RX Throughput [Throughput %]", "pcie_rx_pct"),
]
KERNELS = [(k * 1000 * US + 30 * US, k * 1000 * US + 700 * US) for k in range(STEPS)]


def _value(metric_id: int, t: int, gpu: int) -> int:
    """Steps 0-1: SMs 30% active, memory-bound at 30% of peak DRAM; steps 2-3: 90% active,
    compute-bound (SM issue 80%); a sawtooth on top so means differ per window."""
    early = t < 2000 * US
    wobble = (t // (10 * US)) % 5 + t // (1000 * US)  # differs per step
    return {
        0: 1980 - 10 * wobble - 100 * gpu,
        1: (30 if early else 90) + wobble,
        2: 5 if early else 80,
        3: 0 if early else 40,
        4: 20 + wobble,
        5: 10,
        6: 50 + wobble,
        7: 3,
    }[metric_id]


def _samples() -> list[tuple[int, int, int, int]]:
    """(timestamp, typeId, metricId, value) every 10 µs from 5 µs before the first step."""
    rows = []
    for gpu, type_id in TYPE.items():
        for i in range(401):
            t = i * 10 * US - 5 * US
            rows += [(t, type_id, m, _value(m, t, gpu)) for m, _, _ in INFO]
    rows.append((1234 * US, TYPE[0], 1, -7))  # written signed by nsys: left out, counted
    return rows


def _export(path: Path, metrics: bool = True) -> Path:
    rows: dict[str, list[tuple[object, ...]]] = {
        "StringIds": [(1, "kern"), (3, "cudaLaunchKernel_v7000")],
        "CUPTI_ACTIVITY_KIND_RUNTIME": [
            (k * 1000 * US + 10 * US, k * 1000 * US + 20 * US, 0, GTID, k + 1, 3)
            for k in range(STEPS)
        ],
        "CUPTI_ACTIVITY_KIND_KERNEL": [
            (s, e, 0, 1, 7, k + 1, GPID, 1, 1) for k, (s, e) in enumerate(KERNELS)
        ],
        "NVTX_EVENTS": [
            (k * 1000 * US, k * 1000 * US + 800 * US, 59, None, None, None, "step", GTID)
            for k in range(STEPS)
        ],
    }
    if metrics:
        rows["GPU_METRICS"] = list(_samples())
        rows["TARGET_INFO_GPU_METRICS"] = [
            (ty, 1, f"GPU {g}", m, name) for g, ty in TYPE.items() for m, name, _ in INFO
        ]
    return nsys_synth.write(path, rows)


def _analyze(path: Path, tmp: Path, *extra: str) -> dict[str, object]:
    out = tmp / "a.json"
    assert main(["analyze", str(path), "--by", "step", "--json", str(out), *extra]) == 0
    doc: dict[str, object] = json.loads(out.read_text())
    return doc


def _busy(t: int) -> bool:
    return any(s <= t < e for s, e in KERNELS)


def test_each_window_gets_the_means_of_its_gpus_metrics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _analyze(_export(tmp_path / "m.sqlite"), tmp_path)
    text = capsys.readouterr().out
    assert "GPU metrics per window, means (4 of 4 with samples)" in text
    assert "1 GPU metric samples with a negative value left out" in text
    windows = doc["windows"]
    assert isinstance(windows, list) and len(windows) == STEPS
    samples = [r for r in _samples() if r[3] >= 0 and r[1] == TYPE[0]]
    for w in windows:
        got = w["gpu_metrics"]
        assert got["gpu"] == 0
        inside = [r for r in samples if w["start_ns"] <= r[0] <= w["end_ns"]]
        for metric_id, _, short in INFO:
            vals = [v for _, _, m, v in inside if m == metric_id]
            assert got["mean"][short] == pytest.approx(sum(vals) / len(vals))
        assert got["samples"] == max(sum(1 for r in inside if r[2] == m) for m, _, _ in INFO)
    # the negative sample sat in step 1: its window's mean is of the other samples only
    assert windows[1]["gpu_metrics"]["mean"]["sm_active_pct"] > 0


def test_the_hardware_findings_read_the_metrics_while_the_gpu_is_busy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _analyze(_export(tmp_path / "m.sqlite"), tmp_path)
    found = {f["evidence"]["kind"]: f for f in doc["findings"] if f["layer"] == "hardware"
             and "kind" in f["evidence"]}  # fmt: skip
    by_t: dict[int, dict[int, int]] = {}
    for t, ty, m, v in _samples():
        if ty == TYPE[0] and v >= 0:
            by_t.setdefault(t, {})[m] = v
    busy = {t: vs for t, vs in by_t.items() if _busy(t)}
    low = [t for t, vs in busy.items() if 1 in vs and vs[1] < 50]
    sm = found["sm_active_low"]["evidence"]
    assert sm["gpu"] == 0 and sm["samples"] == sum(1 for vs in busy.values() if 1 in vs)
    assert sm["low_samples"] == len(low)
    assert sm["share"] == pytest.approx(len(low) / sm["samples"])
    mean_busy = sum(vs[1] for vs in busy.values() if 1 in vs) / sm["samples"]
    assert sm["mean_sm_active_pct_busy"] == pytest.approx(mean_busy)
    bound = [t for t, vs in busy.items() if vs[4] + vs[5] > max(vs[2], vs[3])]
    dram_low = [t for t in bound if busy[t][4] + busy[t][5] < 50]
    mem = found["memory_bandwidth_low"]["evidence"]
    assert mem["samples"] == len(bound) > 0
    assert mem["low_samples"] == len(dram_low)
    mean = sum(busy[t][4] + busy[t][5] for t in bound) / len(bound)
    assert mem["mean_dram_pct_memory_bound"] == pytest.approx(mean)
    assert found["sm_active_low"]["loss_ns"] == len(low) * 10 * US
    assert "SMs active under 50%" in capsys.readouterr().out


def test_an_export_without_the_tables_is_analysed_as_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _export(tmp_path / "plain.sqlite", metrics=False)
    assert read_gpu_metrics(path) is None
    doc = _analyze(path, tmp_path)
    assert "GPU metrics" not in capsys.readouterr().out
    assert all("gpu_metrics" not in w for w in doc["windows"])
    assert not any("kind" in f["evidence"] for f in doc["findings"])


def test_perfetto_and_html_draw_the_metrics(tmp_path: Path) -> None:
    path = _export(tmp_path / "m.sqlite")
    out = tmp_path / "t.json"
    assert main(["export", str(path), "--perfetto", str(out)]) == 0
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    origin = doc["otherData"]["pytimings_origin_ns"]
    for gpu in TYPE:
        name = f"telemetry GPU {gpu} (m.sqlite)"
        (pid,) = [e["pid"] for e in events if e.get("ph") == "M" and e["args"].get("name") == name]
        for metric_id, _, short in INFO:
            want = [(t, v) for t, ty, m, v in _samples() if ty == TYPE[gpu] and m == metric_id
                    and v >= 0]  # fmt: skip
            got = [(e["ts"], e["args"]["value"]) for e in events
                   if e.get("ph") == "C" and e["pid"] == pid and e["name"] == short]  # fmt: skip
            assert [v for _, v in got] == pytest.approx([v for _, v in want])
            assert [ts for ts, _ in got] == pytest.approx([(t - origin) / 1e3 for t, _ in want])
    html = tmp_path / "r.html"
    assert main(["analyze", str(path), "--by", "step", "--html", str(html)]) == 0
    page = html.read_text()
    assert "Nsight GPU metrics" in page and '"name":"GPU 0 sm_active_pct (%)"' in page
    assert '"name":"GPU 1 gpc_clock_mhz (MHz)"' in page


def test_names_map_by_documented_pattern_and_unit_and_the_rest_keep_their_own() -> None:
    names = short_names([
        (0x100, 1, "SMs Active [Throughput %]"),
        (0x100, 2, "SM Active [Throughput %]"),  # a second match: keeps its own name
        (0x100, 3, "SMs Active [Cycles Active]"),  # another unit: its own name
        (0x100, 4, "NVLink TX Responses User Data [Throughput %]"),
        (0x100, 5, "NVLink TX Requests Protocol Data [Throughput %]"),
        (0x101, 1, "SMs Active [Throughput %]"),  # another GPU: its own short name
    ])  # fmt: skip
    assert names == {
        (0x100, 1): "sm_active_pct",
        (0x100, 2): "SM Active [Throughput %]",
        (0x100, 3): "SMs Active [Cycles Active]",
        (0x100, 4): "nvlink_tx_pct",
        (0x100, 5): "NVLink TX Requests Protocol Data [Throughput %]",
        (0x101, 1): "sm_active_pct",
    }


def test_the_tables_change_nothing_else(tmp_path: Path) -> None:
    with_tables = _analyze(_export(tmp_path / "m.sqlite"), tmp_path)
    without = _analyze(_export(tmp_path / "plain.sqlite", metrics=False), tmp_path)
    for w in with_tables["windows"]:
        del w["gpu_metrics"]
    with_tables["findings"] = [f for f in with_tables["findings"] if "kind" not in f["evidence"]]
    for doc in (with_tables, without):
        doc.pop("meta", None)  # names the file
    assert with_tables == without


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("ALTER TABLE GPU_METRICS DROP COLUMN metricId", "lacks column(s) ['metricId']"),
        ("UPDATE GPU_METRICS SET timestamp = NULL WHERE rowid = 3", "a row with a NULL field"),
    ],
)
def test_a_damaged_table_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str, problem: str
) -> None:
    path = _export(tmp_path / "m.sqlite")
    nsys_synth.execute(path, damage)
    assert main(["analyze", str(path), "--by", "step"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and problem in err[0]
