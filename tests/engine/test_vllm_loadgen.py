"""loadgen against a real vLLM CPU server: token accounting per chunk, ITL per chunk and per
token, and the engine's series and summaries held against vLLM's own ``/metrics`` read here,
independently of pytimings' scraper (a plain text parse before and after the run)."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from helpers.vllm_engine import MAX_NUM_SEQS, SERVED_MODEL, VllmServer

from pytimings.cli import main
from pytimings.serving.runfile import load_run

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
        "--rounds", "1", "--warmup", "0", "--metrics-interval", "250ms",
        "--out", str(out), "--quiet", *extra,
    ])  # fmt: skip


def test_completions_past_the_batch_limit(vllm_server: VllmServer, tmp_path: Path) -> None:
    """Twice --max-num-seqs in flight: a queue forms; every count and mean is the engine's."""
    out = tmp_path / "run.json"
    concurrency = 2 * MAX_NUM_SEQS
    before = _metric_sums(vllm_server)
    rc = _loadgen(vllm_server, out, "--concurrency", str(concurrency),
                  "--requests", str(2 * concurrency))  # fmt: skip
    after = _metric_sums(vllm_server)
    assert rc == 0
    (level,) = load_run(out).levels
    records = level.rounds[0].records
    assert len(records) == 2 * concurrency and all(r.status == "ok" for r in records)

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
    assert engine is not None and engine["failed_scrapes"] == 0
    series = engine["series"]
    assert max(v for _, v in series["running"]) == MAX_NUM_SEQS
    assert max(v for _, v in series["waiting"]) > 0  # the queue formed
    assert "kv_cache_usage" in series and "preemptions" in series
    # the engine's histograms over the level: its scrapes bracket exactly the measured
    # requests, so their means are the ones read here before and after the run
    ttft_engine = _histogram_mean(before, after, "vllm:time_to_first_token_seconds")
    queue_engine = _histogram_mean(before, after, "vllm:request_queue_time_seconds")
    histograms = engine["histograms"]
    assert histograms["queue_time"]["count"] == len(records)
    assert histograms["queue_time"]["mean"] == pytest.approx(queue_engine, rel=1e-9)
    assert histograms["vllm:time_to_first_token_seconds"]["mean"] == pytest.approx(
        ttft_engine, rel=1e-9
    )
    # the client's TTFT is the engine's plus HTTP, tokenizing and detokenizing
    assert summary["ttft_ms"]["mean"] / 1e3 == pytest.approx(ttft_engine, rel=0.10)
    # the waiting series against the queue-time histogram (Little's law): the time
    # integral of the queue length is the sum of the time each request queued
    times, waiting = np.array(series["waiting"]).T
    queued_s = float(np.trapezoid(waiting, times / 1e9))
    assert queued_s == pytest.approx(queue_engine * len(records), rel=0.35)

    # speculative decoding: acceptance is the counters' ratio; a verify step's tokens
    # reach the client in one chunk
    spec = engine["spec_decode"]
    assert spec is not None
    assert spec["acceptance_rate"] == pytest.approx(
        _increase(before, after, "vllm:spec_decode_num_accepted_tokens_total")
        / _increase(before, after, "vllm:spec_decode_num_draft_tokens_total"),
        rel=1e-9,
    )
    assert summary["tokens_per_chunk"] == pytest.approx(spec["mean_acceptance_length"], rel=0.2)


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
