from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from pytimings.record.distributed import OPS, comm_op_of

WORLD = 2
N_BYTES = 4000  # one float32 tensor of 1000 elements
NO_BYTES = -1  # the record schema's nbytes when none was given


def test_bus_factors_follow_nccl_tests() -> None:
    for n in (2, 4, 8):
        assert comm_op_of("dist.all_reduce").bus_factor(n) == 2 * (n - 1) / n
        for op in (
            "all_gather",
            "all_gather_into_tensor",
            "reduce_scatter",
            "reduce_scatter_tensor",
            "all_to_all",
            "all_to_all_single",
            "gather",
            "scatter",
        ):
            assert comm_op_of(f"dist.{op}").bus_factor(n) == (n - 1) / n
        for op in ("broadcast", "reduce", "send", "recv", "isend", "irecv", "batch_isend_irecv"):
            assert comm_op_of(f"dist.{op}").bus_factor(n) == 1.0
        assert math.isnan(comm_op_of("dist.barrier").bus_factor(n))  # moves no bytes


def test_region_names_map_back_to_ops() -> None:
    assert comm_op_of("dist.all_reduce.async").asynchronous
    assert not comm_op_of("dist.all_reduce").asynchronous
    assert comm_op_of("dist.isend").asynchronous
    assert comm_op_of("dist.isend.async") is None
    assert comm_op_of("all_reduce") is None and comm_op_of("dist.nope") is None


def test_readers_of_a_recording_name_the_same_collectives_as_the_wrappers() -> None:
    """pytimings.model.recording.comm_region_collective (what `summary` and the loader use,
    below the recorder's layer) gives the bus factor the record-time summary uses, for every
    wrapped op, synchronous or not, among 2 to 8 ranks; none for async calls and barrier."""
    from pytimings.model.comm import COLLECTIVES, bus_factor
    from pytimings.model.recording import comm_region_collective

    for op in OPS:
        for name in (f"dist.{op}", f"dist.{op}.async"):
            wrapped = comm_op_of(name)
            index = comm_region_collective(name, "comm")
            for n in range(2, 9):
                recorded = math.nan if wrapped is None else wrapped.bus_factor(n)
                if wrapped is None or wrapped.asynchronous or math.isnan(recorded):
                    assert index == -1, name
                else:
                    assert bus_factor(COLLECTIVES[index], n) == recorded, (name, n)
    assert comm_region_collective("dist.all_reduce", "host") == -1  # not the wrapper's kind


def test_uninstrument_without_instrument_is_harmless() -> None:
    import torch.distributed as dist

    from pytimings.record.distributed import uninstrument

    before = dist.all_reduce
    uninstrument()
    assert dist.all_reduce is before


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("dist")
    worker = Path(__file__).resolve().parents[1] / "helpers" / "dist_worker.py"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(worker),
                str(r),
                str(WORLD),
                str(tmp / "init"),
                str(tmp / f"rank{r}.json"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(WORLD)
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    for r, p in enumerate(procs):
        assert p.returncode == 0, f"rank {r} failed:\n{outs[r]}"
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(WORLD)]


EXPECTED_NBYTES = {  # nccl-tests' "size" for each call the worker makes (n = 1000 floats)
    "dist.all_reduce": N_BYTES,
    "dist.all_gather": N_BYTES * WORLD,
    "dist.all_gather_into_tensor": N_BYTES * WORLD,
    "dist.reduce_scatter": N_BYTES * WORLD,
    "dist.reduce_scatter_tensor": N_BYTES * WORLD,
    "dist.all_to_all": N_BYTES * WORLD,
    "dist.all_to_all_single": N_BYTES * WORLD,
    "dist.broadcast": N_BYTES,
    "dist.reduce": N_BYTES,
    "dist.gather": N_BYTES * WORLD,  # the whole gathered buffer, on every rank
    "dist.scatter": N_BYTES * WORLD,  # the whole scattered buffer, on every rank
    "dist.barrier": None,  # no bytes
    "dist.send": N_BYTES,
    "dist.recv": N_BYTES,
    "dist.isend": N_BYTES,
    "dist.irecv": N_BYTES,
    "dist.batch_isend_irecv": 2 * N_BYTES,
    "dist.all_reduce.async": N_BYTES,
}


