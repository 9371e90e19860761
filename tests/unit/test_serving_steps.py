"""Engine steps read from vLLM's step annotations, and the step-time fit, on planted steps."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.synth import make_trace

from pytimings.model.trace import RangeKind
from pytimings.serving.steps import engine_steps, fit_step_time

# planted: 2 ms base, 10 us per prefill token, 150 us per decode token
BASE, PER_TOKEN, PER_DECODE = 2_000_000, 10_000, 150_000


def _step(start: int, prefill: tuple[int, int], decode: int, drafts: int = 0) -> dict[str, object]:
    duration = BASE + PER_TOKEN * prefill[1] + PER_DECODE * decode * (1 + drafts)
    name = (
        f"execute_context_{prefill[0]}({prefill[1]})_generation_{decode}({decode * (1 + drafts)})"
    )
    return {"start": start, "end": start + duration, "name": name, "kind": RangeKind.ANNOTATION}


def test_steps_by_batch_shape_and_the_planted_line_back() -> None:
    rng = np.random.default_rng(0)
    shapes = [((int(p > 0), int(p)), int(m)) for p, m in zip(
        rng.choice([0, 0, 0, 33, 66, 192], 60), rng.integers(1, 17, 60), strict=True)]  # fmt: skip
    steps = [_step(i * 10**8, prefill, decode, drafts=i % 4) for i, (prefill, decode) in
             enumerate(shapes)]  # fmt: skip
    other = {"start": 5, "end": 9, "name": "execute_model", "kind": RangeKind.ANNOTATION}
    trace = make_trace([], ranges=[*reversed(steps), other])  # not in time order; a non-step
    table = engine_steps(trace)
    assert len(table) == 60
    assert list(table["start_ns"]) == sorted(s["start"] for s in steps)  # type: ignore[type-var]
    assert list(table["prefill_tokens"]) == [p[1] for p, _ in shapes]
    assert list(table["decode_requests"]) == [m for _, m in shapes]
    assert list(table["decode_tokens"]) == [m * (1 + i % 4) for i, (_, m) in enumerate(shapes)]
    model = fit_step_time(table)
    assert model.base_ns == pytest.approx(BASE)
    assert model.per_prefill_token_ns == pytest.approx(PER_TOKEN)
    assert model.per_decode_token_ns == pytest.approx(PER_DECODE)
    assert model.residual_std_ns == pytest.approx(0, abs=1e-3)
    # a level of 16 decoding with 64-token prompts and 64 output tokens: a step carries 16
    # decode requests and, spread, 16 prompts of 64 tokens per 64 steps
    level = model.decode_level(32, 16, 64, 64)
    step_ns = BASE + PER_TOKEN * 16 + PER_DECODE * 16
    assert level["tpot_ms"] == pytest.approx(step_ns / 1e6)
    assert level["output_throughput"] == pytest.approx(16 / (step_ns / 1e9))
    # speculation: 4 tokens run per request a step, 2 kept: 32 steps a request
    spec = model.decode_level(32, 16, 64, 64, tokens_per_step=2, decode_tokens_per_request=4)
    spec_step_ns = BASE + PER_TOKEN * 16 * 64 / 32 + PER_DECODE * 16 * 4
    assert spec["tpot_ms"] == pytest.approx(spec_step_ns / 2 / 1e6)


def test_a_fit_needs_steps_and_leaves_an_unvaried_shape_at_zero() -> None:
    decode_only = make_trace([], ranges=[_step(i * 10**8, (0, 0), m) for i, m in
                                         enumerate([1, 2, 4, 8])])  # fmt: skip
    model = fit_step_time(engine_steps(decode_only))
    assert model.per_prefill_token_ns == 0
    assert model.per_decode_token_ns == pytest.approx(PER_DECODE)
    with pytest.raises(ValueError, match="2 engine steps"):
        fit_step_time(engine_steps(make_trace([], ranges=[_step(0, (0, 0), 1)] * 2)))
