"""An engine's steps from its profiler trace, by batch shape, and a step-time model fitted on them.

vLLM's worker names each engine step's ``user_annotation``
``execute_context_<N>(<T>)_generation_<M>(<D>)``: N requests in prefill with T prompt
tokens between them, M requests in decode with D tokens (D = M without speculation; with
it each decode request also runs its draft tokens: 8 requests with 3 ngram drafts each
are ``generation_8(32)``). :func:`engine_steps` reads them from a loaded trace
(``pytimings.load``: Kineto JSON of ``/start_profile`` .. ``/stop_profile``) into a table,
one row per step: ``start_ns``, ``duration_ns``, ``prefill_requests``, ``prefill_tokens``,
``decode_requests``, ``decode_tokens``. Ranges with other names are not steps.

:func:`fit_step_time` fits, by least squares, step time = ``base`` + ``per_prefill_token``
x T + ``per_decode_token`` x D over those steps (the first brick of a predictor: a line
through one trace's steps, its residual spread reported beside it, never exact).
:meth:`StepTimeModel.decode_level` predicts a closed-loop level from it: with B = min(C,
the batch limit) requests decoding, each running ``decode_tokens_per_request`` tokens a step
(1 + its drafts) and keeping ``tokens_per_step`` of them, each step also carries the
prefill of the requests that start meanwhile (B x prompt tokens spread over a request's
steps), so TPOT = step time / tokens per step and output throughput = B x tokens per step /
step time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from pytimings.model.trace import RangeKind, Trace
from pytimings.table import Table

STEP_NAME = re.compile(r"^execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)$")


def engine_steps(trace: Trace) -> Table:
    """One row per engine step annotation of ``trace``, in time order (see the module doc)."""
    ranges = trace.ranges
    parsed: dict[int, tuple[int, int, int, int]] = {}
    for name_id in np.unique(ranges["name"]):
        match = STEP_NAME.match(trace.strings[int(name_id)])
        if match is not None:
            parsed[int(name_id)] = (
                int(match.group(1)), int(match.group(2)),
                int(match.group(3)), int(match.group(4)),
            )  # fmt: skip
    keep = (ranges["kind"] == RangeKind.ANNOTATION) & np.isin(ranges["name"], list(parsed))
    rows = ranges.take(np.flatnonzero(keep))
    order = np.argsort(rows["start"], kind="stable")
    shapes = np.array([parsed[int(n)] for n in rows["name"][order]], np.int64).reshape(-1, 4)
    return Table(
        {
            "start_ns": rows["start"][order],
            "duration_ns": (rows["end"] - rows["start"])[order],
            "prefill_requests": shapes[:, 0],
            "prefill_tokens": shapes[:, 1],
            "decode_requests": shapes[:, 2],
            "decode_tokens": shapes[:, 3],
        }
    )


@dataclass(frozen=True)
class StepTimeModel:
    """step time (ns) = base + per_prefill_token x T + per_decode_token x D."""

    base_ns: float
    per_prefill_token_ns: float
    per_decode_token_ns: float
    steps: int
    residual_std_ns: float  # spread of the fitted steps' times around the line

    def step_ns(self, prefill_tokens: float, decode_tokens: float) -> float:
        return (
            self.base_ns
            + self.per_prefill_token_ns * prefill_tokens
            + self.per_decode_token_ns * decode_tokens
        )

    def decode_level(
        self, concurrency: int, batch_limit: int, input_tokens: int, output_tokens: int,
        tokens_per_step: float = 1.0, decode_tokens_per_request: float = 1.0,
    ) -> dict[str, float]:  # fmt: skip
        """Predicted TPOT (ms) and output throughput (tokens/s) of a closed-loop level."""
        batch = min(concurrency, batch_limit)
        steps_per_request = max(output_tokens / tokens_per_step, 1.0)
        prefill = batch * input_tokens / steps_per_request
        step = self.step_ns(prefill, batch * decode_tokens_per_request)
        return {
            "batch": float(batch),
            "step_ms": step / 1e6,
            "tpot_ms": step / tokens_per_step / 1e6,
            "output_throughput": batch * tokens_per_step / (step / 1e9),
        }

    def to_dict(self) -> dict[str, float | int]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def fit_step_time(steps: Table) -> StepTimeModel:
    """Least-squares :class:`StepTimeModel` over ``steps`` (from :func:`engine_steps`); a
    shape the steps never vary (e.g. no prefill in any step) gets coefficient 0."""
    if len(steps) < 3:
        raise ValueError(f"{len(steps)} engine steps: a step-time fit needs at least 3")
    y = steps["duration_ns"].astype(np.float64)
    columns = [np.ones(len(steps))]
    names = ["prefill_tokens", "decode_tokens"]
    used = [n for n in names if np.ptp(steps[n]) > 0]
    columns += [steps[n].astype(np.float64) for n in used]
    design = np.column_stack(columns)
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    fitted = dict(zip(used, coef[1:], strict=True))
    residual = y - design @ coef
    return StepTimeModel(
        base_ns=float(coef[0]),
        per_prefill_token_ns=float(fitted.get("prefill_tokens", 0.0)),
        per_decode_token_ns=float(fitted.get("decode_tokens", 0.0)),
        steps=len(steps),
        residual_std_ns=float(np.std(residual)),
    )
