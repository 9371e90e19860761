"""A drain that runs out of memory part-way leaves the recorder intact (issue 30 item 5).

The drain used to recycle a chunk before moving its head past it: after a std::bad_alloc
there, the next save read recycled chunks (64 of 6,000,000 records came back, the loss
uncounted) and the process aborted ("double free or corruption"). The native test hook
``_core._fail_allocation_after(n)`` fails the n-th allocation point of a drain (each chunk
copied out, the batch's reserves, the numpy columns). Each case runs in a fresh process, so
an abort fails the test instead of ending the run."""

from __future__ import annotations

from typing import Any

import pytest

WORKLOAD = """
import json
import pytimings as pt
from pytimings import _core

N = 6000  # 64+128+...+1024 per chunk: a dozen chunks on this thread
rec = pt.Recorder()
for i in range(N):
    with rec.region("r", payload=i):
        pass
_core._fail_allocation_after({n})
errors = 0
try:
    rec.recording()
except MemoryError:
    errors += 1
_core._fail_allocation_after(-1)
for i in range(N, N + 100):  # recording goes on after the failure
    with rec.region("r", payload=i):
        pass
got = rec.recording().records
payloads = sorted(int(p) for p in got["payload"])
print(json.dumps({{"errors": errors, "n": len(payloads), "distinct": len(set(payloads)),
                  "ok": payloads == list(range(N + 100)),
                  "lost": rec.recording().meta.get("lost_out_of_memory")}}))
"""


@pytest.mark.parametrize("n", [0, 1, 4, 8, 9, 10])
def test_a_drain_that_runs_out_of_memory_keeps_every_record(run_script: Any, n: int) -> None:
    """n: which allocation point fails: 0-8 the nine chunks copied (64, 128, 256, 512 and
    five of 1024 records), 9 the batch's reserves, 10 the numpy columns. Every record comes
    back at the next save, exactly once."""
    got = run_script(WORKLOAD.format(n=n))
    assert got == {"errors": 1, "n": 6100, "distinct": 6100, "ok": True, "lost": 0}


def test_past_the_last_allocation_point_nothing_fails(run_script: Any) -> None:
    """The first drain has exactly 11 allocation points: one more and it succeeds (so each
    case above hits a point that exists)."""
    got = run_script(WORKLOAD.format(n=11))
    assert got == {"errors": 0, "n": 6100, "distinct": 6100, "ok": True, "lost": 0}
