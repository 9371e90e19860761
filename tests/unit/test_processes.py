"""Processes as ranks: one file's GPU processes become ranks (pytimings.ingest.processes)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import nsys_synth
from helpers.synth import make_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimings.analysis.attribution import attribute
from pytimings.cli import main
from pytimings.errors import UsageError
from pytimings.ingest import load
from pytimings.ingest.processes import (
    gpu_processes,
    multi_process_hint,
    select_rank,
    split_processes,
)
from pytimings.model.trace import DEVICE_SCHEMA, StringTable, Trace, conform
from pytimings.session import Analysis, analyze

HOST_TABLES = ("api_calls", "ranges", "threads")


def _trace(
    ops: list[tuple[int, int]],
    host: list[int] = (),  # type: ignore[assignment]
    names: dict[int, str] | None = None,
) -> Trace:
    """(pid, device) per GPU op, each launched from its pid's main thread; one range and one
    API call per pid in ``host`` too; devices table with ``names``."""
    pids = sorted({p for p, _ in ops} | set(host))
    threads = [{"pid": p, "tid": p, "name": f"main{p}"} for p in pids]
    thread_of = {p: i for i, p in enumerate(pids)}
    op_rows = [
        {"start": 100 * i, "end": 100 * i + 50, "pid": p, "device": d, "correlation": i}
        for i, (p, d) in enumerate(ops)
    ]
    api = [
        {"start": 100 * i - 20, "end": 100 * i - 10, "pid": p, "thread": thread_of[p]}
        | {"correlation": i}
        for i, (p, _) in enumerate(ops)
    ]
    api += [{"start": 5, "end": 6, "pid": p, "thread": thread_of[p]} for p in host]
    ranges = [
        {"start": 0, "end": 10, "name": f"r{p}", "pid": p, "thread": thread_of[p]} for p in pids
    ]
    tr = make_trace(op_rows, api, ranges, threads)
    strings = StringTable(tr.strings)
    devs = sorted((names or {}).items()) or [(0, "GPU")]
    tr.devices = conform(
        {
            "device": np.array([d for d, _ in devs]),
            "name": np.array([strings.intern(n) for _, n in devs]),
            "rank": np.zeros(len(devs)),
        },
        DEVICE_SCHEMA,
    )
    tr.strings = strings.strings
    return tr


def _rows_by_rank(tr: Trace, table: str) -> dict[int, int]:
    return dict(Counter(tr.table(table)["rank"].tolist()))


def test_ranks_follow_devices_when_each_process_has_its_own() -> None:
    # pid 200 drives GPU 1 and pid 300 GPU 0: torchrun's local rank is the device ordinal
    tr = _trace([(200, 1), (300, 0), (200, 1), (300, 0), (300, 0)], names={0: "A", 1: "B"})
    out = split_processes(tr)
    assert out.meta["process_ranks"] == {300: 0, 200: 1}
    assert out.meta["process_rank_rule"] == "device"
    assert out.meta["rank_source"] == "process" and "rank" not in out.meta
    assert _rows_by_rank(out, "gpu_ops") == {0: 3, 1: 2}
    ops = out.gpu_ops
    assert set(zip(ops["pid"].tolist(), ops["rank"].tolist(), strict=True)) == {(300, 0), (200, 1)}
    dev = out.devices
    rows = {
        (int(r), int(d)): out.strings[int(n)]
        for d, n, r in zip(dev["device"], dev["name"], dev["rank"], strict=True)
    }
    assert rows == {(0, 0): "A", (1, 1): "B"}
    assert out.dropped == {}


@pytest.mark.parametrize(
    ("ops", "want"),
    [
        # a process on two devices: by pid
        ([(300, 0), (300, 1), (200, 2)], {200: 0, 300: 1}),
        # two processes sharing a device: by pid
        ([(300, 0), (200, 0)], {200: 0, 300: 1}),
    ],
)
def test_ranks_follow_pids_otherwise(ops: list[tuple[int, int]], want: dict[int, int]) -> None:
    out = split_processes(_trace(ops, names={0: "A", 1: "B", 2: "C"}))
    assert out.meta["process_ranks"] == want
    assert out.meta["process_rank_rule"] == "pid"
    pairs = {
        (int(r), int(d)) for r, d in zip(out.devices["rank"], out.devices["device"], strict=True)
    }
    assert pairs == {(want[p], d) for p, d in ops}


def test_processes_without_gpu_ops_are_counted_when_no_rank_fits() -> None:
    tr = _trace([(200, 0), (300, 1)], host=[200, 300, 50, 60])
    out = split_processes(tr, first_rank=4)
    assert out.meta["process_ranks"] == {200: 4, 300: 5}
    # pids 50 and 60: one API call, one range and one thread each; counted, not kept
    assert out.dropped == {
        "api_calls_of_processes_without_gpu_ops": 2,
        "ranges_of_processes_without_gpu_ops": 2,
        "threads_of_processes_without_gpu_ops": 2,
    }
    for t in HOST_TABLES:
        assert len(out.table(t)) + out.dropped[f"{t}_of_processes_without_gpu_ops"] == len(
            tr.table(t)
        )
        assert set(out.table(t)["pid"].tolist()) == {200, 300}


def test_processes_without_gpu_ops_stay_with_the_only_rank() -> None:
    tr = _trace([(200, 3)], host=[200, 50])
    out = split_processes(tr, first_rank=2)
    assert out.meta["process_ranks"] == {200: 2}
    assert out.dropped == {}
    for t in ("gpu_ops", *HOST_TABLES):
        assert _rows_by_rank(out, t) == {2: len(tr.table(t))}


def test_no_gpu_ops_is_one_rank() -> None:
    tr = _trace([], host=[50])
    out = split_processes(tr, first_rank=7)
    assert out.meta["process_ranks"] == {} and out.meta["process_rank_rule"] == "no GPU ops"
    assert _rows_by_rank(out, "api_calls") == {7: 1}
    assert out.devices["rank"].tolist() == [7]


def test_a_trace_with_ranks_already_is_refused() -> None:
    a, b = _trace([(1, 0)]), _trace([(2, 0)])
    b.gpu_ops = b.gpu_ops.with_columns(rank=np.ones(len(b.gpu_ops), dtype=np.int16))
    with pytest.raises(UsageError, match="already has ranks 0, 1"):
        split_processes(Trace.merge([a, b]))


def _check_split(tr: Trace, out: Trace) -> None:
    """Every row kept or counted; thread rows still those of the row's (pid, tid)."""
    procs = gpu_processes(tr)
    rank_of = out.meta["process_ranks"]
    assert sorted(rank_of.values()) == list(range(len(procs)))
    assert _rows_by_rank(out, "gpu_ops") == {
        rank_of[p]: n for p, n in Counter(tr.gpu_ops["pid"].tolist()).items()
    }
    for t in HOST_TABLES:
        lost = out.dropped.get(f"{t}_of_processes_without_gpu_ops", 0)
        assert len(out.table(t)) + lost == len(tr.table(t))
        if len(procs) > 1:
            pids = out.table(t)["pid"]
            assert set(pids.tolist()) <= set(procs)
            want = np.array([rank_of[int(p)] for p in pids], dtype=np.int16)
            assert np.array_equal(out.table(t)["rank"], want)
    for t in ("api_calls", "ranges"):
        before, after = tr.table(t), out.table(t)
        keep = np.isin(before["pid"], list(procs)) if len(procs) > 1 else slice(None)
        old_tid = tr.threads["tid"][before["thread"][keep]]
        assert np.array_equal(out.threads["tid"][after["thread"]], old_tid)
        assert np.array_equal(out.threads["rank"][after["thread"]], after["rank"])
    # each rank's own rows, alone, are the same rows again
    for r in sorted(set(rank_of.values())):
        one = select_rank(out, r)
        assert len(one.gpu_ops) == int((out.gpu_ops["rank"] == r).sum())
        assert np.array_equal(one.threads["tid"][one.api_calls["thread"]], one.api_calls["pid"])


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from([11, 12, 13, 14]), st.integers(0, 3)), min_size=1, max_size=30
    ),
    host=st.lists(st.sampled_from([11, 12, 13, 14, 90, 91]), max_size=6),
    first=st.integers(0, 100),
)
def test_every_row_is_kept_or_counted(
    ops: list[tuple[int, int]], host: list[int], first: int
) -> None:
    tr = _trace(ops, host=host, names={0: "A", 1: "B", 2: "C", 3: "D"})
    out = split_processes(tr, first_rank=first)
    shifted = {p: r - first for p, r in out.meta["process_ranks"].items()}
    out.meta["process_ranks"] = shifted
    for t in ("gpu_ops", *HOST_TABLES):
        out.table(t)["rank"][:] -= first
    _check_split(tr, out)
    procs = gpu_processes(tr)
    one_each = all(len(d) == 1 for d in procs.values())
    distinct = len({d[0] for d in procs.values()}) == len(procs)
    by = sorted(procs, key=lambda p: procs[p][0]) if one_each and distinct else sorted(procs)
    assert shifted == {p: i for i, p in enumerate(by)}


