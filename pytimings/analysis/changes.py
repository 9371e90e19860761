"""``--what-if`` changes: their forms, and what each names in a trace (docs/replay.md).

The one reading of a spec and the one set of errors for it: the CLI checks the names
against the loaded trace before any analysis (:mod:`.name_checks`), the replay applies the
changes (:mod:`.replay`), and both match a change's name and refuse a name that matches
nothing here, with the same one-line error and the trace's closest names.

Forms: ``NAME=F`` (host activities named NAME and everything nested in them),
``self:NAME=F`` (their self time), ``kernel:GLOB=F`` (GPU ops by name or short name),
``comm:GLOB=F`` (the transfer part of communication ops, by name or collective kind).
A name with a colon of its own (Kineto's ``nccl:all_reduce``) is a NAME.
"""

from __future__ import annotations

import difflib
import fnmatch
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.analysis.classes import COMM_KIND_NAMES, comm_kind_index, comm_named, string_mask
from pytimings.analysis.ops.registry import category_of_kernel
from pytimings.errors import UsageError
from pytimings.ingest.names import short_kernel_name
from pytimings.model.trace import Trace

__all__ = [
    "PREFIXES",
    "Change",
    "comm_hits",
    "host_hits",
    "kernel_hits",
    "matching_ids",
    "parse_changes",
]

PREFIXES = {"self:": "self", "kernel:": "kernel", "comm:": "comm"}
OTHER_FORMS = "other forms: self:NAME, kernel:GLOB, comm:GLOB"
Mask = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Change:
    """One what-if change, ``factor`` applied to: ``inclusive`` host activities named
    ``pattern`` (their whole extent on their thread, what is nested in them included),
    ``self`` their self time only, ``kernel`` the durations of matching GPU ops, ``comm``
    the transfer part of matching communication ops (not their wait for peers).
    ``typed``: the item as the spec gave it (what errors quote), when parsed from one."""

    kind: str  # "inclusive" or one of PREFIXES' values
    pattern: str
    factor: float
    typed: str = field(default="", compare=False, repr=False)

    @property
    def text(self) -> str:
        prefix = "" if self.kind == "inclusive" else f"{self.kind}:"
        return f"{prefix}{self.pattern}={self.factor:g}"

    @property
    def on_host(self) -> bool:
        return self.kind in ("inclusive", "self")

    @property
    def said(self) -> str:
        """``--what-if 'ITEM'``, the start of every error about this change."""
        return f"--what-if {self.typed or self.text!r}"

    def doc(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "pattern": self.pattern,
            "factor": self.factor,
            "inclusive": self.kind == "inclusive",
        }


def parse_changes(spec: str) -> list[Change]:
    """``FORM=F[,...]`` (the forms above), F a finite number >= 0 (0 removes)."""
    out = []
    for item in (s.strip() for s in spec.split(",")):
        name, eq, value = item.rpartition("=")
        if not item or not eq or not name:
            raise UsageError(f"--what-if {item!r}: expected NAME=FACTOR (e.g. scheduler=0)")
        try:
            factor = float(value)
        except ValueError:
            raise UsageError(f"--what-if {item!r}: {value!r} is not a number") from None
        if not math.isfinite(factor) or factor < 0:
            raise UsageError(f"--what-if {item!r}: the factor must be a finite number >= 0")
        kind = "inclusive"
        for prefix, k in PREFIXES.items():
            if name.startswith(prefix):
                kind, name = k, name.removeprefix(prefix)
                break
        if not name:
            raise UsageError(f"--what-if {item!r}: nothing named after {kind}:")
        out.append(Change(kind, name, factor, item))
    return out


def matching_ids(strings: Sequence[str], pattern: str, short: bool) -> Mask:
    """Per string id, whether the string is ``pattern`` or matches it as a glob (``short``:
    or its short kernel name does)."""

    def hit(s: str) -> bool:
        if s == pattern or fnmatch.fnmatchcase(s, pattern):
            return True
        return short and fnmatch.fnmatchcase(short_kernel_name(s), pattern)

    return string_mask(strings, hit)


