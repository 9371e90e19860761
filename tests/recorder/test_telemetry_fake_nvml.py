"""GPU telemetry (pytimings.record.telemetry, pytimings.analysis.hardware) against the fake
NVML in tests/native/fake_nvml.c: what the sampler stores, the energy, J/token and the
throttle finding must equal what the fake scripted."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pynvml = pytest.importorskip("pynvml")

from pytimings.analysis.hardware import energy_summary, hardware_findings  # noqa: E402
from pytimings.ingest.recording_file import load_telemetry  # noqa: E402
from pytimings.model.samples import TelemetrySamples  # noqa: E402
from pytimings.record import telemetry  # noqa: E402
from pytimings.record.recorder import Recorder  # noqa: E402
from pytimings.record.storage import save  # noqa: E402

N = 10  # samples per test


@pytest.fixture
def nvml(fake_nvml: Path, monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The fake loaded in place of libnvidia-ml.so.1; the script is set per test."""
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setenv("PYTIMINGS_NVML", str(fake_nvml))
    for k in ("LOSE_GPU", "LOSE_AFTER", "NO_ENERGY", "THROTTLE_ODD", "POWER_MW", "LIMIT_MW",
              "FAIL_CODE", "FAIL_AFTER"):  # fmt: skip
        monkeypatch.delenv(f"FAKE_NVML_{k}", raising=False)
    monkeypatch.setenv("FAKE_NVML_GPUS", "2")
    return monkeypatch


def _sampled(n: int = N) -> TelemetrySamples:
    log = telemetry.TelemetryLog()
    for _ in range(n):
        log.sample()
        time.sleep(0.02)  # a span where the counter's mJ and the reads' us skew are small
    return log.samples()


def test_samples_are_what_the_fake_scripted(nvml: pytest.MonkeyPatch) -> None:
    nvml.setenv("FAKE_NVML_POWER_MW", "250000")
    s = _sampled()
    assert s.gpus() == [0, 1] and s.source == "nvml"
    for gpu in (0, 1):
        for metric, want in [
            ("power_w", 250.0),
            ("power_limit_w", 700.0),
            ("sm_clock_mhz", 1980.0),
            ("mem_clock_mhz", 2619.0),
            ("temperature_c", 60.0),
            ("util_gpu_pct", 100.0),
            ("util_mem_pct", 40.0),
            ("memory_used_bytes", float(10 << 30)),
            ("clocks_event_reasons", 0.0),
        ]:
            t, v = s.series(gpu, metric)
            assert list(v) == [want] * N, metric
            assert list(t) == sorted(t)
        assert list(s.series(gpu, "sm_clock_max_mhz")[1]) == [1980.0]  # static: read once
        # PCIe throughput is NotSupported on the fake: left out, never a zero
        assert len(s.series(gpu, "pcie_tx_bytes_s")[0]) == 0
        assert len(s.series(gpu, "lost")[0]) == 0


@pytest.mark.parametrize("no_energy", [False, True])
def test_energy_and_j_per_token(nvml: pytest.MonkeyPatch, no_energy: bool) -> None:
    if no_energy:
        nvml.setenv("FAKE_NVML_NO_ENERGY", "1")
    s = _sampled()
    t0, t1 = int(s.t_ns.min()), int(s.t_ns.max())
    tokens = 5000
    out = energy_summary(s, t0, t1, tokens)
    assert out["gpus"] == 2 and out["samples"] == 2 * N and out["lost_gpus"] == 0
    assert out["energy_source"] == ("power_integral" if no_energy else "counter")
    want = 0.0
    for gpu in (0, 1):
        t, _ = s.series(gpu, "power_w")
        want_gpu = 300.0 * (t[-1] - t[0]) / 1e9  # scripted: a constant 300 W
        got = out["per_gpu"][str(gpu)]["energy_j"]
        # the counter is read a few us after the sample's time stamp, in whole mJ
        assert got == pytest.approx(want_gpu, rel=1e-12 if no_energy else 1e-3)
        want += got
    assert out["energy_j"] == pytest.approx(want, rel=1e-12)
    assert out["j_per_output_token"] == pytest.approx(want / tokens, rel=1e-12)
    assert out["tokens_per_j"] == pytest.approx(tokens / want, rel=1e-12)
    assert out["mean_power_w"] == pytest.approx(600.0, rel=1e-3)


