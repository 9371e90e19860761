"""The real traces in ../shared/data (nsys SQLite exports and Kineto JSON) that the
integration tests read one by one."""

from __future__ import annotations

from pathlib import Path

SUFFIXES = (".json", ".json.gz", ".sqlite")


def trace_files() -> list[Path]:
    """Every trace file under ../shared/data/external and ../shared/data/h200, sorted."""
    root = Path(__file__).resolve().parents[2].parent / "shared" / "data"
    return sorted(
        p
        for sub in ("external", "h200")
        for p in (root / sub).rglob("*")
        if p.is_file() and p.name.endswith(SUFFIXES)
    )
