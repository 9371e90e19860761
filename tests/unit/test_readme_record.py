"""The README's "Record" quickstart runs as written and records what it says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _quickstart() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Record\n") :]
    m = re.search(r"```python\n(.*?)```", section, re.S)
    assert m, "no python block in the Record section"
    return m.group(1)


def test_quickstart_is_ten_lines_or_so() -> None:
    code = [line for line in _quickstart().splitlines() if line.strip()]
    assert len(code) <= 10


def test_quickstart_runs(tmp_path: Path) -> None:
    check = (
        "\nassert pt.summary()['kv_copy']['count'] == 8\n"
        "assert pt.summary()['decode_step']['count'] == 8\n"
        "assert len(trace.ranges) == 16\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", _quickstart() + check],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "kv_copy" in r.stdout and (tmp_path / "run.pyt").is_file()
