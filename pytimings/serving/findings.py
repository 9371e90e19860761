"""Serving findings: what the engine's own metrics say about a run's latency.

Each finding names its ``layer`` (``queueing``, ``kv_cache``, ``prefix_cache``,
``speculative``, ``saturation``), a ``title`` that says it in one line, and the
``evidence`` behind it (the numbers, so a reader can check the claim). Rules:

* queueing (per run): Spearman's rho between each measured request's TTFT and the engine's
  ``waiting`` gauge during its wait for the first token (the scrapes between its send and
  its first token; without one, the scrape nearest the middle), over all levels; at rho >=
  0.5, a finding for each level where ``waiting`` reached 1: the requests queue (``running``
  peak in the evidence). Whether the engine is at its batch limit is said only from the
  limit the engine reports (its ``batch_limit`` metric), never from the load's concurrency.
* kv_cache (per level): KV-cache usage >= 95% in at least 10% of the level's scrapes, or any
  preemption counted: the batch size is bounded by memory.
* prefix_cache (per level): the engine's prefix-cache hit rate (its gauge, or vLLM V1's
  hits over queries), with the level's TTFT p50.
* speculative (per level): the acceptance rate and tokens per verify step of the level's
  ``spec_decode``; across an A/B (``compare``) where one side decodes speculatively and the
  other does not: the TPOT gain (off / on) against what the acceptance promises (tokens
  per verify step: the gain if a verify step cost one plain decode step).
* saturation (per run, from a sweep's levels): each level past saturation
  (:mod:`pytimings.serving.saturation`).

The list is open: a rule is a function from a labelled run (or the sweeps) to findings, and
``RUN_RULES`` holds those applied to every run, so another layer's rules (e.g. hardware
telemetry) append to it and land in the same ``findings`` list of ``compare --json``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.console.text import duration_ms
from pytimings.serving.metrics import ServingMetrics, measured, serving_metrics
from pytimings.serving.runfile import Level, Run
from pytimings.serving.saturation import RULE as SATURATION_RULE
from pytimings.serving.saturation import past_saturation

RHO_MIN = 0.5
KV_FULL = 0.95
KV_SHARE = 0.10


@dataclass(frozen=True)
class Finding:
    layer: str
    title: str
    evidence: dict[str, Any] = field(default_factory=dict)
    label: str | None = None
    concurrency: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"layer": self.layer, "title": self.title, "label": self.label,
                "concurrency": self.concurrency, "evidence": dict(self.evidence)}  # fmt: skip


def spearman(x: npt.ArrayLike, y: npt.ArrayLike) -> float:
    """Spearman's rank correlation (ties get their average rank); NaN when either side is
    constant or there are fewer than 3 pairs."""
    a, b = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if a.size < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(np.corrcoef(_ranks(a), _ranks(b))[0, 1])


def _ranks(v: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    order = np.argsort(v, kind="stable")
    ranks = np.empty(v.size)
    ranks[order] = np.arange(v.size, dtype=np.float64)
    _, inv, counts = np.unique(v, return_inverse=True, return_counts=True)
    sums = np.bincount(inv, weights=ranks)
    return (sums / counts)[inv]


def _engine(level: Level, key: str, default: Any = None) -> Any:
    """What the engine's metrics of ``level`` say under ``key`` (``default``: nothing)."""
    return (level.engine or {}).get(key, default)


def _series(level: Level, name: str) -> npt.NDArray[np.float64]:
    pts = _engine(level, "series", {}).get(name, [])
    return np.asarray(pts, np.float64).reshape(-1, 2)


def _metrics(level: Level, definition: str) -> ServingMetrics:
    """The level's serving metrics over all its rounds' records."""
    return serving_metrics([r for rd in level.rounds for r in rd.records], definition)


def _at(layer: str, level: Level, title: str, evidence: dict[str, Any], label: str) -> Finding:
    """A finding about one concurrency level: its title says the level first."""
    return Finding(layer, f"at c={level.concurrency}, {title}", evidence, label, level.concurrency)


def _waiting_during(pts: npt.NDArray[np.float64], start: int, first: int) -> float:
    t = pts[:, 0]
    inside = (t >= start) & (t <= first)
    if inside.any():
        return float(pts[inside, 1].max())
    return float(pts[int(np.argmin(np.abs(t - (start + first) / 2))), 1])


