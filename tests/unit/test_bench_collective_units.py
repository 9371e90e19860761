"""Pieces of the collective benchmark that need no process group: result validation (it must
catch a collective that did nothing), env A/B parsing, child environments, comparison."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from pytimings.bench.collective import OPS, _Buffers
from pytimings.bench.envab import child_environment, compare, parse_variant
from pytimings.errors import UsageError


class _NoCommDist:
    """A torch.distributed stand-in whose collectives do nothing (a broken backend)."""

    P2POp = staticmethod(lambda fn, t, peer: (fn, t, peer))

    def __getattr__(self, name: str) -> Any:
        if name == "batch_isend_irecv":
            return lambda ops: []
        return lambda *a, **k: None


@pytest.mark.parametrize("op", sorted(OPS))
def test_validation_catches_a_collective_that_did_nothing(op: str) -> None:
    in_place = OPS[op].in_place and not OPS[op].out_of_place
    for rank in (0, 1):
        bufs = _Buffers(
            torch, _NoCommDist(), op, 4, 2, rank, in_place, torch.float32, torch.device("cpu")
        )
        bufs.fill()
        bufs.call()
        if op == "broadcast" and rank == 0:
            assert bufs.check(torch)  # the root already holds the broadcast value
        else:
            assert not bufs.check(torch), (op, rank)


def test_validation_accepts_the_right_answer() -> None:
    # all_to_all on 2 ranks simulated by hand: rank r's chunk c goes to rank c's chunk r
    a = [
        _Buffers(
            torch, _NoCommDist(), "all_to_all", 3, 2, r, False, torch.int8, torch.device("cpu")
        )
        for r in (0, 1)
    ]
    for b in a:
        b.fill()
    inp = [b._fill[0][1] for b in a]
    for r in (0, 1):
        a[r].out.copy_(torch.cat([inp[src][r * 3 : (r + 1) * 3] for src in (0, 1)]))
        assert a[r].check(torch)


def test_parse_variant() -> None:
    assert parse_variant("NCCL_P2P_DISABLE=1") == {"NCCL_P2P_DISABLE": "1"}
    assert parse_variant("A=1 B=") == {"A": "1", "B": ""}
    for bad in ("", "NOEQ", "=1", "1A=2"):
        with pytest.raises(UsageError, match="--env-ab"):
            parse_variant(bad)


def test_child_environment_removes_ab_names_and_uses_a_private_store() -> None:
    base = {
        "NCCL_P2P_DISABLE": "0",
        "PATH": "/bin",
        "MASTER_PORT": "1",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
    }
    env = child_environment(base, {"NCCL_P2P_DISABLE"}, {}, 4242)
    assert env == {"PATH": "/bin", "MASTER_PORT": "4242"}
    env = child_environment(base, {"NCCL_P2P_DISABLE"}, {"NCCL_P2P_DISABLE": "1"}, 7)
    assert env["NCCL_P2P_DISABLE"] == "1" and env["MASTER_PORT"] == "7"


def _run(times: dict[int, float], env: dict[str, str | None]) -> dict[str, Any]:
    rows = [
        {
            "op": "all_reduce",
            "size_bytes": s,
            "count": s // 4,
            "dtype": "float32",
            "in_place": True,
            "time_us": t,
            "algbw_gbps": s / t / 1e3,
            "busbw_gbps": s / t / 1e3,
            "valid": True,
        }
        for s, t in times.items()
    ]
    return {"header": {"op": "all_reduce", "env": env}, "rows": rows, "notes": []}


def test_compare_reports_change_per_size_for_every_variant() -> None:
    runs = [
        _run({1024: 10.0, 4096: 20.0}, {"X": None}),
        _run({1024: 15.0, 4096: 10.0}, {"X": "1"}),
        _run({1024: 10.0, 4096: 30.0}, {"X": "2"}),
    ]
    report = compare(runs, ["baseline", "X=1", "X=2"])
    change = {(r["variant"], r["size_bytes"]): r["time_change_pct"] for r in report.rows}
    assert change == {
        ("baseline", 1024): None,
        ("baseline", 4096): None,
        ("X=1", 1024): pytest.approx(50.0),
        ("X=1", 4096): pytest.approx(-50.0),
        ("X=2", 1024): pytest.approx(0.0),
        ("X=2", 4096): pytest.approx(50.0),
    }
    assert report.header["env_ab"] == {
        "baseline": {"X": None},
        "X=1": {"X": "1"},
        "X=2": {"X": "2"},
    }
    assert {f["variant"] for f in report.fits} == {"baseline", "X=1", "X=2"}
    assert report.fits[0]["n_points"] == 2
