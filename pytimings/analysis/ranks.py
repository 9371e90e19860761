"""Many ranks: each rank's file is loaded and attributed as its own task; the client reduces.

A task (:func:`analyze_file`) loads one rank's trace, attributes it, runs the findings that
need the events (host-bound gaps, kernels, graphs, memory) and returns a :class:`RankResult`:
the window rows, launch latencies, the communication ops and those findings. Traces never
leave the worker, so a worker holds one rank's data at a time and the client holds only the
results. The client then computes what needs all ranks: the collectives (arrival skew, wait,
straggler), the findings on the totals (hardware, parallel, collectives, tail), and the
report, exactly as :func:`~pytimings.analysis.attribution.attribute` would on all ranks
loaded together (the per-rank partition does not depend on other ranks).

Executors: ``"local"`` (a pool of processes here) or ``"dask"`` (a ``dask.distributed``
cluster: a ``LocalCluster`` of single-threaded worker processes, or the scheduler at
``scheduler="tcp://HOST:PORT"``; every worker needs pytimings installed and the trace
files at the same paths, e.g. on a shared file system).
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import os
import re
import sys
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from itertools import repeat
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.analysis import findings as fnd
from pytimings.analysis.attribution import attribute
from pytimings.analysis.classes import COMM
from pytimings.analysis.collectives import collectives, compute_under_comm
from pytimings.analysis.finding import Finding, runs_text
from pytimings.analysis.host import HostAttribution, merge_host
from pytimings.analysis.launches import NO_LAUNCH, Launches
from pytimings.analysis.op_table import LazyOpTable, OpTable, merge_tables
from pytimings.analysis.ops import GpuSpec
from pytimings.analysis.partition import Gaps
from pytimings.analysis.result import Attribution, LaunchLatency
from pytimings.analysis.savings import add_savings
from pytimings.analysis.windows import window_numbers
from pytimings.console import progress
from pytimings.errors import PytimingsError, TraceFormatError, UsageError, install_hint
from pytimings.ingest import assign_ranks, expand_paths, load_file, set_rank
from pytimings.ingest.processes import select_rank, split_processes
from pytimings.model.trace import SCHEMAS, StringTable, Trace
from pytimings.table import Table

EXECUTORS = ("local", "dask")


@dataclass
class RankResult:
    """What one task sends back: small, whatever the size of the rank's trace."""

    path: str
    rank: int
    rank_source: str
    windows: Table
    window_thread: npt.NDArray[np.int32]  # tie-break of the window order (as attribute())
    latency_ns: npt.NDArray[np.int64]
    comm: Trace  # the rank's communication ops only (for the collectives)
    findings: list[Finding]
    host: HostAttribution  # names renumbered into host_names
    host_names: list[str]
    graphs: list[dict[str, Any]] = field(default_factory=list)  # Attribution.graphs
    ops: OpTable | None = None  # the rank's op table, without its per-GPU-op arrays
    ignored: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    devices: list[int] = field(default_factory=list)  # every device the rank has, selected or not
    # per device: the compute intervals under its communication ops (exposed vs waiting)
    compute_under_comm: dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = field(
        default_factory=dict
    )


@dataclass
class MergedRanks:
    """What the client makes of the ranks' results: the all-ranks attribution (its
    ``trace`` holds only the communication ops; per-op details that index a rank's trace
    are not shipped: ``gaps`` and ``launches`` empty, ``window_range_rows`` and the op rows
    of ``launch_latency`` -1), the ranked findings (each rank's, merged by
    :func:`rank_findings`, and those across ranks) and the ranks' op tables merged (None
    when a rank sent none)."""

    attribution: Attribution
    findings: list[Finding]
    ops: OpTable | None


def analyze_file(
    path: str,
    position: int,
    by: str | None,
    devices: Sequence[int] | None,
    comm_kernels: Sequence[str] = (),
    gpu: GpuSpec | None = None,
) -> RankResult:
    """The task: one rank's file -> its :class:`RankResult` (``position``: its place among
    the files, the rank of last resort as in :func:`pytimings.load`)."""
    try:
        trace = load_file(path)
        ((rank, source),) = assign_ranks([path], [trace], None)
        if source == "file order":
            rank = position
        set_rank(trace, rank, source)
        return _analyze_rank(path, trace, rank, source, by, devices, comm_kernels, gpu)
    except TraceFormatError as exc:  # re-raised as a plain message: crosses processes intact
        raise UsageError(str(exc)) from None
    except PytimingsError as exc:
        raise UsageError(f"{path}: {exc}") from None