def test_hint_only_for_several_processes_on_several_devices() -> None:
    assert multi_process_hint(_trace([(1, 0), (2, 1)])) is not None
    assert multi_process_hint(_trace([(1, 0), (2, 0)])) is None  # one device
    assert multi_process_hint(_trace([(1, 0), (1, 1)])) is None  # one process
    assert multi_process_hint(split_processes(_trace([(1, 0), (2, 1)]))) is None


# -- end to end: synthetic nsys exports of a 2-process job ------------------------------------
def _two_process_export(path: Path, pids: tuple[int, int] = (731, 732), skew: int = 0) -> Path:
    """Two processes on GPUs 1 and 0 (pid order opposite to device order), each: two launches,
    a compute kernel and a ncclDevKernel_AllReduce ending at the same instant on both, an NVTX
    range; plus a launcher process (pid 9) with a range and no GPU ops."""
    rows: dict[str, list[Any]] = {
        "StringIds": [(1, "gemm"), (2, "ncclDevKernel_AllReduce"), (3, "cudaLaunchKernel")],
        "CUPTI_ACTIVITY_KIND_RUNTIME": [],
        "CUPTI_ACTIVITY_KIND_KERNEL": [],
        "NVTX_EVENTS": [(0, 5, 59, None, None, None, "launcher", (9 << 24) | 9)],
        "ThreadNames": [],
        "PROCESSES": [((9 << 24), 9, "torchrun")],
    }
    for i, (pid, dev) in enumerate(zip(pids, (1, 0), strict=True)):
        gpid, gtid = pid << 24, (pid << 24) | pid
        late = skew * i
        rows["CUPTI_ACTIVITY_KIND_RUNTIME"] += [
            (100, 110, 0, gtid, 1, 3),
            (120 + late, 130 + late, 0, gtid, 2, 3),
        ]
        rows["CUPTI_ACTIVITY_KIND_KERNEL"] += [
            (200, 300, dev, 1, 7, 1, gpid, 1, 1),
            (400 + late, 900, dev, 1, 8, 2, gpid, 2, 2),
        ]
        rows["NVTX_EVENTS"].append((90, 950, 59, None, None, None, "step", gtid))
        rows["PROCESSES"].append((gpid, pid, "python3"))
    return nsys_synth.write(path, rows)


