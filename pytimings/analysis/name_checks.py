"""Names and numbers an option gives, checked against a loaded trace before any analysis
runs (``--what-if``'s names and factors, ``--window N``): a mistake is one line naming the
option as typed, with the closest names the trace has, instead of a whole report printed
first and the error after it.

The what-if check reads the spec's text itself (the names behind its prefixes), so it holds
whatever a change then does: ``kernel:GLOB`` and ``comm:GLOB`` name GPU ops, ``NAME`` and
``self:NAME`` host activities (ranges, API calls, cpu ops, OS calls).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

import numpy as np

from pytimings.analysis.attribution import selected
from pytimings.analysis.ops.registry import category_of_kernel
from pytimings.analysis.replay import _matching_ids, host_activities
from pytimings.analysis.windows import range_rows
from pytimings.errors import UsageError
from pytimings.ingest.names import short_kernel_name
from pytimings.model.trace import Trace

__all__ = ["check_repeats", "check_what_if", "check_window", "window_count"]

INT64_MAX = int(np.iinfo(np.int64).max)
GPU_PREFIXES = ("kernel:", "comm:")  # changes to GPU ops (comm: the collectives' kernels)
HOST_PREFIXES = ("self:",)  # changes to host activities, besides the bare NAME


def _items(spec: str) -> list[tuple[str, str, str, float | None]]:
    """Each change of ``spec`` as (its text, prefix, name, factor); a malformed item (the
    parser's to refuse) has factor None."""
    out = []
    for item in (s.strip() for s in spec.split(",")):
        target, _, value = item.rpartition("=")
        prefix = next((p for p in (*GPU_PREFIXES, *HOST_PREFIXES) if target.startswith(p)), "")
        try:
            factor: float | None = float(value)
        except ValueError:
            factor = None
        out.append((item, prefix, target.removeprefix(prefix), factor))
    return out


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


def check_repeats(spec: str) -> None:
    """Refuse a second change to one name in one spec (``x=0,x=2``: which one holds?);
    GPU ops and host activities of one name are different things."""
    seen: dict[tuple[bool, str], str] = {}
    for text, prefix, name, factor in _items(spec):
        key = (prefix in GPU_PREFIXES, name)
        if factor is not None and key in seen:
            raise UsageError(
                f"--what-if {spec!r}: {name!r} is changed twice ({seen[key]!r} and {text!r}); "
                "give each name one factor"
            )
        seen[key] = text


def check_what_if(trace: Trace, spec: str) -> None:
    """Refuse (UsageError, ``--what-if`` as typed) a change whose name matches nothing in
    ``trace``, a second change to one name (:func:`check_repeats`), and a factor that would
    lengthen the trace's times past int64 nanoseconds (the durations it scales, summed,
    times the factor)."""
    check_repeats(spec)
    ops = trace.gpu_ops
    h_start, h_end, h_name, h_thread = host_activities(trace)
    on_host = h_thread >= 0
    growth = 0.0  # the most the changes can lengthen anything, in ns
    latest = max(
        [int(c.max()) for c in (ops["end"], h_end) if c.size] or [0]
    )  # the latest time the trace holds
    for text, prefix, name, factor in _items(spec):
        if factor is None or not name:
            continue  # malformed: parse_changes says how
        if prefix in GPU_PREFIXES:
            hit = _matching_ids(trace.strings, name, short=True)[ops["name"]]
            if not hit.any():
                raise UsageError(
                    f"--what-if {text!r}: no GPU op is named {name!r}{_gpu_hint(trace, name)}"
                )
            scaled = int(np.sum(ops["end"][hit] - ops["start"][hit], dtype=np.float64))
        else:
            hit = _matching_ids(trace.strings, name, short=False)[h_name] & on_host
            if not hit.any():
                names = [trace.strings[int(i)] for i in np.unique(h_name[on_host])]
                raise UsageError(
                    f"--what-if {text!r}: no range or host activity is named {name!r}"
                    + _close(name, names, "host activity")
                )
            scaled = int(np.sum(np.maximum(h_end[hit] - h_start[hit], 0), dtype=np.float64))
        if factor > 1 and scaled:
            growth += (factor - 1) * scaled
            if latest + growth >= INT64_MAX:
                limit = (INT64_MAX - latest) / scaled + 1
                raise UsageError(
                    f"--what-if {text!r}: the factor stretches {scaled / 1e6:.3f} ms of "
                    f"matching time past what int64 nanoseconds hold (the trace ends at "
                    f"{latest} ns); give a factor below {limit:.3g}"
                )


def window_count(
    trace: Trace, by: str | None, ranks: Sequence[int] | None, devices: Sequence[int] | None
) -> int:
    """How many windows the analysis ``attribute(trace, by, devices, ranks)`` would replay
    (what ``--window N`` counts): one per rank with a reported device, or per ``--by``
    range instance on those ranks."""
    rank_sel, dev_sel = selected(trace, ranks, devices)
    ops = trace.gpu_ops
    have = [int(r) for r in rank_sel if np.isin(ops["device"][ops["rank"] == r], dev_sel).any()]
    if by is None:
        return len(have)
    return int(range_rows(trace, by, have).size)


def check_window(
    trace: Trace,
    window: int,
    by: str | None,
    ranks: Sequence[int] | None,
    devices: Sequence[int] | None,
) -> None:
    """Refuse ``--window N`` beyond the windows the analysis will have."""
    n = window_count(trace, by, ranks, devices)
    if not 1 <= window <= n:
        have = f"windows 1-{n}" if n else "no windows"
        raise UsageError(f"--window {window}: the analysis has {have}")
