"""Drift over a long run: the Mann-Kendall trend test with Sen's slope
(:func:`pytimings.stats.mann_kendall`, shared with the memory layer's growth test).

For values ``y_1..y_n`` at times ``t_1 < .. < t_n`` (one per soak interval):

* ``S = sum_{i<j} sign(y_j - y_i)``: how many later values are larger, minus smaller.
* Under "no trend" (independent, identically distributed values) ``S`` has mean 0 and
  ``Var S = (n(n-1)(2n+5) - sum_g t_g(t_g-1)(2t_g+5)) / 18``, ``t_g`` the size of each
  group of tied values (the variance of ``S`` over every ordering of these values).
* ``z = (S - sign S) / sqrt(Var S)`` (continuity correction), two-sided
  ``p = erfc(|z| / sqrt 2)``: the normal approximation, good from about 10 values.
* Sen's slope: the median of ``(y_j - y_i) / (t_j - t_i)`` over all pairs, a robust trend
  size in the metric's units per hour.

:func:`level_drift` runs the test on every figure of a soak level's ``intervals``
(``pytimings loadgen --duration``): TTFT, TPOT, ITL and E2E p50 and p99 (ms), output
throughput (tok/s) and the error rate (failed over sent), against each interval's midpoint.
:func:`memory_drift` runs it on an engine recording's memory samples
(``pytimings.sample_memory``) against their times.

Verdict "drifting" when ``p < alpha`` (default 0.05), else "stable": at the nominal level,
about 1 stable run in 20 is called drifting. Intervals with no value (nothing completed)
are left out of the test and counted. Too short for a verdict, said so in a row of its own
(verdict "too short", with what it would need; never silently nothing):

* a soak level with fewer than :func:`min_points` intervals with values: below it not even
  a strictly increasing series reaches ``p < alpha`` (5 at 5%);
* memory samples spanning less than :data:`MIN_MEMORY_SPAN_S`: a slope per hour from a few
  seconds extrapolates warm-up (allocator pools, caches, graph captures) a hundredfold.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.model.samples import MemorySamples
from pytimings.serving._format import fmt_num, format_table
from pytimings.serving.runfile import Level, Run
from pytimings.stats import mann_kendall, sen_slope

ALPHA = 0.05
MIN_MEMORY_SPAN_S = 600.0  # 10 minutes of memory samples for a trend per hour


def min_points(alpha: float = ALPHA) -> int:
    """The fewest values at which the test can reject at ``alpha``: the smallest n whose
    most extreme series (strictly increasing, no ties) has ``p < alpha``."""
    n = 2
    while mann_kendall(np.arange(n))[2] >= alpha:
        n += 1
    return n


MIN_POINTS = min_points()
LATENCIES = ("ttft", "tpot", "itl", "e2el")


def drift(metric: str, hours: npt.ArrayLike, values: npt.ArrayLike, alpha: float = ALPHA
          ) -> dict[str, Any] | None:  # fmt: skip
    """``{"metric", "slope_per_hour", "p_value", "verdict", "intervals", "missing"}``, or
    None with fewer than ``min_points(alpha)`` values."""
    h, v = np.asarray(hours, np.float64), np.asarray(values, np.float64)
    keep = ~np.isnan(v)
    if int(keep.sum()) < min_points(alpha):
        return None
    _, _, p = mann_kendall(v[keep])
    return {
        "metric": metric,
        "slope_per_hour": sen_slope(h[keep], v[keep]),
        "p_value": p,
        "verdict": "drifting" if p < alpha else "stable",
        "intervals": int(keep.sum()),
        "missing": int((~keep).sum()),
    }


def _error_rate(iv: dict[str, Any]) -> float:
    failed = sum(int(v) for v in iv["errors"].values())
    sent = int(iv["completed"]) + failed
    return failed / sent if sent else math.nan


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


def level_drift(level: Level, alpha: float = ALPHA) -> list[dict[str, Any]]:
    """The drift entry of every figure of a soak level (none without ``intervals``)."""
    ivs = level.intervals or []
    if not ivs:
        return []
    t0 = ivs[0]["start_ns"]
    hours = [((iv["start_ns"] + iv["end_ns"]) / 2 - t0) / 3.6e12 for iv in ivs]
    series = {
        f"{m}_{q}_ms": [_num(iv[f"{m}_ms"][q]) for iv in ivs]
        for m in LATENCIES
        for q in ("p50", "p99")
    }
    series["output_throughput"] = [_num(iv["output_throughput"]) for iv in ivs]
    series["error_rate"] = [_error_rate(iv) for iv in ivs]
    out = [drift(name, hours, values, alpha) for name, values in series.items()]
    found = [d for d in out if d is not None]
    if found:
        return found
    have = max(int(np.sum(~np.isnan(np.asarray(v, np.float64)))) for v in series.values())
    return [_too_short(f"{have} intervals with values; a drift test needs {min_points(alpha)}",
                       have)]  # fmt: skip


def _too_short(why: str, intervals: int) -> dict[str, Any]:
    """The row of a series too short for a verdict (module docstring)."""
    return {"metric": "all", "slope_per_hour": None, "p_value": None, "verdict": "too short",
            "intervals": intervals, "missing": 0, "why": why}  # fmt: skip


def run_drift(label: str, run: Run, alpha: float = ALPHA) -> list[dict[str, Any]]:
    """``level_drift`` of every level of ``run``, each row naming the run and its level."""
    return [
        {"label": label, "file": run.path, "concurrency": lv.concurrency, **d}
        for lv in run.levels
        for d in level_drift(lv, alpha)
    ]


def memory_drift(
    label: str, path: str, samples: MemorySamples, alpha: float = ALPHA
) -> list[dict[str, Any]]:
    """The drift entry of a recording's RSS and (when sampled) CUDA-allocated MB against
    the samples' times, each row naming the recording (``concurrency`` None: all of it)."""
    if not samples.t_ns:
        return []
    t = np.asarray(samples.t_ns, np.float64)
    span_s = float(t[-1] - t[0]) / 1e9
    if span_s < MIN_MEMORY_SPAN_S:
        why = (f"the samples span {span_s:.3g} s; a trend per hour needs "
               f"{MIN_MEMORY_SPAN_S / 60:g} min")  # fmt: skip
        return [{"label": label, "file": path, "concurrency": None,
                 **_too_short(why, len(samples.t_ns))}]  # fmt: skip
    hours = (t - t[0]) / 3.6e12
    series = {"rss_mb": [b / 2**20 for b in samples.rss_bytes]}
    if any(b is not None for b in samples.cuda_allocated_bytes):
        series["cuda_allocated_mb"] = [
            math.nan if b is None else b / 2**20 for b in samples.cuda_allocated_bytes
        ]
    out = [drift(name, hours, values, alpha) for name, values in series.items()]
    return [{"label": label, "file": path, "concurrency": None, **d} for d in out if d is not None]


