"""Energy figures of loadgen runs with telemetry, for ``pytimings compare``: joules per
output token, tokens per joule and mean power per level, A/B changes with bootstrap
intervals, and the "hardware" findings.

Each round of a run file with telemetry (:mod:`pytimings.serving.telemetry`) carries its
energy; a level's figures are its rounds' energy over their output tokens (J/token, and its
inverse) and over their time (mean power, W, summed over the GPUs). compare's interval
(:func:`pytimings.serving.compare.compare_levels`) resamples rounds with replacement (energy
is measured per round, not per request), as the other figures' first stage does; with one
round a side there is no verdict ("n/a (too few rounds)"). Findings: J per output token
worse in B than in A (the interval excludes zero); a clock-event reason other than idle
active for at least 10% of a level's samples; power at its cap for at least 10% of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.analysis.hardware import FINDING_SHARE, POWER_AT_CAP
from pytimings.serving.findings import Finding
from pytimings.serving.runfile import Level, Run

__all__ = [
    "ENERGY_METRICS",
    "EnergyData",
    "energy_data",
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


@dataclass
class EnergyData:
    """One level's per-round energy, tokens and seconds, resampled by rounds for compare."""

    energy_j: F64
    tokens: F64
    seconds: F64

    @property
    def n_rounds(self) -> int:
        return len(self.energy_j)

    def point(self) -> dict[str, float]:
        return _figures(self.energy_j, self.tokens, self.seconds, np.ones(self.n_rounds, np.int64))

    def replicate(self, rng: np.random.Generator) -> dict[str, float]:
        w = np.bincount(rng.integers(0, self.n_rounds, self.n_rounds), minlength=self.n_rounds)
        return _figures(self.energy_j, self.tokens, self.seconds, w)


def energy_data(level: Level) -> EnergyData | None:
    """The level's rounds' energy (None: a round lacks telemetry energy)."""
    r = _rounds(level)
    return None if r is None else EnergyData(*r)


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


def _finding(raw: dict[str, Any]) -> dict[str, Any]:
    """One hardware finding in compare's findings shape (pytimings.serving.findings): its
    message is the title; what it rests on (kind, shares, intervals) the evidence."""
    keep = ("layer", "label", "concurrency", "message")
    evidence = {k: v for k, v in raw.items() if k not in keep}
    return Finding(
        "hardware", raw["message"], evidence, raw.get("label"), raw.get("concurrency")
    ).to_json()


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
    return [_finding(f) for f in out]


def regression_findings(comparisons: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """J per output token worse in the other run than in the baseline (CI excludes 0)."""
    return [
        _finding(
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
        )
        for c in comparisons
        if c["metric"] == "j_per_output_token" and c["verdict"] == "worse"
    ]