def analyze_file_processes(
    path: str,
    by: str | None,
    devices: Sequence[int] | None,
    comm_kernels: Sequence[str] = (),
    gpu: GpuSpec | None = None,
) -> list[RankResult]:
    """The task with ``processes_as_ranks``: one file -> a :class:`RankResult` per process
    with GPU ops, ranked 0.. within the file (:func:`_renumber` then places the files'
    ranks one after another); the file's dropped counts travel with its first rank."""
    try:
        trace = split_processes(load_file(path))
        ranks = sorted(set(trace.meta["process_ranks"].values())) or [0]
        out = []
        for i, rank in enumerate(ranks):
            one = select_rank(trace, rank) if len(ranks) > 1 else trace
            one.dropped = dict(trace.dropped) if i == 0 else {}
            out.append(_analyze_rank(path, one, rank, "process", by, devices, comm_kernels, gpu))
        return out
    except TraceFormatError as exc:
        raise UsageError(str(exc)) from None
    except PytimingsError as exc:
        raise UsageError(f"{path}: {exc}") from None


def _renumber(per_file: Sequence[Sequence[RankResult]]) -> list[RankResult]:
    """Each file's ranks (0.. within the file, from :func:`analyze_file_processes`) after the
    previous file's (file order), as :func:`pytimings.load` numbers them."""
    out: list[RankResult] = []
    for results in per_file:
        shift = len(out)
        for r in results:
            if shift:
                r.rank += shift
                r.windows = r.windows.with_columns(
                    rank=(r.windows["rank"] + shift).astype(np.int16)
                )
                ops = r.comm.gpu_ops
                r.comm.gpu_ops = ops.with_columns(rank=(ops["rank"] + shift).astype(np.int16))
                r.graphs = [{**g, "rank": g["rank"] + shift} for g in r.graphs]
            out.append(r)
    return out


def _analyze_rank(
    path: str,
    trace: Trace,
    rank: int,
    source: str,
    by: str | None,
    devices: Sequence[int] | None,
    comm_kernels: Sequence[str] = (),
    gpu: GpuSpec | None = None,
) -> RankResult:
    have = sorted(set(trace.gpu_ops["device"].tolist()))
    # each rank reports the selected devices it has (maybe none); a device no rank has is
    # refused once all ranks answered (check_devices)
    mine = None if devices is None else [d for d in have if d in set(devices)]
    a = attribute(trace, by=by, devices=mine, comm_kernels=comm_kernels)
    table = LazyOpTable(a, gpu)
    found = fnd.run_rules(a, table, (fnd.Scope.RANK,))
    empty = np.empty(0, dtype=np.int64)  # the per-GPU-op arrays index this rank's trace
    ops = replace(table.get(), op_row=empty, category=empty.astype(np.int8))
    add_savings(a, found)  # here, where the rank's events are
    for f in found:
        f.fix = None  # its arrays do not travel
    rows = np.flatnonzero(a.classes == COMM)
    comm = Trace(
        gpu_ops=trace.gpu_ops.take(rows),
        api_calls=Table.empty(SCHEMAS["api_calls"]),
        ranges=Table.empty(SCHEMAS["ranges"]),
        threads=Table.empty(SCHEMAS["threads"]),
        devices=Table.empty(SCHEMAS["devices"]),
        strings=trace.strings,
    )
    host, host_names = a.host.compact(trace.strings)
    return RankResult(
        path=path,
        rank=rank,
        rank_source=source,
        host=host,
        host_names=host_names,
        windows=a.windows,
        window_thread=_window_threads(a),
        latency_ns=a.launch_latency.latency_ns,
        comm=comm,
        findings=found,
        graphs=a.graphs,
        ignored=a.ignored,
        dropped=trace.dropped,
        devices=have,
        ops=ops,
        compute_under_comm={
            d: iv for (r, d), iv in compute_under_comm(trace, a.classes).items() if r == rank
        },
    )


