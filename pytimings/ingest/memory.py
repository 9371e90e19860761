"""Device memory events of every format -> the model's ``mem_events`` table.

* Kineto (``profile_memory=True``): one ``[memory]`` instant event per allocation and free,
  ``cat`` ``cpu_instant_event`` (2022 on: ``Addr``, ``Bytes``, ``Device Type``, ``Device Id``,
  ``Total Allocated``, ``Total Reserved``) or no ``cat`` (2021: ``Bytes``, ``Device Type``,
  ``Device Id`` only; no address, so frees cannot be matched). ``Device Type`` is c10's
  (0 CPU, 1 CUDA); a negative ``Bytes`` is a free. The Kineto scanner
  (``pytimings._native._jsonscan``) writes their columns in its single pass over the file;
  :func:`kineto_mem_events` makes them the table.
* Nsight Systems (``--cuda-memory-usage=true``): ``CUDA_GPU_MEMORY_USAGE_EVENTS`` rows
  (``memoryOperationType`` 0 allocation, 1 deallocation; ``memKind`` 2 device memory, the
  others pinned/managed/... host-side kinds kept with device type CPU); capacity from
  ``TARGET_INFO_GPU.totalMemory``.
* ``torch.cuda.memory._snapshot()`` pickles (:func:`load_snapshot`): read with an unpickler
  that resolves no global at all (a snapshot is plain dicts, lists, strings and numbers), so
  a pickle that names a class or function is refused without running anything.
* Recordings' ``memory`` table (``pytimings.sample_memory``): level samples, read by
  :func:`pytimings.ingest.recording_file.load_memory` and made rows by
  :mod:`pytimings.ingest.recording` (this module does not import pyarrow).
"""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.errors import TraceFormatError
from pytimings.model.trace import (
    MEM_EVENT_SCHEMA,
    MemEventKind,
    MemSource,
    StringTable,
    Trace,
    conform,
)
from pytimings.table import Table

__all__ = [
    "CPU",
    "CUDA",
    "kineto_mem_events",
    "load_snapshot",
    "nsys_memory",
]

I64 = npt.NDArray[np.int64]
CUDA = 1  # c10::DeviceType::CUDA, as Kineto writes "Device Type"
CPU = 0  # c10::DeviceType::CPU


def kineto_mem_events(
    cols: Mapping[str, npt.NDArray[Any]],
    thread_of: Callable[[I64, I64], npt.NDArray[np.int32]],
    rank: int,
) -> Table:
    """The ``[memory]`` events the Kineto scanner gathered (columns ``start`` = time,
    ``index``, and the event's args: ``bytes``, ``addr``, ``device_type``, ``device``,
    ``allocated``, ``reserved``; ``pid``, ``tid``) in time order (ties: document order);
    ``thread_of`` maps (pid, tid) keys to thread rows."""
    if len(cols["start"]) == 0:
        return Table.empty(MEM_EVENT_SCHEMA)
    order = np.lexsort((cols["index"], cols["start"]))
    events = {name: column[order] for name, column in cols.items()}
    nbytes = events["bytes"]
    count = len(nbytes)
    return conform(
        {
            "time": events["start"],
            "kind": np.where(nbytes < 0, MemEventKind.FREE, MemEventKind.ALLOC),
            "bytes": nbytes,
            "addr": events["addr"],
            "device_type": events["device_type"],
            "device": events["device"],
            "allocated": events["allocated"],
            "reserved": events["reserved"],
            "source": np.full(count, MemSource.KINETO),
            "site": np.zeros(count, np.int32),
            "thread": thread_of(events["pid"], events["tid"]),
            "pid": events["pid"],
            "rank": np.full(count, rank),
        },
        MEM_EVENT_SCHEMA,
    )


# ---- Nsight Systems ------------------------------------------------------------------------
NSYS_TABLE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
_NSYS_DEVICE_KIND = 2  # CUDA_MEMOPR_MEMORY_KIND_DEVICE
_NSYS_NEEDED = {"start", "globalPid", "deviceId", "address", "bytes", "memoryOperationType"}


