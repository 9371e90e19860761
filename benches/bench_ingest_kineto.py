"""Kineto traces: pytimings vs HolisticTraceAnalysis side by side, and the 8x-longer trace.

Race (issue 27): on the same file, pytimings ``load_kineto`` + whole-trace ``attribute``
(every host activity loaded: cpu_op, python_function) against HTA's ``TraceAnalysis`` load +
``get_temporal_breakdown`` + ``get_idle_time_breakdown`` + ``get_comm_comp_overlap``. Each
run is a fresh process, the sides alternate (so that load on a shared machine hits both),
medians of ``--runs`` (3) are compared. Timed: wall and CPU of load + analysis (imports
excluded, reported apart). Memory: growth = peak RSS (ru_maxrss) less the RSS after the
imports, so the interpreters' and libraries' own sizes do not blur the ratio.
Inputs: the H200 Kineto trace replicated ``--copies`` times (16: ~60 MB of JSON) with
shifted timestamps and ids, and ``--copies / 8`` times. (HTA's own largest test trace,
df_index_resolver, is not a rank-0 trace: HTA's breakdowns raise ValueError on it.)

Scaling: the trace 8x longer (``--copies`` against ``--copies / 8``), pytimings: targets
time <= 9x, memory growth < the JSON size.

Targets (issue 27): >= 30x HTA's time, <= 1/10 of its memory growth. Checks: pytimings'
kernel/memcpy/memset/API/annotation/cpu_op/python_function counts equal an independent
count with the standard json module, and attribution labels sum to every window (exit 1
otherwise); exit 3 when a target is missed.

HTA runs from its own virtual environment (its pins would disturb ours):
``python3 -m venv VENV && VENV/bin/pip install holistictraceanalysis``, then point
``PYTIMINGS_HTA_PYTHON`` at ``VENV/bin/python`` (or pass ``--hta-python``); without it only
pytimings runs, and the run says so.

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
H200_TRACE = SHARED / "h200/decode_16steps_h200.pt.trace.json.gz"

# RSS now, from /proc (ru_maxrss is the peak)
RSS = (
    "def rss():\n"
    "    return int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE')\n"
)

PYTIMINGS_CHILD = (
    r"""
import json, os, resource, sys, time
t0 = time.perf_counter()
import numpy as np
from pytimings.analysis.attribution import LABELS, attribute
from pytimings.ingest.kineto import load_kineto
"""
    + RSS
    + r"""
base = rss()
t1 = time.perf_counter(); c1 = time.process_time()
tr = load_kineto(sys.argv[1])
t2 = time.perf_counter(); c2 = time.process_time()
a = attribute(tr)  # whole-trace partition + idle split + comm/compute overlap + host
t3 = time.perf_counter(); c3 = time.process_time()
w = a.windows
g, r, h = tr.gpu_ops, tr.ranges, tr.host_ops
print(json.dumps({
    "import_s": t1 - t0, "load_s": t2 - t1, "total_s": t3 - t1, "cpu_s": c3 - c1,
    "growth_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base) / 1e6,
    "ok": bool((sum(w[f"{x}_ns"] for x in LABELS) == w["window_ns"]).all()),
    "kernels": int((g["kind"] == 0).sum()), "memcpys": int((g["kind"] == 1).sum()),
    "memsets": int((g["kind"] == 2).sum()), "api": len(tr.api_calls) + len(tr.syncs),
    "annotations": int((r["kind"] == 2).sum()),
    "cpu_ops": int((h["kind"] == 2).sum()), "python_functions": int((h["kind"] == 3).sum()),
    "events": tr.meta["events"],
}))
"""
)

HTA_CHILD = (
    r"""
import json, logging, os, resource, sys, time, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
"""
    + RSS
    + r"""
