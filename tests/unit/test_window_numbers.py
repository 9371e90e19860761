"""One window numbering everywhere (issue 29 item 4): the ``index`` of each JSON/CSV windows
row is the number ``--window N`` picks, the Slowest table shows (``#N``), the critical path
and the findings name; the Slowest table and the critical path give times from the first
window in one convention."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.synth import make_trace

from pytimings.analysis.attribution import attribute
from pytimings.analysis.critical_path import critical_path
from pytimings.analysis.replay import replay_windows
from pytimings.cli import main
from pytimings.commands.example import example_path
from pytimings.console.text import duration
from pytimings.ingest import load
from pytimings.session import Analysis


def _assert_numbers_are_the_replays(a: Any) -> None:
    """Entries numbered k are exactly the device entries of the replay's k-th window."""
    w, rw = a.windows, replay_windows(a)
    assert sorted(set(w["index"].tolist())) == list(range(1, len(rw.name) + 1))
    for k in range(len(rw.name)):
        mine = np.flatnonzero(w["index"] == k + 1)
        assert mine.size >= 1
        assert set(w["start_ns"][mine].tolist()) == {int(rw.start[k])}, k
        assert set(w["end_ns"][mine].tolist()) == {int(rw.end[k])}, k
        assert set(w["rank"][mine].tolist()) == {int(rw.rank[k])}, k


def _several_ranks_and_threads() -> Any:
    """Two ranks (rank 1 with two devices), steps interleaved in time across ranks and two
    threads, rows in no particular order."""
    ops, api, ranges = [], [], []
    rng = np.random.default_rng(5)
    for i in rng.permutation(12).tolist():
        rank, thread = i % 2, (i // 2) % 2
        t = 1000 * i
        ranges.append({"name": "step", "start": t, "end": t + 600, "rank": rank, "thread": thread})
        late = 300 if rank == 0 else 0  # rank 0's host holds its GPU back: a gap finding
        for d in (0, 1) if rank == 1 else (0,):
            c = 10_000 * i + d
            api.append({"start": t + late + 1, "end": t + late + 2, "correlation": c,
                        "rank": rank, "thread": thread})  # fmt: skip
            ops.append({"start": t + late + 3, "end": t + 590, "rank": rank, "device": d,
                        "correlation": c})  # fmt: skip
    return make_trace(ops, api=api, ranges=ranges)


@pytest.mark.parametrize("by", [None, "step"])
def test_entries_carry_the_numbers_the_replay_counts(by: str | None) -> None:
    t = _several_ranks_and_threads()
    for ranks, devices in [(None, None), ([1], None), (None, [1])]:
        _assert_numbers_are_the_replays(attribute(t, by=by, ranks=ranks, devices=devices))
    a = attribute(t, by=by)
    if by is None:  # whole-trace windows by rank
        assert a.windows["index"].tolist() == (a.windows["rank"] + 1).tolist()
    else:  # in start order across ranks and threads, a window's devices sharing its number
        order = np.argsort(a.windows["start_ns"], kind="stable")
        assert np.all(np.diff(a.windows["index"][order]) >= 0)
        assert len(a.windows) == 18 and a.windows["index"].max() == 12


def test_the_example_numbers_agree_across_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ex = str(example_path())
    a = attribute(load(ex), by="decode_step")
    _assert_numbers_are_the_replays(a)
    out_json, out_csv = tmp_path / "a.json", tmp_path / "w.csv"
    argv = ["analyze", ex, "--by", "decode_step", "--critical-path", "--window", "6"]
    assert main([*argv, "--json", str(out_json), "--format", "csv", "--out", str(out_csv)]) == 0
    text = capsys.readouterr().out
    doc = json.loads(out_json.read_text())
    rows = {r["index"]: r for r in doc["windows"]}
    t0 = min(r["start_ns"] for r in doc["windows"])
    # the Slowest table: #N, the payload and the start from the first window, as JSON says
    slow = re.findall(r"^#(\d+) decode_step \(payload (\d+)\)\s+([\d.]+ [mµ]?s)", text, re.M)
    assert len(slow) == 5
    for n, payload, start in slow:
        r = rows[int(n)]
        assert r["payload"] == float(payload)
        assert start == duration(r["start_ns"] - t0)
    assert [s["index"] for s in doc["slowest"]] == [int(n) for n, _, _ in slow]
    # the payloads are the NVTX ones: this capture numbers its steps from 0
    assert [rows[k]["payload"] for k in sorted(rows)] == [float(k - 1) for k in sorted(rows)]
    # --window 6 is the window numbered 6, its text times from the first window too
    cp = doc["critical_path"]["window"]
    assert cp["index"] == 6 and cp["start_ns"] == rows[6]["start_ns"]
    assert cp["from_first_ns"] == rows[6]["start_ns"] - t0
    assert "Critical path of window 6 ('decode_step', rank 0" in text
    assert f"starts {duration(rows[6]['start_ns'] - t0)} from the first window" in text
    # the CSV carries the same numbers and payloads
    with out_csv.open() as f:
        got = list(csv.DictReader(f))
    assert [int(r["index"]) for r in got] == [r["index"] for r in doc["windows"]]
    assert [float(r["payload"]) for r in got] == [r["payload"] for r in doc["windows"]]


def test_findings_name_windows_by_their_numbers() -> None:
    """Rank 0's windows interleave with rank 1's: the gap finding on rank 0 lists its
    windows' numbers (1, 3, 5, ...), not their places among rank 0's windows (1-6)."""
    t = _several_ranks_and_threads()
    a = attribute(t, by="step", ranks=None)
    mine = a.windows["index"][a.windows["rank"] == 0].tolist()
    assert mine != list(range(1, len(mine) + 1))
    said = " ".join(f.title for f in Analysis(a).findings)
    runs = re.findall(r"in \d+ of \d+ step windows \(([\d, -]+)\)", said)
    assert runs, said
    for run in runs:
        got = set()
        for part in run.split(", "):
            lo, _, hi = part.partition("-")
            got |= set(range(int(lo), int(hi or lo) + 1))
        assert got <= set(a.windows["index"].tolist())
        w = a.windows
        ranks = set(w["rank"][np.isin(w["index"], list(got))].tolist())
        assert len(ranks) == 1  # one device's gaps: its windows' numbers


def test_critical_path_window_number(tmp_path: Path) -> None:
    a = attribute(load(str(example_path())), by="decode_step")
    for n in (1, 9, 16):
        cp = critical_path(a, n).to_dict()["window"]
        assert cp["index"] == n
        (row,) = np.flatnonzero(a.windows["index"] == n)
        assert cp["start_ns"] == int(a.windows["start_ns"][row])
