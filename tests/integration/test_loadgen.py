"""The load generator against a real local streaming server with injected delays and faults."""

from __future__ import annotations

import json
import os
import pty
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sse_server import Behaviour, serve

from pytimings.cli import main
from pytimings.serving.metrics import serving_metrics
from pytimings.serving.runfile import SCHEMA, load_run

TTFT_S, ITL_S, N_OUT = 0.060, 0.020, 8


def _loadgen(url: str, out: Path, *extra: str) -> int:
    return main([
        "loadgen", "--url", url, "--model", "m", "--input-len", "32",
        "--output-len", str(N_OUT), "--out", str(out), "--quiet", *extra,
    ])  # fmt: skip


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_measured_latencies_match_injected_delays(tmp_path: Path, api: str) -> None:
    out = tmp_path / "run.json"
    levels, warmup, per_round, rounds = (1, 3), 3, 3, 2
    with serve([Behaviour(TTFT_S, ITL_S)]) as server:
        rc = _loadgen(server.url, out, "--api", api, "--concurrency", "1,3",
                      "--requests", str(per_round), "--rounds", str(rounds),
                      "--warmup", str(warmup))  # fmt: skip
        stats = server.stats()
    assert rc == 0
    assert stats["seen"] == len(levels) * (warmup + rounds * per_round)
    body = stats["bodies"][0]
    assert body["max_tokens"] == N_OUT and body["ignore_eos"] is True and body["stream"] is True
    truth = {t["id"]: t for t in stats["timings"]}  # server write times, by response id
    run = load_run(out)
    assert [lv.concurrency for lv in run.levels] == list(levels)
    for lv in run.levels:
        assert lv.warmup == {"requests": warmup, "errors": {}}
        recs = [r for rd in lv.rounds for r in rd.records]
        assert len(recs) == rounds * per_round and all(r.status == "ok" for r in recs)
        assert all(r.output_tokens == N_OUT and r.input_tokens == 17 for r in recs)  # usage
        assert all(len(r.chunk_ns) == N_OUT for r in recs)
        s = lv.summary
        table = serving_metrics(recs).per_request
        # 1. Against what the server actually did to the same request, on the same clock
        # (CLOCK_MONOTONIC in both processes), paired per request and per chunk, as
        # medians of ratios (no absolute times: on a loaded 2-core box a process is
        # descheduled for ms at a time, and that stretches both sides alike). What the
        # bounds must catch: TPOT divided by n instead of n-1 (ratio 7/8), TTFT counted into
        # TPOT llmperf-style (ratio 25/20), stamping a chunk when the stream ends rather
        # than when it arrives (gaps ratio ~0, delivery ~ the whole stream).
        r_ttft, r_tpot, r_gap, delivery, write_gap = [], [], [], [], []
        for r, ttft_ns, tpot_ns in zip(recs, table["ttft_ns"], table["tpot_ns"], strict=True):
            w = np.asarray(truth[r.server_id]["write_ns"])
            arrive = np.asarray(r.chunk_ns)
            assert (arrive >= w).all()  # causality: no chunk is seen before it was written
            delivery.extend(arrive - w)
            write_gap.extend(np.diff(w))
            r_ttft.append(ttft_ns / (w[0] - r.start_ns))
            r_tpot.append(tpot_ns / ((w[-1] - w[0]) / (N_OUT - 1)))
            r_gap.append(np.median(np.diff(arrive)) / np.median(np.diff(w)))
        assert np.median(delivery) < 0.5 * np.median(write_gap)
        assert 1.0 <= np.median(r_ttft) < 1.25
        assert abs(np.median(r_tpot) - 1) < 0.06
        assert abs(np.median(r_gap) - 1) < 0.1
        # 2. Against the injected sleeps, which only overshoot (more so under load): looser
        assert 1.0 <= s["ttft_ms"]["median"] / (TTFT_S * 1e3) < 1.5
        assert 0.95 <= s["tpot_ms"]["median"] / (ITL_S * 1e3) < 1.5
        assert s["itl_ms"]["count"] == rounds * per_round * (N_OUT - 1)
        e2e = s["ttft_ms"]["mean"] + (N_OUT - 1) * s["tpot_ms"]["mean"]
        assert s["e2el_ms"]["mean"] == pytest.approx(e2e)  # E2E ends at the last token
        assert s["peak_concurrency"] == lv.concurrency
    # the same records under llmperf: ITL = (TTFT + 7 gaps) / 8 tokens
    lv0 = run.levels[0]
    lp = serving_metrics([r for rd in lv0.rounds for r in rd.records], "llmperf")
    expect = (lv0.summary["ttft_ms"]["mean"] + (N_OUT - 1) * lv0.summary["tpot_ms"]["mean"]) / N_OUT
    assert lp.itl.mean == pytest.approx(expect)


