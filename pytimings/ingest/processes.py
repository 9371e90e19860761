"""One file, several ranks: the processes of a single-file trace become ranks.

An Nsight Systems capture of a multi-process job (``nsys profile torchrun --nproc-per-node
2 ...``) is one file holding every process, each driving its own GPU; loaded plainly it is
one rank. :func:`split_processes` makes each process that ran GPU ops a rank of its own, so
that the multi-rank analyses (collectives, skew, wait, straggler) see the ranks.

The rules (``pytimings.load(..., processes_as_ranks=True)`` and ``--processes-as-ranks``):

- **Which processes**: every pid with at least one GPU op is a rank ("GPU process").
- **Numbering** (``meta['process_rank_rule']``): ``"device"`` when every GPU process used
  exactly one device and no two used the same one: ranks follow the device ids (torchrun's
  local rank is the device ordinal by convention); otherwise ``"pid"``: ranks follow the
  pids. Ranks start at ``first_rank`` (the ranks of earlier files when several are loaded).
- **Rows**: GPU ops, API calls, ranges and threads get the rank of their pid. The devices
  table gets one row per (rank, device that rank's GPU ops ran on), the device name kept;
  devices no process used are not listed.
- **Processes without GPU ops** (a launcher, a data-loader worker, a compiler): with one GPU
  process their rows stay, under its rank (there is no other rank they could belong to); with
  several, no rank fits, and their API calls, ranges and threads are left out and counted in
  ``trace.dropped`` under ``api_calls_of_processes_without_gpu_ops``,
  ``ranges_of_processes_without_gpu_ops`` and ``threads_of_processes_without_gpu_ops``. A
  thread that a kept row refers to is always kept.
- A trace with no GPU ops at all stays one rank, ``first_rank``.

``meta['process_ranks']`` maps pid -> rank; ``meta['rank_source']`` is ``"process"``.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.errors import UsageError
from pytimings.model.trace import SCHEMAS, TABLES, Trace, conform
from pytimings.table import Table

__all__ = [
    "gpu_processes",
    "multi_process_hint",
    "print_hint",
    "select_rank",
    "split_processes",
]

DROPPED_KEY = "{table}_of_processes_without_gpu_ops"
_HOST_TABLES = (
    "api_calls", "ranges", "host_ops", "syncs", "events", "threads", "mem_events", "graph_nodes",
)  # fmt: skip
# rows that refer to a thread
_THREAD_TABLES = ("api_calls", "ranges", "host_ops", "syncs", "mem_events", "graph_nodes")


def gpu_processes(trace: Trace, rank: int | None = None) -> dict[int, list[int]]:
    """pid -> the sorted devices its GPU ops ran on, for every pid with GPU ops (on
    ``rank`` only, when given)."""
    ops = trace.gpu_ops
    pid, dev = ops["pid"], ops["device"]
    if rank is not None:
        on = ops["rank"] == rank
        pid, dev = pid[on], dev[on]
    out: dict[int, list[int]] = {}
    pids, devs = _distinct_with_device(pid, dev)
    for p, d in zip(pids.tolist(), devs.tolist(), strict=True):
        out.setdefault(int(p), []).append(int(d))
    return {p: sorted(ds) for p, ds in out.items()}


def _rank_order(procs: dict[int, list[int]]) -> tuple[list[int], str]:
    """The GPU processes in rank order, and the rule that ordered them."""
    one_each = all(len(ds) == 1 for ds in procs.values())
    if one_each and len({ds[0] for ds in procs.values()}) == len(procs):
        return sorted(procs, key=lambda p: procs[p][0]), "device"
    return sorted(procs), "pid"


def split_processes(trace: Trace, first_rank: int = 0) -> Trace:
    """``trace`` (one file's, one rank) with each GPU process as a rank (module docstring)."""
    ranks_in = np.unique(np.concatenate([trace.table(t)["rank"] for t in SCHEMAS]))
    if ranks_in.size > 1:
        raise UsageError(
            "processes as ranks: the trace already has ranks "
            f"{', '.join(map(str, ranks_in.tolist()))}; split each file's trace before merging"
        )
    procs = gpu_processes(trace)
    order, rule = _rank_order(procs) if procs else ([], "no GPU ops")
    n = max(1, len(order))
    if not (-(2**15) <= first_rank and first_rank + n <= 2**15):
        raise UsageError(f"rank {first_rank + n - 1} is out of range")
    rank_of = {p: first_rank + i for i, p in enumerate(order)}
    keep_all = len(order) <= 1  # no other rank the GPU-less processes could belong to
    keys = np.asarray(sorted(rank_of), dtype=np.int64)
    values = np.asarray([rank_of[int(p)] for p in keys], dtype=np.int16)

    def ranks_of(pid: npt.NDArray[Any]) -> tuple[npt.NDArray[np.int16], npt.NDArray[np.bool_]]:
        """Each row's rank and whether its pid is a GPU process."""
        if keep_all:
            return np.full(len(pid), first_rank, dtype=np.int16), np.ones(len(pid), dtype=bool)
        at = np.minimum(np.searchsorted(keys, pid), keys.size - 1)
        found = keys[at] == pid
        return np.where(found, values[at], -1).astype(np.int16), found

    cols: dict[str, dict[str, npt.NDArray[Any]]] = {}
    keep: dict[str, npt.NDArray[np.bool_]] = {}
    for name in ("gpu_ops", *_HOST_TABLES):
        t = trace.table(name).to_dict()
        t["rank"], keep[name] = ranks_of(t["pid"])
        cols[name] = t
    # a thread a kept row refers to stays, with that row's rank (its pid should be that row's)
    th = cols["threads"]
    for name in _THREAD_TABLES:
        rows = np.flatnonzero(keep[name])
        ref = cols[name]["thread"][rows]
        ok = (ref >= 0) & (ref < len(th["pid"]))
        rows, ref = rows[ok], ref[ok]
        orphan = ~keep["threads"][ref]
        if orphan.any():
            th["rank"][ref[orphan]] = cols[name]["rank"][rows[orphan]]
            keep["threads"][ref[orphan]] = True
    for name in _THREAD_TABLES:
        cols[name]["thread"] = _renumbered(cols[name]["thread"], keep["threads"])

    dropped = dict(trace.dropped)
    tables: dict[str, Table] = {}
    for name in ("gpu_ops", *_HOST_TABLES):
        k = keep[name]
        lost = int(k.size - np.count_nonzero(k))
        if lost:
            key = DROPPED_KEY.format(table=name)
            dropped[key] = dropped.get(key, 0) + lost
        t = cols[name]
        tables[name] = conform(t if lost == 0 else {c: v[k] for c, v in t.items()}, SCHEMAS[name])
    tables["devices"] = _devices(trace, tables["gpu_ops"], first_rank if not procs else None)

    meta = dict(trace.meta)
    meta.pop("rank", None)
    meta["process_ranks"] = rank_of
    meta["process_rank_rule"] = rule
    meta["rank_source"] = "process"
    return Trace(**tables, strings=trace.strings, meta=meta, dropped=dropped)


def _devices(trace: Trace, ops: Table, lone_rank: int | None) -> Table:
    """One row per (rank, device used by that rank), names from the file's devices table
    (with no GPU ops: the file's devices, under ``lone_rank``)."""
    old = trace.devices
    if lone_rank is not None:
        return old.with_columns(rank=np.full(len(old), lone_rank, dtype=np.int16))
    name_of = dict(zip(old["device"].tolist(), old["name"].tolist(), strict=True))
    ranks, device = _distinct_with_device(ops["rank"], ops["device"])
    rank = ranks.astype(np.int16)
    name = np.asarray([name_of.get(int(d), 0) for d in device], dtype=np.int32)
    return conform({"device": device, "name": name, "rank": rank}, SCHEMAS["devices"])


def select_rank(trace: Trace, rank: int) -> Trace:
    """The rows of one rank, thread indices renumbered (the rest of the trace shared)."""
    tables: dict[str, Table] = {}
    for name in TABLES:
        t = trace.table(name)
        tables[name] = t.take(np.flatnonzero(t["rank"] == rank))
    mine = trace.threads["rank"] == rank
    for name in _THREAD_TABLES:
        t = tables[name]
        tables[name] = t.with_columns(thread=_renumbered(t["thread"], mine))
    meta = dict(trace.meta)
    meta["rank"] = rank
    return Trace(**tables, strings=trace.strings, meta=meta, dropped={})


def _distinct_with_device(
    key: npt.NDArray[Any], device: npt.NDArray[Any]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int16]]:
    """The distinct (key, device) pairs, sorted: keys and int16 devices."""
    pairs = np.unique((key.astype(np.int64) << 16) | (device.astype(np.int64) & 0xFFFF))
    return pairs >> 16, (pairs & 0xFFFF).astype(np.uint16).astype(np.int16)


