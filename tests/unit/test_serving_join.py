"""join: hand-built client/engine pairs with planted send, phase and delivery times."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pytimings.errors import TraceFormatError, UsageError
from pytimings.model.requests import RequestRecord
from pytimings.serving.join import SCHEMA, estimate_clock, join
from pytimings.serving.runfile import Level, Round, Run

MS = 1_000_000


def _pair(i: int, t: int, offset: int, send: int, queue: int, prefill: int, deliver: int,
          ids: bool = True) -> tuple[RequestRecord, RequestRecord]:  # fmt: skip
    """A request sent at client time ``t``; the engine clock reads ``offset`` ahead."""
    s0 = t + offset + send
    first = s0 + queue + prefill
    tokens = [first + k * 2 * MS for k in range(4)]
    server = RequestRecord(f"cmpl-{i}", s0, tokens[-1] + MS // 10, tokens, [1] * 4,
                           phases=[("queue", s0), ("prefill", s0 + queue),
                                   ("decode", first + 1000)])  # fmt: skip
    chunks = [x - offset + deliver for x in tokens]
    client = RequestRecord(f"c1-r0-{i}", t, chunks[-1] + MS, chunks, [1] * 4,
                           server_id=f"cmpl-{i}" if ids else None)  # fmt: skip
    return client, server


def _run(clients: list[RequestRecord], conc: int = 1) -> Run:
    rd = Round(0, clients[0].start_ns, max(c.end_ns or 0 for c in clients), clients, {}, {})
    return Run("run.json", {}, [Level(conc, None, [rd], {}, {})])


def _planted(n: int, offset: int, seed: int = 0, ids: bool = True):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        send, queue, prefill, deliver = (int(x) for x in rng.integers(50_000, 3 * MS, size=4))
        rows.append((i * 20 * MS, send, queue, prefill, deliver))
    pairs = [_pair(i, t, offset, s, q, p, d, ids) for i, (t, s, q, p, d) in enumerate(rows)]
    return rows, [c for c, _ in pairs], [s for _, s in pairs]


def test_same_clock_parts_are_the_planted_times_and_sum_to_ttft() -> None:
    rows, clients, engine = _planted(30, 0)
    doc, clock = join(_run(clients), engine[::-1], "e.pyt", "same", 5 * MS)
    assert doc["schema"] == SCHEMA and (clock.offset_ns, clock.uncertainty_ns) == (0, 0)
    assert set(doc) == {"schema", "matched", "unmatched_client", "unmatched_server", "clock",
                        "requests", "levels"}  # fmt: skip
    assert (doc["matched"], doc["unmatched_client"], doc["unmatched_server"]) == (30, 0, 0)
    for q, (_, send, queue, prefill, deliver) in zip(doc["requests"], rows, strict=True):
        assert q["matched_by"] == "id"
        # decode starts 1 us after the first token: it is no part of TTFT
        assert q["ttft_parts_ns"] == {"send": send, "queue": queue, "prefill": prefill,
                                      "decode": 0, "first_token_delivery": deliver}  # fmt: skip
        assert q["client_ttft_ns"] == send + queue + prefill + deliver
        assert q["server_ttft_ns"] == queue + prefill
        assert q["phases_ns"]["queue"] == queue and q["phases_ns"]["prefill"] == prefill + 1000
        assert q["client_e2e_ns"] == q["client_ttft_ns"] + 6 * MS
    (lv,) = doc["levels"]
    parts = lv["parts"]
    assert list(parts) == ["send", "queue", "prefill", "decode", "first_token_delivery"]
    queue = np.array([r[2] for r in rows], np.float64)
    assert parts["queue"]["p50_ns"] == pytest.approx(np.median(queue))
    assert parts["queue"]["p99_ns"] == pytest.approx(np.percentile(queue, 99))
    ttft = sum(r[1] + r[2] + r[3] + r[4] for r in rows)
    assert parts["queue"]["share"] == pytest.approx(queue.sum() / ttft)
    assert sum(p["share"] for p in parts.values()) == pytest.approx(1.0)


def test_estimated_offset_brackets_the_planted_one() -> None:
    offset = 123_456_789_012  # another host's clock, far ahead
    rows, clients, engine = _planted(40, offset, seed=1)
    clock = estimate_clock(list(zip(clients, engine, strict=True)))
    # NTP bounds: theta <= offset + min send, theta >= offset - min delivery
    lo, hi = offset - min(r[4] for r in rows), offset + min(r[1] for r in rows)
    assert clock.offset_ns == (lo + hi) // 2
    assert (
        clock.offset_ns - clock.uncertainty_ns <= offset <= clock.offset_ns + clock.uncertainty_ns
    )
    doc, _ = join(_run(clients), engine, "e.pyt", "estimate", 5 * MS)
    err = clock.offset_ns - offset
    for q, (_, send, queue, prefill, deliver) in zip(doc["requests"], rows, strict=True):
        p = q["ttft_parts_ns"]
        assert (p["queue"], p["prefill"]) == (queue, prefill)  # engine-side: no offset in them
        assert p["send"] == send - err and p["first_token_delivery"] == deliver + err
        assert sum(p.values()) == q["client_ttft_ns"]


def test_without_ids_matched_by_start_time_and_warmup_left_unmatched() -> None:
    _, clients, engine = _planted(10, 0, seed=2, ids=False)
    warm = [RequestRecord(f"w{i}", -10 * MS * (i + 1), -MS * (i + 1) * 9, [-MS * (i + 1) * 9],
                          [1]) for i in range(3)]  # fmt: skip
    doc, _ = join(_run(clients), warm + engine, "e.pyt", "same", 5 * MS)
    assert (doc["matched"], doc["unmatched_client"], doc["unmatched_server"]) == (10, 0, 3)
    assert [q["server_id"] for q in doc["requests"]] == [s.req_id for s in engine]
    assert all(q["matched_by"] == "time" for q in doc["requests"])
    # a send slower than the tolerance is not matched at all
    doc, _ = join(_run(clients), engine, "e.pyt", "same", 10_000)
    assert (doc["matched"], doc["unmatched_client"], doc["unmatched_server"]) == (0, 10, 10)


def test_failed_requests_kept_with_null_times_and_out_of_the_figures() -> None:
    _, clients, engine = _planted(4, 0, seed=3)
    clients[1] = RequestRecord(clients[1].req_id, clients[1].start_ns, clients[1].start_ns + MS,
                               error="timeout", server_id="cmpl-1")  # fmt: skip
    doc, _ = join(_run(clients), engine, "e.pyt", "same", 5 * MS)
    assert doc["matched"] == 4
    bad = doc["requests"][1]
    assert bad["client_status"] == "error" and bad["server_status"] == "ok"
    assert bad["client_ttft_ns"] is None and bad["ttft_parts_ns"] is None
    assert bad["server_ttft_ns"] is not None
    ok = [q for q in doc["requests"] if q["ttft_parts_ns"]]
    send = np.array([q["send_ns"] for q in ok], np.float64)
    assert doc["levels"][0]["parts"]["send"]["p50_ns"] == pytest.approx(np.median(send))


def test_crossing_bounds_and_duplicate_ids_are_errors() -> None:
    _, clients, engine = _planted(3, 0)
    late = RequestRecord("cmpl-x", engine[0].start_ns, engine[0].end_ns,
                         [c + 50 * MS for c in clients[0].chunk_ns], [1] * 4)  # fmt: skip
    with pytest.raises(UsageError, match="no single clock offset"):
        estimate_clock([(clients[0], late), (clients[1], engine[1])])
    with pytest.raises(TraceFormatError, match="appears twice"):
        join(_run(clients), [*engine, engine[0]], "e.pyt", "same", MS)
    engine[2].phases.append(("send", engine[2].start_ns))
    with pytest.raises(TraceFormatError, match=r"e\.pyt: engine phase 'send' has the name"):
        join(_run(clients), engine, "e.pyt", "same", MS)
    with pytest.raises(UsageError, match="cannot estimate"):
        estimate_clock([])


def test_an_engine_clock_an_hour_off_is_refused_not_joined() -> None:
    """Taken for one clock (--clock same, or auto on a shared host name), an engine whose
    CLOCK_MONOTONIC reads an hour ahead (another boot, a container) used to give delivery
    p50 -3,599,999 ms with exit 0."""
    _, clients, engine = _planted(10, 3600 * 1000 * MS)
    with pytest.raises(UsageError, match=r"come out negative .*try --clock estimate"):
        join(_run(clients), engine, "e.pyt", "same", 5 * MS)
    doc, clock = join(_run(clients), engine, "e.pyt", "estimate", 5 * MS)
    assert doc["matched"] == 10 and abs(clock.offset_ns - 3600 * 1000 * MS) < 3 * MS


def test_auto_clock_goes_by_the_boot_id_before_the_host_name(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import socket

    import pytimings as pt
    from pytimings.record.recorder import boot_id
    from pytimings.serving.join import auto_clock

    rec = pt.Recorder()
    with rec.region("step"):
        pass
    path = tmp_path / "engine.pyt"
    pt.save(path, rec)
    here, boot = socket.gethostname(), boot_id()
    assert boot is not None  # Linux
    base = _run(_planted(1, 0)[1])

    def run(host: str | None, boot_: str | None) -> Run:
        return Run(base.path, base.config, base.levels, host, boot_)

    assert auto_clock(run(here, boot), str(path)) == "same"
    assert auto_clock(run(here, "another-boot"), str(path)) == "estimate"  # name alone: no
    assert auto_clock(run(here, None), str(path)) == "same"  # run files before boot ids
    assert auto_clock(run("elsewhere", None), str(path)) == "estimate"


def test_no_matched_request_is_an_error_saying_why(tmp_path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Two unrelated runs on one host: no shared id, the engine's requests an hour after the
    client's. It printed "matched 0 requests" and empty tables, exit 0 (issue 46)."""
    from pytimings.cli import main
    from pytimings.ingest import recording_file
    from pytimings.serving import runfile

    _, planted, engine = _planted(5, 3600 * 1000 * MS)
    clients = [dataclasses.replace(c, server_id=f"other-{c.server_id}") for c in planted]
    doc, _ = join(_run(clients), engine, "e.pyt", "same", 5 * MS)  # the library: no error
    assert doc["matched"] == 0
    monkeypatch.setattr(runfile, "load_run", lambda path: _run(clients))
    monkeypatch.setattr(recording_file, "load_requests", lambda path: engine)
    files = [tmp_path / "run.json", tmp_path / "e.pyt"]
    for f in files:
        f.write_text("")
    assert main(["join", *map(str, files), "--clock", "same"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "e.pyt: no request matched: none of the 5 server ids of the client's requests" in err
    assert "the engine's requests start 3599.9" in err and "after the client's last send" in err
    assert "(same host: one CLOCK_MONOTONIC)" in err
    clients = [dataclasses.replace(c, server_id=None) for c in planted]
    assert main(["join", *map(str, files), "--clock", "same"]) == 2
    err = capsys.readouterr().err
    assert "no client request carries a server id; by start time" in err
