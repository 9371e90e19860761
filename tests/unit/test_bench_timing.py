"""The timing seam: the spin-kernel batch timer against a simulated GPU timeline, and the
rotating buffers."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from pytimings.bench import timing
from pytimings.bench.buffers import Arena, batch_size, host_arena
from pytimings.bench.timing import SPIN_RETRIES, GpuTimer, summarize

CYCLES_PER_US = 1000.0


class _Gpu:
    """One stream's timeline in virtual microseconds: the spin kernel and each operation
    advance it; events read it. Host time passes for real meanwhile."""

    def __init__(self) -> None:
        self.now_us = 0.0


class _Event:
    def __init__(self, gpu: _Gpu) -> None:
        self.gpu = gpu
        self.t: float | None = None

    def record(self, stream: Any = None) -> None:
        self.t = self.gpu.now_us

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: _Event) -> float:
        assert self.t is not None and end.t is not None
        return (end.t - self.t) / 1e3  # ms


class _FakeTorch:
    def __init__(self, gpu: _Gpu) -> None:
        self.gpu = gpu
        self.spins: list[float] = []
        self.cuda = self

    def device(self, i: int) -> Any:
        return contextlib.nullcontext()

    def current_stream(self) -> object:
        return object()

    def synchronize(self) -> None:
        pass

    def Event(self, enable_timing: bool = False) -> _Event:  # torch's name
        return _Event(self.gpu)

    def _sleep(self, cycles: int) -> None:
        self.spins.append(cycles / CYCLES_PER_US)
        self.gpu.now_us += cycles / CYCLES_PER_US


def _timer() -> tuple[GpuTimer, _FakeTorch]:
    fake = _FakeTorch(_Gpu())
    timer = GpuTimer(fake, 0)
    assert timer.cycles_per_us == pytest.approx(CYCLES_PER_US)  # calibrated from events
    return timer, fake


class _HostClock:
    """Replaces the timer's host clock: time passes only when an enqueue says so."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ns = 0
        monkeypatch.setattr(timing, "now_ns", lambda: self.ns)


def _op(
    fake: _FakeTorch,
    gpu_us: float,
    host: _HostClock | None = None,
    host_us: Callable[[], float] = lambda: 0.0,
) -> Callable[[int], None]:
    def enqueue(_: int) -> None:
        if host is not None:
            host.ns += int(host_us() * 1e3)
        fake.gpu.now_us += gpu_us

    return enqueue


def test_batch_time_is_the_gpu_time_between_the_events() -> None:
    timer, fake = _timer()
    bt = timer.time_batch(_op(fake, 7.0), 16)
    assert bt.gpu_us == pytest.approx(16 * 7.0)  # the spin is before the start event
    assert bt.covered
    assert bt.host_enqueue_us > 0


def test_a_spin_too_short_for_slow_enqueueing_is_retried_longer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    timer, fake = _timer()
    host = _HostClock(monkeypatch)
    bt = timer.time_batch(_op(fake, 5.0, host, lambda: 4000.0), 4)  # 4 ms per enqueue
    assert bt.covered and bt.host_enqueue_us == pytest.approx(4 * 4000.0)
    # calibration (2), a first try with the default guess, then one learnt from it
    assert len(fake.spins) == 4
    assert fake.spins[2] < 4 * 4000 < fake.spins[3]
    assert bt.gpu_us == pytest.approx(4 * 5.0)


def test_never_covered_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    timer, fake = _timer()
    host = _HostClock(monkeypatch)
    slow = [500.0]

    def host_us() -> float:  # each try 10x slower than the one the spin was learnt from
        slow[0] *= 10
        return slow[0]

    bt = timer.time_batch(_op(fake, 1.0, host, host_us), 1)
    assert not bt.covered
    assert len(fake.spins) == 2 + SPIN_RETRIES + 1  # calibration (2) + every try


def test_without_spin_nothing_is_claimed_covered() -> None:
    timer, fake = _timer()
    bt = timer.time_batch(_op(fake, 3.0), 5, spin=False)
    assert not bt.covered and bt.gpu_us == pytest.approx(15.0)
    assert len(fake.spins) == 2  # only the calibration


def test_summary() -> None:
    s = summarize([3.0, 1.0, 2.0, 10.0])
    assert (s.median, s.min, s.max, s.n) == (2.5, 1.0, 10.0, 4)


def test_arena_rotates_through_aligned_slots() -> None:
    arena = host_arena(1000, 64 * 1024)
    assert arena.stride == 1024 and arena.slots == 64
    assert [arena.ptr(k) - arena.ptr(0) for k in (1, 63, 64, 65)] == [1024, 63 * 1024, 0, 1024]
    assert arena.view(3).nbytes == 1000
    assert np.shares_memory(arena.view(3), arena.view(67))
    assert not np.shares_memory(arena.view(3), arena.view(4))
    big = host_arena(1 << 20, 1 << 10)  # rotation smaller than the copy: one slot
    assert big.slots == 1 and big.ptr(5) == big.ptr(0)


def test_arena_alloc_is_pluggable() -> None:
    seen: list[int] = []

    def alloc(total: int) -> tuple[Any, int]:
        seen.append(total)
        return bytearray(total), 4096

    arena = Arena(256, 1024, alloc)
    assert seen == [1024] and arena.ptr(1) == 4096 + 256


def test_batch_size_bounds() -> None:
    assert batch_size(4096) == 128
    assert batch_size(1 << 30) == 2
    assert batch_size(8 << 20) == 32
