"""Device memory over a capture (docs/memory.md): per device the peak allocated and reserved
bytes and when, the capacity and headroom, who holds the bytes live at the peak, the
allocator's native calls per window, growth across the ``--by`` windows and allocations
never freed, from the trace's ``mem_events``.

* The level: the trace's ``allocated``/``reserved`` after each event where the format
  writes them (Kineto's Total Allocated/Reserved, a snapshot's totals); else the running sum
  of the events' bytes from the capture's start (``level_from`` "running_sum": relative,
  what was allocated before the capture is not in it).
* Frees are matched to allocations by (device, address): a free takes the latest unmatched
  allocation at its address. A free with no allocation (made before the capture, or events
  without an address) is counted in ``unmatched_frees`` and its bytes, never dropped.
* An allocation's op: the innermost host activity at its instant on its thread
  (:func:`pytimings.analysis.host.interval_charges`, the contract's innermost); with no
  thread, the snapshot's frame (kind ``frame``) or ``untraced``.
* Native allocation calls: ``cudaMalloc``/``cuMemAlloc``/``hipMalloc`` and kin in
  ``api_calls`` (the calls name no device: every CUDA device of the rank counts its rank's);
  per window, and in steady state (the windows after the first). Their cost is the host
  attribution's share (``native_alloc_host_bound_ns``): the host_bound time of the device's
  window entry charged to these calls as innermost activity, given when the analysis has
  one (:func:`native_host_bound`); the calls' own duration (``native_alloc_ns``) is beside
  it, most of it may be hidden under GPU work.
* Growth: the level at each window's end, Mann-Kendall test (:func:`pytimings.stats.
  mann_kendall`) with Sen's slope in bytes per window.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.analysis.finding import Finding, pct, plural
from pytimings.analysis.host import HostActivities, interval_charges
from pytimings.analysis.launches import link_launches
from pytimings.analysis.windows import range_windows
from pytimings.console.text import duration
from pytimings.errors import TraceFormatError
from pytimings.model.trace import ACTIVITY_KIND_NAMES, ActivityKind, MemEventKind, Trace
from pytimings.stats import mann_kendall, sen_slope
from pytimings.table import Table

I64 = npt.NDArray[np.int64]
NATIVE_ALLOC = re.compile(
    r"^(cudaMalloc(Async|Managed|Pitch|3D|FromPool(Async)?)?|cuMemAlloc\w*|cuMemCreate|"
    r"cuMemAllocAsync|hipMalloc\w*|hipExtMallocWithFlags|hipMemCreate)(_v\d+)?$"
)
GROWTH_ALPHA = 0.01  # growth is reported at p < 1% (about 1 steady capture in 100 flagged)
MIN_GROWTH_WINDOWS = 8
MAX_OPS = 10  # ops listed per device in documents (the result holds them all)


@dataclass
class OpBytes:
    kind: str  # cpu_op, range, cuda_api, python, os, untraced, frame
    name: str
    bytes: int
    allocs: int

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "bytes": self.bytes, "allocs": self.allocs}


@dataclass
class DeviceMemory:
    """One device's memory over the capture (see the module docstring)."""

    rank: int
    device_type: int  # 0 CPU, 1 CUDA, 6 HIP, ... (c10 DeviceType)
    device: int  # -1: the host, or a device the source does not name
    label: str
    capacity_bytes: int | None
    level_from: str  # "trace" or "running_sum"
    peak_allocated_bytes: int
    peak_at_ns: int
    peak_reserved_bytes: int | None
    reserved_at_peak_bytes: int | None
    live_at_peak_by_op: list[OpBytes]
    allocs: int
    frees: int
    unmatched_frees: int
    unmatched_free_bytes: int
    without_address: int  # alloc/free events that cannot be matched (no address)
    native_alloc_calls: int | None
    native_alloc_ns: int | None
    live_at_end_bytes: int
    never_freed_by_op: list[OpBytes]
    windows: list[dict[str, Any]] = field(default_factory=list)
    growth: dict[str, Any] | None = None
    # the device number the GPU ops give this GPU (ROCm: its agent number, not the HIP
    # ordinal the memory events name); None: no GPU op runs there, or not a GPU
    kernel_device: int | None = None

    @property
    def fragmentation_bytes(self) -> int | None:
        """Reserved - allocated at the peak (None: reserved unknown)."""
        if self.reserved_at_peak_bytes is None:
            return None
        return self.reserved_at_peak_bytes - self.peak_allocated_bytes

    def to_dict(self) -> dict[str, Any]:
        """The keys of ``analyze --json``'s ``memory.devices`` entries."""
        return {
            "device": self.label,
            "capacity_bytes": self.capacity_bytes,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "peak_at_ns": self.peak_at_ns,
            "live_at_peak_by_op": [o.to_dict() for o in self.live_at_peak_by_op[:MAX_OPS]],
            "allocs": self.allocs,
            "frees": self.frees,
            "native_alloc_calls": self.native_alloc_calls,
            "live_at_end_bytes": self.live_at_end_bytes,
        }

    def details(self) -> dict[str, Any]:
        """Everything (``pytimings memory --json``)."""
        return {
            **self.to_dict(),
            "rank": self.rank,
            "kernel_device": self.kernel_device,
            "level_from": self.level_from,
            "reserved_at_peak_bytes": self.reserved_at_peak_bytes,
            "fragmentation_bytes": self.fragmentation_bytes,
            "unmatched_frees": self.unmatched_frees,
            "unmatched_free_bytes": self.unmatched_free_bytes,
            "without_address": self.without_address,
            "native_alloc_ns": self.native_alloc_ns,
            "never_freed_by_op": [o.to_dict() for o in self.never_freed_by_op[:MAX_OPS]],
            "windows": self.windows,
            "growth": self.growth,
        }


