"""Engine metrics during a load run, against the test server's toy engine (real HTTP on
loopback, real ``prometheus_client`` on both sides): what the scrapes saw against the
engine's own log, a bad endpoint, speculative decoding, and stopping at saturation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sse_server import Behaviour, Engine, serve

from pytimings.cli import main
from pytimings.serving.compare import sweep
from pytimings.serving.findings import run_findings
from pytimings.serving.runfile import load_run
from pytimings.serving.saturation import past_saturation

PERIOD_S = 0.05


def _loadgen(url: str, out: Path, *extra: str, n_out: int = 8) -> int:
    return main([
        "loadgen", "--url", url, "--model", "m", "--input-len", "8",
        "--output-len", str(n_out), "--out", str(out), "--quiet", "--no-table",
        "--metrics-interval", f"{PERIOD_S * 1000:g}ms", *extra,
    ])  # fmt: skip


def _state_near(log: list[list[float]], col: int, t_ns: float, slack_ns: float) -> set[float]:
    """Every value column ``col`` of the engine's log held at some time in t +- slack."""
    times = np.array([row[0] for row in log])
    lo = max(int(np.searchsorted(times, t_ns - slack_ns, side="right")) - 1, 0)
    hi = int(np.searchsorted(times, t_ns + slack_ns, side="right"))
    return {log[j][col] for j in range(lo, max(hi, lo + 1))}


