"""The shape every perf model has: one class per op family, naming its formula."""

from __future__ import annotations

from typing import ClassVar, NamedTuple

from pytimings.analysis.ops.calls import OpCall


class Cost(NamedTuple):
    """One call's work: FLOPs, bytes moved (the DRAM model) and the roofline dtype."""

    flops: float
    nbytes: float
    dtype: str | None


class Family:
    """A perf model: the ops it covers, their category and the formula (docs/ops.md)."""

    family: ClassVar[str]
    category: ClassVar[str]
    formula: ClassVar[str]
    names: ClassVar[tuple[str, ...]]

    def cost(self, call: OpCall) -> Cost:
        """The call's cost; raises NoModel when its inputs do not fit the formula."""
        raise NotImplementedError
