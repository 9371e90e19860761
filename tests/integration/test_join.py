"""join against a real stack: a tiny torch decoder behind an aiohttp streaming server that
records pytimings.request phases, driven by ``pytimings loadgen`` at concurrency 1 and 4."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from torch_server import serve_torch

import pytimings
from pytimings.cli import main
from pytimings.record.requests import default_log
from pytimings.serving.runfile import load_run
from pytimings.serving.sources import join_recordings, load_source

MS = 1e6
DELAY_MS = 40.0  # planted: the scheduler holds each request this long in "queue"
LEVELS, WARMUP, REQUESTS = (1, 4), 2, 4


def _loadgen(url: str, out: Path) -> None:
    rc = main([
        "loadgen", "--url", url, "--model", "tiny", "--input-len", "16", "--output-len", "6",
        "--concurrency", ",".join(map(str, LEVELS)), "--requests", str(REQUESTS),
        "--rounds", "1", "--warmup", str(WARMUP), "--out", str(out), "--quiet",
    ])  # fmt: skip
    assert rc == 0


def _join(run: Path, engine: Path, out: Path, *extra: str) -> dict[str, Any]:
    assert main(["join", str(run), str(engine), "--json", str(out), *extra]) == 0
    return dict(json.loads(out.read_text()))


@pytest.mark.slow
def test_join_decomposes_client_ttft_of_a_torch_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with serve_torch() as server:
        _loadgen(server.url, tmp_path / "plain.json")
        server.save(str(tmp_path / "plain.pyt"))
        server.set_queue_delay(DELAY_MS)
        _loadgen(server.url, tmp_path / "delayed.json")
        server.save(str(tmp_path / "delayed.pyt"))
    docs = {}
    queued: dict[str, dict[int, list[int]]] = {}
    for name in ("plain", "delayed"):
        run = load_run(tmp_path / f"{name}.json")
        completed = sum(lv.summary["completed"] for lv in run.levels)
        assert completed == len(LEVELS) * REQUESTS
        doc = _join(tmp_path / f"{name}.json", tmp_path / f"{name}.pyt", tmp_path / f"{name}.j")
        # every completed request found its engine record, by id; the engine's warm-up
        # requests are the only ones left over
        assert doc["matched"] == completed and doc["unmatched_client"] == 0
        assert doc["unmatched_server"] == len(LEVELS) * WARMUP
        assert all(q["matched_by"] == "id" for q in doc["requests"])
        assert doc["clock"] == {"offset_ns": 0, "uncertainty_ns": 0}  # one host: same clock
        for q in doc["requests"]:
            assert q["client_ttft_ns"] >= q["server_ttft_ns"] > 0
            parts = q["ttft_parts_ns"]
            assert set(parts) >= {"send", "queue", "prefill", "first_token_delivery"}
            assert abs(sum(parts.values()) - q["client_ttft_ns"]) <= 1 * MS
            assert all(v >= 0 for v in parts.values())  # causality on one clock
        docs[name] = {lv["concurrency"]: lv["parts"] for lv in doc["levels"]}
        queued[name] = {
            c: [q["ttft_parts_ns"]["queue"] for q in doc["requests"] if q["concurrency"] == c]
            for c in LEVELS
        }
        # report does this join itself: the engine's requests split as the run's levels
        # and rounds, the engine's warm-up requests apart, per level
        _, eng = join_recordings([load_source(tmp_path / f"{name}.json", "run"),
                                  load_source(tmp_path / f"{name}.pyt", "eng")])  # fmt: skip
        assert eng.joined is not None and eng.joined.outside == 0
        assert [lv.concurrency for lv in eng.run.levels] == list(LEVELS)
        for lv in eng.run.levels:
            assert [len(rd.records) for rd in lv.rounds] == [REQUESTS]
            assert lv.warmup == {"requests": WARMUP}
        # the estimated offset (as for another host) brackets the true one, 0
        est = _join(tmp_path / f"{name}.json", tmp_path / f"{name}.pyt", tmp_path / "e.j",
                    "--clock", "estimate")["clock"]  # fmt: skip
        assert abs(est["offset_ns"]) <= est["uncertainty_ns"]
    out = capsys.readouterr().out
    assert "c=4: client TTFT of 4 requests" in out and "first_token_delivery" in out
    for conc in LEVELS:
        plain, delayed = docs["plain"][conc], docs["delayed"][conc]
        # the planted delay lands in the queue part of every request (sleeps never end
        # early; other parts vary with the machine's load, so they are not compared)
        assert all(q >= 0.98 * DELAY_MS * MS for q in queued["delayed"][conc])
        assert delayed["queue"]["share"] > plain["queue"]["share"]
    assert docs["plain"][1]["queue"]["p50_ns"] < DELAY_MS / 4 * MS  # nothing planted there


def test_join_bad_inputs_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    default_log().clear()
    bare = tmp_path / "bare.pyt"
    pytimings.save(bare, pytimings.Recorder())  # no request timelines
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"schema": "pytimings.serving/1", "config": {}, "levels": []}))
    cases = [
        ([str(run), str(bare)], "bare.pyt: has no requests table"),
        ([str(bare), str(bare)], "bare.pyt: this is a recording, not a loadgen run file"),
        ([str(run), str(bare), "--clock", "ntp"], "--clock 'ntp'"),
        ([str(run), str(bare), "--tolerance-ms", "-1"], "--tolerance-ms"),
    ]
    for argv, message in cases:
        assert main(["join", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err