def _renumbered(thread: npt.NDArray[Any], kept: npt.NDArray[np.bool_]) -> npt.NDArray[np.int32]:
    """Thread row indices after only the ``kept`` thread rows remain (out-of-range and -1
    references unchanged)."""
    new_index = np.cumsum(kept, dtype=np.int64) - 1
    ok = (thread >= 0) & (thread < new_index.size)
    return np.where(ok, new_index[np.where(ok, thread, 0)], thread).astype(np.int32)


def multi_process_hint(trace: Trace) -> str | None:
    """A one-line hint when a rank of ``trace`` holds several GPU processes on different
    devices (a multi-process capture in one file, loaded as one rank); else None."""
    for r in np.unique(trace.gpu_ops["rank"]).tolist():
        procs = gpu_processes(trace, int(r))
        devices = {d for ds in procs.values() for d in ds}
        if len(procs) >= 2 and len(devices) >= 2:
            several = len(np.unique(trace.gpu_ops["rank"])) > 1
            where = f"rank {r} of the trace holds" if several else "the trace holds"
            return (
                f"hint: {where} {len(procs)} processes with GPU ops on "
                f"{len(devices)} devices; --processes-as-ranks analyses each process as a rank"
            )
    return None


def print_hint(trace: Trace) -> None:
    """:func:`multi_process_hint` on stderr, when there is one (results unchanged)."""
    hint = multi_process_hint(trace)
    if hint is not None:
        print(f"pytimings: {hint}", file=sys.stderr)
