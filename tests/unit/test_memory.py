"""pytimings.sample_memory: RSS samples (one, or from a background sampler), saved by
pytimings.save, and their trend in ``pytimings report``: drifting for a planted leak,
stable for a steady loop."""

from __future__ import annotations

import itertools
import json
import mmap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import pytimings
from pytimings.cli import main
from pytimings.ingest.recording_file import load_memory
from pytimings.model.requests import RequestRecord
from pytimings.model.samples import MemorySamples
from pytimings.record import memory
from pytimings.record.requests import default_log as default_requests
from pytimings.record.requests import request
from pytimings.report.serving_html import _memory_figure
from pytimings.serving.runfile import SCHEMA
from pytimings.serving.sources import analyse, load_source
from pytimings.serving.trend import memory_drift

STEPS, EVERY_S = 40, 0.005
MS = 1_000_000


def _vm_rss() -> int:
    """VmRSS of /proc/self/status (kB), read apart from statm, which the sampler reads."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def clean() -> Iterator[None]:
    memory.default_log().clear()
    default_requests().clear()
    yield
    memory.default_log().clear()
    default_requests().clear()


def test_one_sample_is_the_resident_set(clean: None) -> None:
    before = _vm_rss()
    assert pytimings.sample_memory() is None
    after = _vm_rss()
    s = memory.default_log().samples()
    assert len(s.t_ns) == 1
    assert 0.9 * min(before, after) <= s.rss_bytes[0] <= 1.1 * max(before, after)
    # CUDA is not initialised here (no GPU, or torch never touched CUDA): no value
    assert s.cuda_allocated_bytes == [None]
    # 1e300 s: a wait that overflows time_t killed the sampler thread at its first wait
    for bad in (0, -1.0, float("nan"), float("inf"), 1e300):
        with pytest.raises(ValueError, match="every_s"):
            pytimings.sample_memory(every_s=bad)


def _leak(keep: list[mmap.mmap]) -> None:
    """Keep 1 MiB more, written: fresh pages (an anonymous map), never heap pages an
    earlier test freed and that are still resident."""
    m = mmap.mmap(-1, 1 << 20)
    m.write(b"\x01" * (1 << 20))
    keep.append(m)


def _sampled(work: str) -> MemorySamples:
    log = memory.MemoryLog()
    keep: list[mmap.mmap] = []
    with pytimings.sample_memory(every_s=EVERY_S, log=log) as stop:
        for _ in range(STEPS):
            if work == "leak":
                _leak(keep)
            else:
                sum(range(2000))
            time.sleep(EVERY_S)
    n = len(log)
    stop()  # stopping again takes no sample and no time
    assert len(log) == n
    time.sleep(3 * EVERY_S)
    assert len(log) == n  # the thread has ended
    del keep
    return log.samples()


def _trend(s: MemorySamples) -> dict[str, object]:
    (row,) = memory_drift("eng", "eng.pyt", s)
    return row


def _stretched(s: MemorySamples) -> MemorySamples:
    """The same samples spread over an hour: a trend needs 10 minutes of them, and the
    Mann-Kendall verdict does not depend on the time scale."""
    t0 = s.t_ns[0]
    k = 3.6e12 / (s.t_ns[-1] - t0)
    return MemorySamples(
        [t0 + round((t - t0) * k) for t in s.t_ns], s.rss_bytes, s.cuda_allocated_bytes
    )


def test_trend_of_a_steady_loop_and_of_a_leak() -> None:
    # the steady loop first: memory the leak frees could be handed back to the system
    # during a later loop, a step down in its series (a single step is a trend to
    # Mann-Kendall; the sampler itself adds none: it samples from its running thread)
    steady = _sampled("steady")
    rss = steady.rss_bytes
    assert _trend(steady)["verdict"] == "too short"  # seconds of samples: no slope per hour
    row = _trend(_stretched(steady))
    assert row["verdict"] == "stable", [
        (i, b - a) for i, (a, b) in enumerate(itertools.pairwise(rss)) if a != b
    ]
    leak = _sampled("leak")
    # one sample at the start, about one per EVERY_S, one at the stop (a loaded machine
    # may take fewer)
    assert 10 <= len(leak.t_ns) <= STEPS * 2 + 2
    assert leak.t_ns == sorted(leak.t_ns)
    grown = leak.rss_bytes[-1] - leak.rss_bytes[0]
    assert grown >= 0.8 * STEPS * (1 << 20)
    assert _trend(leak)["verdict"] == "too short"
    leak = _stretched(leak)
    row = _trend(leak)
    assert row["metric"] == "rss_mb" and row["verdict"] == "drifting"
    hours = (leak.t_ns[-1] - leak.t_ns[0]) / 3.6e12
    assert float(row["slope_per_hour"]) > 0.3 * (grown / 2**20) / hours  # type: ignore[arg-type]


def test_report_shows_the_memory_trend_of_a_recording(
    tmp_path: Path, clean: None, capsys: pytest.CaptureFixture[str]
) -> None:
    keep: list[mmap.mmap] = []
    for k in range(12):  # an engine that leaks 1 MiB a request, sampled after each
        with request(f"r{k}") as r:
            r.token()
        _leak(keep)
        pytimings.sample_memory()
    path = tmp_path / "eng.pyt"
    pytimings.save(path, pytimings.Recorder())
    saved = load_memory(path)
    assert saved is not None and saved == memory.default_log().samples()
    assert main(["report", str(path), "--labels", "eng"]) == 0
    text = capsys.readouterr().out
    assert "memory trend over the recordings' samples" in text
    # sampled within a second: too short for a trend per hour, and said so
    line = next(x for x in text.splitlines() if "too short" in x)
    assert line.split()[:2] == ["eng", "-"] and "a trend per hour needs 10 min" in line
    # the page draws the samples over time and gives the same verdict
    page = tmp_path / "eng.html"
    assert main(["report", str(path), "--labels", "eng", "--html", str(page)]) == 0
    doc = page.read_text()
    assert "<h2>Memory trend over the recordings' samples</h2>" in doc
    assert doc.count("Plotly.newPlot") == 4  # CDFs, curve, memory
    fig = _memory_figure(analyse([load_source(path, "eng")], "vllm", 10.0))
    (tr,) = fig.data  # no CUDA here: RSS only
    assert list(tr.meta) == ["eng", "rss"]
    assert list(tr.y) == [b / 2**20 for b in saved.rss_bytes]
    # compare --memory: the same verdict beside a comparison of run files
    run = tmp_path / "run.json"
    reqs = [RequestRecord(f"q{i}", i * MS, (i + 9) * MS, [(i + 2) * MS, (i + 5) * MS, (i + 8) * MS],
                          [1, 1, 1]).to_json() for i in range(6)]  # fmt: skip
    rounds = [{"round": 0, "start_ns": 0, "end_ns": 20 * MS, "errors": {}, "summary": {},
               "requests": reqs}]  # fmt: skip
    run.write_text(json.dumps({"schema": SCHEMA, "config": {}, "levels": [
        {"concurrency": 1, "rate": None, "rounds": rounds, "summary": {}}]}))  # fmt: skip
    out = tmp_path / "cmp.json"
    argv = ["compare", str(run), str(run), "--labels", "a,b", "--resamples", "100"]
    assert main([*argv, "--memory", str(path), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    (row,) = json.loads(out.read_text())["memory_drift"]
    assert row["verdict"] == "too short" and row["intervals"] == 12
    assert "memory trend over the recordings' samples" in text and "eng.pyt" in text
    bare = tmp_path / "bare.pyt"
    memory.default_log().clear()
    pytimings.save(bare, pytimings.Recorder())
    assert main([*argv, "--memory", str(bare)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bare.pyt: the recording has no memory samples" in err
    del keep