def _window_threads(a: Attribution) -> npt.NDArray[np.int32]:
    rr = a.window_range_rows
    th = a.trace.ranges["thread"]
    return np.where(rr >= 0, th[np.maximum(rr, 0)] if th.size else -1, -1).astype(np.int32)


def analyze_ranks(
    *paths: str | os.PathLike[str],
    by: str | None = None,
    devices: Sequence[int] | None = None,
    ranks: Sequence[int] | None = None,
    executor: str = "local",
    scheduler: str | None = None,
    workers: int | None = None,
    processes_as_ranks: bool = False,
    comm_kernels: Sequence[str] = (),
    gpu: GpuSpec | None = None,
) -> MergedRanks:
    """Attribute per-rank trace files with one task per file (see the module docstring).

    ``processes_as_ranks``: each process with GPU ops in a file is a rank, numbered as
    :func:`pytimings.load` does (:mod:`pytimings.ingest.processes`); a task still takes one
    file and returns a result per process. ``ranks`` selects ranks (as ``--rank``).

    Returns the :class:`MergedRanks`: windows, totals, statistics, launch latency,
    collectives and findings of all ranks (:func:`pytimings.session.analyze` makes it an
    ``Analysis``). Findings about a rank's events come from each rank (see
    :func:`rank_findings`).
    """
    if executor not in EXECUTORS:
        raise UsageError(f"--executor {executor!r}: choose one of {', '.join(EXECUTORS)}")
    if scheduler is not None and executor != "dask":
        raise UsageError("--scheduler needs --executor dask")
    if workers is not None and workers < 1:
        raise UsageError(f"workers must be at least 1, not {workers}")
    files = expand_paths(paths)
    run = _run_dask if executor == "dask" else _run_local
    per_file = run(
        files, by, devices, scheduler, workers, processes_as_ranks, tuple(comm_kernels), gpu
    )
    check_devices([r for results in per_file for r in results], devices)
    if processes_as_ranks:
        return reduce_ranks(_renumber(per_file), by, ranks, comm_kernels)
    return reduce_ranks([r for results in per_file for r in results], by, ranks, comm_kernels)


def check_devices(results: Sequence[RankResult], devices: Sequence[int] | None) -> None:
    """Refuse a ``--device`` that no rank has (each rank reports the selected devices it
    has: rank 5's device 5 is not missing from rank 0)."""
    have = sorted({d for r in results for d in r.devices})
    missing = sorted(set(devices or ()) - set(have))
    if missing:
        raise UsageError(
            f"device {', '.join(map(str, missing))} not in the traces; they have devices "
            f"{', '.join(map(str, have)) or 'none'}"
        )


def _task(
    path: str,
    position: int,
    by: str | None,
    devices: Sequence[int] | None,
    processes: bool,
    comm_kernels: Sequence[str] = (),
    gpu: GpuSpec | None = None,
) -> list[RankResult]:
    """One file's results: its rank's, or (``processes``) one per process with GPU ops."""
    if processes:
        return analyze_file_processes(path, by, devices, comm_kernels, gpu)
    return [analyze_file(path, position, by, devices, comm_kernels, gpu)]


def _run_local(
    files: list[str],
    by: str | None,
    devices: Sequence[int] | None,
    scheduler: str | None,
    workers: int | None,
    processes: bool = False,
    comm_kernels: tuple[str, ...] = (),
    gpu: GpuSpec | None = None,
) -> list[list[RankResult]]:
    n = min(len(files), os.cpu_count() or 1) if workers is None else workers
    what = "files" if processes else "ranks"
    with progress.task(f"Analysing {len(files)} {what}", total=len(files)) as bar:
        if n == 1 or len(files) == 1:
            out = []
            for i, f in enumerate(files):
                out.append(_task(f, i, by, devices, processes, comm_kernels, gpu))
                bar.advance()
            return out
        # forkserver, as load() does: a clean child, not a fork of a parent with Arrow threads
        ctx = multiprocessing.get_context("forkserver" if sys.platform != "win32" else "spawn")
        with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
            out = []
            args = (
                files, range(len(files)), repeat(by), repeat(devices), repeat(processes),
                repeat(comm_kernels), repeat(gpu),
            )  # fmt: skip
            for r in pool.map(_task, *args):
                out.append(r)
                bar.advance()
            return out