@dataclass
class MemoryResult:
    by: str | None
    devices: list[DeviceMemory]
    window_names: list[str] = field(default_factory=list)
    start_ns: int = 0  # the trace's first event: the text gives times from it

    def to_dict(self) -> dict[str, Any]:
        return {"devices": [d.to_dict() for d in self.devices]}

    def details(self) -> dict[str, Any]:
        return {"by": self.by, "devices": [d.details() for d in self.devices]}


def capacities(trace: Trace) -> dict[tuple[int, int], int]:
    """(rank, device) -> the device's memory in bytes, as the trace says (Kineto
    ``deviceProperties.totalGlobalMem``, Nsight ``TARGET_INFO_GPU.totalMemory``)."""
    out: dict[tuple[int, int], int] = {}
    metas = trace.meta.get("parts") or [trace.meta]
    for m in metas:
        rank = m.get("rank") or 0
        for p in m.get("device_properties") or []:
            total = p.get("totalGlobalMem") if isinstance(p, dict) else None
            if isinstance(total, int) and isinstance(p.get("id"), int):
                out[(rank, p["id"])] = total
        for d, total in (m.get("device_memory_bytes") or {}).items():
            out[(rank, int(d))] = int(total)
    return out


# c10 DeviceTypes that are a GPU: CUDA, and HIP (what PyTorch's ROCm builds write on
# Kineto's [memory] events)
CUDA, HIP = 1, 6
_GPU_NAMES = {CUDA: "cuda", HIP: "hip"}


def is_gpu(device_type: int) -> bool:
    return device_type in _GPU_NAMES


def kernel_devices(
    trace: Trace, rank: int, device_type: int, ordinals: list[int]
) -> dict[int, int]:
    """Per GPU ordinal the memory events of ``rank`` name: the device its GPU ops carry.
    CUDA numbers both alike. ROCm's kernel records number the HSA agents, CPU agents first
    (the first GPU is 2 on a two-socket host): the ordinals map onto the agents in order,
    by the offset from the first ordinal to the first GPU-op device, where every ordinal
    then lands on a device that ran GPU ops; else none is tied."""
    ops = trace.gpu_ops
    ran = sorted(set(ops["device"][ops["rank"] == rank].tolist()))
    mine = [o for o in ordinals if o >= 0]
    if not ran or not mine:
        return {}
    if set(mine) <= set(ran) or device_type != HIP:
        return {o: o for o in mine if o in ran}
    offset = ran[0] - min(mine)
    if all(o + offset in ran for o in mine):
        return {o: o + offset for o in mine}
    return {}


