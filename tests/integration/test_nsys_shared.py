"""Every real nsys export in ../shared loads, with counts checked by independent SQL."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import tempfile
from pathlib import Path

import numpy as np
import pytest

from pytimings.errors import TraceFormatError
from pytimings.ingest import load
from pytimings.ingest.nsys import load_nsys
from pytimings.model.trace import ActivityKind, ApiKind, OpKind, RangeKind, Trace

pytestmark = pytest.mark.shared

EXPORTS = [
    "h200/decode_16steps_h200.sqlite",
    "external/nsys_ai/h100_2gpu_1s.sqlite",
    "external/nsys_ai/mfu_2gpu_after.sqlite",
    "external/nsys_ai/mfu_2gpu_before.sqlite",
    "external/nsys_extrap/concurrent.s8_profile8.sqlite",
    "external/nsys_extrap/ex-gpu.s10.sqlite",
    "external/nsys_pipit/perlmutter-cloverleaf-cuda.sqlite",
    "external/nsys_pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
]
REPORTS = [
    "external/gpubootcamp/jacobi_memcpy_nvlink_report.qdrep",
    "external/gpubootcamp/mpi_reports_report4.qdrep",
    "external/jax_toolbox/cuda-examples/nsys_report_benchmark.nsys-rep",
    "external/jax_toolbox/cuda-examples/pdl_2p2c.nsys-rep",
]
H200 = "h200/decode_16steps_h200.sqlite"


def test_every_shared_export_is_covered(shared_dir: Path) -> None:
    data = shared_dir / "data"
    found = {
        str(p.relative_to(data))
        for p in data.rglob("*")
        if p.suffix in (".sqlite", ".qdrep", ".nsys-rep")
    }
    assert found == set(EXPORTS) | set(REPORTS)


def _independent(path: Path) -> dict[str, int]:
    """Row counts by plain SQL, written without the loader's code."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    def q(table: str, sql: str) -> int:
        return int(db.execute(sql).fetchone()[0]) if table in tables else 0

    k, c, s = (
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
    )
    rt, sy, nv = "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS"
    out = {
        "kernels": q(k, f"SELECT count(*) FROM {k}"),
        "memcpys": q(c, f"SELECT count(*) FROM {c}"),
        "memsets": q(s, f"SELECT count(*) FROM {s}"),
        "runtime": q(rt, f"SELECT count(*) FROM {rt} WHERE eventClass = 0"),
        "driver": q(rt, f"SELECT count(*) FROM {rt} WHERE eventClass = 1"),
        "backtrace": q(rt, f"SELECT count(*) FROM {rt} WHERE eventClass = 67"),
        "sync": q(sy, f"SELECT count(*) FROM {sy}"),
        "pushpop": q(nv, f'SELECT count(*) FROM {nv} WHERE eventType = 59 AND "end" IS NOT NULL'),
        "startend": q(nv, f'SELECT count(*) FROM {nv} WHERE eventType = 60 AND "end" IS NOT NULL'),
        "open": q(nv, f'SELECT count(*) FROM {nv} WHERE eventType IN (59, 60) AND "end" IS NULL'),
        "marks": q(nv, f"SELECT count(*) FROM {nv} WHERE eventType = 34"),
        "threads": q(rt, f"SELECT count(DISTINCT globalTid) FROM {rt}"),
    }
    # GPU ops whose launching call is in the export: same correlation id, same process
    linked = 0
    for t in (k, c, s):
        if t in tables and rt in tables:
            linked += q(
                t,
                f"SELECT count(*) FROM {t} o WHERE EXISTS (SELECT 1 FROM {rt} r WHERE "
                "r.correlationId = o.correlationId AND r.eventClass IN (0, 1) "
                "AND (r.globalTid >> 24) = (o.globalPid >> 24))",
            )
    out["linked"] = linked
    db.close()
    return out


