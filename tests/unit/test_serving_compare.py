"""compare: verdicts on synthetic runs with a known effect and on pure noise; the sweep knee."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytimings.cli import main
from pytimings.model.requests import RequestRecord
from pytimings.serving.compare import compare_levels, level_data, sweep, weighted_percentile
from pytimings.serving.runfile import SCHEMA, load_run

MS = 1_000_000


def _round(rng: np.random.Generator, conc: int, n_req: int, ttft_ms: float, tpot_ms: float,
           t0: int, ri: int, n_out: int = 20) -> dict[str, Any]:  # fmt: skip
    """A closed-loop round: ``conc`` workers send requests back to back."""
    free = [t0] * conc
    recs = []
    for i in range(n_req):
        w = int(np.argmin(free))
        start = free[w]
        ttft = max(1.0, rng.normal(ttft_ms, 0.1 * ttft_ms)) * MS
        gaps = np.maximum(0.1, rng.normal(tpot_ms, 0.1 * tpot_ms, size=n_out - 1)) * MS
        chunks = start + int(ttft) + np.concatenate([[0], np.cumsum(gaps).astype(np.int64)])
        end = int(chunks[-1]) + MS // 10
        recs.append(RequestRecord(f"r{ri}-{i}", start, end, [int(c) for c in chunks], [1] * n_out,
                                  input_tokens=100, output_tokens=n_out))  # fmt: skip
        free[w] = end
    return {"round": ri, "start_ns": t0, "end_ns": max(free), "errors": {}, "summary": {},
            "requests": [r.to_json() for r in recs]}  # fmt: skip


def _run(path: Path, seed: int, levels: dict[int, tuple[float, float]], rounds: int = 3,
         n_req: int = 40, failed: int = 0) -> Path:  # fmt: skip
    rng = np.random.default_rng(seed)
    out = []
    t = 0
    for conc, (ttft, tpot) in levels.items():
        rds = []
        for ri in range(rounds):
            rd = _round(rng, conc, n_req, ttft, tpot, t, ri)
            for k in range(failed):  # failed requests: saved, counted, never measured
                bad = RequestRecord(f"f{ri}-{k}", t, t + MS, error="http_5xx", error_detail="500")
                rd["requests"].append(bad.to_json())
            t = rd["end_ns"] + 10 * MS
            rds.append(rd)
        out.append({"concurrency": conc, "rate": None, "warmup": {}, "rounds": rds, "summary": {}})
    path.write_text(json.dumps({"schema": SCHEMA, "config": {}, "levels": out}))
    return path


def _verdicts(a: Path, b: Path, resamples: int = 300, seed: int = 0) -> dict[str, str]:
    la, lb = load_run(a).levels[0], load_run(b).levels[0]
    rows = compare_levels(level_data(la, "vllm"), level_data(lb, "vllm"), resamples,
                          np.random.default_rng(seed))  # fmt: skip
    return {r["metric"]: r["verdict"] for r in rows}


def test_known_effect_is_found_with_direction(tmp_path: Path) -> None:
    a = _run(tmp_path / "a.json", 1, {4: (100.0, 20.0)})
    b = _run(tmp_path / "b.json", 2, {4: (130.0, 15.0)})  # TTFT +30%, TPOT -25%
    v = _verdicts(a, b)
    assert v["ttft_mean"] == "worse" and v["ttft_p99"] == "worse"
    assert v["tpot_mean"] == "better" and v["itl_p99"] == "better"
    assert v["e2el_mean"] == "better"  # 100+19*20=480 -> 130+19*15=415
    assert v["throughput"] == "better"  # shorter requests, same concurrency


def test_pure_noise_is_mostly_within_noise(tmp_path: Path) -> None:
    # 95% intervals: over 40 same-distribution comparisons a calibrated interval calls
    # about two "significant" (this seed: 1); an interval half as wide (resampling 4x the
    # requests) calls 12 here, so the bound below catches over-confident intervals
    flagged = 0
    for k in range(20):
        a = _run(tmp_path / f"a{k}.json", 100 + k, {2: (100.0, 20.0)}, n_req=20)
        b = _run(tmp_path / f"b{k}.json", 200 + k, {2: (100.0, 20.0)}, n_req=20)
        v = _verdicts(a, b, resamples=200, seed=k)
        flagged += v["ttft_mean"] != "within noise"
        flagged += v["tpot_mean"] != "within noise"
    assert flagged <= 6  # expected ~2 of 40 at 95%


def test_throughput_needs_two_rounds_for_a_verdict(tmp_path: Path) -> None:
    a = _run(tmp_path / "a.json", 1, {2: (100.0, 20.0)}, rounds=1)
    b = _run(tmp_path / "b.json", 2, {2: (50.0, 10.0)}, rounds=1)
    assert _verdicts(a, b)["throughput"] == "n/a (too few rounds)"


def test_sweep_knee(tmp_path: Path) -> None:
    levels = {1: (50.0, 20.0), 2: (50.0, 20.3), 4: (55.0, 20.5), 8: (80.0, 26.0), 16: (150.0, 40.0)}
    sw = sweep(load_run(_run(tmp_path / "s.json", 5, levels, rounds=2, n_req=16)), "vllm", 10.0)
    assert sw["knee"] == 8
    thr = [r["throughput"] for r in sw["levels"]]
    assert thr == sorted(thr)  # more concurrency, more throughput here
    assert sw["levels"][0]["efficiency"] == pytest.approx(1.0)


def test_weighted_percentile_matches_repeat() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        v = rng.normal(size=int(rng.integers(1, 40)))
        w = rng.integers(0, 4, size=v.size)
        if w.sum() == 0:
            continue
        for q in (0, 50, 90, 99, 100):
            assert weighted_percentile(v, w, q) == pytest.approx(np.percentile(np.repeat(v, w), q))


def test_cli_table_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _run(tmp_path / "a.json", 1, {1: (50.0, 20.0), 4: (60.0, 22.0)}, rounds=2, n_req=12)
    b = _run(tmp_path / "b.json", 2, {1: (50.0, 20.0), 4: (90.0, 30.0)}, rounds=2, n_req=12,
             failed=1)  # fmt: skip
    out_json, out_png = tmp_path / "cmp.json", tmp_path / "cmp.png"
    rc = main(["compare", str(a), str(b), "--labels", "on,off", "--resamples", "200",
               "--json", str(out_json), "--plot", str(out_png)])  # fmt: skip
    assert rc == 0
    text = capsys.readouterr().out
    assert "c=4 ttft_mean (ms)" in text and "worse  (off vs on)" in text
    assert "sweep on: knee at concurrency" in text
    doc = json.loads(out_json.read_text())
    off = {"http_5xx": 2}  # one per round, two rounds
    assert doc["errors"] == {"on": {"1": {}, "4": {}}, "off": {"1": off, "4": off}}
    assert "http_5xx=2" in text
    assert {c["concurrency"] for c in doc["comparisons"]} == {1, 4}
    assert len(doc["comparisons"]) == 2 * 6
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("make", "extra", "message"),
    [
        (lambda p: p, [], "cannot read"),  # missing file
        (lambda p: (p.write_text("{not json"), p)[1], [], "not valid JSON"),
        (lambda p: (p.write_text('{"schema": "other"}'), p)[1], [], "not a pytimings.serving/1 or"),
        (
            lambda p: (
                p.write_text(
                    json.dumps(
                        {
                            "schema": SCHEMA,
                            "config": {},
                            "levels": [{"concurrency": 1, "rounds": [{"round": 0}]}],
                        }
                    )
                ),
                p,
            )[1],
            [],
            "malformed run file",
        ),
    ],
)
def test_bad_inputs_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    make: Any, extra: list[str], message: str) -> None:  # fmt: skip
    good = _run(tmp_path / "good.json", 1, {1: (50.0, 20.0)}, rounds=1, n_req=4)
    bad = make(tmp_path / "bad.json")
    assert main(["compare", str(good), str(bad), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and "bad.json" in err


def test_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _run(tmp_path / "good.json", 1, {1: (50.0, 20.0)}, rounds=1, n_req=4)
    other = _run(tmp_path / "other.json", 2, {2: (50.0, 20.0)}, rounds=1, n_req=4)
    for argv, message in [
        (["compare", str(good)], "at least two"),
        (["compare", str(good), str(good), "--labels", "x"], "--labels"),
        (["compare", str(good), str(other)], "no concurrency level in common"),
        (["compare", str(good), str(good), "--definition", "x"], "--definition"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err


def test_the_same_file_twice_is_an_aa_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``compare run.json run.json``: the sides are named ``run.json`` and ``run.json#2``,
    stderr says so, and nothing differs."""
    run = _run(tmp_path / "run.json", 1, {1: (50.0, 20.0)}, rounds=2, n_req=12)
    out = tmp_path / "aa.json"
    assert main(["compare", str(run), str(run), "--resamples", "200", "--json", str(out)]) == 0
    cap = capsys.readouterr()
    assert f"labelled {run}, {run}#2 (--labels names them)" in cap.err
    doc = json.loads(out.read_text())
    assert {c["label"] for c in doc["comparisons"]} == {f"{run}#2"}
    assert {c["baseline"] for c in doc["comparisons"]} == {str(run)}
    assert {c["verdict"] for c in doc["comparisons"]} <= {"within noise", "n/a (too few rounds)"}
    # labels given by the user must still be distinct
    assert main(["compare", str(run), str(run), "--labels", "a,a"]) == 2
    assert "labels must be distinct" in capsys.readouterr().err


