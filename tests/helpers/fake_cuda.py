"""A test double of torch's CUDA surface for running the GPU benchmarks' Python paths on a
machine without a GPU: "cuda:N" tensors live in host memory, events read the host clock, the
spin kernel does nothing (so no batch counts as covered). It checks plumbing, shapes and
arithmetic; the numbers mean nothing and the tests assert none."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

import torch

from pytimings import now_ns


class FakeEvent:
    def __init__(self, enable_timing: bool = False) -> None:
        self.t_ns: int | None = None

    def record(self, stream: Any = None) -> None:
        self.t_ns = now_ns()

    def synchronize(self) -> None:
        assert self.t_ns is not None, "synchronize on an event never recorded"

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.t_ns is not None and end.t_ns is not None
        return (end.t_ns - self.t_ns) / 1e6  # milliseconds, like torch


class FakeStream:
    cuda_stream = 0

    def __init__(self, device: Any = None) -> None:
        self.waits = 0

    def wait_event(self, event: FakeEvent) -> None:
        self.waits += 1


class FakeCuda:
    Event = FakeEvent
    Stream = FakeStream

    def __init__(self, n_devices: int) -> None:
        self.n = n_devices
        self.nccl = SimpleNamespace(version=lambda: (2, 0, 0))
        self._stream = FakeStream()

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return self.n

    def get_device_name(self, i: int) -> str:
        return "FakeGPU"

    def get_device_properties(self, i: int) -> Any:
        return SimpleNamespace(L2_cache_size=1 << 20)

    def can_device_access_peer(self, a: int, b: int) -> bool:
        return False

    def device(self, i: int) -> Any:
        return contextlib.nullcontext()

    def current_stream(self, device: Any = None) -> FakeStream:
        return self._stream

    def synchronize(self, device: Any = None) -> None:
        pass

    def _sleep(self, cycles: int) -> None:
        pass


class FakeTorch:
    """Real torch, with ``cuda`` replaced and device="cuda:N" mapped to host memory."""

    def __init__(self, n_devices: int = 1) -> None:
        self.cuda = FakeCuda(n_devices)

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def _kw(kw: dict[str, Any]) -> dict[str, Any]:
        kw.pop("pin_memory", None)
        if str(kw.get("device", "cpu")).startswith("cuda"):
            kw["device"] = "cpu"
        return kw

    def empty(self, *shape: Any, **kw: Any) -> Any:
        return torch.empty(*shape, **self._kw(kw))

    def ones(self, *shape: Any, **kw: Any) -> Any:
        return torch.ones(*shape, **self._kw(kw))

    def zeros(self, *shape: Any, **kw: Any) -> Any:
        return torch.zeros(*shape, **self._kw(kw))
