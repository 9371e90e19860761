"""Request timelines land in the same saved recording as the engine's regions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from recording_factory import make_recording

import pytimings
from pytimings.errors import TraceFormatError
from pytimings.serving.metrics import serving_metrics
from pytimings.serving.record import default_log, load_requests, request
from pytimings.storage import load_tables


@pytest.fixture
def clean_log() -> Iterator[None]:
    default_log().clear()
    yield
    default_log().clear()


def test_requests_saved_with_regions_on_one_clock(tmp_path: Path, clean_log: None) -> None:
    regions = []
    with request("r0", input_tokens=5) as r:
        r.phase("prefill")
        t0 = pytimings.now_ns()
        r.token()
        regions.append(
            {"name": "prefill_step", "kind": "compute", "start": t0, "end": pytimings.now_ns()}
        )
        r.phase("decode")
        for _ in range(3):
            t0 = pytimings.now_ns()
            r.token()
            regions.append(
                {"name": "decode_step", "kind": "compute", "start": t0, "end": pytimings.now_ns()}
            )
    with pytest.raises(ValueError), request("r1"):
        raise ValueError("aborted")
    path = tmp_path / "rec.pyt"
    pytimings.save(path, make_recording(regions))

    tables = load_tables(path)
    assert {"records", "requests"} <= set(tables)
    recs = load_requests(path)
    assert [(x.req_id, x.status) for x in recs] == [("r0", "ok"), ("r1", "error")]
    ok = recs[0]
    starts = tables["records"].column("start_ns").to_pylist()
    ends = tables["records"].column("end_ns").to_pylist()
    # every token was stamped inside the step region around it: one clock
    for t, a, b in zip(ok.chunk_ns, starts, ends, strict=True):
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
