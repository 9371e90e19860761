"""Chrome trace-event JSON for the Perfetto UI and ``chrome://tracing``.

Layout (one JSON "process" per host process and per GPU, names in metadata events):

* host process (rank, pid): one track per thread with its ranges (NVTX, annotations,
  pytimings regions), CUDA API calls and host activities (Kineto cpu_op and
  python_function, Nsight OS runtime calls; ``cat`` = their kind) as complete (``X``)
  slices;
* GPU (rank, device): an ``attribution`` track with the eight labels of the partition of
  the whole-trace window (see docs/attribution.md), an ``op categories`` track with its
  busy time split by op category (docs/ops.md: a slice per stretch, named by category, so
  each category takes its own colour), then one track per stream with its GPU ops
  (``cat`` = compute, comm or memory; ``args.op_category``, and ``args.op`` for an op the
  launching op is known of) and a track for GPU-side annotations;
* the findings as global instant events at the start of the trace;
* a flow arrow from each CUDA launch call to the GPU op it launched (as Kineto draws them);
* per recording with request timelines (``pytimings.request``): a "requests" process with
  one track per request: the request's slice, its phases nested in it (each until the next
  phase, the last until the request's end) and an instant per token-bearing chunk. A
  request still open when saved is drawn to its last event (counted in ``clamped``).

A track never holds slices that overlap without nesting (viewers mis-draw those): slices
that would are moved to an extra track named ``... (overlap N)``; how many is returned.

Times: the trace-event format counts microseconds. Every timestamp is written relative to
the earliest event (``otherData.pytimings_origin_ns``) as a decimal with exactly three
fractional digits, so it names an integer nanosecond. Perfetto reads it as a double and
rounds ``ts * 1000`` to ns, which gives back the exact ns up to 52 days after the origin.
No ``displayTimeUnit`` is written: Perfetto takes ``"ns"`` there as the unit of ``ts``
while ``chrome://tracing`` takes it as a display setting only, so the two would disagree.
Ranks' clocks are drawn as recorded (not aligned).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from pytimings.analysis.classes import CLASS_NAMES
from pytimings.analysis.critical_path import CriticalPath
from pytimings.analysis.finding import Finding
from pytimings.analysis.launches import link_launches
from pytimings.analysis.memory import device_groups, levels
from pytimings.analysis.op_table import OpTable, category_segments
from pytimings.analysis.ops import CATEGORIES
from pytimings.analysis.partition import LABELS
from pytimings.analysis.result import Attribution
from pytimings.console.progress import task
from pytimings.errors import UsageError
from pytimings.fileout import writing_text
from pytimings.ingest.names import op_name_ids, op_range_parts
from pytimings.model.requests import RequestRecord
from pytimings.model.samples import TelemetrySamples
from pytimings.model.trace import ACTIVITY_KIND_NAMES, OpKind, Trace
from pytimings.report.segments import label_segments
from pytimings.table import Table

I64 = npt.NDArray[np.int64]
_OP_KIND = {
    int(OpKind.KERNEL): "kernel",
    int(OpKind.MEMCPY): "memcpy",
    int(OpKind.MEMSET): "memset",
}


@dataclass
class ExportStats:
    """What was written: events by kind, extra overlap tracks, and what was clamped."""

    events: dict[str, int] = field(default_factory=dict)
    overlap_tracks: int = 0
    origin_ns: int = 0
    clamped: dict[str, int] = field(default_factory=dict)


def nested_lanes(start: I64, end: I64) -> npt.NDArray[np.int32]:
    """For slices sorted by (start, -end): the lane of each such that on every lane, any two
    slices are disjoint or one contains the other (first lane that fits, in order)."""
    n = start.size
    lanes = np.zeros(n, dtype=np.int32)
    if n < 2 or bool(np.all(start[1:] >= end[:-1])):
        return lanes  # already disjoint (the usual case for a stream): one lane
    stacks: list[list[int]] = []
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist(), strict=True)):
        for j, stack in enumerate(stacks):
            while stack and stack[-1] <= s:
                stack.pop()
            if not stack or e <= stack[-1]:
                stack.append(e)
                lanes[i] = j
                break
        else:
            stacks.append([e])
            lanes[i] = len(stacks) - 1
    return lanes


def _json(value: Any) -> str:
    """Compact JSON with non-ASCII kept as UTF-8: Perfetto's JSON reader has not always
    accepted ``\\uXXXX`` escapes."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _ts(ns: int) -> str:
    """Microseconds as an exact decimal (ns >= 0 relative to the origin)."""
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}"


