"""AMD GPU telemetry through amdsmi (issue 26 item 1): a fake ``amdsmi`` on sys.path
(tests/helpers/fake_amdsmi) scripts the values; the samples, the energy and J per token
equal what it scripted, a GPU that disappears mid-run is counted and the run kept, and
without amdsmi (nor NVML) the sampler says so in one line."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from pytimings.analysis.hardware import energy_summary
from pytimings.record import telemetry, telemetry_amd

FAKE = Path(__file__).resolve().parents[1] / "helpers" / "fake_amdsmi"
N = 6


@pytest.fixture
def amd(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(FAKE))
    spec = importlib.util.spec_from_file_location("amdsmi", FAKE / "amdsmi.py")
    assert spec is not None and spec.loader is not None
    amdsmi = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(amdsmi)
    monkeypatch.setitem(sys.modules, "amdsmi", amdsmi)  # what `import amdsmi` finds; undone after
    monkeypatch.setattr(amdsmi, "SCRIPT", {"gpus": 2, "lost_after": {1: 3}})
    monkeypatch.setattr(telemetry, "_open_nvml", lambda: "NVML unavailable (no driver)")
    return amdsmi


def test_samples_energy_and_j_per_token_are_what_amdsmi_scripted(amd: ModuleType) -> None:
    log = telemetry.TelemetryLog()  # the default: NVML first, then amdsmi
    for _ in range(N):
        log.sample()
    s = log.samples()
    assert s.source == "amdsmi" and s.gpus() == [0, 1]
    t, power = s.series(0, "power_w")
    assert power.tolist() == [100.0 + k for k in range(N)]
    _, energy = s.series(0, "energy_j")
    want = [amd.ENERGY_STEP * (k + 1) * amd.RESOLUTION_UJ / 1e6 for k in range(N)]
    assert energy.tolist() == pytest.approx(want)
    assert s.series(0, "temperature_c")[1].tolist() == [60.0 + k for k in range(N)]
    assert s.series(0, "sm_clock_max_mhz")[1].tolist() == [2100.0]  # read once
    for metric, v in (
        ("sm_clock_mhz", 1500.0),
        ("mem_clock_mhz", 1300.0),
        ("util_gpu_pct", 50.0),
        ("util_mem_pct", 20.0),
        ("memory_used_bytes", 1024.0 * (1 << 20)),
        ("throttle_status", 0.0),
    ):
        assert s.series(0, metric)[1].tolist() == [v] * N, metric  # fmt: skip
    # GPU 1 answered 3 samples, then was lost: one "lost" row, no sample after it
    lost_t, _ = s.series(1, "lost")
    assert len(lost_t) == 1 and lost_t[0] == t[3]
    assert len(s.series(1, "power_w")[0]) == 3
    assert not (s.t_ns[s.gpu == 1] > lost_t[0]).any()
    tokens = 500
    e = energy_summary(s, int(t[0]), int(t[-1]), tokens)
    gpu0 = want[-1] - want[0]
    gpu1 = want[2] - want[0]
    assert e["per_gpu"]["0"]["energy_j"] == pytest.approx(gpu0)
    assert e["per_gpu"]["0"]["energy_source"] == "counter"
    assert e["energy_j"] == pytest.approx(gpu0 + gpu1)
    assert e["j_per_output_token"] == pytest.approx((gpu0 + gpu1) / tokens)
    assert e["tokens_per_j"] == pytest.approx(tokens / (gpu0 + gpu1))
    assert e["lost_gpus"] == 1 and e["source"] == "amdsmi"


def test_a_gpu_without_energy_counter_falls_back_to_the_power_integral(
    amd: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(amd, "SCRIPT", {"gpus": 1, "no_energy": [0]})
    log = telemetry.TelemetryLog(telemetry_amd.open_amdsmi)
    for _ in range(N):
        log.sample()
    s = log.samples()
    assert not len(s.series(0, "energy_j")[0])  # not supported: dropped, never a zero
    t, p = s.series(0, "power_w")
    e = energy_summary(s, int(t[0]), int(t[-1]))
    integral = sum((p[i] + p[i + 1]) / 2 * (t[i + 1] - t[i]) / 1e9 for i in range(N - 1))
    assert e["energy_source"] == "power_integral"
    assert e["energy_j"] == pytest.approx(integral)


def test_without_amdsmi_nor_nvml_one_line_and_no_samples(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # import amdsmi raises ImportError
    monkeypatch.setattr(telemetry, "_open_nvml", lambda: "NVML unavailable (no driver)")
    log = telemetry.TelemetryLog()
    log.sample()
    log.sample()
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "pytimings telemetry: no samples: NVML unavailable (no driver); amdsmi is not "
        "installed (AMD GPUs: pip install 'pytimings[telemetry-amd]')"
    ]
    assert len(log) == 0 and log.unavailable is not None


def test_amdsmi_with_no_gpu_says_so(amd: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(amd, "SCRIPT", {"gpus": 0})
    assert telemetry_amd.open_amdsmi() == "amdsmi sees no GPU"


def test_amdsmi_installed_without_rocms_library_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # what amdsmi 7.0.2 does on import without /opt/rocm/lib/libamd_smi.so (tried here)
    (tmp_path / "amdsmi.py").write_text(
        "print('Unable to find libamd_smi.so library')\nraise KeyError('libamd_smi.so')\n"
    )
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    del sys.modules["amdsmi"]  # not imported yet; monkeypatch removes whatever is there after
    monkeypatch.syspath_prepend(str(tmp_path))
    why = telemetry_amd.open_amdsmi()
    assert why == "amdsmi cannot load its library, ROCm's libamd_smi.so (KeyError 'libamd_smi.so')"
    assert capsys.readouterr().out == ""


def test_a_recording_keeps_where_its_samples_came_from(amd: ModuleType, tmp_path: Path) -> None:
    from pytimings.ingest.recording_file import load_telemetry
    from pytimings.record import storage
    from pytimings.record.recorder import Recorder

    log = telemetry.TelemetryLog(telemetry_amd.open_amdsmi)
    for _ in range(3):
        log.sample()
    storage.register_table_provider("telemetry", log.to_arrow)
    try:
        path = storage.save(tmp_path / "amd.pyt", Recorder())
    finally:
        storage.unregister_table_provider("telemetry")
    got = load_telemetry(path)
    assert got is not None and got.source == "amdsmi"
    assert got.series(0, "power_w")[1].tolist() == log.samples().series(0, "power_w")[1].tolist()
