"""nccl-tests' conventions for the recorder's collective wrappers
(:mod:`pytimings.record.distributed`) and the collective benchmark
(:mod:`pytimings.bench.collective`): the one definition is :mod:`pytimings.model.comm`, which
the loaders and the collectives analysis read too."""

from __future__ import annotations

from pytimings.model.comm import COLLECTIVES, algbw_gbps, bus_factor, per_rank_split

__all__ = ["COLLECTIVES", "algbw_gbps", "bus_factor", "per_rank_split"]