class _Writer:
    """Streams events to the file, assigning JSON pids/tids and naming them."""

    def __init__(self, f: IO[str], origin: int) -> None:
        self.f = f
        self.origin = origin
        self.first = True
        self.next_pid = 1
        self.next_tid = 1
        self.stats = ExportStats(origin_ns=origin)

    def raw(self, event: str, kind: str) -> None:
        self.f.write(("\n" if self.first else ",\n") + event)
        self.first = False
        self.stats.events[kind] = self.stats.events.get(kind, 0) + 1

    def meta(self, what: str, pid: int, tid: int | None, args: dict[str, Any]) -> None:
        t = "" if tid is None else f',"tid":{tid}'
        self.raw(f'{{"ph":"M","name":"{what}","pid":{pid}{t},"args":{_json(args)}}}', "metadata")

    def process(self, name: str, sort_index: int) -> int:
        pid = self.next_pid
        self.next_pid += 1
        self.meta("process_name", pid, None, {"name": name})
        self.meta("process_sort_index", pid, None, {"sort_index": sort_index})
        return pid

    def thread(self, pid: int, name: str, sort_index: int) -> int:
        tid = self.next_tid
        self.next_tid += 1
        self.meta("thread_name", pid, tid, {"name": name})
        self.meta("thread_sort_index", pid, tid, {"sort_index": sort_index})
        return tid

    def track(
        self,
        pid: int,
        name: str,
        sort_index: int,
        start: I64,
        end: I64,
        names: Sequence[str],
        cats: Sequence[str],
        args: Sequence[str],
        kind: str,
    ) -> npt.NDArray[np.int64]:
        """Slices on one track (spilling non-nested overlaps to extra tracks); returns the
        tid each slice went to, in input order.

        ``names``/``cats`` are JSON-encoded strings, ``args`` JSON objects, one per slice.
        """
        order = np.lexsort((-end, start))
        s, e = start[order], end[order]
        lanes = nested_lanes(s, e)
        tids = [
            self.thread(pid, name if k == 0 else f"{name} (overlap {k})", sort_index + k)
            for k in range(int(lanes.max(initial=0)) + 1)
        ]
        self.stats.overlap_tracks += len(tids) - 1
        origin = self.origin
        for i, a, b, lane in zip(
            order.tolist(), s.tolist(), e.tolist(), lanes.tolist(), strict=True
        ):
            self.raw(
                f'{{"ph":"X","pid":{pid},"tid":{tids[lane]},"ts":{_ts(a - origin)},'
                f'"dur":{_ts(b - a)},"name":{names[i]},"cat":{cats[i]},"args":{args[i]}}}',
                kind,
            )
        placed = np.empty(order.size, dtype=np.int64)
        placed[order] = np.asarray(tids, dtype=np.int64)[lanes]
        return placed

    def flows(self, start: I64, src: Placed, dst: Placed, a_rows: I64, o_rows: I64) -> None:
        """A flow arrow from each launch call (row of ``src``) to its GPU op (``dst``), as
        Kineto writes them (``s`` on the call, ``f`` binding to the op's slice)."""
        origin = self.origin
        for k, (ar, orow) in enumerate(zip(a_rows.tolist(), o_rows.tolist(), strict=True)):
            ts_s = _ts(int(src.start[ar]) - origin)
            ts_f = _ts(int(start[orow]) - origin)
            self.raw(
                f'{{"ph":"s","id":{k},"pid":{src.pid[ar]},"tid":{src.tid[ar]},"ts":{ts_s},'
                f'"name":"launch","cat":"launch"}}',
                "flow",
            )
            self.raw(
                f'{{"ph":"f","bp":"e","id":{k},"pid":{dst.pid[orow]},"tid":{dst.tid[orow]},'
                f'"ts":{ts_f},"name":"launch","cat":"launch"}}',
                "flow",
            )


