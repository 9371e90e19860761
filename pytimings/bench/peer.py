"""Peer (GPU-to-GPU) copy matrices, with peer access enabled and disabled, and their ratio.

The benchmark logic talks to the devices only through ``PeerDevices``, the few operations it
needs; ``CudaPeerDevices`` implements them with torch and the CUDA runtime (peer access is
switched with ``cudaDeviceEnablePeerAccess``/``cudaDeviceDisablePeerAccess`` and copies are
``cudaMemcpyPeerAsync``, which the driver stages through the host when access is off), and the
tests use a fake.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pytimings.bench.buffers import Arena, batch_size, torch_arena
from pytimings.bench.report import Matrix
from pytimings.bench.timing import GpuTimer, summarize

_ALREADY_ENABLED = 704  # cudaErrorPeerAccessAlreadyEnabled
_NOT_ENABLED = 705  # cudaErrorPeerAccessNotEnabled


class PeerDevices(Protocol):
    def device_count(self) -> int: ...

    def name(self, device: int) -> str: ...

    def can_access_peer(self, device: int, peer: int) -> bool: ...

    def set_peer_access(self, device: int, peer: int, enabled: bool) -> None:
        """Let ``device`` map ``peer``'s memory (or stop it)."""

    def time_copies(
        self, src: int, dst: int, nbytes: int, bidirectional: bool, samples: int, warmup: int
    ) -> tuple[list[float], int]:
        """Microseconds per copy of ``nbytes`` (both directions at once if ``bidirectional``),
        one value per sample, and how many samples the spin kernel did not cover."""


@dataclass
class PeerResult:
    matrices: list[Matrix]
    rows: list[dict[str, Any]]
    notes: list[str]


def _pairs(n: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(n) for j in range(n) if i != j]


def _set_pair(dev: PeerDevices, i: int, j: int, enabled: bool) -> None:
    dev.set_peer_access(i, j, enabled)
    dev.set_peer_access(j, i, enabled)


def _gbps(nbytes: int, bidirectional: bool, time_us: float) -> float:
    return (2 if bidirectional else 1) * nbytes / (time_us * 1e3)


def peer_benchmark(
    dev: PeerDevices, matrix_bytes: int, sweep_sizes: Sequence[int], samples: int, warmup: int
) -> PeerResult:
    """Matrices (every ordered pair, uni/bidirectional, access on/off, on/off ratio) at
    ``matrix_bytes``, and a size sweep on the pair 0 -> 1 for the alpha-beta fits."""
    n = dev.device_count()
    if n < 2:
        return PeerResult([], [], [f"peer matrices need two GPUs; found {n}"])
    names = [f"{i}:{dev.name(i)}" for i in range(n)]
    notes: list[str] = []
    access = {(i, j): dev.can_access_peer(i, j) and dev.can_access_peer(j, i) for i, j in _pairs(n)}
    for (i, j), ok in access.items():
        if not ok and i < j:
            notes.append(
                f"cuda:{i} <-> cuda:{j}: no peer access; the access-on matrices leave the pair n/a"
            )
    uncovered = 0
    matrices: list[Matrix] = []
    for bidirectional in (False, True):
        kind = "bidirectional (both directions summed)" if bidirectional else "unidirectional"
        grids: dict[bool, list[list[float | None]]] = {}
        for enabled in (True, False):
            grid: list[list[float | None]] = [[None] * n for _ in range(n)]
            for i, j in _pairs(n):
                if enabled and not access[(i, j)]:
                    continue
                _set_pair(dev, i, j, enabled)
                times, bad = dev.time_copies(i, j, matrix_bytes, bidirectional, samples, warmup)
                uncovered += bad
                grid[i][j] = _gbps(matrix_bytes, bidirectional, summarize(times).median)
            grids[enabled] = grid
            matrices.append(
                Matrix(
                    f"peer copy {kind}, peer access {'on' if enabled else 'off'}, "
                    f"{matrix_bytes} bytes, median",
                    "GB/s",
                    names,
                    grid,
                )
            )
        ratio: list[list[float | None]] = [[None] * n for _ in range(n)]
        for i, j in _pairs(n):
            on, off = grids[True][i][j], grids[False][i][j]
            ratio[i][j] = on / off if on is not None and off else None
        matrices.append(Matrix(f"peer copy {kind}, access on / access off", "ratio", names, ratio))
    rows: list[dict[str, Any]] = []
    for bidirectional in (False, True):
        for enabled in (True, False):
            if enabled and not access[(0, 1)]:
                continue
            _set_pair(dev, 0, 1, enabled)
            for size in sweep_sizes:
                times, bad = dev.time_copies(0, 1, size, bidirectional, samples, warmup)
                uncovered += bad
                s = summarize(times)
                rows.append(
                    {
                        "path": f"peer 0->1 {'bidir' if bidirectional else 'uni'} "
                        f"access {'on' if enabled else 'off'}",
                        "engine": "CE",
                        "size_bytes": size,
                        "time_us": s.median,
                        "min_us": s.min,
                        "max_us": s.max,
                        "gbps": _gbps(size, bidirectional, s.median),
                    }
                )
    for i, j in _pairs(n):  # leave peer access on where possible, as torch expects it
        if i < j and access[(i, j)]:
            _set_pair(dev, i, j, True)
    if uncovered:
        notes.append(
            f"{uncovered} peer sample(s) ran without the spin kernel covering the "
            "enqueueing (host gaps may be included)"
        )
    return PeerResult(matrices, rows, notes)


