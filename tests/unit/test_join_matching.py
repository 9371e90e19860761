"""``join``'s start-time matching (serving/join.py ``closest_pairs``) against the
brute-force rule it implements, and its memory on a dense load."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from pytimings.serving.join import closest_pairs


def brute(clients: list[int], starts: list[int], before: int, after: int) -> list[tuple[int, int]]:
    """Every pair within the window, sorted by (distance, client, start), taken greedily."""
    cand = sorted(
        (abs(s - c), ci, si)
        for ci, c in enumerate(clients)
        for si, s in enumerate(starts)
        if c - before <= s <= c + after
    )
    tc: set[int] = set()
    ts: set[int] = set()
    out = []
    for _, ci, si in cand:
        if ci not in tc and si not in ts:
            tc.add(ci)
            ts.add(si)
            out.append((ci, si))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_same_pairs_as_the_brute_force_rule(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_c, n_s = int(rng.integers(0, 30)), int(rng.integers(0, 30))
    span = int(rng.integers(1, 50))  # small spans: many ties and contested starts
    clients = rng.integers(0, span, n_c).tolist()
    starts = sorted(rng.integers(0, span, n_s).tolist())
    before, after = int(rng.integers(0, 5)), int(rng.integers(0, 15))
    got = closest_pairs(clients, starts, before, after)
    assert sorted(got) == sorted(brute(clients, starts, before, after))


def test_memory_follows_the_input_not_the_pairs_in_the_tolerance() -> None:
    """20k requests at 10k req/s, 1 s tolerance: ~200 M pairs lie within it."""
    n = 20_000
    clients = [i * 100_000 for i in range(n)]  # 10k req/s
    starts = [c + 30_000 for c in clients]  # each engine start 30 µs after its send
    tracemalloc.start()
    got = closest_pairs(clients, starts, 0, 1_000_000_000)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert sorted(got) == [(i, i) for i in range(n)]
    assert peak < 40 * 1024 * 1024, peak  # a few hundred bytes a request at most
