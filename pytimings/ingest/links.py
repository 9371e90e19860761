"""Links between tables of a Trace: each GPU op's launching API call.

A GPU op and the CUDA runtime/driver call that submitted it share a correlation id within
one process of one rank (CUPTI ids are per process). Synchronisation rows reuse the id of
the call they belong to and are never launch calls.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.ingest._model import ApiKind, Trace

_CORR_BITS = 40  # CUPTI correlation ids are 32-bit; Kineto's fit too


def process_codes(*columns: npt.ArrayLike) -> list[npt.NDArray[np.int64]]:
    """Dense process numbers for several tables' (rank, pid) columns, consistent across them.

    ``columns`` alternates rank and pid arrays: ``process_codes(r1, p1, r2, p2, ...)``.
    """
    ranks = [np.asarray(c, dtype=np.int64) for c in columns[0::2]]
    pids = [np.asarray(c, dtype=np.int64) for c in columns[1::2]]
    pairs = np.stack([np.concatenate(ranks), np.concatenate(pids)], axis=1)
    if len(pairs) == 0:
        return [np.empty(0, dtype=np.int64) for _ in ranks]
    _, code = np.unique(pairs, axis=0, return_inverse=True)
    code = code.reshape(-1).astype(np.int64)
    bounds = np.cumsum([len(r) for r in ranks])[:-1]
    return list(np.split(code, bounds))


def launch_index(trace: Trace) -> npt.NDArray[np.int64]:
    """Per GPU op, the row of its launching API call in ``trace.api_calls``, or -1."""
    api, ops = trace.api_calls, trace.gpu_ops
    out = np.full(len(ops), -1, dtype=np.int64)
    launch = np.flatnonzero(api["kind"] != ApiKind.SYNC)
    if len(launch) == 0 or len(ops) == 0:
        return out
    a_proc, o_proc = process_codes(api["rank"][launch], api["pid"][launch], ops["rank"], ops["pid"])
    a_corr = api["correlation"][launch].astype(np.int64)
    o_corr = ops["correlation"].astype(np.int64)
    a_ok = (a_corr >= 0) & (a_corr < (1 << _CORR_BITS))
    a_key = _key(a_proc[a_ok], a_corr[a_ok])
    rows = launch[a_ok]
    order = np.argsort(a_key, kind="stable")
    sk = a_key[order]
    if len(sk) == 0:
        return out
    o_ok = (o_corr >= 0) & (o_corr < (1 << _CORR_BITS))
    o_key = _key(o_proc, np.where(o_ok, o_corr, 0))
    pos = np.minimum(np.searchsorted(sk, o_key), len(sk) - 1)
    hit = o_ok & (sk[pos] == o_key)
    out[hit] = rows[order[pos[hit]]]
    return out


def _key(proc: npt.NDArray[np.int64], corr: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    return (proc << _CORR_BITS) | np.asarray(corr, dtype=np.int64)