def _label(device_type: int, device: int, rank: int, ranks: int, kernel_device: int | None) -> str:
    if device_type == 0:
        base = "cpu"
    elif is_gpu(device_type):
        name = _GPU_NAMES[device_type]
        base = f"{name}:{device}" if device >= 0 else f"{name} (current device)"
        if kernel_device is not None and kernel_device != device:
            base += f" (device {kernel_device} of the GPU ops)"
    else:
        base = f"device type {device_type}:{device}"
    return f"rank {rank} {base}" if ranks > 1 else base


def _ops_of(trace: Trace, rows: I64) -> tuple[list[str], list[str]]:
    """The (kind, name) of the innermost host activity at each mem_events row's instant."""
    me = trace.mem_events
    kinds = ["untraced"] * rows.size
    names = [""] * rows.size
    site = me["site"][rows]
    for i in np.flatnonzero(site > 0).tolist():
        kinds[i], names[i] = "frame", trace.strings[int(site[i])]
    th = me["thread"][rows]
    has = np.flatnonzero((th >= 0) & (site == 0))
    if has.size:
        t = me["time"][rows[has]]
        ch = interval_charges(trace, t, t + 1, th[has].astype(np.int32), has.astype(np.int64))
        for r, k, n in zip(
            ch["row"].tolist(), ch["kind"].tolist(), ch["name"].tolist(), strict=True
        ):
            kinds[r], names[r] = ACTIVITY_KIND_NAMES[k], trace.strings[n]
    return kinds, names


def innermost_ranges(trace: Trace, rows: I64) -> list[str]:
    """The innermost range at each mem_events row's instant ("" none or no thread)."""
    me = trace.mem_events
    out = [""] * rows.size
    th = me["thread"][rows].astype(np.int32)
    has = np.flatnonzero(th >= 0)
    if not has.size:
        return out
    t = me["time"][rows[has]]
    for thread, acts in HostActivities.per_thread(trace, t, t + 1, th[has]):
        m = np.flatnonzero(th[has] == thread)
        ch = acts.charge(t[m], t[m] + 1, has[m].astype(np.int64), ranges_only=True)
        for r, n in zip(ch["row"].tolist(), ch["name"].tolist(), strict=True):
            out[r] = trace.strings[n]
    return out


def _grouped(kinds: list[str], names: list[str], nbytes: I64, pick: I64) -> list[OpBytes]:
    acc: dict[tuple[str, str], list[int]] = {}
    for i in pick.tolist():
        e = acc.setdefault((kinds[i], names[i]), [0, 0])
        e[0] += int(nbytes[i])
        e[1] += 1
    out = [OpBytes(k, n, b, c) for (k, n), (b, c) in acc.items()]
    out.sort(key=lambda o: (-o.bytes, -o.allocs, o.kind, o.name))
    return out


def match_frees(addr: I64, kind: npt.NDArray[np.int8]) -> tuple[I64, I64]:
    """Per event (time order): for an allocation, the index of the free that ends it (-1:
    never freed); for a free, the index of its allocation (-1: none, an unmatched free).
    Events without an address (-1) match nothing."""
    n = addr.size
    freed_by = np.full(n, -1, np.int64)
    alloc_of = np.full(n, -1, np.int64)
    open_at: dict[int, list[int]] = {}
    for i, (a, k) in enumerate(zip(addr.tolist(), kind.tolist(), strict=True)):
        if a < 0:
            continue
        if k == MemEventKind.ALLOC:
            open_at.setdefault(a, []).append(i)
        elif k == MemEventKind.FREE:
            stack = open_at.get(a)
            if stack:
                j = stack.pop()
                freed_by[j], alloc_of[i] = i, j
    return freed_by, alloc_of


def _is_native(strings: list[str]) -> npt.NDArray[np.bool_]:
    return np.asarray([bool(NATIVE_ALLOC.match(s)) for s in strings], dtype=bool)


def _native_calls(trace: Trace, rank: int) -> I64:
    api = trace.api_calls
    return np.flatnonzero(_is_native(trace.strings)[api["name"]] & (api["rank"] == rank))


NativeBound = dict[tuple[int, int], I64]


