"""Serving findings over runs whose engine entries are written out here: the KV-cache,
prefix-cache and saturation rules fire where their rule says, and nowhere else."""

from __future__ import annotations

from typing import Any

import pytest

from pytimings.cli import main
from pytimings.model.requests import RequestRecord
from pytimings.serving.findings import (
    RUN_RULES,
    kv_cache,
    missing_evidence,
    prefix_cache,
    queueing,
    render,
    run_findings,
    saturation,
)
from pytimings.serving.runfile import Level, Round, Run


def _level(c: int, engine: dict[str, Any] | None) -> Level:
    recs = [RequestRecord(f"r{i}", i * 10**6, i * 10**6 + 5 * 10**6,
                          [i * 10**6 + 10**6 * k for k in (1, 2, 3)], [1, 1, 1])
            for i in range(4)]  # fmt: skip
    return Level(c, None, [Round(0, 0, 10**8, recs, {}, {})], {}, {}, engine=engine)


def _engine(**kw: Any) -> dict[str, Any]:
    return {"url": "u", "scrapes": 10, "failed_scrapes": 0, "series": {}, "counters": {},
            "spec_decode": None, **kw}  # fmt: skip


def test_kv_cache_fires_on_a_full_cache_or_preemptions_only() -> None:
    full = [[t, 0.97 if t < 3 else 0.5] for t in range(10)]  # 30% of scrapes >= 95%
    run = Run("x", {}, [
        _level(1, _engine(series={"kv_cache_usage": [[t, 0.5] for t in range(10)]})),
        _level(2, _engine(series={"kv_cache_usage": full})),
        _level(4, _engine(counters={"preemptions": 3.0})),
        _level(8, None),
    ])  # fmt: skip
    found = kv_cache("x", run, "vllm")
    assert [f.concurrency for f in found] == [2, 4]
    assert found[0].evidence["kv_full_share"] == pytest.approx(0.3)
    assert found[1].evidence["preemptions"] == 3 and "3 preemptions" in found[1].title


def test_prefix_cache_rate_from_counters_and_the_rule_list_is_open() -> None:
    run = Run("x", {}, [_level(1, _engine(counters={"prefix_cache_hits": 30.0,
                                                     "prefix_cache_queries": 40.0}))])  # fmt: skip
    (f,) = prefix_cache("x", run, "vllm")
    assert f.evidence["hit_rate"] == 0.75 and f.evidence["ttft_p50_ms"] == pytest.approx(1.0)
    extra = lambda label, r, d: [type(f)("hardware", "t", {}, label, 1)]  # noqa: E731
    RUN_RULES.append(extra)
    try:
        assert [g.layer for g in run_findings("x", run, "vllm")] == ["prefix_cache", "hardware"]
    finally:
        RUN_RULES.remove(extra)


def test_saturation_marks_the_flat_throughput_with_doubled_ttft() -> None:
    rows = [
        {"concurrency": 1, "throughput": 100.0, "ttft_p50": 10.0},
        {"concurrency": 2, "throughput": 190.0, "ttft_p50": 11.0},
        {"concurrency": 4, "throughput": 195.0, "ttft_p50": 30.0},  # +2.6%, x2.7
        {"concurrency": 8, "throughput": 210.0, "ttft_p50": 61.0},
    ]  # +7.7%: rising still
    assert [f.concurrency for f in saturation("x", rows)] == [4]


def test_loadgen_refuses_metrics_url_with_no_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["loadgen", "--url", "http://127.0.0.1:9/v1", "--model", "m", "--out", "/tmp/x.json",
            "--metrics-url", "http://127.0.0.1:9/metrics", "--no-metrics", "--quiet"]  # fmt: skip
    assert main(argv) == 2
    assert "contradict" in capsys.readouterr().err


def _queued(c: int, **series: list[list[float]]) -> Level:
    """Four requests whose TTFT (1-4 ms) rises with the engine's `waiting` (0-3) during
    their wait for the first token, and 4 running throughout."""
    ms = 10**6
    recs = [RequestRecord(f"r{i}", 10 * i * ms, 10 * i * ms + 9 * ms,
                          [10 * i * ms + (1 + i) * ms, 10 * i * ms + 8 * ms], [1, 1])
            for i in range(4)]  # fmt: skip
    waiting = [[10 * i * ms + ms // 2, float(i)] for i in range(4)]
    running = [[10 * i * ms + ms // 2, 4.0] for i in range(4)]
    eng = _engine(series={"waiting": waiting, "running": running, **series})
    return Level(c, None, [Round(0, 0, 10**8, recs, {}, {})], {}, {}, engine=eng)


def test_the_batch_limit_is_claimed_only_from_the_engine_s_own_limit() -> None:
    """4 running at c=4 says nothing of the engine's limit: the claim comes from the
    engine's batch_limit metric alone (issue 45 item 8: 'at its batch limit (4 running)'
    when the limit was 8)."""
    (f,) = queueing("x", Run("x", {}, [_queued(4)]), "vllm")
    assert f.evidence["batch_limit"] is None and f.evidence["at_batch_limit"] is None
    assert "at its batch limit" not in f.title and "reports no batch limit" in f.title
    limit8 = [[0.0, 8.0]]
    (f,) = queueing("x", Run("x", {}, [_queued(4, batch_limit=limit8)]), "vllm")
    assert f.evidence["at_batch_limit"] is False and "below the engine's batch limit (8)" in f.title
    (f,) = queueing("x", Run("x", {}, [_queued(4, batch_limit=[[0.0, 4.0]])]), "vllm")
    assert f.evidence["at_batch_limit"] is True and "at its batch limit (4)" in f.title


def test_none_says_which_evidence_was_missing() -> None:
    no_metrics = Run("x", {}, [_level(1, None)])
    assert "--metrics-url" in missing_evidence([no_metrics])
    sparse = Run("x", {}, [_level(1, _engine(scrapes=3)), _level(2, _engine(scrapes=24))])
    note = missing_evidence([sparse])
    assert "27 engine metric scrapes over 2 levels, 1 of them with fewer than 5" in note
    assert "--metrics-interval" in note
    assert render([], note) == [f"serving findings: none ({note})"]
