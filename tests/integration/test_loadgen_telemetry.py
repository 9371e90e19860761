"""`loadgen --telemetry-url` against a test DCGM exporter (a real aiohttp server on
loopback serving dcgm-exporter's Prometheus text format with scripted values): the level's
energy, J/token, throttle share and the per-round figures equal what it scripted."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from sse_server import Behaviour, serve

from pytimings.cli import main
from pytimings.serving.runfile import load_run
from pytimings.serving.telemetry import parse_dcgm

POWER_W = (250.0, 150.0)  # GPU 0, GPU 1
LABELS = 'UUID="GPU-{u}",device="nvidia{g}",modelName="NVIDIA H200",Hostname="h"'


def _exposition(n: int, elapsed_s: float, power_w: tuple[float, float] = POWER_W) -> str:
    lines = []
    fields = [
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", lambda g: power_w[g]),
        ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", lambda g: 700.0),
        # mJ since the driver loaded: a constant power's integral
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
         lambda g: 5e9 + round(power_w[g] * elapsed_s * 1e3)),
        ("DCGM_FI_DEV_SM_CLOCK", "gauge", lambda g: 1200 if n % 2 else 1980),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", lambda g: 100),
        ("DCGM_FI_DEV_FB_USED", "gauge", lambda g: 1024),
        ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", lambda g: 4 if n % 2 else 0),
    ]  # fmt: skip
    for name, kind, value in fields:
        lines += [f"# HELP {name} {name}.", f"# TYPE {name} {kind}"]
        for g in (0, 1):
            lines.append(f'{name}{{gpu="{g}",{LABELS.format(u=g, g=g)}}} {value(g)}')
    return "\n".join(lines) + "\n"


class Exporter:
    def __init__(self) -> None:
        self.scrapes = 0
        self.t0 = time.monotonic()
        self.fail_at = 3  # the 4th scrape answers 500: counted, the run goes on
        self.url = ""
        self.power_w = POWER_W

    async def metrics(self, request: web.Request) -> web.Response:
        n = self.scrapes
        self.scrapes += 1
        if n == self.fail_at:
            return web.Response(status=500)
        return web.Response(text=_exposition(n, time.monotonic() - self.t0, self.power_w))


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    ex = Exporter()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    runner: list[web.AppRunner] = []

    async def start() -> None:
        app = web.Application()
        app.router.add_get("/metrics", ex.metrics)
        r = web.AppRunner(app)
        await r.setup()
        site = web.TCPSite(r, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        ex.url = f"http://127.0.0.1:{port}/metrics"
        runner.append(r)
        ready.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()))
    thread.start()
    ready.wait(10)
    yield ex
    asyncio.run_coroutine_threadsafe(runner[0].cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def test_parse_maps_dcgm_names_and_units() -> None:
    rows, dropped = parse_dcgm(_exposition(1, 2.0), 7)
    assert dropped == {"gpu_label": 0, "non_finite": 0}
    got = {(g, m): v for t, g, m, v in rows if t == 7}
    assert got[(0, "power_w")] == 250.0 and got[(1, "power_w")] == 150.0
    assert got[(0, "energy_j")] == pytest.approx(5e6 + 500.0)  # mJ -> J
    assert got[(1, "memory_used_bytes")] == 1024 * 2**20  # MiB -> bytes
    assert got[(0, "clocks_event_reasons")] == 4 and got[(0, "sm_clock_mhz")] == 1200


def _loadgen(server_url: str, exporter: Exporter, out: Path, rounds: int = 2) -> None:
    assert main([
        "loadgen", "--url", server_url, "--model", "m", "--input-len", "16",
        "--output-len", "8", "--out", str(out), "--quiet", "--no-table", "--concurrency", "2",
        "--requests", "4", "--rounds", str(rounds), "--warmup", "1",
        "--telemetry-url", exporter.url, "--telemetry-interval", "0.02",
    ]) == 0  # fmt: skip


def test_loadgen_telemetry_url(tmp_path: Path, exporter: Exporter) -> None:
    out = tmp_path / "run.json"
    with serve([Behaviour(0.03, 0.01)]) as server:
        _loadgen(server.url, exporter, out)
    assert len(load_run(out).levels) == 1  # the run file still reads
    doc = json.loads(out.read_text())
    lv = doc["levels"][0]
    tel = lv["telemetry"]
    assert tel["source"] == "dcgm" and tel["gpus"] == 2 and tel["energy_source"] == "counter"
    assert tel["scrape_errors"] == 1 and tel["lost_gpus"] == 0
    power = tel["series"]["power_w"]
    assert power and {v for _, v in power} == {400.0}  # summed over the GPUs at each scrape
    span_s = (power[-1][0] - power[0][0]) / 1e9
    # the counter's value is the exporter's time, stamped with the client's: scrape latency
    assert tel["energy_j"] == pytest.approx(400.0 * span_s, rel=0.05)
    assert tel["per_gpu"]["0"]["energy_j"] / tel["per_gpu"]["1"]["energy_j"] == pytest.approx(
        250 / 150, rel=0.01
    )
    tokens = lv["summary"]["output_tokens"]
    assert tokens == 2 * 4 * 8
    assert tel["j_per_output_token"] == pytest.approx(tel["energy_j"] / tokens, rel=1e-12)
    assert tel["tokens_per_j"] == pytest.approx(tokens / tel["energy_j"], rel=1e-12)
    # odd scrapes throttle (sw power cap at 1200 MHz): the share of the level's samples
    reasons = [v for _, v in tel["series"]["clocks_event_reasons"]]
    share = sum(v == 4 for v in reasons) / len(reasons)
    assert tel["throttle"] == {"sw_power_cap": pytest.approx(share, abs=1e-12)}
    assert 0 < share < 1
    for rd in lv["rounds"]:
        assert rd["telemetry"]["energy_source"] == "counter"
        assert rd["telemetry"]["energy_j"] > 0 and rd["telemetry"]["tokens_per_j"] > 0


def test_compare_energy_and_hardware_findings(tmp_path: Path, exporter: Exporter) -> None:
    """B draws 3x the power for the same tokens at the same pace: J/token 3x worse, with its
    interval, a regression finding; both runs' throttling (half the samples) is a finding."""
    a, b, js = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "cmp.json"
    with serve([Behaviour(0.03, 0.01)]) as server:
        _loadgen(server.url, exporter, a, rounds=3)
        exporter.power_w = (750.0, 450.0)
        _loadgen(server.url, exporter, b, rounds=3)
    assert main(["compare", str(a), str(b), "--json", str(js), "--resamples", "200"]) == 0
    doc = json.loads(js.read_text())
    rows = {c["metric"]: c for c in doc["comparisons"]}
    jt = rows["j_per_output_token"]
    da, db = (json.loads(p.read_text())["levels"][0] for p in (a, b))
    for side, lv in (("a", da), ("b", db)):
        e = sum(r["telemetry"]["energy_j"] for r in lv["rounds"])
        n = sum(r["summary"]["output_tokens"] for r in lv["rounds"])
        assert jt[side] == pytest.approx(e / n, rel=1e-12)
        assert rows["tokens_per_j"][side] == pytest.approx(n / e, rel=1e-12)
    assert jt["rel_change"] == pytest.approx(2.0, rel=0.15)  # 3x the power, same pace
    assert jt["verdict"] == "worse" and jt["ci95"][0] > 0.5
    assert rows["tokens_per_j"]["verdict"] == "worse"
    for sw in doc["sweeps"].values():  # beside cost_per_mtok_usd, per level
        assert sw["levels"][0]["energy_source"] == "counter" and sw["levels"][0]["tokens_per_j"] > 0
    kinds = [(f["layer"], f["evidence"].get("kind")) for f in doc["findings"]]
    assert ("hardware", "energy_per_token_regression") in kinds
    throttled = [f for f in doc["findings"] if f["evidence"].get("kind") == "clock_event_reason"]
    assert {f["evidence"]["reason"] for f in throttled} == {"sw_power_cap"} and len(throttled) == 2
