"""Plain-Python twin of pytimings._native._host: the contract's innermost activity read
literally, instant by elementary instant; slow, for small property-test inputs only."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

Activity = tuple[int, int, int, str, int]  # start, end, kind, name, thread
Query = tuple[int, int, int, int]  # start, end, thread, id


def innermost(acts: Sequence[Activity], thread: int, a: int, b: int) -> tuple[int, str] | None:
    """(kind, name) of the innermost activity over the elementary [a, b) on ``thread``."""
    cover = [x for x in acts if x[4] == thread and x[0] <= a and b <= x[1] and x[1] > x[0]]
    if not cover:
        return None
    best = min(cover, key=lambda x: (-x[0], x[1], x[2], x[3]))
    return best[2], best[3]


def charges(
    acts: Sequence[Activity], queries: Sequence[Query], untraced_kind: int
) -> dict[tuple[int, int, str], int]:
    """{(query id, kind, name): ns}, instants covered by nothing as (untraced_kind, "")."""
    out: dict[tuple[int, int, str], int] = {}
    for qs, qe, th, qid in queries:
        pts = sorted({qs, qe} | {p for x in acts if x[4] == th for p in x[:2] if qs < p < qe})
        for a, b in itertools.pairwise(pts):
            got = innermost(acts, th, a, b) or (untraced_kind, "")
            key = (qid, *got)
            out[key] = out.get(key, 0) + b - a
    return out
