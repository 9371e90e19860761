"""nccl-tests' conventions, the one definition used by the recorder's collective wrappers
(:mod:`pytimings.record.distributed`) and the collective benchmark
(:mod:`pytimings.bench.collective`).

``size`` is the bytes of the operation's largest buffer: the tensor (all_reduce, broadcast,
reduce, send/recv), the whole gathered output (all_gather, gather), the whole input
(reduce_scatter, scatter) or each rank's whole buffer (all_to_all). ``algbw = size / time``
and ``busbw = algbw * bus_factor(n)`` for a group of ``n`` ranks, as nccl-tests prints them.
"""

from __future__ import annotations

from collections.abc import Callable


def _all_reduce(n: int) -> float:
    return 2.0 * (n - 1) / n if n > 0 else 0.0


def _spread(n: int) -> float:
    return (n - 1) / n if n > 0 else 0.0


def _one(n: int) -> float:
    return 1.0


# collective -> (busbw / algbw factor, size is split into n equal per-rank parts)
_CONVENTIONS: dict[str, tuple[Callable[[int], float], bool]] = {
    "all_reduce": (_all_reduce, False),
    "all_gather": (_spread, True),
    "reduce_scatter": (_spread, True),
    "all_to_all": (_spread, True),
    "gather": (_spread, True),
    "scatter": (_spread, True),
    "broadcast": (_one, False),
    "reduce": (_one, False),
    "sendrecv": (_one, False),  # point to point: send, recv and their batches
}
COLLECTIVES = tuple(_CONVENTIONS)


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests' busbw / algbw ratio of ``collective`` among ``n`` ranks."""
    return _CONVENTIONS[collective][0](n)


def per_rank_split(collective: str) -> bool:
    """Whether ``size`` is split into ``n`` equal parts (nccl-tests' count is per part)."""
    return _CONVENTIONS[collective][1]


def algbw_gbps(size_bytes: int | float, time_us: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes per second): ``size / time``."""
    return size_bytes / (time_us * 1e3) if time_us > 0 else 0.0