def _linked(tr: Trace) -> int:
    api = tr.api_calls
    keys = set(zip(api["pid"].tolist(), api["correlation"].tolist(), strict=True))
    return sum(
        (p, c) in keys
        for p, c in zip(tr.gpu_ops["pid"].tolist(), tr.gpu_ops["correlation"].tolist(), strict=True)
    )


@pytest.mark.parametrize("name", EXPORTS)
def test_export_loads_with_independent_counts(shared_dir: Path, name: str) -> None:
    path = shared_dir / "data" / name
    tr = load_nsys(path)
    want = _independent(path)
    kinds = tr.gpu_ops["kind"]
    assert int((kinds == OpKind.KERNEL).sum()) == want["kernels"]
    assert int((kinds == OpKind.MEMCPY).sum()) == want["memcpys"]
    assert int((kinds == OpKind.MEMSET).sum()) == want["memsets"]
    api = tr.api_calls["kind"]
    assert int((api == ApiKind.RUNTIME).sum()) == want["runtime"]
    assert int((api == ApiKind.DRIVER).sum()) == want["driver"]
    assert len(tr.syncs) == want["sync"]
    assert len(tr.api_calls) == want["runtime"] + want["driver"]
    assert tr.dropped.get("cuda_backtrace_duplicate_rows", 0) == want["backtrace"]
    rk = tr.ranges["kind"]
    assert int((rk == RangeKind.NVTX_PUSHPOP).sum()) == want["pushpop"]
    assert int((rk == RangeKind.NVTX_STARTEND).sum()) == want["startend"]
    assert tr.dropped.get("nvtx_ranges_open_at_capture_end", 0) == want["open"]
    assert tr.dropped.get("nvtx_marks", 0) == want["marks"]
    assert _linked(tr) == want["linked"]
    # every API call's thread is a row of the thread table with the call's process
    host = tr.api_calls.take(tr.api_calls["thread"] >= 0)
    assert np.array_equal(tr.threads["pid"][host["thread"]], host["pid"])
    assert len(np.unique(host["thread"])) == want["threads"]
    # integrity of what was loaded
    for t in (tr.gpu_ops, tr.api_calls, tr.ranges):
        assert np.all(t["end"] >= t["start"])
        assert np.all(np.diff(t["start"]) >= 0)
    assert tr.meta["format"] == "nsys-sqlite"
    assert set(np.unique(tr.gpu_ops["device"])) <= set(tr.devices["device"].tolist())


@pytest.mark.parametrize("name", EXPORTS)
def test_os_runtime_calls_match_sql(shared_dir: Path, name: str) -> None:
    """OSRT_API calls (eventClass 27) as host activities: times, names and (pid, tid) as
    plain SQL reads them; API calls keep their own thread."""
    path = shared_dir / "data" / name
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    want, markers = [], 0
    if "OSRT_API" in tables:
        want = db.execute(
            'SELECT o.start, o."end", s.value, (o.globalTid >> 24) & 16777215, '
            "o.globalTid & 16777215 "
            "FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId WHERE o.eventClass = 27"
        ).fetchall()
        markers = db.execute(
            "SELECT count(*) FROM OSRT_API WHERE eventClass IN (31, 32)"
        ).fetchone()[0]
    calls = (
        db.execute(
            "SELECT start, globalTid & 16777215 FROM CUPTI_ACTIVITY_KIND_RUNTIME "
            "WHERE eventClass IN (0, 1)"
        ).fetchall()
        if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables
        else []
    )
    db.close()
    tr = load_nsys(path)
    h, th = tr.host_ops, tr.threads
    got = zip(
        h["start"].tolist(),
        h["end"].tolist(),
        [tr.strings[i] for i in h["name"]],
        th["pid"][h["thread"]].tolist(),
        th["tid"][h["thread"]].tolist(),
        strict=True,
    )
    assert sorted(got) == sorted(want)
    assert set(h["kind"].tolist()) <= {ActivityKind.OS}
    assert np.all(np.diff(h["start"]) >= 0)
    assert tr.dropped.get("osrt_profiling_started_finished_markers", 0) == markers
    api = tr.api_calls
    got_calls = zip(api["start"].tolist(), th["tid"][api["thread"]].tolist(), strict=True)
    assert sorted(got_calls) == sorted(calls)