def test_series_follow_the_engine_and_a_planted_queue(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    with serve([Behaviour(0.03, 0.01)], Engine(batch_limit=2, kv_capacity_tokens=200)) as server:
        rc = _loadgen(server.url, out, "--concurrency", "1,4", "--requests", "12",
                      "--rounds", "1", "--warmup", "4")  # fmt: skip
        stats = server.stats()
    assert rc == 0
    run = load_run(out)
    log = stats["engine_log"]
    slack = PERIOD_S * 1e9
    base_ttft = float(
        np.median([r.chunk_ns[0] - r.start_ns for r in run.levels[0].rounds[0].records])
    )
    for lv in run.levels:
        eng = lv.engine
        assert eng is not None and eng["failed_scrapes"] == 0 and eng["scrapes"] >= 5
        assert eng["url"].endswith("/metrics")  # the default: beside --url
        assert "toy_engine_steps" in eng["series"]  # an unknown metric under its own name
        # every value scraped is one the engine's own log held within one scrape period
        for concept, col in (("running", 1), ("waiting", 2), ("kv_cache_usage", 3)):
            pts = eng["series"][concept]
            assert len(pts) == eng["scrapes"]
            for t, v in pts:
                assert v in _state_near(log, col, t, slack), (concept, t, v)
        recs = lv.rounds[0].records
        queued = [
            (r.start_ns, r.chunk_ns[0])
            for r in recs
            if r.chunk_ns[0] - r.start_ns > 1.6 * base_ttft
        ]
        waiting = [(t, v) for t, v in eng["series"]["waiting"]]
        if lv.concurrency == 1:  # below the batch limit: nothing waits, TTFT stays put
            assert not queued and all(v == 0 for _, v in waiting)
            continue
        assert queued and any(v > 0 for _, v in waiting)
        # waiting > 0 exactly while some request's TTFT is growing (within one period)
        for t, v in waiting:
            inside = any(s - slack <= t <= e + slack for s, e in queued)
            assert inside if v > 0 else True, (t, v)
        for s, e in queued:
            if e - s > 2 * slack:
                assert any(v > 0 for t, v in waiting if s <= t <= e), (s, e)
    # the queue is found at the level past the batch limit, not below it
    (f,) = [f for f in run_findings("x", run, "vllm") if f.layer == "queueing"]
    assert f.concurrency == 4 and f.evidence["spearman_rho"] > 0.5
    assert f.evidence["waiting_max"] >= 1 and f.evidence["running_max"] == 2
    # the engine publishes vLLM's metrics, which hold no batch limit: none is claimed
    assert f.evidence["batch_limit"] is None and "reports no batch limit" in f.title


@pytest.mark.parametrize("mode", ["stall", "garbage"])
def test_a_bad_metrics_endpoint_costs_no_request(
    tmp_path: Path, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.json"
    with serve([Behaviour(0.01, 0.005)], Engine(metrics=mode)) as server:
        metrics = server.url.removesuffix("/v1") + "/metrics"
        rc = _loadgen(server.url, out, "--metrics-url", metrics, "--concurrency", "2",
                      "--requests", "16", "--rounds", "1", "--warmup", "0")  # fmt: skip
        capsys.readouterr()
        assert main(["report", str(out)]) == 0  # a run without engine data still reports
        default_out = tmp_path / "default.json"
        rc_default = _loadgen(server.url, default_out, "--requests", "2", "--rounds", "1",
                              "--warmup", "0")  # fmt: skip
    assert rc == 0 and rc_default == 0
    lv = load_run(out).levels[0]
    recs = lv.rounds[0].records
    assert len(recs) == 16 and all(r.status == "ok" for r in recs)
    eng = lv.engine
    assert eng is not None and eng["scrapes"] >= 2
    assert eng["failed_scrapes"] == eng["scrapes"] and eng["series"] == {}
    from pytimings.serving.loadgen import engine_line

    line = engine_line(json.loads(out.read_text()))
    assert line.endswith(
        f"{eng['scrapes']} scrapes in the measured rounds, {eng['scrapes']} failed"
    )
    # the default URL is used only when it answers in Prometheus text format
    assert load_run(default_out).levels[0].engine is None


def test_speculative_acceptance_as_the_engine_did(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    draft, accept = 4, 2
    plan = [Behaviour(0.01, 0.005, continuous_usage=True)]
    with serve(plan, Engine(spec_draft=draft, spec_accept=accept)) as server:
        # 11 tokens: the first from prefill, then 3 steps of 3 and one cut short to 1
        rc = _loadgen(server.url, out, "--concurrency", "2", "--requests", "6",
                      "--rounds", "1", "--warmup", "2", n_out=11)  # fmt: skip
        before_warm = server.stats()["engine_totals"]
    assert rc == 0
    sd = load_run(out).levels[0].engine["spec_decode"]  # type: ignore[index]
    # what the engine did in the measured requests: 6 x (3 full steps + 1 step accepting 0)
    drafts, accepted = 6 * 4, 6 * 3 * accept
    assert sd["drafts"] == drafts and sd["draft_tokens"] == drafts * draft
    assert sd["accepted_tokens"] == accepted
    assert sd["acceptance_rate"] == pytest.approx(accepted / (drafts * draft), rel=0.01)
    assert sd["mean_acceptance_length"] == pytest.approx(1 + accepted / drafts, rel=0.01)
    assert before_warm["drafts"] == 8 * 4  # the warm-up's steps are not in the level's


def test_stop_at_saturation_stops_past_the_batch_limit(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    with serve([Behaviour(0.02, 0.01)], Engine(batch_limit=2)) as server:
        rc = _loadgen(server.url, out, "--concurrency", "1,2,4,8", "--requests", "12",
                      "--rounds", "2", "--warmup", "4", "--stop-at-saturation")  # fmt: skip
    assert rc == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    levels = doc["levels"]
    ran = [lv["concurrency"] for lv in levels]
    # the engine batches 2: 1 -> 2 doubles the throughput, so the first level past
    # saturation is 4 (or, on a machine noisy enough to blur 2 vs 4 by 5%, 8, where 6 of
    # 8 requests queue); which one is read from the levels the run itself measured
    points = [
        {"throughput": lv["summary"]["output_throughput"],
         "ttft_p50": lv["summary"]["ttft_ms"]["median"]}
        for lv in levels
    ]  # fmt: skip
    past = [i for i in range(1, len(points)) if past_saturation(points[i - 1], points[i])]
    assert past and past[0] == len(levels) - 1, "the sweep ends at its first saturated level"
    stopped = ran[-1]
    assert stopped in (4, 8) and ran == [1, 2, 4, 8][: ran.index(stopped) + 1]
    assert doc["saturation"]["stopped_after"] == stopped
    assert doc["saturation"]["not_run"] == [c for c in (1, 2, 4, 8) if c > stopped]
    # compare's sweep says the same of the run: past saturation at that level only
    sw = sweep(load_run(out), "vllm", 10.0)
    assert [r["concurrency"] for r in sw["levels"] if r["past_saturation"]] == [stopped]


def test_ab_speculative_on_vs_off_in_compare_and_report(tmp_path: Path) -> None:
    on, off = tmp_path / "on.json", tmp_path / "off.json"
    args = ("--concurrency", "2", "--requests", "8", "--rounds", "2", "--warmup", "2")
    # every step takes itl_s: with speculation it yields accept + 1 = 3 tokens, so the
    # TPOT gain is what the acceptance promises (10 tokens after the first: 4 steps, not 10)
    plan = [Behaviour(0.01, 0.01, continuous_usage=True)]
    with serve(plan, Engine(spec_draft=4, spec_accept=2)) as server:
        assert _loadgen(server.url, on, *args, n_out=11) == 0
    with serve(plan, Engine()) as server:
        assert _loadgen(server.url, off, *args, n_out=11) == 0
    out = tmp_path / "cmp.json"
    assert main(["compare", str(off), str(on), "--labels", "off,on", "--resamples", "100",
                 "--json", str(out)]) == 0  # fmt: skip

    doc = json.loads(out.read_text())
    assert doc["engine"]["off"]["2"]["spec_decode"] is None
    sd = doc["engine"]["on"]["2"]["spec_decode"]
    assert sd["mean_acceptance_length"] == pytest.approx(1 + 6 / 4)
    (ab,) = [
        f for f in doc["findings"] if f["layer"] == "speculative" and f["label"] == "on vs off"
    ]
    ev = ab["evidence"]
    assert ev["promised"] == pytest.approx(2.5) and ev["on"] == "on"
    # measured TPOT ratio, against the requests' own timings
    assert ev["gain"] == pytest.approx(2.5, rel=0.2) and 0.8 < ev["share_of_promise"] < 1.2
    assert {f["layer"] for f in doc["findings"]} >= {"speculative"}
    html_out = tmp_path / "r.html"
    assert main(["report", str(off), str(on), "--html", str(html_out)]) == 0
    page = html_out.read_text()
    assert "Engine metrics during the run" in page and "Serving findings" in page
    assert '"meta":["on.json","waiting"]' in page.replace(" ", "")


def test_a_run_stopped_at_a_later_level_keeps_what_it_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # level 1 serves its 2 warm-up and 4 measured requests; level 2's warm-up all fail
    # (the server gone bad): the run stops there, with level 1 written, not lost
    out = tmp_path / "run.json"
    plan = [Behaviour(0.005, 0.002)] * 6 + [Behaviour(fail="500")] * 2
    with serve(plan) as server:
        rc = _loadgen(server.url, out, "--concurrency", "1,2", "--requests", "4",
                      "--rounds", "1", "--warmup", "2", "--no-metrics")  # fmt: skip
    assert rc == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pytimings loadgen: stopped at concurrency 2 (")
    run = load_run(out)
    assert [lv.concurrency for lv in run.levels] == [1]
    assert len(run.levels[0].rounds[0].records) == 4
    assert run.interrupted is not None and run.interrupted.concurrency == 2
    assert "every warm-up request at concurrency 2 failed" in run.interrupted.reason
    assert run.interrupted.records == []  # warm-up requests are never measured ones
    assert json.loads(out.read_text())["saturation"]["not_run"] == [2]

    # a failure after level 2 measured its requests (here: out of memory in its summary)
    # keeps every one of them, under 'interrupted'
    from pytimings.serving import loadgen

    real = loadgen.serving_metrics

    def failing(records: Any, *args: Any) -> Any:
        if any(r.req_id.startswith("c2-") for r in records):
            raise MemoryError
        return real(records, *args)

    monkeypatch.setattr(loadgen, "serving_metrics", failing)
    with serve([Behaviour(0.005, 0.002)]) as server:
        rc = _loadgen(server.url, out, "--concurrency", "1,2,4", "--requests", "3",
                      "--rounds", "2", "--warmup", "1", "--no-metrics")  # fmt: skip
    assert rc == 1
    run = load_run(out)
    assert [lv.concurrency for lv in run.levels] == [1]
    assert run.interrupted is not None and run.interrupted.reason == "MemoryError"
    ids = sorted(r.req_id for r in run.interrupted.records)
    assert ids == sorted(f"c2-r{ri}-{i}" for ri in range(2) for i in range(3))
    assert all(r.status == "ok" for r in run.interrupted.records)


@pytest.mark.parametrize("mode", ["nan", "huge"])
def test_nan_and_high_cardinality_metrics_keep_the_run_readable(
    tmp_path: Path,
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 47 items 7, 15, 20: a NaN counter, a +Inf gauge, 100,000 series of one metric
    per request id. The run file stays small and readable by report and compare, what was
    left out is counted and said, and no body is compressed on the loop that stamps chunks."""
    import threading
    import zlib

    compressed_on: set[str] = set()
    compressobj = zlib.compressobj

    def spy(level: int = -1) -> Any:
        compressed_on.add(threading.current_thread().name)
        return compressobj(level)

    monkeypatch.setattr(zlib, "compressobj", spy)
    out = tmp_path / "run.json"
    with serve([Behaviour(0.02, 0.01)], Engine(metrics=mode)) as server:
        rc = _loadgen(server.url, out, "--concurrency", "2", "--requests", "8",
                      "--rounds", "2", "--warmup", "1", "--metrics-interval", "250ms")  # fmt: skip
    assert rc == 0
    from pytimings.serving.loadgen import engine_line

    said = engine_line(json.loads(out.read_text()))
    assert compressed_on == {"pytimings-engine-metrics"}  # never the caller's loop
    eng = load_run(out).levels[0].engine
    # a 3 MB body on a loaded machine may miss its deadline (one period): counted, not parsed
    assert eng is not None and eng["scrapes"] - eng["failed_scrapes"] >= 2
    parsed = eng["scrapes"] - eng["failed_scrapes"]
    left_out = eng["left_out"]
    if mode == "nan":
        assert left_out["non_finite"] == 2 * parsed and left_out["over_cap"] == 0
        assert "prompt_tokens" not in eng["counters"] and "toy_pressure" not in eng["series"]
        assert "NaN or infinite samples left out" in said
    else:
        assert left_out["over_cap"] >= 100_000 * parsed  # and the other unknowns
        assert not any(k.startswith("toy_per_request") for k in eng["series"])
        assert "running" in eng["series"] and "toy_engine_steps" not in eng["series"]
        assert "over 5,000 series in a scrape" in said
    assert out.stat().st_size < 200_000
    assert "NaN" not in out.read_text() and "null" not in json.dumps(eng["counters"])
    assert main(["report", str(out)]) == 0
    assert main(["compare", str(out), str(out), "--resamples", "100"]) == 0
