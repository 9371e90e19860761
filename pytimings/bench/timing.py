"""The timing primitives of ``pytimings bench``, in one place.

GPU: the nvbandwidth method. A spin kernel (``torch.cuda._sleep``) holds the stream while the
host enqueues a batch of operations between two CUDA events, so the events measure the GPU
doing the batch back to back and none of the host's launch gaps. Whether the spin really
covered the enqueueing is checked on every batch (the spin's own GPU duration against the host
time spent enqueueing); a batch it did not cover is retried with a longer spin, and reported
as uncovered if it still was not.

Host: the native monotonic clock (``pytimings.now_ns``) around a batch.

This module is the one seam to switch to the recorder's CUDA-event regions
(``pytimings.region``) once that lands: every benchmark times through ``GpuTimer.time_batch``
and ``time_host_batch``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pytimings._core import now_ns

SPIN_RETRIES = 3


@dataclass(frozen=True)
class Summary:
    median: float
    min: float
    max: float
    n: int


def summarize(values: Sequence[float]) -> Summary:
    return Summary(statistics.median(values), min(values), max(values), len(values))


@dataclass(frozen=True)
class BatchTime:
    gpu_us: float  # event-to-event GPU time of the whole batch
    host_enqueue_us: float  # host time spent enqueueing the batch (launch cost)
    covered: bool  # the spin kernel held the stream for the whole enqueueing


def time_host_batch(fn: Callable[[int], None], n_ops: int) -> float:
    """Host wall time of ``fn(0) .. fn(n_ops-1)`` in microseconds."""
    t0 = now_ns()
    for i in range(n_ops):
        fn(i)
    return (now_ns() - t0) / 1e3


class GpuTimer:
    """CUDA-event timing of operations on one device's current stream."""

    def __init__(self, torch: Any, device: int) -> None:
        self.torch = torch
        self.device = device
        with torch.cuda.device(device):
            self.stream = torch.cuda.current_stream()
            self.cycles_per_us = self._calibrate()
        self._enqueue_us_per_op = 10.0  # learnt from each batch

    def _event(self, timing: bool = True) -> Any:
        return self.torch.cuda.Event(enable_timing=timing)

    def _calibrate(self) -> float:
        """GPU clock cycles per microsecond of the spin kernel, measured with events."""
        cycles = 2_000_000
        start, end = self._event(), self._event()
        self.torch.cuda._sleep(1000)  # load the kernel once
        start.record()
        self.torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        return cycles / max(float(start.elapsed_time(end)) * 1e3, 1e-3)

    def time_batch(
        self,
        enqueue: Callable[[int], None],
        n_ops: int,
        spin: bool = True,
        side_streams: Sequence[Any] = (),
    ) -> BatchTime:
        """GPU time of ``enqueue(0) .. enqueue(n_ops-1)`` between two events on this device's
        stream; operations on ``side_streams`` start after the first event and are waited for
        before the second. ``spin=False`` times without holding the stream (for operations that
        block the host, such as pageable copies, which a held stream would deadlock)."""
        torch = self.torch
        with torch.cuda.device(self.device):
            for attempt in range(SPIN_RETRIES + 1):
                torch.cuda.synchronize()
                spin_start, start, end = self._event(), self._event(), self._event()
                t0 = now_ns()
                if spin:
                    spin_us = 50.0 + 2.0 * self._enqueue_us_per_op * n_ops * (attempt + 1)
                    spin_start.record(self.stream)
                    torch.cuda._sleep(int(spin_us * self.cycles_per_us))
                start.record(self.stream)
                for s in side_streams:
                    s.wait_event(start)
                t1 = now_ns()
                for i in range(n_ops):
                    enqueue(i)
                t2 = now_ns()
                for s in side_streams:
                    done = self._event(timing=False)
                    done.record(s)
                    self.stream.wait_event(done)
                end.record(self.stream)
                t3 = now_ns()
                end.synchronize()
                host_us = (t2 - t1) / 1e3
                self._enqueue_us_per_op = max(host_us / max(n_ops, 1), 0.5)
                if not spin:
                    return BatchTime(start.elapsed_time(end) * 1e3, host_us, False)
                held_us = spin_start.elapsed_time(start) * 1e3
                if held_us > (t3 - t0) / 1e3:
                    return BatchTime(start.elapsed_time(end) * 1e3, host_us, True)
            return BatchTime(start.elapsed_time(end) * 1e3, host_us, False)
