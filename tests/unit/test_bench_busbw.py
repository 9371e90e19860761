"""busbw factors and nccl-tests' size/count convention, checked by hand and against real
nccl-tests logs (superbench, 8x A100: ../shared/data/external/superbench/nccl_*.log)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytimings.bench.collective import OPS, bus_factor, message_shape
from pytimings.errors import UsageError
from pytimings.record.nccl import algbw_gbps

LOGS = {
    "all_reduce": "nccl_allreduce.log",
    "all_gather": "nccl_allgather.log",
    "reduce_scatter": "nccl_reducescatter.log",
    "all_to_all": "nccl_alltoall.log",
    "broadcast": "nccl_broadcast.log",
}


def test_factors_by_hand() -> None:
    # all_reduce moves 2(n-1)/n of the buffer over each link: n=2 -> 1, n=4 -> 1.5, n=8 -> 1.75
    assert bus_factor("all_reduce", 2) == 1.0
    assert bus_factor("all_reduce", 4) == 1.5
    assert bus_factor("all_reduce", 8) == 1.75
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert bus_factor(op, 2) == 0.5
        assert bus_factor(op, 8) == 7 / 8
    for op in ("broadcast", "sendrecv"):
        assert bus_factor(op, 8) == 1.0
    assert set(OPS) == {
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "all_to_all",
        "broadcast",
        "sendrecv",
    }
    with pytest.raises(UsageError, match="unknown operation"):
        bus_factor("allreduce", 2)


def test_algbw_definition() -> None:
    # 1 GiB in 8159.5 us = 131.59 GB/s (nccl-tests prints 131.59 for this row)
    assert algbw_gbps(1 << 30, 8159.5) == pytest.approx(131.59, abs=0.005)
    assert algbw_gbps(0, 0.0) == 0.0


def test_message_shape() -> None:
    assert message_shape("all_reduce", 1 << 20, 8, 4) == (1 << 20, 1 << 18)
    assert message_shape("all_gather", 1 << 20, 8, 4) == (1 << 20, 1 << 15)
    assert message_shape("all_gather", 100, 8, 4) == (96, 3)  # rounded down per rank
    assert message_shape("all_to_all", 16, 8, 4) == (0, 0)  # too small to give each rank one
    assert message_shape("broadcast", 10, 4, 4) == (8, 2)


def _rows(path: Path) -> tuple[int, list[list[str]]]:
    text = path.read_text()
    m = re.search(r"nGpus (\d+)", text)
    assert m is not None
    rows = [
        line.split() for line in text.splitlines() if line.strip() and line.split()[0].isdigit()
    ]
    return int(m.group(1)), rows


@pytest.mark.shared
@pytest.mark.parametrize("op", sorted(LOGS))
def test_factors_and_counts_match_real_nccl_tests_logs(op: str, shared_dir: Path) -> None:
    n, rows = _rows(shared_dir / "data/external/superbench" / LOGS[op])
    checked = 0
    for tokens in rows:
        size, count = int(tokens[0]), int(tokens[1])
        if size == 0:
            continue
        assert message_shape(op, size, n, 4) == (size, count), tokens  # float rows
        for time_s, alg_s, bus_s in (
            (tokens[-8], tokens[-7], tokens[-6]),
            (tokens[-4], tokens[-3], tokens[-2]),
        ):
            time_us, alg, bus = float(time_s), float(alg_s), float(bus_s)
            ours = algbw_gbps(size, time_us)
            # bandwidths print with 2 decimals (+-0.005), times with 4 significant digits
            assert alg == pytest.approx(ours, rel=1e-3, abs=0.0051), tokens
            assert bus == pytest.approx(ours * bus_factor(op, n), rel=1e-3, abs=0.0051), tokens
            checked += 1
    assert checked >= 40  # the logs sweep 1 B .. 8 GiB, both placements


@pytest.mark.shared
def test_log_check_tells_factors_apart(shared_dir: Path) -> None:
    """The all_reduce log does not fit all_gather's factor: the check above can fail."""
    n, rows = _rows(shared_dir / "data/external/superbench" / LOGS["all_reduce"])
    big = [t for t in rows if int(t[0]) >= 1 << 20]
    assert big
    for tokens in big:
        ours = algbw_gbps(int(tokens[0]), float(tokens[-8]))
        assert float(tokens[-6]) != pytest.approx(ours * bus_factor("all_gather", n), rel=0.05)


def test_recorder_and_benchmark_share_one_definition() -> None:
    # the benchmark's ops and the recorder's wrappers read their factors from pytimings.record.nccl
    from pytimings.record import nccl
    from pytimings.record.distributed import comm_op_of

    for n in (2, 3, 8):
        for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"):
            assert bus_factor(op, n) == comm_op_of(f"dist.{op}").bus_factor(n)
            assert bus_factor(op, n) == nccl.bus_factor(op, n)
        assert bus_factor("sendrecv", n) == comm_op_of("dist.send").bus_factor(n)
