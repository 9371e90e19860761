"""The hardware layer's numbers from GPU telemetry samples
(:class:`~pytimings.model.samples.TelemetrySamples`: a recording's, or a DCGM exporter's):
energy over an interval, mean power, joules per output token and tokens per joule, summed
over GPUs with per-GPU figures beside, the share of the interval each clock-event (throttle)
reason was active, and the "hardware" findings.

Energy per GPU comes from its energy counter (its increase from the first to the last sample
inside the interval; a step down is a reset, after which the counter's value is the energy
since) when every sample has one, else from the trapezoidal integral of
its power samples over the same span ("energy_source" says which: "counter" when every GPU
had a counter, else "power_integral"). Shares are shares of the GPU's samples in the
interval (the samples are taken at a fixed period); "busy" samples are those with GPU
utilisation above 0.

Per analysis window (:func:`window_telemetry`): the samples of the window's GPU (the
telemetry's GPU index taken as the window's CUDA device) with a time in [start, end]: their
count, the means of power, SM clock and GPU utilisation, the energy (as above, over the
window's samples: two at least) and the share of them each clock-event reason was active.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from pytimings.analysis.finding import Finding

__all__ = [
    "REASONS",
    "energy_summary",
    "gpu_metric_findings",
    "hardware_findings",
    "window_gpu_metrics",
    "window_telemetry",
]

# NVML / DCGM clocks-event reason bits -> names
REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
CLOCK_BELOW = 0.95  # an SM clock below 95% of the max counts as reduced
POWER_AT_CAP = 0.97  # power within 3% of the enforced limit counts as at the cap
FINDING_SHARE = 0.10  # findings for shares of busy samples of at least 10%


class Samples(Protocol):
    @property
    def source(self) -> str: ...

    def metrics(self) -> list[str]: ...

    def series(self, gpu: int, metric: str) -> tuple[np.ndarray, np.ndarray]: ...

    def gpus(self) -> list[int]: ...


def _window(s: Samples, gpu: int, metric: str, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
    t, v = s.series(gpu, metric)
    m = (t >= t0) & (t <= t1)
    return t[m], v[m]


def _gpu_energy(s: Samples, gpu: int, t0: int, t1: int) -> tuple[float | None, str, float | None]:
    """(energy J, "counter"|"power_integral", mean power W) of one GPU in [t0, t1]."""
    tp, p = _window(s, gpu, "power_w", t0, t1)
    te, e = _window(s, gpu, "energy_j", t0, t1)
    mean_p = float(p.mean()) if len(p) else None
    if len(e) >= 2 and len(e) >= len(p):
        span = (te[-1] - te[0]) / 1e9
        energy = _counter_energy(e)
        return energy, "counter", (energy / span if span > 0 else mean_p)
    if len(p) >= 2:
        energy = float(np.sum((p[1:] + p[:-1]) / 2 * np.diff(tp)) / 1e9)
        return energy, "power_integral", mean_p
    return None, "power_integral", mean_p


def _counter_energy(e: np.ndarray) -> float:
    """The energy an energy counter's samples span: the sum of its increases, where a step
    down is a reset (driver reload, exporter restart) after which the counter's value is
    the energy since (as Prometheus' ``increase()``), never a negative energy."""
    steps = np.diff(e)
    return float(np.sum(np.where(steps >= 0, steps, e[1:])))


def energy_summary(
    s: Samples, t0_ns: int, t1_ns: int, output_tokens: int | None = None
) -> dict[str, Any]:
    """The issue's per-level ``telemetry`` object (without ``series``) for [t0_ns, t1_ns]."""
    per_gpu: dict[str, Any] = {}
    sources = set()
    throttle_all: dict[str, list[float]] = {}
    n = 0
    for gpu in s.gpus():
        energy, how, mean_p = _gpu_energy(s, gpu, t0_ns, t1_ns)
        _, reasons = _window(s, gpu, "clocks_event_reasons", t0_ns, t1_ns)
        n += len(_window(s, gpu, "power_w", t0_ns, t1_ns)[0])
        throttle = {
            name: float(np.mean((reasons.astype(np.int64) & bit) != 0))
            for bit, name in REASONS.items()
            if len(reasons) and np.any((reasons.astype(np.int64) & bit) != 0)
        }
        for name, share in throttle.items():
            throttle_all.setdefault(name, []).append(share)
        lost = len(_window(s, gpu, "lost", t0_ns, t1_ns)[0]) > 0
        sources.add(how)
        per_gpu[str(gpu)] = {
            "energy_j": energy,
            "energy_source": how,
            "mean_power_w": mean_p,
            "throttle": throttle,
            "lost": lost,
        }
    energies = [g["energy_j"] for g in per_gpu.values()]
    total = sum(energies) if energies and None not in energies else None
    powers = [g["mean_power_w"] for g in per_gpu.values()]
    n_gpus = len(per_gpu)
    return {
        "source": s.source,
        "gpus": n_gpus,
        "samples": n,
        "energy_j": total,
        "energy_source": "counter" if sources == {"counter"} else "power_integral",
        "mean_power_w": sum(powers) if powers and None not in powers else None,
        "j_per_output_token": (total / output_tokens) if total and output_tokens else None,
        "tokens_per_j": (output_tokens / total) if total and output_tokens else None,
        "throttle": {k: sum(v) / n_gpus for k, v in sorted(throttle_all.items())},
        "lost_gpus": sum(1 for g in per_gpu.values() if g["lost"]),
        "per_gpu": per_gpu,
    }


def hardware_findings(s: Samples, t0_ns: int, t1_ns: int) -> list[dict[str, Any]]:
    """Findings (layer "hardware"): SM clocks below max for a share of busy samples, with
    the reasons active then; power at the enforced cap."""
    out: list[dict[str, Any]] = []
    for gpu in s.gpus():
        _, util = _window(s, gpu, "util_gpu_pct", t0_ns, t1_ns)
        _, clock = _window(s, gpu, "sm_clock_mhz", t0_ns, t1_ns)
        _, reasons = _window(s, gpu, "clocks_event_reasons", t0_ns, t1_ns)
        _, cmax = s.series(gpu, "sm_clock_max_mhz")
        _, power = _window(s, gpu, "power_w", t0_ns, t1_ns)
        _, limit = _window(s, gpu, "power_limit_w", t0_ns, t1_ns)
        if len(util) and len(util) == len(clock) and len(cmax):
            busy = util > 0
            low = busy & (clock < CLOCK_BELOW * cmax.max())
            share = float(low.sum() / busy.sum()) if busy.any() else 0.0
            if share >= FINDING_SHARE:
                why: dict[str, float] = {}
                if len(reasons) == len(clock):
                    r = reasons[low].astype(np.int64)
                    why = {
                        n: float(np.mean((r & b) != 0)) for b, n in REASONS.items() if np.any(r & b)
                    }
                out.append(
                    {
                        "layer": "hardware",
                        "kind": "clocks_below_max",
                        "gpu": gpu,
                        "share_of_busy": share,
                        "mean_sm_clock_mhz_when_low": float(clock[low].mean()),
                        "max_sm_clock_mhz": float(cmax.max()),
                        "reasons": why,
                        "message": f"GPU {gpu}: SM clock below {CLOCK_BELOW:.0%} of its max "
                        f"{cmax.max():.0f} MHz for {share:.0%} of busy samples"
                        + (
                            f" ({', '.join(sorted(why, key=why.__getitem__, reverse=True))})"
                            if why
                            else ""
                        ),
                    }
                )
        if len(power) and len(power) == len(limit):
            at_cap = float(np.mean(power >= POWER_AT_CAP * limit))
            if at_cap >= FINDING_SHARE:
                out.append(
                    {
                        "layer": "hardware",
                        "kind": "power_at_cap",
                        "gpu": gpu,
                        "share": at_cap,
                        "power_limit_w": float(limit.max()),
                        "message": f"GPU {gpu}: power at its {limit.max():.0f} W cap for "
                        f"{at_cap:.0%} of samples",
                    }
                )
    return out


WINDOW_MEANS = {"mean_power_w": "power_w", "mean_sm_clock_mhz": "sm_clock_mhz",
                "mean_util_gpu_pct": "util_gpu_pct"}  # fmt: skip


def window_telemetry(
    s: Samples, start_ns: np.ndarray, end_ns: np.ndarray, device: np.ndarray
) -> list[dict[str, Any] | None]:
    """Per window (columns ``start_ns``, ``end_ns``, ``device``): its GPU's telemetry in
    the window (module docstring), None where that GPU has no sample in it."""
    out: list[dict[str, Any] | None] = []
    gpus = set(s.gpus())
    for t0, t1, dev in zip(start_ns.tolist(), end_ns.tolist(), device.tolist(), strict=True):
        if dev not in gpus:
            out.append(None)
            continue
        counts = [len(_window(s, dev, m, t0, t1)[0]) for m in (*WINDOW_MEANS.values(), "energy_j")]
        if not any(counts):
            out.append(None)
            continue
        row: dict[str, Any] = {"gpu": dev, "samples": max(counts)}
        for key, metric in WINDOW_MEANS.items():
            _, v = _window(s, dev, metric, t0, t1)
            row[key] = float(v.mean()) if len(v) else None
        energy, how, _ = _gpu_energy(s, dev, t0, t1)
        row["energy_j"], row["energy_source"] = energy, how if energy is not None else None
        _, reasons = _window(s, dev, "clocks_event_reasons", t0, t1)
        r = reasons.astype(np.int64)
        row["throttle"] = {
            name: float(np.mean((r & bit) != 0)) for bit, name in REASONS.items() if np.any(r & bit)
        }
        out.append(row)
    return out


# GPU metrics of Nsight exports (pytimings.ingest.nsys_gpu_metrics' short names)
SM_ACTIVE_LOW = 50.0  # SMs active under 50% of the time while a GPU op runs counts as low
DRAM_LOW = 50.0  # DRAM read + write under 50% of peak in a memory-bound sample counts as low
Series = dict[str, tuple[np.ndarray, np.ndarray]]  # metric -> (t_ns, value) of one GPU


def _series_by_gpu(s: Samples, gpu: int, metrics: list[str]) -> Series:
    out = {}
    for m in metrics:
        t, v = s.series(gpu, m)
        if len(t):
            out[m] = (t, v)
    return out


def window_gpu_metrics(
    s: Samples, start_ns: np.ndarray, end_ns: np.ndarray, device: np.ndarray
) -> list[dict[str, Any] | None]:
    """Per window (columns ``start_ns``, ``end_ns``, ``device``): the mean of each GPU metric
    of the window's GPU over its samples with a time in [start, end] (``samples``: the most
    samples any metric has there), None where that GPU has none. Prefix sums per series:
    one binary search per window and metric."""
    start, end, dev = (np.asarray(x, dtype=np.int64) for x in (start_ns, end_ns, device))
    out: list[dict[str, Any] | None] = [None] * len(start)
    names = s.metrics()
    for gpu in s.gpus():
        rows = np.flatnonzero(dev == gpu)
        if not len(rows):
            continue
        means: dict[str, np.ndarray] = {}
        most = np.zeros(len(rows), dtype=np.int64)
        for metric, (t, v) in _series_by_gpu(s, gpu, names).items():
            sums = np.concatenate([[0.0], np.cumsum(v)])
            lo = np.searchsorted(t, start[rows], "left")
            hi = np.searchsorted(t, end[rows], "right")
            n = hi - lo
            with np.errstate(invalid="ignore", divide="ignore"):
                means[metric] = np.where(n > 0, (sums[hi] - sums[lo]) / n, np.nan)
            most = np.maximum(most, n)
        cols = {m: a.tolist() for m, a in means.items()}  # Python floats, NaN: no sample
        for k, (row, n) in enumerate(zip(rows.tolist(), most.tolist(), strict=True)):
            if n:
                mean = {m: c[k] for m, c in cols.items() if c[k] == c[k]}
                out[row] = {"gpu": gpu, "samples": n, "mean": mean}
    return out


def _covered(t: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Where a time of ``t`` lies inside one of the intervals [start, end)."""
    if not len(starts):
        return np.zeros(len(t), dtype=bool)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    i = np.searchsorted(s, t, "right") - 1
    return (i >= 0) & (t < e[np.maximum(i, 0)])


def _aligned(series: Series, names: list[str]) -> tuple[np.ndarray, list[np.ndarray]]:
    """The times all of ``names`` were sampled at, and each one's values there."""
    t = series[names[0]][0]
    for n in names[1:]:
        t = np.intersect1d(t, series[n][0])
    vals = [series[n][1][np.searchsorted(series[n][0], t)] for n in names]
    return t, vals


def _period(t: np.ndarray) -> int:
    return int(np.median(np.diff(t))) if len(t) > 1 else 0


def gpu_metric_findings(
    s: Samples, op_start: np.ndarray, op_end: np.ndarray, op_device: np.ndarray
) -> list[Finding]:
    """Findings (layer "hardware") from an Nsight export's GPU metrics, over the samples
    taken while a GPU op of the trace ran on that GPU ("busy"):

    - ``sm_active_low``: SMs active under SM_ACTIVE_LOW % in at least FINDING_SHARE of the
      busy samples (the timeline says busy; the SMs mostly wait: small grids, tails, latency);
    - ``memory_bandwidth_low``: in memory-bound samples (DRAM read + write % of peak above
      both SM issue % and tensor active %: DRAM is the busiest unit), DRAM under DRAM_LOW %
      of peak in at least FINDING_SHARE of them.

    A finding's ``loss_ns`` is its samples times the sampling period (time, not a saving)."""
    found: list[Finding] = []
    names = s.metrics()
    for gpu in s.gpus():
        series = _series_by_gpu(s, gpu, names)
        mine = op_device == gpu
        for check in (_sm_active_low, _memory_bandwidth_low):
            f = check(gpu, series, op_start[mine], op_end[mine])
            if f is not None:
                found.append(f)
    return found


def _found(
    gpu: int,
    kind: str,
    t: np.ndarray,
    among: np.ndarray,
    low: np.ndarray,
    values: np.ndarray,
    mean_key: str,
    title: Callable[[float, float], str],
) -> Finding | None:
    """The finding ``kind`` when ``low`` holds in at least FINDING_SHARE of the samples
    ``among`` (evidence: their count, the low ones', the share, ``values``' mean over them;
    ``title(mean, share)``)."""
    if not among.any():
        return None
    share = float(low.sum() / among.sum())
    if share < FINDING_SHARE:
        return None
    mean = float(values[among].mean())
    evidence = {"kind": kind, "gpu": gpu, "samples": int(among.sum()),
                "low_samples": int(low.sum()), "share": share, mean_key: mean}  # fmt: skip
    loss = int(low.sum()) * _period(t)
    return Finding("hardware", f"GPU {gpu}: {title(mean, share)}", loss, evidence)


def _sm_active_low(gpu: int, series: Series, start: np.ndarray, end: np.ndarray) -> Finding | None:
    """Busy samples (a GPU op running) with SMs active under SM_ACTIVE_LOW %."""
    if "sm_active_pct" not in series:
        return None
    t, v = series["sm_active_pct"]
    busy = _covered(t, start, end)
    return _found(gpu, "sm_active_low", t, busy, busy & (v < SM_ACTIVE_LOW), v,
                  "mean_sm_active_pct_busy",
                  lambda mean, share: f"SMs active under {SM_ACTIVE_LOW:.0f}% in {share:.0%} "
                  f"of the samples taken while a GPU op ran (mean {mean:.0f}% active): busy "
                  "in the timeline, idle SMs in the hardware")  # fmt: skip


def _memory_bandwidth_low(
    gpu: int, series: Series, start: np.ndarray, end: np.ndarray
) -> Finding | None:
    """Memory-bound busy samples (DRAM the busiest unit) with DRAM under DRAM_LOW %."""
    compute = [n for n in ("sm_issue_pct", "tensor_active_pct") if n in series]
    if not ({"dram_read_pct", "dram_write_pct"} <= series.keys() and compute):
        return None
    t, (rd, wr, *others) = _aligned(series, ["dram_read_pct", "dram_write_pct", *compute])
    dram = rd + wr
    bound = _covered(t, start, end) & (dram > np.max(np.stack(others), axis=0))
    return _found(gpu, "memory_bandwidth_low", t, bound, bound & (dram < DRAM_LOW), dram,
                  "mean_dram_pct_memory_bound",
                  lambda mean, share: f"memory-bound samples (DRAM the busiest unit) use "
                  f"{mean:.0f}% of peak DRAM bandwidth on average; {share:.0%} of them under "
                  f"{DRAM_LOW:.0f}% (latency-bound access, too little memory parallelism)",
                  )  # fmt: skip
