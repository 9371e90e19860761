"""Request timelines land in the same saved recording as the engine's regions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.recording_factory import make_recording

import pytimings
from pytimings.errors import TraceFormatError
from pytimings.ingest.recording_file import load_requests, load_tables
from pytimings.record.requests import default_log, request
from pytimings.serving.metrics import serving_metrics


@pytest.fixture
def clean_log() -> Iterator[None]:
    default_log().clear()
    yield
    default_log().clear()


def test_requests_saved_with_regions_on_one_clock(tmp_path: Path, clean_log: None) -> None:
    rec = pytimings.Recorder()  # the real native recorder, private to this test
    with request("r0", input_tokens=5) as r:
        r.phase("prefill")
        with rec.region("prefill_step", kind="compute"):
            r.token()
        r.phase("decode")
        for _ in range(3):
            with rec.region("decode_step", kind="compute"):
                r.token()
    with pytest.raises(ValueError), request("r1"):
        raise ValueError("aborted")
    path = tmp_path / "rec.pyt"
    pytimings.save(path, rec)

    tables = load_tables(path)
    assert {"records", "requests"} <= set(tables)
    recs = load_requests(path)
    assert [(x.req_id, x.status) for x in recs] == [("r0", "ok"), ("r1", "error")]
    ok = recs[0]
    regions = sorted(zip(tables["records"].column("start_ns").to_pylist(),
                         tables["records"].column("end_ns").to_pylist(), strict=True))  # fmt: skip
    assert len(regions) == 4
    # every token was stamped inside the engine region around it: one clock, one file
    for t, (a, b) in zip(ok.chunk_ns, regions, strict=True):
        assert a <= t <= b
    m = serving_metrics(recs)
    assert m.completed == 1 and m.errors == {"exception": 1}
    assert m.phases["prefill"].count == 1 and m.phases["decode"].count == 1


def test_no_requests_no_table(tmp_path: Path, clean_log: None) -> None:
    path = tmp_path / "rec.pyt"
    pytimings.save(path, make_recording([]))
    assert "requests" not in load_tables(path)
    with pytest.raises(TraceFormatError, match="no requests table"):
        load_requests(path)
