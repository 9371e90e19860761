from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimings.errors import TraceFormatError
from pytimings.ingest import load
from pytimings.model.trace import DEVICE_SCHEMA, StringTable, ValueOutOfRange, conform


def test_conform_refuses_values_that_would_wrap() -> None:
    with pytest.raises(ValueOutOfRange, match="device value 99999999"):
        conform({"device": [0, 99999999], "name": [0, 0], "rank": [0, 0]}, DEVICE_SCHEMA)


def test_conform_keeps_values_that_fit() -> None:
    t = conform(
        {"device": np.array([0, 7], dtype=np.int64), "name": [1, 2], "rank": [0, 0]},
        DEVICE_SCHEMA,
    )
    assert t["device"].dtype == np.int16
    assert t["device"].tolist() == [0, 7]


def _kineto_with_device(path: Path, device: int) -> None:
    events = [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 10.0,
            "dur": 2.0,
            "args": {"correlation": 5},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": device,
            "tid": 7,
            "ts": 13.0,
            "dur": 4.0,
            "args": {"correlation": 5, "device": device, "stream": 7},
        },
    ]
    with gzip.open(path, "wt") as f:
        json.dump({"schemaVersion": 1, "traceEvents": events}, f)


def test_a_device_id_the_model_cannot_hold_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "big_device.pt.trace.json.gz"
    _kineto_with_device(path, 99999999)
    with pytest.raises(TraceFormatError, match=r"big_device.*99999999"):
        load(path)
    r = subprocess.run(
        [sys.executable, "-m", "pytimings.cli", "summary", str(path)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "99999999" in r.stderr


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=3), max_size=8), st.lists(st.text(max_size=3), max_size=30))
def test_intern_many_matches_one_at_a_time(seed: list[str], values: list[str]) -> None:
    """Bulk interning gives the ids, and grows the table, exactly as interning each value in
    turn does (first-seen order, existing strings keep their ids)."""
    bulk, single = StringTable(seed), StringTable(seed)
    got = bulk.intern_many(values)
    want = [single.intern(v) for v in values]
    assert got.tolist() == want
    assert got.dtype == np.int32
    assert bulk.strings == single.strings


def test_conform_fills_only_optional_columns() -> None:
    from pytimings.model.trace import GPU_OP_SCHEMA, OPTIONAL_COLUMNS

    cols = {c: np.zeros(3, dtype=dt) for c, dt in GPU_OP_SCHEMA.items() if c != "graph_node"}
    t = conform(cols, GPU_OP_SCHEMA)
    assert t["graph_node"].tolist() == [OPTIONAL_COLUMNS["graph_node"]] * 3 == [-1] * 3
    del cols["graph"]
    with pytest.raises(ValueError, match=r"missing columns \['graph'\]"):
        conform(cols, GPU_OP_SCHEMA)
