"""``loadgen --telemetry`` / ``--telemetry-url``: GPU telemetry sampled while the load runs,
stored per level (and per round) in the run file.

``--telemetry`` samples the local GPUs through NVML (:mod:`pytimings.record.telemetry`);
``--telemetry-url`` scrapes a DCGM exporter's Prometheus endpoint (``/metrics``) at the same
period, for a server whose GPUs are on another host. DCGM's fields map to the sampler's
metrics (:data:`DCGM_FIELDS`). Each scrape has a total deadline of 2 s and a body cap
(:mod:`pytimings.serving.scrape`); one that fails (connect error, HTTP status, deadline, cap,
not an exposition) is counted (``scrape_errors``; for NVML, the reads that failed), never
fatal, and the first is said on stderr. A DCGM sample whose ``gpu`` label is no GPU index
below :data:`~pytimings.model.samples.MAX_GPU_INDEX`, or whose value is NaN or infinite, is
left out and counted (``dropped_samples``). The samples' times are the load generator's
``pytimings.now_ns`` at the scrape, the clock of the run file's rounds.

Each level gains ``telemetry`` (:func:`pytimings.analysis.hardware.energy_summary` over the
level's measured rounds, plus ``series``: per metric ``[[t_ns, value], ...]`` with the GPUs
combined at each sample, summed for power, energy and memory, the mean for clocks,
temperature and utilisation, the OR of the reason bits) and each round ``telemetry`` with its
own energy, J per output token, tokens per J and mean power, from which ``compare`` draws its
confidence intervals.
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys
import urllib.parse
from typing import Any

import numpy as np

from pytimings._core import now_ns
from pytimings.analysis.hardware import energy_summary
from pytimings.errors import UsageError, install_hint
from pytimings.model.samples import MAX_GPU_INDEX, TelemetryRow, TelemetrySamples
from pytimings.record.memory import Sampler
from pytimings.record.telemetry import TelemetryLog
from pytimings.serving.scrape import ScrapeFailed, read_body_once

__all__ = ["DCGM_FIELDS", "DcgmLog", "attach", "parse_dcgm", "start"]

# DCGM exporter field -> (sampler metric, factor to its unit)
DCGM_FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", 1e-3),  # mJ
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MAX_SM_CLOCK": ("sm_clock_max_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
    "DCGM_FI_DEV_GPU_UTIL": ("util_gpu_pct", 1.0),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("util_mem_pct", 1.0),
    "DCGM_FI_DEV_FB_USED": ("memory_used_bytes", float(1 << 20)),  # MiB
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("pcie_tx_bytes_s", 1.0),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("pcie_rx_bytes_s", 1.0),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("clocks_event_reasons", 1.0),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("clocks_event_reasons", 1.0),  # older name
}
SUMMED = {"power_w", "power_limit_w", "energy_j", "memory_used_bytes"}
PERIOD_S = 0.1


_GPU_LABEL = re.compile(r"[0-9]{1,9}")


def parse_dcgm(text: str, t_ns: int) -> tuple[list[TelemetryRow], dict[str, int]]:
    """The rows of one scrape: DCGM_FIELDS' samples with a ``gpu`` label, at ``t_ns``; and
    the samples of those fields left out, by why: ``gpu_label`` (not a GPU index below
    MAX_GPU_INDEX: a huge label would overflow the int32 column or size per-GPU tables),
    ``non_finite`` (NaN or infinite: no reading)."""
    from prometheus_client.parser import text_string_to_metric_families

    rows: list[TelemetryRow] = []
    dropped = {"gpu_label": 0, "non_finite": 0}
    seen: set[tuple[int, str]] = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # the parser names a counter's sample NAME_total: the family's name is DCGM's
            own = sample.name in (family.name, f"{family.name}_total")
            field = DCGM_FIELDS.get(family.name) if own else None
            label = sample.labels.get("gpu")
            if field is None or label is None:
                continue
            if not _GPU_LABEL.fullmatch(label) or int(label) >= MAX_GPU_INDEX:
                dropped["gpu_label"] += 1
                continue
            value = float(sample.value)
            if not math.isfinite(value):
                dropped["non_finite"] += 1
                continue
            gpu = int(label)
            metric, factor = field
            if (gpu, metric) in seen:  # both reason names exported: one row
                continue
            seen.add((gpu, metric))
            rows.append((t_ns, gpu, metric, value * factor))
    return rows, dropped


class DcgmLog(TelemetryLog):
    """A TelemetryLog whose samples are scrapes of a DCGM exporter, each under a total
    deadline and a body cap (:mod:`pytimings.serving.scrape`); a scrape that fails is counted
    in ``failures``, the samples left out of good ones in ``dropped``."""

    source = "dcgm"

    def __init__(self, url: str, timeout_s: float = 2.0) -> None:
        super().__init__()
        self.url = url
        self.timeout_s = timeout_s
        self.dropped = {"gpu_label": 0, "non_finite": 0}

    def sample(self) -> None:
        t = now_ns()
        try:
            text = read_body_once(self.url, self.timeout_s).decode("utf-8", "replace")
            rows, dropped = parse_dcgm(text, t)
        except ScrapeFailed as exc:
            self.failed(f"{self.url}: {exc}")
            return
        except (ValueError, KeyError, IndexError) as exc:  # not a Prometheus exposition
            self.failed(f"{self.url}: not a Prometheus text exposition ({exc})"[:200])
            return
        with self._lock:
            for why, n in dropped.items():
                self.dropped[why] += n
        self._add(rows)


def start(local: bool, url: str | None, every_s: float) -> tuple[TelemetryLog, Sampler] | None:
    """The log and its sampler thread for ``loadgen --telemetry``/``--telemetry-url``."""
    if url is not None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"--telemetry-url {url!r}: expected http(s)://HOST:PORT/metrics")
        if importlib.util.find_spec("prometheus_client") is None:
            raise UsageError(
                f"--telemetry-url needs prometheus_client: {install_hint('telemetry')}"
            )
        log: TelemetryLog = DcgmLog(url)
    elif local:
        log = TelemetryLog()
    else:
        return None
    return log, Sampler(log, every_s, name="pytimings-telemetry")


def _combined(s: TelemetrySamples, metric: str, t0: int, t1: int) -> list[list[float]]:
    m = (s.metric == metric) & (s.t_ns >= t0) & (s.t_ns <= t1)
    t, v = s.t_ns[m], s.value[m]
    out: list[list[float]] = []
    for ts in np.unique(t):
        vs = v[t == ts]
        if metric == "clocks_event_reasons":
            val = float(np.bitwise_or.reduce(vs.astype(np.int64)))
        else:
            val = float(vs.sum() if metric in SUMMED else vs.mean())
        out.append([int(ts), val])
    return out


def _brief(s: TelemetrySamples, t0: int, t1: int, tokens: int | None) -> dict[str, Any]:
    e = energy_summary(s, t0, t1, tokens)
    keys = ("energy_j", "energy_source", "mean_power_w", "j_per_output_token", "tokens_per_j")
    return {k: e[k] for k in keys}


def attach(doc: dict[str, Any], log: TelemetryLog) -> None:
    """Add ``telemetry`` to every level and round of a loadgen document (module docstring)."""
    s = log.samples()
    errors = log.failures
    dropped = dict(log.dropped) if isinstance(log, DcgmLog) else {}
    if not len(s.t_ns):
        why = log.unavailable or f"{errors} failed samples; the last: {log.last_failure}"
        print(f"pytimings loadgen: no telemetry samples ({why})", file=sys.stderr)
    elif errors or any(dropped.values()):
        left_out = ", ".join(f"{n} {why}" for why, n in dropped.items() if n)
        print(
            f"pytimings loadgen: telemetry: {errors} failed samples (the last: "
            f"{log.last_failure}){'; samples left out: ' + left_out if left_out else ''}",
            file=sys.stderr,
        )
    for lv in doc["levels"]:
        if not lv["rounds"]:
            continue
        t0 = min(r["start_ns"] for r in lv["rounds"])
        t1 = max(r["end_ns"] for r in lv["rounds"])
        tel = energy_summary(s, t0, t1, lv["summary"]["output_tokens"])
        tel["scrape_errors"] = errors  # over the run (NVML: failed reads)
        tel["dropped_samples"] = dropped
        metrics = sorted({str(m) for m in s.metric})
        tel["series"] = {m: _combined(s, m, t0, t1) for m in metrics}
        lv["telemetry"] = tel
        for r in lv["rounds"]:
            r["telemetry"] = _brief(s, r["start_ns"], r["end_ns"], r["summary"]["output_tokens"])