def nsys_memory(
    small: Callable[[str], list[tuple[Any, ...]]],
    columns: Callable[[str], set[str]],
    has: Callable[[str], bool],
    intern: Callable[[str], int],
    api: Mapping[str, npt.NDArray[Any]],
    rank: int,
) -> tuple[Table, dict[int, int]]:
    """``CUDA_GPU_MEMORY_USAGE_EVENTS`` as mem_events (each row's thread: that of the API
    call with its correlation id), and each GPU's ``totalMemory`` (bytes) when the export
    has ``TARGET_INFO_GPU``."""
    capacity: dict[int, int] = {}
    if has("TARGET_INFO_GPU") and {"id", "totalMemory"} <= columns("TARGET_INFO_GPU"):
        dev_col = "cuDevice" if "cuDevice" in columns("TARGET_INFO_GPU") else "id"
        for d, total in small(f'SELECT "{dev_col}", totalMemory FROM TARGET_INFO_GPU'):
            if isinstance(d, int) and isinstance(total, int) and total > 0:
                capacity[d] = total
    if not has(NSYS_TABLE) or not _NSYS_NEEDED <= columns(NSYS_TABLE):
        return Table.empty(MEM_EVENT_SCHEMA), capacity
    have = columns(NSYS_TABLE)
    extra = ", ".join(
        c if c in have else f"NULL AS {c}" for c in ("memKind", "correlationId", "name")
    )
    rows = small(
        "SELECT start, globalPid, deviceId, address, bytes, memoryOperationType, "
        f"{extra} FROM {NSYS_TABLE} ORDER BY start, rowid"
    )
    if not rows:
        return Table.empty(MEM_EVENT_SCHEMA), capacity
    got = [list(c) for c in zip(*rows, strict=True)]
    start, gpid, dev, addr, nbytes, op, kind, corr, name = got
    free = np.asarray(op, np.int64) == 1
    size = np.abs(np.asarray(nbytes, np.int64))
    device_mem = np.asarray([k in (None, _NSYS_DEVICE_KIND) for k in kind])
    pid = (np.asarray(gpid, np.int64) >> 24) & 0xFFFFFF
    thread_of = {
        (int(p), int(c)): int(t)
        for p, c, t in zip(api["pid"], api["correlation"], api["thread"], strict=True)
        if c >= 0
    }
    thread = [
        thread_of.get((int(p), c if isinstance(c, int) else -1), -1)
        for p, c in zip(pid, corr, strict=True)
    ]
    n = len(start)
    return (
        conform(
            {
                "time": start,
                "kind": np.where(free, MemEventKind.FREE, MemEventKind.ALLOC),
                "bytes": np.where(free, -size, size),
                "addr": addr,
                "device_type": np.where(device_mem, CUDA, CPU),
                "device": np.where(device_mem, np.asarray(dev, np.int64), -1),
                "allocated": np.full(n, -1),
                "reserved": np.full(n, -1),
                "source": np.full(n, MemSource.NSYS),
                "site": [intern(s) if isinstance(s, str) else 0 for s in name],
                "thread": thread,
                "pid": pid,
                "rank": np.full(n, rank),
            },
            MEM_EVENT_SCHEMA,
        ),
        capacity,
    )


