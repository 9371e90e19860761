"""What fixing a finding saves: its :class:`~pytimings.analysis.finding.Fix` (gaps' host
time, launch time, GPU ops taking none or a share of their time) replayed with
:mod:`pytimings.analysis.replay`, measured minus replayed length over the windows the replay
includes (docs/replay.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from pytimings._native import _intervals as iv
from pytimings.analysis.finding import Finding, Fix, plural
from pytimings.analysis.replay import (
    CROSS_THREAD_NOTE,
    HostChanges,
    ReplayMemo,
    dependency_graph,
    rendezvous,
    replay_all,
    replay_windows,
    thread_handoffs,
)

if TYPE_CHECKING:
    from pytimings.analysis.result import Attribution

__all__ = ["Savings", "add_savings"]

I64 = npt.NDArray[np.int64]


class Savings:
    """What removing each of several losses from one analysis saves: the dependency graph
    and the unchanged replay are built once, then one replay per fix."""

    def __init__(self, a: Attribution) -> None:
        self.a = a
        self.g = dependency_graph(a.trace, a.launches.api_row)
        self.w = replay_windows(a)
        ops = a.trace.gpu_ops
        self.dur = (ops["end"] - ops["start"]).astype(np.int64)
        # several ranks in one trace are replayed together, meeting at their collectives,
        # so a fix on one rank moves (or is held back by) the ranks it meets, as in what-if
        self.rv = rendezvous(a)
        # each fix's replay reuses what the unchanged one computed from the graph alone
        self.memo: ReplayMemo = {}
        self.base = replay_all(
            self.g, self.w, self.dur, HostChanges(), True, rv=self.rv, memo=self.memo
        )
        # the ops the included windows replay: a loss before other ops (launched from
        # threads other than a window's range) is outside what the replay can shorten
        self.replayed = np.zeros(len(ops), dtype=bool)
        for b in self.base:
            if b.after_ns is not None:
                self.replayed[b.ops] = True
        # only whole-trace windows replay several threads that may hand off to each other
        self.handoffs = thread_handoffs(a.trace) if a.by is None and self.threads > 1 else None

    def covered(self, fix: Fix) -> float:
        """The share of the fix's loss (by time) that lies before or on ops the included
        windows replay."""
        gaps = self.a.gaps
        parts = [
            (
                gaps.op[fix.host_bound],
                gaps.host_bound_end[fix.host_bound] - gaps.g0[fix.host_bound],
            ),
            (gaps.op[fix.launch], gaps.launch_overhead_ns(self.a.launches)[fix.launch]),
            (fix.ops, self.dur[fix.ops]),
            (fix.scaled, self.dur[fix.scaled] - self._scaled(fix)),
        ]
        total = sum(int(t.sum()) for _, t in parts)
        inside = sum(int(t[self.replayed[op]].sum()) for op, t in parts)
        return inside / total if total else 1.0

    def _scaled(self, fix: Fix) -> npt.NDArray[np.int64]:
        """The new durations of the fix's scaled ops (integer ns)."""
        new: npt.NDArray[np.int64] = np.round(self.dur[fix.scaled] * fix.factor).astype(np.int64)
        return new

    def _host(self, fix: Fix) -> HostChanges:
        gaps, la, api = self.a.gaps, self.a.launches, self.a.trace.api_calls
        per: dict[int, list[tuple[int, int]]] = {}
        for rows, launch in ((fix.host_bound, False), (fix.launch, True)):
            if rows.size == 0:
                continue
            op = gaps.op[rows]
            thread = la.thread[op]
            if launch:  # the rest of the launch call (the GPU idles through it)
                call_end = api["end"][np.maximum(la.api_row[op], 0)]
                s, e = gaps.host_bound_end[rows], np.minimum(call_end, gaps.g1[rows])
            else:
                s, e = gaps.g0[rows], gaps.host_bound_end[rows]
            for th, x, y in zip(thread.tolist(), s.tolist(), e.tolist(), strict=True):
                if th >= 0 and y > x:
                    per.setdefault(th, []).append((x, y))
        host = HostChanges(handoffs=self.handoffs)
        g = self.g
        for th, ivs in per.items():
            a, b = np.asarray(ivs, dtype=np.int64).reshape(-1, 2).T
            order = np.argsort(a, kind="stable")
            a, b = iv.union(a[order], b[order])
            # time inside a synchronizing call waits for the GPU: no host-side fix removes
            # it (the replay ends such a call when the op it awaits ends)
            mine = np.flatnonzero(g.s_thread == th)
            mine = mine[np.argsort(g.s_start[mine], kind="stable")]
            a, b = _minus(a, b, *iv.union(g.s_start[mine], g.s_end[mine]))
            host.add(th, [(a, b, 0.0)])
        return host

    @property
    def threads(self) -> int:
        """The most host threads any included window replays together."""
        return max((b.threads for b in self.base if b.after_ns is not None), default=0)

    def saving_ns(self, fix: Fix) -> int | None:
        """Measured minus replayed length, summed over the windows the replay includes
        (None when it includes none)."""
        if all(b.after_ns is None for b in self.base):
            return None
        dur = self.dur.copy()
        dur[fix.scaled] = self._scaled(fix)
        dur[fix.ops] = 0
        lat = self.g.lat
        if fix.launch.size:  # ops submitted the moment their launch call ends
            lat = lat.copy()
            op = self.a.gaps.op[fix.launch]
            lat[op] = np.minimum(lat[op], 0)
        host = self._host(fix)
        total = 0
        new = replay_all(self.g, self.w, dur, host, False, lat, self.rv, self.memo)
        for b, n in zip(self.base, new, strict=True):
            if b.after_ns is None:
                continue
            total += b.after_ns - (b.after_ns if n.after_ns is None else n.after_ns)
        return total