def test_exports_with_os_runtime_calls(shared_dir: Path) -> None:
    """The two shared exports traced with osrt (the others have no or an empty OSRT_API)."""
    data = shared_dir / "data/external"
    for rel, n in (
        ("nsys_pipit/perlmutter-cloverleaf-cuda.sqlite", 1828),
        ("nsys_extrap/ex-gpu.s10.sqlite", 1285),
    ):
        assert len(load_nsys(data / rel).host_ops) == n


@pytest.mark.parametrize(
    ("name", "tool", "schema", "meta_table"),
    [
        (H200, "2025.3.2.0", "3.20.3", "META_DATA_EXPORT"),
        ("external/nsys_ai/mfu_2gpu_before.sqlite", "2026.2.1.210", "3.25.0", "META_DATA_EXPORT"),
        (
            "external/nsys_pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
            "2022.2.1.31",
            "2.9.1",
            "EXPORT_META_DATA",
        ),
        ("external/nsys_extrap/ex-gpu.s10.sqlite", None, None, None),
    ],
)
def test_export_metadata_of_each_era(
    shared_dir: Path, name: str, tool: str | None, schema: str | None, meta_table: str | None
) -> None:
    tr = load_nsys(shared_dir / "data" / name)
    assert (tr.meta["tool_version"], tr.meta["schema_version"], tr.meta["meta_table"]) == (
        tool,
        schema,
        meta_table,
    )


def test_non_utf8_metadata_is_replaced_and_counted(shared_dir: Path) -> None:
    tr = load_nsys(shared_dir / "data/external/nsys_extrap/concurrent.s8_profile8.sqlite")
    assert tr.meta["non_utf8_strings"] == 1


def test_h200_facts(shared_dir: Path) -> None:
    tr = load_nsys(shared_dir / "data" / H200)
    kinds = tr.gpu_ops["kind"]
    assert [int((kinds == k).sum()) for k in OpKind] == [1047, 16, 12]
    assert len(tr.api_calls) == 3924
    # 360 event syncs, 17 stream waits, 1 context sync; every event recorded on stream 7
    assert np.bincount(tr.syncs["kind"]).tolist() == [0, 360, 17, 0, 1]
    assert len(tr.events) > 0 and set(tr.events["stream"].tolist()) <= {7}
    assert [tr.strings[i] for i in tr.devices["name"]] == ["NVIDIA H200"]
    rg = tr.ranges
    name = np.array([tr.strings[i] for i in rg["name"]])
    steps = rg.take(name == "decode_step")
    sched = rg.take(name == "scheduler")
    assert len(steps) == len(sched) == 16
    assert steps["payload"].tolist() == [float(i) for i in range(16)]
    assert {tr.strings[i] for i in steps["domain"]} == {"probe"}
    assert {tr.strings[i] for i in steps["category"]} == {"phase"}
    assert steps["depth"].tolist() == [0] * 16 and sched["depth"].tolist() == [1] * 16
    ops = tr.gpu_ops
    for i in range(16):
        inside = (
            (sched["start"] >= steps["start"][i])
            & (sched["end"] <= steps["end"][i])
            & (sched["thread"] == steps["thread"][i])
        )
        assert int(inside.sum()) == 1
        s, e = sched["start"][inside][0], sched["end"][inside][0]
        assert 1_000_000 <= e - s <= 1_500_000  # time.sleep(1 ms) on the host
        # the GPU is idle while the host sleeps, except in the first step, where the
        # prefill's queued kernels are still running
        busy = np.any((ops["start"] < e) & (ops["end"] > s))
        assert busy == (i == 0)
    nccl = rg.take(np.array([tr.strings[i] for i in rg["domain"]]) == "NCCL")
    assert len(nccl) == 136 and {tr.strings[i] for i in nccl["name"]} == {"ncclAllReduce"}