def _run_dask(
    files: list[str],
    by: str | None,
    devices: Sequence[int] | None,
    scheduler: str | None,
    workers: int | None,
    processes: bool = False,
    comm_kernels: tuple[str, ...] = (),
    gpu: GpuSpec | None = None,
) -> list[list[RankResult]]:
    try:
        dd: Any = importlib.import_module("dask.distributed")  # untyped; optional extra
    except ImportError:
        raise UsageError(
            f"--executor dask needs dask.distributed: {install_hint('dask')}"
        ) from None
    cluster: Any = None
    if scheduler is None:
        n = min(len(files), os.cpu_count() or 1) if workers is None else workers
        cluster = dd.LocalCluster(
            n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0"
        )
        client = dd.Client(cluster)
    else:
        client = _connect(dd, scheduler)
    try:
        futures = client.map(
            _task,
            files,
            range(len(files)),
            by=by,
            devices=devices,
            processes=processes,
            comm_kernels=comm_kernels,
            gpu=gpu,
            pure=False,
        )
        what = "files" if processes else "ranks"
        with progress.task(f"Analysing {len(files)} {what} on Dask", total=len(files)) as bar:
            for _ in dd.as_completed(futures):
                bar.advance()
        results: list[list[RankResult]] = client.gather(futures)
        return results
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


SCHEDULER_TIMEOUT_S = 15


def _connect(dd: Any, scheduler: str) -> Any:
    """A Dask client of the scheduler at ``scheduler``, or one UsageError line: an address
    Dask cannot parse, no answer within SCHEDULER_TIMEOUT_S, or a peer that is no Dask peer
    (what it sends Dask may read as any error: a frame length of exabytes is a ValueError).
    The address and the peer's handshake are tried first, on a connection of their own
    under the deadline (Dask's handshake read has none: a silent peer held it forever),
    so that a failing Client is never built (its cleanup waits 30 s at exit)."""
    comm: Any = importlib.import_module("distributed.comm")

    async def handshake() -> None:
        conn = await comm.connect(scheduler, timeout=SCHEDULER_TIMEOUT_S)
        await conn.close()

    try:
        with ThreadPoolExecutor(1) as pool:  # a loop of its own, even under a running one
            pool.submit(asyncio.run, asyncio.wait_for(handshake(), SCHEDULER_TIMEOUT_S)).result()
        return dd.Client(scheduler, timeout=f"{SCHEDULER_TIMEOUT_S}s")
    except Exception as exc:  # whatever the address or the peer led to
        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        raise UsageError(
            f"--scheduler {scheduler!r}: cannot connect to a scheduler ({why})"
        ) from None


