"""Host attribution: the compiled innermost-activity sweep against its brute-force twin
(helpers.host_twin), attribute()'s host_bound charges and host windows on hand-built and
random traces (sums, tie rules, event-order independence), and CPU-only traces."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import host_twin
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimings._native import _host
from pytimings.model.trace import ActivityKind

UNTRACED = int(ActivityKind.UNTRACED)
NAMES = ["", "b", "a", "c"]  # string ids 0..3; by text: "" < a < b < c


# ------------------------------------------------------------- the kernel vs its twin


@st.composite
def activities(draw):
    n = draw(st.integers(0, 12))
    rows = []
    for _ in range(n):
        s = draw(st.integers(0, 40))
        rows.append(
            (
                s,
                s + draw(st.integers(0, 25)),
                draw(st.integers(0, 4)),  # cuda_api .. range
                draw(st.integers(1, 3)),  # name id
                draw(st.integers(0, 2)),  # thread
            )
        )
    return rows


@st.composite
def queries(draw):
    n = draw(st.integers(0, 6))
    out = []
    for _ in range(n):
        s = draw(st.integers(-5, 60))
        e = s + draw(st.integers(0, 30))
        out.append((s, e, draw(st.integers(0, 2)), draw(st.integers(0, 3))))
    return out


def _kernel(acts, qs, perm):
    """The kernel on the activities in the row order ``perm``, as the twin's dict."""
    acts = [acts[i] for i in perm]
    col = lambda j, dt: np.array([a[j] for a in acts], dtype=dt)  # noqa: E731
    start, end = col(0, np.int64), col(1, np.int64)
    order = np.argsort(start, kind="stable").astype(np.int64)
    qs = sorted(qs, key=lambda q: (q[2], q[0]))
    qcol = lambda j, dt: np.array([q[j] for q in qs], dtype=dt)  # noqa: E731
    rank = np.array([0, 2, 1, 3], dtype=np.int32)  # the rank of NAMES[i] by text
    rows, label, ns = _host.innermost_charges(
        order, start, end, col(2, np.int8), col(3, np.int32), rank, col(4, np.int32),
        qcol(0, np.int64), qcol(1, np.int64), qcol(2, np.int32), qcol(3, np.int64),
        len(NAMES), UNTRACED,
    )  # fmt: skip
    out: dict[tuple[int, int, str], int] = {}
    for r, lab, v in zip(rows.tolist(), label.tolist(), ns.tolist(), strict=True):
        key = (r, lab // len(NAMES), NAMES[lab % len(NAMES)])
        assert key not in out and v > 0
        out[key] = v
    return out


@settings(max_examples=300, deadline=None)
@given(activities(), queries(), st.randoms(use_true_random=False))
def test_kernel_matches_brute_force_in_any_row_order(acts, qs, rnd):
    want = host_twin.charges([(s, e, k, NAMES[n], t) for s, e, k, n, t in acts], qs, UNTRACED)
    perm = list(range(len(acts)))
    assert _kernel(acts, qs, perm) == want
    rnd.shuffle(perm)
    assert _kernel(acts, qs, perm) == want
    for qid in {q[3] for q in qs}:  # each query id's charges sum to its queries' length
        total = sum(max(0, e - s) for s, e, _, i in qs if i == qid)
        assert sum(v for (i, _, _), v in want.items() if i == qid) == total


def test_kernel_tie_rules():
    """Same start: the earlier end is innermost; same extent: the lower kind, then the
    name's text (not its id)."""
    acts = [
        (0, 10, ActivityKind.RANGE, 1, 0),  # range "b" [0, 10)
        (0, 6, ActivityKind.RANGE, 1, 0),  # range "b" [0, 6): same start, ends first
        (2, 4, ActivityKind.PYTHON, 1, 0),  # python "b" [2, 4) ...
        (2, 4, ActivityKind.CPU_OP, 3, 0),  # ... and cpu_op "c": cpu_op wins
        (7, 9, ActivityKind.CPU_OP, 1, 0),  # cpu_op "b" [7, 9) ...
        (7, 9, ActivityKind.CPU_OP, 2, 0),  # ... and cpu_op "a": "a" wins by text
    ]
    got = _kernel(acts, [(0, 12, 0, 0)], range(len(acts)))
    assert got == {
        (0, ActivityKind.RANGE, "b"): 2 + 2 + 1 + 1,  # [0,2) [4,6) [6,7) [9,10)
        (0, ActivityKind.CPU_OP, "c"): 2,
        (0, ActivityKind.CPU_OP, "a"): 2,
        (0, UNTRACED, ""): 2,
    }


def test_kernel_rejects_unsorted_input():
    z = np.zeros(2, dtype=np.int64)
    with pytest.raises(ValueError, match="not sorted by start"):
        _host.innermost_charges(
            np.array([1, 0], dtype=np.int64), np.array([0, 5], dtype=np.int64), z + 9,
            np.zeros(2, np.int8), np.zeros(2, np.int32), np.zeros(1, np.int32),
            np.zeros(2, np.int32), z[:0], z[:0], np.zeros(0, np.int32), z[:0], 1, UNTRACED,
        )  # fmt: skip
