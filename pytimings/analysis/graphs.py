"""Graph replays per (rank, device): which GPU ops a CUDA/HIP graph launch ran, and how many
launches and launch calls there were (``analyze --json`` key ``graphs``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.analysis.launches import Launches
from pytimings.model.trace import Trace

I64 = npt.NDArray[np.int64]


def graph_use(
    trace: Trace, launches: Launches, pairs: Iterable[tuple[int, int]]
) -> list[dict[str, Any]]:
    """Per (rank, device) in ``pairs`` whose ops include graph-replayed ones: ``launches``
    (distinct graph launches that ran ops there: launch calls, or for ops whose call is
    not in the trace, distinct correlation ids), ``ops`` (the ops they ran) and
    ``launch_calls`` (graph-launch call name -> calls)."""
    ops, api = trace.gpu_ops, trace.api_calls
    in_graph = launches.graph
    out = []
    for r, d in sorted(set(pairs)):
        rows = np.flatnonzero(in_graph & (ops["rank"] == r) & (ops["device"] == d))
        if rows.size == 0:
            continue
        call = launches.api_row[rows]
        calls = np.unique(call[call >= 0])
        no_call = rows[call < 0]
        keys = np.unique(np.stack([ops["pid"][no_call], ops["correlation"][no_call]]), axis=1)
        names = Counter(trace.strings[int(i)] for i in api["name"][calls])
        out.append(
            {
                "rank": r,
                "device": d,
                "launches": int(calls.size + keys.shape[1]),
                "ops": int(rows.size),
                "launch_calls": dict(sorted(names.items())),
            }
        )
    return out