def _close(pattern: str, names: Sequence[str], what: str) -> str:
    """``; closest NAMES: a, b, c`` (difflib), or that the trace has none."""
    close = difflib.get_close_matches(pattern, sorted(set(names)), n=5, cutoff=0.0)
    return f"; closest {what} names: {', '.join(close)}" if close else f"; the trace has no {what}"


def _gpu_hint(trace: Trace, pattern: str) -> str:
    """Close GPU op names for a glob that matched none: the ops of the category the glob
    names first (``gemm*`` on a trace whose GEMMs are ``nvjet_*``), then difflib's."""
    used = np.unique(trace.gpu_ops["name"])
    shorts = sorted({short_kernel_name(trace.strings[int(i)]) for i in used})
    word = pattern.strip("*?[]").lower()
    same = [s for s in shorts if category_of_kernel(s) == word][:5]
    if same:
        return f"; the trace's {word} ops are named: {', '.join(same)}"
    return _close(pattern, shorts, "GPU op")


def host_hits(
    trace: Trace, ch: Change, names: npt.NDArray[np.int64], threads: npt.NDArray[np.int64]
) -> Mask:
    """Per host activity (its string ids ``names`` and ``threads``, -1 off any thread), whether
    ``ch`` names it; a UsageError when it names none."""
    on_host = threads >= 0
    hit: Mask = matching_ids(trace.strings, ch.pattern, short=False)[names] & on_host
    if not hit.any():
        have = [trace.strings[int(i)] for i in np.unique(names[on_host])]
        raise UsageError(
            f"{ch.said}: no range or host activity is named {ch.pattern!r}"
            f"{_close(ch.pattern, have, 'host activity')} ({OTHER_FORMS})"
        )
    return hit


def kernel_hits(trace: Trace, ch: Change) -> Mask:
    """Per GPU op, whether its name or short name matches ``ch``'s glob; a UsageError when
    none does."""
    hit: Mask = matching_ids(trace.strings, ch.pattern, short=True)[trace.gpu_ops["name"]]
    if not hit.any():
        raise UsageError(
            f"{ch.said}: no GPU op is named {ch.pattern!r}{_gpu_hint(trace, ch.pattern)}"
        )
    return hit


def _kinds(kind: npt.NDArray[np.int8], among: Mask) -> list[str]:
    return sorted({COMM_KIND_NAMES[i] for i in np.unique(kind[among])})


def comm_hits(trace: Trace, ch: Change, comm: Mask | None) -> Mask:
    """Per GPU op, whether ``ch``'s glob matches its name, short name or collective kind,
    among the communication ops ``comm`` (None before the ops are classified: every GPU op
    that may be one). A UsageError when no GPU op matches, or none that is comm."""
    kind = comm_kind_index(trace)
    of_kind = np.asarray(
        [fnmatch.fnmatchcase(k, ch.pattern.lower()) for k in COMM_KIND_NAMES], dtype=bool
    )
    named = matching_ids(trace.strings, ch.pattern, short=True)[trace.gpu_ops["name"]]
    hit: Mask = named | of_kind[kind]
    if not hit.any():
        # the kinds of the ops the contract's names say are comm (the classes are not
        # known yet: comm ranges and users' rules add ops, of kind "other" mostly)
        said = _kinds(kind, string_mask(trace.strings, comm_named)[trace.gpu_ops["name"]])
        raise UsageError(
            f"{ch.said}: no GPU op is named {ch.pattern!r} and no communication op is of "
            f"kind {ch.pattern!r} ("
            + (f"kinds here: {', '.join(said)}" if said else "the trace has no comm kernel names")
            + ")"
            + _gpu_hint(trace, ch.pattern)
        )
    if comm is None:
        return hit
    hit &= comm
    if not hit.any():
        present = _kinds(kind, comm)
        raise UsageError(
            f"{ch.said}: no communication op is named or of kind {ch.pattern!r} ("
            + (f"kinds here: {', '.join(present)}" if present else "the trace has none")
            + "); the GPU ops it names are not communication ops"
        )
    return hit
