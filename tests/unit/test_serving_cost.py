"""Cost per million output tokens, by hand on a fixture run file; pooling of several files
per label in compare; a recording given to compare is named as one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import pytimings
from pytimings.cli import main
from pytimings.model.requests import RequestRecord
from pytimings.record.requests import default_log
from pytimings.serving.compare import pool_runs
from pytimings.serving.runfile import SCHEMA, load_run

S = 1_000_000_000
PRICE, GPUS = 2.5, 8


def _level(conc: int, rounds: list[tuple[int, int, int, int]]) -> dict[str, Any]:
    """rounds: (window start s, window end s, requests, output tokens per request)."""
    out = []
    for ri, (a, b, n, tokens) in enumerate(rounds):
        recs = [RequestRecord(f"c{conc}r{ri}q{i}", a * S + i, a * S + i + S // 10,
                              [a * S + i + S // 20], [tokens], output_tokens=tokens)
                for i in range(n)]  # fmt: skip
        out.append({"round": ri, "start_ns": a * S, "end_ns": b * S, "errors": {},
                    "summary": {}, "requests": [r.to_json() for r in recs]})  # fmt: skip
    return {"concurrency": conc, "rate": None, "warmup": {}, "rounds": out, "summary": {}}


def _write(path: Path, levels: list[dict[str, Any]], model: str = "m") -> Path:
    path.write_text(json.dumps({"schema": SCHEMA, "config": {"model": model}, "levels": levels}))
    return path


def test_cost_per_million_output_tokens_by_hand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # c=2: 2 s window with 3 x 10 tokens, 1 s window with 2 x 15 tokens: 60 tok / 3 s
    # c=4: one 2 s window with 4 x 25 tokens: 100 tok / 2 s; the run: 160 tok / 5 s
    a = _write(tmp_path / "a.json", [_level(2, [(0, 2, 3, 10), (3, 4, 2, 15)]),
                                     _level(4, [(10, 12, 4, 25)])])  # fmt: skip
    b = _write(tmp_path / "b.json", [_level(2, [(0, 1, 3, 10)]), _level(4, [(5, 6, 1, 7)])])
    per_s = PRICE * GPUS / 3600  # USD per second of the server
    want = {2: per_s / (60 / 3) * 1e6, 4: per_s / (100 / 2) * 1e6}
    want_run = per_s / (160 / 5) * 1e6
    out = tmp_path / "cmp.json"
    rc = main(["compare", str(a), str(b), "--labels", "a,b", "--resamples", "100",
               "--gpu-price", str(PRICE), "--gpus", str(GPUS), "--json", str(out)])  # fmt: skip
    assert rc == 0
    sw = json.loads(out.read_text())["sweeps"]["a"]
    assert {r["concurrency"]: r["cost_per_mtok_usd"] for r in sw["levels"]} == pytest.approx(want)
    assert sw["cost_per_mtok_usd"] == pytest.approx(want_run)
    assert sw["gpu_price"] == {"usd_per_gpu_hour": PRICE, "gpus": GPUS}
    text = capsys.readouterr().out
    assert f"{want_run:.3f} USD per million output tokens over the run" in text
    assert f"{want[4]:.3f}" in text
    # the report's text view: the same cells
    assert main(["report", str(a), "--gpu-price", str(PRICE), "--gpus", str(GPUS)]) == 0
    text = capsys.readouterr().out
    assert "USD/Mtok" in text and f"{want[2]:.3f}" in text and f"{want_run:.3f} USD" in text
    page = tmp_path / "r.html"
    assert main(["report", str(a), "--html", str(page), "--gpu-price", str(PRICE), "--gpus",
                 str(GPUS)]) == 0  # fmt: skip
    html = page.read_text()
    assert "USD/Mtok</th>" in html and f"<td>{want[4]:.3f}</td>" in html
    # without a price: no cost anywhere
    assert (
        main(
            ["compare", str(a), str(b), "--labels", "a,b", "--resamples", "100", "--json", str(out)]
        )
        == 0
    )
    assert "cost_per_mtok_usd" not in json.loads(out.read_text())["sweeps"]["a"]
    for bad, message in ((["--gpu-price", "-1"], "--gpu-price"), (["--gpus", "2"], "--gpus")):
        assert main(["compare", str(a), str(b), *bad]) == 2
        assert message in capsys.readouterr().err


def test_pooled_files_keep_their_rounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a1 = _write(tmp_path / "a1.json", [_level(2, [(0, 2, 3, 10), (3, 4, 2, 15)])])
    a2 = _write(tmp_path / "a2.json", [_level(2, [(20, 21, 2, 12)]), _level(4, [(30, 31, 1, 5)])])
    b1 = _write(tmp_path / "b1.json", [_level(2, [(0, 1, 3, 10)])])
    pooled = pool_runs([load_run(a1), load_run(a2)])
    assert [lv.concurrency for lv in pooled.levels] == [2, 4]
    assert [rd.start_ns // S for rd in pooled.levels[0].rounds] == [0, 3, 20]
    docs = []
    for argv in (
        [f"{a1},{a2}", str(b1), "--labels", "a,b"],
        ["--run", f"a={a1}", "--run", f"b={b1}", "--run", f"a={a2}"],
    ):
        out = tmp_path / "cmp.json"
        assert main(["compare", *argv, "--resamples", "100", "--json", str(out)]) == 0
        docs.append(json.loads(out.read_text()))
    assert docs[0]["inputs"] == docs[1]["inputs"] == {"a": [str(a1), str(a2)], "b": [str(b1)]}
    thr = docs[0]["sweeps"]["a"]["levels"][0]["throughput"]
    assert thr == pytest.approx((30 + 30 + 24) / (2 + 1 + 1))  # tokens over pooled windows
    assert docs[0]["comparisons"] == docs[1]["comparisons"]
    other = _write(tmp_path / "other.json", [_level(2, [(0, 1, 1, 1)])], model="other")
    for argv, message in [
        ([f"{a1},{other}", str(b1)], "cannot pool"),
        ([str(a1), "--run", f"b={b1}"], "not both"),
        (["--run", "nolabel", "--run", f"b={b1}"], "LABEL=FILE"),
        (["--run", f"a={a1}"], "at least two"),
    ]:
        assert main(["compare", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err


def test_a_recording_given_to_compare_is_named_as_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    default_log().clear()
    rec = tmp_path / "engine.pyt"
    pytimings.save(rec, pytimings.Recorder())
    a = _write(tmp_path / "a.json", [_level(2, [(0, 1, 1, 1)])])
    assert main(["compare", str(a), str(rec)]) == 2
    err = capsys.readouterr().err
    assert "engine.pyt: this is a recording, not a loadgen run file" in err
    assert "not valid JSON" not in err
