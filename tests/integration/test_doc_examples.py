"""Every Python example in README.md and docs/ runs as written (issue 46: docs/replay.md
imported ``critical_path`` from the wrong module, docs/attribution.md a test helper).
Each block runs in a fresh process (the installed pytimings), in a directory holding the
bundled capture as ``trace.sqlite`` (the name the docs' shell examples use); a block that goes on
from an earlier one gets the names in ``GIVEN``. None needs a GPU or ../shared today: a
block that comes to need one goes in ``NOT_HERE`` with the reason."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.doc_blocks import DOCS, fenced_blocks

from pytimings.commands.example import example_path

# the lines a block that continues an earlier one runs first (doc, its first line)
GIVEN = {
    ("attribution.md", "a = pt.attribute(trace, rules={"): (
        "import pytimings as pt\ntrace = pt.load('trace.sqlite')\n"
    ),
}
NOT_HERE: dict[tuple[str, str], str] = {}  # (doc, first line) -> why it cannot run here

EXAMPLES = [
    (doc.name, line, body)
    for doc in DOCS
    for lang, body, line in fenced_blocks(doc.read_text())
    if lang in ("python", "py")
]


def test_the_examples_are_found() -> None:
    assert {doc for doc, _, _ in EXAMPLES} >= {"README.md", "attribution.md", "replay.md"}
    firsts = {(doc, body.splitlines()[0]) for doc, _, body in EXAMPLES}
    assert set(GIVEN) | set(NOT_HERE) <= firsts, "listed but no longer documented"


@pytest.mark.parametrize(("doc", "line", "body"), EXAMPLES, ids=lambda v: str(v)[:40])
def test_the_example_runs(doc: str, line: int, body: str, tmp_path: Path) -> None:
    key = (doc, body.splitlines()[0])
    if key in NOT_HERE:
        pytest.skip(NOT_HERE[key])
    shutil.copyfile(example_path(), tmp_path / "trace.sqlite")
    program = GIVEN.get(key, "") + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, f"{doc}:{line}\n{done.stderr[-3000:]}"