@dataclass
class Placed:
    """Where each row of a table was drawn: JSON pid and tid (-1: not drawn), and start."""

    pid: npt.NDArray[np.int64]
    tid: npt.NDArray[np.int64]
    start: I64

    @classmethod
    def none(cls, start: I64) -> Placed:
        return cls(np.full(start.size, -1, np.int64), np.full(start.size, -1, np.int64), start)


def _json_strings(strings: Sequence[str]) -> list[str]:
    return [_json(s) for s in strings]


RequestGroups = Sequence[tuple[str, Sequence[RequestRecord]]]  # (file, its requests)
TelemetryGroups = Sequence[tuple[str, TelemetrySamples]]  # (file, its GPU telemetry samples)


def _origin(trace: Trace, requests: RequestGroups = (), telemetry: TelemetryGroups = ()) -> int:
    starts = [
        int(trace.table(t)["start"].min())
        for t in ("gpu_ops", "api_calls", "ranges", "host_ops")
        if len(trace.table(t))
    ]
    starts += [min(r.start_ns for r in recs) for _, recs in requests if recs]
    starts += [int(trace.mem_events["time"].min())] if len(trace.mem_events) else []
    starts += [int(s.t_ns.min()) for _, s in telemetry if len(s.t_ns)]
    if not starts:
        raise UsageError("the trace has no events to export")
    return min(starts)


def _clamped_ends(start: I64, end: I64, what: str, stats: ExportStats) -> I64:
    bad = int(np.count_nonzero(end < start))
    if bad:
        stats.clamped[f"{what} ending before they start (drawn zero-length)"] = bad
    return np.maximum(end, start)


def write_perfetto(
    trace: Trace,
    path: str | os.PathLike[str],
    attribution: Attribution | None = None,
    ops: OpTable | None = None,
    findings: Sequence[Finding] = (),
    flows: bool = True,
    critical_path: CriticalPath | None = None,
    requests: RequestGroups = (),
    telemetry: TelemetryGroups = (),
) -> ExportStats:
    """Write ``trace`` (and the attribution lanes of ``attribution``, a whole-trace
    :func:`~pytimings.analysis.attribution.attribute` result, with the op categories of
    its op table ``ops``, and ``findings`` as instant events) to ``path``;
    ``flows`` draws an arrow from each launch call to the GPU op it launched;
    ``critical_path`` (:func:`pytimings.analysis.replay.critical_path`) is drawn as a track
    of its links joined by flow arrows; ``requests`` (file name, its request timelines) are
    drawn one track per request; ``telemetry`` (file name, its samples, on the trace's
    clock) as counter tracks, one process per file and GPU, one counter per metric."""
    if attribution is not None and attribution.by is not None:
        raise UsageError("the attribution lane is drawn from a whole-trace attribution (by=None)")
    origin = _origin(trace, requests, telemetry)
    with writing_text(path, "--perfetto") as f:
        f.write('{"traceEvents":[')
        w = _Writer(f, origin)
        names = _json_strings(trace.strings)
        api_at = _host(w, trace, names)
        op_at = _gpus(w, trace, names, attribution, ops)
        _memory_counters(w, trace)
        for k, (name, samples) in enumerate(telemetry):
            _telemetry_counters(w, name, samples, 30_000 + 100 * k)
        if flows and len(trace.gpu_ops) and len(trace.api_calls):
            launches = attribution.launches if attribution is not None else link_launches(trace)
            o_rows = np.flatnonzero(launches.api_row >= 0)
            a_rows = launches.api_row[o_rows]
            drawn = (api_at.tid[a_rows] >= 0) & (op_at.tid[o_rows] >= 0)
            w.flows(trace.gpu_ops["start"], api_at, op_at, a_rows[drawn], o_rows[drawn])
        _findings(w, findings)
        if critical_path is not None:
            _critical_path(w, critical_path)
        for name, recs in requests:
            _requests(w, name, recs)
        other = {"pytimings_origin_ns": origin, "overlap_tracks": w.stats.overlap_tracks}
        f.write(f'\n],\n"otherData":{_json(other)}}}\n')
    return w.stats


