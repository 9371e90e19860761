"""Engine metrics: the exposition parser over prometheus_client's own output, the concept
table, counters as rates and increases, histogram quantiles, findings' statistics."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from pytimings.errors import TraceFormatError
from pytimings.serving.engine import (
    CONCEPTS,
    default_url,
    engine_series,
    histogram_quantile,
    merge_engines,
    parse_exposition,
)
from pytimings.serving.findings import spearman


def _registry() -> tuple[CollectorRegistry, dict[str, object]]:
    reg = CollectorRegistry()
    m: dict[str, object] = {
        "running": Gauge("sglang:num_running_reqs", "r", ["model_name", "dp"], registry=reg),
        "kv": Gauge("vllm:kv_cache_usage_perc", "kv", ["engine"], registry=reg),
        "gen": Counter("vllm:generation_tokens", "g", registry=reg),
        "pre": Counter("sglang:num_retracted_requests", "p", registry=reg),
        "hits": Counter("vllm:prefix_cache_hits", "h", registry=reg),
        "queries": Counter("vllm:prefix_cache_queries", "q", registry=reg),
        "prefill": Histogram(
            "tgi_batch_inference_duration", "t", ["method"], registry=reg, buckets=(0.1, 0.2, 0.4)
        ),
        "other": Gauge("my_engine_thing", "x", ["gpu"], registry=reg),
    }
    return reg, m


def test_names_map_to_concepts_and_label_sets_combine() -> None:
    reg, m = _registry()
    m["running"].labels("a", "0").set(3)  # type: ignore[attr-defined]
    m["running"].labels("a", "1").set(4)  # type: ignore[attr-defined]
    m["kv"].labels("0").set(0.5)  # type: ignore[attr-defined]
    m["kv"].labels("1").set(0.9)  # type: ignore[attr-defined]
    m["gen"].inc(10)  # type: ignore[attr-defined]
    m["other"].labels("0").set(7)  # type: ignore[attr-defined]
    m["prefill"].labels("prefill").observe(0.15)  # type: ignore[attr-defined]
    m["prefill"].labels("decode").observe(0.3)  # type: ignore[attr-defined]
    snap = parse_exposition(generate_latest(reg).decode())
    assert snap.gauges["running"] == 7  # counts are summed over label sets
    assert snap.gauges["kv_cache_usage"] == pytest.approx(0.7)  # fractions averaged
    # the _total suffix is the counter's; kept per label set (here one, without labels)
    assert snap.counters["generation_tokens"] == {"vllm:generation_tokens": 10}
    assert snap.gauges['my_engine_thing{gpu="0"}'] == 7  # unknown: its own name and labels
    for concept, method in (("prefill_time", "prefill"), ("decode_time", "decode")):
        key = f'tgi_batch_inference_duration{{method="{method}"}}'
        assert snap.histograms[concept][key][2] == 1
    assert not any(k.endswith("_created") for k in snap.gauges)
    for names in CONCEPTS.values():
        assert all(not n.split("|")[0].endswith("_total") for n in names)
    with pytest.raises(ValueError):
        parse_exposition("<html><body>not metrics</body></html>")
    assert default_url("http://h:8000/v1") == "http://h:8000/metrics"


def test_counters_become_rates_and_histograms_interval_quantiles() -> None:
    reg, m = _registry()
    snaps = []
    observed: list[list[float]] = [[], [0.05, 0.15, 0.15, 0.3], [], [0.35]]
    for k, obs in enumerate(observed):
        m["gen"].inc(100 * k)  # type: ignore[attr-defined]
        m["hits"].inc(3 * k)  # type: ignore[attr-defined]
        m["queries"].inc(4 * k)  # type: ignore[attr-defined]
        for v in obs:
            m["prefill"].labels("prefill").observe(v)  # type: ignore[attr-defined]
        snaps.append((k * 500_000_000, parse_exposition(generate_latest(reg).decode())))
    out = engine_series(snaps)
    s = out["series"]
    # increases 100, 200, 300 over 0.5 s each
    assert s["generation_tokens"] == [[5e8, 200.0], [1e9, 400.0], [1.5e9, 600.0]]
    assert out["counters"]["generation_tokens"] == 600
    assert [v for _, v in s["prefix_cache_hit_rate"]] == pytest.approx([0.75] * 3)
    # interval 2: 4 observations; Prometheus' rule: rank 2 of 4 -> in (0.1, 0.2], at 1/2
    assert [t for t, _ in s["prefill_time_p50"]] == [5e8, 1.5e9]  # no point without data
    assert s["prefill_time_p50"][0][1] == pytest.approx(0.1 + 0.1 * (2 - 1) / 2)
    assert s["prefill_time_mean"][0][1] == pytest.approx(np.mean(observed[1]))
    assert s["prefill_time_p99"][1][1] == pytest.approx(0.2 + 0.2 * 0.99)  # 0.35 in (0.2, 0.4]
    assert out["spec_decode"] is None
    # over the level: every observation made between the first scrape and the last
    level = [v for obs in observed[1:] for v in obs]
    prefill = out["histograms"]["prefill_time"]
    assert prefill["count"] == len(level)
    assert prefill["mean"] == pytest.approx(np.mean(level))


def test_a_reset_counter_and_merging_pooled_levels() -> None:
    reg, m = _registry()
    m["pre"].inc(5)  # type: ignore[attr-defined]
    a = parse_exposition(generate_latest(reg).decode())
    reg2, m2 = _registry()
    m2["pre"].inc(2)  # type: ignore[attr-defined]
    b = parse_exposition(generate_latest(reg2).decode())  # the engine restarted
    out = engine_series([(0, a), (10**9, b)])
    assert out["counters"]["preemptions"] == 2
    e1 = {
        "url": "u",
        "scrapes": 2,
        "failed_scrapes": 1,
        "series": {"x": [[5, 1.0]]},
        "counters": {"spec_draft_tokens": 8.0, "spec_accepted_tokens": 4.0, "spec_drafts": 2.0},
        "histograms": {"queue_time": {"count": 2.0, "sum": 1.0, "mean": 0.5}},
    }
    e2 = {**e1, "series": {"x": [[1, 2.0]]},
          "histograms": {"queue_time": {"count": 6.0, "sum": 1.0, "mean": 1 / 6}}}  # fmt: skip
    merged = merge_engines([e1, e2])
    assert merged is not None and merged["scrapes"] == 4 and merged["series"]["x"][0] == [1, 2.0]
    assert merged["histograms"]["queue_time"] == {"count": 8.0, "sum": 2.0, "mean": 0.25}
    sd = merged["spec_decode"]
    assert sd["draft_tokens"] == 16 and sd["acceptance_rate"] == 0.5
    assert sd["mean_acceptance_length"] == 1 + 8 / 4
    assert merge_engines([e1, None]) is None


def test_quantile_and_spearman_against_direct_computations() -> None:
    buckets = {1.0: 2.0, 2.0: 6.0, math.inf: 8.0}
    assert histogram_quantile(0.5, buckets) == pytest.approx(1 + (4 - 2) / 4)
    assert math.isnan(histogram_quantile(0.5, {1.0: 0.0, math.inf: 0.0}))
    assert histogram_quantile(0.5, {1.0: 0.0, math.inf: 2.0}) == 1.0  # +Inf: the last bound
    rng = np.random.default_rng(1)
    x = rng.integers(0, 5, 40).astype(float)  # ties
    y = x + rng.normal(0, 1, 40)

    def rank(v: np.ndarray) -> np.ndarray:  # average ranks, by definition
        return np.array([np.sum(v < a) + (np.sum(v == a) - 1) / 2 for a in v])

    want = np.corrcoef(rank(x), rank(y))[0, 1]
    assert spearman(x, y) == pytest.approx(want)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_schema_1_files_still_load_without_engine(tmp_path: Path) -> None:
    import json

    from pytimings.serving.runfile import load_run

    rec = {"id": "a", "start_ns": 0, "end_ns": 30, "chunk_ns": [10, 20, 30],
           "chunk_tokens": [1, 1, 1], "input_tokens": 3, "output_tokens": 3}  # fmt: skip
    level = {"concurrency": 1, "rate": None, "warmup": {"requests": 0, "errors": {}},
             "rounds": [{"round": 0, "start_ns": 0, "end_ns": 40, "errors": {}, "summary": {},
                         "requests": [rec]}], "summary": {}}  # fmt: skip
    for schema, engine in (("pytimings.serving/1", None), ("pytimings.serving/2", "bad")):
        p = tmp_path / "r.json"
        lv = dict(level) if engine is None else {**level, "engine": {"scrapes": -1}}
        p.write_text(json.dumps({"schema": schema, "config": {}, "levels": [lv]}))
        if engine is None:
            run = load_run(p)
            assert run.fmt == schema and run.levels[0].engine is None
        else:
            with pytest.raises(TraceFormatError, match="malformed run file"):
                load_run(p)


def _dp_exposition(tokens: tuple[float, float], queue_counts: tuple[int, int]) -> str:
    """Two data-parallel engines (label engine="0"/"1"), as vLLM exposes them: their
    generated tokens and a queue-time histogram (all observations of 0.05 s)."""
    lines = ["# TYPE vllm:generation_tokens counter"]
    lines += [f'vllm:generation_tokens_total{{engine="{e}"}} {v}' for e, v in enumerate(tokens)]
    lines.append("# TYPE vllm:request_queue_time_seconds histogram")
    for e, n in enumerate(queue_counts):
        for le, c in (("0.1", n), ("+Inf", n)):
            lines.append(f'vllm:request_queue_time_seconds_bucket{{engine="{e}",le="{le}"}} {c}')
        lines.append(f'vllm:request_queue_time_seconds_sum{{engine="{e}"}} {0.05 * n}')
        lines.append(f'vllm:request_queue_time_seconds_count{{engine="{e}"}} {n}')
    return "\n".join(lines) + "\n"


def test_one_engine_of_two_restarting_counts_what_was_generated() -> None:
    # engine 1 restarts between the scrapes: its counter falls from 1,000,000 to 15; engine 0
    # went on from 500 to 517. Generated in between: 17 + 15 = 32 tokens, 3 + 2 queued.
    before = parse_exposition(_dp_exposition((500, 1_000_000), (40, 7000)))
    after = parse_exposition(_dp_exposition((517, 15), (43, 2)))
    out = engine_series([(0, before), (10**9, after)])
    assert out["counters"]["generation_tokens"] == 32  # summed first: +1,000,047 - ...
    assert out["series"]["generation_tokens"] == [[10**9, 32.0]]
    assert out["series"]["queue_time_mean"] == [[10**9, pytest.approx(0.05)]]
    assert out["series"]["queue_time_p99"][0][1] <= 0.1


def test_non_finite_samples_are_left_out_and_counted(tmp_path: Path) -> None:
    text = (
        "# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total {v}\n"
        "# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total {p}\n"
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running +Inf\n"
    )
    snaps = [
        (0, parse_exposition(text.format(v=10, p=5))),
        (10**9, parse_exposition(text.format(v="NaN", p=9))),
        (2 * 10**9, parse_exposition(text.format(v=30, p=12))),
    ]
    assert snaps[1][1].non_finite == 2 and "generation_tokens" not in snaps[1][1].counters
    out = engine_series(snaps)
    # the NaN scrape is skipped, not a reset to 0 (which would count 30)
    assert out["counters"] == {"generation_tokens": 20.0, "prompt_tokens": 7.0}
    assert out["left_out"] == {"non_finite": 4, "over_cap": 0}
    assert all(math.isfinite(v) for pts in out["series"].values() for _, v in pts)
    huge = parse_exposition(text.format(v=1.7e308, p=1))
    reset = parse_exposition(text.format(v=1.6e308, p=1))  # a reset: +1.6e308 twice
    out = engine_series([(0, huge), (10**9, reset), (2 * 10**9, huge), (3 * 10**9, reset)])
    assert "generation_tokens" not in out["counters"] and out["left_out"]["non_finite"] == 5


def test_high_cardinality_is_capped_and_counted() -> None:
    import time

    from pytimings.serving.engine import MAX_OTHER_SERIES

    n = 100_000
    text = (
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"
        "# HELP per_request_latency one series per request id\n"
        "# TYPE per_request_latency gauge\n"
        + "".join(f'per_request_latency{{id="{i}"}} {i}\n' for i in range(n))
        + "# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total 7\n"
    )
    t0 = time.perf_counter()
    snap = parse_exposition(text)
    took = time.perf_counter() - t0
    assert snap.over_cap == n and snap.gauges == {"running": 3.0}
    assert snap.counters == {"generation_tokens": {"vllm:generation_tokens": 7.0}}
    assert took < 2.0, took  # the parser over 100,000 series: ~4 s and a key per series
    few = "".join(f'other_metric{{id="{i}"}} 1\n' for i in range(MAX_OTHER_SERIES))
    assert len(parse_exposition(few).gauges) == MAX_OTHER_SERIES  # at the cap: all kept
    # a concept's own series are kept per label set: past MAX_CONCEPT_SERIES, no exposition
    per_request = "".join(f'vllm:generation_tokens_total{{id="{i}"}} 1\n' for i in range(n))
    with pytest.raises(ValueError, match="100,000 series of the concept table's metrics"):
        parse_exposition(per_request)
