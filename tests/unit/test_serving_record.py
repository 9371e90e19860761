"""The in-engine request recorder: clock, thread safety, errors kept, Arrow round trip."""

from __future__ import annotations

import threading
import time

import pytest

import pytimings
from pytimings.errors import TraceFormatError
from pytimings.model.requests import RequestRecord, records_from_arrow
from pytimings.record.requests import RequestLog, request


def test_public_name_and_clock() -> None:
    log = RequestLog()
    before = time.monotonic_ns()
    with pytimings.request("r1", input_tokens=7, log=log) as r:
        r.phase("queue")
        r.phase("prefill")
        r.token()
        r.phase("decode")
        r.token(k=3)
    after = time.monotonic_ns()
    (rec,) = log.records()
    assert rec.status == "ok" and rec.input_tokens == 7
    # the recorder's clock is CLOCK_MONOTONIC, the same as time.monotonic_ns
    assert before <= rec.start_ns <= rec.chunk_ns[0] <= rec.chunk_ns[1] <= rec.end_ns <= after
    assert rec.chunk_tokens == [1, 3] and rec.n_output == 4
    assert [n for n, _ in rec.phases] == ["queue", "prefill", "decode"]
    m = pytimings.serving_metrics(log)  # a live log is accepted as it is
    assert m.completed == 1 and m.output_tokens == 4
    assert m.phases["prefill"].count == 1


def test_exception_is_recorded_not_dropped() -> None:
    log = RequestLog()
    with pytest.raises(RuntimeError), request("bad", log=log) as r:
        r.token()
        raise RuntimeError("oom")
    (rec,) = log.records()
    assert rec.status == "error" and rec.error == "exception"
    assert "RuntimeError: oom" in rec.error_detail and rec.chunk_tokens == [1]


def test_open_request_is_flagged_unfinished() -> None:
    log = RequestLog()
    ctx = request("open", log=log)
    r = ctx.__enter__()
    r.token()
    (rec,) = log.records()
    assert rec.status == "unfinished" and rec.end_ns is None and rec.chunk_tokens == [1]
    log.clear()
    assert len(log) == 1  # open requests survive clear()
    ctx.__exit__(None, None, None)
    assert [x.status for x in log.records()] == ["ok"]


def test_token_k_must_be_positive_and_inside_the_request() -> None:
    with request("k", log=RequestLog()) as r, pytest.raises(ValueError, match="at least 1"):
        r.token(0)
    with pytest.raises(RuntimeError, match="after the request ended"):
        r.token()
    with pytest.raises(RuntimeError, match="after the request ended"):
        r.phase("decode")


def test_threads_sharing_one_request_and_log() -> None:
    log = RequestLog()
    n_threads, per_thread = 4, 500

    def worker(r: object, k: int) -> None:
        for _ in range(per_thread):
            r.token(k)  # type: ignore[attr-defined]

    with request("shared", log=log) as r:
        threads = [threading.Thread(target=worker, args=(r, k + 1)) for k in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    (rec,) = log.records()
    assert len(rec.chunk_ns) == n_threads * per_thread
    assert rec.chunk_ns == sorted(rec.chunk_ns)
    assert sum(rec.chunk_tokens) == per_thread * sum(range(1, n_threads + 1))


def test_arrow_round_trip_keeps_every_status() -> None:
    log = RequestLog()
    with request("ok", input_tokens=3, log=log) as r:
        r.phase("decode")
        r.token(2)
    with pytest.raises(KeyError), request("err", log=log):
        raise KeyError("x")
    request("open", log=log).__enter__()
    table = log.to_arrow()
    assert table.num_rows == 3
    back = RequestLog.from_arrow(table)
    assert [(b.req_id, b.status) for b in back] == [
        ("ok", "ok"),
        ("err", "error"),
        ("open", "unfinished"),
    ]
    assert back[0] == log.records()[0]


def test_invalid_tables_and_json_are_rejected() -> None:
    with pytest.raises(TraceFormatError, match="lacks columns"):
        records_from_arrow(RequestLog().to_arrow().drop_columns(["chunk_ns"]), "f.pyt")
    with pytest.raises(TraceFormatError, match="backwards"):
        RequestRecord.from_json(
            {"id": "x", "start_ns": 10, "chunk_ns": [5], "chunk_tokens": [1]}, "run.json"
        )
    with pytest.raises(TraceFormatError, match="lacks field 'start_ns'"):
        RequestRecord.from_json({"id": "x"}, "run.json")
    rec = RequestRecord("j", 1, 9, [2, 3], [1, 2], 5, 3, [("decode", 1)], None, "")
    assert RequestRecord.from_json(rec.to_json(), "run.json") == rec


@pytest.mark.parametrize(
    ("make", "err"),
    [
        (lambda log: request("a", input_tokens=2**63, log=log), ValueError),
        (lambda log: request("a", input_tokens=-1, log=log), ValueError),
        (lambda log: request("a", input_tokens=1.5, log=log), TypeError),  # type: ignore[arg-type]
        (lambda log: request("a", input_tokens=True, log=log), TypeError),
        (lambda log: request("a\ud800b", log=log), ValueError),
    ],
    ids=["int64-overflow", "negative", "float", "bool", "lone-surrogate"],
)
def test_values_that_would_break_the_save_are_refused_where_given(make, err) -> None:  # type: ignore[no-untyped-def]
    """Each of these used to be accepted and break the whole later save (or write a file
    every reader rejects): now the call that gives it raises, and the log stays savable."""
    log = RequestLog()
    with pytest.raises(err):
        make(log)
    assert len(log) == 0
    records_from_arrow(log.to_arrow())


@pytest.mark.parametrize(
    ("act", "err"),
    [
        (lambda r: r.token(2**31), ValueError),
        (lambda r: r.token(1.0), TypeError),
        (lambda r: r.phase(3), TypeError),
        (lambda r: r.phase("de\udc00code"), ValueError),
    ],
    ids=["int32-overflow", "float-k", "non-str-phase", "surrogate-phase"],
)
def test_bad_token_and_phase_values_are_refused_and_the_request_saves(act, err) -> None:  # type: ignore[no-untyped-def]
    log = RequestLog()
    with request("r1", input_tokens=3, log=log) as r:
        r.token()
        with pytest.raises(err):
            act(r)
        r.token(2**31 - 1)
    (rec,) = records_from_arrow(log.to_arrow())
    assert rec.chunk_tokens == [1, 2**31 - 1] and rec.phases == []


def test_scheduled_time_kept_in_json_and_arrow_and_absent_in_older_tables() -> None:
    from pytimings.model.requests import records_to_arrow

    rec = RequestRecord("r", start_ns=120, end_ns=300, chunk_ns=[200], chunk_tokens=[1],
                        scheduled_ns=100)  # fmt: skip
    assert RequestRecord.from_json(rec.to_json(), "f.json").scheduled_ns == 100
    table = records_to_arrow([rec])
    assert records_from_arrow(table)[0].scheduled_ns == 100
    older = table.drop_columns(["scheduled_ns"])  # a table written before the column
    assert records_from_arrow(older)[0].scheduled_ns is None