@pytest.mark.parametrize("field", ["end_ns", "start_ns"])
def test_a_time_beyond_64_bits_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str
) -> None:
    good = _run(tmp_path / "good.json", 1, {1: (50.0, 20.0)}, rounds=1, n_req=4)
    doc = json.loads(good.read_text())
    doc["levels"][0]["rounds"][0]["requests"][0][field] = 10**30
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    assert main(["compare", str(good), str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bad.json" in err and "2**63" in err


def test_runs_of_different_workloads_are_told_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace replay against synthetic prompts (or another trace) is said on stderr and
    in the JSON; the same trace from another directory is the same workload."""
    trace = {"path": "/a/t.jsonl", "format": "azure_csv", "requests": 1000, "span_s": 60.0,
             "speed": 1.0, "input_tokens": 9, "output_tokens": 9}  # fmt: skip
    runs = {}
    for name, work in (
        ("synthetic", None),
        ("trace", {"source": "trace", "trace": trace}),
        ("moved", {"source": "trace", "trace": {**trace, "path": "/b/t.jsonl"}}),
    ):
        path = _run(tmp_path / f"{name}.json", 1, {1: (50.0, 20.0)}, rounds=2, n_req=12)
        doc = json.loads(path.read_text())
        if work is not None:
            doc["config"]["workload"] = work
        path.write_text(json.dumps(doc))
        runs[name] = str(path)
    out = tmp_path / "c.json"
    argv = ["compare", runs["synthetic"], runs["trace"], runs["moved"], "--labels", "s,t,m",
            "--resamples", "100", "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "t sent another workload than s (source, trace differ)" in err
    assert json.loads(out.read_text())["workload_differs"] == {
        "t": ["source", "trace"],
        "m": ["source", "trace"],
    }
    # pooled under one label, different workloads are refused; a moved trace is not
    assert main(["compare", f"{runs['trace']},{runs['moved']}", runs["trace"],
                 "--resamples", "100"]) == 0  # fmt: skip
    assert main(["compare", f"{runs['trace']},{runs['synthetic']}", runs["trace"]]) == 2
    assert "workload source, workload trace differ" in capsys.readouterr().err
