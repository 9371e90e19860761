"""``pytimings serve-toy`` (issue 29 item 9): a real HTTP server that loadgen, report and
compare work against in one command each, scheduling like a batching engine: decode steps
slow down with the batch, and requests past the batch limit queue (TTFT jumps)."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")

from pytimings.cli import main

# a decode step: 1 ms + 4 ms per running request; two run at once, the rest queue
STEP_MS, PER_SEQ_MS, BATCH = 1.0, 4.0, 2


@pytest.fixture(scope="module")
def toy() -> Iterator[str]:
    with subprocess.Popen(
        [sys.executable, "-m", "pytimings.cli", "serve-toy", "--port", "0",
         "--max-batch", str(BATCH), "--step-ms", str(STEP_MS), "--per-seq-ms", str(PER_SEQ_MS),
         "--prefill-us-per-token", "10"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    ) as proc:  # fmt: skip
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert "serving a toy OpenAI-compatible engine" in line, line
            url = line.split(" at ")[1].split(";")[0]
            assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
            yield url
        finally:
            proc.terminate()


def _post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as f:
            return f.status, json.load(f)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_it_answers_as_an_openai_server(toy: str) -> None:
    with urllib.request.urlopen(f"{toy}/models", timeout=5) as f:
        assert json.load(f)["data"][0]["id"] == "toy"
    status, doc = _post(f"{toy}/completions", {"model": "toy", "prompt": "a b c", "max_tokens": 3})
    assert status == 200 and doc["usage"] == {"prompt_tokens": 3, "completion_tokens": 3}
    status, doc = _post(f"{toy}/completions", {"model": "gpt-5", "prompt": "x", "max_tokens": 3})
    assert status == 404 and "try 'toy'" in str(doc["error"])
    metrics = urllib.request.urlopen(toy.removesuffix("/v1") + "/metrics", timeout=5).read()
    assert b"vllm:num_requests_running" in metrics


def test_loadgen_report_and_compare_work_against_it(
    toy: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run.json"
    argv = ["loadgen", "--url", toy, "--model", "toy", "--concurrency", "1,2,4",
            "--requests", "8", "--rounds", "2", "--input-len", "16", "--output-len", "8",
            "--out", str(run)]  # fmt: skip
    assert main([*argv, "-q"]) == 0
    doc = json.loads(run.read_text())
    by_c = {lv["concurrency"]: lv["summary"] for lv in doc["levels"]}
    assert all(s["completed"] == 16 and not s["errors"] for s in by_c.values())
    assert all(s["output_tokens"] == 16 * 8 and s["input_tokens"] == 16 * 16 for s in by_c.values())
    # a decode step per token: 1 + 4 ms alone, 1 + 8 ms two at once (the batch limit)
    tpot1, tpot2 = by_c[1]["tpot_ms"]["median"], by_c[2]["tpot_ms"]["median"]
    assert STEP_MS + PER_SEQ_MS <= tpot1 < tpot2 and tpot2 >= STEP_MS + 1.5 * PER_SEQ_MS
    assert tpot2 / tpot1 > 1.3
    # past the batch limit requests queue for a whole request's decode: TTFT jumps
    assert by_c[4]["ttft_ms"]["median"] > 3 * by_c[2]["ttft_ms"]["median"]
    assert all(lv["engine"]["scrapes"] > 0 for lv in doc["levels"])
    capsys.readouterr()
    assert main(["report", str(run), "-q"]) == 0
    assert "conc" in capsys.readouterr().out
    assert main(["compare", str(run), str(run), "--labels", "a,b", "-q"]) == 0


@pytest.mark.parametrize(
    ("args", "said"),
    [(["--step-ms", "-1"], "--step-ms must be >= 0"), (["--port", "70000"], "--port")],
)
def test_bad_settings_are_one_line(
    args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if args[0] == "--port":  # refused while parsing: argparse's exit 2
        with pytest.raises(SystemExit) as exc:
            main(["serve-toy", *args])
        assert exc.value.code == 2
    else:
        assert main(["serve-toy", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and "Traceback" not in err


def test_the_suggested_loadgen_takes_well_under_a_minute() -> None:
    """The "Try:" line it prints, sized by the toy's own schedule at its defaults (issue 46:
    loadgen's defaults made it an hour): each level sends its warm-up and rounds in waves of
    at most --max-batch requests, each wave a prefill and --output-len decode steps."""
    from pytimings.serving.loadgen import add_arguments as loadgen_arguments

    with subprocess.Popen(
        [sys.executable, "-m", "pytimings.cli", "serve-toy", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    ) as proc:  # fmt: skip
        try:
            assert proc.stdout is not None
            lines = [proc.stdout.readline() for _ in range(2)]
        finally:
            proc.terminate()
    words = lines[1].split()
    assert words[:2] == ["pytimings", "loadgen"], lines
    parser = argparse.ArgumentParser()
    loadgen_arguments(parser)
    args = parser.parse_args(words[2:])
    max_batch, step_s, per_seq_s, prefill_s_per_token = 8, 10e-3, 1e-3, 50e-6  # the defaults
    engine_s = 0.0
    for concurrency in map(int, args.concurrency.split(",")):
        batch = min(concurrency, max_batch)
        waves = math.ceil((args.warmup + args.rounds * args.requests) / batch)
        decode_s = args.output_len * (step_s + batch * per_seq_s)
        engine_s += waves * (decode_s + batch * args.input_len * prefill_s_per_token)
    assert engine_s < 30, f"{engine_s:.0f} s of engine time"
    assert args.warmup >= max(map(int, args.concurrency.split(",")))


def test_sigterm_saves_what_was_measured_as_ctrl_c_does(toy: str, tmp_path: Path) -> None:
    """``timeout -s TERM`` (as Slurm and Kubernetes stop a job) mid-run: the run file holds
    the levels done and the stopped level's measured requests under ``interrupted``."""
    run = tmp_path / "run.json"
    argv = ["timeout", "--preserve-status", "-s", "TERM", "4",
            sys.executable, "-m", "pytimings.cli", "loadgen", "--url", toy, "--model", "toy",
            "--concurrency", "1,2", "--requests", "200",
            "--rounds", "1", "--warmup", "1", "--input-len", "4", "--output-len", "8",
            "--out", str(run), "-q"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 143, proc.stderr
    assert "stopped at concurrency 1 (Terminated: SIGTERM)" in proc.stderr, proc.stderr
    interrupted = json.loads(run.read_text())["interrupted"]
    assert interrupted["concurrency"] == 1 and interrupted["reason"] == "Terminated: SIGTERM"
    assert len(interrupted["requests"]) > 0
    assert all(r["error"] is None and r["output_tokens"] == 8 for r in interrupted["requests"])
