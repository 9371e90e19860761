"""``pytimings diff``: a trace against itself, a pair with one kernel 20% longer, the gate,
bad input, and the bootstrap's false-positive rate on same-distribution samples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import nsys_synth as ns
from helpers.bootstrap_check import binomial_band, false_positives
from helpers.synth import make_trace

from pytimings.analysis.attribution import attribute
from pytimings.analysis.diff import TOO_FEW_WINDOWS, diff
from pytimings.analysis.result import Attribution
from pytimings.cli import main
from pytimings.console.text import signed_duration
from pytimings.errors import UsageError

STEPS = 40
KERNELS = {"kernA": 10_000, "kernB": 20_000, "kernC": 5_000}  # mean durations (ns)


def write_pair_member(path: Path, b_scale: float, seed: int = 1) -> Path:
    """``STEPS`` NVTX ``step`` ranges; in each, launches of kernA, kernB, kernC and a HtoD
    copy, run back to back on one stream after 1 µs gaps (durations jittered by +-10%, the
    same jitter for every ``b_scale``): kernB's duration times ``b_scale`` shifts the ops after
    it on the stream."""
    rng = np.random.default_rng(seed)
    strings = [(1, "kernA"), (2, "kernB"), (3, "kernC"), (4, "cudaLaunchKernel_v7000"),
               (5, "cudaMemcpyAsync_v3020"), (6, "main")]  # fmt: skip
    runtime, kernels, copies, nvtx = [], [], [], []
    corr = 0
    for i in range(STEPS):
        t0 = i * 200_000
        nvtx.append((t0, t0 + 20_000, 59, None, None, None, "step", ns.GTID))
        gpu = t0 + 5_000
        for j, (sid, name) in enumerate(((1, "kernA"), (2, "kernB"), (3, "kernC"))):
            corr += 1
            runtime.append((t0 + 1_000 * (j + 1), t0 + 1_000 * (j + 1) + 500, 0, ns.GTID, corr, 4))
            d = int(KERNELS[name] * rng.uniform(0.9, 1.1))
            if name == "kernB":
                d = round(d * b_scale)
            kernels.append((gpu, gpu + d, 0, 1, 7, corr, ns.GPID, sid, sid))
            gpu += d + 1_000
        corr += 1
        runtime.append((t0 + 4_000, t0 + 4_500, 0, ns.GTID, corr, 5))
        copies.append((gpu, gpu + 2_000, 0, 1, 7, corr, ns.GPID, 4096, 1, 1, 3))
    return ns.write(path, {
        "StringIds": strings, "CUPTI_ACTIVITY_KIND_RUNTIME": runtime,
        "CUPTI_ACTIVITY_KIND_KERNEL": kernels, "CUPTI_ACTIVITY_KIND_MEMCPY": copies,
        "NVTX_EVENTS": nvtx, "ThreadNames": [(6, 20, ns.GTID)],
    })  # fmt: skip


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("diff")
    return write_pair_member(d / "base.sqlite", 1.0), write_pair_member(d / "new.sqlite", 1.2)


def run_diff(tmp: Path, *args: str) -> tuple[int, dict[str, Any]]:
    out = tmp / "d.json"
    rc = main(["diff", "-q", *args, "--resamples", "400", "--json", str(out)])
    return rc, json.loads(out.read_text()) if out.exists() else {}


def rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for s in ("labels", "kernels", "host_activities", "collectives") for r in doc[s]]


def test_a_trace_against_itself(pair: tuple[Path, Path], tmp_path: Path) -> None:
    base = str(pair[0])
    rc, doc = run_diff(tmp_path, "--base", base, "--new", base, "--by", "step",
                       "--fail-on", "window>+0%,kernA>0ns")  # fmt: skip
    assert rc == 0
    assert doc["schema"] == "pytimings.diff/1"
    assert doc["windows"] == {"base": STEPS, "new": STEPS}
    assert doc["host_activities"]  # host_bound charged to what the host was inside
    assert len(doc["labels"]) == 9 and len(doc["kernels"]) == 4
    for r in rows(doc):
        assert r["delta_ns"] == 0 and r["delta_pct"] in (0, None), r
        assert r["verdict"] == "within noise", r
    k = {r["name"]: r for r in doc["kernels"]}
    assert k["kernA"]["base_count"] == k["kernA"]["new_count"] == STEPS
    assert k["[CUDA memcpy Host-to-Device]"]["base_ns"] == 2_000  # one copy per window


def test_one_kernel_twenty_percent_longer(
    pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, new = map(str, pair)
    rc, doc = run_diff(tmp_path, "--base", base, "--new", new, "--by", "step")
    assert rc == 0
    k = {r["name"]: r for r in doc["kernels"]}
    assert k["kernB"]["verdict"] == "worse"
    assert 19 <= k["kernB"]["delta_pct"] <= 21
    assert k["kernB"]["new_per_instance_ns"] / k["kernB"]["base_per_instance_ns"] == (
        pytest.approx(1.2, abs=0.01)
    )
    assert k["kernB"]["ci_low_pct"] > 0
    assert [r["name"] for r in doc["kernels"] if r["verdict"] == "worse"] == ["kernB"]
    lab = {r["name"]: r for r in doc["labels"]}
    assert lab["compute"]["verdict"] == "worse" and lab["window"]["verdict"] == "worse"
    # compute grows by kernB's growth exactly (the ops run back to back on one stream)
    assert lab["compute"]["delta_ns"] == pytest.approx(k["kernB"]["delta_ns"])
    text = capsys.readouterr().out
    assert "significant changes" in text and "kernB" in text and "within noise:" in text
    # the gate: window grew ~9%, kernB ~20%
    assert main(["diff", "-q", "--base", base, "--new", new, "--by", "step",
                 "--resamples", "200", "--fail-on", "window>+5%"]) == 1  # fmt: skip
    window = next(r for r in doc["labels"] if r["name"] == "window")
    assert capsys.readouterr().err.strip() == (  # the change as every table prints a time
        f"--fail-on window>+5%: window worse, {signed_duration(window['delta_ns'])} "
        f"({window['delta_pct']:+.1f}%) per window"
    )
    assert main(["diff", "-q", "--base", base, "--new", new, "--by", "step",
                 "--resamples", "200", "--fail-on", "kernB>+25%,kernA>1us"]) == 0  # fmt: skip
    assert main(["diff", "-q", "--base", new, "--new", base, "--by", "step",
                 "--resamples", "200", "--fail-on", "kernB<-10%"]) == 1  # fmt: skip


def test_several_files_per_side_are_pooled(pair: tuple[Path, Path], tmp_path: Path) -> None:
    base, new = map(str, pair)
    other = str(write_pair_member(tmp_path / "base2.sqlite", 1.0, seed=2))
    rc, doc = run_diff(tmp_path, "--base", base, other, "--new", new, "--by", "step")
    assert rc == 0
    assert doc["windows"] == {"base": 2 * STEPS, "new": STEPS}
    assert doc["files"] == {"base": 2, "new": 1}
    k = {r["name"]: r for r in doc["kernels"]}
    assert k["kernA"]["base_count"] == 2 * STEPS and k["kernA"]["verdict"] == "within noise"


def test_a_single_window_per_side_has_no_interval(
    pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, new = map(str, pair)
    rc, doc = run_diff(tmp_path, "--base", base, "--new", new, "--fail-on", "window>+1%")
    assert rc == 0  # nothing is significant without an interval
    assert doc["windows"] == {"base": 1, "new": 1}
    for r in doc["labels"] + doc["kernels"]:
        assert r["verdict"] == TOO_FEW_WINDOWS and r["ci_low_pct"] is None
    assert "single window" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fail-on", "window>5"], "--fail-on 'window>5'"),
        (["--fail-on", "nosuch>5%"], "no label, kernel or collective named 'nosuch'"),
        (["--by", "nosuch"], "matches no range"),
        (["--resamples", "10"], "--resamples must be >= 100"),
        # 1e7 replicates x 40 windows used to run minutes into a MemoryError
        (
            ["--by", "step", "--resamples", "10000000"],
            "--resamples 10000000: the bootstrap of 40 windows",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    pair: tuple[Path, Path], args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = str(pair[0])
    assert main(["diff", "-q", "--base", base, "--new", base, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_html_page(pair: tuple[Path, Path], tmp_path: Path) -> None:
    base, new = map(str, pair)
    out = tmp_path / "d.html"
    assert main(["diff", "-q", "--base", base, "--new", new, "--by", "step",
                 "--resamples", "200", "--html", str(out)]) == 0  # fmt: skip
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "http" not in page
    assert "kernB" in page and "compute" in page and "worse" in page


@pytest.mark.slow
def test_false_positive_rate_on_iid_windows_is_near_5_percent() -> None:
    lo, hi = binomial_band()
    hits = false_positives(lambda rng: (rng.gamma(4, 1e4, 60), rng.gamma(4, 1e4, 60)))
    assert lo <= hits <= hi, (hits, lo, hi)


def test_the_band_rejects_a_biased_test() -> None:
    """The check can fail: a 10% shift is found far more often than 5% of the time."""
    _, hi = binomial_band()
    hits = false_positives(
        lambda rng: (rng.gamma(4, 1e4, 60), 1.1 * rng.gamma(4, 1e4, 60)), reps=60
    )
    assert hits > hi * 60 / 200


def test_a_side_without_windows_is_a_usage_error() -> None:
    """A --by range only on a rank that ran no GPU op gives no window: said, not NaN."""
    trace = make_trace(
        [{"start": 0, "end": 10}], ranges=[{"start": 0, "end": 5, "name": "s", "rank": 1}]
    )
    empty, full = attribute(trace, by="s"), attribute(trace)
    assert len(empty.windows) == 0
    with pytest.raises(UsageError, match=r"the new side has no window to compare \(--by 's'"):
        diff([full], [empty], resamples=100)


def test_host_activities_compare_host_bound_by_what_the_host_was_inside() -> None:
    """A host range that grows by half before each step's kernel: its host_bound charge is
    worse, by about its growth; a range that did not change is within noise."""
    from pytimings.analysis.diff import diff

    def side(plan_us: float, seed: int) -> Any:
        rng = np.random.default_rng(seed)
        ops, api, ranges, t = [], [], [], 0
        for i in range(12):
            s0 = t
            for name, us in (("plan", plan_us), ("prep", 30.0)):
                d = int((us + rng.normal(0, 2)) * 1000)
                ranges.append({"start": t, "end": t + d, "name": name, "depth": 1})
                t += d
            api.append({"start": t, "end": t + 5_000, "correlation": i + 1})
            ops.append({"start": t + 6_000, "end": t + 50_000, "correlation": i + 1})
            t += 60_000
            ranges.append({"start": s0, "end": t, "name": "step", "payload": float(i)})
        return attribute(make_trace(ops, api, ranges), by="step")

    doc = diff([side(100, 1)], [side(150, 2)], resamples=400)
    host = {r["name"]: r for r in doc["host_activities"]}
    assert host["range plan"]["verdict"] == "worse"
    assert 45 <= host["range plan"]["delta_pct"] <= 55
    assert host["range prep"]["verdict"] == "within noise"


def test_the_percent_interval_is_on_the_ratio_scale_never_below_minus_100() -> None:
    """A label that one window of eight holds in the base and none in the new: the
    difference's interval divided by the base mean went to about -300%."""
    from pytimings.analysis.diff import Sample, compare, groups_of, replicate_weights

    rng = np.random.default_rng(3)
    base = Sample(np.array([[0.0]] * 7 + [[8000.0]]), groups_of([8]))
    new = Sample(np.zeros((8, 1)) + 10.0, groups_of([8]))
    bw = replicate_weights(base.groups, base.n, 2000, rng)
    nw = replicate_weights(new.groups, new.n, 2000, rng)
    (row,) = compare(["x"], base, new, bw, nw)
    assert row["ci_low_pct"] is None  # some replicates drew no base window holding it
    # ... so the verdict falls back on the difference, and no percent interval is made up
    assert row["verdict"] == "within noise"
    base = Sample(np.array([[1000.0], [3000.0]] * 4), groups_of([8]))
    new = Sample(np.array([[10.0], [30.0]] * 4), groups_of([8]))
    (row,) = compare(["y"], base, new, bw, nw)
    assert -100 < row["ci_low_pct"] <= row["ci_high_pct"] < 0 and row["verdict"] == "better"
    # by hand: each side's log mean widened by sqrt(8 / 7) around its point mean
    c = np.sqrt(8 / 7)

    def log_mean(w: np.ndarray, v: np.ndarray) -> np.ndarray:
        return c * np.log(w @ v[:, 0]) + (1 - c) * np.log(v[:, 0].mean())

    reps = np.exp(log_mean(nw, new.values) - log_mean(bw, base.values))
    assert row["ci_low_pct"] == pytest.approx(100 * (np.percentile(reps, 2.5) - 1))
    assert row["ci_high_pct"] == pytest.approx(100 * (np.percentile(reps, 97.5) - 1))


