"""Place the recordings of several ranks on one timeline, without GPU collectives.

A recording's times are CLOCK_MONOTONIC ns of its host. Each recording also holds its
host's wall-clock offset (``CLOCK_REALTIME - CLOCK_MONOTONIC``) sampled when recording
started (``wall_offset_ns``, with the half-width of its bracket,
``wall_offset_uncertainty_ns``) and, for files from ``pytimings record``, when it was saved
(``wall_offset_end_ns``, ``wall_offset_end_uncertainty_ns``) and the kernel's ``boot_id``.

:func:`align_recordings` puts every rank on the clock of the lowest-ranked recording:

* same ``boot_id`` as the reference: one kernel, one CLOCK_MONOTONIC; shift 0, exactly;
* otherwise: shift = (its offset) - (reference's offset), each offset the mean of its start
  and end samples. Uncertainty = both bracket half-widths + half of each side's change
  between start and end (a wall-clock step during the run). It cannot include how far the
  two hosts' wall clocks disagree (NTP/PTP error), which no file records.

Traces that are not pytimings recordings (or carry no offset) are left as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytimings.model.trace import Trace

TIMED_TABLES = ("gpu_ops", "api_calls", "ranges", "host_ops", "syncs")


@dataclass(frozen=True)
class _Clock:
    offset_sum_ns: int  # start + end offset: twice the mean (kept integral: ~1.8e18 ns)
    uncertainty_ns: float  # bracket half-width + half the start/end change
    boot_id: str | None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _clock(trace: Trace) -> _Clock | None:
    if trace.meta.get("format") != "pytimings":
        return None
    meta = trace.meta.get("recording")
    if not isinstance(meta, dict):
        return None
    start, start_unc = (
        _int(meta.get("wall_offset_ns")),
        _int(meta.get("wall_offset_uncertainty_ns")),
    )
    if start is None or start_unc is None:
        return None
    end, end_unc = (
        _int(meta.get("wall_offset_end_ns")),
        _int(meta.get("wall_offset_end_uncertainty_ns")),
    )
    if end is None or end_unc is None:
        end, end_unc = start, start_unc
    boot = meta.get("boot_id")
    return _Clock(
        offset_sum_ns=start + end,
        uncertainty_ns=max(start_unc, end_unc) + abs(end - start) / 2,
        boot_id=boot if isinstance(boot, str) and boot else None,
    )


def shift_trace(trace: Trace, shift_ns: int) -> None:
    """Add ``shift_ns`` to every start and end of ``trace`` (in place)."""
    for name in TIMED_TABLES:
        t = trace.table(name)
        setattr(trace, name, t.with_columns(start=t["start"] + shift_ns, end=t["end"] + shift_ns))
    trace.mem_events = trace.mem_events.with_columns(time=trace.mem_events["time"] + shift_ns)


def align_recordings(traces: Sequence[Trace]) -> dict[str, Any] | None:
    """Shift the recordings among ``traces`` (ranks already set) onto the clock of the
    lowest-ranked one; returns what was done (``meta["clock_alignment"]`` of the merged
    trace), or None when fewer than two traces are recordings with a wall-clock offset."""
    clocked = [(tr, c) for tr in traces if (c := _clock(tr)) is not None]
    if len(clocked) < 2:
        return None
    ref_trace, ref = min(clocked, key=lambda tc: int(tc[0].meta.get("rank", 0)))
    ranks: list[dict[str, Any]] = []
    worst = 0.0
    for tr, c in clocked:
        if tr is ref_trace:
            shift, unc, method = 0, 0.0, "reference"
        elif c.boot_id is not None and c.boot_id == ref.boot_id:
            shift, unc, method = 0, 0.0, "same host clock (boot_id)"
        else:
            shift = round((c.offset_sum_ns - ref.offset_sum_ns) / 2)
            unc, method = c.uncertainty_ns + ref.uncertainty_ns, "wall-clock offset"
        if shift:
            shift_trace(tr, shift)
        worst = max(worst, unc)
        ranks.append(
            {
                "rank": int(tr.meta.get("rank", 0)),
                "shift_ns": shift,
                "uncertainty_ns": unc,
                "method": method,
            }
        )
    return {
        "reference_rank": int(ref_trace.meta.get("rank", 0)),
        "uncertainty_ns": worst,
        "ranks": ranks,
        "note": "excludes the hosts' wall-clock disagreement (NTP/PTP), which no file records",
    }
