"""The overhead command runs, reports every row (a number or why not) and its targets.

Timings are never asserted: this machine's numbers are recorded in benches/RESULTS.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytimings import cli
from pytimings.bench import overhead
from pytimings.errors import UsageError

REPO = Path(__file__).resolve().parents[2]


def test_cli_prints_every_row_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "oh.json"
    assert cli.main(["overhead", "--iterations", "2000", "--repeats", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["schema"] == "pytimings.overhead/1"
    rows = {r["key"]: r for r in doc["rows"]}
    assert list(rows) == list(overhead.EXPECTED_KEYS)
    for key, label, _ in overhead.ROWS:
        assert label in text
        r = rows[key]
        assert r["ns"] is not None or r["note"], key  # a number, or the reason there is none
        assert len(r["samples"]) in (0, 2)
    for key in ("nullcontext", "pytimings_host", "pytimings_disabled"):
        assert rows[key]["ns"] is not None
    assert [t["name"] for t in doc["targets"]] == [
        "host-only <= 1.0x nullcontext",
        "GPU-timed <= 1.1x (floor + host-only)",
        "sampled 1/16 <= host-only + 200 ns",
    ]
    assert doc["targets"][0]["passed"] in (True, False)
    assert ("PASS  host-only" in text) or ("FAIL  host-only" in text)


def test_gpu_rows_say_why_without_a_gpu() -> None:
    from pytimings.record.cuda import cuda_available

    if cuda_available():
        pytest.skip("a GPU is present")
    rows = overhead.measure(iterations=500, repeats=1)
    for r in rows:
        if r.key in ("pytimings_cuda", "pytimings_sampled16", "torch_event_pair", "cuda_floor"):
            assert r.ns is None and r.note.startswith("no GPU")
    assert [t.passed for t in overhead.targets(rows)][1:] == [None, None]


def test_targets_arithmetic() -> None:
    def rows(**ns: float) -> list[overhead.Row]:
        return [overhead.Row(k, k, ns.get(k)) for k in overhead.EXPECTED_KEYS]

    t = overhead.targets(
        rows(
            nullcontext=100,
            pytimings_host=90,
            pytimings_cuda=640,  # <= 1.1 * (500 + 90)
            cuda_floor=500,
            pytimings_sampled16=400,  # > 90 + 200
        )
    )
    assert [x.passed for x in t] == [True, True, False]
    t = overhead.targets(rows(nullcontext=100, pytimings_host=101))
    assert [x.passed for x in t] == [False, None, None]


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:  # refused while parsing, before any measuring
        cli.main(["overhead", "--iterations", "0"])
    assert exc.value.code == 2
    assert "argument --iterations: must be from 1 to" in capsys.readouterr().err


def test_bad_json_path_fails_before_measuring(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def measured(*_: object) -> None:
        raise AssertionError("measured before checking --json")

    monkeypatch.setattr(overhead, "measure", measured)
    assert cli.main(["overhead", "--json", "/nonexist/o.json"]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and "\n" not in err, err
    assert "--json /nonexist/o.json: directory /nonexist does not exist" in err, err


def test_write_error_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="cannot write"):
        overhead.write_json(str(tmp_path / "file" / "o.json"), [], [], 1, 1)


@pytest.mark.slow
def test_bench_script_checks_its_rows(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            str(REPO / "benches" / "bench_overhead.py"),
            "--iterations",
            "1000",
            "--repeats",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    sys.path.insert(0, str(REPO / "benches"))
    try:
        import bench_overhead
    finally:
        sys.path.pop(0)
    rows = [overhead.Row(k, k, 1.0) for k in overhead.EXPECTED_KEYS[:-1]]
    assert bench_overhead.check(rows) == ["row cuda_floor is missing"]
    rows.append(overhead.Row("cuda_floor", "floor"))
    assert bench_overhead.check(rows) == ["row cuda_floor has neither a number nor a reason"]