def test_ops_compare_across_kernel_names_by_op_and_shape() -> None:
    """Two captures of one model whose GEMM kernels have other names (another GPU or
    vendor): ``kernels`` can only say one was removed and one added; ``ops`` matches the
    aten::mm of one shape on both sides (20% longer) and the gemm category."""
    mm = json.dumps([[[8, 4], [4, 2]], ["float", "float"], ["", ""], None])
    add = json.dumps([[[8, 2], [8, 2]], ["float", "float"], ["", ""], None])

    def side(kernel: str, mm_us: float, extra: bool, seed: int) -> Any:
        rng = np.random.default_rng(seed)
        ops, api, ranges, host_ops, corr = [], [], [], [], 0
        for i in range(12):
            t = i * 100_000
            for name, args, us, k in (("aten::mm", mm, mm_us, kernel),
                                      ("aten::add", add, 5.0, "elementwise_kernel"),
                                      *((("aten::relu", add, 3.0, "elementwise_kernel"),)
                                        if extra else ())):  # fmt: skip
                corr += 1
                host_ops.append({"name": name, "args": args, "start": t + 100, "end": t + 900})
                api.append({"start": t + 200, "end": t + 300, "correlation": corr})
                d = int((us + rng.normal(0, 0.1)) * 1000)
                ops.append({"name": k, "start": t + 1_000, "end": t + 1_000 + d,
                            "correlation": corr})  # fmt: skip
                t += 1_000 + d
            ranges.append({"start": i * 100_000, "end": i * 100_000 + 90_000, "name": "step"})
        return attribute(make_trace(ops, api, ranges, host_ops=host_ops), by="step")

    doc = diff([side("sm90_gemm", 10.0, False, 1)], [side("Cijk_Alik_gemm", 12.0, True, 2)],
               resamples=400)  # fmt: skip
    k = {r["name"]: r["verdict"] for r in doc["kernels"]}
    assert k["sm90_gemm"] == "removed" and k["Cijk_Alik_gemm"] == "added"
    ops = {(r["name"], json.dumps(r["input_dims"])): r for r in doc["ops"]}
    m = ops[("aten::mm", "[[8, 4], [4, 2]]")]
    assert m["verdict"] == "worse" and 18 <= m["delta_pct"] <= 22 and m["ci_low_pct"] > 0
    assert ops[("aten::add", "[[8, 2], [8, 2]]")]["verdict"] == "within noise"
    assert ops[("aten::relu", "[[8, 2], [8, 2]]")]["verdict"] == "added"
    cats = {r["name"]: r for r in doc["op_categories"]}
    assert cats["gemm"]["delta_ns"] == pytest.approx(m["delta_ns"])
    # per window the categories hold every GPU op: their sum is the kernels' sum
    assert sum(r["new_ns"] for r in doc["op_categories"]) == pytest.approx(
        sum(r["new_ns"] for r in doc["kernels"])
    )