def test_throttle_share_and_finding(nvml: pytest.MonkeyPatch) -> None:
    nvml.setenv("FAKE_NVML_THROTTLE_ODD", "1")  # every odd sample: SW power cap at 1200 MHz
    s = _sampled()
    t0, t1 = int(s.t_ns.min()), int(s.t_ns.max())
    assert energy_summary(s, t0, t1)["throttle"] == {"sw_power_cap": 0.5}
    found = hardware_findings(s, t0, t1)
    assert [(f["kind"], f["gpu"]) for f in found] == [
        ("clocks_below_max", 0),
        ("clocks_below_max", 1),
    ]
    for f in found:
        assert f["layer"] == "hardware" and f["share_of_busy"] == 0.5
        assert f["reasons"] == {"sw_power_cap": 1.0}
        assert f["mean_sm_clock_mhz_when_low"] == 1200.0 and f["max_sm_clock_mhz"] == 1980.0


def test_power_at_cap_finding(nvml: pytest.MonkeyPatch) -> None:
    nvml.setenv("FAKE_NVML_POWER_MW", "699000")
    s = _sampled()
    found = hardware_findings(s, int(s.t_ns.min()), int(s.t_ns.max()))
    assert [(f["kind"], f["share"], f["power_limit_w"]) for f in found] == [
        ("power_at_cap", 1.0, 700.0)
    ] * 2
    nvml.setenv("FAKE_NVML_POWER_MW", "600000")
    s = _sampled()
    assert hardware_findings(s, int(s.t_ns.min()), int(s.t_ns.max())) == []


def test_a_lost_gpu_is_counted_and_the_run_kept(nvml: pytest.MonkeyPatch) -> None:
    nvml.setenv("FAKE_NVML_LOSE_GPU", "1")
    nvml.setenv("FAKE_NVML_LOSE_AFTER", "3")
    s = _sampled()
    assert len(s.series(0, "power_w")[0]) == N
    assert len(s.series(1, "power_w")[0]) == 3
    t_lost, _ = s.series(1, "lost")
    assert len(t_lost) == 1 and t_lost[0] > s.series(1, "power_w")[0][-1]
    out = energy_summary(s, int(s.t_ns.min()), int(s.t_ns.max()), 100)
    assert out["lost_gpus"] == 1 and out["per_gpu"]["1"]["lost"] is True
    assert out["energy_j"] is not None and out["samples"] == N + 3


UNKNOWN, TIMEOUT = 999, 10  # NVML error codes no sampler branch names


@pytest.mark.parametrize("code", [UNKNOWN, TIMEOUT])
def test_an_nvml_error_at_the_first_sample_never_blocks(
    nvml: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], code: int
) -> None:
    nvml.setenv("FAKE_NVML_FAIL_CODE", str(code))
    log = telemetry.TelemetryLog()
    started: list[object] = []
    caller = threading.Thread(
        target=lambda: started.append(telemetry.sample_telemetry(every_s=0.01, log=log)),
        daemon=True,
    )
    caller.start()
    caller.join(20)
    assert not caller.is_alive(), "sample_telemetry(every_s=...) waits for a first sample"
    stop = started[0]
    assert callable(stop)
    time.sleep(0.1)
    stop()
    assert len(log) == 0 and log.failures >= 3  # the first, the rest, the last: all counted
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("pytimings telemetry: a sample failed (GPU 0 ")
    assert ("NVMLError_Timeout" if code == TIMEOUT else "NVMLError_Unknown") in err[0]


def test_telemetry_that_fails_mid_run_is_counted(nvml: pytest.MonkeyPatch) -> None:
    nvml.setenv("FAKE_NVML_FAIL_CODE", str(TIMEOUT))
    nvml.setenv("FAKE_NVML_FAIL_AFTER", "4")  # the 5th sample on: TIMEOUT
    log = telemetry.TelemetryLog()
    for _ in range(N):
        log.sample()
    s = log.samples()
    assert len(s.series(0, "power_w")[0]) == len(s.series(1, "power_w")[0]) == 4
    assert log.failures == N - 4
    assert str(log.last_failure).startswith("GPU 0 power_w: NVMLError_Timeout")
    assert log.to_arrow().schema.metadata[b"failures"] == str(N - 4).encode()