base = rss()
t1 = time.perf_counter(); c1 = time.process_time()
a = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
a.get_temporal_breakdown(visualize=False)
a.get_idle_time_breakdown(visualize=False)
a.get_comm_comp_overlap(visualize=False)
t3 = time.perf_counter(); c3 = time.process_time()
print(json.dumps({
    "import_s": t1 - t0, "load_s": t2 - t1, "total_s": t3 - t1, "cpu_s": c3 - c1,
    "growth_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base) / 1e6,
}))
"""
)


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


def median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(float(r[key]) for r in runs))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--copies", type=int, default=16, help="H200 copies (16 -> ~60 MB JSON)")
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
    failed = missed = False
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the start")
    with tempfile.TemporaryDirectory() as tmp:

        def synthetic(copies: int) -> tuple[Path, Path]:
            d = Path(tmp) / f"h200_x{copies}"
            d.mkdir()
            return Path(in_child("replicate_h200", str(copies), str(d))), d

        syn, syn_dir = synthetic(args.copies)
        short, short_dir = synthetic(max(1, args.copies // 8))
        cases = [
            (f"h200 x{args.copies} (synthetic)", syn, syn_dir),
            (f"h200 x{max(1, args.copies // 8)} (synthetic, 1/8 as long)", short, short_dir),
        ]
        ours_by_case: dict[str, tuple[list[dict[str, Any]], dict[str, int]]] = {}
        for label, path, trace_dir in cases:
            want = in_child("independent_counts", str(path))
            mb = want["json_bytes"] / 1e6
            print(
                f"\n== {label}: {mb:.1f} MB JSON ({path.stat().st_size / 1e6:.1f} MB gz), "
                f"{want['events']:,} events"
            )
            ours, theirs = [], []
            for _ in range(args.runs):  # alternating
                if have_hta:
                    theirs.append(run_child(args.hta_python, HTA_CHILD, str(trace_dir), env))
                ours.append(run_child(args.python, PYTIMINGS_CHILD, str(path), env))
            ours_by_case[label] = (ours, want)
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
            if not all(r["ok"] for r in ours):
                print("  CHECK FAILED: attribution labels do not sum to the windows")
                failed = True
            print(f"  {'side':10} {'total s':>8} {'load s':>7} {'cpu s':>7} {'growth MB':>9}")
            for name, runs in (("pytimings", ours), ("HTA", theirs)):
                if runs:
                    print(
                        f"  {name:10} {median(runs, 'total_s'):8.3f} {median(runs, 'load_s'):7.3f}"
                        f" {median(runs, 'cpu_s'):7.3f} {median(runs, 'growth_mb'):9.1f}"
                        f"   (medians of {len(runs)}; import {median(runs, 'import_s'):.2f} s)"
                    )
            if theirs:
                speed = median(theirs, "total_s") / median(ours, "total_s")
                cpu = median(theirs, "cpu_s") / median(ours, "cpu_s")
                mem = median(ours, "growth_mb") / median(theirs, "growth_mb")
                print(
                    f"  ratios: {speed:.1f}x faster (wall), {cpu:.1f}x less CPU, memory "
                    f"growth {mem:.3f} of HTA's (1/{1 / mem:.1f})"
                )
                ok_speed, ok_mem = speed >= 30, mem <= 0.1
                print(
                    f"  targets: >= 30x faster: {'met' if ok_speed else 'NOT met'}; "
                    f"<= 1/10 memory: {'met' if ok_mem else 'NOT met'}"
                )
                if label == cases[0][0]:  # judged at the full size (fixed costs aside)
                    missed |= not (ok_speed and ok_mem)
        (long_runs, long_want), (short_runs, _) = (
            ours_by_case[cases[0][0]],
            ours_by_case[cases[1][0]],
        )
        t_ratio = median(long_runs, "total_s") / median(short_runs, "total_s")
        growth = median(long_runs, "growth_mb")
        json_mb = long_want["json_bytes"] / 1e6
        print(
            f"\n== scaling: 8x longer trace: {t_ratio:.2f}x the time (target <= 9x); memory "
            f"growth {growth:.1f} MB vs {json_mb:.1f} MB of JSON (target: below it)"
        )
        missed |= not (t_ratio <= 9 and growth < json_mb)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if failed:
        print("\nFAILED: a check failed")
        return 1
    return 3 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
