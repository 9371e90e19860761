"""The memory layer as text (``pytimings memory``)."""

from __future__ import annotations

import textwrap

from pytimings.analysis.finding import Finding
from pytimings.analysis.memory import MAX_OPS, MemoryResult, gib
from pytimings.console.text import duration, table


def _bytes(n: int | None) -> str:
    return "-" if n is None else gib(n)


def render_memory(r: MemoryResult, findings: list[Finding]) -> str:
    """Per device: peak, capacity, fragmentation, counts; the ops live at each peak; the
    windows when ``--by`` was given; then the findings."""
    rows = [
        [d.label, _bytes(d.peak_allocated_bytes), _bytes(d.capacity_bytes),
         _bytes(d.peak_reserved_bytes), _bytes(d.fragmentation_bytes), str(d.allocs),
         str(d.frees), str(d.unmatched_frees), "-" if d.native_alloc_calls is None
         else str(d.native_alloc_calls), _bytes(d.live_at_end_bytes)]
        for d in r.devices
    ]  # fmt: skip
    head = ("device", "peak alloc", "capacity", "peak reserved", "reserved-alloc at peak",
            "allocs", "frees", "unmatched frees", "native calls", "never freed")  # fmt: skip
    out = ["Device memory (peak allocated; reserved - allocated at that peak)"]
    out += table(head, rows, "lrrrrrrrrr")
    for d in r.devices:
        if d.level_from == "running_sum":
            out.append(f"{d.label}: no totals in the trace; levels are sums of its events")
        ops = d.live_at_peak_by_op[:MAX_OPS]
        if ops:
            at = duration(d.peak_at_ns - r.start_ns)
            out += ["", f"{d.label}: live at the peak ({at} into the trace), by op at allocation"]
            out += table(
                ("kind", "op", "bytes", "allocs"),
                [[o.kind, o.name or "-", gib(o.bytes), str(o.allocs)] for o in ops],
                "llrr",
            )
        if d.windows:
            out += ["", f"{d.label}: per {r.by}"]
            wrows = [
                [str(i), _bytes(w["peak_allocated_bytes"]), _bytes(w["live_at_end_bytes"]),
                 str(w["allocs"]), "-" if w["native_alloc_calls"] is None
                 else str(w["native_alloc_calls"]), "-" if w["native_alloc_ns"] is None
                 else duration(w["native_alloc_ns"]),
                 "-" if w.get("native_alloc_host_bound_ns") is None
                 else duration(w["native_alloc_host_bound_ns"])]
                for i, w in enumerate(d.windows, 1)
            ]  # fmt: skip
            head_w = ("#", "peak alloc", "live at end", "allocs", "native calls", "in calls",
                      "host_bound")  # fmt: skip
            out += table(head_w, wrows, "rrrrrrr")
    out += ["", "Findings"] if findings else []
    for i, f in enumerate(findings, 1):
        out += textwrap.wrap(f"{i}. [{f.layer}] {f.title}", width=100, subsequent_indent="   ")
    return "\n".join(out)
