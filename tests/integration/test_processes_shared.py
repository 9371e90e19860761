"""Processes as ranks on real multi-process Nsight Systems captures (nsys_ai fixtures: two
python3 processes in one export, each driving its own H100), checked against sqlite3."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from pytimings.cli import main
from pytimings.ingest import load
from pytimings.model.trace import OpKind

NSYS_AI = "data/external/nsys_ai"
KERNELS_BY_PROCESS = (
    "SELECT (globalPid >> 24) & 16777215, deviceId, count(*) "
    "FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1, 2 ORDER BY 2"
)


def _query(path: Path, sql: str) -> list[tuple[int, ...]]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


@pytest.mark.parametrize("name", ["h100_2gpu_1s", "mfu_2gpu_before", "mfu_2gpu_after"])
def test_each_process_is_a_rank(shared_dir: Path, name: str) -> None:
    path = shared_dir / NSYS_AI / f"{name}.sqlite"
    want = _query(path, KERNELS_BY_PROCESS)  # [(pid, device, kernels)], by device
    tr = load(path, processes_as_ranks=True)
    assert tr.meta["process_rank_rule"] == "device"
    assert tr.meta["process_ranks"] == {pid: i for i, (pid, _, _) in enumerate(want)}
    kernels = tr.gpu_ops["kind"] == OpKind.KERNEL
    for rank, (pid, device, n) in enumerate(want):
        mine = kernels & (tr.gpu_ops["rank"] == rank)
        assert int(mine.sum()) == n
        assert set(tr.gpu_ops["device"][mine].tolist()) == {device}
        assert set(tr.gpu_ops["pid"][tr.gpu_ops["rank"] == rank].tolist()) == {pid}
    pairs = sorted(zip(tr.devices["rank"].tolist(), tr.devices["device"].tolist(), strict=True))
    assert pairs == [(r, d) for r, (_, d, _) in enumerate(want)]
    plain = load(path)
    for t in ("gpu_ops", "api_calls", "ranges", "threads"):
        lost = tr.dropped.get(f"{t}_of_processes_without_gpu_ops", 0)
        assert len(tr.table(t)) + lost == len(plain.table(t)), t
    # only GPU-less processes' threads are left out here: their API calls and ranges are none
    assert set(tr.dropped) == {"threads_of_processes_without_gpu_ops"}


def test_h100_two_ranks_of_1721_kernels(shared_dir: Path) -> None:
    tr = load(shared_dir / NSYS_AI / "h100_2gpu_1s.sqlite", processes_as_ranks=True)
    kernels = tr.gpu_ops["rank"][tr.gpu_ops["kind"] == OpKind.KERNEL]
    assert np.bincount(kernels).tolist() == [1721, 1721]
    assert tr.meta["process_ranks"] == {111: 0, 112: 1}


def test_analyze_matches_collectives_across_the_two_ranks(
    shared_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = shared_dir / NSYS_AI / "mfu_2gpu_before.sqlite"
    nccl = _query(
        path,
        "SELECT (k.globalPid >> 24) & 16777215, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.shortName WHERE s.value LIKE '%nccl%' GROUP BY 1",
    )
    assert [n for _, n in nccl] == [33, 33]
    out = tmp_path / "a.json"
    assert main(["analyze", str(path), "-q", "--processes-as-ranks", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Collectives across ranks" in text and "r1 GPU 1" in text
    doc = json.loads(out.read_text())
    c = doc["collectives"]
    assert set(c["clock_offset_ns"]) == {"0", "1"} and c["clock_offset_ns"]["0"] == 0
    # all 33 SendRecv instances are matched on both ranks; each has one last arriver at most
    assert c["skew_ns"]["count"] == c["wait_ns"]["count"] == 2 * 33
    assert 0 < sum(c["last_counts"].values()) <= 33
    assert str(c["straggler"]) == max(c["last_counts"], key=lambda r: c["last_counts"][r])
    # the contract recomputed from sqlite3: n-th SendRecv of each process matched, rank 1's
    # clock aligned by the median difference of end times, then who arrived last, and waits
    per_rank = [
        np.array(
            _query(
                path,
                'SELECT k.start, k."end" FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s '
                "ON s.id = k.shortName WHERE s.value LIKE '%nccl%' "
                f"AND (k.globalPid >> 24) & 16777215 = {pid} ORDER BY k.start",
            ),
            dtype=np.int64,
        )
        for pid, _ in nccl
    ]
    (s0, e0), (s1, e1) = (p.T for p in per_rank)
    offset = int(np.median(e1 - e0))
    assert c["clock_offset_ns"] == {"0": 0, "1": offset}
    s1 = s1 - offset
    assert c["last_counts"] == {"0": int((s0 > s1).sum()), "1": int((s1 > s0).sum())}
    wait = np.minimum(e0 - s0, np.maximum(0, s1 - s0)).sum()
    wait += np.minimum(e1 - (s1 + offset), np.maximum(0, s0 - s1)).sum()
    assert c["wait_ns"]["mean"] * c["wait_ns"]["count"] == pytest.approx(int(wait), abs=1)
    assert {(w["rank"], w["device"]) for w in doc["windows"]} == {(0, 0), (1, 1)}
    # without the flag: one rank, no collectives across ranks
    assert main(["analyze", str(path), "-q", "--json", str(out)]) == 0
    assert "collectives" not in json.loads(out.read_text())
    assert "--processes-as-ranks" in capsys.readouterr().err
