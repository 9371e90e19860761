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
from timed_server import serve_timed

from pytimings.cli import main
from pytimings.serving.metrics import serving_metrics
from pytimings.serving.runfile import ERROR_KINDS, SCHEMA, load_run

TTFT_S, ITL_S, N_OUT = 0.060, 0.020, 8


def _loadgen(url: str, out: Path, *extra: str) -> int:
    return main([
        "loadgen", "--url", url, "--model", "m", "--input-len", "32",
        "--output-len", str(N_OUT), "--out", str(out), "--quiet", "--no-table", *extra,
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


def test_a_trace_takes_no_request_count_or_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_len": 3, "output_len": 2}\n')
    for flag, value in (("--rounds", "2"), ("--rate", "5"), ("--requests", "9")):
        assert _loadgen("http://127.0.0.1:9/v1", tmp_path / "o.json", "--trace", str(trace),
                        flag, value) == 2  # fmt: skip
        assert f"drop {flag}" in capsys.readouterr().err


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
        (["--duration", "1m", "--interval", "2m"], "longer than --duration"),
        # 2 s in 1 us intervals ran out of memory after the load, losing every request
        (["--duration", "2s", "--interval", "0.001ms"], "would cut 2e+06 intervals"),
        (["--metrics-url", "ftp://x/metrics"], "--metrics-url"),
        (["--trace", "/nonexist.jsonl"], "--trace /nonexist.jsonl: cannot read"),
        (["--dataset", "/nonexist.json"], "--dataset /nonexist.json: cannot read"),
        (["--trace-speed", "2"], "--trace-speed needs --trace"),
        (["--rates", "5,x"], "--rates"),
        (["--rates", "5,0"], "every rate must be > 0"),
        (["--rates", "5", "--rate", "5"], "contradict"),
        (["--rates", "5", "--concurrency", "1,2"], "one --concurrency"),
        (["--arrival", "uniform"], "--arrival"),
        (["--arrival", "gamma"], "needs --rate"),
        (["--burstiness", "2", "--rate", "5"], "--arrival gamma"),
        (["--ramp", "10s"], "needs --rate"),
        (["--max-error-rate", "1.5"], "--max-error-rate"),
        (["--percentiles", "50,100"], "(0, 100)"),
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
        out_q, err_q = _run_cli_with_stderr(
            server.url, tmp_path / "c.json", True, "--quiet", "--no-table"
        )
    assert err_pipe == "" and "TTFT mean" in out_pipe  # not a terminal: no bar at all
    assert "requests" in err_tty and "TTFT mean" in out_tty  # bar on stderr, table on stdout
    assert "requests" not in out_tty
    assert err_q == "" and out_q == ""  # --quiet: no bar; --no-table: no table


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


# each way a request fails, the kind it must be counted as: a reset (RST, the server died)
# is never an orderly early close nor a malformed stream, and neither is the reverse
FAULT_KINDS = {
    "reset": "reset",  # RST mid-stream
    "reset_early": "reset",  # RST before the response's headers
    "drop": "early_close",  # FIN mid-stream
    "close_early": "early_close",  # FIN before the headers
    "no_done": "early_close",  # the response ended without [DONE]
    "stall": "timeout",
    "404": "http_4xx",
    "429": "http_4xx",
    "500": "http_5xx",
    "malformed": "malformed_sse",
    "error_event": "sse_error",
}


@pytest.mark.parametrize("fault", FAULT_KINDS)
def test_each_fault_has_its_own_kind(tmp_path: Path, fault: str) -> None:
    ok = Behaviour(0.005, 0.002)
    out = tmp_path / "run.json"
    with serve([ok, Behaviour(0.005, 0.002, fail=fault), ok]) as server:
        rc = _loadgen(server.url, out, "--concurrency", "1", "--requests", "6", "--rounds", "1",
                      "--warmup", "0", "--chunk-timeout", "0.3")  # fmt: skip
    assert rc == 0
    (rd,) = load_run(out).levels[0].rounds
    kind = FAULT_KINDS[fault]
    assert rd.errors == {kind: 2}, [r.error_detail for r in rd.records if r.error]
    assert kind in ERROR_KINDS
    assert rd.summary["completed"] == 4  # the requests after a failure are unharmed


def test_requests_are_timed_from_when_their_bytes_leave(tmp_path: Path) -> None:
    """C=64 closed-loop rounds, each starting 64 requests at once: the client's start-up
    (building and writing 64 requests) is send lag, not TTFT. Against the server's log on
    the same clock, whose request time is the kernel's receive time of the request's bytes:
    a request is stamped sent just before those bytes arrive, and the client's TTFT p99
    follows the server's (the rest of the gap is the client's loop reading late, some ms
    when this machine is loaded; the old start stamp, taken before the request was built,
    was 20-40 ms early at each round's start)."""
    out = tmp_path / "run.json"
    with serve_timed(0.05, 0.01) as server:
        rc = _loadgen(server.url, out, "--concurrency", "64", "--requests", "64", "--rounds",
                      "3", "--warmup", "64", "--input-len", "8")  # fmt: skip
        truth = {t["id"]: t for t in server.stats()["timings"]}
    assert rc == 0
    level = load_run(out).levels[0]
    recs = [r for rd in level.rounds for r in rd.records]
    assert len(recs) == 192 and all(r.status == "ok" for r in recs)
    recv = np.array([truth[r.server_id]["recv_ns"] for r in recs])
    first_write = np.array([truth[r.server_id]["write_ns"][0] for r in recs])
    sent = np.array([r.start_ns for r in recs])
    scheduled = np.array([r.scheduled_ns for r in recs])
    first_seen = np.array([r.chunk_ns[0] for r in recs])
    in_flight_ms = (recv - sent) / 1e6
    assert in_flight_ms.min() >= 0  # causality: stamped before the server received it ...
    assert np.percentile(in_flight_ms, 99) < 2.0  # ... and just before (µs when idle)
    client_p99 = np.percentile(first_seen - sent, 99) / 1e6
    server_p99 = np.percentile(first_write - recv, 99) / 1e6
    assert abs(client_p99 - server_p99) < 20.0, (client_p99, server_p99)
    lag = level.summary["send_lag_ms"]
    assert lag["count"] == 192
    assert lag["max"] == pytest.approx((sent - scheduled).max() / 1e6)
    assert lag["max"] > 0  # a round's 64 requests cannot all leave at once


def test_a_trace_is_replayed_at_its_times_with_its_lengths(tmp_path: Path) -> None:
    """1,000 requests of a Poisson trace (100 s at 10 req/s in the file, replayed 20x faster
    to keep the test short: 5 s at 200 req/s) against the fast server: each request is
    scheduled at its trace time exactly, leaves close to it (how close is the client's send
    lag: on this loaded 2-core machine a p50 under 1 ms and a p99 of 7-230 ms, so only the
    median is held here, loosely; benches/ measures the tail), and the server's usage gives
    back its input and output lengths exactly."""
    rng = np.random.default_rng(7)
    n, speed = 1000, 20.0
    times = np.concatenate([[0.0], np.cumsum(rng.exponential(0.1, n - 1))]) + 1234.5
    lengths = rng.integers(1, 40, n), rng.integers(1, 5, n)
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(
        json.dumps({"timestamp": float(t), "input_len": int(i), "output_len": int(o)}) + "\n"
        for t, i, o in zip(times, *lengths, strict=True)
    ))  # fmt: skip
    out = tmp_path / "run.json"
    with serve_timed(0.002, 0.001) as server:
        rc = _loadgen(server.url, out, "--trace", str(trace), "--trace-speed", str(speed),
                      "--concurrency", "64", "--warmup", "64", "--no-metrics")  # fmt: skip
        received = {t["id"]: t["recv_ns"] for t in server.stats()["timings"]}
    assert rc == 0
    run = load_run(out)
    (rd,) = run.levels[0].rounds
    recs = sorted(rd.records, key=lambda r: int(r.req_id.rsplit("t", 1)[1]))
    assert len(recs) == n and all(r.status == "ok" for r in recs)
    assert [r.input_tokens for r in recs] == lengths[0].tolist()
    assert [r.output_tokens for r in recs] == lengths[1].tolist()
    due_s = (times - times[0]) / speed
    scheduled_s = (np.array([r.scheduled_ns for r in recs]) - recs[0].scheduled_ns) / 1e9
    assert np.abs(scheduled_s - due_s).max() < 1e-6
    # when the server's kernel received each request, from the first request's due time
    recv_s = (np.array([received[r.server_id] for r in recs]) - recs[0].scheduled_ns) / 1e9
    late_ms = (recv_s - due_s) * 1e3
    assert late_ms.min() >= 0  # none before its time
    assert np.median(late_ms) < 5.0, np.percentile(late_ms, [50, 90, 99, 100])
    work = run.config["workload"]
    assert work["source"] == "trace" and work["trace"]["format"] == "jsonl"
    assert work["trace"]["requests"] == n and work["trace"]["speed"] == speed


def test_rates_constant_arrivals_dataset_percentiles_and_the_error_limit(
    tmp_path: Path,
) -> None:
    dataset = tmp_path / "sharegpt.json"
    dataset.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": f"question {i}"}]} for i in range(4)
    ]))  # fmt: skip
    ok = Behaviour(0.005, 0.002)
    out = tmp_path / "run.json"
    with serve([ok, ok, Behaviour(0.005, 0.002, fail="500")]) as server:
        rc = _loadgen(server.url, out, "--rates", "20,40", "--arrival", "constant",
                      "--concurrency", "4", "--requests", "6", "--rounds", "2", "--warmup", "0",
                      "--dataset", str(dataset), "--percentiles", "50,99.9",
                      "--max-error-rate", "0.2", "--no-metrics")  # fmt: skip
        bodies = server.stats()["bodies"]
    assert rc == 0
    doc = json.loads(out.read_text())
    # a third failed in the first round at 20/s, past 0.2: nothing more was sent
    (level,) = doc["levels"]
    assert level["rate"] == 20 and len(level["rounds"]) == 1 and len(bodies) == 6
    stop = doc["error_limit"]["stopped_at"]
    assert stop["rate"] == 20 and stop["round"] == 0 and stop["error_rate"] == pytest.approx(1 / 3)
    assert stop["errors"] == {"http_5xx": 2} and level["stopped"] == stop
    assert sorted(b["prompt"] for b in bodies[:4]) == [f"question {i}" for i in range(4)]
    recs = load_run(out).levels[0].rounds[0].records
    scheduled = sorted(r.scheduled_ns for r in recs)
    assert np.allclose(np.diff(scheduled), 50e6, atol=1e3)  # constant: every 1/20 s
    ttft = level["summary"]["ttft_ms"]
    assert ttft["p50"] == ttft["median"] and ttft["max"] >= ttft["p99.9"] >= ttft["p99"]
    work = doc["config"]["workload"]
    assert work["source"] == "dataset" and work["dataset"]["prompts"] == 4
    assert work["rates"] == [20, 40] and work["arrival"] == "constant"
    assert work["percentiles"] == [50, 99.9] and work["max_error_rate"] == 0.2


def test_every_connection_is_open_before_the_first_request(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    with serve_timed(0.002, 0.001) as server:
        # one request every 20 ms, each done in about 10: without the warm-up one connection
        # would do, opened when the first request is sent
        rc = _loadgen(server.url, out, "--concurrency", "8", "--requests", "8", "--rounds", "1",
                      "--warmup", "0", "--no-metrics", "--rate", "50",
                      "--arrival", "constant")  # fmt: skip
        stats = server.stats()
    assert rc == 0
    first_request = min(t["recv_ns"] for t in stats["timings"])
    opened = [t for t in stats["accepted_ns"] if t < first_request]
    assert len(opened) == 8  # the pool was warm before timing began ...
    assert len(stats["accepted_ns"]) == 8 + 1  # ... and nothing more opened (+1: /_stats)
