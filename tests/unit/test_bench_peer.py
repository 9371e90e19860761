"""Peer-matrix logic against a fake device layer whose copy speed depends on the peer-access
state at the moment of the copy, so forgetting to switch access shows in the matrices."""

from __future__ import annotations

import ctypes

import pytest

from pytimings.bench.peer import PeerResult, peer_benchmark


class FakeDevices:
    """n GPUs; ``links`` the pairs that can map each other's memory. A copy runs at
    ``on_gbps`` when both directions of the pair have access enabled, else ``off_gbps``;
    a bidirectional copy moves both directions at that speed each (time = one direction)."""

    def __init__(
        self, n: int, links: set[tuple[int, int]], on_gbps: float = 300.0, off_gbps: float = 20.0
    ) -> None:
        self.n = n
        self.links = links | {(j, i) for i, j in links}
        self.on_gbps, self.off_gbps = on_gbps, off_gbps
        self.enabled: set[tuple[int, int]] = set()
        self.copies: list[tuple[int, int, int, bool, bool]] = []

    def device_count(self) -> int:
        return self.n

    def name(self, device: int) -> str:
        return "FakeGPU"

    def can_access_peer(self, device: int, peer: int) -> bool:
        return (device, peer) in self.links

    def set_peer_access(self, device: int, peer: int, enabled: bool) -> None:
        if enabled:
            assert (device, peer) in self.links, "enabled access where the hardware has none"
            self.enabled.add((device, peer))
        else:
            self.enabled.discard((device, peer))

    def time_copies(
        self, src: int, dst: int, nbytes: int, bidirectional: bool, samples: int, warmup: int
    ) -> tuple[list[float], int]:
        on = (src, dst) in self.enabled and (dst, src) in self.enabled
        self.copies.append((src, dst, nbytes, bidirectional, on))
        gbps = self.on_gbps if on else self.off_gbps
        t = nbytes / (gbps * 1e3)
        return [t * 1.1, t, t * 0.9][:samples], 0


def _matrix(result: PeerResult, name: str) -> list[list[float | None]]:
    (m,) = [m for m in result.matrices if m.name.startswith(name)]
    return m.values


def test_one_gpu_says_it_needs_two() -> None:
    result = peer_benchmark(FakeDevices(1, set()), 1 << 20, [1 << 20], 3, 1)
    assert result.matrices == [] and result.rows == []
    assert result.notes == ["peer matrices need two GPUs; found 1"]


def test_matrices_for_every_ordered_pair_with_access_on_and_off() -> None:
    dev = FakeDevices(3, {(0, 1), (1, 2)})  # 0 <-> 2 has no peer access
    size = 64 << 20
    result = peer_benchmark(dev, size, [1 << 20, 4 << 20], 3, 1)
    uni_on = _matrix(result, "peer copy unidirectional, peer access on")
    uni_off = _matrix(result, "peer copy unidirectional, peer access off")
    ratio = _matrix(result, "peer copy unidirectional, access on / access off")
    bi_on = _matrix(result, "peer copy bidirectional (both directions summed), peer access on")
    for i in range(3):
        assert uni_on[i][i] is None and uni_off[i][i] is None and ratio[i][i] is None
    for i, j in [(0, 1), (1, 0), (1, 2), (2, 1)]:
        assert uni_on[i][j] == pytest.approx(300.0)
        assert uni_off[i][j] == pytest.approx(20.0)
        assert ratio[i][j] == pytest.approx(15.0)
        assert bi_on[i][j] == pytest.approx(600.0)  # both directions counted
    for i, j in [(0, 2), (2, 0)]:
        assert uni_on[i][j] is None and ratio[i][j] is None  # no access: not measured
        assert uni_off[i][j] == pytest.approx(20.0)  # staged copies still work
    assert any("cuda:0 <-> cuda:2: no peer access" in n for n in result.notes)
    # every ordered pair measured once per (direction mode, access state) where possible
    matrix_copies = [c for c in dev.copies if c[2] == size]
    assert len(matrix_copies) == 2 * (4 + 6)
    assert {(c[0], c[1]) for c in matrix_copies if not c[4]} == {
        (i, j) for i in range(3) for j in range(3) if i != j
    }
    # the sweep on 0 -> 1: uni/bi x on/off x 2 sizes, fit-ready rows
    assert len(result.rows) == 8
    assert {r["path"] for r in result.rows} == {
        "peer 0->1 uni access on",
        "peer 0->1 uni access off",
        "peer 0->1 bidir access on",
        "peer 0->1 bidir access off",
    }
    # access is left enabled where the hardware allows it
    assert dev.enabled == {(0, 1), (1, 0), (1, 2), (2, 1)}


def test_no_links_gives_off_matrix_only_and_no_on_sweep() -> None:
    dev = FakeDevices(2, set())
    result = peer_benchmark(dev, 1 << 20, [1 << 20], 3, 0)
    assert _matrix(result, "peer copy unidirectional, peer access on") == [[None, None]] * 2
    assert _matrix(result, "peer copy unidirectional, peer access off")[0][1] == pytest.approx(20)
    assert all("access off" in r["path"] for r in result.rows)


class _FakeRuntime:
    """The four CUDA runtime functions CudaPeerDevices calls; copies really move host bytes
    (the fake devices' memory is host memory), so wrong pointers or sizes show."""

    def __init__(self, enable_error: int = 0) -> None:
        self.enable_error = enable_error
        self.calls: list[tuple[str, tuple[int, ...]]] = []
        self.copies = 0

        def enable(peer: int, flags: int) -> int:
            self.calls.append(("enable", (peer, flags)))
            return self.enable_error

        def disable(peer: int) -> int:
            self.calls.append(("disable", (peer,)))
            return 705  # not enabled: accepted

        def memcpy(dst: int, dst_dev: int, src: int, src_dev: int, n: int, stream: int) -> int:
            ctypes.memmove(dst, src, n)
            self.copies += 1
            return 0

        self.cudaDeviceEnablePeerAccess = enable
        self.cudaDeviceDisablePeerAccess = disable
        self.cudaGetLastError = lambda: 0
        self.cudaMemcpyPeerAsync = memcpy


def test_cuda_peer_devices_plumbing_on_a_fake_runtime() -> None:
    from helpers.fake_cuda import FakeTorch

    from pytimings.bench import peer
    from pytimings.bench.timing import SPIN_RETRIES

    dev = peer.CudaPeerDevices(FakeTorch(2), rotate_bytes=64 << 10)
    rt = _FakeRuntime()
    dev._rt = peer._declare(rt)  # type: ignore[arg-type]
    dev.set_peer_access(0, 1, True)
    dev.set_peer_access(0, 1, False)
    assert rt.calls == [("enable", (1, 0)), ("disable", (1,))]
    times, _ = dev.time_copies(0, 1, 4096, bidirectional=True, samples=2, warmup=1)
    assert len(times) == 2 and all(t >= 0 for t in times)
    # 3 batches, both directions; the fake spin never covers, so each batch is tried
    # 1 + SPIN_RETRIES times (a wrong pointer or size would have crashed memmove)
    assert rt.copies == 3 * (1 + SPIN_RETRIES) * 2 * peer.batch_size(4096)
    rt.enable_error = 2  # cudaErrorMemoryAllocation: not an "already enabled" answer
    with pytest.raises(RuntimeError, match="peer access cuda:1 -> cuda:0: CUDA error 2"):
        dev.set_peer_access(1, 0, True)