def native_host_bound(windows: Table, charges: Table, strings: list[str]) -> NativeBound:
    """Per (rank, device) of the window entries ``windows`` (an Attribution's), the
    host_bound ns that ``charges`` (its ``host.bound_by_activity``) give native allocation
    calls, per window entry in start order."""
    native = _is_native(strings)[charges["name"]] & (charges["kind"] == ActivityKind.CUDA_API)
    per_row = np.zeros(len(windows), dtype=np.int64)
    np.add.at(per_row, charges["row"][native], charges["ns"][native])
    out: NativeBound = {}
    rank, dev, start = windows["rank"], windows["device"], windows["start_ns"]
    for r, d in sorted({(int(a), int(b)) for a, b in zip(rank, dev, strict=True)}):
        rows = np.flatnonzero((rank == r) & (dev == d))
        out[(r, d)] = per_row[rows[np.argsort(start[rows], kind="stable")]]
    return out


def analyze_memory(
    trace: Trace, by: str | None = None, native_bound: NativeBound | None = None
) -> MemoryResult:
    """The memory of every device with events in ``trace.mem_events`` (``by``: also per
    instance of these ranges, and growth across them; ``native_bound``: the host
    attribution's charges to native allocation calls per window, :func:`native_host_bound`)."""
    me = trace.mem_events
    caps = capacities(trace)
    ranks = np.unique(me["rank"])
    windows = None
    if by is not None and len(me):
        windows = range_windows(trace, link_launches(trace), by, ranks.astype(np.int16))
    devices = []
    groups = device_groups(trace)
    for rank, dtype, dev, rows in groups:
        ordinals = [d for r, t, d, _ in groups if r == rank and t == dtype]
        kernel_dev = (
            kernel_devices(trace, rank, dtype, ordinals).get(dev) if is_gpu(dtype) else None
        )
        bound = None
        if native_bound is not None and is_gpu(dtype):
            on_rank = sorted(k for k in native_bound if k[0] == rank)
            if kernel_dev is not None and (rank, kernel_dev) in native_bound:
                bound = native_bound[(rank, kernel_dev)]
            elif on_rank:  # a device the events do not name: the rank's first
                bound = native_bound[on_rank[0]]
        devices.append(
            _device(trace, rows, (rank, dtype, dev, kernel_dev), len(ranks), caps, windows, bound)
        )
    firsts = [
        int(times.min())
        for times in (me["time"], *(trace.table(t)["start"] for t in ("gpu_ops", "api_calls",
                                                                      "ranges", "host_ops")))
        if len(times)
    ]  # fmt: skip
    return MemoryResult(by=by, devices=devices, start_ns=min(firsts, default=0))


def device_groups(trace: Trace) -> list[tuple[int, int, int, I64]]:
    """(rank, device type, device, its mem_events rows in time order) per device."""
    me = trace.mem_events
    if not len(me):
        return []
    key = np.stack([me["rank"], me["device_type"], me["device"]]).astype(np.int64)
    out = []
    for rank, dtype, dev in np.unique(key, axis=1).T.tolist():
        rows = np.flatnonzero((key[0] == rank) & (key[1] == dtype) & (key[2] == dev))
        out.append((rank, dtype, dev, rows[np.argsort(me["time"][rows], kind="stable")]))
    return out


def levels(trace: Trace, rows: I64, device_type: int) -> tuple[I64, bool, I64 | None]:
    """The allocated level after each of the rows (one device's, in time order), whether
    it is the trace's own total (else the running sum of the rows' bytes), and the reserved
    total after each (None: unknown; Kineto writes 0 for the host)."""
    me = trace.mem_events
    alloc, resv = me["allocated"][rows], me["reserved"][rows]
    from_trace = bool((alloc >= 0).all())
    if not from_trace and np.abs(me["bytes"][rows].astype(np.float64)).sum() >= 2.0**63:
        # the running sum would wrap (a peak of 2**62 for a true 3 * 2**62, a level of -2**63)
        raise TraceFormatError(
            str(trace.meta.get("path", "the trace")),
            "its memory events' bytes, with no Total Allocated to go by, add up past int64 "
            "(9.2 EB): no real device's",
        )
    level = alloc if from_trace else np.cumsum(me["bytes"][rows])
    known = device_type != 0 and bool((resv >= 0).all()) and rows.size > 0
    return level, from_trace, resv if known else None


