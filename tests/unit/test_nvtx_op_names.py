"""One name rule for PyTorch's emit_nvtx / ``nsys --pytorch=autograd-nvtx`` ranges (issue 45
item 5): the op name, with seq / op_id / sizes kept as attributes."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.synth import make_trace

from pytimings.analysis.attribution import attribute
from pytimings.ingest.names import op_name_ids, op_range_parts
from pytimings.model.trace import RangeKind
from pytimings.session import Analysis

US = 1_000


@pytest.mark.parametrize(
    ("text", "name", "attrs"),
    [
        ("aten::split, seq = 47513, op_id = 998980", "aten::split",
         {"seq": 47513, "op_id": 998980}),
        ("aten::mm, seq = -1, op_id = 3, sizes = [[8, 4], [4, 2]]", "aten::mm",
         {"seq": -1, "op_id": 3, "sizes": "[[8, 4], [4, 2]]"}),
        ("aten::add, op_id = 7, sizes = [[2], [2]], input_op_ids = [5, 6]", "aten::add",
         {"op_id": 7, "sizes": "[[2], [2]]", "input_op_ids": "[5, 6]"}),
        ("forward, step 3", "forward, step 3", {}),  # a comma is no emit_nvtx suffix
        ("layer", "layer", {}),
    ],
)  # fmt: skip
def test_op_range_parts(text: str, name: str, attrs: dict[str, object]) -> None:
    assert op_range_parts(text) == (name, attrs)


def test_op_name_ids_map_each_instance_to_one_name() -> None:
    strings = ["", "aten::mm, seq = 1, op_id = 2", "aten::mm, seq = 5, op_id = 9", "step"]
    ids = op_name_ids(strings)
    assert strings[4:] == ["aten::mm"]  # appended once
    assert ids.tolist() == [0, 4, 4, 3]


def test_host_tables_charge_the_op_by_name() -> None:
    """Two instances of one op on the launching thread, each with its own seq/op_id
    suffix: the host_bound table names the op once, with both instances' time."""
    ops = [{"start": 100 * US, "end": 110 * US, "name": "k", "correlation": 1},
           {"start": 300 * US, "end": 310 * US, "name": "k", "correlation": 2}]  # fmt: skip
    api = [{"start": 90 * US, "end": 95 * US, "correlation": 1},
           {"start": 290 * US, "end": 295 * US, "correlation": 2}]  # fmt: skip
    nvtx = int(RangeKind.NVTX_PUSHPOP)
    ranges = [
        {"start": 0, "end": 400 * US, "name": "step", "kind": nvtx},
        {"start": 20 * US, "end": 96 * US, "name": "aten::mm, seq = 1, op_id = 10",
         "kind": nvtx, "depth": 1},
        {"start": 150 * US, "end": 296 * US, "name": "aten::mm, seq = 2, op_id = 11",
         "kind": nvtx, "depth": 1},
    ]  # fmt: skip
    a = attribute(make_trace(ops, api, ranges), by="step")
    names = {a.trace.strings[i] for i in np.unique(a.host.bound_by_activity["name"])}
    assert "aten::mm" in names and not any("seq =" in n for n in names)
    doc = Analysis(a).to_document()
    listed = [x["name"] for w in doc["windows"] for x in w["host_bound_by_activity"]]
    assert listed.count("aten::mm") == 1
