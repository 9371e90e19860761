"""The analysis session (``pt.analyze``): one type whether the files were loaded here or
analysed by per-rank tasks, typed parts, one registry of findings rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.ranks_synth import write_ranks

import pytimings as pt
from pytimings.analysis.critical_path import CriticalPath, LinkKind
from pytimings.analysis.findings import REGISTRY, Scope
from pytimings.analysis.op_table import LazyOpTable
from pytimings.analysis.replay import Fidelity, WhatIf
from pytimings.commands.example import EXAMPLE_BY, example_path
from pytimings.errors import UsageError


@pytest.fixture(scope="module")
def example() -> pt.Analysis:
    return pt.analyze(example_path(), by=EXAMPLE_BY)


def test_the_parts_are_typed_and_their_json_is_the_documents(example: pt.Analysis) -> None:
    fid = example.replay
    assert isinstance(fid, Fidelity) and fid.windows == 16 and fid.max_error == 0.0
    assert example.to_document()["replay"] == fid.to_dict()
    change = example.what_if("scheduler=0")
    assert isinstance(change, WhatIf) and change.spec == "scheduler=0"
    assert change.total_saving_ns == sum(w.before_ns - w.after_ns for w in change.windows) > 0
    path = example.critical_path(3)
    assert isinstance(path, CriticalPath) and path.window.index == 3
    assert {lk.kind for lk in path.links} <= set(LinkKind)
    assert sum(lk.share for lk in path.links) == pytest.approx(1.0)
    assert path.to_dict()["links"][0]["kind"] == path.links[0].kind.value


def test_options_go_into_the_document(example: pt.Analysis) -> None:
    """The what-if and critical path the options ask for are in the document and report."""
    asked = pt.analyze(example_path(), by=EXAMPLE_BY, what_if="scheduler=0", critical_path=True)
    doc = asked.to_document()
    assert doc["what_if"] == example.what_if("scheduler=0").to_dict()
    assert doc["critical_path"] == example.critical_path().to_dict()
    text = asked.report()
    assert "\nWhat if scheduler=0\n" in text and "\nCritical path of window " in text
    assert "Replay: " not in example.report()  # not asked for: as `analyze` without --json


def test_the_repr_is_one_screen(example: pt.Analysis) -> None:
    lines = repr(example).splitlines()
    assert len(lines) <= 6 and all(len(line) <= 160 for line in lines)
    assert lines[0].startswith("Analysis of decode_16steps_h200.sqlite (by decode_step")


def test_per_rank_tasks_give_the_same_type_and_say_they_have_no_events(tmp_path: Path) -> None:
    files = write_ranks(tmp_path, 2, ops=60)
    tasks = pt.analyze(files, by="decode_step", workers=1)
    together = pt.analyze(files, by="decode_step", critical_path=True)  # loaded together
    assert type(tasks) is type(together) is pt.Analysis
    assert not tasks.has_events and together.has_events
    assert tasks.ops.doc() == together.ops.doc()
    assert "replay" not in tasks.to_document() and "replay" in together.to_document()
    with pytest.raises(UsageError, match="per-rank tasks do not send back"):
        tasks.critical_path()


def test_options_that_do_not_go_together_are_refused_before_loading() -> None:
    with pytest.raises(UsageError, match="--window goes with --critical-path"):
        pt.analyze("no/such/file.json", window=2)
    with pytest.raises(UsageError, match="not with --executor dask"):
        pt.analyze("no/such/file.json", what_if="x=0", executor="dask")


def test_every_rule_is_registered_once_with_the_layer_of_its_findings(
    example: pt.Analysis,
) -> None:
    rules = [e.rule or e.op_rule for e in REGISTRY]
    assert len(set(rules)) == len(rules)
    a = example.attribution
    ops = LazyOpTable(a)
    seen = set()
    for entry in REGISTRY:
        for f in entry.run(a, ops):
            assert f.layer == entry.layer, entry
            seen.add(entry.layer)
    assert {"scheduling", "hardware", "kernel"} <= seen  # the check is not vacuous
    # per rank: what needs a rank's events; across ranks: the windows and collectives
    assert {e.layer for e in REGISTRY if e.scope is Scope.ACROSS} == {
        "hardware", "parallel", "application"
    }  # fmt: skip
