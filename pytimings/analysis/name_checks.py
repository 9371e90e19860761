"""Names and numbers an option gives, checked against a loaded trace before any analysis
runs (``--what-if``'s names and factors, ``--window N``): a mistake is one line naming the
option as typed, with the closest names the trace has, instead of a whole report printed
first and the error after it.

The what-if check reads the spec as the replay does and matches its names with the replay's
own functions (:mod:`.changes`): one reading of the forms, one error text for each mistake.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pytimings.analysis.attribution import selected
from pytimings.analysis.changes import Change, parse_changes
from pytimings.analysis.replay import check_factors
from pytimings.analysis.windows import range_rows
from pytimings.errors import UsageError
from pytimings.model.trace import Trace

__all__ = [
    "check_repeats",
    "check_trace_options",
    "check_what_if",
    "check_window",
    "window_count",
]


def check_repeats(spec: str) -> list[Change]:
    """The changes of ``spec`` (:func:`.changes.parse_changes`), refusing a second change to
    one name (``x=0,x=2``: which one holds?); GPU ops and host activities of one name are
    different things. The replay itself multiplies such factors (the Python API's
    ``what_if``); the CLI asks which one was meant."""
    changes = parse_changes(spec)
    seen: dict[tuple[bool, str], str] = {}
    for ch in changes:
        key = (not ch.on_host, ch.pattern)
        if key in seen:
            raise UsageError(
                f"--what-if {spec!r}: {ch.pattern!r} is changed twice ({seen[key]!r} and "
                f"{ch.typed!r}); give each name one factor"
            )
        seen[key] = ch.typed
    return changes


def check_what_if(trace: Trace, spec: str) -> None:
    """Refuse (UsageError, ``--what-if`` as typed) what :func:`.changes.parse_changes`
    refuses, a change whose name matches nothing in ``trace`` (the replay's own errors,
    :mod:`.changes`; a ``comm:`` glob against every GPU op that may be comm, the ops not
    classified yet), and a factor that would lengthen the trace's times past int64
    nanoseconds (:func:`.replay.check_factors`, which the replay itself applies too)."""
    check_factors(trace, parse_changes(spec))


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


def check_trace_options(
    trace: Trace,
    *,
    by: str | None = None,
    ranks: Sequence[int] | None = None,
    devices: Sequence[int] | None = None,
    what_if: str | None = None,
    window: int | None = None,
    html: bool = False,
) -> None:
    """Everything a command's options ask of a loaded ``trace``, checked before any analysis
    runs or anything is printed: ``--rank``/``--device`` (ranks and devices it has),
    ``--by`` (its ranges), ``--what-if`` (:func:`check_what_if`), ``--window N``
    (:func:`check_window`) and ``--html`` (windows to draw: a host-only capture has none)."""
    selected(trace, ranks, devices)
    if what_if:
        check_what_if(trace, what_if)
    if window is not None:
        check_window(trace, window, by, ranks, devices)
    if html and window_count(trace, by, ranks, devices) == 0:
        raise UsageError(
            "--html draws the GPU windows, and this trace has none on the selected ranks "
            "and devices (a host-only capture: its text report has the host view)"
        )
