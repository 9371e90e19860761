"""GPU telemetry per analysis window as text (``pytimings analyze`` on a recording with
telemetry): one row per window entry that has samples."""

from __future__ import annotations

from typing import Any

from pytimings.console.text import table


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def render_window_telemetry(windows: list[dict[str, Any]]) -> str:
    """``windows``: ``analyze --json``'s window entries (with ``telemetry``)."""
    rows = []
    for i, w in enumerate(windows, 1):
        t = w.get("telemetry")
        if t is None:
            continue
        throttle = ", ".join(f"{k} {v:.0%}" for k, v in sorted(t["throttle"].items())) or "-"
        rows.append([
            str(i), str(w["name"]), str(t["gpu"]), str(t["samples"]),
            _num(t["mean_power_w"], ".1f"), _num(t["mean_sm_clock_mhz"], ".0f"),
            _num(t["mean_util_gpu_pct"], ".0f"), _num(t["energy_j"], ".3f"), throttle,
        ])  # fmt: skip
    head = ("#", "window", "gpu", "samples", "power W", "SM MHz", "util %", "energy J",
            "clock-event reasons")  # fmt: skip
    lines = [f"GPU telemetry per window ({len(rows)} of {len(windows)} with samples)"]
    return "\n".join(lines + (table(head, rows, "rlrrrrrrl") if rows else []))


# the GPU metrics shown per window (short names of pytimings.ingest.nsys_gpu_metrics)
GPU_METRIC_COLUMNS = (("sm_active_pct", "SM active %"), ("sm_issue_pct", "SM issue %"),
                      ("tensor_active_pct", "tensor %"), ("dram_read_pct", "DRAM rd %"),
                      ("dram_write_pct", "DRAM wr %"), ("gpc_clock_mhz", "GPC MHz"))  # fmt: skip


def render_window_gpu_metrics(windows: list[dict[str, Any]], findings: list[str]) -> str:
    """``windows``: ``analyze --json``'s window entries (with ``gpu_metrics``); the means of
    the main metrics (every metric's mean is in the JSON), then the findings' titles."""
    rows = []
    for i, w in enumerate(windows, 1):
        g = w.get("gpu_metrics")
        if g is None:
            continue
        rows.append([str(i), str(w["name"]), str(g["gpu"]), str(g["samples"])]
                    + [_num(g["mean"].get(k), ".1f") for k, _ in GPU_METRIC_COLUMNS])  # fmt: skip
    head = ("#", "window", "gpu", "samples", *(h for _, h in GPU_METRIC_COLUMNS))
    lines = [f"GPU metrics per window, means ({len(rows)} of {len(windows)} with samples)"]
    lines += table(head, rows, "rlrr" + "r" * len(GPU_METRIC_COLUMNS)) if rows else []
    return "\n".join(lines + [f"- {f}" for f in findings])
