"""``pt.analyze`` against ``pytimings analyze`` on every real trace in ../shared: the same
document and the same text (the session is the only producer of both, so a command that
assembled its own would differ here), and one rule registry for one file or several."""

from __future__ import annotations

import collections
import fnmatch
import json
from pathlib import Path

import pytest
from helpers.shared_traces import trace_files

import pytimings as pt
from pytimings.analysis.findings import REGISTRY, Scope
from pytimings.cli import main

pytestmark = pytest.mark.shared

STEP_RANGES = ("decode_step", "ProfilerStep#*")


def _step_range(path: Path) -> str | None:
    """The trace's step range (the first of STEP_RANGES it has), else None."""
    trace = pt.load(path)
    names = {trace.strings[int(i)] for i in set(trace.ranges["name"].tolist())}
    return next((p for p in STEP_RANGES if any(fnmatch.fnmatchcase(n, p) for n in names)), None)


def _cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main([*argv, "-q"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("path", trace_files(), ids=lambda p: p.name)
def test_the_session_is_what_the_cli_writes_and_prints(
    path: Path, shared_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    by = _step_range(path)
    out = tmp_path / "a.json"
    printed = _cli(
        capsys, ["analyze", str(path), "--json", str(out), *(["--by", by] if by else [])]
    )
    # --json puts the replay in the document, and its fidelity line in the text
    analysis = pt.analyze(path, by=by, replay=True)
    assert analysis.to_document() == json.loads(out.read_text())
    assert printed == analysis.report() + f"\n\nwrote {out}\n"


def test_the_step_ranges_are_found(shared_dir: Path) -> None:
    """The test above runs --by on the traces that have steps, not only whole traces."""
    bys = [_step_range(p) for p in trace_files()]
    assert bys.count("ProfilerStep#*") >= 20 and "decode_step" in bys


def _rank_layers(doc: dict[str, object], rank: int) -> collections.Counter[str]:
    """Per layer, the findings of the per-rank rules that name ``rank`` (in several ranks'
    documents each such finding names its rank or ranks)."""
    per_rank = {e.layer for e in REGISTRY if e.scope is Scope.RANK}
    found = doc["findings"]
    assert isinstance(found, list)
    return collections.Counter(
        f["layer"]
        for f in found
        if f["layer"] in per_rank
        and rank in (f["evidence"].get("ranks") or [f["evidence"].get("rank", rank)])
    )


def test_one_file_or_several_run_the_same_rules(
    shared_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``analyze F`` and ``analyze G F`` (per-rank tasks) list the same per-rank findings
    for F, layer by layer: F's device memory findings (peak, fragmentation) included, which
    only the one-file rule list held before the rules had one registry."""
    ext = shared_dir / "data/external"
    rank_1 = ext / "hta/df_index_resolver/df_index_resolver.json.gz"  # names its rank: 1
    resnet = "kineto/tb_plugin_samples/resnet50_num_workers_0"
    rank_0 = ext / resnet / "worker0.1623143089861.pt.trace.json.gz"  # no rank: first file
    one, both = tmp_path / "one.json", tmp_path / "both.json"
    _cli(capsys, ["analyze", str(rank_1), "--json", str(one)])
    _cli(capsys, ["analyze", str(rank_0), str(rank_1), "--json", str(both), "--workers", "1"])
    alone, together = json.loads(one.read_text()), json.loads(both.read_text())
    assert {w["rank"] for w in alone["windows"]} == {1}
    assert {w["rank"] for w in together["windows"]} == {0, 1}
    want = _rank_layers(alone, 1)  # F alone: every finding is its rank's
    assert want["memory"] == 3  # the copies not hidden, the peak, the fragmentation
    assert _rank_layers(together, 1) == want