def _host(w: _Writer, trace: Trace, names: list[str]) -> Placed:
    """Per host process: a track per thread (ranges, API calls, host activities), and one
    for events that name no known thread (e.g. synchronisation rows). Returns where API
    calls went."""
    th, rg, api, ho = trace.threads, trace.ranges, trace.api_calls, trace.host_ops
    # ranges by the one name rule (an emit_nvtx range: its op's name; the rest in its args)
    canon = op_name_ids(trace.strings)
    range_names = [names[i] if i < len(names) else _json(trace.strings[i]) for i in canon]
    api_at = Placed.none(api["start"])
    n_th = len(th)
    host_rg = np.flatnonzero(rg["device"] < 0)
    rg_thread = rg["thread"][host_rg]
    keys = sorted(
        set(zip(th["rank"].tolist(), th["pid"].tolist(), strict=True))
        | set(zip(api["rank"].tolist(), api["pid"].tolist(), strict=True))
        | set(zip(rg["rank"][host_rg].tolist(), rg["pid"][host_rg].tolist(), strict=True))
        | set(zip(ho["rank"].tolist(), ho["pid"].tolist(), strict=True))
    )
    rg_end = _clamped_ends(rg["start"], rg["end"], "ranges", w.stats)
    api_end = _clamped_ends(api["start"], api["end"], "API calls", w.stats)
    ho_end = _clamped_ends(ho["start"], ho["end"], "host activities", w.stats)
    ho_cat = [_json(k) for k in ACTIVITY_KIND_NAMES]
    rg_lost = host_rg[(rg_thread < 0) | (rg_thread >= n_th)]
    api_lost = np.flatnonzero((api["thread"] < 0) | (api["thread"] >= n_th))
    ho_lost = np.flatnonzero((ho["thread"] < 0) | (ho["thread"] >= n_th))

    def lost(rows: I64, table: Table, rank: int, pid: int) -> I64:
        sel: I64 = rows[(table["rank"][rows] == rank) & (table["pid"][rows] == pid)]
        return sel

    with task("Exporting host threads", total=len(host_rg) + len(api) + len(ho)) as bar:
        for pi, (rank, pid) in enumerate(keys):
            rows = np.flatnonzero((th["rank"] == rank) & (th["pid"] == pid)).tolist()
            tracks = [
                (
                    f"{trace.strings[int(th['name'][t])] or 'thread'} (tid {int(th['tid'][t])})",
                    host_rg[rg_thread == t],
                    np.flatnonzero(api["thread"] == t),
                    np.flatnonzero(ho["thread"] == t),
                )
                for t in rows
            ]
            tracks.append(
                (
                    "(no thread)",
                    lost(rg_lost, rg, rank, pid),
                    lost(api_lost, api, rank, pid),
                    lost(ho_lost, ho, rank, pid),
                )
            )
            tracks = [t for t in tracks if t[1].size + t[2].size + t[3].size]
            if not tracks:
                continue  # a process with threads but no events
            jpid = w.process(f"rank {rank} host (pid {pid})", pi)
            for si, (tname, r_sel, a_sel, h_sel) in enumerate(tracks):
                args = [_range_args(trace, int(i)) for i in r_sel.tolist()]
                args += [f'{{"correlation":{int(c)}}}' for c in api["correlation"][a_sel].tolist()]
                args += ["{}"] * h_sel.size
                tids = w.track(
                    jpid,
                    tname,
                    1000 * si,
                    np.concatenate([rg["start"][r_sel], api["start"][a_sel], ho["start"][h_sel]]),
                    np.concatenate([rg_end[r_sel], api_end[a_sel], ho_end[h_sel]]),
                    [range_names[i] for i in rg["name"][r_sel].tolist()]
                    + [names[i] for i in api["name"][a_sel].tolist()]
                    + [names[i] for i in ho["name"][h_sel].tolist()],
                    ['"range"'] * r_sel.size
                    + ['"cuda_api"'] * a_sel.size
                    + [ho_cat[k] for k in ho["kind"][h_sel].tolist()],
                    args,
                    "slice",
                )
                api_at.pid[a_sel] = jpid
                api_at.tid[a_sel] = tids[r_sel.size : r_sel.size + a_sel.size]
                bar.advance(r_sel.size + a_sel.size + h_sel.size)
    return api_at


