"""The native single-pass Kineto loader against the msgspec path it replaces: every Kineto
trace in ../shared loads to the same columns of every table, the same meta and the same
dropped counts (issue 27)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.trace_digest import digests, kineto_files

from pytimings.ingest import _kineto_old
from pytimings.ingest.kineto import load_kineto

pytestmark = pytest.mark.shared
FILES = kineto_files()


def test_every_kineto_trace_is_found() -> None:
    assert len(FILES) >= 30


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_native_pass_equals_the_msgspec_path(path: Path) -> None:
    old, new = digests(_kineto_old.load_kineto(path)), digests(load_kineto(path))
    differ = sorted(k for k in old if old[k] != new.get(k))
    assert not differ and old.keys() == new.keys(), differ
