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
