"""The patches of `pytimings record` (pytimings.record.hooks) and its command line."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import pytimings as pt
from pytimings.commands import record as record_cmd
from pytimings.errors import UsageError
from pytimings.record import hooks
from pytimings.record.launch import Options


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[pt.Recorder]:
    """The default recorder, emptied; torch's patched methods are put back afterwards."""
    for name in ("to", "copy_", "cuda", "cpu"):
        monkeypatch.setattr(torch.Tensor, name, getattr(torch.Tensor, name))
    monkeypatch.setattr(torch.Tensor, "_pytimings_copies", False, raising=False)
    monkeypatch.setattr(torch.nn.Module, "__call__", torch.nn.Module.__call__)
    monkeypatch.setattr(torch.nn.Module, "_pytimings_modules", False, raising=False)
    rec = pt.default_recorder()
    rec.clear()
    yield rec
    rec.clear()


def _regions(rec: pt.Recorder) -> list[tuple[str, str, int]]:
    r = rec.recording()
    return [
        (r.strings[n], r.strings[k], int(b))
        for n, k, b in zip(r.records["name"], r.records["kind"], r.records["nbytes"], strict=True)
    ]


def test_copy_direction() -> None:
    assert hooks.copy_direction("cpu", "cuda") == "HtoD"
    assert hooks.copy_direction("cuda", "cpu") == "DtoH"
    assert hooks.copy_direction("cpu", "cpu") is None
    assert hooks.copy_direction("cuda", "cuda") is None
    assert hooks.copy_direction("meta", "cpu") is None  # not a device we time copies on


def test_to_target_reads_the_device_as_tensor_to_does() -> None:
    cuda1 = torch.device("cuda", 1)
    assert hooks._to_target(torch, (1,), {}) == cuda1  # an int is a CUDA device index
    assert hooks._to_target(torch, ("cuda:1", torch.float16), {}) == cuda1
    assert hooks._to_target(torch, (), {"device": "cuda:1", "dtype": torch.float16}) == cuda1
    assert hooks._to_target(torch, (torch.zeros(1),), {}) == torch.device("cpu")
    assert hooks._to_target(torch, (torch.float16,), {}) is None
    assert hooks._to_target(torch, (torch.float16, True), {}) is None  # non_blocking, not cuda:1


def test_host_to_host_copies_record_nothing(recorded: pt.Recorder) -> None:
    hooks.patch_copies(torch)
    t = torch.ones(16)
    t.to("cpu")
    t.to(torch.float64)
    t.to(torch.zeros(1))
    t.to(device="cpu", dtype=torch.float16)
    torch.empty(16).copy_(t)
    t.cpu()
    assert _regions(recorded) == []


