"""Soak runs against a real local server: per-interval metrics in the run file, and the
drift verdict of ``compare`` on a server that slows down by 1 ms per interval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sse_server import Behaviour, serve

from pytimings.cli import main
from pytimings.report.serving_html import _soak_figure
from pytimings.serving.runfile import load_run
from pytimings.serving.sources import analyse, load_source

INTERVAL_S, N_INTERVALS = 0.2, 16
STEP_MS = 1.0  # the slowing server's TTFT grows this much per interval


def _soak(url: str, out: Path) -> None:
    rc = main([
        "loadgen", "--url", url, "--model", "m", "--input-len", "8", "--output-len", "4",
        "--concurrency", "2", "--warmup", "0", "--duration", f"{INTERVAL_S * N_INTERVALS}s",
        "--interval", f"{INTERVAL_S * 1000:g}ms", "--out", str(out), "--quiet",
    ])  # fmt: skip
    assert rc == 0


@pytest.mark.slow
def test_soak_intervals_and_drift_of_a_slowing_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plans = {
        "steady": Behaviour(0.008, 0.002),
        "slowing": Behaviour(0.008, 0.002, ttft_step_s=STEP_MS / 1e3, step_every_s=INTERVAL_S),
    }
    for name, plan in plans.items():
        with serve([plan]) as server:
            _soak(server.url, tmp_path / f"{name}.json")
            seen = server.stats()["seen"]
        run = load_run(tmp_path / f"{name}.json")
        (lv,) = run.levels
        assert lv.intervals is not None and len(lv.intervals) == len(lv.rounds) == N_INTERVALS
        # every request sent is in exactly one interval, by its send time
        assert sum(len(rd.records) for rd in lv.rounds) == seen
        for iv, rd in zip(lv.intervals, lv.rounds, strict=True):
            # equal windows (the last stretched by at most a send's stamping delay, which a
            # loaded 2-core machine can make milliseconds)
            assert 0 <= iv["end_ns"] - iv["start_ns"] - round(INTERVAL_S * 1e9) < 50e6
            assert all(iv["start_ns"] <= r.start_ns < iv["end_ns"] for r in rd.records)
            assert iv["completed"] == rd.summary["completed"] > 0
            assert iv["ttft_ms"]["p99"] == rd.summary["ttft_ms"]["p99"]
    out = tmp_path / "cmp.json"
    assert (
        main(
            [
                "compare",
                str(tmp_path / "steady.json"),
                str(tmp_path / "slowing.json"),
                "--labels",
                "steady,slowing",
                "--resamples",
                "100",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    drift = {(d["label"], d["metric"]): d for d in json.loads(out.read_text())["drift"]}
    per_hour = STEP_MS / INTERVAL_S * 3600  # 1 ms per interval, in ms per hour
    slow = drift[("slowing", "ttft_p50_ms")]
    assert slow["verdict"] == "drifting"
    # Sen's slope: the planted 1 ms per interval, give or take the load of a shared machine
    assert 0.5 * per_hour < slow["slope_per_hour"] < 2 * per_hour
    assert drift[("slowing", "e2el_p50_ms")]["verdict"] == "drifting"
    # the steady server's trend is small beside it (its verdict is a 5% test on a shared
    # machine; the verdict's false-positive rate is checked on synthetic series)
    assert abs(drift[("steady", "ttft_p50_ms")]["slope_per_hour"]) < 0.25 * per_hour
    # the HTML report draws each interval's figures over time and lists the verdicts
    results = analyse([load_source(tmp_path / "slowing.json", "slowing")], "vllm", 10.0)
    fig = _soak_figure(results)
    ivs = load_run(tmp_path / "slowing.json").levels[0].intervals
    assert ivs is not None
    tr = next(t for t in fig.data if list(t.meta) == ["slowing", 2, "ttft", "p99"])
    assert list(tr.y) == [iv["ttft_ms"]["p99"] for iv in ivs]
    want_x = [INTERVAL_S * (k + 0.5) / 60 for k in range(N_INTERVALS)]  # minutes
    assert list(tr.x) == pytest.approx(want_x, abs=1e-4)  # the last may stretch by a send
    page = tmp_path / "soak.html"
    assert main(["report", str(tmp_path / "slowing.json"), "--html", str(page)]) == 0
    assert "Drift over the soak intervals" in page.read_text()
    # report's text view shows the same verdicts
    capsys.readouterr()
    assert main(["report", str(tmp_path / "slowing.json")]) == 0
    text = capsys.readouterr().out
    assert "drift over the soak intervals" in text
    line = next(x for x in text.splitlines() if " ttft_p50_ms " in x)
    assert f"{slow['slope_per_hour']:.3f}" in line and "drifting (16 intervals)" in line
