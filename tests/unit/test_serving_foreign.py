"""Other tools' result files (written by hand from their documented shapes, see each
tests/data/<format>/README.md) read as runs, compared and reported; bad files refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pytimings.cli import main
from pytimings.serving.foreign import AIPERF, SGLANG, VLLM, load_any
from pytimings.serving.metrics import serving_metrics

DATA = Path(__file__).resolve().parents[1] / "data"
VLLM_FILE = DATA / "vllm_bench/detailed/result.json"
SGLANG_FILE = DATA / "sglang_bench/two_levels/results.jsonl"
AIPERF_FILE = DATA / "aiperf/profile_export/profile_export.jsonl"


def test_vllm_result_carries_its_per_request_figures() -> None:
    run = load_any(VLLM_FILE)
    doc = json.loads(VLLM_FILE.read_text())
    assert run.fmt == VLLM and [lv.concurrency for lv in run.levels] == [2]
    (rd,) = run.levels[0].rounds
    m = serving_metrics(rd.records, windows=[(rd.start_ns, rd.end_ns)])
    ok = [i for i, e in enumerate(doc["errors"]) if not e]
    assert m.completed == 3 and m.errors == {"tool_error": 1}
    assert m.ttft.mean == pytest.approx(np.mean([doc["ttfts"][i] * 1e3 for i in ok]))
    tpot = [sum(doc["itls"][i]) * 1e3 / (doc["output_lens"][i] - 1) for i in ok]
    assert m.tpot.mean == pytest.approx(np.mean(tpot))
    assert m.itl.count == sum(len(doc["itls"][i]) for i in ok)
    # throughput over the file's duration, as vLLM computed its own
    assert m.output_throughput == pytest.approx(doc["total_output_tokens"] / doc["duration"])
    assert m.output_throughput == pytest.approx(doc["output_throughput"])
    assert any("send times" in a for a in run.config["absent"])


def test_sglang_lines_are_levels_and_aiperf_records_a_run() -> None:
    run = load_any(SGLANG_FILE)
    assert run.fmt == SGLANG and [lv.concurrency for lv in run.levels] == [1, 2]
    rd = run.levels[1].rounds[0]
    assert [r.chunk_ns[0] for r in rd.records] == [12_000_000, 18_000_000]
    ai = load_any(AIPERF_FILE)
    assert ai.fmt == AIPERF
    (lv,) = ai.levels
    recs = lv.rounds[0].records
    m = serving_metrics(recs)
    assert m.completed == 2 and m.errors == {"tool_error": 1}
    assert m.ttft.mean == pytest.approx(25.5)
    assert m.tpot.mean == pytest.approx((5.0 + 5.5 + 6.0) / 3)
    assert m.input_tokens == 1100 and m.output_tokens == 8
    assert lv.concurrency == 3  # the peak in flight: sent 10 ms apart, each ~42 ms long


def test_compare_and_report_take_them_and_name_the_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cmp.json"
    rc = main(["compare", str(SGLANG_FILE), str(VLLM_FILE), "--labels", "sg,vl",
               "--resamples", "100", "--json", str(out)])  # fmt: skip
    assert rc == 0
    text = capsys.readouterr().out
    assert f"sg: {SGLANG}" in text and f"vl: {VLLM}" in text
    doc = json.loads(out.read_text())
    assert doc["formats"] == {"sg": [SGLANG], "vl": [VLLM]}
    assert {c["concurrency"] for c in doc["comparisons"]} == {2}
    assert doc["engine"]["vl"] == {"2": None}  # absent, not zero
    assert main(["report", str(AIPERF_FILE), str(VLLM_FILE)]) == 0
    text = capsys.readouterr().out
    assert f"profile_export.jsonl: a {AIPERF} result file" in text
    assert f"result.json: a {VLLM} result file; absent from it: request send times" in text


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p.write_text(VLLM_FILE.read_text()[:300]), "not valid JSON"),
        (lambda p: p.write_text(SGLANG_FILE.read_text()[:-40]), "line 2 is not valid JSON"),
        (lambda p: p.write_text(AIPERF_FILE.read_text()[:-30]), "line 3 is not valid JSON"),
        (lambda p: p.write_text('{"hello": 1}'), "not a result file of a known format"),
        (
            lambda p: p.write_text((DATA / "vllm_bench/detailed/aggregates_only.json").read_text()),
            "rerun with --save-detailed",
        ),
        (
            lambda p: p.write_text(
                VLLM_FILE.read_text().replace('"ttfts": [\n    0.01', '"ttfts": [\n    "x"')
            ),
            "malformed result file",
        ),
    ],
)
def test_a_truncated_or_foreign_file_gives_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, message: str
) -> None:
    bad = tmp_path / "bad.json"
    make(bad)  # type: ignore[operator]
    for argv in (["compare", str(bad), str(VLLM_FILE)], ["report", str(bad)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err and str(bad) in err


def _vllm_with(key: str, index: int, value: object) -> str:
    doc = json.loads(VLLM_FILE.read_text())
    if index < 0:
        doc[key] = value
    else:
        doc[key][index] = value
    return json.dumps(doc)


def _aiperf_with(where: str, key: str, value: object) -> str:
    lines = AIPERF_FILE.read_text().splitlines()
    first = json.loads(lines[0])
    if where == "metadata":
        first["metadata"][key] = value
    else:
        first["metrics"][key]["value"] = value
    return "\n".join([json.dumps(first), *lines[1:]])


@pytest.mark.parametrize(
    "text, message",
    [
        (lambda: _vllm_with("ttfts", 0, 1e300), "ttfts[0] + itls[0] is past int64"),
        (lambda: _vllm_with("output_lens", 0, 2**63), "output_lens[0] must be a count within"),
        (lambda: _vllm_with("duration", -1, 1e300), "duration is past int64"),
        (lambda: _aiperf_with("metadata", "request_start_ns", 2**70), "request_start_ns"),
        (lambda: _aiperf_with("metadata", "request_end_ns", 2**64), "request_end_ns"),
        (lambda: _aiperf_with("metrics", "time_to_first_token", 1e300), "token's time"),
    ],
    ids=["ttfts", "output_lens", "duration", "request_start_ns", "request_end_ns", "ttft"],
)
def test_values_past_int64_give_one_line_not_an_overflow_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: object, message: str
) -> None:
    """vLLM ttfts 1e300, output_lens 2**63, AIPerf request_start_ns 2**70 were OverflowError
    tracebacks in report and compare (issue 47 #26)."""
    bad = tmp_path / "bad.json"
    bad.write_text(text())  # type: ignore[operator]
    for argv in (["compare", str(bad), str(VLLM_FILE)], ["report", str(bad)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err and str(bad) in err, err


def test_a_file_name_that_is_not_utf8_shows_with_replacement_characters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The HTML writers failed with UnicodeEncodeError on the page title (issue 47 #28)."""
    import os

    odd = Path(os.fsdecode(os.fsencode(tmp_path) + b"/run\xfd.json"))
    odd.write_bytes(VLLM_FILE.read_bytes())
    out = tmp_path / "r.html"
    assert main(["report", str(odd), "--html", str(out)]) == 0
    capsys.readouterr()
    assert "<title>Serving: run\ufffd.json</title>" in out.read_text(encoding="utf-8")


def test_token_counts_near_int64_sum_exactly(tmp_path: Path) -> None:
    """Three requests of 2**62 output tokens each: the int64 sum wrapped to a negative
    throughput (found in the adversarial pass of issue 47)."""
    doc = json.loads(VLLM_FILE.read_text())
    doc["output_lens"] = [2**62] * len(doc["output_lens"])
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc))
    (rd,) = load_any(path).levels[0].rounds
    m = serving_metrics(rd.records, windows=[(rd.start_ns, rd.end_ns)])
    assert m.output_tokens == 3 * 2**62
    assert m.output_throughput == pytest.approx(3 * 2**62 / doc["duration"])