def test_open_loop_poisson_and_counted_tokens_without_usage(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    with serve([Behaviour(0.02, 0.01, send_usage=False)]) as server:
        rc = _loadgen(server.url, out, "--rate", "50", "--concurrency", "4", "--requests", "8",
                      "--rounds", "1", "--warmup", "0", "--seed", "3")  # fmt: skip
    assert rc == 0
    run = load_run(out)
    (rd,) = run.levels[0].rounds
    assert len(rd.records) == 8 and run.config["rate"] == 50
    assert all(r.output_tokens is None and r.n_output == N_OUT for r in rd.records)
    starts = sorted(r.start_ns for r in rd.records)
    assert starts[-1] - starts[0] > 0  # spread out by the arrival process, not all at once
    # open loop: arrivals follow the schedule (7 gaps of mean 1/50 s), not the end of earlier
    # requests; serialised requests would span at least the sum of 7 requests' durations
    busy = sum(r.chunk_ns[-1] - r.start_ns for r in rd.records)
    assert starts[-1] - starts[0] < 0.5 * busy


def test_multi_token_chunks_counted_from_running_usage(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    plan = [Behaviour(0.01, 0.005, tokens_per_chunk=3, continuous_usage=True)]
    with serve(plan) as server:
        rc = _loadgen(server.url, out, "--requests", "2", "--rounds", "1", "--warmup", "0")
    assert rc == 0
    for r in load_run(out).levels[0].rounds[0].records:
        assert r.chunk_tokens == [3, 3, 2] and r.output_tokens == N_OUT
    # TPOT still divides by tokens, not chunks; vLLM's ITL stays one value per chunk gap
    m = serving_metrics(load_run(out).levels[0].rounds[0].records)
    assert m.itl.count == 2 * 2 and m.tpot.count == 2


def test_tokens_that_arrive_before_their_text_are_counted_when_they_arrive(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run.json"
    plan = [Behaviour(0.01, 0.005, tokens_per_chunk=3, continuous_usage=True, held_text=True)]
    with serve(plan) as server:
        rc = _loadgen(server.url, out, "--requests", "2", "--rounds", "1", "--warmup", "0")
    assert rc == 0
    for r in load_run(out).levels[0].rounds[0].records:
        # the second chunk's 3 tokens came without text: still a token chunk, then
        assert r.chunk_tokens == [3, 3, 2] and r.output_tokens == N_OUT


def test_every_fault_is_counted_per_round_and_kept_out_of_latency(tmp_path: Path) -> None:
    ok = Behaviour(0.02, 0.01)
    faults = ["500", "stall", "malformed", "drop", "error_event", "bad_shape"]
    plan = [ok] * 4 + [Behaviour(0.02, 0.01, fail=f) for f in faults]
    out = tmp_path / "run.json"
    with serve(plan) as server:
        rc = _loadgen(server.url, out, "--concurrency", "3", "--requests", "10", "--rounds", "2",
                      "--warmup", "0", "--chunk-timeout", "0.5")  # fmt: skip
    assert rc == 0
    run = load_run(out)
    expected = {"http_5xx": 1, "timeout": 1, "malformed_sse": 2, "early_close": 1, "sse_error": 1}
    for rd in run.levels[0].rounds:
        assert rd.errors == expected
        assert rd.summary["errors"] == expected
        assert rd.summary["completed"] == 4
        assert len(rd.records) == 10  # failed requests are saved too
        # latency figures come from the 4 good requests only
        assert rd.summary["ttft_ms"]["count"] == 4
    assert run.levels[0].summary["errors"] == {k: 2 * v for k, v in expected.items()}


BAD_REPLIES = {
    "deep": "malformed_sse",
    "long_line": "malformed_sse",
    "usage_huge": "bad_usage",
    "usage_negative": "bad_usage",
    "usage_bool": "bad_usage",
}


def test_bad_replies_are_counted_and_the_run_is_saved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Replies that used to raise out of loadgen (RecursionError, LineTooLong, OverflowError)
    or pass as negative/boolean token counts: each is one failed request of its kind, every
    good request is measured, and compare reads the run file."""
    ok = Behaviour(0.01, 0.005)
    plan = [ok] * 3 + [Behaviour(0.01, 0.005, fail=f) for f in BAD_REPLIES]
    out = tmp_path / "run.json"
    with serve(plan) as server:
        rc = _loadgen(server.url, out, "--concurrency", "2", "--requests", str(len(plan)),
                      "--rounds", "2", "--warmup", "0")  # fmt: skip
        assert server.stats()["seen"] == 2 * len(plan)
    assert rc == 0
    run = load_run(out)
    expected: dict[str, int] = {}
    for kind in BAD_REPLIES.values():
        expected[kind] = expected.get(kind, 0) + 1
    for rd in run.levels[0].rounds:
        assert rd.errors == expected
        assert rd.summary["completed"] == 3
        assert rd.summary["ttft_ms"]["count"] == 3
        good = [r for r in rd.records if r.error is None]
        assert len(good) == 3 and all(r.output_tokens == N_OUT for r in good)
        assert all(r.n_output == N_OUT for r in good)
        details = " | ".join(sorted(r.error_detail for r in rd.records if r.error))
        for said in ("LineTooLong", "nested too deep", "1e+30", "-5", "True"):
            assert said in details
    assert main(["compare", str(out), str(out), "--labels", "a,b", "--resamples", "100"]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_connect_failure_counted_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "run.json"
    rc = _loadgen(f"http://127.0.0.1:{port}/v1", out, "--requests", "2", "--rounds", "1",
                  "--warmup", "0")  # fmt: skip
    assert rc == 1
    # even with --quiet, one line says why the exit status is 1
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert err == f"pytimings loadgen: every measured request failed (connect 2); see {out}"

    def no_nan(const: str) -> None:
        pytest.fail(f"{const} in the run file: not strict JSON")

    doc = json.loads(out.read_text(), parse_constant=no_nan)
    assert doc["schema"] == SCHEMA
    assert doc["levels"][0]["rounds"][0]["errors"] == {"connect": 2}
    assert doc["levels"][0]["summary"]["ttft_ms"]["mean"] is None  # no values: null


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url", "ftp://x/v1"], "--url"),
        (["--url", "not a url"], "--url"),
        (["--concurrency", "0"], "--concurrency"),
        (["--concurrency", "a,b"], "--concurrency"),
        (["--api", "embeddings"], "--api"),
        (["--requests", "0"], "--requests"),
        (["--slo", "ttft=fast"], "--slo"),
        (["--definition", "tgi"], "--definition"),
        (["--out", "/nonexist/o.json"], "directory /nonexist does not exist"),
        (["--out", "/"], "is a directory"),
        (["--duration", "soon"], "--duration 'soon'"),
        (["--duration", "1m", "--interval", "2m"], "longer than --duration"),
        # 2 s in 1 us intervals ran out of memory after the load, losing every request
        (["--duration", "2s", "--interval", "0.001ms"], "would cut 2e+06 intervals"),
        (["--metrics-interval", "fast"], "--metrics-interval 'fast'"),
        (["--metrics-url", "ftp://x/metrics"], "--metrics-url"),
    ],
)
def test_bad_arguments_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    base = {"--url": "http://127.0.0.1:9/v1", "--model": "m", "--out": str(tmp_path / "o.json")}
    for k, v in zip(args[::2], args[1::2], strict=True):
        base[k] = v
    argv = ["loadgen", *[x for kv in base.items() for x in kv], "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err


@pytest.mark.slow
def test_compare_two_real_runs_finds_the_slower_decode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = {}
    for name, itl in (("fast", 0.010), ("slow", 0.016)):
        runs[name] = tmp_path / f"{name}.json"
        with serve([Behaviour(0.02, itl)]) as server:
            assert _loadgen(server.url, runs[name], "--concurrency", "1,2", "--requests", "4",
                            "--rounds", "2", "--warmup", "2") == 0  # fmt: skip
    out = tmp_path / "cmp.json"
    rc = main(["compare", str(runs["fast"]), str(runs["slow"]), "--labels", "fast,slow",
               "--resamples", "300", "--json", str(out)])  # fmt: skip
    assert rc == 0
    doc = json.loads(out.read_text())
    verdicts = {(c["concurrency"], c["metric"]): c["verdict"] for c in doc["comparisons"]}
    for conc in (1, 2):
        assert verdicts[(conc, "tpot_mean")] == "worse"  # +60% per token
        assert verdicts[(conc, "e2el_mean")] == "worse"
        assert verdicts[(conc, "throughput")] == "worse"
    tpot = {c["concurrency"]: c for c in doc["comparisons"] if c["metric"] == "tpot_mean"}
    assert 0.4 < tpot[1]["rel_change"] < 0.8
    assert "c=2 tpot_mean (ms)" in capsys.readouterr().out


def _run_cli_with_stderr(url: str, out: Path, stderr_tty: bool, *extra: str) -> tuple[str, str]:
    """Run ``pytimings loadgen`` in a child with stderr on a pseudo-terminal or a pipe."""
    argv = [sys.executable, "-m", "pytimings.cli", "loadgen", "--url", url, "--model", "m",
            "--input-len", "8", "--output-len", "4", "--requests", "4", "--rounds", "1",
            "--warmup", "0", "--out", str(out), *extra]  # fmt: skip
    if not stderr_tty:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        return p.stdout, p.stderr
    leader, follower = pty.openpty()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=follower, text=True) as p:
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 4096)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        stdout = p.stdout.read() if p.stdout else ""
    os.close(leader)
    return stdout, b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_progress_bar_only_on_a_terminal(tmp_path: Path) -> None:
    with serve([Behaviour(0.005, 0.002)]) as server:
        out_pipe, err_pipe = _run_cli_with_stderr(server.url, tmp_path / "a.json", False)
        out_tty, err_tty = _run_cli_with_stderr(server.url, tmp_path / "b.json", True)
        out_q, err_q = _run_cli_with_stderr(server.url, tmp_path / "c.json", True, "--quiet")
    assert err_pipe == "" and "TTFT mean" in out_pipe  # not a terminal: no bar at all
    assert "requests" in err_tty and "TTFT mean" in out_tty  # bar on stderr, table on stdout
    assert "requests" not in out_tty
    assert err_q == "" and out_q == ""  # --quiet: nothing


def test_run_file_write_error_is_a_usage_error(tmp_path: Path) -> None:
    from pytimings.errors import UsageError
    from pytimings.serving.runfile import write_json

    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="cannot write"):
        write_json({"schema": SCHEMA}, tmp_path / "file" / "run.json")


def test_a_url_without_v1_stops_at_the_warmup_with_the_status_and_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--url http://host:port (no /v1) answered 404 to every request: the run went on and
    measured nothing but failures; now the failed warm-up stops it, saying why."""
    out = tmp_path / "run.json"
    with serve([Behaviour(TTFT_S, ITL_S)]) as server:
        bare = server.url.removesuffix("/v1")
        rc = _loadgen(bare, out, "--warmup", "2", "--requests", "2", "--no-metrics")
    assert rc == 1 and not out.exists()
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("pytimings loadgen: every warm-up request at concurrency 1 failed: ")
    assert f"HTTP 404 (--url {bare} has no /v1" in line and "no run file" in line


def test_gpu_price_without_gpus_says_it_assumed_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.json"
    with serve([Behaviour(TTFT_S, ITL_S)]) as server:
        assert _loadgen(server.url, out, "--requests", "2", "--warmup", "0", "--no-metrics") == 0
    capsys.readouterr()
    assert main(["report", str(out), "--gpu-price", "2.5"]) == 0
    assert "--gpu-price without --gpus: the cost assumes 1 GPU" in capsys.readouterr().err