@pytest.mark.slow
def test_every_call_is_one_comm_region_with_nccl_tests_sizes(ranks: list[dict]) -> None:
    for result in ranks:
        recs = [r for r in result["records"] if r["name"].startswith("dist.")]
        names = [r["name"] for r in recs]
        # one region per call, and batch_isend_irecv's own isend/irecv are not counted again
        assert sorted(names) == sorted(EXPECTED_NBYTES), names
        for r in recs:
            assert r["kind"] == "comm"
            want = EXPECTED_NBYTES[r["name"]]
            assert r["nbytes"] == (NO_BYTES if want is None else want), r
            assert r["payload"] == WORLD  # group size, for the bus factor


@pytest.mark.slow
def test_summary_shows_algbw_and_busbw(ranks: list[dict]) -> None:
    for result in ranks:
        rows = {r["name"]: r for r in result["summary"]["regions"]}
        for name in EXPECTED_NBYTES:
            op = comm_op_of(name)
            row = rows[name]
            if EXPECTED_NBYTES[name] is None:  # barrier: timed, no bytes, no bandwidth
                assert row["count"] == 1 and row["nbytes_count"] == 0
                assert row["host_total_ns"] > 0
                assert row["bandwidth_gbps"] is None and row["algbw_gbps"] is None
                continue
            assert row["count"] == 1 and row["nbytes"] == EXPECTED_NBYTES[name]
            if op.asynchronous:
                assert row["algbw_gbps"] is None and row["busbw_gbps"] is None
                continue
            algbw = EXPECTED_NBYTES[name] / row["host_total_ns"]  # CPU: host time
            assert row["algbw_gbps"] == pytest.approx(algbw)
            assert row["busbw_gbps"] == pytest.approx(algbw * op.bus_factor(WORLD))


@pytest.mark.slow
def test_uninstrument_restores_identity(ranks: list[dict]) -> None:
    for result in ranks:
        assert result["restored"]
        assert not result["wrapped_twice"]
        assert result["ops_still_wrapped"]  # the user's P2POps are given back as they were
        assert not result["instrumented_after"]


@pytest.mark.slow
def test_saved_recordings_know_their_rank(ranks: list[dict]) -> None:
    assert [r["trace_rank"] for r in ranks] == list(range(WORLD))


def test_ops_cover_the_issue_list() -> None:
    want = {
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "all_to_all",
        "all_to_all_single",
        "broadcast",
        "send",
        "recv",
        "isend",
        "irecv",
        "batch_isend_irecv",
        "reduce",
        "gather",
        "scatter",
        "barrier",
    }
    assert want <= set(OPS)


def test_instrument_swaps_and_uninstrument_restores_in_process() -> None:
    import torch.distributed as dist

    from pytimings.record.distributed import (
        _P2PFunction,
        instrument_torch_distributed,
        uninstrument,
    )

    before = {op: getattr(dist, op) for op in OPS if hasattr(dist, op)}
    instrument_torch_distributed()
    try:
        for op, original in before.items():
            wrapped = getattr(dist, op)
            assert wrapped is not original and wrapped.__wrapped__ is original
            assert wrapped.__name__ == original.__name__
        # a wrapped isend passes torch's P2POp check, `op in [isend, irecv]` (its originals)
        assert isinstance(dist.isend, _P2PFunction)
        assert dist.isend in [before["isend"], before["irecv"]]
        assert hash(dist.isend) == hash(before["isend"])
    finally:
        uninstrument()
    for op, original in before.items():
        assert getattr(dist, op) is original