def test_load_numbers_each_files_processes_after_the_last(tmp_path: Path) -> None:
    a = _two_process_export(tmp_path / "a.sqlite")
    b = _two_process_export(tmp_path / "b.sqlite", pids=(801, 802), skew=100)
    tr = load(a, b, processes_as_ranks=True)
    assert [p["process_ranks"] for p in tr.meta["parts"]] == [{732: 0, 731: 1}, {802: 2, 801: 3}]
    assert _rows_by_rank(tr, "gpu_ops") == {0: 2, 1: 2, 2: 2, 3: 2}
    assert _rows_by_rank(tr, "ranges") == {0: 1, 1: 1, 2: 1, 3: 1}
    assert tr.dropped["ranges_of_processes_without_gpu_ops"] == 2  # a launcher range per file
    plain = load(a)
    assert set(plain.gpu_ops["rank"].tolist()) == {0}
    with pytest.raises(UsageError, match="ranks cannot be given with processes_as_ranks"):
        load(a, b, ranks=[0, 1], processes_as_ranks=True)


@pytest.mark.parametrize("by", [None, "step"])
def test_per_file_tasks_equal_loading_together(tmp_path: Path, by: str | None) -> None:
    a = _two_process_export(tmp_path / "a.sqlite", skew=50)
    b = _two_process_export(tmp_path / "b.sqlite", pids=(801, 802), skew=100)
    together = attribute(load(a, b, processes_as_ranks=True), by=by)
    tasks = analyze([a, b], by=by, workers=1, processes_as_ranks=True)
    want, got = Analysis(together).to_document(), tasks.to_document()
    for k in ("totals", "windows", "collectives", "dropped", "launch_latency"):
        if k == "launch_latency":
            want[k].pop("unlinked_ops"), got[k].pop("unlinked_ops")
        assert got[k] == want[k], k
    c = tasks.collectives
    assert c is not None and sorted(c.clock_offset_ns) == [0, 1, 2, 3]
    # the device filter: each rank reports the selected devices it has
    one = analyze([a, b], devices=[0], workers=1, processes_as_ranks=True)
    assert sorted(set(one.attribution.windows["rank"].tolist())) == [0, 2]
    with pytest.raises(UsageError, match="device 5 not in the trace"):
        analyze([a, b], devices=[5], workers=1, processes_as_ranks=True)


def test_cli_flag_hint_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _two_process_export(tmp_path / "a.sqlite", skew=50)
    assert main(["analyze", str(a), "-q"]) == 0
    err = capsys.readouterr().err
    assert "2 processes with GPU ops on 2 devices; --processes-as-ranks" in err
    out_json = tmp_path / "a.json"
    assert main(["analyze", str(a), "-q", "--processes-as-ranks", "--json", str(out_json)]) == 0
    cap = capsys.readouterr()
    assert "hint" not in cap.err and "Collectives across ranks" in cap.out
    assert main(["summary", str(a), "-q", "--processes-as-ranks"]) == 0
    assert "Kernels (rank 1, device 1)" in capsys.readouterr().out
    assert main(["analyze", str(a), "-q", "--processes-as-ranks", "--rank", "5"]) == 2
    assert "rank 5 not in the trace" in capsys.readouterr().err
