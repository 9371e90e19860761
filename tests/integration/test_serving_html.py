"""``pytimings report --html``: serving runs as one page whose charts draw in headless
Chromium, with every plotted number equal to serving_metrics' (and compare's sweep)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pytimings
from pytimings.cli import main
from pytimings.console.text import duration_ms
from pytimings.ingest.recording_file import load_requests
from pytimings.model.requests import RequestRecord
from pytimings.record.requests import default_log, request
from pytimings.report.serving_html import (
    MAX_CDF_POINTS,
    _cdf_figure,
    _curve_figure,
    cdf_points,
    render,
)
from pytimings.serving._format import fmt_num
from pytimings.serving.compare import sweep
from pytimings.serving.metrics import serving_metrics
from pytimings.serving.runfile import SCHEMA, load_run
from pytimings.serving.sources import analyse, load_source

MS = 1_000_000
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
LEVELS = (1, 4, 8)
N_REQ = 12  # per round
N_OUT = 6  # tokens per request, one per chunk


def _ttft_ms(scale: float, conc: int, i: int) -> int:
    return int(scale * (10 + 2 * conc + i % 5))


def _gap_ms(scale: float, conc: int, i: int) -> int:
    return int(scale * (4 + conc)) + i % 3


def _write_run(path: Path, scale: float, failed_at: int | None = None) -> Path:
    """Two rounds per level; request i sent at a known time with TTFT and token gaps
    given by _ttft_ms/_gap_ms (whole ms, so every statistic is known exactly)."""
    t = 0
    levels = []
    for conc in LEVELS:
        rounds = []
        for ri in range(2):
            recs = []
            for i in range(N_REQ):
                start = t + (i // conc) * 200 * MS
                first = start + _ttft_ms(scale, conc, i) * MS
                chunks = [first + j * _gap_ms(scale, conc, i) * MS for j in range(N_OUT)]
                recs.append(RequestRecord(f"c{conc}r{ri}q{i}", start, chunks[-1] + MS, chunks,
                                          [1] * N_OUT, input_tokens=32,
                                          output_tokens=N_OUT))  # fmt: skip
            errors: dict[str, int] = {}
            if conc == failed_at:
                recs.append(RequestRecord(f"bad{ri}", t, t + MS, error="http_5xx",
                                          error_detail="500 overloaded"))  # fmt: skip
                errors = {"http_5xx": 1}
            end = max(r.end_ns or 0 for r in recs)
            rounds.append({"round": ri, "start_ns": t, "end_ns": end, "errors": errors,
                           "summary": {}, "requests": [r.to_json() for r in recs]})  # fmt: skip
            t = end + 50 * MS
        levels.append({"concurrency": conc, "rate": None,
                       "warmup": {"requests": 2, "errors": {}}, "rounds": rounds,
                       "summary": {}})  # fmt: skip
    path.write_text(json.dumps({"schema": SCHEMA, "created_utc": "2026-11-30T00:00:00Z",
                                "config": {}, "levels": levels}))  # fmt: skip
    return path


@pytest.fixture
def clean_log() -> Iterator[None]:
    default_log().clear()
    yield
    default_log().clear()


@pytest.fixture
def inputs(tmp_path: Path, clean_log: None) -> tuple[Path, Path, Path]:
    a = _write_run(tmp_path / "a.json", 1.0, failed_at=4)
    b = _write_run(tmp_path / "b.json", 0.7)
    for k in range(5):  # an engine's request log, saved with its regions
        with request(f"e{k}", input_tokens=8) as r:
            for _ in range(4 + k):
                r.token()
    with pytest.raises(RuntimeError), request("e-bad"):
        raise RuntimeError("evicted")
    rec = tmp_path / "engine.pyt"
    pytimings.save(rec, pytimings.Recorder())
    return a, b, rec


def _level_metrics(path: Path, conc: int) -> Any:
    lv = load_run(path).level(conc)
    assert lv is not None
    recs = [q for rd in lv.rounds for q in rd.records]
    return serving_metrics(recs, windows=[(rd.start_ns, rd.end_ns) for rd in lv.rounds])


def test_plotted_values_are_serving_metrics(inputs: tuple[Path, Path, Path]) -> None:
    a, b, rec = inputs
    results = analyse([load_source(a, "A"), load_source(b, "B"), load_source(rec, "eng")],
                      "vllm", 10.0)  # fmt: skip
    ttft = _cdf_figure(results, "ttft", "")
    itl = _cdf_figure(results, "itl", "")
    curve = _curve_figure(results)
    for path, label, scale in ((a, "A", 1.0), (b, "B", 0.7)):
        for conc in LEVELS:
            # CDFs against the latencies the file was built with (independent of the code)
            want_ttft = sorted(
                float(_ttft_ms(scale, conc, i)) for _ in range(2) for i in range(N_REQ)
            )
            tr = next(t for t in ttft.data if list(t.meta) == [label, conc, "ttft"])
            assert list(tr.x) == want_ttft
            assert list(tr.y) == [(k + 1) / len(want_ttft) for k in range(len(want_ttft))]
            gaps = sorted(
                float(_gap_ms(scale, conc, i))
                for _ in range(2)
                for i in range(N_REQ)
                for _ in range(N_OUT - 1)
            )
            tr = next(t for t in itl.data if list(t.meta) == [label, conc, "itl"])
            assert list(tr.x) == gaps
        # the throughput-latency curve: serving_metrics per level, compare.sweep agrees
        ms = [_level_metrics(path, c) for c in LEVELS]
        sw = sweep(load_run(path), "vllm", 10.0)
        for stat in ("tpot", "itl"):
            for q in ("median", "p99"):
                tr = next(t for t in curve.data if list(t.meta) == [label, stat, q])
                assert list(tr.y) == [getattr(getattr(m, stat), q) for m in ms]
                assert list(tr.x) == [m.output_throughput for m in ms]
                assert list(tr.x) == pytest.approx([r["throughput"] for r in sw["levels"]])
    # known latencies: TPOT = the gap, so TPOT mean rises 10% past c=1 at once (knee c=4)
    assert [r.knee for r in results[:2]] == [4, 4]
    knees = [s for s in curve.layout.shapes if s.type == "line"]
    assert len(knees) == 4  # one knee line per run in each of the two panels
    # the recording: one level at its peak concurrency, metrics of load_requests' records
    m = serving_metrics(load_requests(rec))
    assert m.completed == 5 and m.errors == {"exception": 1}
    (lv,) = results[2].levels
    assert lv.concurrency == 1 and lv.metrics.itl.p99 == m.itl.p99
    tr = next(t for t in ttft.data if list(t.meta) == ["eng", 1, "ttft"])
    assert list(tr.x) == sorted((np.asarray(m.per_request["ttft_ns"]) / 1e6).tolist())
    tr = next(t for t in curve.data if list(t.meta) == ["eng", "tpot", "median"])
    assert list(tr.y) == [m.tpot.median] and list(tr.x) == [m.output_throughput]

    # the table shows the same numbers and counts the failures
    doc = render(results, "t", "vllm")
    m4 = _level_metrics(a, 4)
    assert m4.errors == {"http_5xx": 2} and "http_5xx=2" in doc
    for v in (m4.ttft.mean, m4.ttft.median, m4.ttft.p99, m4.tpot.p99, m4.itl.median,
              m4.e2el.p99):  # fmt: skip
        assert f"<td>{duration_ms(v)}</td>" in doc
    assert f"<td>{fmt_num(m4.output_throughput, 1)}</td>" in doc
    assert "c=1: 2, c=4: 2, c=8: 2" in doc  # warmup requests are reported, not dropped


def test_cdf_points_are_exact_when_thinned() -> None:
    rng = np.random.default_rng(3)
    v = rng.lognormal(3, 0.5, size=25_000)
    x, y = cdf_points(v)
    assert len(x) == MAX_CDF_POINTS and x[0] == v.min() and x[-1] == v.max() and y[-1] == 1.0
    s = np.sort(v)
    for xi, yi in zip(x[::97], y[::97], strict=False):  # each point lies on the full CDF
        assert yi == np.searchsorted(s, xi, side="right") / v.size


def test_failed_level_is_counted_not_drawn(tmp_path: Path) -> None:
    path = _write_run(tmp_path / "a.json", 1.0)
    doc = json.loads(path.read_text())
    for rd in doc["levels"][2]["rounds"]:  # c=8: every request timed out
        for q in rd["requests"]:
            q["error"] = "timeout"
    path.write_text(json.dumps(doc))
    results = analyse([load_source(path, "A")], "vllm", 10.0)
    assert [t.meta[1] for t in _cdf_figure(results, "ttft", "").data] == [1, 4]
    assert "timeout=24" in render(results, "t", "vllm")
    for rd in doc["levels"][0]["rounds"] + doc["levels"][1]["rounds"]:
        for q in rd["requests"]:
            q["error"] = "connect"
    path.write_text(json.dumps(doc))
    with pytest.raises(pytimings.errors.UsageError, match="no request succeeded"):
        render(analyse([load_source(path, "A")], "vllm", 10.0), "t", "vllm")


def test_text_view_without_html(
    inputs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, _, rec = inputs
    assert main(["report", str(a), str(rec), "--labels", "a,engine"]) == 0
    text = capsys.readouterr().out
    rows = {}  # (run, conc) -> the other cells ("(knee)", "(peak)" marks left out)
    for x in text.splitlines():
        cells = re.split(r"\s{2,}", x.strip())  # cells are two spaces apart: '19.75 ms'
        if cells and cells[0] in ("a", "engine"):
            rows[cells[0], cells[1].split(" (")[0]] = cells[2:]
    m = _level_metrics(a, 4)
    row = rows[("a", "4")]
    assert row[:2] == [str(m.completed), "http_5xx=2"]
    assert row[4:7] == [duration_ms(m.ttft.mean), duration_ms(m.ttft.median),
                        duration_ms(m.ttft.p99)]  # fmt: skip
    engine = serving_metrics(load_requests(rec))
    row = rows[("engine", str(engine.peak_concurrency))]
    assert row[:2] == ["5", "exception=1"]
    assert "engine: an engine recording" in text
    # it followed a run file but matches none of its requests: one panel, said so
    assert f"engine: matches no request of {a} (ids or start times)" in text


def _report(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main(["report", *args])
    return rc, capsys.readouterr().err


def test_bad_inputs_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], clean_log: None
) -> None:
    out = str(tmp_path / "r.html")
    good = str(_write_run(tmp_path / "a.json", 1.0))
    other = tmp_path / "other.json"
    other.write_text('{"schema": "something/2"}')
    bare = tmp_path / "bare.pyt"
    pytimings.save(bare, pytimings.Recorder())  # a recording without request timelines
    cases = [
        ([str(tmp_path / "missing.json"), "--html", out], "missing.json: cannot read"),
        ([str(other), "--html", out], "not a pytimings.serving/1 or /2 run file"),
        ([str(bare), "--html", out], "bare.pyt: has no requests table"),
        ([good, "--labels", "a,b", "--html", out], "--labels 'a,b': need 1"),
        ([good, "--definition", "x", "--html", out], "--definition 'x'"),
        ([good, "--html", str(tmp_path / "no" / "r.html")], "does not exist"),
    ]
    for args, message in cases:
        rc, err = _report(args, capsys)
        assert rc == 2 and message in err and err.count("\n") == 1, (args, err)
        assert "Traceback" not in err
    assert not Path(out).exists()


def _dom(path: Path) -> str:
    assert CHROMIUM is not None
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=20000",
         "--dump-dom", path.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return done.stdout


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_every_curve_draws_in_chromium(
    inputs: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, rec = inputs
    out = tmp_path / "report.html"
    assert (
        main(["report", str(a), str(b), str(rec), "--labels", "A,B,eng", "--html", str(out)]) == 0
    )
    assert "wrote" in capsys.readouterr().out
    doc = out.read_text()
    assert not re.search(r"<script[^>]+src=", doc), "no external scripts"
    assert doc.count("Plotly.newPlot") == 3
    dom = _dom(out)
    assert dom.count('class="main-svg"') >= 6  # two SVG layers per drawn chart
    # each plotted trace's line (legend samples are drawn in "legendlines", not "lines")
    lines = re.findall(r'<g class="lines"><path class="js-line" d="([^"]*)"', dom)
    # CDFs: (2 runs x 3 levels + 1 recording) x (TTFT, ITL); curve: 3 sources x 4 lines
    assert len(lines) == 7 * 2 + 3 * 4
    assert all(d.startswith("M") for d in lines)
    # every CDF and every run's curve is a drawn polyline; the recording's curve is one point
    assert sum(bool(re.search("[LHV]", d)) for d in lines) == 7 * 2 + 2 * 4
    assert "knee A: c=4" in dom and "knee B: c=4" in dom


# --- report RUN.json ENGINE.pyt: the engine joined with the run, split by its levels ------

J_LEVELS, J_ROUNDS, J_REQ, J_WARM = (1, 4), 2, 5, 2
J_TOKENS, J_GAP = 4, 2 * MS  # engine chunks, ms apart
J_DELIVERY = 300_000  # engine chunk -> client chunk


def _joined_pair(tmp_path: Path) -> tuple[Path, Path, dict[str, dict[str, int]]]:
    """A run file and an engine recording of the same requests on one host's clock, with
    each request's parts known: send, queue, prefill, first-token delivery, the stream's
    rest. The engine also holds J_WARM warm-up requests before each level and one after
    the run (in no level)."""
    import socket

    from pytimings.model.requests import records_to_arrow
    from pytimings.record.storage import register_table_provider, unregister_table_provider

    t = 10**12
    engine: list[RequestRecord] = []
    want: dict[str, dict[str, int]] = {}
    levels = []
    n = 0
    for conc in J_LEVELS:
        for w in range(J_WARM):
            engine.append(RequestRecord(f"warm{conc}-{w}", t, t + MS, [t + MS // 2], [1]))
            t += 2 * MS
        rounds = []
        for ri in range(J_ROUNDS):
            recs = []
            r0 = t
            for i in range(J_REQ):
                c0 = r0 + (i // conc) * 40 * MS
                send = MS + (i % 2) * MS // 2
                queue, prefill = (2 + i) * MS, 3 * MS
                s0 = c0 + send
                s1 = s0 + queue + prefill  # first token: prefill's end, decode's start
                chunks = [s1 + k * J_GAP for k in range(J_TOKENS)]
                sid = f"cmpl-{n}"
                n += 1
                engine.append(RequestRecord(sid, s0, chunks[-1] + 100_000, chunks, [1] * J_TOKENS,
                                            phases=[("queue", s0), ("prefill", s0 + queue),
                                                    ("decode", s1)]))  # fmt: skip
                cc = [x + J_DELIVERY for x in chunks]
                recs.append(RequestRecord(f"c{conc}r{ri}q{i}", c0, cc[-1] + 50_000, cc,
                                          [1] * J_TOKENS, server_id=sid))  # fmt: skip
                want[f"c{conc}r{ri}q{i}"] = {
                    "send": send, "queue": queue, "prefill": prefill, "decode": 0,
                    "first_token_delivery": J_DELIVERY,
                    "to_last_chunk": (J_TOKENS - 1) * J_GAP,
                }  # fmt: skip
            end = max(r.end_ns or 0 for r in recs)
            rounds.append({"round": ri, "start_ns": r0, "end_ns": end, "errors": {},
                           "summary": {}, "requests": [r.to_json() for r in recs]})  # fmt: skip
            t = end + 5 * MS
        levels.append({"concurrency": conc, "rate": None,
                       "warmup": {"requests": J_WARM, "errors": {}}, "rounds": rounds,
                       "summary": {}})  # fmt: skip
    engine.append(RequestRecord("late", t + 10 * MS, t + 11 * MS, [t + 10 * MS + 1], [1]))
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"schema": SCHEMA, "created_utc": "2026-12-01T00:00:00Z",
                               "host": socket.gethostname(), "config": {},
                               "levels": levels}))  # fmt: skip
    eng = tmp_path / "eng.pyt"
    register_table_provider("requests", lambda: records_to_arrow(engine))
    try:
        pytimings.save(eng, pytimings.Recorder())
    finally:
        unregister_table_provider("requests")
    return run, eng, want


def test_report_joins_a_recording_with_the_run_before_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytimings.report.serving_html import _phase_figure
    from pytimings.serving.sources import SLOWEST, join_recordings

    run, eng, want = _joined_pair(tmp_path)
    sources = join_recordings([load_source(run, "run"), load_source(eng, "eng")])
    results = analyse(sources, "vllm", 10.0)
    joined = results[1]
    j = joined.source.joined
    assert j is not None and j.doc["matched"] == len(want) and j.outside == 1
    # the engine's panels: the run's levels and rounds, each holding the engine records of
    # exactly the client requests of that round; warm-up apart, per level
    client = load_run(run)
    assert [lv.concurrency for lv in joined.levels] == list(J_LEVELS)
    for lv, clv, elv in zip(joined.levels, client.levels, joined.source.run.levels, strict=True):
        assert lv.warmup_requests == J_WARM and lv.metrics.completed == J_ROUNDS * J_REQ
        for crd, erd in zip(clv.rounds, elv.rounds, strict=True):
            assert sorted(r.req_id for r in erd.records) == sorted(
                str(r.server_id) for r in crd.records
            )
    # the engine's TTFT CDF is drawn in the run's concurrency panels
    ttft = _cdf_figure(results, "ttft", "")
    tr = next(t for t in ttft.data if list(t.meta) == ["eng", 4, "ttft"])
    assert list(tr.x) == sorted(
        (w["queue"] + w["prefill"]) / MS for k, w in want.items() if k.startswith("c4")
    )
    # per-request timelines: the slowest by client E2E, each bar the planted part
    fig = _phase_figure(results)
    for conc in J_LEVELS:
        ids = {k: w for k, w in want.items() if k.startswith(f"c{conc}r")}
        e2e = sorted((sum(w.values()) for w in ids.values()), reverse=True)[:SLOWEST]
        bars = [t for t in fig.data if list(t.meta)[:2] == ["eng", conc]]
        by_part = {t.meta[2]: t for t in bars}
        assert set(by_part) == set(next(iter(ids.values())))
        shown = list(by_part["send"].y)
        assert sorted((sum(ids[q].values()) for q in shown), reverse=True) == e2e
        for part, tr in by_part.items():
            assert list(tr.y) == shown
            assert list(tr.x) == [ids[q][part] / MS for q in shown]
        # the bars follow each other from the client's send to its last chunk
        ends = [b + x for b, x in zip(by_part["to_last_chunk"].base, by_part["to_last_chunk"].x,
                                      strict=True)]  # fmt: skip
        assert ends == pytest.approx([sum(ids[q].values()) / MS for q in shown])
    # the page draws the timelines after the other charts
    page = tmp_path / "joined.html"
    assert main(["report", str(run), str(eng), "--html", str(page)]) == 0
    html_doc = page.read_text()
    assert html_doc.count("Plotly.newPlot") == 4 and "Per-request phases" in html_doc
    # the text view: the same split, the decomposition and the slowest requests
    assert main(["report", str(run), str(eng), "--labels", "run,eng"]) == 0
    text = capsys.readouterr().out
    assert (
        "eng: an engine recording joined with run: 20 requests matched (0 by start time; "
        "0 of the run's matched none)" in text
    )
    assert "1 engine requests in no level nor its warm-up" in text
    assert "warmup requests sent before measuring, not in any figure: c=1: 2, c=4: 2" in text
    assert "c=4: client TTFT of 10 requests, by part" in text
    assert f"c=1: the {SLOWEST} slowest requests by client E2E" in text


def test_label_positions_never_overlap() -> None:
    from pytimings.report.serving_html import LABEL_AT, LABEL_CHAR_W, label_box, label_positions

    far = [(100.0 * k, 10.0 * k + 5, f"c={k}") for k in range(1, 5)]
    assert label_positions(far) == ["top left"] * 4  # nothing to avoid: the usual place
    pts = [(500.0, 20.0, "c=1"), (501.0, 20.2, "c=2"), (1000.0, 1.0, "c=4")]
    assert label_positions(pts) == ["top left", "top right", "top left"]
    rng = np.random.default_rng(7)
    for _ in range(50):
        pts = [(float(x), float(y), f"c={k}")
               for k, (x, y) in enumerate(rng.uniform(0, 100, (12, 2)))]  # fmt: skip
        pos = label_positions(pts)
        assert set(pos) <= {*LABEL_AT, ""}
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        boxes = []
        for (x, y, t), at in zip(pts, pos, strict=True):
            if not at:
                # left out only when each of the four places would hit a placed label
                continue
            x0 = (x - min(xs)) / (max(xs) - min(xs))
            w = LABEL_CHAR_W * len(t)
            boxes.append(
                (x0 - w if "left" in at else x0, y / max(ys) - (0.05 if "bottom" in at else 0), w)
            )
        for i, (ax, ay, aw) in enumerate(boxes):  # brute force: no two boxes intersect
            for bx, by, bw in boxes[i + 1 :]:
                assert ax + aw <= bx or bx + bw <= ax or ay + 0.05 <= by or by + 0.05 <= ay
        for (x, y, t), at in zip(pts, pos, strict=True):
            if not at:
                fx, fy = (x - min(xs)) / (max(xs) - min(xs)), y / max(ys)
                placed = [label_box((p[0] - min(xs)) / (max(xs) - min(xs)), p[1] / max(ys), p[2], a)
                          for p, a in zip(pts, pos, strict=True) if a]  # fmt: skip
                for cand in LABEL_AT:
                    c = label_box(fx, fy, t, cand)
                    assert any(not (c[2] <= b[0] or b[2] <= c[0] or c[3] <= b[1] or b[3] <= c[1])
                               for b in placed)  # fmt: skip
    # five labels at one point: four places, the fifth left out
    assert label_positions([(1.0, 1.0, "c=8")] * 5 + [(2.0, 2.0, "x")])[:5] == [*LABEL_AT, ""]
    # a knee's label at the panel's top keeps a point's label off it (issue 46: they
    # collided): the point's usual place would cross it, the next clear one is taken
    pts = [(0.0, 0.0, "c=1"), (100.0, 9.7, "c=4"), (200.0, 5.0, "c=8")]
    assert label_positions(pts, y_top=10.0)[1] == "top left"
    knee = (60.0, "knee a: c=4", "top right")
    assert label_positions(pts, y_top=10.0, knees=[knee])[1] == "top right"


def test_cdf_axes_go_log_for_a_long_tail_and_the_table_keeps_its_first_column(
    tmp_path: Path,
) -> None:
    from pytimings.report.serving_html import wide_tail

    assert wide_tail([1.0, 2.0, 2.0, 25.0]) and not wide_tail([1.0, 2.0, 2.0, 19.0])
    assert not wide_tail([0.0, 2.0, 2.0, 250.0])  # a log axis cannot show 0
    path = _write_run(tmp_path / "a.json", 1.0)
    doc = json.loads(path.read_text())
    q = doc["levels"][1]["rounds"][0]["requests"][0]  # c=4: one request's last gap 1000 ms
    q["chunk_ns"][-1] += 1000 * MS
    q["end_ns"] += 1000 * MS
    path.write_text(json.dumps(doc))
    results = analyse([load_source(path, "A")], "vllm", 10.0)
    itl = _cdf_figure(results, "itl", "")
    assert [itl.layout[f"xaxis{k}"].type for k in ("", "2", "3")] == [None, "log", None]
    ttft = _cdf_figure(results, "ttft", "")  # TTFTs 18..26 ms: linear everywhere
    assert all(ttft.layout[f"xaxis{k}"].type is None for k in ("", "2", "3"))
    page = render(results, "t", "vllm")
    # the run column stays in view while the table scrolls sideways
    assert "table.metrics td:first-child, table.metrics tr:first-child th:first-child" in page
    assert "position: sticky" in page
    curve = _curve_figure(results)
    tr = next(t for t in curve.data if list(t.meta) == ["A", "tpot", "median"])
    assert len(tr.textposition) == len(LEVELS)
