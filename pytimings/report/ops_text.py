"""Text of the per-op table (``pytimings ops``, ``analyze``)."""

from __future__ import annotations

from typing import Any

from pytimings.analysis.op_table import OpTable
from pytimings.console.text import duration, table


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _shapes(dims: list[Any]) -> str:
    text = ", ".join(str(d) for d in dims if d not in ([], None))
    return text if len(text) <= 48 else text[:47] + "…"


def render_graph_replays(a: dict[str, Any]) -> list[str]:
    """The lines on graph-replayed GPU time: how much the captures charged, the refusals."""
    if not a["graph_kernel_ns"]:
        if a.get("graph_replays") is None:
            return []
        graphs = sum(c["graphs"] for c in a["graph_replays"]["captures"])
        return [f"graph replays: none in the trace; the {graphs} captured graphs charge nothing"]
    out = [
        f"graph replays: {duration(a['graph_kernel_ns'])} of GPU time; "
        f"{duration(a['graph_attributed_ns'])} charged to ops through captured graphs"
    ]
    g = a.get("graph_replays")
    if g is not None:
        caps = ", ".join(
            f"{c['source']} ({c['graphs']} graphs, {c['matched_launches']} launches matched)"
            for c in g["captures"]
        )
        out[0] += f" ({g['matched_launches']} of {g['launches']} launches matched"
        out[0] += f": {caps})" if caps else "; no captures)"
        out += [
            f"  {c['source']}: {c['aligned_launches']} launches matched by alignment, not "
            f"exactly; unpaired: {'; '.join(c['differences'])}"
            for c in g["captures"]
            if c.get("aligned_launches")
        ]
        out += [f"  {r}" for r in g["refused"]]
    return out


def unknown_gpu(trace_gpus: list[str]) -> str:
    """The GPU line when the table knows no peaks: the names the trace reported, if any."""
    named = ", ".join(repr(n) for n in trace_gpus) if trace_gpus else "none named by the trace"
    return f"unknown GPU ({named}; no roofline; --gpu-spec NAME or FILE)"


def _beneath(r: dict[str, Any]) -> list[str]:
    """The launchers of a row other than its own op (most kernel time first)."""
    return [x["name"] for x in r.get("launcher", []) if x["name"] != r["name"]]


def render_ops(t: OpTable, top: int | None) -> str:
    total = t.attribution["kernel_ns"] or 1
    gpu = t.gpu["name"] if t.gpu else unknown_gpu(t.trace_gpus)
    rows = [
        [
            r["name"],
            _shapes(r["input_dims"]),
            str(r["calls"]),
            duration(r["kernel_ns"]),
            f"{100 * r['kernel_ns'] / total:.1f}",
            _num(r["gflops"], ".3g"),
            _num(r["tflops_s"], ".3g"),
            _num(r["tb_s"], ".3g"),
            r["bound"] or "-",
            _num(None if r["roofline_fraction"] is None else 100 * r["roofline_fraction"], ".1f"),
        ]
        for r in t.ops[:top]
    ]
    graphed = any(r["graph_kernel_ns"] for r in t.ops)
    if graphed:  # the part of each row's time that graph replays ran
        for row, r in zip(rows, t.ops[:top], strict=True):
            row.insert(4, duration(r["graph_kernel_ns"]) if r["graph_kernel_ns"] else "-")
    head = [
        "op",
        "shapes",
        "calls",
        "kernel time",
        "share %",
        "GFLOP/call",
        "TFLOP/s",
        "TB/s",
        "bound",
        "% roofline",
    ]
    if graphed:
        head.insert(4, "graph time")
    align = "llrrrrrrrlr" if graphed else "llrrrrrrlr"
    # the ops beneath an op of interest that launched its kernels, where any row has them
    if any(_beneath(r) for r in t.ops[:top]):
        for row, r in zip(rows, t.ops[:top], strict=True):
            row.append(", ".join(_beneath(r)) or "-")
        head.append("launcher")
        align += "l"
    out = [f"GPU: {gpu}", *table(head, rows, align)]
    if top is not None and len(t.ops) > top:
        out.append(f"({len(t.ops) - top} more ops; --top N)")
    a = t.attribution
    out.append(
        f"attributed {duration(a['attributed_ns'])} of {duration(a['kernel_ns'])} of GPU "
        f"time to launching ops ({a['source']})"
    )
    by = a.get("charged_by") or {}
    if by.get("kernel_name") or by.get("graph_capture"):
        out.append(
            f"  charged by: the op around the launch {duration(by['op'])}, a graph capture's "
            f"op {duration(by['graph_capture'])}, the kernel's own name (no op range "
            f"around the launch: '(no op) NAME' rows) {duration(by['kernel_name'])}"
        )
    for u in a["unattributed"]:
        out.append(f"  unattributed: {duration(u['kernel_ns'])} in {u['ops']} ops: {u['reason']}")
    out += render_graph_replays(a)
    cats = [
        [
            c["category"],
            duration(c["kernel_ns"]),
            f"{100 * c['share']:.1f}",
            duration(c["busy_ns"]),
        ]
        for c in t.categories
    ]
    out += table(["category", "kernel time", "share %", "busy time"], cats, "lrrr")
    return "\n".join(out)
