"""The class of each GPU op (compute, comm, memory): the contract's built-in rules, comm
ranges, and users' rules on top."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Union

import numpy as np
import numpy.typing as npt

from pytimings._native import _intervals as iv
from pytimings.analysis.launches import Launches, link_launches
from pytimings.errors import UsageError
from pytimings.ingest.names import short_kernel_name
from pytimings.model.comm import PATTERNS
from pytimings.model.trace import CopyKind, OpKind, Trace

COMPUTE, COMM, MEMORY = 0, 1, 2
CLASS_NAMES = ("compute", "comm", "memory")

# the contract's comm kernel names (version 3), searched in the name in any case: NCCL/RCCL,
# collective names, custom all-reduce (vLLM/SGLang), NVLink SHARP, NVSHMEM, MSCCL++ and
# the expert-parallel dispatch/combine kernels of DeepEP-style libraries
COMM_KERNEL_NAMES = (
    "nccl",
    "allreduce",
    "all_reduce",
    "allgather",
    "all_gather",
    "reduce_scatter",
    "reducescatter",
    "alltoall",
    "all_to_all",
    "all2all",
    "cross_device_reduce",
    "multimem",
    "nvshmem",
    "mscclpp",
    "deep_ep",
    "dpsk::ep",
    "::internode::",
    "::intranode::",
)
# substring tests of the lowered name: 6x faster than one case-blind alternation regex on
# kernel names (templated, up to 5 KB), which cost ~2 ms of a small trace's attribution
_COMM_LOWER = tuple(w.lower() for w in COMM_KERNEL_NAMES)


def comm_named(name: str) -> bool:
    """Whether the contract's comm kernel names (``COMM_KERNEL_NAMES``) say ``name`` is comm."""
    low = name.lower()
    return any(w in low for w in _COMM_LOWER)


Rule = Union[str, "re.Pattern[str]", Callable[[str], bool]]

# the collective a comm kernel runs, by the words in its name (case, '_' and '-' ignored;
# first match wins; nccl-tests' names): what ``--what-if comm:KIND=F`` names; PtoP copies
# are "p2p_copy". The collectives' words are model.comm's (the loaders' and bandwidth's
# one table); expert-parallel "dispatch"/"combine" go after the all-to-alls
_AFTER_ALL_TO_ALL = [w for w, _ in PATTERNS].index("all2all") + 1
COMM_KINDS = (
    *PATTERNS[:_AFTER_ALL_TO_ALL],
    ("dispatch", "dispatch"),
    ("combine", "combine"),
    *PATTERNS[_AFTER_ALL_TO_ALL:],
)
COMM_KIND_NAMES = (*dict.fromkeys(k for _, k in COMM_KINDS), "p2p_copy", "other")


def comm_kind(name: str) -> str:
    """The collective a comm kernel's name says it runs (``COMM_KINDS``), else "other"."""
    flat = name.lower().replace("_", "").replace("-", "")
    return next((kind for word, kind in COMM_KINDS if word in flat), "other")


def comm_kind_index(trace: Trace) -> npt.NDArray[np.int8]:
    """Per GPU op, its index in ``COMM_KIND_NAMES`` (meaningful for comm-class ops)."""
    lut = np.fromiter(
        (COMM_KIND_NAMES.index(comm_kind(s)) for s in trace.strings),
        dtype=np.int8,
        count=len(trace.strings),
    )
    ops = trace.gpu_ops
    out: npt.NDArray[np.int8] = lut[ops["name"]]
    out[(ops["kind"] == OpKind.MEMCPY) & (ops["copy_kind"] == CopyKind.PTOP)] = (
        COMM_KIND_NAMES.index("p2p_copy")
    )
    return out


def string_mask(strings: Sequence[str], match: Callable[[str], bool]) -> npt.NDArray[np.bool_]:
    return np.fromiter((bool(match(s)) for s in strings), dtype=bool, count=len(strings))


def _rule_matcher(rule: Rule) -> Callable[[str], bool]:
    if callable(rule) and not isinstance(rule, (str, re.Pattern)):
        return rule
    try:
        pat = re.compile(rule) if isinstance(rule, str) else rule
    except re.error as exc:
        raise UsageError(f"rule {rule!r} is not a valid regular expression: {exc}") from None
    return lambda s: pat.search(s) is not None


def _normalise_rules(rules: Mapping[str, Rule | Iterable[Rule]] | None) -> dict[str, list[Rule]]:
    out: dict[str, list[Rule]] = {}
    for label, value in (rules or {}).items():
        if label not in CLASS_NAMES:
            raise UsageError(f"rules: unknown class {label!r}; classes: {', '.join(CLASS_NAMES)}")
        if isinstance(value, (str, re.Pattern)) or callable(value):
            out[label] = [value]
        else:
            out[label] = list(value)
    return out


