"""Scrapes of servers that misbehave (issue 47 items 1, 2, 9, 13, 19): a DCGM exporter or an
engine endpoint on loopback (tests/helpers/loopback.raw_server) that trickles a byte every
0.5 s, answers a garbage status line, cuts its body, never ends it, or labels a GPU with a
huge number. Each read stays inside its deadline and cap, the failure is counted, and
``loadgen --telemetry-url`` writes its run file."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from helpers.loopback import raw_server
from sse_server import Behaviour, serve
from test_loadgen_telemetry import _exposition

from pytimings.serving.scrape import ScrapeFailed, read_body_once

Writer = asyncio.StreamWriter
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"


async def trickle(_: asyncio.StreamReader, w: Writer, n: int) -> None:
    w.write(HEAD + b"Content-Length: 100000\r\n\r\n# ")
    for _ in range(240):  # 2 minutes at most, far past any deadline
        await asyncio.sleep(0.5)
        w.write(b"x")
        await w.drain()


async def bad_status(_: asyncio.StreamReader, w: Writer, n: int) -> None:
    w.write(b"garbage that is no status line\r\n\r\n")
    await w.drain()


async def truncated(_: asyncio.StreamReader, w: Writer, n: int) -> None:
    body = _exposition(n, 1.0).encode()
    w.write(HEAD + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[: len(body) // 2])
    await w.drain()


async def endless(_: asyncio.StreamReader, w: Writer, n: int) -> None:
    w.write(HEAD + b"\r\n")  # no length: the body ends when the connection does
    line = b'filler_metric{id="0"} 1\n' * 4096
    for _ in range(20_000):  # ~2 GB at most
        w.write(line)
        await w.drain()


def _good_then(cut_from: int) -> Callable[[asyncio.StreamReader, Writer, int], Awaitable[None]]:
    async def handle(reader: asyncio.StreamReader, w: Writer, n: int) -> None:
        if n >= cut_from:
            await truncated(reader, w, n)
            return
        body = _exposition(n, 0.1 * n).encode()
        w.write(HEAD + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        await w.drain()

    return handle


def _huge_gpu_labels(label: str) -> Callable[[asyncio.StreamReader, Writer, int], Awaitable[None]]:
    async def handle(_: asyncio.StreamReader, w: Writer, n: int) -> None:
        body = _exposition(n, 0.1 * n) + f'DCGM_FI_DEV_POWER_USAGE{{gpu="{label}"}} 100\n'
        body += 'DCGM_FI_DEV_GPU_TEMP{gpu="0"} NaN\n'
        data = body.encode()
        w.write(HEAD + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        await w.drain()

    return handle


@pytest.mark.parametrize(
    ("handler", "why"),
    [
        (trickle, "no whole answer within 1 s"),
        (bad_status, "Bad status line"),
        (truncated, "ClientPayloadError"),
        (endless, "body over 1,048,576 bytes"),
    ],
)
def test_one_read_stays_inside_its_deadline_and_cap(
    handler: Callable[[asyncio.StreamReader, Writer, int], Awaitable[None]], why: str
) -> None:
    with raw_server(handler) as url:
        t0 = time.monotonic()
        with pytest.raises(ScrapeFailed, match=why):
            read_body_once(url + "/metrics", deadline_s=1.0, max_bytes=1 << 20)
        assert time.monotonic() - t0 < 1.0 + 2.0  # the whole read's deadline, and slack


def _loadgen(server_url: str, exporter_url: str, out: Path) -> subprocess.CompletedProcess[str]:
    """loadgen in a process of its own: a hang is a timeout here, not a hung test run."""
    argv = [
        sys.executable, "-m", "pytimings.cli", "loadgen", "--url", server_url, "--model", "m",
        "--input-len", "8", "--output-len", "8", "--out", str(out), "--quiet",
        "--concurrency", "2", "--requests", "4", "--rounds", "2", "--warmup", "1",
        "--no-metrics", "--telemetry-url", exporter_url, "--telemetry-interval", "0.02",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=90, env=env)


@pytest.mark.parametrize(
    ("handler", "samples"),
    [(trickle, False), (bad_status, False), (truncated, False), (_good_then(12), True)],
    ids=["trickle", "bad_status_line", "cut_body", "cut_from_the_13th"],
)
def test_loadgen_writes_its_run_file_and_counts_the_failed_scrapes(
    tmp_path: Path,
    handler: Callable[[asyncio.StreamReader, Writer, int], Awaitable[None]],
    samples: bool,
) -> None:
    out = tmp_path / "run.json"
    # requests of ~0.2 s: the level's rounds span ~0.8 s, ~30 scrapes
    with serve([Behaviour(0.05, 0.02)]) as server, raw_server(handler) as exporter:
        t0 = time.monotonic()
        done = _loadgen(server.url, exporter + "/metrics", out)
        took = time.monotonic() - t0
    assert done.returncode == 0, done.stderr
    tel = json.loads(out.read_text())["levels"][0]["telemetry"]
    assert tel["scrape_errors"] >= 1
    assert (tel["samples"] > 0) is samples
    said = [line for line in done.stderr.splitlines() if "telemetry" in line]
    assert said and all("Traceback" not in line for line in done.stderr.splitlines())
    assert took < 60  # one deadline (2 s) per trickled scrape at most, never forever


@pytest.mark.parametrize("label", ["4294967296", "1000000000", "-1", "0x1", "²"])
def test_a_gpu_label_that_is_no_index_is_left_out_and_counted(tmp_path: Path, label: str) -> None:
    out = tmp_path / "run.json"
    with serve([Behaviour(0.02, 0.005)]) as server, raw_server(_huge_gpu_labels(label)) as url:
        done = _loadgen(server.url, url + "/metrics", out)
    assert done.returncode == 0, done.stderr
    tel = json.loads(out.read_text())["levels"][0]["telemetry"]
    assert tel["gpus"] == 2 and tel["scrape_errors"] == 0
    dropped = tel["dropped_samples"]
    assert dropped["gpu_label"] >= 1 and dropped["gpu_label"] == dropped["non_finite"]
    assert "NaN" not in out.read_text()


@pytest.mark.parametrize(
    ("flag", "value", "why"),
    [
        ("--telemetry-url", "foo", "expected http(s)://HOST:PORT/metrics"),
        ("--telemetry-url", "ftp://h/metrics", "expected http(s)://HOST:PORT/metrics"),
        ("--telemetry-interval", "inf", "got 'inf'"),  # refused by the duration parser
        ("--telemetry-interval", "1e300", "up to 86400, not 1e+300"),
    ],
)
def test_a_telemetry_flag_no_sampler_can_use_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, why: str
) -> None:
    from pytimings.cli import main

    argv = ["loadgen", "--url", "http://127.0.0.1:9/v1", "--model", "m", "--out",
            str(tmp_path / "run.json"), "--telemetry-url", "http://127.0.0.1:9/metrics",
            flag, value]  # fmt: skip
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refused the value itself
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    # one line, after argparse's usage where the parser itself refuses the value
    assert flag in err[-1] and err[-1].endswith(why), err
    assert len(err) == 1 or err[0].startswith("usage: pytimings loadgen"), err
