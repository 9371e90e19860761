"""Energy figures of loadgen runs with telemetry, for ``pytimings compare``: joules per
output token, tokens per joule and mean power per level, A/B changes with bootstrap
intervals, and the "hardware" findings.

Each round of a run file with telemetry (:mod:`pytimings.serving.telemetry`) carries its
energy; a level's figures are its rounds' energy over their output tokens (J/token, and its
inverse) and over their time (mean power, W, summed over the GPUs). The interval resamples
rounds with replacement (energy is measured per round, not per request), ``resamples``
times per side, as the other figures' first stage does; with one round a side there is no
verdict ("1 round"). Findings: J per output token worse in B than in A (the interval
excludes zero); a clock-event reason other than idle active for at least 10% of a level's
samples; power at its cap for at least 10% of them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.analysis.hardware import FINDING_SHARE, POWER_AT_CAP
from pytimings.serving.runfile import Level, Run
from pytimings.stats import verdict as change_verdict

__all__ = [
    "ENERGY_METRICS",
    "compare_energy",
    "level_energy",
    "regression_findings",
    "run_findings",
]

# name -> (higher is better, unit)
ENERGY_METRICS: dict[str, tuple[bool, str]] = {
    "j_per_output_token": (False, "J/token"),
    "tokens_per_j": (True, "tokens/J"),
    "mean_power_w": (False, "W"),
}
F64 = npt.NDArray[np.float64]


def _rounds(level: Level) -> tuple[F64, F64, F64] | None:
    """(energy J, output tokens, seconds) per round; None: a round has no energy."""
    rows = []
    for rd in level.rounds:
        tel = rd.telemetry
        if tel is None or tel.get("energy_j") is None:
            return None
        rows.append((tel["energy_j"], rd.summary["output_tokens"], (rd.end_ns - rd.start_ns) / 1e9))
    if not rows:
        return None
    e, t, d = (np.array(c, np.float64) for c in zip(*rows, strict=True))
    return e, t, d


def _figures(e: F64, t: F64, d: F64, w: npt.NDArray[np.int64]) -> dict[str, float]:
    energy, tokens, secs = float(w @ e), float(w @ t), float(w @ d)
    return {
        "j_per_output_token": energy / tokens if tokens else math.nan,
        "tokens_per_j": tokens / energy if energy else math.nan,
        "mean_power_w": energy / secs if secs else math.nan,
    }


def level_energy(level: Level) -> dict[str, Any] | None:
    """The level's energy figures (None: no telemetry), with its energy source."""
    r = _rounds(level)
    if r is None:
        return None
    out: dict[str, Any] = _figures(*r, np.ones(len(r[0]), np.int64))
    out["energy_j"] = float(r[0].sum())
    sources = {(rd.telemetry or {}).get("energy_source") for rd in level.rounds}
    out["energy_source"] = "counter" if sources == {"counter"} else "power_integral"
    return out


def compare_energy(
    a: Level, b: Level, resamples: int, rng: np.random.Generator
) -> list[dict[str, Any]]:
    """Rows shaped like compare's for ENERGY_METRICS (none when a side lacks telemetry)."""
    ra, rb = _rounds(a), _rounds(b)
    if ra is None or rb is None:
        return []
    pa_ = _figures(*ra, np.ones(len(ra[0]), np.int64))
    pb_ = _figures(*rb, np.ones(len(rb[0]), np.int64))
    reps = np.empty((resamples, len(ENERGY_METRICS)))
    na, nb = len(ra[0]), len(rb[0])
    for i in range(resamples):
        wa = np.bincount(rng.integers(0, na, na), minlength=na)
        wb = np.bincount(rng.integers(0, nb, nb), minlength=nb)
        fa, fb = _figures(*ra, wa), _figures(*rb, wb)
        reps[i] = [(fb[k] - fa[k]) / fa[k] if fa[k] else math.nan for k in ENERGY_METRICS]
    out = []
    for j, (name, (higher_better, unit)) in enumerate(ENERGY_METRICS.items()):
        change = (pb_[name] - pa_[name]) / pa_[name] if pa_[name] else math.nan
        col = reps[:, j][~np.isnan(reps[:, j])]
        lo, hi = np.percentile(col, [2.5, 97.5]) if col.size else (math.nan, math.nan)
        verdict = "1 round" if min(na, nb) < 2 else change_verdict(lo, hi, higher_better)
        out.append({
            "metric": name, "unit": unit, "higher_is_better": higher_better,
            "a": pa_[name], "b": pb_[name], "rel_change": change,
            "ci95": [float(lo), float(hi)], "verdict": verdict,
        })  # fmt: skip
    return out


def run_findings(label: str, run: Run) -> list[dict[str, Any]]:
    """Throttle reasons and power at the cap over each level of one run (layer hardware)."""
    out: list[dict[str, Any]] = []
    for lv in run.levels:
        tel = lv.telemetry
        if tel is None:
            continue
        where = {"layer": "hardware", "label": label, "concurrency": lv.concurrency}
        for reason, share in tel.get("throttle", {}).items():
            if reason != "gpu_idle" and share >= FINDING_SHARE:
                out.append({**where, "kind": "clock_event_reason", "reason": reason,
                            "share": share,
                            "message": f"{label} c={lv.concurrency}: clocks reduced by "
                                       f"{reason} for {share:.0%} of samples"})  # fmt: skip
        series = tel.get("series", {})
        power = dict((t, v) for t, v in series.get("power_w", []))
        limit = dict((t, v) for t, v in series.get("power_limit_w", []))
        both = [t for t in power if t in limit]
        if both:
            share = sum(power[t] >= POWER_AT_CAP * limit[t] for t in both) / len(both)
            if share >= FINDING_SHARE:
                out.append({**where, "kind": "power_at_cap", "share": share,
                            "message": f"{label} c={lv.concurrency}: power at the cap for "
                                       f"{share:.0%} of samples"})  # fmt: skip
    return out


def regression_findings(comparisons: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """J per output token worse in the other run than in the baseline (CI excludes 0)."""
    return [
        {
            "layer": "hardware",
            "kind": "energy_per_token_regression",
            "label": c["label"],
            "baseline": c["baseline"],
            "concurrency": c["concurrency"],
            "rel_change": c["rel_change"],
            "ci95": c["ci95"],
            "message": f"{c['label']} c={c['concurrency']}: {c['rel_change']:+.1%} J per "
            f"output token vs {c['baseline']}",
        }
        for c in comparisons
        if c["metric"] == "j_per_output_token" and c["verdict"] == "worse"
    ]
