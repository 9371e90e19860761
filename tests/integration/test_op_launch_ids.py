"""Kineto's External id against the innermost-op rule, on every Kineto trace in ../shared:
the launching ops found by id (and the interval index for the calls the ids leave) are the
ones the interval index alone finds, and where the trace has the ids, every launch call's
id names that op (so the index is not built at all)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers.trace_digest import kineto_files

from pytimings.analysis.launches import link_launches
from pytimings.analysis.op_launch import launching_ops
from pytimings.ingest.kineto import load_kineto
from pytimings.model.trace import ActivityKind

pytestmark = pytest.mark.shared
FILES = kineto_files()


def _named_by_id(path: Path) -> tuple[int, int]:
    """(asked launch calls, those whose External id names the cpu_op the index finds),
    counted with a dict, apart from the compiled join."""
    tr = load_kineto(path)
    launches = link_launches(tr)
    found = launching_ops(tr, launches, by_id=False)
    host = tr.host_ops
    cpu = np.flatnonzero((host["kind"] == ActivityKind.CPU_OP) & (host["external"] >= 0))
    by_id = dict(zip(host["external"][cpu].tolist(), cpu.tolist(), strict=True))
    asked = np.flatnonzero((launches.api_row >= 0) & ~launches.graph)
    ids = tr.api_calls["external"][launches.api_row[asked]].tolist()
    rows = found.op_row[asked].tolist()
    return asked.size, sum(by_id.get(i, -1) == r and r >= 0 for i, r in zip(ids, rows, strict=True))


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_launching_ops_by_id_are_the_innermost_ops(path: Path) -> None:
    tr = load_kineto(path)
    launches = link_launches(tr)
    by_id = launching_ops(tr, launches)
    by_time = launching_ops(tr, launches, by_id=False)
    assert by_id.table == by_time.table
    assert (by_id.op_row == by_time.op_row).all() and (by_id.reason == by_time.reason).all()


@pytest.mark.parametrize(
    "name",
    [
        "h200/decode_16steps_h200.pt.trace.json.gz",
        "external/tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
        "external/tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
        "external/hta/nccl_parser_config/nccl_data.json.gz",
    ],
)
def test_every_launch_calls_id_names_its_innermost_op(name: str) -> None:
    (path,) = [p for p in FILES if p.as_posix().endswith(name)]
    asked, named = _named_by_id(path)
    assert asked > 1000 and named == asked
