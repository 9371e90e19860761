"""Install hints cannot fetch another project (issue 46): "pytimings" on PyPI is an unrelated
package, so no hint, help text, doc or README command may name ``pytimings[...]`` (or a bare
``pip install pytimings``), which pip would resolve from the index. Hints name the extra's
packages or this checkout (``pip install '.[html]'``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from pytimings.errors import DISTRIBUTION, EXTRAS, install_hint

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
# a requirement naming the import name as a distribution: pytimings[html], "pytimings>=0.1",
# pip install pytimings
FROM_INDEX = re.compile(
    r"(?<![\w./-])pytimings\s*\[[\w,\s-]*\]|pip3? install (?:-\S+ )*['\"]?pytimings(?![\w.-])"
)
TEXT_FILES = [
    ROOT / "README.md",
    ROOT / "pyproject.toml",
    ROOT / ".ci" / "run",
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted((ROOT / "pytimings").rglob("*.py")),
    *sorted((ROOT / "pytimings").rglob("*.pyx")),
    *sorted((ROOT / "tests").rglob("*.py")),
    *sorted((ROOT / "benches").rglob("*.py")),
]


def _pyproject() -> dict[str, object]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def test_the_distribution_is_not_the_unrelated_pypi_project() -> None:
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    assert project["name"] == DISTRIBUTION != "pytimings"


def test_the_hints_know_every_extra_as_pyproject_declares_it() -> None:
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    declared = {
        extra: tuple(requirements)
        for extra, requirements in project["optional-dependencies"].items()
        if extra != "test"
    }
    assert declared == EXTRAS


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_a_hint_names_packages_or_the_checkout(extra: str) -> None:
    hint = install_hint(extra)
    assert FROM_INDEX.search(hint) is None, hint
    assert f"pip install '.[{extra}]'" in hint
    assert all(f"'{requirement}'" in hint for requirement in EXTRAS[extra])


def test_no_text_names_the_unrelated_distribution() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{text[: match.start()].count(chr(10)) + 1}: {match.group()}"
        for path in TEXT_FILES
        if path != Path(__file__).resolve()
        for text in [path.read_text()]
        for match in FROM_INDEX.finditer(text)
    ]
    assert found == []


@pytest.mark.parametrize(
    "text",
    [
        "pip install 'pytimings[html]'",
        'pip install "pytimings[dask]" on every worker',
        "pip install pytimings",
        "pip install -U pytimings",
        '  "pytimings[serving,plot]",',
    ],
)
def test_the_check_catches_each_form(text: str) -> None:
    assert FROM_INDEX.search(text) is not None


@pytest.mark.parametrize(
    "text",
    ["pip install '.[html]'", '"pytimings-gpu[serving,plot]"', "pytimings.errors", "pip install ."],
)
def test_the_check_passes_the_safe_forms(text: str) -> None:
    assert FROM_INDEX.search(text) is None


def test_the_version_is_this_distributions(monkeypatch: pytest.MonkeyPatch) -> None:
    """`pytimings --version` asked for "pytimings": the unrelated project's version when
    that is installed."""
    import importlib.metadata

    from pytimings.cli import _version

    asked: list[str] = []
    monkeypatch.setattr(importlib.metadata, "version", lambda name: asked.append(name) or "9.9")
    assert _version() == "9.9" and asked == [DISTRIBUTION]
