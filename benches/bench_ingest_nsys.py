"""Nsight Systems SQLite ingestion: GPU ops/s per core, events/s, MB/s, bytes held per op.

Runs on the real exports in ../shared/data and on synthetic large exports made here by
replicating the H200 export's event tables with shifted times and correlation ids:
- ``ops``: only the GPU-op tables (kernels, memcpys, memsets), ~2M GPU ops;
- ``full``: every event table (GPU ops, CUDA API calls, syncs, NVTX), as a real trace is.
It also races the SQLite readers on the ``full`` file's API-call table (sqlite3 + fetchall +
numpy, the b-tree scanner the loader uses, and ADBC -> Arrow -> numpy when
adbc-driver-sqlite is installed). Rates use CPU time of this process (one core).
Every result is checked (row counts against the replication factor); exit status 1 on a
mismatch. ``--quick`` makes small inputs (a CI smoke run).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pytimings.ingest._sqlite import SqliteFile
from pytimings.ingest.nsys import load_nsys
from pytimings.model.trace import OpKind, Trace

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "data"
H200 = SHARED / "h200" / "decode_16steps_h200.sqlite"
GPU_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
)
HOST_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS")


def replicate(src: Path, dst: Path, factor: int, tables: tuple[str, ...]) -> dict[str, int]:
    """Copy ``src`` with ``tables`` repeated ``factor`` times (times and ids shifted);
    the other event tables are dropped. Returns the expected row count per table."""
    shutil.copy(src, dst)
    os.chmod(dst, 0o644)
    db = sqlite3.connect(dst)
    span = db.execute(
        'SELECT max("end") - min(start) + 1000 FROM CUPTI_ACTIVITY_KIND_RUNTIME'
    ).fetchone()[0]
    corr = db.execute("SELECT max(correlationId) + 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[
        0
    ]
    db.execute("CREATE TEMP TABLE k (i INTEGER)")
    db.executemany("INSERT INTO k VALUES (?)", [(i,) for i in range(1, factor)])
    expected = {}
    for t in GPU_TABLES + HOST_TABLES:
        if t not in tables:
            db.execute(f"DROP TABLE {t}")
            continue
        cols = [r[1] for r in db.execute(f"PRAGMA table_info({t})")]
        sel = ", ".join(
            f'"{c}" + k.i * {span}'
            if c in ("start", "end")
            else f'"{c}" + k.i * {corr}'
            if c == "correlationId"
            else f'"{c}"'
            for c in cols
        )
        # copy k follows copy k-1 in time, in the table's own row order, as a longer
        # capture would be written (nsys writes each table in start order)
        db.execute(f"INSERT INTO {t} SELECT {sel} FROM k, {t} ORDER BY k.i, {t}.rowid")
        expected[t] = db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
    db.commit()
    db.execute("VACUUM")
    db.close()
    return expected


def timed(fn: Callable[[], Any], repeat: int) -> tuple[Any, float, float]:
    """Best (CPU seconds, wall seconds) of ``repeat`` runs, and the last result."""
    best_cpu = best_wall = float("inf")
    result = None
    for _ in range(repeat):
        result = None
        c, w = time.process_time(), time.perf_counter()
        result = fn()
        best_cpu = min(best_cpu, time.process_time() - c)
        best_wall = min(best_wall, time.perf_counter() - w)
    return result, best_cpu, best_wall


def measure(path: Path, repeat: int) -> dict[str, Any]:
    tr, cpu, wall = timed(lambda: load_nsys(path), repeat)
    assert isinstance(tr, Trace)
    ops = len(tr.gpu_ops)
    events = ops + len(tr.api_calls) + len(tr.ranges)
    return {
        "file": path.name,
        "MB": path.stat().st_size / 1e6,
        "cpu_s": cpu,
        "wall_s": wall,
        "gpu_ops": ops,
        "events": events,
        "ops_per_s": ops / cpu,
        "events_per_s": events / cpu,
        "MB_per_s": path.stat().st_size / 1e6 / cpu,
        "bytes_per_op": tr.gpu_ops.nbytes / max(ops, 1),
        "bytes_per_event": tr.nbytes / max(events, 1),
        "trace": tr,
    }


def race_readers(path: Path, repeat: int) -> list[tuple[str, float, int]]:
    """The API-call table (six integer columns) read into numpy columns by each reader;
    every reader's columns are checked equal to sqlite3's."""
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    names = ("start", "end", "eventClass", "globalTid", "correlationId", "nameId")
    quoted = ", ".join(f'"{c}"' for c in names)
    sql = f"SELECT {quoted} FROM {table}"
    uri = f"file:{path}?mode=ro"

    def with_sqlite3() -> list[np.ndarray]:
        db = sqlite3.connect(uri, uri=True)
        rows = db.execute(sql).fetchall()
        db.close()
        return list(np.array(rows, dtype=np.int64).T)

    def with_scanner() -> list[np.ndarray]:
        with SqliteFile(path) as f:
            cols = f.read(table, dict.fromkeys(names, "i"))
        return [cols[c].values for c in names]

    def with_adbc() -> list[np.ndarray]:
        import adbc_driver_sqlite.dbapi as adbc

        with adbc.connect(uri) as conn:
            cur = conn.cursor()
            cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": "262144"})
            cur.execute(sql)
            tab = cur.fetch_arrow_table()
            cur.close()
        return [np.asarray(c.to_numpy()) for c in tab.columns]

    readers = [
        ("sqlite3 fetchall -> numpy", with_sqlite3),
        ("pytimings b-tree scanner -> numpy (used)", with_scanner),
    ]
    try:
        import adbc_driver_sqlite  # noqa: F401

        readers.append(("ADBC -> Arrow -> numpy (batch 262144)", with_adbc))
    except ImportError:
        pass
    want = with_sqlite3()
    out = []
    for name, fn in readers:
        cols, cpu, _ = timed(fn, repeat)
        same = all(np.array_equal(a, b) for a, b in zip(cols, want, strict=True))
        out.append((name, cpu, len(cols[0]) if same else -1))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small inputs (CI smoke run)")
    ap.add_argument("--results", type=Path, help="append a markdown section to this file")
    args = ap.parse_args()
    if not H200.exists():
        print(f"skipped: {H200} is not present", file=sys.stderr)
        return 0
    repeat = 1 if args.quick else 3
    ops_factor, full_factor = (20, 10) if args.quick else (1860, 500)
    failures: list[str] = []
    rows = [measure(p, repeat) for p in sorted(SHARED.rglob("*.sqlite"))]
    with tempfile.TemporaryDirectory(prefix="bench-nsys-") as tmp:
        synth = []
        for label, factor, tables in [
            ("ops", ops_factor, GPU_TABLES),
            ("full", full_factor, GPU_TABLES + HOST_TABLES),
        ]:
            path = Path(tmp) / f"synthetic_{label}_x{factor}.sqlite"
            expected = replicate(H200, path, factor, tables)
            r = measure(path, repeat)
            tr = r.pop("trace")
            kinds = tr.gpu_ops["kind"]
            for t, kind in zip(GPU_TABLES, OpKind, strict=True):
                if int((kinds == kind).sum()) != expected[t]:
                    failures.append(
                        f"{path.name}: {t} {int((kinds == kind).sum())} != {expected[t]}"
                    )
            if "CUPTI_ACTIVITY_KIND_RUNTIME" in expected:
                # synchronization records are a table of their own (contract v3)
                want = expected["CUPTI_ACTIVITY_KIND_RUNTIME"]
                if len(tr.api_calls) != want:
                    failures.append(f"{path.name}: api calls {len(tr.api_calls)} != {want}")
                got = len(tr.syncs)
                if got != expected["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"]:
                    failures.append(
                        f"{path.name}: sync records {got} != "
                        f"{expected['CUPTI_ACTIVITY_KIND_SYNCHRONIZATION']}"
                    )
            del tr
            synth.append(r)
            if label == "full":
                race = race_readers(path, repeat)
                for name, _, n in race:
                    if n != expected["CUPTI_ACTIVITY_KIND_RUNTIME"]:
                        failures.append(f"reader {name}: {n} rows or columns differ")
            path.unlink()
    for r in rows:
        r.pop("trace")
    report = render(rows + synth, race)
    print(report)
    if args.results and not failures:
        with open(args.results, "a", encoding="utf-8") as f:
            f.write("\n" + report)
    for msg in failures:
        print("MISMATCH:", msg, file=sys.stderr)
    return 1 if failures else 0


def render(rows: list[dict[str, Any]], race: list[tuple[str, float, int]]) -> str:
    lines = [
        "## nsys SQLite ingestion (bench_ingest_nsys.py)",
        "",
        f"Machine: 2-core x86_64 dev box, no GPU; date {time.strftime('%Y-%m-%d %H:%M')} UTC.",
        "Rates per CPU-second of one process (best of runs). bytes/op = GPU-op table bytes per",
        "GPU op held; bytes/event = all tables held per event (ops + API calls + ranges).",
        "",
        "| file | MB | GPU ops | events | CPU s | GPU ops/s | events/s | MB/s | bytes/op "
        "| bytes/event |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['file']} | {r['MB']:.1f} | {r['gpu_ops']:,} | {r['events']:,} "
            f"| {r['cpu_s']:.3f} | "
            f"{r['ops_per_s']:,.0f} | {r['events_per_s']:,.0f} | {r['MB_per_s']:.0f} | "
            f"{r['bytes_per_op']:.0f} | {r['bytes_per_event']:.0f} |"
        )
    lines += [
        "",
        "CUPTI_ACTIVITY_KIND_RUNTIME (six integer columns) of the `full` file read into numpy",
        "columns, by reader (each checked equal to sqlite3's):",
        "",
        "| reader | CPU s | rows | ns/row | ratio to fastest |",
        "|---|---:|---:|---:|---:|",
    ]
    fastest = min(c for _, c, _ in race)
    for name, cpu, n in race:
        lines.append(f"| {name} | {cpu:.3f} | {n:,} | {cpu / n * 1e9:.1f} | {cpu / fastest:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
