"""Digests of a loaded trace: one sha256 per column of every table (string-id columns by
the strings they name: ids depend on the order strings were first met), plus meta and
dropped counts; two loads give equal digests exactly when their results are equal."""

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
        for col in t.columns:
            v = np.ascontiguousarray(t[col])
            h = hashlib.sha256(f"{v.dtype.str}:{len(v)}:".encode())
            if col in STRING_COLUMNS[name]:
                for i in v.tolist():
                    s = tr.strings[i].encode("utf-8", "surrogatepass")
                    h.update(len(s).to_bytes(8, "little") + s)
            else:
                h.update(v.tobytes())
            out[f"{name}.{col}"] = h.hexdigest()
    out["meta"] = _sha(tr.meta)
    out["dropped"] = _sha(tr.dropped)
    return out


def _sha(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, default=repr, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