@pytest.mark.parametrize("name", REPORTS)
def test_reports_need_nsys_and_say_how(
    shared_dir: Path, name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nsys here
    path = shared_dir / "data" / name
    with pytest.raises(TraceFormatError) as e:
        load(path)
    msg = str(e.value)
    stem = path.name.rsplit(".", 1)[0]
    assert msg.startswith(f"{path}: ") and "\n" not in msg
    assert f"`nsys export --type sqlite -o {stem}.sqlite {path}`" in msg


def _fake_nsys(bin_dir: Path, source: Path, log: Path) -> None:
    """An ``nsys`` that 'exports' by copying a real SQLite export to the -o path."""
    script = bin_dir / "nsys"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{log}"\n'
        '[ "$1" = export ] && [ "$2" = --type ] && [ "$3" = sqlite ] && [ "$4" = -o ] || exit 3\n'
        f'cp "{source}" "$5"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_report_is_exported_with_nsys_once(
    shared_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    _fake_nsys(bin_dir, shared_dir / "data" / H200, log)
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ.get("PATH", ""))
    report = tmp_path / "run.nsys-rep"
    shutil.copy(shared_dir / "data/external/jax_toolbox/cuda-examples/pdl_2p2c.nsys-rep", report)
    tr = load(report)
    assert int((tr.gpu_ops["kind"] == OpKind.KERNEL).sum()) == 1047
    assert (tmp_path / "run.sqlite").exists()
    assert "exporting" in capsys.readouterr().err
    load(report)  # cached: nsys not run again
    assert len(log.read_text().splitlines()) == 1


def test_report_export_falls_back_to_a_temp_dir(
    shared_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_nsys(bin_dir, shared_dir / "data" / H200, tmp_path / "calls.log")
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ.get("PATH", ""))
    cache = tmp_path / "tmp"
    cache.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(cache))
    src = shared_dir / "data/external/gpubootcamp/jacobi_memcpy_nvlink_report.qdrep"
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode: False if Path(p) == src.parent else real_access(p, mode)
    )
    tr = load(src)
    assert len(tr.gpu_ops) == 1075
    private = cache / f"pytimings-{os.geteuid()}" / "nsys-export"  # fileout.private_dir
    assert list(private.glob("jacobi_memcpy_nvlink_report-*.sqlite"))


def test_failed_nsys_export_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nsys").write_text("#!/bin/sh\necho 'Error: report is damaged' >&2\nexit 1\n")
    (bin_dir / "nsys").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    report = tmp_path / "x.nsys-rep"
    report.write_bytes(b"NVIDIA Tegra Profiler Report 2025@5@1 ...")
    with pytest.raises(
        TraceFormatError,
        match=r"x\.nsys-rep: nsys export failed \(exit 1\): Error: report is damaged",
    ):
        load(report)


@pytest.mark.parametrize("name", EXPORTS)
def test_every_export_summarises(shared_dir: Path, name: str) -> None:
    from pytimings.analysis.summary import trace_summary
    from pytimings.report.summary_text import render_summary

    tr = load_nsys(shared_dir / "data" / name)
    s = trace_summary(tr)
    assert int(s["kernels"]["count"].sum()) == int((tr.gpu_ops["kind"] == OpKind.KERNEL).sum())
    assert int(s["memory"]["count"].sum()) == int((tr.gpu_ops["kind"] != OpKind.KERNEL).sum())
    assert int(s["ranges"]["count"].sum()) == len(tr.ranges)
    assert int(s["api"]["count"].sum()) == len(tr.api_calls)  # sync records: their own table
    assert int(s["syncs"]["count"].sum()) == len(tr.syncs) if len(tr.syncs) else "syncs" not in s
    assert render_summary(trace_summary(tr, top=3))