DRIFT_HEADERS = ("run", "conc", "metric", "slope/h", "p", "verdict")


def drift_cells(r: dict[str, Any]) -> list[str]:
    """One drift row as table cells (DRIFT_HEADERS)."""
    whole = r["concurrency"] is None  # a recording's memory samples, not a soak level
    conc, unit = ("-", "samples") if whole else (str(r["concurrency"]), "intervals")
    if r["p_value"] is None:  # too short for a verdict: why
        return [r["label"], conc, r["metric"], "-", "-", f"{r['verdict']} ({r['why']})"]
    return [r["label"], conc, r["metric"], fmt_num(r["slope_per_hour"], 3),
            f"{r['p_value']:.3g}", f"{r['verdict']} ({r['intervals']} {unit})"]  # fmt: skip


SOAK_HEAD = "drift over the soak intervals (Mann-Kendall test, Sen's slope per hour)"
MEMORY_HEAD = "memory trend over the recordings' samples (Mann-Kendall test, Sen's slope per hour)"


def drift_table(rows: list[dict[str, Any]], head: str = SOAK_HEAD) -> str:
    """The drift rows as text (empty when no input was a soak)."""
    if not rows:
        return ""
    return head + "\n" + format_table(DRIFT_HEADERS, [drift_cells(r) for r in rows])
