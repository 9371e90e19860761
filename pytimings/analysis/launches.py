"""Each GPU op's launch call: the link every label after a gap, the launch latency and the
projection of ranges onto GPU work rest on."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from pytimings._native import _intervals as iv
from pytimings._native import _optable
from pytimings.ingest.links import launch_index, unlinked
from pytimings.ingest.names import is_graph_launch
from pytimings.model.trace import Trace

NO_LAUNCH = iv.NO_LAUNCH_NS  # the launch start of an op whose launch call is unknown
I64 = npt.NDArray[np.int64]


@dataclass
class Launches:
    """For each GPU op: the row of its launch call in ``api_calls`` (-1 when unknown), that
    call's start (``NO_LAUNCH`` when unknown) and end, whether a graph ran it
    (:func:`graph_ops`); ``thread`` is derived on first use; ``unlinked`` counts the ops
    whose correlation id no launch call carries."""

    api_row: I64
    start: I64
    end: I64  # the launch call's end (meaningful where ``start`` is known)
    api_thread: npt.NDArray[np.int32]  # api_calls["thread"], to derive ``thread``
    graph: npt.NDArray[np.bool_]  # run by a CUDA/HIP graph replay
    unlinked: int = 0  # ops with a correlation id that no launch call carries

    @cached_property
    def thread(self) -> npt.NDArray[np.int32]:
        """The launch call's thread row per op (-1 when unknown)."""
        t = self.api_thread[np.maximum(self.api_row, 0)] if self.api_thread.size else None
        if t is None:
            return np.full(self.api_row.size, -1, dtype=np.int32)
        t[self.api_row < 0] = -1
        return t


def graph_ops(trace: Trace, api_row: I64) -> npt.NDArray[np.bool_]:
    """Per GPU op (``api_row``: its launch call, -1: none): run by a graph (a graph id >=
    0, or launched by a graph-launch call: ``cudaGraphLaunch``, ``hipGraphLaunch``, their
    _v and ptsz variants)."""
    api = trace.api_calls
    out: npt.NDArray[np.bool_] = trace.gpu_ops["graph"] >= 0
    linked = api_row >= 0
    if len(api) and linked.any():
        ids = _optable.names_present(np.ascontiguousarray(api["name"]), len(trace.strings))
        graph_ids = ids[[is_graph_launch(trace.strings[int(i)]) for i in ids]]
        if graph_ids.size:  # no graph-launch call in the trace: nothing to look up
            by_graph_call = np.isin(api["name"], graph_ids)
            out[linked] |= by_graph_call[api_row[linked]]
    return out


def link_launches(trace: Trace) -> Launches:
    """Each GPU op's launch call (:func:`pytimings.ingest.links.launch_index`, the one
    implementation of the contract's link) and its start."""
    api = trace.api_calls
    api_row = launch_index(trace)
    n = api_row.size
    at = np.maximum(api_row, 0)
    start = np.take(api["start"], at) if len(api) else np.empty(n, np.int64)
    end = np.take(api["end"], at) if len(api) else np.empty(n, np.int64)
    del at
    start[api_row < 0] = NO_LAUNCH
    return Launches(
        api_row=api_row,
        start=start,
        end=end,
        api_thread=api["thread"],
        graph=graph_ops(trace, api_row),
        unlinked=unlinked(trace, api_row),
    )