def _memory_counters(w: _Writer, trace: Trace) -> None:
    """Per device with memory events: counter tracks of the allocated and (when known)
    reserved bytes after each event (docs/memory.md)."""
    for k, (rank, dtype, dev, rows) in enumerate(device_groups(trace)):
        label = {0: "cpu", 1: f"cuda:{dev}" if dev >= 0 else "cuda"}.get(dtype, f"{dtype}:{dev}")
        pid = w.process(f"rank {rank} memory {label}", 20_000 + k)
        level, _, resv = levels(trace, rows, dtype)
        t = (trace.mem_events["time"][rows] - w.origin).tolist()
        for name, values in (("allocated", level), ("reserved", resv)):
            if values is None:
                continue
            for ts, v in zip(t, values.tolist(), strict=True):
                w.raw(
                    f'{{"ph":"C","pid":{pid},"name":"{name}","ts":{_ts(ts)},'
                    f'"args":{{"bytes":{v}}}}}',
                    "memory counter",
                )


def _telemetry_counters(w: _Writer, name: str, s: TelemetrySamples, sort_index: int) -> None:
    """One process per GPU of ``s`` (``telemetry GPU N (name)``), a counter track per
    metric with its samples' values (docs/telemetry.md)."""
    for gpu in s.gpus():
        pid = w.process(f"telemetry GPU {gpu} ({name})", sort_index + gpu)
        for metric in s.metrics():
            t, v = s.series(gpu, metric)
            if not len(t):
                continue
            label = _json(metric)
            for ts, x in zip((t - w.origin).tolist(), v.tolist(), strict=True):
                w.raw(
                    f'{{"ph":"C","pid":{pid},"name":{label},"ts":{_ts(ts)},'
                    f'"args":{{"value":{_json(x)}}}}}',
                    "telemetry counter",
                )


def _range_args(trace: Trace, i: int) -> str:
    rg = trace.ranges
    out: dict[str, Any] = {"depth": int(rg["depth"][i])}
    out |= op_range_parts(trace.strings[int(rg["name"][i])])[1]  # seq, op_id, ...
    for col in ("domain", "category"):
        s = trace.strings[int(rg[col][i])]
        if s:
            out[col] = s
    p = float(rg["payload"][i])
    if not np.isnan(p):
        out["payload"] = p
    return _json(out)


