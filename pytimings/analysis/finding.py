"""One finding (a loss, its layer, a title with the key numbers, the evidence behind it) and
the number formats findings and reports share. A leaf: imports nothing of pytimings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
# the GPUs busy at least this share of a time: the GPU is what limits it. Then at most 5% of
# it is idle, so no host-side change can shorten it by more than 5% (a 1.05x speedup),
# while shortening the GPU work shortens it almost one for one. Used for the GPU-bound
# finding (the windows), for a host activity that launches nothing meanwhile (it waits) and
# for the kernel layer's categories (the GPU's busy time is the time)
GPU_BOUND_SHARE = 0.95


@dataclass
class Fix:
    """What removing a finding's loss changes, for the replay that measures its saving
    (:mod:`pytimings.analysis.replay`): rows of ``Attribution.gaps`` whose host_bound part
    (``host_bound``) or launch_overhead part (``launch``: the rest of the launch call and
    the op's submission delay) takes no time, GPU ops (``ops``) that take none, and GPU ops
    (``scaled``) that take ``factor`` (one per op, in [0, 1]) of their time."""

    host_bound: I64 = field(default_factory=lambda: np.empty(0, np.int64))
    launch: I64 = field(default_factory=lambda: np.empty(0, np.int64))
    ops: I64 = field(default_factory=lambda: np.empty(0, np.int64))
    scaled: I64 = field(default_factory=lambda: np.empty(0, np.int64))
    factor: npt.NDArray[np.float64] = field(default_factory=lambda: np.empty(0, np.float64))


@dataclass
class Finding:
    layer: str  # capture, hardware, kernel, memory, scheduling, parallel, application, host
    title: str  # one line with the key numbers
    loss_ns: int  # time this loss accounts for
    evidence: dict[str, Any] = field(default_factory=dict)  # saving_ns: the replayed saving
    fix: Fix | None = field(default=None, repr=False, compare=False)  # None: no single fix

    @property
    def saving_ns(self) -> int | None:
        v = self.evidence.get("saving_ns")
        return None if v is None else int(v)

    def to_dict(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "title": self.title,
            "loss_ns": self.loss_ns,
            "evidence": self.evidence,
        }


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def scope(by: str | None) -> str:
    """What a share is of: ``decode_step time`` with ``--by decode_step``, else trace time."""
    return f"{by} time" if by else "trace time"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``n`` and ``word``, plural unless ``n`` is 1: '1 gap', '5 gaps', '2 copies'
    (``many``: the plural when it is not ``word`` + 's')."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def agree(n: int, one: str, many: str) -> str:
    """The verb form for a count: ``one`` when ``n`` is 1 ('1 memcpy uses', '2 memcpys use')."""
    return one if n == 1 else many


def runs_text(values: Sequence[int], first: int = 0) -> str:
    """Integers as compact runs, shifted so that 0 reads as ``first``: '3-16' or '1, 4-6'
    (window indices are shown 1-based, ranks as they are)."""
    out: list[str] = []
    idx = sorted(set(values))
    i = 0
    while i < len(idx):
        j = i
        while j + 1 < len(idx) and idx[j + 1] == idx[j] + 1:
            j += 1
        lo, hi = idx[i] + first, idx[j] + first
        out.append(f"{lo}" if i == j else f"{lo}-{hi}")
        i = j + 1
    return ", ".join(out)
