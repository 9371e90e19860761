"""loadgen against a real vLLM CPU server: token accounting per chunk, ITL per chunk and per
token, and the engine's series and summaries held against vLLM's own ``/metrics`` read here,
independently of pytimings' scraper (a plain text parse before and after the run)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from helpers.vllm_engine import MAX_NUM_SEQS, SERVED_MODEL, SPECULATIVE_TOKENS, VllmServer

from pytimings.cli import main
from pytimings.ingest import load
from pytimings.serving.runfile import load_run
from pytimings.serving.steps import engine_steps, fit_step_time

pytestmark = pytest.mark.engine

INPUT_LEN = 32
OUTPUT_LEN = 32


def _metric_sums(server: VllmServer) -> dict[str, float]:
    """Every sample of ``/metrics`` summed over its label sets, by sample name."""
    with urllib.request.urlopen(server.base_url + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    sums: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if match and not line.startswith("#"):
            sums[match.group(1)] = sums.get(match.group(1), 0.0) + float(match.group(3))
    return sums


def _increase(before: dict[str, float], after: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def _histogram_mean(before: dict[str, float], after: dict[str, float], name: str) -> float:
    count = _increase(before, after, name + "_count")
    assert count > 0, f"{name}: no observation during the run"
    return _increase(before, after, name + "_sum") / count


def _loadgen(server: VllmServer, out: Path, *extra: str) -> int:
    return main([
        "loadgen", "--url", server.base_url + "/v1", "--model", SERVED_MODEL,
        "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN),
        "--rounds", "1", "--warmup", "0", "--metrics-interval", "200ms",
        "--out", str(out), "--quiet", *extra,
    ])  # fmt: skip


def test_completions_past_the_batch_limit(vllm_server: VllmServer, tmp_path: Path) -> None:
    """Twice --max-num-seqs in flight: a queue forms; every count and mean is the engine's."""
    out = tmp_path / "run.json"
    concurrency = 2 * MAX_NUM_SEQS
    before = _metric_sums(vllm_server)
    rc = _loadgen(vllm_server, out, "--concurrency", str(concurrency),
                  "--requests", str(4 * concurrency))  # fmt: skip
    after = _metric_sums(vllm_server)
    assert rc == 0
    (level,) = load_run(out).levels
    records = level.rounds[0].records
    assert len(records) == 4 * concurrency and all(r.status == "ok" for r in records)

    # token accounting: usage's counts, and each chunk's share of them
    assert {r.output_tokens for r in records} == {OUTPUT_LEN}
    assert {r.input_tokens for r in records} == {INPUT_LEN + 1}  # the words and BOS
    assert all(sum(r.chunk_tokens) == OUTPUT_LEN for r in records)
    assert sum(r.input_tokens or 0 for r in records) == _increase(
        before, after, "vllm:prompt_tokens_total"
    )
    summary = level.summary
    later_chunks = [k for r in records for k in r.chunk_tokens[1:]]
    assert summary["tokens_per_chunk"] == pytest.approx(np.mean(later_chunks), rel=1e-12)
    assert summary["tokens_per_chunk"] > 1.5  # speculation: one chunk per verify step
    # ITL per token: each gap over the tokens that ended it; its mean is ITL per chunk's
    # mean over tokens per chunk
    gaps = [np.diff(r.chunk_ns) / np.asarray(r.chunk_tokens[1:]) for r in records]
    per_token = np.concatenate([np.repeat(g, r.chunk_tokens[1:]) for g, r in
                                zip(gaps, records, strict=True)]) / 1e6  # fmt: skip
    assert summary["itl_per_token_ms"]["count"] == OUTPUT_LEN * len(records) - sum(
        r.chunk_tokens[0] for r in records
    )
    assert summary["itl_per_token_ms"]["median"] == pytest.approx(np.median(per_token))
    assert summary["itl_per_token_ms"]["mean"] == pytest.approx(
        summary["itl_ms"]["mean"] / summary["tokens_per_chunk"], rel=1e-9
    )

    engine = level.engine
    # a scrape not answered within its period fails: vLLM's API server, busy streaming on
    # a shared core, misses a few (7 of 58 at 100 ms once)
    assert engine is not None and engine["failed_scrapes"] <= engine["scrapes"] // 4
    series = engine["series"]
    # (a scrape every 200 ms of a ~6 s run need not see the batch exactly full)
    assert MAX_NUM_SEQS // 2 <= max(v for _, v in series["running"]) <= MAX_NUM_SEQS
    assert max(v for _, v in series["waiting"]) > 0  # the queue formed
    assert "kv_cache_usage" in series and "preemptions" in series
    # the engine's histograms over the level: its scrapes bracket exactly the measured
    # requests, so their means are the ones read here before and after the run
    ttft_engine = _histogram_mean(before, after, "vllm:time_to_first_token_seconds")
    queue_engine = _histogram_mean(before, after, "vllm:request_queue_time_seconds")
    histograms = engine["histograms"]
    assert histograms["queue_time"]["count"] == len(records)
    assert histograms["queue_time"]["mean"] == pytest.approx(queue_engine, rel=1e-9)
    assert histograms["ttft"]["mean"] == pytest.approx(ttft_engine, rel=1e-9)
    # the client's TTFT holds the engine's, plus HTTP and the API server's time before
    # vLLM's clock starts and after the token: within 10 % in 2 runs of 3 here, 42 % above
    # in one (two cores shared with other work), so only the containment is held
    ttft_client = summary["ttft_ms"]["mean"] / 1e3
    print(f"TTFT mean: client {ttft_client:.3f} s, vLLM {ttft_engine:.3f} s "
          f"({ttft_client / ttft_engine - 1:+.0%}); queue time {queue_engine:.3f} s")  # fmt: skip
    assert ttft_client >= 0.98 * ttft_engine
    # the waiting series against the queue-time histogram (Little's law): the time
    # integral of the queue length is the sum of the time each request queued (measured:
    # 24.6 s against 21.0 s for 128 requests)
    times, waiting = np.array(series["waiting"]).T
    queued_s = float(np.trapezoid(waiting, times / 1e9))
    assert queued_s == pytest.approx(queue_engine * len(records), rel=0.35)

    # speculative decoding: acceptance is the counters' ratio
    spec = engine["spec_decode"]
    assert spec is not None
    assert spec["acceptance_rate"] == pytest.approx(
        _increase(before, after, "vllm:spec_decode_num_accepted_tokens_total")
        / _increase(before, after, "vllm:spec_decode_num_draft_tokens_total"),
        rel=1e-9,
    )
    # a step's tokens reach the client in one chunk: the tokens beyond one per chunk are
    # the accepted drafts, less those a request's last step drafted past max_tokens (at
    # most SPECULATIVE_TOKENS a request; measured: 1286 of 1399 for 64 requests)
    beyond_one = sum(k - 1 for r in records for k in r.chunk_tokens)
    assert 0 <= spec["accepted_tokens"] - beyond_one <= SPECULATIVE_TOKENS * len(records)