def reduce_ranks(
    results: Sequence[RankResult],
    by: str | None,
    ranks: Sequence[int] | None = None,
    comm_kernels: Sequence[str] = (),
) -> MergedRanks:
    """Combine per-rank results into the all-ranks :class:`MergedRanks` (on the client)."""
    seen: dict[int, str] = {}
    for r in results:
        if r.rank in seen:
            raise TraceFormatError(r.path, f"rank {r.rank} is also the rank of {seen[r.rank]}")
        seen[r.rank] = r.path
    if ranks is not None:
        missing = sorted(set(ranks) - set(seen))
        if missing:
            raise UsageError(
                f"rank {', '.join(map(str, missing))} not in the traces; "
                f"they have ranks {', '.join(map(str, sorted(seen)))}"
            )
        results = [r for r in results if r.rank in set(ranks)]
    results = sorted(results, key=lambda r: r.rank)
    cols = results[0].windows.columns
    windows = Table({c: np.concatenate([r.windows[c] for r in results]) for c in cols})
    thread = np.concatenate([r.window_thread for r in results])
    order = np.lexsort(
        (
            thread,
            windows["name"].astype(str),
            windows["end_ns"],
            windows["device"],
            windows["rank"],
            windows["start_ns"],
        )
    )
    windows = windows.take(order)
    windows = windows.with_columns(  # one numbering over the ranks' windows
        index=window_numbers(
            windows["start_ns"], windows["rank"], windows["end_ns"], thread[order],
            windows["index"], by is not None,
        )
    )  # fmt: skip
    comm = Trace.merge([r.comm for r in results])
    names = StringTable(comm.strings)
    host = merge_host([(r.host, r.host_names, len(r.windows)) for r in results], names, order)
    comm.strings = names.strings
    dropped: dict[str, int] = {}
    ignored: dict[str, int] = {}
    for r in results:
        for src, dst in ((r.dropped, dropped), (r.ignored, ignored)):
            for k, v in src.items():
                dst[k] = dst.get(k, 0) + v
    comm.dropped = dropped
    comm.meta = {"ranks": {r.rank: r.path for r in results}}
    n_comm = len(comm.gpu_ops)
    latency = np.concatenate([r.latency_ns for r in results])
    a = Attribution(
        trace=comm,
        by=by,
        windows=windows,
        gaps=Gaps.concat([]),
        launches=Launches(
            api_row=np.full(n_comm, -1, dtype=np.int64),
            start=np.full(n_comm, NO_LAUNCH, dtype=np.int64),
            end=np.full(n_comm, NO_LAUNCH, dtype=np.int64),
            api_thread=np.empty(0, dtype=np.int32),
            graph=comm.gpu_ops["graph"] >= 0,
        ),
        classes=np.full(n_comm, COMM, dtype=np.int8),
        launch_latency=LaunchLatency(latency, np.full(latency.size, -1, dtype=np.int64)),
        collectives=collectives(
            comm,
            np.full(n_comm, COMM, dtype=np.int8),
            [r.rank for r in results],
            {(r.rank, d): iv for r in results for d, iv in r.compute_under_comm.items()},
        ),
        window_range_rows=np.full(len(windows), -1, dtype=np.int64),
        graphs=[g for r in results for g in r.graphs],
        ignored=ignored,
        host=host,
        comm_kernels=tuple(comm_kernels),
    )
    tables = [r.ops for r in results if r.ops is not None]
    # every rank's table (their windows in ``order``), or none
    merged = merge_tables(tables, order, n_comm) if len(tables) == len(results) else None
    found = fnd.run_rules(a, LazyOpTable(a), (fnd.Scope.ACROSS,))
    found += rank_findings([(r.rank, f) for r in results for f in r.findings], len(results))
    return MergedRanks(a, fnd.ranked(found, a.totals["window_ns"]), merged)


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


# the launching threads a title names: each rank's process has its own thread ids
_THREADS = re.compile(r"thread '[^']*'|threads \('[^)]*\)")


def _shape(title: str) -> str:
    """A finding's title with its numbers and launching threads masked (other quoted
    names, e.g. kernels, kept): one rule's finding about the same thing on each rank."""
    parts = _THREADS.sub("thread #", title).split("'")
    return "'".join(p if i % 2 else _NUMBER.sub("#", p) for i, p in enumerate(parts))


def rank_findings(found: Sequence[tuple[int, Finding]], n_ranks: int) -> list[Finding]:
    """Per-rank findings for the report: the same finding on several ranks (same layer and
    title up to its numbers) becomes one, its loss the sum, titled by the worst rank."""
    if n_ranks == 1:
        return [f for _, f in found]
    groups: dict[tuple[str, str], list[tuple[int, Finding]]] = defaultdict(list)
    for rank, f in found:
        groups[(f.layer, _shape(f.title))].append((rank, f))
    out = []
    for members in groups.values():
        rank, worst = max(members, key=lambda m: (m[1].loss_ns, -m[0]))
        if len(members) == 1:
            title = f"rank {rank}: {worst.title}"
            evidence = {"rank": rank, **worst.evidence}
        else:
            ranks = [r for r, _ in members]
            title = (
                f"ranks {runs_text(ranks)} ({len(ranks)} of {n_ranks}); worst, "
                f"rank {rank}: {worst.title}"
            )
            evidence = {
                "ranks": sorted(ranks),
                "loss_ns_by_rank": {r: f.loss_ns for r, f in sorted(members, key=lambda m: m[0])},
                "worst_rank": rank,
                **worst.evidence,
            }
        savings = [f.saving_ns for _, f in members]
        if any(v is not None for v in savings):
            evidence["saving_ns"] = sum(v for v in savings if v is not None)
        out.append(Finding(worst.layer, title, sum(f.loss_ns for _, f in members), evidence))
    return out