def _device(
    trace: Trace,
    rows: I64,
    where: tuple[int, int, int, int | None],
    n_ranks: int,
    caps: dict[tuple[int, int], int],
    windows: Any,
    bound: I64 | None = None,
) -> DeviceMemory:
    """One device's memory; ``where``: (rank, device type, device, its GPU ops' device)."""
    rank, dtype, dev, kernel_dev = where
    me = trace.mem_events
    t, kind, nbytes = me["time"][rows], me["kind"][rows], me["bytes"][rows]
    addr = me["addr"][rows]
    level, from_trace, resv = levels(trace, rows, dtype)
    peak = int(np.argmax(level))
    is_alloc = kind == MemEventKind.ALLOC
    is_free = kind == MemEventKind.FREE
    freed_by, alloc_of = match_frees(addr, kind)
    unmatched = is_free & (alloc_of < 0) & (addr >= 0)  # without an address: without_address
    kinds, names = _ops_of(trace, rows)
    idx = np.arange(rows.size)
    live_peak = np.flatnonzero(is_alloc & (idx <= peak) & ((freed_by < 0) | (freed_by > peak)))
    live_peak = live_peak[addr[live_peak] >= 0]
    never = np.flatnonzero(is_alloc & (freed_by < 0) & (addr >= 0))
    calls = _native_calls(trace, rank) if is_gpu(dtype) else None
    api = trace.api_calls
    capacity = None
    if is_gpu(dtype):  # deviceProperties' ids: the ordinals; else the GPU ops' number
        capacity = caps.get((rank, dev), caps.get((rank, -1 if kernel_dev is None else kernel_dev)))
    d = DeviceMemory(
        rank=rank,
        device_type=dtype,
        device=dev,
        label=_label(dtype, dev, rank, n_ranks, kernel_dev),
        capacity_bytes=capacity,
        level_from="trace" if from_trace else "running_sum",
        peak_allocated_bytes=int(level[peak]),
        peak_at_ns=int(t[peak]),
        peak_reserved_bytes=None if resv is None else int(resv.max()),
        reserved_at_peak_bytes=None if resv is None else int(resv[peak]),
        live_at_peak_by_op=_grouped(kinds, names, nbytes, live_peak),
        allocs=int(is_alloc.sum()),
        frees=int(is_free.sum()),
        unmatched_frees=int(unmatched.sum()),
        unmatched_free_bytes=int(-nbytes[unmatched].sum()),
        without_address=int(((is_alloc | is_free) & (addr < 0)).sum()),
        native_alloc_calls=None if calls is None else int(calls.size),
        native_alloc_ns=None
        if calls is None
        else int((api["end"][calls] - api["start"][calls]).sum()),
        live_at_end_bytes=int(nbytes[never].sum()) if (addr >= 0).any() else int(nbytes.sum()),
        never_freed_by_op=_grouped(kinds, names, nbytes, never),
        kernel_device=kernel_dev,
    )
    if windows is not None:
        _per_window(d, trace, rows, level, is_alloc & (freed_by < 0), kinds, names, windows, bound)
    return d


