"""Kineto trace loading: pytimings vs HolisticTraceAnalysis, side by side in one run.

Inputs: the largest Kineto trace in ../shared/data/external/hta (df_index_resolver.json.gz)
and a >= 50 MB trace made here by replicating the H200 Kineto trace with shifted timestamps
and shifted correlation ids (written to a temporary directory, not committed).

Each loader runs in a fresh subprocess per repetition; the parent measures the child's
peak RSS (ru_maxrss from wait4), the child its own load wall and CPU time (imports excluded,
reported separately). HTA is run from its own virtual environment (its pins would disturb
ours): ``python3 -m venv VENV && VENV/bin/pip install holistictraceanalysis``, then point
``PYTIMINGS_HTA_PYTHON`` at ``VENV/bin/python`` (or pass ``--hta-python``); without it only
pytimings runs, and the run says so.

A third contender, "msgspec*", decodes the whole document at once into typed Structs (the
design pytimings rejected for its memory; it builds no model, so it only bounds parsing).

Checks: pytimings' kernel/memcpy/memset/API/annotation/cpu_op/python_function counts must
equal an independent count with the standard json module (exit status 1 otherwise); HTA's
kernel count is compared too. Both loaders load the cpu_op and python_function events.
Targets (reported, from issues 3 and 12): >= 15x faster, <= 1/5 of HTA's peak memory.

    python benches/bench_ingest_kineto.py [--runs 3] [--hta-python PATH] [--copies 16]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "data"
HTA_TRACE = SHARED / "external/hta/df_index_resolver/df_index_resolver.json.gz"
H200_TRACE = SHARED / "h200/decode_16steps_h200.pt.trace.json.gz"

PYTIMINGS_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from pytimings.ingest.kineto import load_kineto
t1 = time.perf_counter(); c1 = time.process_time()
tr = load_kineto(sys.argv[1])
t2 = time.perf_counter(); c2 = time.process_time()
g, a, r, h = tr.gpu_ops, tr.api_calls, tr.ranges, tr.host_ops
print(json.dumps({
    "import_s": t1 - t0, "load_s": t2 - t1, "cpu_s": c2 - c1,
    "kernels": int((g["kind"] == 0).sum()), "memcpys": int((g["kind"] == 1).sum()),
    "memsets": int((g["kind"] == 2).sum()), "api": len(a),
    "annotations": int((r["kind"] == 2).sum()),
    "cpu_ops": int((h["kind"] == 2).sum()), "python_functions": int((h["kind"] == 3).sum()),
    "rows": len(g) + len(a) + len(r) + len(h), "held_bytes": tr.nbytes,
    "events": tr.meta["events"],
}))
"""

# The design pytimings rejected, raced for the record: the whole document decoded at once
# by msgspec into typed Structs (every event, ts/dur as floats), no splitting.
WHOLE_MSGSPEC_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import msgspec
from isal import igzip
class Args(msgspec.Struct, gc=False):
    correlation: int | str | None = None
    device: int | str | None = None
    stream: int | str | None = None
    bytes: int | str | None = None
class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float = 0.0
    dur: float = 0.0
    args: Args | None = None
class Doc(msgspec.Struct):
    traceEvents: list[Event]
t1 = time.perf_counter(); c1 = time.process_time()
with igzip.open(sys.argv[1], "rb") as f:
    doc = msgspec.json.decode(f.read(), type=Doc)
t2 = time.perf_counter(); c2 = time.process_time()
ev = doc.traceEvents
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "cpu_s": c2 - c1,
                  "kernels": sum(1 for e in ev if e.cat == "kernel" and e.ph == "X")}))
"""

HTA_CHILD = r"""
import json, logging, sys, time
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter(); c1 = time.process_time()
ta = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter(); c2 = time.process_time()
out = {"import_s": t1 - t0, "load_s": t2 - t1, "cpu_s": c2 - c1}
try:
    rank = next(iter(ta.t.traces))
    df = ta.t.get_trace(rank)
    sym = ta.t.symbol_table.get_sym_id_map()
    out["rows"] = len(df)
    out["kernels"] = int((df["cat"] == sym.get("kernel", -99)).sum())
except Exception as e:  # report, do not fail the timing
    out["count_error"] = repr(e)