def test_record_cli_starts_the_program_when_nvml_fails(fake_nvml: Path, tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text("print('ran')\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_")},
        "PYTIMINGS_NVML": str(fake_nvml),
        "FAKE_NVML_FAIL_CODE": str(UNKNOWN),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    out = tmp_path / "run.pyt"
    argv = [sys.executable, "-m", "pytimings.cli", "record", "-o", str(out), "--telemetry",
            "--telemetry-interval", "0.02", "--", str(script)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ran", done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("pytimings telemetry")]
    assert len(said) == 1 and "a sample failed" in said[0] and "Traceback" not in done.stderr


def test_saved_in_the_recording_and_loaded_back(nvml: pytest.MonkeyPatch, tmp_path: Path) -> None:
    log = telemetry.default_log()
    log.clear()
    try:
        stop = telemetry.sample_telemetry(every_s=0.01)
        assert stop is not None
        stop()
        want = log.samples()
        path = save(tmp_path / "r.pyt", Recorder())
    finally:
        log.clear()
    got = load_telemetry(path)
    assert got is not None and len(got.t_ns) == len(want.t_ns) > 0
    assert list(got.metric) == list(want.metric) and list(got.value) == list(want.value)
    assert list(got.t_ns) == list(want.t_ns) and list(got.gpu) == list(want.gpu)
    assert load_telemetry(save(tmp_path / "none.pyt", Recorder())) is None


def test_no_nvml_is_one_line_and_no_samples(
    nvml: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nvml.setenv("PYTIMINGS_NVML", str(tmp_path / "libnvidia-ml.so.1"))  # not there
    nvml.setitem(sys.modules, "amdsmi", None)  # no AMD fallback either
    log = telemetry.TelemetryLog()
    log.sample()
    log.sample()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("pytimings telemetry: no samples: NVML unavailable")
    assert len(log) == 0 and log.unavailable is not None


def test_record_cli_telemetry(fake_nvml: Path, tmp_path: Path) -> None:
    """`pytimings record --telemetry`: samples over the program's run in the recording."""
    script = tmp_path / "prog.py"
    script.write_text("import time\nt = time.monotonic_ns()\ntime.sleep(0.3)\nprint(t)\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_")},
        "PYTIMINGS_NVML": str(fake_nvml),
        "FAKE_NVML_GPUS": "1",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    out = tmp_path / "run.pyt"
    argv = [sys.executable, "-m", "pytimings.cli", "record", "-o", str(out), "--telemetry"]
    done = subprocess.run(
        [*argv, "--telemetry-interval", "0.02", "--", str(script)],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    started = int(done.stdout.split()[-1])
    s = load_telemetry(out)
    assert s is not None and s.gpus() == [0]
    t, power = s.series(0, "power_w")
    # one sample at start, one per 20 ms over the 0.3 s sleep (a loaded machine lags), one at exit
    assert 6 <= len(t) <= 0.3 / 0.02 + 3 and set(power) == {300.0}
    assert t[0] < started + 0.3e9 < t[-1]  # the same clock as the program's (CLOCK_MONOTONIC)
    bad = subprocess.run(
        [*argv, "--telemetry-interval", "0", "--", str(script)],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.strip().endswith("got '0'")
    huge = subprocess.run(
        [*argv, "--telemetry-interval", "1e300", "--", str(script)],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert huge.returncode == 2 and huge.stderr.strip().endswith("up to 86400, not 1e+300")


def test_without_nvidia_ml_py_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # no AMD fallback either
    log = telemetry.TelemetryLog()
    log.sample()
    assert len(log) == 0 and log.unavailable is not None
    assert capsys.readouterr().err == (
        "pytimings telemetry: no samples: nvidia-ml-py is not installed "
        "(pip install 'nvidia-ml-py>=12.535' 'prometheus_client>=0.17' (from a pytimings "
        "checkout: pip install '.[telemetry]')); amdsmi is not installed (AMD GPUs: "
        "pip install 'amdsmi>=6.0' (from a pytimings checkout: pip install '.[telemetry-amd]'))\n"
    )