def _per_window(
    d: DeviceMemory,
    trace: Trace,
    rows: I64,
    level: I64,
    kept: npt.NDArray[np.bool_],
    kinds: list[str],
    names: list[str],
    windows: Any,
    bound: I64 | None,
) -> None:
    """Each window of the device's rank: its peak, the level at its end, native calls and
    the host_bound charged to them (``bound``: per window of the rank in start order, when it
    has one entry per window); then the growth test over the levels at the windows' ends."""
    me, api = trace.mem_events, trace.api_calls
    t = me["time"][rows]
    mine = np.flatnonzero(windows.rank == d.rank)
    mine = mine[np.argsort(windows.start[mine], kind="stable")]
    calls = _native_calls(trace, d.rank) if is_gpu(d.device_type) else np.empty(0, np.int64)
    if bound is not None and bound.size != mine.size:
        bound = None  # windows the attribution has not (no GPU op): no share to read
    ends = []
    for k, w in enumerate(mine.tolist()):
        s, e = int(windows.start[w]), int(windows.end[w])
        lo, hi = np.searchsorted(t, [s, e])
        before = int(level[hi - 1]) if hi > 0 else None
        inside = level[lo:hi]
        c = calls[(api["start"][calls] >= s) & (api["start"][calls] < e)]
        d.windows.append(
            {
                "window": windows.name[w],
                "start_ns": s,
                "end_ns": e,
                "peak_allocated_bytes": int(inside.max()) if inside.size else before,
                "live_at_end_bytes": before,
                "allocs": int((me["kind"][rows[lo:hi]] == MemEventKind.ALLOC).sum()),
                "native_alloc_calls": int(c.size) if is_gpu(d.device_type) else None,
                "native_alloc_ns": int((api["end"][c] - api["start"][c]).sum())
                if is_gpu(d.device_type)
                else None,
                "native_alloc_host_bound_ns": None if bound is None else int(bound[k]),
            }
        )
        ends.append((s, e, lo, hi, before))
    series = [b for *_, b in ends if b is not None]
    if len(series) < MIN_GROWTH_WINDOWS:
        return
    _, _, p = mann_kendall(series)
    slope = sen_slope(np.arange(len(series)), series)
    g: dict[str, Any] = {
        "windows": len(series),
        "slope_bytes_per_window": slope,
        "p_value": p,
        "growing": bool(p < GROWTH_ALPHA and slope > 0),
        "held_by": None,
    }
    if g["growing"]:  # who holds what stays: allocations inside the windows never freed
        s0 = ends[0][0]
        pick = np.flatnonzero(kept & (t >= s0))
        by_op = _grouped(kinds, names, me["bytes"][rows], pick)
        if by_op:
            top = by_op[0]
            sel = np.asarray(
                [i for i in pick.tolist() if (kinds[i], names[i]) == (top.kind, top.name)]
            )
            rng = innermost_ranges(trace, rows[sel])
            common = max(set(rng), key=rng.count) if rng else ""
            g["held_by"] = {**top.to_dict(), "range": common}
    d.growth = g


def steady_native_calls(d: DeviceMemory) -> tuple[float, float, float | None, int] | None:
    """(calls per window, ns in the calls per window, host_bound ns charged to them per
    window (None: no host attribution), windows) over the windows after the first (warm-up)
    that have native calls counted; None without such windows."""
    ws = [w for w in d.windows[1:] if w["native_alloc_calls"] is not None]
    if not ws:
        return None
    n = len(ws)
    bound = [w.get("native_alloc_host_bound_ns") for w in ws]
    return (
        sum(w["native_alloc_calls"] for w in ws) / n,
        sum(w["native_alloc_ns"] for w in ws) / n,
        None if None in bound else sum(b for b in bound if b is not None) / n,
        n,
    )


# ---- findings (layer memory) ----------------------------------------------------------------
FRAGMENTATION_SHARE = 0.2  # reserved - allocated at the peak, at least this share of reserved
FRAGMENTATION_MIN_BYTES = 256 << 20


