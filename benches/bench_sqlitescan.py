"""The native SQLite b-tree scanner: CPU ns per row on CUPTI_ACTIVITY_KIND_RUNTIME.

Reads start, end, eventClass, globalTid, correlationId, nameId (six integer columns) of a
large export made by replicating the H200 export (``bench_ingest_nsys.replicate``), single
thread, best of ``--repeat`` runs, and checks the columns against sqlite3's on the first and
last 10,000 rows. For scale: sqlite3_step alone costs ~265 ns per row of this table in C.
Usage: ``python benches/bench_sqlitescan.py [--factor 500] [--file PATH]``.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ingest_nsys import GPU_TABLES, H200, HOST_TABLES, replicate

from pytimings.ingest._sqlite import SqliteFile

TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
COLUMNS = ("start", "end", "eventClass", "globalTid", "correlationId", "nameId")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--factor", type=int, default=500, help="replication factor (default 500)")
    ap.add_argument("--file", type=Path, help="an existing replicated export to read")
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.file
        if path is None:
            path = Path(tmp) / "big.sqlite"
            replicate(H200, path, args.factor, GPU_TABLES + HOST_TABLES)
        best = float("inf")
        with SqliteFile(path) as f:
            for _ in range(args.repeat):
                t0 = time.process_time()
                cols = f.read(TABLE, dict.fromkeys(COLUMNS, "i"))
                best = min(best, time.process_time() - t0)
        n = len(cols["start"].values)
        db = sqlite3.connect(path)
        names = ", ".join('"' + c + '"' for c in COLUMNS)
        sql = f"SELECT {names} FROM {TABLE} ORDER BY rowid"
        head = np.array(db.execute(sql + " LIMIT 10000").fetchall(), dtype=np.int64)
        tail = np.array(db.execute(sql + f" LIMIT 10000 OFFSET {n - 10000}").fetchall())
        db.close()
    got = np.stack([cols[c].values for c in COLUMNS], axis=1)
    ok = (got[:10000] == head).all() and (got[-10000:] == tail).all()
    print(f"{TABLE}: {n} rows x {len(COLUMNS)} int columns: {best * 1e9 / n:.1f} ns/row (CPU)")
    print("check:", "ok" if ok else "MISMATCH against sqlite3")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