def _gpus(
    w: _Writer, trace: Trace, names: list[str], a: Attribution | None, table: OpTable | None
) -> Placed:
    """Per (rank, device): the attribution lane (with ``table``: its op categories' lane),
    a track per stream, GPU annotations. Returns where GPU ops went."""
    ops, rg = trace.gpu_ops, trace.ranges
    op_at = Placed.none(ops["start"])
    dev_names = {
        (int(r), int(d)): trace.strings[int(n)]
        for r, d, n in zip(
            trace.devices["rank"], trace.devices["device"], trace.devices["name"], strict=True
        )
    }
    keys = sorted(
        {(int(r), int(d)) for r, d in zip(ops["rank"], ops["device"], strict=True)}
        | {(int(r), int(d)) for r, d in zip(rg["rank"], rg["device"], strict=True) if d >= 0}
    )
    ends = _clamped_ends(ops["start"], ops["end"], "GPU ops", w.stats)
    classes = a.classes if a is not None else None
    lanes = (
        set(zip(a.windows["rank"].tolist(), a.windows["device"].tolist(), strict=True))
        if a is not None
        else set()
    )
    cat_names = [_json(c) for c in CLASS_NAMES]
    with task("Exporting GPU ops", total=len(ops)) as bar:
        for di, (rank, dev) in enumerate(keys):
            label = dev_names.get((rank, dev), "")
            jpid = w.process(
                f"rank {rank} GPU {dev}" + (f": {label}" if label else ""), 10_000 + di
            )
            if a is not None and (rank, dev) in lanes:  # a device with no GPU ops has none
                _attribution_lane(w, jpid, a, rank, dev)
                if table is not None:
                    _category_lane(w, jpid, a, table, rank, dev)
            on_dev = np.flatnonzero((ops["rank"] == rank) & (ops["device"] == dev))
            streams = ops["stream"][on_dev]
            for si, s in enumerate(np.unique(streams).tolist()):
                sel = on_dev[streams == s]
                cats = (
                    [cat_names[c] for c in classes[sel].tolist()]
                    if classes is not None
                    else ['"gpu"'] * sel.size
                )
                op_at.pid[sel] = jpid
                op_at.tid[sel] = w.track(
                    jpid,
                    f"stream {s}",
                    1000 * (si + 1),
                    ops["start"][sel],
                    ends[sel],
                    [names[i] for i in ops["name"][sel].tolist()],
                    cats,
                    [_op_args(ops, int(i), table) for i in sel.tolist()],
                    "gpu_op",
                )
                bar.advance(sel.size)
            g_sel = np.flatnonzero((rg["rank"] == rank) & (rg["device"] == dev))
            if g_sel.size:
                w.track(
                    jpid,
                    "GPU annotations",
                    10**9,
                    rg["start"][g_sel],
                    np.maximum(rg["end"][g_sel], rg["start"][g_sel]),
                    [names[i] for i in rg["name"][g_sel].tolist()],
                    ['"gpu_annotation"'] * g_sel.size,
                    [_range_args(trace, int(i)) for i in g_sel.tolist()],
                    "slice",
                )
    return op_at


def _op_args(ops: Any, i: int, table: OpTable | None = None) -> str:
    out: dict[str, Any] = {"kind": _OP_KIND.get(int(ops["kind"][i]), "op")}
    if table is not None and table.category[i] < len(CATEGORIES):
        out["op_category"] = CATEGORIES[int(table.category[i])]
        if table.op_row[i] >= 0:
            out["op"] = table.ops[int(table.op_row[i])]["name"]
    corr = int(ops["correlation"][i])
    if corr >= 0:
        out["correlation"] = corr
    if int(ops["kind"][i]) != OpKind.KERNEL:
        out["bytes"] = int(ops["bytes"][i])
    g = int(ops["graph"][i])
    if g >= 0:
        out["graph"] = g
    return _json(out)


def _attribution_lane(w: _Writer, jpid: int, a: Attribution, rank: int, dev: int) -> None:
    s, e, lab = label_segments(a, rank, dev)
    _segment_lane(w, jpid, "attribution", 0, s, e, lab, LABELS)


def _category_lane(
    w: _Writer, jpid: int, a: Attribution, table: OpTable, rank: int, dev: int
) -> None:
    s, e, cat = category_segments(a, table, rank, dev)
    _segment_lane(w, jpid, "op categories", 1, s, e, cat, CATEGORIES, "op_category")


def _segment_lane(
    w: _Writer,
    jpid: int,
    name: str,
    sort_index: int,
    s: I64,
    e: I64,
    which: npt.NDArray[np.integer[Any]],
    names: Sequence[str],
    kind: str = "attribution",
) -> None:
    """A track of disjoint segments, each named ``names[which[i]]`` (``cat`` = ``kind``)."""
    named = [_json(x) for x in names]
    w.track(
        jpid,
        name,
        sort_index,
        s,
        e,
        [named[i] for i in which.tolist()],
        [_json(kind)] * s.size,
        ["{}"] * s.size,
        kind,
    )