def _comm_ranges_mask(trace: Trace, launches: Launches) -> npt.NDArray[np.bool_]:
    """Ops launched from inside any range whose category is 'comm' on the launch thread."""
    rg = trace.ranges
    n = len(trace.gpu_ops)
    inside = np.zeros(n, dtype=bool)
    comm_cat = string_mask(trace.strings, lambda s: s.lower() == "comm")
    sel = np.flatnonzero(comm_cat[rg["category"]] & (rg["thread"] >= 0))
    if sel.size == 0:
        return inside
    threads = rg["thread"][sel]
    for t in np.unique(threads):
        rows = sel[threads == t]
        starts = rg["start"][rows]
        order = np.argsort(starts, kind="stable")
        ends = np.maximum(rg["end"][rows], starts)
        us, ue = iv.union(starts[order], ends[order])
        ops = np.flatnonzero(launches.thread == t)
        inside[ops] = iv.points_in_set(launches.start[ops], us, ue).astype(bool)
    return inside


def _unclosed_bracket(glob: str) -> bool:
    """A ``[`` that no ``]`` closes (fnmatch would take it literally: surely a typo)."""
    i = glob.find("[")
    while i >= 0:
        j = i + 1
        j += glob.startswith("!", j)
        j += glob.startswith("]", j)  # a ']' first in the set is a member
        end = glob.find("]", j)
        if end < 0:
            return True
        i = glob.find("[", end + 1)
    return False


def check_comm_glob(glob: object, origin: str) -> str:
    """``glob`` if it is a usable comm-kernel glob, else a UsageError naming ``origin``
    (``--comm-kernel``, a config file's key, ``comm_kernels``)."""
    if not isinstance(glob, str) or not glob.strip():
        raise UsageError(
            f"{origin} {glob!r}: give a non-empty glob of kernel names, e.g. '*dispatch*'"
        )
    if _unclosed_bracket(glob):
        raise UsageError(f"{origin} {glob!r}: '[' without a closing ']'")
    return glob


def comm_kernel_matcher(globs: Sequence[str]) -> Callable[[str], bool]:
    """Users' comm rules: a name matches when one glob matches, in any case, its full
    name or its short form (namespaces and deep template arguments dropped)."""
    pats = [
        re.compile(fnmatch.translate(check_comm_glob(g, "comm_kernels").lower())) for g in globs
    ]

    def hit(name: str) -> bool:
        low = name.lower()
        if any(p.match(low) for p in pats):
            return True
        short = short_kernel_name(name).lower()
        return any(p.match(short) for p in pats)

    return hit


def _any_rule(matchers: Sequence[Callable[[str], bool]]) -> Callable[[str], bool]:
    return lambda s: any(m(s) for m in matchers)


def classify(
    trace: Trace,
    launches: Launches | None = None,
    rules: Mapping[str, Rule | Iterable[Rule]] | None = None,
    comm_kernels: Sequence[str] = (),
) -> npt.NDArray[np.int8]:
    """The class of each GPU op: 0 compute, 1 comm, 2 memory (contract + user rules).

    User rules (a regex searched in the op name, or a callable on the name) override the
    built-in rules; when rules for several classes match, comm wins over memory over
    compute. ``comm_kernels``: globs of kernel names that are comm
    (:func:`comm_kernel_matcher`; ``--comm-kernel``), applied last.
    """
    ops = trace.gpu_ops
    launches = launches if launches is not None else link_launches(trace)
    user = _normalise_rules(rules)
    kind = ops["kind"]
    names = ops["name"]
    is_kernel = kind == OpKind.KERNEL
    cls = np.where(is_kernel, COMPUTE, MEMORY).astype(np.int8)
    comm_name = string_mask(trace.strings, comm_named)
    cls[is_kernel & comm_name[names]] = COMM
    cls[(kind == OpKind.MEMCPY) & (ops["copy_kind"] == CopyKind.PTOP)] = COMM
    cls[_comm_ranges_mask(trace, launches)] = COMM
    for label in ("compute", "memory", "comm"):  # later wins
        if label in user:
            lut = string_mask(trace.strings, _any_rule([_rule_matcher(r) for r in user[label]]))
            cls[lut[names]] = CLASS_NAMES.index(label)
    if len(comm_kernels):
        lut = string_mask(trace.strings, comm_kernel_matcher(comm_kernels))
        cls[is_kernel & lut[names]] = COMM
    return cls
