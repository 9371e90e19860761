"""GPU telemetry per window in ``pytimings analyze`` (issue 26 item 3): a recording with a
``telemetry`` table, analysed ``--by step``: each window entry's samples, mean power, SM clock
and utilisation, energy from the counter and the clock-event reasons, recomputed here from
the samples that were saved."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from helpers.recording_factory import make_recording

from pytimings.cli import main
from pytimings.record import storage

US = 1_000
STEPS = 4
STREAM = 0x7F00


def _samples() -> list[tuple[int, int, str, float]]:
    """GPU 0 every 50 µs over the 4 ms (from 25 µs before it): power rising, a clock dip
    with reason sw_power_cap (bit 0x4) in step 2, an energy counter in J."""
    rows = []
    energy = 0.0
    for i in range(0, 81):
        t = i * 50 * US - 25 * US  # the first sample before the first region (the origin)
        power = 100.0 + i
        energy += power * 50e-6
        capped = 2000 * US <= t < 2800 * US
        for metric, v in (("power_w", power), ("energy_j", energy),
                          ("sm_clock_mhz", 1400.0 if capped else 1980.0),
                          ("util_gpu_pct", float(i % 3 * 50)),
                          ("clocks_event_reasons", 4.0 if capped else 0.0)):  # fmt: skip
            rows.append((t, 0, metric, v))
    return rows


@pytest.fixture
def recording(tmp_path: Path) -> Iterator[Path]:
    rows = []
    for k in range(STEPS):
        t = k * 1000 * US
        rows.append({"name": "step", "kind": "host", "start": t, "end": t + 800 * US})
        rows.append({"name": "k", "kind": "compute", "start": t + 10 * US, "end": t + 20 * US,
                     "depth": 1, "gpu": (t + 30 * US, t + 700 * US), "stream": STREAM})  # fmt: skip
    rec = make_recording(rows, meta={"pid": 1})
    s = _samples()
    table = pa.table({"t_ns": pa.array([r[0] for r in s], pa.int64()),
                      "gpu": pa.array([r[1] for r in s], pa.int32()),
                      "metric": pa.array([r[2] for r in s], pa.string()),
                      "value": pa.array([r[3] for r in s], pa.float64())})  # fmt: skip
    storage.register_table_provider("telemetry", lambda: table)
    try:
        yield storage.save(tmp_path / "run.pyt", rec)
    finally:
        storage.unregister_table_provider("telemetry")


def test_analyze_gives_each_window_its_gpu_telemetry(
    recording: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "a.json"
    assert main(["analyze", str(recording), "--by", "step", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "GPU telemetry per window (4 of 4 with samples)" in text
    windows = json.loads(out.read_text())["windows"]
    assert len(windows) == STEPS
    samples = _samples()
    for w in windows:
        got = w["telemetry"]
        inside = [r for r in samples if w["start_ns"] <= r[0] <= w["end_ns"]]

        def of(metric: str, rows: list[tuple[int, int, str, float]] = inside) -> list[float]:
            return [v for _, _, m, v in rows if m == metric]

        power, energy = of("power_w"), of("energy_j")
        assert got["gpu"] == 0 and got["samples"] == len(power) > 2
        assert got["mean_power_w"] == pytest.approx(sum(power) / len(power))
        assert got["mean_sm_clock_mhz"] == pytest.approx(sum(of("sm_clock_mhz")) / len(power))
        assert got["mean_util_gpu_pct"] == pytest.approx(sum(of("util_gpu_pct")) / len(power))
        assert got["energy_source"] == "counter"
        assert got["energy_j"] == pytest.approx(energy[-1] - energy[0])
        capped = [v for v in of("clocks_event_reasons") if int(v) & 4]
        if capped:
            assert got["throttle"] == {"sw_power_cap": pytest.approx(len(capped) / len(power))}
        else:
            assert got["throttle"] == {}
    assert sum(1 for w in windows if w["telemetry"]["throttle"]) >= 1


def test_a_recording_without_telemetry_has_no_telemetry_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [{"name": "step", "kind": "host", "start": 0, "end": 800 * US},
            {"name": "k", "kind": "compute", "start": 10 * US, "end": 20 * US, "depth": 1,
             "gpu": (30 * US, 700 * US), "stream": STREAM}]  # fmt: skip
    path = storage.save(tmp_path / "plain.pyt", make_recording(rows, meta={"pid": 1}))
    out = tmp_path / "a.json"
    assert main(["analyze", str(path), "--by", "step", "--json", str(out)]) == 0
    assert "GPU telemetry" not in capsys.readouterr().out
    assert all("telemetry" not in w for w in json.loads(out.read_text())["windows"])


def test_the_perfetto_export_draws_each_metric_as_a_counter(
    recording: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.json"
    assert main(["export", str(recording), "--perfetto", str(out)]) == 0
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    name = "telemetry GPU 0 (run.pyt)"
    (pid,) = [e["pid"] for e in events if e.get("ph") == "M" and e["args"].get("name") == name]
    origin = doc["otherData"]["pytimings_origin_ns"]
    assert origin == -25 * US  # the first sample: every event at a time >= the origin
    for metric in ("power_w", "energy_j", "sm_clock_mhz", "util_gpu_pct", "clocks_event_reasons"):
        want = [(t, v) for t, _, m, v in _samples() if m == metric]
        got = [(e["ts"], e["args"]["value"]) for e in events
               if e.get("ph") == "C" and e["pid"] == pid and e["name"] == metric]  # fmt: skip
        assert len(got) == len(want) == 81
        assert [v for _, v in got] == pytest.approx([v for _, v in want])
        assert [ts for ts, _ in got] == pytest.approx([(t - origin) / 1e3 for t, _ in want])
    assert "telemetry counter" in capsys.readouterr().out


def test_the_html_report_draws_power_and_clock(recording: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    assert main(["analyze", str(recording), "--by", "step", "--html", str(out)]) == 0
    doc = out.read_text()
    assert "GPU telemetry (power and SM clock" in doc
    assert '"name":"GPU 0 power_w (W)"' in doc and '"name":"GPU 0 sm_clock_mhz (MHz)"' in doc
    power = [v for _, _, m, v in _samples() if m == "power_w"]
    assert '"y":[' + ",".join(repr(v) for v in power) + "]" in doc  # every sample, in order
