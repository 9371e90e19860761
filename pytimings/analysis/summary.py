"""What ran, per rank and device, per rank and device, from any loaded trace.

:func:`trace_summary` returns Tables (all times integer-ns based, percentiles by numpy's
default linear interpolation):

- ``kernels``: per (rank, device, normalised kernel name): count, total, mean, p50, p99,
  min, max, and ``share`` = total / all kernel time on that rank and device (Nsight's
  ``cuda_gpu_kern_sum`` "Time (%)").
- ``memory``: per (rank, device, operation) for memcpys by copy kind and memsets, named
  as Nsight names them (``[CUDA memcpy Device-to-Host]``, ``[CUDA memset]``; ``[HIP memcpy
  ...]`` when the trace is ROCm's, :func:`pytimings.ingest.names.trace_vendor`): count,
  bytes, times, and ``gbps`` = bytes / busy time.
- ``ranges``: per (rank, style, "domain:name") host ranges (NVTX, annotations, regions):
  count and host-time statistics, plus their GPU projection as Nsight's
  ``nvtx_gpu_proj_sum`` defines it: the GPU ops launched by API calls that start inside
  ``[range.start, range.end)`` on the range's thread (matched by correlation id within the
  process); ``gpu_ops`` counts them, ``proj_total_ns`` sums over instances the span from
  the first op's start to the last op's end, and ``gpu_busy_ns`` sums over instances the
  length of the union of the ops' intervals (time some op of the instance runs).
  ``bytes`` and ``gbps`` (bytes / time) where the ranges say what they moved, and for the
  collectives of :func:`pytimings.instrument_torch_distributed` nccl-tests' ``busbw_gbps``
  (bytes times the bus factor of the group size, over the ranges' time: the record-time
  summary's number for host-only recordings).
- ``api``: per (rank, kind, name) CUDA runtime/driver calls (as ``nsys stats``'
  cuda_api_sum lists them); a trailing 4-digit version suffix (``cudaLaunchKernel_v7000``)
  is dropped from the name, exactly as ``nsys stats`` does (``cudaLaunchKernelExC_v11060``
  keeps its suffix there too).
- ``syncs`` (only for traces with synchronization records): per (rank, what they waited
  for: "Stream sync", "Event sync", ...) the statistics of the records. Each describes an
  API call of the ``api`` table (its time is that call's): apart, so nothing counts twice.
- ``cpu_ops`` (only for traces that have Kineto ``cpu_op`` host activities): per (rank,
  operator name as written) count, total, mean, p50, p99, min, max of the operators'
  wall time on their thread. Operators nest (``aten::linear`` contains ``aten::addmm``),
  so a total includes the time of the operators inside it.
- ``os_calls`` (only for traces with OS runtime calls, Nsight's ``OSRT_API``): the same
  statistics per (rank, call name), e.g. ``pthread_cond_wait``, ``poll``, ``ioctl``.

With ``per_device=False`` every group spans all ranks and devices (rank and device -1),
which is how Nsight's ``nsys stats`` reports aggregate a multi-process export.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.analysis.grouped import grouped_stats
from pytimings.ingest.links import launch_index, project
from pytimings.ingest.names import normalize_ids, range_label, short_kernel_name, trace_vendor
from pytimings.model.comm import COLLECTIVES, bus_factor
from pytimings.model.recording import comm_region_collective
from pytimings.model.trace import (
    SYNC_KIND_NAMES,
    ActivityKind,
    ApiKind,
    CopyKind,
    OpKind,
    RangeKind,
    Trace,
)
from pytimings.table import Table

SCHEMA = "pytimings.summary/1"
MEMSET_CODE = 100  # memory-op code of a memset (memcpys: their CopyKind)
_COPY_LABEL = {
    CopyKind.UNKNOWN: "Unknown",
    CopyKind.HTOD: "Host-to-Device",
    CopyKind.DTOH: "Device-to-Host",
    CopyKind.HTOA: "Host-to-Array",
    CopyKind.ATOH: "Array-to-Host",
    CopyKind.ATOA: "Array-to-Array",
    CopyKind.ATOD: "Array-to-Device",
    CopyKind.DTOA: "Device-to-Array",
    CopyKind.DTOD: "Device-to-Device",
    CopyKind.HTOH: "Host-to-Host",
    CopyKind.PTOP: "Peer-to-Peer",
}
_STYLE = {
    RangeKind.NVTX_PUSHPOP: "PushPop",
    RangeKind.NVTX_STARTEND: "StartEnd",
    RangeKind.ANNOTATION: "Annotation",
    RangeKind.REGION: "Region",
}
_API_KIND: dict[int, str] = {ApiKind.RUNTIME: "runtime", ApiKind.DRIVER: "driver"}


def trace_summary(
    trace: Trace, top: int | None = None, per_device: bool = True
) -> dict[str, Table]:
    """The summary tables of a trace (see the module docstring); ``top`` rows per group."""
    tables = {
        "kernels": _kernels(trace, top, per_device),
        "memory": _memory(trace, per_device),
        "ranges": _ranges(trace, top, per_device),
        "api": _api(trace, top, per_device),
    }
    if len(trace.syncs):
        tables["syncs"] = _syncs(trace, top, per_device)
    for name, kind in (("cpu_ops", ActivityKind.CPU_OP), ("os_calls", ActivityKind.OS)):
        if (trace.host_ops["kind"] == kind).any():
            tables[name] = _host_ops(trace, kind, top, per_device)
    return tables


# -- grouped statistics ---------------------------------------------------------------------
def _group_stats(
    gid: npt.NDArray[np.int64], values: npt.NDArray[np.int64]
) -> dict[str, npt.NDArray[Any]]:
    """count, total, mean, p50, p99, min, max of ``values`` per group id 0..G-1 (the shared
    :func:`pytimings.analysis.grouped.grouped_stats`; percentiles numpy's linear ones)."""
    if len(gid) == 0:
        empty = np.empty(0, dtype=np.int64)
        return {
            k: empty.astype(np.float64) if k in ("mean_ns", "p50_ns", "p99_ns") else empty
            for k in ("count", "total_ns", "mean_ns", "p50_ns", "p99_ns", "min_ns", "max_ns")
        }
    gs = grouped_stats(gid, values, [0.0, 0.5, 0.99])
    return {
        "count": gs.counts,
        "total_ns": gs.sums,
        "mean_ns": gs.sums / gs.counts,
        "p50_ns": gs.quantiles[:, 1],
        "p99_ns": gs.quantiles[:, 2],
        "min_ns": gs.quantiles[:, 0].astype(np.int64),  # the 0-quantile is the smallest value
        "max_ns": gs.maxs,
    }


def _codes(*cols: npt.NDArray[Any]) -> tuple[npt.NDArray[np.int64], list[npt.NDArray[Any]]]:
    """Dense group ids of rows by the given integer columns, and each column's group value.

    The columns are packed into one int64 key (one sort), far faster than
    ``np.unique(axis=0)`` on millions of rows; columns too wide to pack are first
    replaced by their dense codes.
    """
    n = len(cols[0])
    if n == 0:
        return np.empty(0, dtype=np.int64), [c[:0] for c in cols]
    key = np.zeros(n, dtype=np.int64)
    span = 1
    for c in cols:
        v = np.asarray(c).astype(np.int64)
        lo = int(v.min())
        width = int(v.max()) - lo + 1
        if span * width >= 1 << 62:  # too wide to pack: use dense codes so far
            _, key = np.unique(key, return_inverse=True)
            key = key.reshape(-1).astype(np.int64)
            span = int(key.max()) + 1
            if span * width >= 1 << 62:
                _, inv = np.unique(v, return_inverse=True)
                v, lo, width = inv.reshape(-1).astype(np.int64), 0, int(inv.max()) + 1
        key = key * width + (v - lo)
        span *= width
    _, first, code = np.unique(key, return_index=True, return_inverse=True)
    return code.reshape(-1).astype(np.int64), [np.asarray(c)[first] for c in cols]


def _finish(cols: dict[str, npt.NDArray[Any]], group_cols: Sequence[str], top: int | None) -> Table:
    """Sort by group columns then total time (largest first); keep ``top`` per group."""
    n = len(cols["count"])
    keys = [-cols["total_ns"]] + [cols[c] for c in reversed(group_cols)]
    order = np.lexsort(keys) if n else np.empty(0, dtype=np.int64)
    if top is not None and n:
        grp = np.stack([cols[c][order] for c in group_cols], axis=1)
        newgrp = np.ones(n, dtype=bool)
        newgrp[1:] = np.any(grp[1:] != grp[:-1], axis=1)
        start = np.maximum.accumulate(np.where(newgrp, np.arange(n), 0))
        order = order[(np.arange(n) - start) < top]
    return Table({k: v[order] for k, v in cols.items()})


def _scope(trace_table: Table, per_device: bool, device: bool = True) -> list[npt.NDArray[Any]]:
    n = len(trace_table)
    if not per_device:
        return [np.full(n, -1), np.full(n, -1)] if device else [np.full(n, -1)]
    cols = [trace_table["rank"]]
    if device:
        cols.append(trace_table["device"])
    return cols


# -- tables -----------------------------------------------------------------------------
def _kernels(trace: Trace, top: int | None, per_device: bool) -> Table:
    ops = trace.gpu_ops.take(trace.gpu_ops["kind"] == OpKind.KERNEL)
    names, name_code = normalize_ids(trace.strings, ops["name"])
    rank, device = _scope(ops, per_device)
    gid, (g_rank, g_dev, g_name) = _codes(rank, device, name_code)
    stats = _group_stats(gid, ops["end"] - ops["start"])
    # share of all kernel time on the same rank and device
    scope_gid, _ = _codes(g_rank, g_dev) if len(g_rank) else (np.empty(0, np.int64), [])
    scope_total = (
        np.bincount(scope_gid, weights=stats["total_ns"]) if len(scope_gid) else np.zeros(0)
    )
    share = stats["total_ns"] / np.where(scope_total[scope_gid] > 0, scope_total[scope_gid], 1)
    full = np.array([names[i] for i in g_name], dtype=object)
    short = np.array([short_kernel_name(s) for s in full], dtype=object)
    cols = {
        "rank": g_rank,
        "device": g_dev,
        "name": short,
        "full_name": full,
        **stats,
        "share": share,
    }
    return _finish(cols, ("rank", "device"), top)


def _memory(trace: Trace, per_device: bool) -> Table:
    ops = trace.gpu_ops.take(trace.gpu_ops["kind"] != OpKind.KERNEL)
    is_set = ops["kind"] == OpKind.MEMSET
    op_code = np.where(is_set, MEMSET_CODE, ops["copy_kind"]).astype(np.int64)
    rank, device = _scope(ops, per_device)
    gid, (g_rank, g_dev, g_op) = _codes(rank, device, op_code)
    stats = _group_stats(gid, ops["end"] - ops["start"])
    nbytes = (
        np.bincount(gid, weights=ops["bytes"]).astype(np.int64)
        if len(gid)
        else np.zeros(0, np.int64)
    )
    rt = trace_vendor(trace)  # ROCm copies are HIP's, not "CUDA memcpy"
    label = np.array([memory_label(int(c), rt) for c in g_op], dtype=object)
    gbps = nbytes / np.where(stats["total_ns"] > 0, stats["total_ns"], np.nan)
    cols = {
        "rank": g_rank,
        "device": g_dev,
        "operation": label,
        **stats,
        "bytes": nbytes,
        "gbps": gbps,
    }
    return _finish(cols, ("rank", "device"), None)


def _projection(trace: Trace) -> dict[str, npt.NDArray[Any]]:
    """Per range: GPU ops launched inside it on its thread, their span and busy time
    (:func:`pytimings.ingest.links.project`, the projection ``analyze --by`` uses)."""
    count, first, last, busy = project(trace, launch_index(trace))
    return {"gpu_ops": count, "proj_ns": last - first, "busy_ns": busy}


def memory_label(code: int, runtime: str = "CUDA") -> str:
    """The operation name of a memcpy (``code``: its CopyKind) or a memset (MEMSET_CODE), as
    Nsight names them (``[CUDA memcpy Device-to-Host]``, ``[CUDA memset]``); ``runtime``
    "HIP" for ROCm traces (:func:`pytimings.ingest.names.trace_vendor`)."""
    if code == MEMSET_CODE:
        return f"[{runtime} memset]"
    return f"[{runtime} memcpy {_COPY_LABEL.get(CopyKind(code), 'Unknown')}]"


def _ranges(trace: Trace, top: int | None, per_device: bool) -> Table:
    rg = trace.ranges
    proj = _projection(trace)
    rank = rg["rank"] if per_device else np.full(len(rg), -1)
    gid, (g_rank, g_kind, g_dom, g_name) = _codes(rank, rg["kind"], rg["domain"], rg["name"])
    stats = _group_stats(gid, rg["end"] - rg["start"])
    g = len(stats["count"])

    def per_group(v: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return (
            np.bincount(gid, weights=v, minlength=g).astype(np.int64)
            if len(gid)
            else np.zeros(0, np.int64)
        )

    label = np.array(
        [
            range_label(trace.strings[d], trace.strings[nm])
            for d, nm in zip(g_dom, g_name, strict=True)
        ],
        dtype=object,
    )
    style = np.array([_STYLE.get(RangeKind(k), str(k)) for k in g_kind], dtype=object)
    with_ops = per_group((proj["gpu_ops"] > 0).astype(np.int64))
    # the bytes the ranges say they moved (a region's nbytes, NCCL's payload), over the time
    # of those ranges: NaN for a group with none
    known = rg["bytes"] >= 0
    moved = per_group(np.where(known, rg["bytes"], 0))
    moved_ns = per_group(np.where(known, rg["end"] - rg["start"], 0))
    has_bytes = per_group(known.astype(np.int64)) > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        gbps = np.where(has_bytes & (moved_ns > 0), moved / np.maximum(moved_ns, 1), np.nan)
    # nccl-tests' busbw of the collectives the torch.distributed wrappers recorded: each
    # range's bytes times its bus factor, over the time of those ranges (as the record-time
    # summary, pytimings.record.summary, computes it)
    factor = _bus_factors(trace)
    on_bus = known & ~np.isnan(factor) & (rg["end"] > rg["start"])
    bus_moved = np.bincount(gid, weights=np.where(on_bus, rg["bytes"] * factor, 0.0), minlength=g)
    bus_ns = per_group(np.where(on_bus, rg["end"] - rg["start"], 0))
    with np.errstate(divide="ignore", invalid="ignore"):
        busbw = np.where(bus_ns > 0, bus_moved / np.maximum(bus_ns, 1), np.nan)
    cols = {
        "rank": g_rank,
        "style": style,
        "name": label,
        **stats,
        "gpu_ops": per_group(proj["gpu_ops"]),
        "proj_instances": with_ops,
        "proj_total_ns": per_group(proj["proj_ns"]),
        "gpu_busy_ns": per_group(proj["busy_ns"]),
        "bytes": np.where(has_bytes, moved, np.nan),
        "gbps": gbps,
        "busbw_gbps": busbw,
    }
    return _finish(cols, ("rank",), top)


def _bus_factors(trace: Trace) -> npt.NDArray[np.float64]:
    """Per range: the bus factor of the collective a torch.distributed wrapper's region
    (:func:`pytimings.model.recording.comm_region_collective`) ran among its group (the
    range's payload), NaN for any other range or an unknown group size."""
    rg = trace.ranges
    factor = np.full(len(rg), np.nan)
    group = rg["payload"]
    base = len(trace.strings)
    pair = rg["name"].astype(np.int64) * base + rg["category"].astype(np.int64)
    for code in np.unique(pair).tolist():
        index = comm_region_collective(trace.strings[code // base], trace.strings[code % base])
        if index < 0:
            continue
        sel = (pair == code) & (group > 0)
        for size in np.unique(group[sel]).tolist():
            factor[sel & (group == size)] = bus_factor(COLLECTIVES[index], int(size))
    return factor


def api_display_name(name: str) -> str:
    """nsys stats' rule: drop the last 6 characters when they are ``_v`` + 4 characters."""
    return name[:-6] if len(name) > 6 and name[-6:-4] == "_v" else name


def _api(trace: Trace, top: int | None, per_device: bool) -> Table:
    """CUDA API calls by (rank, kind, name), like ``nsys stats``' cuda_api_sum:
    synchronization records describe these calls (their time is the calls'), so they are
    a table of their own (:func:`_syncs`), not rows here."""
    api = trace.api_calls
    names: dict[str, int] = {}
    uniq, inv = np.unique(api["name"], return_inverse=True)
    code = np.array(
        [names.setdefault(api_display_name(trace.strings[u]), len(names)) for u in uniq], np.int64
    )
    display = list(names)
    rank = api["rank"] if per_device else np.full(len(api), -1)
    name = code[inv.reshape(-1)] if len(uniq) else code
    gid, (g_rank, g_kind, g_name) = _codes(rank, api["kind"].astype(np.int64), name)
    cols = {
        "rank": g_rank,
        "kind": np.array([_API_KIND.get(int(k), str(k)) for k in g_kind], dtype=object),
        "name": np.array([display[i] for i in g_name], dtype=object),
        **_group_stats(gid, api["end"] - api["start"]),
    }
    return _finish(cols, ("rank",), top)


def _syncs(trace: Trace, top: int | None, per_device: bool) -> Table:
    """Synchronization records by (rank, what they waited for): each describes the API call
    with its correlation id, so their time is already that call's in the ``api`` table."""
    syncs = trace.syncs
    rank = syncs["rank"] if per_device else np.full(len(syncs), -1)
    gid, (g_rank, g_kind) = _codes(rank, syncs["kind"].astype(np.int64))
    cols = {
        "rank": g_rank,
        "waited_for": np.array([SYNC_KIND_NAMES[int(k)] for k in g_kind], dtype=object),
        **_group_stats(gid, syncs["end"] - syncs["start"]),
    }
    return _finish(cols, ("rank",), top)


def _host_ops(trace: Trace, kind: ActivityKind, top: int | None, per_device: bool) -> Table:
    """Per (rank, name) the wall-time statistics of the host_ops of one ``kind``."""
    ops = trace.host_ops.take(trace.host_ops["kind"] == kind)
    (rank,) = _scope(ops, per_device, device=False)
    gid, (g_rank, g_name) = _codes(rank, ops["name"])
    cols = {
        "rank": g_rank,
        "name": np.array([trace.strings[i] for i in g_name], dtype=object),
        **_group_stats(gid, ops["end"] - ops["start"]),
    }
    return _finish(cols, ("rank",), top)


# -- output -----------------------------------------------------------------------------
def summary_json(trace: Trace, tables: dict[str, Table], files: Sequence[str]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "files": list(files),
        "dropped": trace.dropped,
        "tables": {
            name: [{c: _jsonable(t[c][i]) for c in t.columns} for i in range(len(t))]
            for name, t in tables.items()
        },
    }


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return None if np.isnan(v) else float(v)
    return v
