"""Ranks on one timeline from their wall-clock offsets (pytimings.ingest.clocks), checked
against recordings built with a known truth: the same instant on two hosts' clocks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from helpers.recording_factory import make_recording

import pytimings as pt
from pytimings.record import storage

WALL = 1_764_000_000_000_000_000  # an instant, Unix ns: both ranks end a collective here
OFFSET_A = 1_763_999_000_000_000_000  # CLOCK_REALTIME - CLOCK_MONOTONIC on host A
OFFSET_B = OFFSET_A - 987_654_321_012  # host B booted 987 s earlier


def _rank(tmp_path: Path, rank: int, offset: int, meta: dict[str, Any]) -> Path:
    end = WALL - offset  # the instant on this host's monotonic clock
    rows = [
        {"name": "step", "kind": "host", "start": end - 50_000, "end": end + 1000},
        {
            "name": "dist.all_reduce",
            "kind": "comm",
            "start": end - 4000,
            "end": end,
            "depth": 1,
            "nbytes": 1 << 20,
            "payload": 2,
        },
    ]
    rec = make_recording(rows, meta={"pid": 100 + rank, "rank": rank, "world_size": 2, **meta})
    return storage.save(tmp_path / f"run.rank{rank}.pyt", rec)


def _ends(trace: pt.Trace) -> dict[int, int]:
    r = trace.ranges
    name = np.array(trace.strings)[r["name"]]
    sel = name == "dist.all_reduce"
    return dict(zip(r["rank"][sel].tolist(), r["end"][sel].tolist(), strict=True))


def _clock(offset: int, uncertainty: int, boot_id: str, **end: int) -> dict[str, Any]:
    """Recording meta: the wall-clock offset at start (and, in ``end``, at the save)."""
    return {
        "wall_offset_ns": offset,
        "wall_offset_uncertainty_ns": uncertainty,
        "boot_id": boot_id,
        **{f"wall_offset_end_{k}": v for k, v in end.items()},
    }


def test_two_hosts_land_on_one_timeline_with_their_uncertainty(tmp_path: Path) -> None:
    a = _rank(tmp_path, 0, OFFSET_A, _clock(OFFSET_A, 30, "host-a"))
    # host B's wall clock was stepped by +2000 ns during the run: its mean offset is +1000
    b = _rank(
        tmp_path,
        1,
        OFFSET_B + 1000,
        _clock(OFFSET_B, 40, "host-b", ns=OFFSET_B + 2000, uncertainty_ns=25),
    )
    trace = pt.load(a, b)
    ends = _ends(trace)
    assert ends[0] == WALL - OFFSET_A  # the reference (lowest rank) is not moved
    assert ends[1] == ends[0]  # the same instant on both ranks
    al = trace.meta["clock_alignment"]
    assert al["reference_rank"] == 0
    by_rank = {r["rank"]: r for r in al["ranks"]}
    assert by_rank[1]["shift_ns"] == (OFFSET_B + 1000) - OFFSET_A
    assert by_rank[1]["method"] == "wall-clock offset"
    # brackets of both sides (30 + max(40, 25)) + half of B's step (1000)
    assert by_rank[1]["uncertainty_ns"] == 30 + 40 + 1000
    assert al["uncertainty_ns"] == 1070
    # every table moved together: the enclosing step still encloses the collective
    r = trace.ranges
    for rank in (0, 1):
        sel = r["rank"] == rank
        assert r["start"][sel].min() == ends[rank] - 50_000


def test_same_boot_is_one_clock_whatever_the_wall_offsets_say(tmp_path: Path) -> None:
    # one host, a wall-clock step between the two processes' samples: monotonic is shared
    a = _rank(tmp_path, 0, OFFSET_A, _clock(OFFSET_A, 30, "same"))
    b = _rank(tmp_path, 1, OFFSET_A, _clock(OFFSET_A + 5_000_000, 30, "same"))
    trace = pt.load(b, a)
    ends = _ends(trace)
    assert ends[0] == ends[1] == WALL - OFFSET_A
    al = trace.meta["clock_alignment"]
    assert {r["rank"]: (r["shift_ns"], r["uncertainty_ns"]) for r in al["ranks"]} == {
        0: (0, 0.0),
        1: (0, 0.0),
    }


def test_recordings_without_offsets_are_left_alone(tmp_path: Path) -> None:
    a = _rank(tmp_path, 0, OFFSET_A, {})
    b = _rank(tmp_path, 1, OFFSET_B, {})
    trace = pt.load(a, b)
    assert "clock_alignment" not in trace.meta
    ends = _ends(trace)
    assert ends == {0: WALL - OFFSET_A, 1: WALL - OFFSET_B}