# ---- torch.cuda.memory._snapshot() pickles ---------------------------------------------------
class _PlainData(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names {module}.{name}")


def _snapshot_dict(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TraceFormatError(path, f"cannot read ({e.strerror or e})") from None
    try:
        snap = _PlainData(io.BytesIO(data)).load()
    except pickle.UnpicklingError as e:
        raise TraceFormatError(
            path,
            f"refused: a memory snapshot pickle holds only plain data, and this one runs or "
            f"imports code ({e})",
        ) from None
    except (EOFError, ValueError, TypeError, IndexError, KeyError, MemoryError) as e:
        raise TraceFormatError(path, f"corrupt pickle ({type(e).__name__}: {e})") from None
    if not isinstance(snap, dict) or "segments" not in snap:
        raise TraceFormatError(
            path, "a pickle, but not a torch.cuda.memory._snapshot() (no 'segments')"
        )
    return snap


def _site(frames: Any) -> str:
    """The innermost Python frame of a snapshot stack (else its innermost frame)."""
    if not isinstance(frames, list) or not frames:
        return ""
    good = [f for f in frames if isinstance(f, dict)]
    py = [f for f in good if str(f.get("filename", "")).endswith(".py")]
    f = (py or good or [{}])[0]
    if not f:
        return ""
    return f"{f.get('name', '?')} ({f.get('filename', '?')}:{f.get('line', '?')})"


_SEGMENT_UP = ("segment_alloc", "segment_map")
_SEGMENT_DOWN = ("segment_free", "segment_unmap")


def load_snapshot(path: str | os.PathLike[str]) -> Trace:
    """A ``torch.cuda.memory._snapshot()`` pickle as a Trace holding only mem_events: per
    device, each ``alloc`` and ``free_completed`` of its ``device_traces`` with the totals
    after it, counted back from the state at the snapshot (allocated: the blocks in use;
    reserved: the segments' sizes); segment actions move reserved only. Capacity unknown."""
    p = os.fspath(path)
    snap = _snapshot_dict(p)
    segments = snap.get("segments")
    traces = snap.get("device_traces") or []
    if not isinstance(segments, list) or not isinstance(traces, list):
        raise TraceFormatError(p, "segments and device_traces must be lists")
    end_alloc: dict[int, int] = {}
    end_resv: dict[int, int] = {}
    try:
        for s in segments:
            d = int(s["device"])
            end_resv[d] = end_resv.get(d, 0) + int(s["total_size"])
            for b in s.get("blocks", []):
                if str(b.get("state", "")).startswith("active"):
                    end_alloc[d] = end_alloc.get(d, 0) + int(b["size"])
    except (KeyError, TypeError, ValueError) as e:
        raise TraceFormatError(
            p, f"a segment or block lacks a field or has a bad one ({e})"
        ) from None
    st = StringTable()
    cols: dict[str, list[int]] = {c: [] for c in MEM_EVENT_SCHEMA}
    ignored = 0
    for d, actions in enumerate(traces):
        if not isinstance(actions, list):
            raise TraceFormatError(p, f"device_traces[{d}] is not a list")
        rows: list[tuple[int, int, int, int, int, int]] = []  # time, kind, bytes, addr, dA, dR
        for i, a in enumerate(actions):
            try:
                act, size, addr = a["action"], int(a["size"]), int(a["addr"])
                t = int(a["time_us"]) * 1000
            except (KeyError, TypeError, ValueError) as e:
                raise TraceFormatError(
                    p, f"device_traces[{d}][{i}] lacks action/addr/size/time_us ({e})"
                ) from None
            if act == "alloc":
                rows.append((t, MemEventKind.ALLOC, size, addr, size, 0))
                cols["site"].append(st.intern(_site(a.get("frames"))))
            elif act == "free_completed":
                rows.append((t, MemEventKind.FREE, -size, addr, -size, 0))
                cols["site"].append(0)
            elif act in _SEGMENT_UP or act in _SEGMENT_DOWN:
                sign = 1 if act in _SEGMENT_UP else -1
                rows.append((t, MemEventKind.SAMPLE, 0, addr, 0, sign * size))
                cols["site"].append(0)
            else:
                ignored += 1  # free_requested (completion follows), snapshot, oom markers
        if not rows:
            continue
        arr = np.asarray(rows, np.int64)
        # totals after each event = the state at the snapshot less what came later
        later_a = np.cumsum(arr[::-1, 4])[::-1] - arr[:, 4]
        later_r = np.cumsum(arr[::-1, 5])[::-1] - arr[:, 5]
        n = len(rows)
        cols["time"] += arr[:, 0].tolist()
        cols["kind"] += arr[:, 1].tolist()
        cols["bytes"] += arr[:, 2].tolist()
        cols["addr"] += arr[:, 3].tolist()
        cols["allocated"] += (end_alloc.get(d, 0) - later_a).tolist()
        cols["reserved"] += (end_resv.get(d, 0) - later_r).tolist()
        cols["device_type"] += [CUDA] * n
        cols["device"] += [d] * n
        cols["source"] += [MemSource.SNAPSHOT] * n
        cols["thread"] += [-1] * n
        cols["pid"] += [0] * n
        cols["rank"] += [0] * n
    if not cols["time"]:
        raise TraceFormatError(p, "the snapshot's device_traces hold no alloc or free actions")
    tr = Trace.empty()
    tr.strings = st.strings
    tr.mem_events = conform(cols, MEM_EVENT_SCHEMA)
    tr.meta = {"format": "memory-snapshot", "path": p, "snapshot_actions_ignored": ignored}
    return tr
