"""Digests of a loaded trace: one sha256 per table over its columns' bytes (string-id
columns by the strings they name: ids depend on the order strings were first met), plus
meta and dropped counts; two loads give equal digests exactly when their results are equal.

``python tests/helpers/trace_digest.py OUT.json`` writes the digests of every Kineto trace
in ../shared (tests/data/kineto/digests.json holds those of the loader they were made with).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from helpers.shared_traces import trace_files
from pytimings.ingest.kineto import looks_like_kineto
from pytimings.model.trace import STRING_COLUMNS, TABLES, Trace


def kineto_files() -> list[Path]:
    """Every Kineto trace under ../shared/data/external and ../shared/data/h200."""
    out = []
    for p in trace_files():
        if not p.name.endswith((".json", ".json.gz")):
            continue
        with p.open("rb") as f:
            head = f.read(65536)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(p, "rb") as g:
                head = g.read(65536)
        if looks_like_kineto(head):
            out.append(p)
    return out


def digests(tr: Trace) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in TABLES:
        t = tr.table(name)
        table = hashlib.sha256()
        for col in t.columns:
            v = np.ascontiguousarray(t[col])
            h = hashlib.sha256(f"{v.dtype.str}:{len(v)}:".encode())
            if col in STRING_COLUMNS[name]:
                for i in v.tolist():
                    s = tr.strings[i].encode("utf-8", "surrogatepass")
                    h.update(len(s).to_bytes(8, "little") + s)
            else:
                h.update(v.tobytes())
            table.update(f"{col}={h.hexdigest()};".encode())
        out[name] = table.hexdigest()
    # the file's path is where this checkout's ../shared is, not what the file holds
    out["meta"] = _sha({k: v for k, v in tr.meta.items() if k != "path"})
    out["dropped"] = _sha(tr.dropped)
    return out


def _sha(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, default=repr, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def relative(path: Path) -> str:
    """A trace's path relative to ../shared/data (the key of its digests)."""
    return path.resolve().relative_to(ROOT).as_posix()


ROOT = (Path(__file__).resolve().parents[2].parent / "shared" / "data").resolve()

if __name__ == "__main__":
    import sys

    from pytimings.ingest.kineto import load_kineto

    table = {relative(p): digests(load_kineto(p)) for p in kineto_files()}
    Path(sys.argv[1]).write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
