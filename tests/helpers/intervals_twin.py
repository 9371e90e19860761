"""Plain-Python twins of the Cython kernels in pytimings._native._intervals.

Written the obvious way, from elementary segments between all boundaries, so that they
share no logic with the kernels; slow, for small property-test inputs only.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

NO_LAUNCH = int(np.iinfo(np.int64).min)
PICKUP = 50_000  # launch_overhead ends 50 µs after the launch call returns
Ivs = list[tuple[int, int]]


def _pairs(s: Sequence[int], e: Sequence[int]) -> Ivs:
    return [(int(a), int(b)) for a, b in zip(s, e, strict=False) if b > a]


def _covers(iv: Ivs, a: int, b: int) -> bool:
    return any(s <= a and b <= e for s, e in iv)


def _merge(segs: list[tuple[int, int]]) -> Ivs:
    out: Ivs = []
    for a, b in segs:
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _elementary(*sets: Ivs) -> list[tuple[int, int]]:
    pts = sorted({p for iv in sets for seg in iv for p in seg})
    return list(itertools.pairwise(pts))


def _arrays(iv: Ivs) -> tuple[np.ndarray, np.ndarray]:
    return (
        np.array([a for a, _ in iv], dtype=np.int64),
        np.array([b for _, b in iv], dtype=np.int64),
    )


def union(starts, ends):
    iv = _pairs(starts, ends)
    return _arrays(_merge([(a, b) for a, b in _elementary(iv) if _covers(iv, a, b)]))


def intersect(a_s, a_e, b_s, b_e):
    a, b = _pairs(a_s, a_e), _pairs(b_s, b_e)
    return _arrays(
        _merge([(x, y) for x, y in _elementary(a, b) if _covers(a, x, y) and _covers(b, x, y)])
    )


def overlap_lengths(q_s, q_e, u_s, u_e):
    u = _pairs(u_s, u_e)
    return np.array(
        [
            sum(max(0, min(int(b), e) - max(int(a), s)) for s, e in u)
            for a, b in zip(q_s, q_e, strict=False)
        ],
        dtype=np.int64,
    )


def points_in_set(points, u_s, u_e):
    u = _pairs(u_s, u_e)
    return np.array([any(s <= p < e for s, e in u) for p in points], dtype=np.uint8)


def project(points, starts, ends, r_s, r_e):
    out = ([], [], [], [])
    for a, b in zip(r_s, r_e, strict=False):
        inside = [
            (int(s), int(e)) for p, s, e in zip(points, starts, ends, strict=False) if a <= p < b
        ]
        out[0].append(len(inside))
        out[1].append(min((s for s, _ in inside), default=0))
        out[2].append(max((e for _, e in inside), default=0))
        out[3].append(sum(e - s for s, e in inside))
    return tuple(np.array(x, dtype=np.int64) for x in out)


def union_by_class(order, starts, ends, cls):
    out = []
    for k in (0, 1, 2):
        rows = [r for r in order if cls[r] == k]
        out.extend(union([starts[r] for r in rows], [ends[r] for r in rows]))
    return tuple(out)


def first_per_start(order, starts, lstart, corr):
    best: dict[int, tuple[int, int, int, int]] = {}
    for i, r in enumerate(order):
        key = (int(lstart[r]) if lstart[r] != NO_LAUNCH else 2**63, int(corr[r]), i, int(r))
        s = int(starts[r])
        if s not in best or key < best[s]:
            best[s] = key
    return np.array([best[s][3] for s in sorted(best)], dtype=np.int64)


def _label(c: bool, m: bool, x: bool) -> int:
    if c:
        return 1 if m else 0
    if m:
        return 2
    return 3 if x else -1


def sweep(c_s, c_e, m_s, m_e, x_s, x_e):
    C, M, X = _pairs(c_s, c_e), _pairs(m_s, m_e), _pairs(x_s, x_e)
    segs: list[tuple[int, int, int]] = []
    for a, b in _elementary(C, M, X):
        lab = _label(_covers(C, a, b), _covers(M, a, b), _covers(X, a, b))
        if lab < 0:
            continue
        if segs and segs[-1][2] == lab and segs[-1][1] == a:
            segs[-1] = (segs[-1][0], b, lab)
        else:
            segs.append((a, b, lab))
    return (
        np.array([s[0] for s in segs], dtype=np.int64),
        np.array([s[1] for s in segs], dtype=np.int64),
        np.array([s[2] for s in segs], dtype=np.int8),
    )


def _split(g0: int, g1: int, call: tuple[int, int] | None) -> list[int]:
    """[host_bound, launch_overhead, device_wait, idle_other] of one gap (the contract),
    given the (start, end) of the launch call of the op that ends it."""
    if call is None:
        return [0, 0, 0, g1 - g0]
    ls, le = call
    if ls <= g0:
        return [0, 0, g1 - g0, 0]
    a = min(g1, ls)
    b = max(a, min(g1, le + PICKUP))
    return [a - g0, b - a, g1 - b, 0]


def partition_windows(w_s, w_e, s_s, s_e, s_l, k_op, starts, lstart, lend):
    """The partition, and the gaps with a host_bound part (window, g0, g1, hb end, op)."""
    out = np.zeros((len(w_s), 8), dtype=np.int64)
    gaps_out: list[tuple[int, int, int, int, int]] = []
    segs = list(zip(map(int, s_s), map(int, s_e), map(int, s_l), strict=False))
    for w, (ws, we) in enumerate(zip(map(int, w_s), map(int, w_e), strict=False)):
        pts = sorted({ws, we} | {p for a, b, _ in segs for p in (a, b) if ws < p < we})
        labels = []
        for a, b in itertools.pairwise(pts):
            lab = next((lab for s, e, lab in segs if s <= a and b <= e), -1)
            labels.append((a, b, lab))
        for a, b, lab in labels:
            if lab >= 0:
                out[w, lab] += b - a
        for g0, g1 in _merge([(a, b) for a, b, lab in labels if lab < 0]):
            k = next((int(r) for r in k_op if starts[r] >= g1), None)
            known = k is not None and lstart[k] != NO_LAUNCH
            split = _split(g0, g1, (int(lstart[k]), int(lend[k])) if known else None)
            out[w, 4:] += split
            if split[0]:
                gaps_out.append((w, g0, g1, g0 + split[0], k))
    cols = list(zip(*gaps_out, strict=False)) if gaps_out else [()] * 5
    return out, tuple(np.array(c, dtype=np.int64) for c in cols)


def reference_partition(ops, ws: int, we: int) -> list[int]:
    """The contract read literally, from raw ops (start, end, cls, (launch start, launch
    end) | None, corr) of one device: label every elementary instant of [ws, we), then
    split each idle gap."""
    ops = [o for o in ops if o[1] > o[0]]
    sets = [[(o[0], o[1]) for o in ops if o[2] == c] for c in (0, 1, 2)]
    pts = sorted({ws, we} | {p for o in ops for p in o[:2] if ws < p < we})
    out = [0] * 8
    idle: list[tuple[int, int]] = []
    for a, b in itertools.pairwise(pts):
        lab = _label(*(_covers(s, a, b) for s in sets))
        if lab < 0:
            idle.append((a, b))
        else:
            out[lab] += b - a
    for g0, g1 in _merge(idle):
        cands = [o for o in ops if o[0] >= g1]
        if not cands:
            split = _split(g0, g1, None)
        else:
            first = min(o[0] for o in cands)
            k = min(
                (o for o in cands if o[0] == first),
                key=lambda o: (o[3][0] if o[3] is not None else 2**63, o[4]),
            )
            split = _split(g0, g1, k[3])
        for i, v in enumerate(split):
            out[4 + i] += v
    return out
