"""The replay (``pytimings analyze --what-if / --critical-path``) as text: how well the
unchanged replay reproduces the windows, each window before and after a change, and the
chain that sets the slowest window's length."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from pytimings.analysis.critical_path import CriticalPath, LinkKind
from pytimings.analysis.finding import pct
from pytimings.analysis.replay import Fidelity, WhatIf
from pytimings.console.text import duration, table


def render_fidelity(fid: Fidelity) -> str:
    n, excluded = fid.windows, fid.excluded
    if n and fid.max_error is not None and fid.median_error is not None:
        line = (
            f"Replay: {n} window{'s' if n != 1 else ''} reproduced from their dependencies "
            f"(max error {pct(fid.max_error)}, median {pct(fid.median_error)})"
        )
    else:
        line = "Replay: no window could be replayed"
    deps = fid.dependencies
    if any(deps.values()):
        words = (
            ("stream_wait", "stream wait"), ("event_sync", "event sync"),
            ("stream_sync", "stream sync"), ("collective", "collective"),
            ("inferred", "cross-stream inferred"), ("sync_inferred", "sync inferred"),
        )  # fmt: skip
        line += "; dependencies: " + ", ".join(
            f"{deps[k]} {w}{'s' if deps[k] != 1 and not w.endswith('inferred') else ''}"
            for k, w in words
            if deps.get(k)
        )
    if excluded:
        reasons = sorted({e.reason for e in excluded})
        line += f"; {len(excluded)} excluded: " + "; ".join(reasons[:3])
        if len(reasons) > 3:
            line += f" (+{len(reasons) - 3} more reasons)"
    return line


def render_what_if(result: WhatIf) -> str:
    rows = result.windows
    out = [f"What if {result.spec}"]
    if not rows:
        return out[0] + ": no window could be replayed"
    by_name: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for r in rows:
        by_name[r.name].append((r.before_ns, r.after_ns, r.bound))
    body = []
    for name, runs in by_name.items():
        before = np.asarray([b for b, _, _ in runs], dtype=np.float64)
        after = np.asarray([a for _, a, _ in runs], dtype=np.float64)
        bounds = sorted({k for _, _, k in runs})
        saving = f"saving ({bounds[0] if len(bounds) == 1 else 'estimate'})"
        for what, v in (("before", before), ("after", after), (saving, before - after)):
            p50, p99 = np.percentile(v, [50, 99])
            body.append([name, what, str(v.size), duration(v.mean()), duration(p50), duration(p99)])
    out += table(["window", "", "count", "mean", "p50", "p99"], body, "llrrrr")
    total_before = sum(r.before_ns for r in rows)
    total_saving = result.total_saving_ns
    out.append(
        f"total saving {duration(total_saving)} of {duration(total_before)} "
        f"({pct(total_saving / max(1, total_before))}) over {len(rows)} windows"
    )
    if result.note:
        out.append(f"({result.note})")
    return "\n".join(out)


def render_critical_path(path: CriticalPath, top: int = 12) -> str:
    w = path.window
    span = w.end_ns - w.start_ns
    links = path.links
    agg: dict[tuple[LinkKind, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for lk in links:
        share_count = agg[(lk.kind, lk.name)]
        share_count[0] += lk.share
        share_count[1] += 1
    ranked = sorted(agg.items(), key=lambda kv: -kv[1][0])
    out = [
        f"Critical path of window {w.index} ({w.name!r}, rank {w.rank}, {duration(span)}, "
        f"starts {duration(w.from_first_ns)} from the first window): "
        f"{len(links)} link{'s' if len(links) != 1 else ''}"
    ]
    body = [
        [kind.value, name or "(untraced)", str(int(n)), duration(share * span), pct(share)]
        for (kind, name), (share, n) in ranked[:top]
    ]
    out += table(["kind", "name", "links", "time", "share"], body, "llrrr")
    if len(ranked) > top:
        rest = sum(v[0] for _, v in ranked[top:])
        out.append(f"(+{len(ranked) - top} more, {pct(rest)})")
    return "\n".join(out)
