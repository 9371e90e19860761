"""The GPU benchmarks' Python paths (copy, latency, kv) run against a test double of torch's
CUDA surface, so their plumbing and arithmetic are checked on CPU CI. Real numbers and the
targets are checked by tests/gpu/test_bench_gpu.py on a GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.fake_cuda import FakeTorch

import pytimings.bench.copy as copy_mod
import pytimings.bench.system as system_mod
from pytimings.cli import main


@pytest.fixture
def fake_gpus(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(n: int) -> FakeTorch:
        fake = FakeTorch(n)
        monkeypatch.setattr(system_mod, "torch_or_none", lambda: fake)
        monkeypatch.setattr(copy_mod, "torch_or_none", lambda: fake)
        return fake

    return install


def _json(tmp_path: Path, argv: list[str]) -> dict[str, Any]:
    out = tmp_path / "out.json"
    assert main([*argv, "--json", str(out), "--quiet"]) == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def test_copy_runs_every_gpu_path(fake_gpus: Any, tmp_path: Path) -> None:
    fake_gpus(1)
    doc = _json(
        tmp_path,
        [
            "bench",
            "copy",
            "--sizes",
            "4K:16K",
            "--samples",
            "2",
            "--warmup",
            "0",
            "--rotate",
            "64K",
        ],
    )
    paths = {(r["path"], r["engine"]) for r in doc["rows"]}
    for expected in [
        ("h2d pinned", "CE"),
        ("h2d pageable", "CE"),
        ("d2h pinned", "CE"),
        ("d2h pageable", "CE"),
        ("d2d", "CE"),
        ("d2d", "SM"),
        ("h2d pinned", "CE reference"),
        ("d2d", "CE reference"),
        ("host torch copy_ (pinned)", "CPU"),
    ]:
        assert expected in paths
    sweep = [r for r in doc["rows"] if r["engine"] != "CE reference"]
    assert len(sweep) == (3 + 6) * 3  # 3 host and 6 GPU paths, 3 sizes each
    refs = [r for r in doc["rows"] if r["engine"] == "CE reference"]
    assert {r["size_bytes"] for r in refs} == {16 << 10}
    assert doc["header"]["peer"] == "peer matrices need two GPUs; found 1"
    assert "peer matrices need two GPUs; found 1" in doc["notes"]
    assert doc["matrices"] == []
    assert any("of same-run plain torch copy_" in n for n in doc["notes"])
    assert doc["header"]["devices"] == ["cuda:0 FakeGPU"]
    assert {(f["path"], f["engine"]) for f in doc["fits"]} == {
        (p, e) for p, e in paths if e != "CE reference"
    }


def test_copy_spin_batches_that_the_spin_did_not_cover_are_reported(
    fake_gpus: Any, tmp_path: Path
) -> None:
    fake_gpus(1)  # the fake spin kernel returns at once: nothing is ever covered
    doc = _json(
        tmp_path,
        ["bench", "copy", "--sizes", "4K", "--samples", "2", "--warmup", "0", "--rotate", "8K"],
    )
    assert any("without the spin kernel covering" in n for n in doc["notes"])


def test_latency_rows(fake_gpus: Any, tmp_path: Path) -> None:
    fake_gpus(1)
    doc = _json(
        tmp_path,
        ["bench", "latency", "--sizes", "4:64", "--samples", "2", "--warmup", "0", "--batch", "4"],
    )
    paths = [(r["path"], r["size_bytes"]) for r in doc["rows"]]
    assert paths == [(p, s) for p in ("h2d pinned", "d2h pinned", "d2d") for s in (4, 16, 64)] + [
        ("event record", 0),
        ("empty kernel", 0),
    ]
    for r in doc["rows"]:
        assert r["gpu_min_us"] <= r["gpu_us"] <= r["gpu_max_us"]
        assert r["launch_us"] >= 0 and r["naive_us"] >= 0
    assert {f["path"] for f in doc["fits"]} == {"h2d pinned", "d2h pinned", "d2d"}


def test_kv_patterns_and_per_block_overhead(fake_gpus: Any, tmp_path: Path) -> None:
    fake_gpus(2)
    doc = _json(
        tmp_path,
        [
            "bench",
            "kv",
            "--layers",
            "2",
            "--kv-heads",
            "2",
            "--head-dim",
            "8",
            "--dtype",
            "float16",
            "--block-size",
            "4",
            "--blocks",
            "2:4",
            "--samples",
            "2",
            "--warmup",
            "0",
        ],
    )
    block_bytes = 4 * 2 * 8 * 2
    rows = doc["rows"]
    assert {r["path"] for r in rows} == {
        "device-local",
        "peer cuda:0->cuda:1",
        "offload to pinned host",
        "reload from pinned host",
    }
    for r in rows:
        assert r["size_bytes"] == 2 * 2 * r["blocks"] * block_bytes
        base = next(
            b
            for b in rows
            if b["path"] == r["path"]
            and b["blocks"] == r["blocks"]
            and b["pattern"] == "contiguous copy"
        )
        if r["pattern"] == "contiguous copy":
            assert r["per_block_overhead_us"] is None
        else:
            moved = 2 * 2 * r["blocks"]
            assert r["per_block_overhead_us"] == pytest.approx(
                (r["time_us"] - base["time_us"]) / moved
            )
    assert {r["pattern"] for r in rows if r["path"] == "device-local"} == {
        "contiguous copy",
        "per-block copies",
        "gather kernel",
    }
    assert {r["pattern"] for r in rows if r["path"] == "reload from pinned host"} == {
        "contiguous copy",
        "per-block copies",
        "copy + scatter kernel",
    }


def test_kv_moves_the_right_blocks(fake_gpus: Any) -> None:
    """Every pattern of the offload path leaves the same bytes: the chosen blocks in order."""
    import torch

    from pytimings.bench.kv import _patterns

    fake = fake_gpus(1)
    cache = torch.arange(2 * 2 * 6 * 3, dtype=torch.float32).view(2, 2, 6, 3)
    ids = torch.tensor([4, 1, 3])
    expected = cache[:, :, ids].clone()
    stage = torch.zeros(2, 2, 3, 3)
    for direction, names in (
        ("local", ("contiguous copy", "per-block copies", "gather kernel")),
        ("offload", ("per-block copies", "gather kernel + copy")),
    ):
        for name in names:
            dst = torch.zeros(2, 2, 3, 3)
            for op in _patterns(fake, cache, ids, expected.clone(), dst, stage, direction)[name]:
                op()
            assert torch.equal(dst, expected), (direction, name)
    fresh = torch.zeros_like(cache)
    for name in ("per-block copies", "copy + scatter kernel"):
        fresh.zero_()
        for op in _patterns(
            fake,
            fresh,
            ids,
            torch.zeros(2, 2, 3, 3),
            expected.clone(),
            torch.zeros(2, 2, 3, 3),
            "reload",
        )[name]:
            op()
        assert torch.equal(fresh[:, :, ids], expected), name
