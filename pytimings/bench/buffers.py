"""Rotating buffers: consecutive copies touch different memory, and a slot is reused only after
``rotate_bytes`` of other slots have been touched, more than any cache holds, so no copy reads
data that the previous one left in a cache."""

from __future__ import annotations

from typing import Any

import numpy as np

_ALIGN = 256  # bytes; slots start aligned like cudaMalloc allocations


def batch_size(nbytes: int) -> int:
    """Copies per timed batch: about 256 MiB of traffic, between 2 and 128 copies."""
    return max(2, min(128, (256 << 20) // max(nbytes, 1)))


class Arena:
    """``slots`` buffers of ``nbytes`` carved from one allocation (numpy array or torch uint8
    tensor); ``view(k)`` and ``ptr(k)`` give slot ``k % slots``."""

    def __init__(self, nbytes: int, rotate_bytes: int, alloc: Any) -> None:
        self.nbytes = nbytes
        self.stride = -(-nbytes // _ALIGN) * _ALIGN
        self.slots = max(1, rotate_bytes // self.stride)
        self.buffer, self.base = alloc(self.stride * self.slots)

    def view(self, k: int) -> Any:
        start = (k % self.slots) * self.stride
        return self.buffer[start : start + self.nbytes]

    def ptr(self, k: int) -> int:
        return int(self.base) + (k % self.slots) * self.stride


def host_arena(nbytes: int, rotate_bytes: int) -> Arena:
    def alloc(total: int) -> tuple[Any, int]:
        buf = np.ones(total, dtype=np.uint8)  # written once, so every page is resident
        return buf, buf.ctypes.data

    return Arena(nbytes, rotate_bytes, alloc)


def torch_arena(
    torch: Any, nbytes: int, rotate_bytes: int, device: str, pinned: bool = False
) -> Arena:
    def alloc(total: int) -> tuple[Any, int]:
        buf = torch.ones(total, dtype=torch.uint8, device=device, pin_memory=pinned)
        return buf, buf.data_ptr()

    return Arena(nbytes, rotate_bytes, alloc)