def queueing(label: str, run: Run, definition: str) -> list[Finding]:
    ttft: list[float] = []
    waiting: list[float] = []
    per_level = []
    for lv in run.levels:
        pts = _series(lv, "waiting")
        if not pts.size:
            continue
        recs = [r for rd in lv.rounds for r in measured(rd.records)]
        t = [(r.chunk_ns[0] - r.start_ns) / 1e6 for r in recs]
        w = [_waiting_during(pts, r.start_ns, r.chunk_ns[0]) for r in recs]
        ttft += t
        waiting += w
        per_level.append((lv, t, pts))
    rho = spearman(ttft, waiting)
    if not rho >= RHO_MIN:
        return []
    out = []
    for lv, t, pts in per_level:
        if not t or pts[:, 1].max() < 1:
            continue
        running = _series(lv, "running")
        peak = float(running[:, 1].max()) if running.size else None
        limits = _series(lv, "batch_limit")
        limit = float(limits[:, 1].max()) if limits.size else None
        p99 = float(np.percentile(t, 99))
        out.append(_at(
            "queueing", lv,
            f"TTFT p99 {duration_ms(p99)} rises with `waiting` (Spearman rho {rho:.2f}): requests "
            f"queue (up to {pts[:, 1].max():g} waiting"
            + (f", at most {peak:g} running)" if peak is not None else ")")
            + _limit_text(peak, limit),
            {"spearman_rho": rho, "waiting_max": float(pts[:, 1].max()),
             "waiting_mean": float(pts[:, 1].mean()), "running_max": peak,
             "batch_limit": limit, "at_batch_limit": _at_limit(peak, limit),
             "ttft_p99_ms": p99, "requests": len(t), "pairs_over_run": len(ttft)},
            label,
        ))  # fmt: skip
    return out


def _at_limit(peak: float | None, limit: float | None) -> bool | None:
    """Whether the running peak reached the engine's own batch limit (its metric); None
    where either is unknown (the concurrency is no limit of the engine's)."""
    return None if peak is None or limit is None else peak >= limit


def _limit_text(peak: float | None, limit: float | None) -> str:
    """What a queueing title says of the batch limit: only what the engine reports."""
    at = _at_limit(peak, limit)
    if at is None:
        return "; the engine reports no batch limit, so none is claimed"
    if at:
        return f"; the engine is at its batch limit ({limit:g})"
    return f"; below the engine's batch limit ({limit:g}): the queue is not the batch's"


def kv_cache(label: str, run: Run, definition: str) -> list[Finding]:
    out = []
    for lv in run.levels:
        kv = _series(lv, "kv_cache_usage")
        pre = _engine(lv, "counters", {}).get("preemptions")
        share = float((kv[:, 1] >= KV_FULL).mean()) if kv.size else 0.0
        if share < KV_SHARE and not pre:
            continue
        pre_text = f", {pre:g} preemptions" if pre is not None else ""
        out.append(_at(
            "kv_cache", lv,
            f"KV cache >= {KV_FULL:.0%} for {share:.0%} of the level{pre_text}: memory-bound "
            "batch size",
            {"kv_full_share": share, "kv_usage_max": float(kv[:, 1].max()) if kv.size else None,
             "preemptions": pre, "scrapes": int(kv.shape[0])},
            label,
        ))  # fmt: skip
    return out


def prefix_cache(label: str, run: Run, definition: str) -> list[Finding]:
    out = []
    for lv in run.levels:
        c = _engine(lv, "counters", {})
        pts = _series(lv, "prefix_cache_hit_rate")
        if c.get("prefix_cache_queries"):
            rate = c.get("prefix_cache_hits", 0.0) / c["prefix_cache_queries"]
        elif pts.size:
            rate = float(pts[:, 1].mean())
        else:
            continue
        m = _metrics(lv, definition)
        out.append(_at(
            "prefix_cache", lv,
            f"the prefix cache served {rate:.0%} of prompt tokens looked up (TTFT p50 "
            f"{duration_ms(m.ttft.median)})",
            {"hit_rate": rate, "ttft_p50_ms": m.ttft.median,
             "prompt_tokens": c.get("prompt_tokens")},
            label,
        ))  # fmt: skip
    return out


def speculative(label: str, run: Run, definition: str) -> list[Finding]:
    out = []
    for lv in run.levels:
        sd = _engine(lv, "spec_decode")
        if not sd:
            continue
        mal = sd.get("mean_acceptance_length")
        steps = f": {mal:.2f} tokens per verify step" if mal is not None else ""
        out.append(_at(
            "speculative", lv,
            f"speculative decoding accepts {sd['acceptance_rate']:.0%} of draft tokens{steps}",
            dict(sd), label,
        ))  # fmt: skip
    return out


