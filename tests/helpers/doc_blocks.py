"""The fenced code blocks of the README and docs/, for the tests that run them."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def fenced_blocks(text: str) -> list[tuple[str, str, int]]:
    """(language, body, line of the opening fence) of each fenced block."""
    out: list[tuple[str, str, int]] = []
    lang, body, inside, start = "", [], False, 0
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("```"):
            if inside:
                out.append((lang, "\n".join(body), start))
            else:
                lang, body, start = line[3:].strip(), [], number
            inside = not inside
        elif inside:
            body.append(line)
    return out