def _steps(lengths: list[int], devices: int) -> Attribution:
    """One rank, ``devices`` devices each running the same op in every 'step' range."""
    ranges, ops, t = [], [], 0
    for n in lengths:
        ranges.append({"name": "step", "start": t, "end": t + n})
        ops += [{"start": t + 10, "end": t + n // 2, "device": d} for d in range(devices)]
        t += n + 100
    return attribute(make_trace(ops, ranges=ranges), by="step")


def test_the_devices_of_one_window_are_one_sample_not_two() -> None:
    """Two devices running the same windows are one capture's windows seen twice, not
    twice the evidence: the diff of the two-device captures is the one-device diff (the
    same samples, the same interval), not a narrower one (issue 29 item 5)."""
    rng = np.random.default_rng(3)
    a = [int(x) for x in rng.integers(20_000, 40_000, 12)]
    b = [int(x * 1.03) for x in rng.integers(20_000, 40_000, 12)]
    one = diff([_steps(a, 1)], [_steps(b, 1)], resamples=400, seed=1)
    two = diff([_steps(a, 2)], [_steps(b, 2)], resamples=400, seed=1)
    assert two["windows"] == {"base": 12, "new": 12}
    assert two["window_entries"] == {"base": 24, "new": 24}
    for r1, r2 in zip(one["labels"], two["labels"], strict=True):
        assert r1["name"] == r2["name"]
        for k in ("base_ns", "new_ns", "ci_low_pct", "ci_high_pct", "verdict"):
            assert r1[k] == pytest.approx(r2[k]) if isinstance(r1[k], float) else r1[k] == r2[k]


def test_whole_trace_windows_of_one_capture_are_one_sample() -> None:
    """Without --by, the ranks and devices of one capture ran together: one sample, so
    one capture per side gets no interval however many devices it has."""
    t = make_trace([{"start": 0, "end": 50, "device": d} for d in range(4)])
    doc = diff([attribute(t)], [attribute(t)], resamples=200)
    assert doc["windows"] == {"base": 1, "new": 1}
    assert doc["window_entries"] == {"base": 4, "new": 4}
    assert all(r["verdict"] == TOO_FEW_WINDOWS for r in doc["labels"])


def test_every_verdict_shows_its_interval(pair: tuple[Path, Path], tmp_path: Path) -> None:
    """'-99.3% better' was printed with the interval '-' (issue 46): where the ratio has no
    interval (a replicate without the op) the verdict is the difference's, and that
    interval is shown, in time; without either the verdict is n/a, never better/worse."""
    from pytimings.report.diff import _ci, render_text

    rc, doc = run_diff(tmp_path, "--base", str(pair[0]), "--new", str(pair[1]), "--by", "step")
    assert rc == 0
    assert all(_ci(r) != "-" for r in rows(doc) if r["verdict"] in ("better", "worse"))
    row = {"name": "kernX", "base_ns": 1e5, "new_ns": 700.0, "delta_ns": -99_300.0,
           "delta_pct": -99.3, "ci_low_pct": None, "ci_high_pct": None,
           "ci_low_ns": -101_000.0, "ci_high_ns": -97_000.0, "verdict": "better"}  # fmt: skip
    assert _ci(row) == "[-0.10 ms, -97.0 µs]"
    one = {**doc, "labels": [], "host_activities": [], "collectives": [], "ops": [],
           "categories": [], "kernels": [row]}  # fmt: skip
    assert "-99.3%  " in render_text(one) and _ci(row) in render_text(one)
    _, single = run_diff(tmp_path, "--base", str(pair[0]), "--new", str(pair[1]))
    assert {r["verdict"] for r in single["labels"]} == {"n/a (too few windows)"}
