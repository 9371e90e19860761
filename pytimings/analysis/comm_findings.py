"""The collectives' bandwidth finding on a trace of one rank: collectives that reach a low
busbw while the other ranks of their group are not loaded are most likely waiting for those
ranks to arrive, which one rank's trace cannot tell from transfer (docs/collectives.md).

With the other ranks loaded, :func:`pytimings.analysis.findings.collectives` measures the
wait instead (the contract's "Several ranks"), so this rule stays silent then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pytimings.analysis.finding import Finding, pct, plural
from pytimings.console.text import duration

if TYPE_CHECKING:
    from pytimings.analysis.result import Attribution


def _gbps(v: float) -> str:
    return f"{v:,.2f} GB/s"


def comm_bandwidth(a: Attribution) -> list[Finding]:
    """Per collective with bytes and a group of several ranks, on a trace where no other
    rank of it is loaded: its busbw, and the time its calls take beyond the fastest call of
    the same size and group (a transfer of one size takes one time; the rest is waiting for
    peers, or contention)."""
    if a.collectives is not None:  # several ranks: their waits are measured
        return []
    calls = a.comm_bandwidth.calls
    if len(set(calls["rank"].tolist())) != 1:
        return []
    out = []
    sized = (calls["bytes"] > 0) & (calls["duration_ns"] > 0) & ~np.isnan(calls["busbw_gbps"])
    for coll in sorted(set(calls["collective"][sized & (calls["group_size"] > 1)].tolist())):
        m = sized & (calls["collective"] == coll) & (calls["group_size"] > 1)
        nbytes, dur = calls["bytes"][m], calls["duration_ns"][m]
        group = calls["group_size"][m]
        moved = float((calls["busbw_gbps"][m] * dur).sum())  # bytes times bus factor
        busbw = moved / float(dur.sum())
        # the fastest call of each (bytes, group size): the transfer time of that size
        key = np.stack([nbytes, group.astype(np.int64)])
        _, inv = np.unique(key, axis=1, return_inverse=True)
        inv = inv.reshape(-1)
        fastest = np.full(int(inv.max()) + 1, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(fastest, inv, dur)
        repeated = np.bincount(inv)[inv] > 1
        excess = int((dur - fastest[inv])[repeated].sum())
        total = int(dur.sum())
        peers = sorted({int(g) for g in group.tolist()})
        title = (
            f"{plural(int(m.sum()), f'{coll} call')} ({nbytes.sum() / 1e6:,.1f} MB in "
            f"{duration(total)}) reach busbw {_gbps(busbw)} with one rank of "
            f"{'/'.join(map(str, peers))} loaded"
        )
        if excess > 0:
            title += (
                f"; {duration(excess)} ({pct(excess / total)}) of their time is beyond the fastest "
                "call of the same size: most likely waiting for peers (or contention)"
            )
        title += "; load every rank's trace to split waiting from transfer"
        out.append(
            Finding(
                "parallel",
                title,
                excess,
                {
                    "collective": coll,
                    "calls": int(m.sum()),
                    "bytes": int(nbytes.sum()),
                    "time_ns": total,
                    "busbw_gbps": busbw,
                    "group_sizes": peers,
                    "ranks_loaded": 1,
                    "beyond_fastest_ns": excess,
                    "repeated_size_calls": int(repeated.sum()),
                },
            )
        )
    return out