def _cudart() -> ctypes.CDLL:
    """The CUDA runtime that torch loaded (dlopen of a loaded soname returns it)."""
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise RuntimeError("could not load the CUDA runtime library (libcudart)")


def _declare(rt: ctypes.CDLL) -> ctypes.CDLL:
    """Argument types of the few runtime functions used, so ctypes passes them exactly."""
    c_int, c_uint, c_void_p, c_size_t = (
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.c_void_p,
        ctypes.c_size_t,
    )
    rt.cudaDeviceEnablePeerAccess.argtypes = [c_int, c_uint]
    rt.cudaDeviceDisablePeerAccess.argtypes = [c_int]
    rt.cudaGetLastError.argtypes = []
    rt.cudaMemcpyPeerAsync.argtypes = [c_void_p, c_int, c_void_p, c_int, c_size_t, c_void_p]
    for fn in (
        rt.cudaDeviceEnablePeerAccess,
        rt.cudaDeviceDisablePeerAccess,
        rt.cudaGetLastError,
        rt.cudaMemcpyPeerAsync,
    ):
        fn.restype = c_int  # cudaError_t
    return rt


class CudaPeerDevices:
    """``PeerDevices`` on real GPUs: torch tensors, CUDA events, cudaMemcpyPeerAsync."""

    def __init__(self, torch: Any, rotate_bytes: int) -> None:
        self.torch = torch
        self.rotate_bytes = rotate_bytes
        self._rt: ctypes.CDLL | None = None
        self.timers: dict[int, GpuTimer] = {}

    @property
    def rt(self) -> ctypes.CDLL:
        if self._rt is None:
            self._rt = _declare(_cudart())
        return self._rt

    def device_count(self) -> int:
        return int(self.torch.cuda.device_count())

    def name(self, device: int) -> str:
        return str(self.torch.cuda.get_device_name(device))

    def can_access_peer(self, device: int, peer: int) -> bool:
        return bool(self.torch.cuda.can_device_access_peer(device, peer))

    def set_peer_access(self, device: int, peer: int, enabled: bool) -> None:
        with self.torch.cuda.device(device):
            if enabled:
                err = self.rt.cudaDeviceEnablePeerAccess(peer, 0)
                ok = (0, _ALREADY_ENABLED)
            else:
                err = self.rt.cudaDeviceDisablePeerAccess(peer)
                ok = (0, _NOT_ENABLED)
            if err not in ok:
                raise RuntimeError(f"peer access cuda:{device} -> cuda:{peer}: CUDA error {err}")
            self.rt.cudaGetLastError()  # clear the sticky "already/not enabled" status

    def _timer(self, device: int) -> GpuTimer:
        if device not in self.timers:
            self.timers[device] = GpuTimer(self.torch, device)
        return self.timers[device]

    def time_copies(
        self, src: int, dst: int, nbytes: int, bidirectional: bool, samples: int, warmup: int
    ) -> tuple[list[float], int]:
        torch = self.torch

        def arena(device: int) -> Arena:
            return torch_arena(torch, nbytes, self.rotate_bytes, f"cuda:{device}")

        a_src, a_dst = arena(src), arena(dst)
        b_src, b_dst = (arena(dst), arena(src)) if bidirectional else (None, None)
        timer = self._timer(src)
        side = torch.cuda.Stream(device=dst) if bidirectional else None
        handle = timer.stream.cuda_stream
        side_handle = side.cuda_stream if side is not None else None
        memcpy = self.rt.cudaMemcpyPeerAsync
        counter = [0]

        def enqueue(_: int) -> None:
            k = counter[0]
            counter[0] += 1
            err = memcpy(a_dst.ptr(k), dst, a_src.ptr(k), src, nbytes, handle)
            if b_src is not None and b_dst is not None:
                err |= memcpy(b_dst.ptr(k), src, b_src.ptr(k), dst, nbytes, side_handle)
            if err:
                raise RuntimeError(f"cudaMemcpyPeerAsync cuda:{src} -> cuda:{dst} failed: {err}")

        batch = batch_size(nbytes)
        times: list[float] = []
        uncovered = 0
        for k in range(warmup + samples):
            bt = timer.time_batch(enqueue, batch, side_streams=[side] if side is not None else [])
            if k >= warmup:
                times.append(bt.gpu_us / batch)
                uncovered += not bt.covered
        return times, uncovered