print(json.dumps(out))
"""


def run_child(python: str, code: str, arg: str, env: dict[str, str]) -> dict[str, Any]:
    """Run one loader in a fresh process; its JSON line plus peak RSS and total wall."""
    t = time.perf_counter()
    proc = subprocess.Popen(
        [python, "-c", code, arg], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None and proc.stderr is not None
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{python} failed ({proc.returncode}): {err.decode()[-2000:]}")
    res: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    res["peak_rss_mb"] = usage.ru_maxrss / 1024  # Linux: KiB
    res["process_s"] = time.perf_counter() - t
    return res


def independent_counts(path: str | Path) -> dict[str, int]:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    doc = json.loads(raw)
    events = doc["traceEvents"]
    cats = Counter(e.get("cat") for e in events if e.get("ph") == "X")
    return {
        "kernels": cats["kernel"] + cats["Kernel"],
        "memcpys": cats["gpu_memcpy"] + cats["Memcpy"],
        "memsets": cats["gpu_memset"] + cats["Memset"],
        "api": cats["cuda_runtime"] + cats["Runtime"] + cats["cuda_driver"] + cats["cuda_sync"],
        "annotations": cats["user_annotation"],
        "cpu_ops": cats["cpu_op"] + cats["Operator"],
        "python_functions": cats["python_function"],
        "events": len(events),
        "json_bytes": len(raw),
    }


def replicate_h200(copies: int | str, out: str | Path) -> str:
    """The H200 trace repeated ``copies`` times on one timeline: copy k shifted by k times
    the trace span, correlation/flow/External ids shifted so that links stay unique."""
    with gzip.open(H200_TRACE, "rb") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    timed = [
        e for e in events if isinstance(e.get("ts"), (int, float)) and isinstance(e.get("pid"), int)
    ]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed)
    span = float(int(span) + 1000)
    id_step = 10 ** (
        len(
            str(
                max(
                    [e.get("id", 0) for e in events if isinstance(e.get("id"), int)]
                    + [e.get("args", {}).get("correlation", 0) for e in events]
                    + [e.get("args", {}).get("External id", 0) for e in events]
                )
            )
        )
    )
    new_events = []
    for k in range(int(copies)):
        for e in events:
            if k and e.get("ph") == "M":
                continue
            e2 = dict(e)
            if isinstance(e2.get("ts"), (int, float)):
                e2["ts"] = round(e2["ts"] + k * span, 3)
            if isinstance(e2.get("id"), int):
                e2["id"] = e2["id"] + k * id_step
            if isinstance(e2.get("args"), dict):
                a = dict(e2["args"])
                for key in ("correlation", "External id"):
                    if isinstance(a.get(key), int):
                        a[key] = a[key] + k * id_step
                e2["args"] = a
            new_events.append(e2)
    doc["traceEvents"] = new_events
    path = Path(out) / "rank-0.pt.trace.json.gz"
    with gzip.open(path, "wb", compresslevel=6) as f:
        f.write(json.dumps(doc, indent=1).encode())
    return str(path)


def summarise(name: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    best = min(runs, key=lambda r: r["load_s"])
    return {
        "name": name,
        "load_s": best["load_s"],
        "load_s_median": statistics.median(r["load_s"] for r in runs),
        "cpu_s": min(r["cpu_s"] for r in runs),
        "import_s": min(r["import_s"] for r in runs),
        "peak_rss_mb": min(r["peak_rss_mb"] for r in runs),
        "last": runs[-1],
    }


def in_child(func: str, *args: str) -> Any:
    """Run a helper of this script in a subprocess and return its JSON result.

    The parent must stay small: on Linux a child's ru_maxrss starts from the parent's peak
    RSS at fork/exec, so the parent never loads a trace itself.
    """
    code = (
        f"import sys, json; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        f"import bench_ingest_kineto as b; print(json.dumps(b.{func}(*sys.argv[1:])))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *args], check=True, capture_output=True
    ).stdout
    return json.loads(out.decode().strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--copies", type=int, default=16, help="H200 copies (16 -> ~56 MB JSON)")
    ap.add_argument(
        "--hta-python",
        default=os.environ.get("PYTIMINGS_HTA_PYTHON") or "(PYTIMINGS_HTA_PYTHON unset)",
        help="python of a venv with HTA",
    )
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    have_hta = Path(args.hta_python).exists()
    if not have_hta:
        print(f"HTA not found at {args.hta_python}: timing pytimings only")
    failed = False
    import resource

    print(
        f"parent peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB "
        "(a floor for the children's readings)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        cases = []
        hta_dir = Path(tmp) / "hta_df_index"
        hta_dir.mkdir()
        (hta_dir / HTA_TRACE.name).symlink_to(HTA_TRACE)
        cases.append(("hta/df_index_resolver.json.gz", hta_dir / HTA_TRACE.name, hta_dir))
        syn_dir = Path(tmp) / "h200_x"
        syn_dir.mkdir()
        syn = Path(in_child("replicate_h200", str(args.copies), str(syn_dir)))
        cases.append((f"h200 x{args.copies} (synthetic)", syn, syn_dir))

        for label, path, trace_dir in cases:
            want = in_child("independent_counts", str(path))
            mb = want["json_bytes"] / 1e6
            print(
                f"\n== {label}: {mb:.1f} MB JSON ({path.stat().st_size / 1e6:.1f} MB gz), "
                f"{want['events']:,} events"
            )
            ours = [
                run_child(args.python, PYTIMINGS_CHILD, str(path), env) for _ in range(args.runs)
            ]
            for key in (
                "kernels",
                "memcpys",
                "memsets",
                "api",
                "annotations",
                "cpu_ops",
                "python_functions",
                "events",
            ):
                if ours[-1][key] != want[key]:
                    print(f"  COUNT MISMATCH {key}: pytimings {ours[-1][key]} != json {want[key]}")
                    failed = True
            rows = [("pytimings", summarise("pytimings", ours))]
            whole = [
                run_child(args.python, WHOLE_MSGSPEC_CHILD, str(path), env)
                for _ in range(args.runs)
            ]
            rows.append(("msgspec*", summarise("msgspec*", whole)))
            if have_hta:
                theirs = [
                    run_child(args.hta_python, HTA_CHILD, str(trace_dir), env)
                    for _ in range(args.runs)
                ]
                rows.append(("HTA", summarise("HTA", theirs)))
                hk = theirs[-1].get("kernels")
                if hk is not None and hk != want["kernels"]:
                    print(f"  note: HTA kernel count {hk} != json {want['kernels']}")
            print(
                f"  {'loader':10} {'load s':>8} {'median':>8} {'cpu s':>7} {'MB/s':>7} "
                f"{'Mev/s':>6} {'peak MB':>8} {'RSS/JSON':>8} {'import s':>8}"
            )
            for name, s in rows:
                print(
                    f"  {name:10} {s['load_s']:8.3f} {s['load_s_median']:8.3f} "
                    f"{s['cpu_s']:7.3f} {mb / s['load_s']:7.1f} "
                    f"{want['events'] / s['load_s'] / 1e6:6.2f} {s['peak_rss_mb']:8.1f} "
                    f"{s['peak_rss_mb'] / mb:8.2f} {s['import_s']:8.3f}"
                )
            o = rows[0][1]
            print(
                f"  pytimings holds {o['last']['held_bytes'] / o['last']['rows']:.1f} bytes "
                f"per modelled row ({o['last']['rows']:,} rows); peak RSS "
                f"{o['peak_rss_mb'] * 1e6 / want['events']:.0f} bytes per input event"
            )
            print("  (msgspec*: whole document decoded at once, for comparison; no model)")
            if have_hta:
                h = rows[2][1]
                speed = h["load_s"] / o["load_s"]
                cpu = h["cpu_s"] / o["cpu_s"]
                mem = o["peak_rss_mb"] / h["peak_rss_mb"]
                print(
                    f"  ratios: {speed:.1f}x faster (wall), {cpu:.1f}x less CPU, "
                    f"peak memory {mem:.2f} of HTA's (1/{1 / mem:.1f})"
                )
                print(
                    f"  targets: >=15x faster: {'met' if speed >= 15 else 'NOT met'}; "
                    f"<=1/5 memory: {'met' if mem <= 0.2 else 'NOT met'}"
                )
    if failed:
        print("\nFAILED: counts differ from the independent json reading")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
