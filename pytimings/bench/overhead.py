"""``pytimings overhead``: what one region costs from Python, beside the alternatives.

Every row times ``for _ in range(N): with <context>: pass`` (``timeit``'s compiled loop),
repeated several times with the rows interleaved, and reports the median over repeats of
ns per region after subtracting an empty loop measured the same way; ratios are to the
first row (a fresh ``contextlib.nullcontext()``). Rows that cannot run here (no GPU, no
torch) are printed with the reason instead of a number.

Targets: host-only <= 1.0x nullcontext; GPU-timed <= 1.1x (floor + host-only);
sampled 1/16 <= host-only + 200 ns.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import timeit
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from pytimings.console import options
from pytimings.console.args import bounded_int
from pytimings.errors import UsageError
from pytimings.fileout import write_text

NAME = "overhead"


@dataclass
class Row:
    key: str
    label: str
    ns: float | None = None  # median ns per region (net of the empty loop)
    note: str = ""  # why there is no number, or what the row measures
    samples: list[float] = field(default_factory=list)


@dataclass
class Target:
    name: str
    passed: bool | None  # None: could not be checked here
    detail: str


class _Skip(Exception):
    """A row that cannot run here; the message says why."""


def _nothing() -> None:
    return None


@dataclass
class _Bench:
    """``stmt`` is timed in timeit's compiled loop over ``ns``; ``init`` runs once before
    each loop; ``between`` runs after each repeat, untimed (e.g. clearing the recorder)."""

    stmt: str
    ns: dict[str, Any]
    between: Callable[[], None] = _nothing
    init: str = "pass"


Setup = Callable[[], _Bench]


def _nullcontext() -> _Bench:
    return _Bench("with nullcontext(): pass", {"nullcontext": contextlib.nullcontext})


def _recorder(**region_kwargs: Any) -> Setup:
    def setup() -> _Bench:
        from pytimings.record.recorder import Recorder

        rec = Recorder()  # started; its own buffers, not the user's default recorder
        args = "".join(f", {k}={k}" for k in region_kwargs)
        ns = {"region": rec.region, "name": NAME, **region_kwargs}
        return _Bench(f"with region(name{args}): pass", ns, rec.clear)

    return setup


def _recorder_disabled() -> _Bench:
    from pytimings.record.recorder import Recorder

    rec = Recorder()
    rec.disable()
    return _Bench("with region(name): pass", {"region": rec.region, "name": NAME}, rec.clear)


def _nvtx_reused() -> _Bench:
    try:
        import nvtx
    except ImportError as exc:
        raise _Skip(f"nvtx not importable ({exc})") from None
    return _Bench("with a: pass", {"a": nvtx.annotate(NAME)})


def _nvtx_fresh() -> _Bench:
    try:
        import nvtx
    except ImportError as exc:
        raise _Skip(f"nvtx not importable ({exc})") from None
    return _Bench("with annotate(name): pass", {"annotate": nvtx.annotate, "name": NAME})


def _record_function() -> _Bench:
    try:
        from torch.profiler import record_function
    except ImportError as exc:
        raise _Skip(f"torch not importable ({exc})") from None
    return _Bench("with rf(name): pass", {"rf": record_function, "name": NAME})


def _cuda_stream() -> Any:
    from pytimings.record.cuda import cuda_available, cuda_status

    if not cuda_available():
        raise _Skip(f"no GPU: {cuda_status()}")
    try:
        import torch
    except ImportError:
        torch = None  # type: ignore[assignment]
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.current_stream()
    return 0  # the legacy default stream, as a raw handle


def _gpu_region(**kwargs: Any) -> Setup:
    def setup() -> _Bench:
        return _recorder(stream=_cuda_stream(), **kwargs)()

    return setup


def _torch_event_pair() -> _Bench:
    _cuda_stream()
    try:
        import torch
    except ImportError as exc:
        raise _Skip(f"torch not importable ({exc})") from None
    if not torch.cuda.is_available():
        raise _Skip("torch has no CUDA (CPU build or no device)")
    event: Any = torch.cuda.Event
    pool = [(event(enable_timing=True), event(enable_timing=True)) for _ in range(64)]
    stmt = "i = (i + 1) & 63\na, b = pool[i]\na.record()\nb.record()"
    return _Bench(stmt, {"pool": pool}, torch.cuda.synchronize, init="i = 0")


ROWS: list[tuple[str, str, Setup | None]] = [  # None: measured natively (_floor_ns)
    ("nullcontext", "with contextlib.nullcontext()  (fresh)", _nullcontext),
    ("pytimings_host", "pytimings region, host-only (+ NVTX range)", _recorder()),
    (
        "pytimings_host_args",
        "pytimings region, host-only, kind+nbytes+payload",
        _recorder(kind="comm", nbytes=4096, payload=2),
    ),
    ("pytimings_disabled", "pytimings region, recorder disabled", _recorder_disabled),
    ("nvtx_reused", "nvtx.annotate(name), reused object", _nvtx_reused),
    ("nvtx_fresh", "nvtx.annotate(name), fresh", _nvtx_fresh),
    ("torch_record_function", "torch.profiler.record_function(name)", _record_function),
    ("pytimings_cuda", "pytimings region, CUDA events", _gpu_region()),
    (
        "pytimings_sampled16",
        "pytimings region, CUDA events sampled 1/16",
        _gpu_region(sample_every=16),
    ),
    ("torch_event_pair", "pooled torch.cuda.Event pair, record x2", _torch_event_pair),
    ("cuda_floor", "floor: 2 raw cudaEventRecord (pytimings._core)", None),
]
EXPECTED_KEYS = tuple(k for k, _, _ in ROWS)


def _floor_ns(iterations: int, repeats: int) -> list[float]:
    stream = _cuda_stream()
    from pytimings import _core

    raw = int(getattr(stream, "cuda_stream", stream))
    n = min(iterations, 50_000)  # ~2 us per pair on a GPU: keep the run short
    return [float(_core.event_record_floor_ns(raw, n)) for _ in range(repeats)]


def measure(iterations: int = 200_000, repeats: int = 7, budget_s: float = 0.12) -> list[Row]:
    """Run every row; medians over ``repeats`` loops of at most ``iterations`` regions.

    Slow rows run fewer iterations, so that one loop of a row takes about ``budget_s``
    (at least 1000 iterations): the default run stays well under 20 s everywhere.
    """
    if iterations < 1 or repeats < 1:
        raise UsageError("--iterations and --repeats must be at least 1")
    rows = [Row(k, label) for k, label, _ in ROWS]
    timers: dict[str, tuple[timeit.Timer, Callable[[], None], int]] = {}
    for row, (_, _, setup) in zip(rows, ROWS, strict=True):
        if setup is None:
            continue
        try:
            b = setup()
        except _Skip as skip:
            row.note = str(skip)
            continue
        timer = timeit.Timer(b.stmt, b.init, globals=b.ns)
        probe = min(iterations, 1000)  # the best of 3 short loops (also warms the row up)
        per_op = max(min(timer.repeat(3, probe)) / probe, 1e-9)
        b.between()
        n = max(min(iterations, int(budget_s / per_op)), min(iterations, 1000))
        timers[row.key] = (timer, b.between, n)
        if n < iterations // 2:
            row.note = f"slow row: {n} iterations per repeat"
    empty = timeit.Timer("pass")
    baseline: list[float] = []
    for _ in range(repeats):
        baseline.append(empty.timeit(iterations) * 1e9 / iterations)
        for row in rows:
            if row.key in timers:
                timer, between, n = timers[row.key]
                row.samples.append(timer.timeit(n) * 1e9 / n)
                between()
    loop_ns = statistics.median(baseline)
    tool = os.environ.get("NVTX_INJECTION64_PATH")
    rows[1].note = (
        f"NVTX tool attached ({tool})" if tool else "no NVTX tool attached: its calls are no-ops"
    )
    for row in rows:
        if row.samples:
            row.ns = statistics.median(s - loop_ns for s in row.samples)
    floor = rows[EXPECTED_KEYS.index("cuda_floor")]
    try:
        floor.samples = _floor_ns(iterations, repeats)
        floor.ns = statistics.median(floor.samples)
        floor.note = "measured in C++ (no Python loop)"
    except _Skip as skip:
        floor.note = str(skip)
    return rows


def targets(rows: list[Row]) -> list[Target]:
    ns = {r.key: r.ns for r in rows}

    def have(*keys: str) -> bool:
        return all(ns.get(k) is not None for k in keys)

    out = []
    if have("nullcontext", "pytimings_host"):
        ratio = ns["pytimings_host"] / ns["nullcontext"]  # type: ignore[operator]
        out.append(Target("host-only <= 1.0x nullcontext", ratio <= 1.0, f"{ratio:.2f}x"))
    else:
        out.append(Target("host-only <= 1.0x nullcontext", None, "rows missing"))
    if have("pytimings_cuda", "cuda_floor", "pytimings_host"):
        bound = ns["cuda_floor"] + ns["pytimings_host"]  # type: ignore[operator]
        ratio = ns["pytimings_cuda"] / bound  # type: ignore[operator]
        out.append(
            Target(
                "GPU-timed <= 1.1x (floor + host-only)",
                ratio <= 1.1,
                f"{ratio:.2f}x of {bound:.0f} ns",
            )
        )
    else:
        out.append(Target("GPU-timed <= 1.1x (floor + host-only)", None, "no GPU here"))
    if have("pytimings_sampled16", "pytimings_host"):
        extra = ns["pytimings_sampled16"] - ns["pytimings_host"]  # type: ignore[operator]
        out.append(Target("sampled 1/16 <= host-only + 200 ns", extra <= 200.0, f"+{extra:.0f} ns"))
    else:
        out.append(Target("sampled 1/16 <= host-only + 200 ns", None, "no GPU here"))
    return out


def format_table(rows: list[Row], checks: list[Target], iterations: int, repeats: int) -> str:
    base = rows[0].ns
    width = max(len(r.label) for r in rows)
    lines = [
        f"per-region overhead: median of {repeats} repeats of up to {iterations} regions, "
        "net of an empty loop",
        f"{'row'.ljust(width)}  {'ns':>8}  {'ratio':>6}  note",
    ]
    for r in rows:
        if r.ns is None:
            lines.append(f"{r.label.ljust(width)}  {'-':>8}  {'-':>6}  {r.note}")
            continue
        ratio = f"{r.ns / base:.2f}x" if base else "-"
        lines.append(f"{r.label.ljust(width)}  {r.ns:8.1f}  {ratio:>6}  {r.note}".rstrip())
    lines.append("")
    for t in checks:
        verdict = {True: "PASS", False: "FAIL", None: "n/a "}[t.passed]
        lines.append(f"{verdict}  {t.name}: {t.detail}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--iterations",
        type=bounded_int(1, 10**9),
        default=200_000,
        help="regions per repeat and row (default 200000)",
    )
    parser.add_argument(
        "--repeats",
        type=bounded_int(1, 10**6),
        default=7,
        help="repeats per row; the median is reported (default 7)",
    )
    options.add_json(parser, "the rows and targets")


def run(args: argparse.Namespace) -> int:
    if args.json:
        from pytimings.fileout import check_writable

        check_writable("--json", args.json)
    rows = measure(args.iterations, args.repeats)
    checks = targets(rows)
    print(format_table(rows, checks, args.iterations, args.repeats))
    if args.json:
        write_json(args.json, rows, checks, args.iterations, args.repeats)
    return 0


def write_json(
    path: str, rows: list[Row], checks: list[Target], iterations: int, repeats: int
) -> None:
    doc = {
        "schema": "pytimings.overhead/1",
        "iterations": iterations,
        "repeats": repeats,
        "rows": [asdict(r) for r in rows],
        "targets": [asdict(t) for t in checks],
    }
    write_text(path, json.dumps(doc, indent=2), "--json")