def _findings(w: _Writer, findings: Sequence[Finding]) -> None:
    for i, fd in enumerate(findings, 1):
        args = _json({"layer": fd.layer, "loss_ns": fd.loss_ns, "evidence": fd.evidence})
        name = _json(f"#{i} [{fd.layer}] {fd.title}")
        w.raw(
            f'{{"ph":"i","s":"g","pid":0,"tid":0,"ts":{_ts(0)},"name":{name},'
            f'"cat":"finding","args":{args}}}',
            "finding",
        )


def _requests(w: _Writer, name: str, records: Sequence[RequestRecord]) -> None:
    """One track per request: its slice, its phases nested in it, a token instant per chunk."""
    if not records:
        return
    pid = w.process(f"requests ({name})", -2)
    unfinished = 0
    for k, r in enumerate(sorted(records, key=lambda q: (q.start_ns, q.req_id))):
        phases = sorted(r.phases, key=lambda p: p[1])
        end = r.end_ns
        if end is None:
            unfinished += 1
            end = max([r.start_ns, *r.chunk_ns, *(t for _, t in phases)])
        starts = [r.start_ns] + [t for _, t in phases]
        ends = [end] + [t for _, t in phases[1:]] + ([end] if phases else [])
        info: dict[str, Any] = {"status": r.status, "output_tokens": r.n_output}
        if r.input_tokens is not None:
            info["input_tokens"] = r.input_tokens
        if r.error is not None:
            info["error"] = f"{r.error}: {r.error_detail}" if r.error_detail else r.error
        tids = w.track(
            pid,
            f"request {r.req_id}",
            k,
            np.asarray(starts, np.int64),
            np.maximum(np.asarray(ends, np.int64), np.asarray(starts, np.int64)),
            [_json(r.req_id)] + [_json(n) for n, _ in phases],
            ['"request"'] + ['"phase"'] * len(phases),
            [_json(info)] + ["{}"] * len(phases),
            "request",
        )
        tid = int(tids[0])
        for t, n in zip(r.chunk_ns, r.chunk_tokens, strict=True):
            w.raw(
                f'{{"ph":"i","s":"t","pid":{pid},"tid":{tid},"ts":{_ts(t - w.origin)},'
                f'"name":"token","cat":"token","args":{{"tokens":{n}}}}}',
                "token",
            )
    if unfinished:
        key = "requests still open when saved (drawn to their last event)"
        w.stats.clamped[key] = w.stats.clamped.get(key, 0) + unfinished


def _critical_path(w: _Writer, cp: CriticalPath) -> None:
    """One track of the chain's links, in time order, each joined to the next by a flow."""
    pid = w.process(f"critical path: {cp.window.name} (rank {cp.window.rank})", -1)
    links = cp.links
    start = np.asarray([lk.start_ns for lk in links], dtype=np.int64)
    end = np.asarray([lk.end_ns for lk in links], dtype=np.int64)
    tids = w.track(
        pid,
        "links",
        0,
        start,
        end,
        [_json(f"{lk.kind.value}: {lk.name}" if lk.name else lk.kind.value) for lk in links],
        [_json(lk.kind.value) for lk in links],
        [_json({"share": lk.share}) for lk in links],
        "critical_path",
    )
    base = 1 << 40  # flow ids apart from the launch flows' 0, 1, ...
    for k in range(len(links) - 1):
        for ph, i, bp in (("s", k, ""), ("f", k + 1, ',"bp":"e"')):
            ts = _ts(int(end[k] if ph == "s" else start[k + 1]) - w.origin)
            w.raw(
                f'{{"ph":"{ph}"{bp},"id":{base + k},"pid":{pid},"tid":{tids[i]},"ts":{ts},'
                f'"name":"critical path","cat":"critical_path"}}',
                "flow",
            )
