"""``pytimings summary`` as aligned plain-text tables (the Tables of
:func:`pytimings.analysis.summary.trace_summary`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pytimings.console.text import duration, table
from pytimings.table import Table


def _host_op_columns(what: str) -> list[tuple[str, str, str]]:
    """The columns of a host_ops table (cpu ops, OS calls): wall-time statistics by name."""
    return [
        ("total_ns", "total", "time"),
        ("count", "count", "int"),
        ("mean_ns", "mean", "time"),
        ("p50_ns", "p50", "time"),
        ("p99_ns", "p99", "time"),
        ("name", what, "str"),
    ]


_TEXT_COLUMNS: dict[str, list[tuple[str, str, str]]] = {
    # table -> (column, header, format)
    "kernels": [
        ("share", "share", "pct"),
        ("total_ns", "total", "time"),
        ("count", "count", "int"),
        ("mean_ns", "mean", "time"),
        ("p50_ns", "p50", "time"),
        ("p99_ns", "p99", "time"),
        ("name", "kernel", "str"),
    ],
    "memory": [
        ("total_ns", "total", "time"),
        ("count", "count", "int"),
        ("bytes", "MB", "mb"),
        ("gbps", "GB/s", "f2"),
        ("p50_ns", "p50", "time"),
        ("operation", "operation", "str"),
    ],
    "ranges": [
        ("total_ns", "total", "time"),
        ("count", "count", "int"),
        ("mean_ns", "mean", "time"),
        ("p50_ns", "p50", "time"),
        ("p99_ns", "p99", "time"),
        ("gpu_ops", "GPU ops", "int"),
        ("proj_total_ns", "GPU proj", "time"),
        ("gpu_busy_ns", "GPU busy", "time"),
        ("bytes", "MB", "mb"),
        ("gbps", "GB/s", "f2"),
        ("busbw_gbps", "busbw", "f2"),
        ("style", "style", "str"),
        ("name", "range", "str"),
    ],
    "api": [
        ("total_ns", "total", "time"),
        ("count", "count", "int"),
        ("mean_ns", "mean", "time"),
        ("p50_ns", "p50", "time"),
        ("kind", "kind", "str"),
        ("name", "call", "str"),
    ],
    "syncs": [
        ("total_ns", "total", "time"),
        ("count", "count", "int"),
        ("mean_ns", "mean", "time"),
        ("p50_ns", "p50", "time"),
        ("waited_for", "record", "str"),
    ],
    "cpu_ops": _host_op_columns("cpu op"),
    "os_calls": _host_op_columns("OS call"),
}
WHEN_KNOWN = {"bytes", "gbps", "busbw_gbps"}  # columns shown only where a row knows them
_TITLES = {
    "kernels": "Kernels",
    "memory": "Memory operations",
    "ranges": "Ranges",
    "api": "{runtime} API calls",
    "syncs": "Synchronization records (what the {runtime} calls above waited for; their time "
    "is the calls')",
    "cpu_ops": "CPU ops, inclusive of the ops inside",
    "os_calls": "OS runtime calls",
}


def _fmt(v: Any, how: str) -> str:
    if how == "str":
        return str(v)
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "-"
    if how == "int":
        return f"{int(v):,}"
    if how == "time":
        return duration(v)
    if how == "mb":
        return f"{v / 1e6:,.3f}"
    if how == "pct":
        return f"{100 * v:.1f}%"
    return f"{v:,.2f}"


def render_summary(tables: dict[str, Table], runtime: str = "CUDA") -> str:
    """Aligned plain-text tables, one section per table and (rank, device); ``runtime``
    names the API (:func:`pytimings.ingest.names.trace_vendor`: CUDA or HIP)."""
    lines: list[str] = []
    for name, t in tables.items():
        spec = _TEXT_COLUMNS[name]
        scopes = [c for c in ("rank", "device") if c in t]
        keys = sorted({tuple(int(t[c][i]) for c in scopes) for i in range(len(t))})
        if not keys:
            lines += [f"{_TITLES[name].format(runtime=runtime)}: none", ""]
            continue
        for key in keys:
            mask = np.ones(len(t), dtype=bool)
            for c, k in zip(scopes, key, strict=True):
                mask &= t[c] == k
            where = ", ".join(f"{c} {k}" for c, k in zip(scopes, key, strict=True) if k >= 0)
            lines.append(_TITLES[name].format(runtime=runtime) + (f" ({where})" if where else ""))
            shown = [  # a column of what the trace does not say (no bytes anywhere) is left out
                (c, h, how)
                for c, h, how in spec
                if c not in WHEN_KNOWN or not np.isnan(t[c][mask].astype(np.float64)).all()
            ]
            rows = [[_fmt(t[c][i], how) for c, _, how in shown] for i in np.flatnonzero(mask)]
            align = "".join("l" if how == "str" else "r" for _, _, how in shown)
            lines += table([h for _, h, _ in shown], rows, align, underline=False)
            lines.append("")
    return "\n".join(lines)
