"""Load traces of any supported format into one :class:`~pytimings.model.trace.Trace`.

The format is detected from the file's content (magic bytes, the start of the JSON), not
its name: Nsight Systems SQLite exports, Nsight Systems reports (``.nsys-rep``/``.qdrep``,
exported to SQLite with ``nsys`` when it is installed), PyTorch-profiler (Kineto) JSON,
plain or gzipped, and pytimings recordings (Arrow IPC). A FIFO or a pipe (``/dev/stdin``)
is read once into a temporary file first (its format is sniffed, then it is read).

Several files load in parallel (``workers``, default one per file up to the number of
cores) into one Trace with a ``rank`` column: nsys exports in threads (the b-tree scanner
and numpy release the GIL, and nothing is pickled: two 142 MB exports load in 0.5 s against
1.0 s one after the other and 2.0 s in worker processes), other formats in worker processes
when the files total 32 MiB or more (their decoding holds the GIL). A file's
rank is, in order of precedence: the ``ranks`` argument; the rank the trace itself records
(Kineto ``distributedInfo``; loaders put it in ``meta['rank']``); a ``rankN``, ``rank-N`` or
``rank_N`` in the file name; the file's position among the files given (sorted by name
within a directory). Two files with the same rank are an error.

``processes_as_ranks=True`` is for a file that holds several processes, each driving its
own GPU (``nsys profile torchrun --nproc-per-node N ...``): each process that ran GPU ops
becomes a rank (see :mod:`pytimings.ingest.processes` for the numbering and for processes
without GPU ops). With several files, each file's processes take the ranks after the
previous file's (in the order above), so two nodes of 8 GPUs give ranks 0..15; the ranks a
file or its name records are not used, and ``ranks`` cannot be given with it.

Recordings of several ranks are placed on one timeline by their wall-clock offsets
(:mod:`pytimings.ingest.clocks`); the merged trace's ``meta["clock_alignment"]`` says how and
with what uncertainty.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import (
    BrokenExecutor,
    Executor,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
)
from pathlib import Path

import numpy as np

from pytimings.console import progress
from pytimings.errors import TraceFormatError, UsageError
from pytimings.ingest.clocks import align_recordings
from pytimings.ingest.detect import detect_format, export_report, is_trace
from pytimings.model.trace import TABLES, Trace, ValueOutOfRange

__all__ = ["assign_ranks", "expand_paths", "load", "load_file", "set_rank"]

_PARALLEL_MIN_BYTES = 32 << 20
_GIL_FREE_FORMATS = ("nsys-sqlite", "nsys-report")  # loaded in threads
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def load(
    *paths: str | os.PathLike[str],
    ranks: Sequence[int] | None = None,
    workers: int | None = None,
    processes_as_ranks: bool = False,
) -> Trace:
    """Load one or more trace files (or directories of per-rank traces) into one Trace;
    ``processes_as_ranks``: each process with GPU ops is a rank (module docstring)."""
    files = expand_paths(paths)
    if processes_as_ranks and ranks is not None:
        raise UsageError(
            "ranks cannot be given with processes_as_ranks (ranks then follow the processes)"
        )
    if ranks is not None and len(ranks) != len(files):
        raise UsageError(f"ranks: {len(ranks)} given for {len(files)} trace files")
    n_workers = min(len(files), os.cpu_count() or 1) if workers is None else workers
    if n_workers < 1:
        raise UsageError(f"workers must be at least 1, not {workers}")
    with _reopenable(files) as local:
        try:
            traces = _load_all(local, workers, n_workers)
        except TraceFormatError as exc:  # name the file given, not its temporary copy
            if exc.path in local and exc.path not in files:
                raise TraceFormatError(files[local.index(exc.path)], exc.problem) from None
            raise
        for f, copy, tr in zip(files, local, traces, strict=True):
            if copy != f and tr.meta.get("path") == copy:
                tr.meta["path"] = f
    if processes_as_ranks:
        from pytimings.ingest.processes import split_processes

        first = 0
        for i, tr in enumerate(traces):
            traces[i] = split_processes(tr, first)
            first += max(1, len(traces[i].meta["process_ranks"]))  # no GPU ops: one rank
        return Trace.merge(traces)
    assigned = assign_ranks(files, traces, ranks)
    for tr, (rank, source) in zip(traces, assigned, strict=True):
        set_rank(tr, rank, source)
    seen: dict[int, str] = {}
    for f, (rank, _) in zip(files, assigned, strict=True):
        if rank in seen:
            raise TraceFormatError(f, f"rank {rank} is also the rank of {seen[rank]}")
        seen[rank] = f
    alignment = align_recordings(traces)  # recordings of several ranks: one timeline
    merged = Trace.merge(traces)
    if alignment is not None:
        merged.meta["clock_alignment"] = alignment
    return merged


def _load_all(files: list[str], workers: int | None, n_workers: int) -> list[Trace]:
    # detected once here, not again by each load
    formats: list[str | None] = [detect_format(f) for f in files] if len(files) > 1 else [None]
    in_threads = len(files) > 1 and all(fmt in _GIL_FREE_FORMATS for fmt in formats)
    if workers is None and not in_threads:
        # starting worker processes (~0.5 s) costs more than loading small files in-process
        if sum(os.path.getsize(f) for f in files) < _PARALLEL_MIN_BYTES:
            n_workers = 1
    what = Path(files[0]).name if len(files) == 1 else f"{len(files)} trace files"
    with progress.task(f"Loading {what}", total=len(files)) as bar:
        if len(files) == 1 or n_workers == 1:
            traces = []
            for f, fmt in zip(files, formats, strict=True):
                traces.append(load_file(f, fmt))
                bar.advance()
        else:
            pool: Executor
            if in_threads:
                pool = ThreadPoolExecutor(max_workers=n_workers)
            else:
                # forkserver: a clean child, not a fork of a parent that may hold Arrow threads
                ctx = multiprocessing.get_context(
                    "forkserver" if sys.platform != "win32" else "spawn"
                )
                pool = ProcessPoolExecutor(max_workers=n_workers, mp_context=ctx)
            with pool:
                traces = []
                futures = [
                    pool.submit(load_file, f, fmt) for f, fmt in zip(files, formats, strict=True)
                ]
                for f, fut in zip(files, futures, strict=True):
                    traces.append(_result(f, fut))
                    bar.advance()
    return traces


@contextlib.contextmanager
def _reopenable(files: list[str]) -> Iterator[list[str]]:
    """The files as paths that can be opened more than once (the format is sniffed, then
    the file read): a FIFO or a pipe (``/dev/stdin``) is read once into a temporary file,
    removed afterwards. Devices are refused (reading one may never end)."""
    out: list[str] = []
    with contextlib.ExitStack() as stack:
        tmp = None
        for f in files:
            try:
                mode = os.stat(f).st_mode
            except OSError:
                mode = stat.S_IFREG  # left to the loader, which says why it cannot read it
            if stat.S_ISREG(mode):
                out.append(f)
                continue
            if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
                raise TraceFormatError(f, "is a device, not a trace file")
            if tmp is None:
                tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="pytimings-in-"))
            copy = os.path.join(tmp, f"{len(out)}-{Path(f).name}")
            try:
                with open(f, "rb") as src, open(copy, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            except OSError as exc:
                raise TraceFormatError(f, f"cannot read ({exc.strerror or exc})") from None
            out.append(copy)
        yield out


def _result(path: str, fut: Future[Trace]) -> Trace:
    """A worker's trace; a worker that died (a signal, out of memory) is a one-line error
    naming its file (the loaders' own errors name it already)."""
    try:
        return fut.result()
    except BrokenExecutor as exc:
        raise TraceFormatError(path, f"a worker process died while it loaded ({exc})") from None


def load_file(path: str, fmt: str | None = None) -> Trace:
    """One file, whatever its format (``fmt``: as :func:`detect_format` found it)."""
    try:
        return _load_file(path, fmt or detect_format(path))
    except ValueOutOfRange as exc:  # a value the model cannot hold: never wrap silently
        raise TraceFormatError(path, str(exc)) from None


def _load_file(path: str, fmt: str) -> Trace:
    if fmt == "nsys-sqlite":
        from pytimings.ingest.nsys import load_nsys

        return load_nsys(path)
    if fmt == "nsys-report":
        from pytimings.ingest.nsys import load_nsys

        return load_nsys(export_report(path))
    if fmt == "kineto":
        kineto = importlib.import_module("pytimings.ingest.kineto")
        return _nonempty(path, kineto.load_kineto(path))
    if fmt == "memory-snapshot":
        from pytimings.ingest.memory import load_snapshot

        return load_snapshot(path)
    recording = importlib.import_module("pytimings.ingest.recording")
    return _nonempty(path, recording.load_recording_trace(path))


def _nonempty(path: str, trace: Trace) -> Trace:
    if not (
        len(trace.gpu_ops) or len(trace.api_calls) or len(trace.ranges) or len(trace.host_ops)
    ) and not len(trace.mem_events):  # a CPU-only profile (cpu_ops alone) has events
        raise TraceFormatError(
            path, "contains no events (no GPU ops, API calls, ranges, host ops or memory samples)"
        )
    return trace


def expand_paths(paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    if not paths:
        raise UsageError("no trace files given")
    files: list[str] = []
    for p in (os.fspath(x) for x in paths):
        if os.path.isdir(p):
            found = [str(c) for c in sorted(Path(p).iterdir()) if c.is_file() and is_trace(str(c))]
            if not found:
                raise TraceFormatError(p, "directory holds no trace files")
            files += found
        elif os.path.exists(p):
            files.append(p)
        else:
            raise TraceFormatError(p, "no such file or directory")
    seen: dict[str, str] = {}
    for f in files:  # the same file twice would be analysed as two ranks
        real = os.path.realpath(f)
        if real in seen:
            raise UsageError(f"{f}: given more than once (also as {seen[real]})")
        seen[real] = f
    return files


def assign_ranks(
    files: Sequence[str], traces: Sequence[Trace], ranks: Sequence[int] | None
) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for i, (f, tr) in enumerate(zip(files, traces, strict=True)):
        own = tr.meta.get("rank")
        m = _RANK_IN_NAME.search(Path(f).name)
        if ranks is not None:
            out.append((int(ranks[i]), "argument"))
        elif isinstance(own, int) and not isinstance(own, bool):
            out.append((own, "trace"))
        elif m:
            out.append((int(m.group(1)), "file name"))
        else:
            out.append((i, "file order"))
    return out


def set_rank(trace: Trace, rank: int, source: str) -> None:
    if not -(2**15) <= rank < 2**15:
        raise UsageError(f"rank {rank} is out of range")
    for name in TABLES:
        t = trace.table(name)
        setattr(trace, name, t.with_columns(rank=np.full(len(t), rank, dtype=np.int16)))
    trace.meta["rank"] = rank
    trace.meta["rank_source"] = source
