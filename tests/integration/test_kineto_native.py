"""Every Kineto trace in ../shared loads to the stored digests of every table, the meta and
the dropped counts (tests/data/kineto/digests.json: made by the msgspec loader the native
single pass replaced, issue 27; both loaded every trace to the same results)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.trace_digest import digests, kineto_files, relative

from pytimings.ingest.kineto import load_kineto

pytestmark = pytest.mark.shared
FILES = kineto_files()
DIGESTS = json.loads((Path(__file__).parents[1] / "data/kineto/digests.json").read_text())


def test_every_kineto_trace_has_its_digests() -> None:
    assert len(FILES) >= 30
    assert sorted(relative(p) for p in FILES) == sorted(DIGESTS)


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_the_trace_loads_to_its_stored_digests(path: Path) -> None:
    want, got = DIGESTS[relative(path)], digests(load_kineto(path))
    differ = sorted(k for k in want if got.get(k) != want[k])
    assert not differ and got.keys() == want.keys(), differ


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_the_split_scan_loads_to_the_stored_digests(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """traceEvents scanned in 64 KiB pieces on two scanners at once (every file, however
    small): the same results."""
    from pytimings.ingest import kineto

    monkeypatch.setattr(kineto, "SPLIT_SCANNERS", 2)
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(kineto, "INLINE_BYTES", 0)
    want, got = DIGESTS[relative(path)], digests(load_kineto(path))
    differ = sorted(k for k in want if got.get(k) != want[k])
    assert not differ and got.keys() == want.keys(), differ