RunRule = Callable[[str, Run, str], list[Finding]]
# every rule applied to each labelled run; other layers append theirs
RUN_RULES: list[RunRule] = [queueing, kv_cache, prefix_cache, speculative]


def run_findings(label: str, run: Run, definition: str) -> list[Finding]:
    return [f for rule in RUN_RULES for f in rule(label, run, definition)]


def saturation(label: str, levels: Sequence[Mapping[str, Any]]) -> list[Finding]:
    """Each level of a sweep (rows with concurrency, throughput, ttft_p50) past saturation."""
    out = []
    for prev, cur in itertools.pairwise(levels):
        if past_saturation(prev, cur):
            gain = cur["throughput"] / prev["throughput"] - 1
            out.append(Finding(
                "saturation",
                f"at c={cur['concurrency']}, output throughput {gain:+.0%} over "
                f"c={prev['concurrency']} while TTFT p50 x{cur['ttft_p50'] / prev['ttft_p50']:.1f}"
                ": past saturation, more load only queues",
                {"rule": SATURATION_RULE, "previous": prev["concurrency"],
                 "throughput": [prev["throughput"], cur["throughput"]],
                 "ttft_p50_ms": [prev["ttft_p50"], cur["ttft_p50"]]},
                label, int(cur["concurrency"]),
            ))  # fmt: skip
    return out


def speculative_ab(
    base_label: str, base: Run, label: str, other: Run, definition: str
) -> list[Finding]:
    """At each level both ran where exactly one decodes speculatively: did TPOT gain what
    the acceptance promises?"""
    out = []
    for la in base.levels:
        lb = other.level(la.concurrency)
        if lb is None:
            continue
        sa, sb = (_engine(x, "spec_decode") for x in (la, lb))
        if bool(sa) == bool(sb):
            continue
        on, off, on_label = (lb, la, label) if sb else (la, lb, base_label)
        sd = sb or sa
        assert sd is not None
        promise = sd.get("mean_acceptance_length")
        t_on, t_off = (_metrics(x, definition).tpot.mean for x in (on, off))
        if promise is None or not t_on > 0:
            continue
        gain = t_off / t_on
        out.append(_at(
            "speculative", la,
            f"TPOT gained x{gain:.2f} with speculative decoding ({on_label}) of the "
            f"x{promise:.2f} its acceptance promises ({gain / promise:.0%} of it)",
            {"tpot_on_ms": t_on, "tpot_off_ms": t_off, "gain": gain,
             "promised": promise, "share_of_promise": gain / promise,
             "acceptance_rate": sd["acceptance_rate"], "on": on_label},
            f"{label} vs {base_label}",
        ))  # fmt: skip
    return out


MIN_SCRAPES = 5  # scrapes of a level below which its engine metrics say too little


def missing_evidence(runs: Sequence[Run]) -> str:
    """Why the rules found nothing, by the evidence the runs hold: no engine metrics at
    all, too few scrapes per level (and how to get more), or metrics that explain
    nothing the rules look for."""
    levels = [lv for r in runs for lv in r.levels]
    scrapes = [int(_engine(lv, "scrapes", 0) or 0) for lv in levels if lv.engine]
    if not scrapes:
        return (
            "no engine metrics in the run files: run loadgen with --metrics-url (vLLM, "
            "SGLang, TGI /metrics) to record them"
        )
    few = sum(n < MIN_SCRAPES for n in scrapes)
    if few:
        return (
            f"{sum(scrapes)} engine metric scrapes over {len(scrapes)} levels, {few} of them "
            f"with fewer than {MIN_SCRAPES} (fewest {min(scrapes)}): too few to judge; scrape "
            "more often with loadgen --metrics-interval (e.g. 200ms)"
        )
    return (
        f"{sum(scrapes)} engine metric scrapes over {len(scrapes)} levels show no queueing "
        "with TTFT, full KV cache, preemption, prefix-cache or speculative decoding"
    )


def render(findings: Sequence[Finding], none_note: str | None = None) -> list[str]:
    """Text lines: one per finding, its evidence's numbers after it; with none, why
    (``none_note``: :func:`missing_evidence` of the runs)."""
    if not findings:
        return [
            f"serving findings: none ({none_note or 'no engine metrics, or nothing they explain'})"
        ]
    lines = ["serving findings"]
    for f in findings:
        who = f"{f.label}: " if f.label else ""
        lines.append(f"  [{f.layer}] {who}{f.title}")
    return lines