def gib(n: float) -> str:
    """Bytes in GiB (MiB under 1 GiB, KiB under 1 MiB)."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _op_text(o: dict[str, Any] | OpBytes) -> str:
    kind, name = (o["kind"], o["name"]) if isinstance(o, dict) else (o.kind, o.name)
    return f"`{name}`" if name else f"({kind})"


def memory_findings(r: MemoryResult) -> list[Finding]:
    """Peak and headroom, fragmentation at the peak, native allocator calls in steady state,
    growth across the windows. Findings about space, not time, have ``loss_ns`` 0 and
    ``evidence.space`` true."""
    out: list[Finding] = []
    for d in r.devices:
        ev: dict[str, Any] = {"device": d.label, "space": True, "peak_at_ns": d.peak_at_ns}
        if d.allocs and is_gpu(d.device_type):
            held = d.live_at_peak_by_op[0] if d.live_at_peak_by_op else None
            of = ""
            if d.capacity_bytes:
                share = d.peak_allocated_bytes / d.capacity_bytes
                of = f" of {gib(d.capacity_bytes)} ({pct(share)})"
                ev["headroom_bytes"] = d.capacity_bytes - d.peak_allocated_bytes
            who = f": {_op_text(held)} holds {gib(held.bytes)} of it" if held else ""
            out.append(Finding(
                "memory",
                f"{d.label}: peak {gib(d.peak_allocated_bytes)} allocated{of}{who}",
                0,
                evidence={**ev, "peak_allocated_bytes": d.peak_allocated_bytes,
                          "capacity_bytes": d.capacity_bytes,
                          "live_at_peak_by_op": d.to_dict()["live_at_peak_by_op"]},
            ))  # fmt: skip
        frag = d.fragmentation_bytes
        if (
            frag is not None
            and d.reserved_at_peak_bytes
            and frag >= FRAGMENTATION_MIN_BYTES
            and frag >= FRAGMENTATION_SHARE * d.reserved_at_peak_bytes
        ):
            out.append(Finding(
                "memory",
                f"{d.label}: reserved - allocated = {gib(frag)} at the peak "
                f"({pct(frag / d.reserved_at_peak_bytes)} of the {gib(d.reserved_at_peak_bytes)} "
                "the allocator holds is not in tensors)",
                0,
                evidence={**ev, "fragmentation_bytes": frag,
                          "reserved_at_peak_bytes": d.reserved_at_peak_bytes,
                          "peak_allocated_bytes": d.peak_allocated_bytes},
            ))  # fmt: skip
        steady = steady_native_calls(d)
        if steady is not None and steady[0] > 0:
            per, ns, bound, n = steady
            cost = (
                f"{duration(bound)} of host_bound per {r.by} charged to them "
                f"({duration(ns)} in the calls)"
                if bound is not None
                else f"{duration(ns)} in the calls per {r.by} (no host attribution here)"
            )
            out.append(Finding(
                "memory",
                f"{d.label}: native allocations (cudaMalloc and kin) called {per:.1f} times "
                f"per {r.by} after the first, {cost} ({plural(n, 'window')})",
                round(bound * n) if bound is not None else 0,
                evidence={"device": d.label, "calls_per_window": per, "ns_per_window": ns,
                          "host_bound_ns_per_window": bound, "windows": n},
            ))  # fmt: skip
        g = d.growth
        if g is not None and g["growing"]:
            held = g["held_by"]
            who = ""
            if held:
                where = f" in `{held['range']}`" if held["range"] else ""
                who = f", held by {_op_text(held)}{where}"
            out.append(Finding(
                "memory",
                f"{d.label}: live memory grows {gib(g['slope_bytes_per_window'])} per {r.by} "
                f"over {g['windows']} {r.by} windows (p = {g['p_value']:.2g} < "
                f"{GROWTH_ALPHA}){who}",
                0,
                evidence={**ev, **g},
            ))  # fmt: skip
    return out


# ---- A/B (pytimings diff) -----------------------------------------------------------------
def compare_memory(base: list[MemoryResult], new: list[MemoryResult]) -> list[dict[str, Any]]:
    """Per device label on either side: the highest peak over the side's files and the live
    bytes at that peak by op, base against new (one value per side: no interval; a device
    on one side only has None on the other)."""

    def side(results: list[MemoryResult]) -> dict[str, DeviceMemory]:
        out: dict[str, DeviceMemory] = {}
        for r in results:
            for d in r.devices:
                if d.label not in out or d.peak_allocated_bytes > out[d.label].peak_allocated_bytes:
                    out[d.label] = d
        return out

    b, n = side(base), side(new)
    rows = []
    for label in sorted(set(b) | set(n)):
        db, dn = b.get(label), n.get(label)
        ops: dict[tuple[str, str], list[int]] = {}
        for k, d in ((0, db), (1, dn)):
            for o in d.live_at_peak_by_op if d else []:
                ops.setdefault((o.kind, o.name), [0, 0])[k] = o.bytes
        by_op: list[dict[str, Any]] = [
            {
                "kind": k,
                "name": nm,
                "base_bytes": v[0],
                "new_bytes": v[1],
                "delta_bytes": v[1] - v[0],
            }
            for (k, nm), v in ops.items()
        ]
        by_op.sort(key=lambda r: (-abs(r["delta_bytes"]), r["kind"], r["name"]))
        pb = db.peak_allocated_bytes if db else None
        pn = dn.peak_allocated_bytes if dn else None
        rows.append({
            "device": label,
            "base_peak_allocated_bytes": pb,
            "new_peak_allocated_bytes": pn,
            "delta_bytes": None if pb is None or pn is None else pn - pb,
            "base_peak_reserved_bytes": db.peak_reserved_bytes if db else None,
            "new_peak_reserved_bytes": dn.peak_reserved_bytes if dn else None,
            "live_at_peak_by_op": by_op,
        })  # fmt: skip
    return rows
