"""GPU telemetry from places pytimings does not control: an energy counter that resets, and
recordings whose telemetry table holds a GPU index or a value no sampler writes (issue 47
items 12, 18, 22, 29): a true energy, or one line naming the file, never a negative energy,
a 16 GiB per-GPU table or ``"value":NaN`` in a JSON export."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers.recording_factory import make_recording

from pytimings.analysis.hardware import energy_summary
from pytimings.cli import main
from pytimings.errors import TraceFormatError
from pytimings.ingest.recording_file import load_telemetry
from pytimings.model.samples import TelemetrySamples
from pytimings.record.storage import (
    register_table_provider,
    save,
    unregister_table_provider,
)


def _samples(t_s: np.ndarray, power_w: float, energy_j: np.ndarray) -> TelemetrySamples:
    rows = [(int(t * 1e9), 0, "power_w", power_w) for t in t_s]
    rows += [(int(t * 1e9), 0, "energy_j", float(e)) for t, e in zip(t_s, energy_j, strict=True)]
    return TelemetrySamples.from_rows(sorted(rows), "dcgm")


def test_an_energy_counter_reset_mid_level_is_not_negative_energy() -> None:
    t = np.arange(0, 4.01, 0.1)
    power = 250.0
    # the counter since the driver loaded; at 2.0 s the driver reloads: from 0 again
    energy = np.where(t < 2.0, 1_000_000 + power * t, power * (t - 1.95))
    s = _samples(t, power, energy)
    out = energy_summary(s, 0, int(4e9), output_tokens=32)
    want = power * 4.0 - power * 0.05  # the 50 ms before the reset are in no sample's counter
    assert out["energy_source"] == "counter"
    assert out["energy_j"] == pytest.approx(want)
    assert out["j_per_output_token"] == pytest.approx(want / 32)
    assert out["mean_power_w"] == pytest.approx(want / 4.0)
    # and against the power integral of the same interval, independently
    assert out["energy_j"] == pytest.approx(np.trapezoid(np.full(len(t), power), t), rel=0.02)


@pytest.fixture
def telemetry_table() -> Iterator[list[pa.Table]]:
    """Saves made in the test store ``holder[0]`` as their "telemetry" table."""
    holder: list[pa.Table] = []
    register_table_provider("telemetry", lambda: holder[0] if holder else None)
    yield holder
    unregister_table_provider("telemetry")


def _recording(tmp_path: Path, gpu: int, value: float) -> Path:
    rec = make_recording([{"name": "step", "kind": "host", "start": 1000, "end": 5000}])
    return save(tmp_path / f"gpu{gpu}.pyt", rec)


@pytest.mark.parametrize(
    ("gpu", "value", "why"),
    [
        (-1, 300.0, "GPU index -1 is not in 0..1023"),
        (2**31 - 1, 300.0, "GPU index 2147483647 is not in 0..1023"),
        (1_000_000, 300.0, "GPU index 1000000 is not in 0..1023"),
        (0, float("nan"), "value nan of 'power_w' is not a finite number"),
        (0, float("inf"), "value inf of 'power_w' is not a finite number"),
    ],
)
def test_a_telemetry_table_with_what_no_sampler_writes_is_one_line(
    tmp_path: Path,
    telemetry_table: list[pa.Table],
    capsys: pytest.CaptureFixture[str],
    gpu: int,
    value: float,
    why: str,
) -> None:
    telemetry_table.append(
        pa.table(
            {
                "t_ns": pa.array([2000, 3000], pa.int64()),
                "gpu": pa.array([gpu, gpu], pa.int32()),
                "metric": pa.array(["power_w", "power_w"], pa.string()),
                "value": pa.array([300.0, value], pa.float64()),
            }
        )
    )
    path = _recording(tmp_path, gpu, value)
    with pytest.raises(TraceFormatError, match=why.replace("(", r"\(")):
        load_telemetry(path)
    out = tmp_path / "out.json"
    capsys.readouterr()
    assert main(["export", str(path), "--perfetto", str(out), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and why in err[0], err
    assert not out.exists() or "NaN" not in out.read_text()


def test_good_telemetry_still_exports(tmp_path: Path, telemetry_table: list[pa.Table]) -> None:
    telemetry_table.append(
        pa.table(
            {
                "t_ns": pa.array([2000, 3000], pa.int64()),
                "gpu": pa.array([1023, 1023], pa.int32()),
                "metric": pa.array(["power_w", "power_w"], pa.string()),
                "value": pa.array([300.0, 310.0], pa.float64()),
            }
        )
    )
    path = _recording(tmp_path, 1023, 0.0)
    out = tmp_path / "out.json"
    assert main(["export", str(path), "--perfetto", str(out), "-q"]) == 0
    doc = json.loads(out.read_text())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    values = [e["args"]["value"] for e in events if e.get("ph") == "C" and "value" in e["args"]]
    assert values == [300.0, 310.0]