def test_chat_counts_the_template(vllm_server: VllmServer, tmp_path: Path) -> None:
    out = tmp_path / "chat.json"
    rc = _loadgen(vllm_server, out, "--api", "chat", "--concurrency", "4", "--requests", "8")
    assert rc == 0
    (level,) = load_run(out).levels
    records = level.rounds[0].records
    assert all(r.status == "ok" for r in records)
    assert {r.output_tokens for r in records} == {OUTPUT_LEN}
    assert all(sum(r.chunk_tokens) == OUTPUT_LEN for r in records)
    # the ChatML template wraps the words: BOS, role lines and end markers
    assert all((r.input_tokens or 0) > INPUT_LEN + 1 for r in records)


def _post(server: VllmServer, path: str, body: dict[str, object] | None = None) -> None:
    data = json.dumps(body or {}).encode()
    request = urllib.request.Request(
        server.base_url + path, data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=300) as resp:
        resp.read()


def test_profiled_steps_hold_every_prompt_and_fit_a_step_time(
    vllm_server: VllmServer, tmp_path: Path
) -> None:
    """A profiled level: the steps' prefill tokens are the requests' prompt tokens; the
    step-time line fitted on them predicts the level's TPOT (the error printed, not held)."""
    assert vllm_server.trace_dir is not None
    out = tmp_path / "profiled.json"
    concurrency = MAX_NUM_SEQS // 2
    _post(vllm_server, "/start_profile", {"profile_prefix": "steps"})
    try:
        rc = _loadgen(vllm_server, out, "--concurrency", str(concurrency),
                      "--requests", str(2 * concurrency), "--no-metrics")  # fmt: skip
    finally:
        _post(vllm_server, "/stop_profile")  # returns once the trace is written
    assert rc == 0
    (trace_path,) = vllm_server.trace_dir.glob("steps_rank0.*.pt.trace.json.gz")
    steps = engine_steps(load(trace_path))
    (level,) = load_run(out).levels
    records = level.rounds[0].records
    assert int(steps["prefill_tokens"].sum()) == sum(r.input_tokens or 0 for r in records)
    assert steps["decode_requests"].max() <= concurrency
    model = fit_step_time(steps)
    predicted = model.decode_level(
        concurrency, MAX_NUM_SEQS, INPUT_LEN + 1, OUTPUT_LEN,
        tokens_per_step=level.summary["tokens_per_chunk"],  # a step's tokens: one chunk
        decode_tokens_per_request=steps["decode_tokens"].sum() / steps["decode_requests"].sum(),
    )  # fmt: skip
    measured = level.summary["tpot_ms"]["mean"]
    print(f"step-time model {model.to_dict()}: TPOT predicted {predicted['tpot_ms']:.2f} ms, "
          f"measured {measured:.2f} ms ({predicted['tpot_ms'] / measured - 1:+.0%})")  # fmt: skip
    assert model.steps == len(steps) and np.isfinite(predicted["tpot_ms"])
