"""A request's end against tokens and saves on other threads (issue 47 #5, #17): a token
is kept or refused, never lost, and an end is never seen without its packed chunks."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest

from pytimings.record.requests import ActiveRequest, RequestLog, request


@pytest.fixture(autouse=True)
def _switch_often() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # hand the GIL over between nearly every bytecode
    yield
    sys.setswitchinterval(before)


def test_a_token_racing_the_end_is_kept_or_refused_never_lost() -> None:
    """token() checked end_ns, then appended to a list _end() had already replaced: about
    one request in two lost a token."""
    log = RequestLog()
    accepted: list[int] = []

    def produce(r: ActiveRequest, started: threading.Event) -> None:
        accepted.append(0)
        started.set()
        while True:
            try:
                r.token()
            except RuntimeError:
                return
            accepted[-1] += 1

    for i in range(200):
        started = threading.Event()
        with request(i, log=log) as r:
            producer = threading.Thread(target=produce, args=(r, started))
            producer.start()
            started.wait()
        producer.join()
    records = log.records()
    lost = [
        (rec.req_id, kept - sum(rec.chunk_tokens))
        for rec, kept in zip(records, accepted, strict=True)
        if sum(rec.chunk_tokens) != kept
    ]
    assert not lost, f"{len(lost)} of 200 requests lost tokens: {lost[:5]}"
    assert all(
        not rec.chunk_ns or (rec.end_ns is not None and rec.chunk_ns[-1] <= rec.end_ns)
        for rec in records
    )


def test_a_save_racing_the_end_sees_every_token_of_a_finished_request() -> None:
    """end_ns was published before the chunks were packed: a save in between read a finished
    request with no tokens."""
    log = RequestLog()
    stop = threading.Event()
    short: list[tuple[str, int]] = []

    def save_repeatedly() -> None:
        while not stop.is_set():
            for rec in log.records():
                if rec.end_ns is not None and sum(rec.chunk_tokens) != 50:
                    short.append((rec.req_id, sum(rec.chunk_tokens)))

    saver = threading.Thread(target=save_repeatedly)
    saver.start()
    try:
        for i in range(300):
            with request(i, log=log) as r:
                for _ in range(50):
                    r.token()
    finally:
        stop.set()
        saver.join()
    assert not short, f"{len(short)} reads of a finished request short of tokens: {short[:5]}"
