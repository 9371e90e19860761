"""Metric definitions checked against hand-computed values on small records."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytimings.errors import UsageError
from pytimings.model.requests import RequestRecord
from pytimings.serving.metrics import parse_slo, peak_concurrency, serving_metrics

MS = 1_000_000


def _records() -> list[RequestRecord]:
    a = RequestRecord("a", 0, 210 * MS, [100 * MS, 150 * MS, 200 * MS], [1, 1, 2], input_tokens=10)
    b = RequestRecord("b", 50 * MS, 340 * MS, [250 * MS, 330 * MS], [1, 1], input_tokens=20)
    c = RequestRecord("c", 10 * MS, 20 * MS, error="http_5xx", error_detail="500")
    d = RequestRecord("d", 30 * MS, None, [60 * MS], [1])  # still open: unfinished
    return [a, b, c, d]


WINDOW = [(0, 400 * MS)]


def test_vllm_definitions_by_hand() -> None:
    m = serving_metrics(_records(), "vllm", windows=WINDOW)
    assert m.completed == 2
    assert m.errors == {"http_5xx": 1, "unfinished": 1}
    # TTFT: a 100, b 200
    assert m.ttft.mean == pytest.approx(150)
    assert m.ttft.std == pytest.approx(50)  # population std
    assert m.ttft.p90 == pytest.approx(190)
    assert m.ttft.p99 == pytest.approx(199)
    assert m.ttft.max == pytest.approx(200)
    # TPOT excludes the first token: a (200-100)/(4-1), b (330-250)/(2-1)
    assert m.tpot.count == 2
    assert m.tpot.mean == pytest.approx((100 / 3 + 80) / 2)
    # ITL pooled gaps, a multi-token chunk is one gap: 50, 50, 80
    assert m.itl.count == 3
    assert m.itl.mean == pytest.approx(60)
    assert m.itl.median == pytest.approx(50)
    assert m.itl.p90 == pytest.approx(74)
    # E2E to the last chunk: 200, 280
    assert m.e2el.mean == pytest.approx(240)
    assert m.duration_s == pytest.approx(0.4)
    assert m.request_throughput == pytest.approx(5.0)
    assert m.output_tokens == 6
    assert m.output_throughput == pytest.approx(15.0)
    assert m.total_token_throughput == pytest.approx(90.0)
    assert m.peak_concurrency == 3
    assert m.input_tokens_unknown == 0


def test_genai_perf_definitions_by_hand() -> None:
    m = serving_metrics(_records(), "genai-perf", windows=WINDOW)
    # ITL per request = (E2E - TTFT)/(n-1): same values as vLLM's TPOT
    assert m.itl.count == 2
    assert m.itl.mean == pytest.approx((100 / 3 + 80) / 2)
    assert m.tpot.mean == pytest.approx(m.itl.mean)
    # duration: first request sent (0) .. last response (330 ms), not the window
    assert m.duration_s == pytest.approx(0.33)
    assert m.request_throughput == pytest.approx(2 / 0.33)
    assert m.e2el.mean == pytest.approx(240)


def test_llmperf_definitions_by_hand() -> None:
    m = serving_metrics(_records(), "llmperf", windows=WINDOW)
    # E2E to stream close: 210, 290
    assert m.e2el.mean == pytest.approx(250)
    # ITL includes TTFT, over all tokens: a 200/4, b (330-50)/2
    assert m.itl.mean == pytest.approx((50 + 140) / 2)
    assert m.ttft.std == pytest.approx(math.sqrt(2) * 50)  # sample std (ddof=1)
    assert m.duration_s == pytest.approx(0.4)


def test_definitions_differ_only_where_documented() -> None:
    v, g, lp = (
        serving_metrics(_records(), d, windows=WINDOW) for d in ("vllm", "genai-perf", "llmperf")
    )
    assert v.ttft.mean == g.ttft.mean == lp.ttft.mean
    assert v.tpot.mean == g.tpot.mean == lp.tpot.mean
    assert len({v.itl.mean, g.itl.mean, lp.itl.mean}) == 3


def test_itl_per_token_divides_each_gap_by_the_tokens_that_ended_it() -> None:
    m = serving_metrics(_records(), "vllm", windows=WINDOW)
    # a: gaps 50 (1 token), 50 (2 tokens: 25 each); b: gap 80 (1 token)
    assert m.itl.count == 3 and m.itl.mean == pytest.approx(60)  # per chunk
    assert (m.itl_per_token.median, m.itl_per_token.max) == (37.5, 80)  # of 25 25 50 80
    assert m.itl_per_token.count == 4
    assert m.itl_per_token.mean == pytest.approx((50 + 25 + 25 + 80) / 4)
    assert m.tokens_per_chunk == pytest.approx(4 / 3)
    assert m.itl_per_token.mean == pytest.approx(m.itl.mean / m.tokens_per_chunk)
    summary = m.to_dict()
    assert summary["itl_per_token_ms"]["count"] == 4 and summary["tokens_per_chunk"] == 4 / 3
    # one token per chunk: the two are the same
    ones = [RequestRecord("x", 0, 90 * MS, [10 * MS, 30 * MS, 70 * MS], [1, 1, 1])]
    single = serving_metrics(ones, "vllm")
    assert single.itl_per_token.to_dict() == single.itl.to_dict()
    assert single.tokens_per_chunk == 1


def test_usage_count_overrides_chunk_count() -> None:
    r = RequestRecord("u", 0, 100 * MS, [10 * MS, 100 * MS], [1, 1], output_tokens=10)
    m = serving_metrics([r])
    assert m.tpot.mean == pytest.approx(90 / 9)
    assert m.output_tokens == 10
    assert m.input_tokens_unknown == 1 and m.to_dict()["input_tokens_unknown"] == 1


def test_single_token_output_has_no_tpot_but_counts() -> None:
    r = RequestRecord("one", 0, 20 * MS, [20 * MS], [1])
    m = serving_metrics([r], slo="tpot=1ms")
    assert m.completed == 1 and m.tpot.count == 0 and math.isnan(m.tpot.mean)
    assert m.good_requests == 1  # TPOT of a 1-token output counts as 0 (as vLLM does)


def test_goodput_by_hand() -> None:
    m = serving_metrics(_records(), "vllm", slo="ttft=150ms,tpot=50ms", windows=WINDOW)
    assert m.good_requests == 1  # a: ttft 100, tpot 33.3; b: ttft 200 fails
    assert m.goodput == pytest.approx(1 / 0.4)
    m2 = serving_metrics(_records(), "vllm", slo="ttft=0.25s", windows=WINDOW)
    assert m2.good_requests == 2


def test_phase_breakdown() -> None:
    r = RequestRecord(
        "p", 0, 100 * MS, [40 * MS, 100 * MS], [1, 1],
        phases=[("queue", 0), ("prefill", 10 * MS), ("decode", 30 * MS), ("queue", 50 * MS),
                ("decode", 60 * MS)],
    )  # fmt: skip
    m = serving_metrics([r])
    assert m.phases["queue"].mean == pytest.approx(20)
    assert m.phases["prefill"].mean == pytest.approx(20)
    assert m.phases["decode"].mean == pytest.approx(60)  # 30..50 + 60..100
    assert list(m.per_request["queue_ns"]) == [20 * MS]


def test_ok_request_without_tokens_is_counted_not_measured() -> None:
    r = RequestRecord("empty", 0, 10 * MS)
    m = serving_metrics([r])
    assert m.completed == 0 and m.errors == {"no_tokens": 1}


def test_peak_concurrency_touching_intervals() -> None:
    recs = [RequestRecord(str(i), i * 10, i * 10 + 10, [i * 10 + 5], [1]) for i in range(5)]
    assert peak_concurrency(recs) == 1  # [s, e): back-to-back requests never overlap
    assert peak_concurrency([]) == 0


def test_parse_slo_units_and_errors() -> None:
    assert parse_slo("ttft=200ms, tpot=50, e2el=2s, itl=500us") == {
        "ttft": 200.0, "tpot": 50.0, "e2el": 2000.0, "itl": 0.5,
    }  # fmt: skip
    with pytest.raises(UsageError, match="unknown metric"):
        parse_slo("latency=5ms")
    with pytest.raises(UsageError, match="cannot read"):
        parse_slo("ttft=fast")
    with pytest.raises(UsageError, match="pooled"):
        serving_metrics(_records(), "vllm", slo="itl=5ms")
    with pytest.raises(UsageError, match="unknown definition"):
        serving_metrics(_records(), "tgi")


def test_stats_against_numpy_on_random_records() -> None:
    rng = np.random.default_rng(1)
    recs = []
    for i in range(200):
        s = int(rng.integers(0, 10**9))
        gaps = rng.integers(1, 50 * MS, size=int(rng.integers(1, 20)))
        chunks = list(s + np.cumsum(gaps))
        recs.append(
            RequestRecord(
                str(i), s, int(chunks[-1]) + 5, [int(c) for c in chunks], [1] * len(chunks)
            )
        )
    m = serving_metrics(recs)
    ttft = np.array([r.chunk_ns[0] - r.start_ns for r in recs]) / MS
    assert m.ttft.p99 == pytest.approx(np.percentile(ttft, 99))
    gaps_all = np.concatenate([np.diff(r.chunk_ns) for r in recs]) / MS
    assert m.itl.count == gaps_all.size
    assert m.itl.p95 == pytest.approx(np.percentile(gaps_all, 95))


def test_prompts_are_deterministic_and_sized() -> None:
    from pytimings.serving.loadgen import build_prompt

    a = build_prompt(100, np.random.default_rng([7, 0]))
    b = build_prompt(100, np.random.default_rng([7, 0]))
    c = build_prompt(100, np.random.default_rng([8, 0]))
    assert a == b and a != c
    assert len(a.split()) == 100
