"""`pytimings bench` argument errors, the no-GPU exits, and the report outputs."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from pytimings.bench.report import SCHEMA, BenchReport, Column, render_text, write_plot
from pytimings.cli import main


def _gpu_visible() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


NO_GPU = pytest.mark.skipif(_gpu_visible(), reason="tests the no-GPU behaviour; a GPU is here")


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], match: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith("pytimings bench: error: "), err
    assert match in err, err
    return err


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["bench", "copy", "--sizes", "1G:4K"], "ends below"),
        (["bench", "copy", "--sizes", "4Q"], "expected bytes"),
        (["bench", "copy", "--sizes", "0"], "at least 1 byte"),
        (["bench", "latency", "--sizes", "0"], "at least 1 byte"),
        (["bench", "kv", "--blocks", "0"], "at least 1 byte"),
        (["bench", "copy", "--json", "/nonexist/o.json"], "/nonexist does not exist"),
        (["bench", "copy", "--plot", "/nonexist/o.png"], "/nonexist does not exist"),
        (["bench", "latency", "--json", "/nonexist/o.json"], "/nonexist does not exist"),
        (["bench", "kv", "--plot", "/nonexist/o.png"], "/nonexist does not exist"),
        (
            ["bench", "collective", "--op", "all_reduce", "--json", "/nonexist/o.json"],
            "/nonexist does not exist",
        ),
        (["bench", "copy", "--samples", "0"], "--samples 0"),
        (["bench", "latency", "--warmup", "-1"], "--warmup -1"),
        (["bench", "collective", "--op", "allreduce"], "unknown operation"),
        (["bench", "collective", "--op", "all_reduce", "-n", "0"], "--iters 0"),
        (["bench", "collective", "--op", "all_reduce", "-b", "1G", "-e", "4K"], "ends below"),
        (["bench", "collective", "--op", "all_reduce", "--dtype", "float128"], "--dtype"),
        (
            ["bench", "collective", "--op", "all_reduce", "--placement", "out-of-place"],
            "no out-of-place form",
        ),
        (["bench", "collective", "--op", "all_reduce", "--placement", "sideways"], "--placement"),
        (["bench", "collective", "--op", "all_reduce", "--env-ab", "NOEQUALS"], "NAME=VALUE"),
        (["bench", "kv", "--layers", "0"], "--layers 0"),
        (["bench", "kv", "--dtype", "float33"], "--dtype"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    match: str,
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    _one_line_error(capsys, argv, match)


def test_collective_world_size_one_and_no_torchrun(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["bench", "collective", "--op", "all_reduce", "-b", "8", "-e", "8"]
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    _one_line_error(capsys, argv, "world size 1")
    monkeypatch.delenv("WORLD_SIZE")
    _one_line_error(capsys, argv, "not launched by torchrun")


@NO_GPU
@pytest.mark.parametrize("bench", ["latency", "kv"])
def test_gpu_benchmarks_exit_2_without_a_gpu(
    capsys: pytest.CaptureFixture[str], bench: str
) -> None:
    _one_line_error(capsys, ["bench", bench], "needs a CUDA GPU")


@NO_GPU
def test_copy_without_gpu_runs_host_rows_then_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out, png = tmp_path / "copy.json", tmp_path / "copy.png"
    argv = [
        "bench",
        "copy",
        "--sizes",
        "64K:256K",
        "--samples",
        "3",
        "--warmup",
        "1",
        "--rotate",
        "1M",
        "--json",
        str(out),
    ]
    if importlib.util.find_spec("matplotlib") is not None:
        argv += ["--plot", str(png)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "host numpy copyto (pageable)" in captured.out
    assert captured.err.strip().count("\n") == 0
    assert "GPU rows (h2d, d2h, d2d, peer) need a CUDA GPU" in captured.err
    doc = json.loads(out.read_text())
    assert doc["schema"] == SCHEMA and doc["bench"] == "copy"
    assert doc["header"]["gpu"].startswith("none visible")
    rows = [r for r in doc["rows"] if r["path"] == "host numpy copyto (pageable)"]
    assert [r["size_bytes"] for r in rows] == [64 << 10, 128 << 10, 256 << 10]
    for r in rows:
        assert r["min_us"] <= r["time_us"] <= r["max_us"]
        assert r["gbps"] == pytest.approx(r["size_bytes"] / (r["time_us"] * 1e3))
    assert any(
        f["path"] == "host numpy copyto (pageable)" and f["n_points"] == 3 for f in doc["fits"]
    )
    if "--plot" in argv:
        assert png.read_bytes()[:4] == b"\x89PNG"


def _report() -> BenchReport:
    rows = [
        {"path": "p", "size_bytes": s, "time_us": 1 + s / 1e3, "gbps": s / (1 + s / 1e3) / 1e3}
        for s in (1024, 2048, 4096)
    ]
    return BenchReport(
        "copy",
        {"sizes": [1024, 2048, 4096]},
        [Column("path", "path"), Column("size_bytes", "size(B)"), Column("gbps", "GB/s", ".3f")],
        rows,
    )


def test_table_is_aligned() -> None:
    text = render_text(_report())
    table = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len({len(line) for line in table}) == 1  # right-aligned columns, equal widths
    assert "# sizes: 1024, 2048, 4096" in text


def test_plot_writes_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "p.png"
    write_plot(_report(), out, "gbps", ["path"], "GB/s")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytimings.errors import UsageError

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    hint = r"pip install 'matplotlib>=3.7' \(from a pytimings checkout: pip install '\.\[plot\]'\)"
    with pytest.raises(UsageError, match=hint):
        write_plot(_report(), tmp_path / "p.png", "gbps", ["path"], "GB/s")


def test_without_torch(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import pytimings.bench.copy as copy_mod
    import pytimings.bench.system as system_mod

    monkeypatch.setattr(system_mod, "torch_or_none", lambda: None)
    monkeypatch.setattr(copy_mod, "torch_or_none", lambda: None)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    _one_line_error(capsys, ["bench", "collective", "--op", "all_reduce"], "torch is not installed")
    _one_line_error(capsys, ["bench", "latency"], "torch is not installed")
    out = tmp_path / "c.json"
    assert (
        main(
            [
                "bench",
                "copy",
                "--sizes",
                "64K",
                "--samples",
                "2",
                "--rotate",
                "256K",
                "--quiet",
                "--json",
                str(out),
            ]
        )
        == 2
    )
    assert "; torch is not installed" in capsys.readouterr().err
    rows = json.loads(out.read_text())["rows"]
    assert [r["path"] for r in rows] == ["host numpy copyto (pageable)"]


def test_output_path_that_is_a_directory_is_refused_before_measuring(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _one_line_error(capsys, ["bench", "copy", "--json", str(tmp_path)], "is a directory")


def test_unwritable_output_directory_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    real_access = os.access
    monkeypatch.setattr(
        os,
        "access",
        lambda p, mode: False if os.fspath(p) == str(tmp_path) else real_access(p, mode),
    )
    _one_line_error(capsys, ["bench", "kv", "--json", str(tmp_path / "o.json")], "is not writable")
