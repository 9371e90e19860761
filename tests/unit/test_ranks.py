"""Many ranks as per-rank tasks (local processes, Dask LocalCluster): the same result as
attributing all ranks loaded together, and the same on either executor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.ranks_synth import rank_recording, write_ranks

from pytimings.analysis.attribution import attribute
from pytimings.analysis.findings import Scope, run_rules
from pytimings.analysis.op_table import LazyOpTable
from pytimings.analysis.ranks import rank_findings
from pytimings.cli import main
from pytimings.errors import UsageError
from pytimings.ingest import load
from pytimings.record import storage
from pytimings.session import Analysis, analyze

N_RANKS = 8


@pytest.fixture(scope="module")
def rank_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_ranks(tmp_path_factory.mktemp("ranks"), N_RANKS, ops=900)


def _no_findings(doc: dict[str, Any]) -> dict[str, Any]:
    """The document without its findings and the replay (per-rank tasks send no events)."""
    return {k: v for k, v in doc.items() if k not in ("findings", "replay")}


@pytest.mark.parametrize("by", [None, "decode_step"])
def test_local_tasks_equal_all_ranks_together(rank_files: list[Path], by: str | None) -> None:
    together = Analysis(attribute(load(*rank_files), by=by))
    tasks = analyze(rank_files, by=by, workers=2)
    assert _no_findings(tasks.to_document()) == _no_findings(together.to_document())
    # findings on totals and collectives: the same; findings on a rank's events: per rank,
    # the same finding on all 8 ranks merged into one whose loss is the all-ranks loss
    a = together.attribution
    everywhere = run_rules(a, LazyOpTable(a), (Scope.ACROSS,))
    assert {f.title for f in everywhere} <= {f.title for f in tasks.findings}
    key = "host_bound before kernel 'gemm'"
    want = [f for f in together.findings if f.title.startswith(key)]
    got = [f for f in tasks.findings if key in f.title]
    assert len(got) == len(want) == (1 if by is None else 0)
    if got:
        assert got[0].loss_ns == want[0].loss_ns
        assert got[0].title.startswith("ranks 0-7 (8 of 8); worst, rank ")
        assert sum(got[0].evidence["loss_ns_by_rank"].values()) == want[0].loss_ns
    c = tasks.collectives
    assert c is not None and c.straggler == 3  # the synthetic straggler
    assert c.clock_offset_ns == {r: r * 1_000_000 for r in range(N_RANKS)}


def test_rank_filter_and_order_independence(rank_files: list[Path]) -> None:
    picked = analyze(list(reversed(rank_files)), ranks=[1, 3, 5], workers=1)
    together = Analysis(attribute(load(*rank_files), ranks=[1, 3, 5]))
    assert _no_findings(picked.to_document()) == _no_findings(together.to_document())


@pytest.mark.slow
def test_dask_local_cluster_equals_local(rank_files: list[Path]) -> None:
    local = analyze(rank_files, by="decode_step", workers=2)
    dask = analyze(rank_files, by="decode_step", workers=2, executor="dask")
    assert dask.to_document() == local.to_document()
    assert dask.attribution.windows.to_pandas().equals(local.attribution.windows.to_pandas())


@pytest.mark.slow
def test_cli_dask_output_equals_local(
    rank_files: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["analyze", *map(str, rank_files), "--by", "decode_step", "--workers", "2", "-q"]
    assert main(args) == 0
    local = capsys.readouterr().out
    assert main([*args, "--executor", "dask"]) == 0
    assert capsys.readouterr().out == local
    assert "rank 3 arrives last" in local


def test_errors(rank_files: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dup = tmp_path / "rank1.pyt"
    dup.write_bytes(rank_files[1].read_bytes())
    bad = tmp_path / "rank9.pyt"
    bad.write_bytes(b"ARROW1 not really")
    cases = [
        ([str(rank_files[0]), str(rank_files[1]), str(dup)], "rank 1 is also the rank of"),
        ([str(rank_files[0]), str(bad)], "no such file"),
        ([*map(str, rank_files[:2]), "--scheduler", "tcp://127.0.0.1:1"], "needs --executor dask"),
        ([*map(str, rank_files[:2]), "--rank", "42"], "rank 42 not in the traces"),
    ]
    bad.unlink()
    for argv, message in cases:
        assert main(["analyze", *argv, "--workers", "1"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def test_rank_findings_grouping() -> None:
    from pytimings.analysis.finding import Finding

    found = [
        (0, Finding("scheduling", "host_bound before kernel 'k_64': 3 gaps, 1.5 ms", 10, {})),
        (2, Finding("scheduling", "host_bound before kernel 'k_64': 9 gaps, 4.0 ms", 30, {})),
        (1, Finding("scheduling", "host_bound before kernel 'k_128': 1 gaps, 0.5 ms", 5, {})),
    ]
    out = rank_findings(found, n_ranks=4)
    assert [(f.title, f.loss_ns) for f in out] == [
        ("ranks 0, 2 (2 of 4); worst, rank 2: host_bound before kernel 'k_64': 9 gaps, 4.0 ms", 40),
        ("rank 1: host_bound before kernel 'k_128': 1 gaps, 0.5 ms", 5),
    ]
    assert out[0].evidence["loss_ns_by_rank"] == {0: 10, 2: 30}
    assert rank_findings(found[:1], n_ranks=1)[0].title == found[0][1].title


@pytest.mark.slow
def test_dask_existing_scheduler(rank_files: list[Path]) -> None:
    """--scheduler: tasks go to a running cluster, which is left running afterwards."""
    from dask.distributed import LocalCluster

    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as cluster:
        addr = cluster.scheduler_address
        assert addr.startswith("tcp://")
        got = analyze(rank_files, executor="dask", scheduler=addr)
        again = analyze(rank_files[:2], executor="dask", scheduler=addr)
        # a second, own LocalCluster alongside (no fixed dashboard port to clash on)
        beside = analyze(rank_files[:2], executor="dask", workers=1)
        assert beside.to_document() == again.to_document()
        assert cluster.scheduler.status.name == "running"
    assert got.to_document() == analyze(rank_files, workers=1).to_document()
    assert sorted(again.attribution.windows["rank"].tolist()) == [0, 1]


def test_dask_missing_and_bad_workers(
    rank_files: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    from pytimings.errors import UsageError

    real = importlib.import_module

    def no_dask(name: str, *args: Any) -> Any:
        if name.startswith("dask"):
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_dask)
    hint = r"'dask\[distributed\]>=2024.1' \(from a pytimings checkout: pip install '\.\[dask\]'\)"
    with pytest.raises(UsageError, match=hint):
        analyze(rank_files[:2], executor="dask")
    monkeypatch.undo()
    with pytest.raises(UsageError, match="workers must be at least 1, not 0"):
        analyze(rank_files[:2], workers=0)
    with pytest.raises(UsageError, match="--executor 'spark'"):
        analyze(rank_files[:2], executor="spark")


def test_per_rank_tasks_carry_the_op_table_of_all_ranks_together(rank_files: list[Path]) -> None:
    together = Analysis(attribute(load(*rank_files), by="decode_step")).ops
    tasks = analyze(rank_files, by="decode_step", workers=2).ops
    assert tasks.doc() == together.doc()
    assert tasks.window_categories == together.window_categories
    assert {c["category"] for c in tasks.categories} >= {"gemm", "attention", "comm"}


def test_a_device_is_looked_for_on_every_rank(tmp_path: Path) -> None:
    """Each rank on its own GPU (rank r on device r): ``devices=[2]`` is rank 2's device, as
    one trace of all ranks selects it; it failed on rank 0 ('device 2 not in the trace'). A
    device no rank has is refused, naming the ranks' devices."""
    files = []
    for rank in range(4):
        recording = rank_recording(rank, 4, ops=90)
        recording.meta["device"] = rank
        files.append(storage.save(tmp_path / f"rank{rank}.pyt", recording))
    tasks = analyze(files, devices=[2], workers=1)
    together = Analysis(attribute(load(*files), devices=[2]))
    assert _no_findings(tasks.to_document()) == _no_findings(together.to_document())
    assert set(tasks.attribution.windows["device"].tolist()) == {2}
    with pytest.raises(
        UsageError, match="device 9 not in the traces; they have devices 0, 1, 2, 3"
    ):
        analyze(files, devices=[9], workers=1)


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("foo::bar", "invalid address"),
        ("tcp://127.0.0.1:notaport", "invalid literal for int()"),
        ("http://127.0.0.1:1", "unknown address scheme 'http'"),
        ("", "missing port number"),
        ("GARBAGE", "Maximum allowed dimension exceeded"),  # a frame length of exabytes
        ("SILENT", "TimeoutError"),  # accepts, never answers
    ],
)
def test_a_scheduler_that_is_no_scheduler_is_one_line(
    rank_files: list[Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    address: str,
    why: str,
) -> None:
    import socket
    import threading
    import time

    from pytimings.analysis import ranks

    monkeypatch.setattr(ranks, "SCHEDULER_TIMEOUT_S", 1)
    with socket.create_server(("127.0.0.1", 0)) as peer:
        peer.settimeout(10)

        def answer() -> None:  # garbage: 0xff bytes where Dask reads its frame lengths
            conn, _ = peer.accept()
            with conn:
                conn.sendall(b"\xff" * 64)
                time.sleep(2)

        if address == "GARBAGE":
            threading.Thread(target=answer, daemon=True).start()
        if address in ("GARBAGE", "SILENT"):
            address = f"tcp://127.0.0.1:{peer.getsockname()[1]}"
        t0 = time.monotonic()
        argv = [*map(str, rank_files[:2]), "--executor", "dask", "--scheduler", address]
        assert main(["analyze", *argv, "-q"]) == 2
        assert time.monotonic() - t0 < 10
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--scheduler {address!r}: cannot connect" in err[0], err
    assert why in err[0]