def _minus(a: I64, b: I64, c: I64, d: I64) -> tuple[I64, I64]:
    """The disjoint sorted intervals ``[a, b)`` less the disjoint sorted ``[c, d)``."""
    if c.size == 0 or a.size == 0:
        return a, b
    lo, hi = min(int(a[0]), int(c[0])), max(int(b[-1]), int(d[-1]))
    gaps_s = np.concatenate([[lo], d]).astype(np.int64)
    gaps_e = np.concatenate([c, [hi]]).astype(np.int64)
    keep = gaps_e > gaps_s
    return iv.intersect(a, b, gaps_s[keep], gaps_e[keep])


NO_FIX_NOTE = "no single fix to replay"
OUTSIDE_NOTE = (
    "it is before ops launched from threads other than the windows' ranges, which a "
    "window's replay does not hold (the contract's GPU projection)"
)


def unreplayed_reason(savings: Savings) -> str:
    """Why no window could be replayed: the replay's most common reason, with its count."""
    reasons = Counter(b.excluded for b in savings.base if b.excluded is not None)
    if not reasons:
        return "the analysis has no window to replay"
    reason, n = min(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    total = len(savings.base)
    which = f"all {plural(total, 'window')}" if n == total else f"{n} of {total} windows, e.g."
    return f"no window can be replayed ({which}: {reason})"


def unseen_wait(f: Finding) -> str | None:
    """Where a finding's host time is a wait in a synchronizing call for device work the
    trace does not show: the note that says so (no host-side change is known to help)."""
    sync = f.evidence.get("sync_wait")
    if not sync or sync["gpu_busy_ns"] > 0:
        return None
    return (
        f"no saving offered: the host waits in {sync['name']} for device work the trace "
        "does not show, which no host-side change is known to shorten"
    )


def add_savings(a: Attribution, found: Sequence[Finding]) -> None:
    """Set ``evidence["saving_ns"]`` of each finding: the replayed saving of its fix, or
    None (no single fix, a wait for device work the trace does not show, no window the
    replay includes, or a lower bound of zero: ``saving_note`` says which)."""
    savings: Savings | None = None
    for f in found:
        unseen = unseen_wait(f)
        if f.fix is None or unseen is not None:
            f.evidence["saving_ns"] = None
            f.evidence["saving_note"] = unseen or NO_FIX_NOTE
            continue
        if savings is None:
            savings = Savings(a)
        v = savings.saving_ns(f.fix)
        share = savings.covered(f.fix) if v is not None else 0.0
        f.evidence["saving_ns"] = v if share > 0 else None
        if v is None:
            f.evidence["saving_note"] = unreplayed_reason(savings)
        elif share == 0:
            f.evidence["saving_note"] = "nothing to replay: " + OUTSIDE_NOTE
        elif share < 1:
            f.evidence["saving_note"] = (
                f"a lower bound: {100 * share:.1f}% of this loss lies before ops the windows' "
                "replay holds; for the rest, " + OUTSIDE_NOTE
            )
        elif savings.threads > 1:
            f.evidence["saving_note"] = CROSS_THREAD_NOTE
        if v == 0 and share > 0 and f.evidence.get("saving_note", "").startswith("a lower bound"):
            # a lower bound of nothing says nothing: the saving is unknown (ranked by its
            # loss, the reason shown), not zero
            f.evidence["saving_ns"] = None
            f.evidence["saving_note"] = "the replay shows 0.0 µs, " + f.evidence["saving_note"]