def test_copies_across_a_faked_device_are_memory_regions_with_bytes(
    recorded: pt.Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "meta" stands in for a GPU: the wrappers decide by device type only
    monkeypatch.setattr(hooks, "DEVICE_TYPES", hooks.DEVICE_TYPES | {"meta"})
    hooks.patch_copies(torch)
    hooks.patch_copies(torch)  # idempotent: one region per copy
    t = torch.ones(16)  # 64 bytes
    assert t.to("meta").device.type == "meta"
    t.to(torch.empty(1, device="meta"))
    torch.empty(16, device="meta").copy_(t)
    t.to(torch.float64)  # stays on the host
    assert _regions(recorded) == [("memcpy.HtoD", "memory", 64)] * 3


def test_modules_matching_the_pattern_are_compute_regions(recorded: pt.Recorder) -> None:
    hooks.patch_modules(torch, ["torch.nn.modules.linear.*"])
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    model(torch.ones(1, 4))
    model(torch.ones(1, 4))
    # each instance by its path under the outermost module that called it (issue 46)
    assert _regions(recorded) == [("Sequential.0", "compute", -1),
                                  ("Sequential.2", "compute", -1)] * 2  # fmt: skip
    torch.nn.Linear(4, 4)(torch.ones(1, 4))  # called from no module: its class
    assert _regions(recorded)[-1] == ("Linear", "compute", -1)
    assert hooks.class_matches(torch.nn.ReLU, ["*ReLU"])
    assert not hooks.class_matches(torch.nn.ReLU, ["ReLU"])  # the qualified name is matched


def test_install_waits_for_torch_and_never_imports_it(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from pytimings.record import hooks\n"
        "hooks.install(hooks.Patches(comm=True, copies=True, modules='*Linear'))\n"
        "assert 'torch' not in sys.modules\n"
        "from torch.distributed import all_reduce\n"
        "import torch\n"
        "from pytimings.record import distributed\n"
        "assert distributed.is_instrumented() and hasattr(all_reduce, '__wrapped__')\n"
        "assert torch.Tensor._pytimings_copies and torch.nn.Module._pytimings_modules\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.stdout.strip() == "ok", done.stderr


def _args(**kw: object) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    record_cmd.add_arguments(p)
    ns = p.parse_args([])
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


def test_command_lines() -> None:
    py = sys.executable
    assert record_cmd.command_line(["--", "serve.py", "-x"]) == ([py, "serve.py", "-x"], False)
    assert record_cmd.command_line(["-m", "svc"]) == ([py, "-m", "svc"], False)
    assert record_cmd.command_line(["torchrun", "--nproc-per-node=2", "w.py"])[1]
    assert record_cmd.command_line(["python", "-m", "torch.distributed.run", "w.py"])[1]
    assert not record_cmd.command_line(["python", "w.py"])[1]
    with pytest.raises(UsageError, match="no command"):
        record_cmd.command_line(["--"])


def test_options_round_trip_the_environment_and_reject_bad_values(tmp_path: Path) -> None:
    opts = record_cmd.options(
        _args(out=str(tmp_path / "o.pyt"), copies=True, modules="*Attn*", flush_every=2.5)
    )
    assert Options.from_env(opts.to_env()) == opts
    assert Options.from_env({}) is None
    with pytest.raises(UsageError, match="does not exist"):
        record_cmd.options(_args(out=str(tmp_path / "nope" / "o.pyt")))
    with pytest.raises(UsageError, match="--modules"):
        record_cmd.options(_args(out=str(tmp_path / "o.pyt"), modules=" , "))


def test_a_flush_interval_past_what_a_wait_takes_is_refused(tmp_path: Path) -> None:
    """--flush-every 1e300 passed (finite, positive) and the flush thread died at its first
    wait (OverflowError): no periodic save, exit 0."""
    with pytest.raises(UsageError, match="--flush-every: must be a positive number of seconds up"):
        record_cmd.options(_args(out=str(tmp_path / "o.pyt"), flush_every=1e300))
    assert record_cmd.options(_args(out=str(tmp_path / "o.pyt"), flush_every=86400.0))


def test_the_record_lock_is_private_and_a_directory_there_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock was $TMPDIR/pytimings-record-{sha}.lock: another user could hold it (or plant
    a directory there: IsADirectoryError). It lives in this user's 0700 directory now."""
    import stat

    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    out = tmp_path / "o.pyt"
    fd = record_cmd._lock(out, "o.pyt")
    try:
        locks = tmp_path / "tmp" / f"pytimings-{os.geteuid()}" / "record-locks"
        (lock,) = locks.iterdir()
        assert stat.S_IMODE(locks.stat().st_mode) == 0o700
        assert stat.S_IMODE(locks.parent.stat().st_mode) == 0o700
        with pytest.raises(UsageError, match="another pytimings record is writing it"):
            record_cmd._lock(out, "o.pyt")
    finally:
        os.close(fd)
    lock.unlink()
    lock.mkdir()
    with pytest.raises(UsageError, match=r"-o o.pyt: cannot take the lock .*directory"):
        record_cmd._lock(out, "o.pyt")


def test_instances_of_one_class_are_told_apart_by_their_path(recorded: pt.Recorder) -> None:
    """Four ToyDecoderLayer regions of one name could not be told apart (issue 46)."""

    class DecoderLayer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.proj(x)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList([DecoderLayer(), DecoderLayer()])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = layer(x)
            return x

    hooks.patch_modules(torch, ["*DecoderLayer", "torch.nn.modules.linear.*"])
    Model()(torch.ones(1, 4))
    assert [name for name, _, _ in _regions(recorded)] == [
        "Model.layers.0", "Model.layers.0.proj", "Model.layers.1", "Model.layers.1.proj",
    ]  # fmt: skip
