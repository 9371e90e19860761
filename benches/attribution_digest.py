"""A digest of what ``attribute()`` and the op table over it return, to show that a change keeps
results identical.

    python benches/attribution_digest.py [--by NAME] [--ops N] [--host-per-launch K] [TRACE ...]

With no TRACE: the synthetic trace of ``bench_attribution.py`` (``--ops`` GPU ops, ``--host-per-
launch`` host ops per launch call, 1,000 ``step`` ranges). Prints one line per input: the sha256
of the windows table, the host_bound charges by activity and by range, the host windows and
their charges, the op table (``op_table(a)``: its JSON, per-window categories, op rows and
categories), then the same per part. Run it on two trees (``PYTHONPATH``) and compare.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np

from pytimings.analysis.attribution import attribute
from pytimings.analysis.op_table import op_table
from pytimings.ingest import load
from pytimings.table import Table


def bench_trace(n: int, k: int) -> Any:
    """The trace ``bench_attribution.py`` generates (its child's code, run here)."""
    spec = importlib.util.spec_from_file_location(
        "bench_attribution", Path(__file__).with_name("bench_attribution.py")
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    env: dict[str, Any] = {}
    exec(mod.SCALE_CHILD.split("\nn, k, by = ")[0], env)
    return env["synth"](n, k)


def table_digest(h: Any, t: Table) -> None:
    for c in t:
        col = t[c]
        h.update(c.encode())
        if col.dtype == object:
            h.update("\0".join(map(str, col.tolist())).encode())
        else:
            h.update(np.ascontiguousarray(col).tobytes())


def digest(trace: Any, by: str | None) -> dict[str, str]:
    a = attribute(trace, by=by)
    parts = {
        "windows": a.windows,
        "bound_by_activity": a.host.bound_by_activity,
        "bound_by_range": a.host.bound_by_range,
        "host_windows": a.host.windows,
        "host_window_charges": a.host.by_activity,
        "launches": Table({"api_row": a.launches.api_row, "start": a.launches.start}),
        "gaps": Table({f: getattr(a.gaps, f) for f in a.gaps.__dataclass_fields__}),
        "latency": Table({"ns": a.launch_latency.latency_ns, "op": a.launch_latency.op}),
    }
    out = {}
    whole = hashlib.sha256()
    for name, t in parts.items():
        h = hashlib.sha256()
        table_digest(h, t)
        table_digest(whole, t)
        out[name] = h.hexdigest()[:16]
    ot = op_table(a)
    h = hashlib.sha256()
    for blob in (
        json.dumps([ot.doc(), ot.window_categories], sort_keys=True).encode(),
        np.ascontiguousarray(ot.op_row, dtype=np.int64).tobytes(),
        ot.category.tobytes(),
    ):
        h.update(blob)
        whole.update(blob)
    out["op_table"] = h.hexdigest()[:16]
    out["all"] = whole.hexdigest()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*")
    ap.add_argument("--by", default=None)
    ap.add_argument("--ops", type=int, default=10_000_000)
    ap.add_argument("--host-per-launch", type=int, default=3)
    args = ap.parse_args()
    inputs = [(p, lambda p=p: load(p)) for p in args.traces] or [
        (
            f"bench({args.ops}, {args.host_per_launch})",
            lambda: bench_trace(args.ops, args.host_per_launch),
        )
    ]
    for label, make in inputs:
        try:
            d = digest(make(), args.by)
        except Exception as exc:  # a trace that cannot be analysed: say why
            print(f"{label} --by {args.by}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        print(
            f"{label} --by {args.by}: {d.pop('all')}  " + " ".join(f"{k}={v}" for k, v in d.items())
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
