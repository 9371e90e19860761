"""The package's shape: imports point down the layers of docs/architecture.md, no module
imports itself back, and the page says where every module it names lives.

Every import of a pytimings module in the source counts, function-level imports and
``importlib.import_module("pytimings....")`` calls included (they hide cycles as well as
top-level ones do); ``if TYPE_CHECKING:`` imports, which never run, are left out of the
layer and runtime-cycle checks but count among the modules of one package: two modules of
a package that need each other, even for types only, are one responsibility split in two
(the result object running the findings that read it).

The layers are read from the table in docs/architecture.md (its first column the layer, its
second the folders and files in it), so the page and the checks cannot drift apart: a
module the page names in the wrong layer, a module it names that does not exist, a
top-level module it leaves out and a subcommand it places wrong each fail here.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "pytimings"
DOC = ROOT / "docs" / "architecture.md"

# a backticked path on the page: a module (``name.py``, ``name.pyx``) or a folder (``name/``)
_PATH = re.compile(r"`([\w./]+(?:\.pyx?|/))`")
_SUBCOMMAND = re.compile(r"`pytimings ([a-z][a-z-]*)`")


def _rows(text: str) -> list[tuple[int, list[str], str]]:
    """The layer table: (layer, its folders and files as written, what lives there)."""
    rows = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].isdigit():
            names = re.findall(r"`([^`]+)`", cells[1])
            rows.append((int(cells[0]), names, cells[2]))
    return rows


def _layers(text: str) -> dict[str, int]:
    """Top-level module or package (``""``: pytimings/__init__.py) -> its layer."""
    layers: dict[str, int] = {}
    for layer, names, _ in _rows(text):
        for name in names:
            top = name.removesuffix("/").removesuffix(".py")
            layers["" if top == "__init__" else top] = layer
    return layers


DOC_TEXT = DOC.read_text()
LAYER = _layers(DOC_TEXT)


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*"):
        if p.suffix not in (".py", ".pyx") or "__pycache__" in p.parts:
            continue
        parts = ["pytimings", *p.relative_to(PKG).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _python_source(path: Path) -> str:
    text = path.read_text()
    if path.suffix == ".pyx":  # only the Python-level import lines of a Cython module
        keep = [ln for ln in text.splitlines() if ln.startswith(("import ", "from "))]
        return "\n".join(ln for ln in keep if "cimport" not in ln)
    return text


def _resolve(target: str) -> str | None:
    """The module a dotted import names (a name imported from a module resolves to it)."""
    if not (target == "pytimings" or target.startswith("pytimings.")):
        return None
    if target == "pytimings._core" or target.startswith("pytimings._core."):
        return "pytimings._core"  # the compiled extension (no source file)
    while target not in MODULES and "." in target:
        target = target.rsplit(".", 1)[0]
    return target if target in MODULES else None


def _imports(module: str, types_too: bool = False) -> set[str]:
    """The pytimings modules ``module`` imports (``types_too``: with its ``if
    TYPE_CHECKING:`` imports)."""
    path = MODULES[module]
    tree = ast.parse(_python_source(path))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if not types_too and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            names = [f"{base}.{a.name}" for a in node.names]
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("importlib.import_module", "import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names = [node.args[0].value]
        for n in names:
            r = _resolve(n)
            if r is not None and r != module:
                found.add(r)
    return found


GRAPH = {m: _imports(m) for m in MODULES}


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYER[parts[1] if len(parts) > 1 else ""]


def test_every_package_has_a_layer() -> None:
    tops = {m.split(".")[1] for m in MODULES if "." in m}
    assert tops <= set(LAYER), f"new top-level modules need a row in {DOC}: {tops - set(LAYER)}"
    # the compiled extension (_core): in a checkout only its stub, installed as a module
    compiled = {
        p.stem for p in PKG.glob("_*.pyi") if importlib.util.find_spec(f"pytimings.{p.stem}")
    }
    absent = set(LAYER) - tops - compiled - {""}
    assert not absent, f"{DOC} gives a layer to modules that do not exist: {sorted(absent)}"


def _module_layer(path: Path) -> int:
    """The layer of a file or folder inside pytimings/."""
    parts = path.relative_to(PKG).parts
    top = parts[0].split(".")[0] if parts else ""
    return LAYER["" if top == "__init__" else top]


def _doc_problems(text: str, subcommands: dict[str, str]) -> list[str]:
    """Where the page and the package disagree: a module or folder it names that does not
    exist, or exists in another layer than the row naming it; a subcommand it names in the
    wrong layer, or not at all (``subcommands``: name -> module, as cli.py runs them)."""
    problems = []
    rows = _rows(text)
    table = {line for line in text.splitlines() if line.strip().startswith("|")}
    prose = "\n".join(line for line in text.splitlines() if line not in table)
    located: list[tuple[int | None, list[str], str]] = [*rows, (None, [], prose)]
    for layer, names, what in located:
        folders = [PKG / name for name in names if name.endswith("/")]
        for token in _PATH.findall(what):
            where = [folder / token for folder in folders] + [PKG / token, ROOT / token]
            found = next((path for path in where if path.exists()), None)
            if found is None:
                problems.append(f"`{token}` (layer {layer}) does not exist")
            elif layer is not None and PKG in found.parents:
                if _module_layer(found) != layer:
                    got = found.relative_to(ROOT)
                    problems.append(f"`{token}` is in row {layer}, but {got} is in layer "
                                    f"{_module_layer(found)}")  # fmt: skip
    placed: dict[str, int] = {}
    for layer, _, what in rows:
        for name in _SUBCOMMAND.findall(what):
            placed[name] = layer
    for name, module in sorted(subcommands.items()):
        actual = _layer(module)
        if name not in placed:
            problems.append(f"`pytimings {name}` ({module}, layer {actual}) is not on the page")
        elif placed[name] != actual:
            problems.append(f"`pytimings {name}` is in row {placed[name]}, but {module} is "
                            f"in layer {actual}")  # fmt: skip
    problems += [f"`pytimings {name}` is no subcommand" for name in placed.keys() - subcommands]
    return problems


def _subcommands() -> dict[str, str]:
    from pytimings.cli import SUBCOMMANDS

    return {name: module for name, (module, _) in SUBCOMMANDS.items()}


def test_the_page_names_every_module_where_it_lives() -> None:
    assert not _doc_problems(DOC_TEXT, _subcommands()), "\n".join(
        _doc_problems(DOC_TEXT, _subcommands())
    )


def test_the_page_check_finds_a_misplaced_module_and_subcommand() -> None:
    """The page as it was before it was checked: fileout.py in no row, five subcommands
    in the commands row though their modules live in bench/ and serving/ (so the check
    above can fail)."""
    subcommands = _subcommands()
    moved = DOC_TEXT.replace("`fileout.py`, ", "").replace(
        "`pytimings report` (`report.py`)", "`pytimings report` (`report.py`), `pytimings loadgen`"
    )
    problems = _doc_problems(moved, subcommands)
    assert "`pytimings loadgen` is in row 7, but pytimings.serving.loadgen is in layer 5" in (
        problems
    )
    assert "fileout" not in _layers(moved)
    renamed = DOC_TEXT.replace("`kineto.py`", "`kineto_v2.py`")
    assert "`kineto_v2.py` (layer 2) does not exist" in _doc_problems(renamed, subcommands)
    misplaced = DOC_TEXT.replace("`grouped.py`", "`fileout.py`")
    assert "`fileout.py` is in row 3, but pytimings/fileout.py is in layer 0" in (
        _doc_problems(misplaced, subcommands)
    )


def test_report_reads_nothing_from_the_recorder() -> None:
    """What the recorder wrote reaches a report through ingest/ and model/ only."""
    found = {
        module: sorted(t for t in targets if t.startswith("pytimings.record"))
        for module, targets in GRAPH.items()
        if module.startswith("pytimings.report")
    }
    found = {module: targets for module, targets in found.items() if targets}
    assert not found, f"report/ imports record/: {found}"


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_point_down(module: str) -> None:
    up = sorted(t for t in GRAPH[module] if _layer(t) > _layer(module))
    assert not up, f"{module} imports a higher layer: {up}"
    if _layer(module) == 5:  # bench and serving are side by side
        side = module.split(".")[1]
        other = sorted(t for t in GRAPH[module] if _layer(t) == 5 and t.split(".")[1] != side)
        assert not other, f"{module} imports {other}"


def test_native_kernels_import_nothing_of_pytimings() -> None:
    for m, targets in GRAPH.items():
        if m.startswith("pytimings._native"):
            assert not targets, f"{m} imports {sorted(targets)}"


def _cycles(graph: dict[str, set[str]]) -> set[str]:
    """The modules on an import cycle or depending on one: strip modules that import
    nothing left until none can be stripped."""
    remaining = {m: {t for t in ts if t in graph} for m, ts in graph.items()}
    while leaves := [m for m, ts in remaining.items() if not ts]:
        for m in leaves:
            del remaining[m]
        for ts in remaining.values():
            ts.difference_update(leaves)
    return set(remaining)


def test_no_import_cycle() -> None:
    assert not _cycles(GRAPH), f"import cycles among: {sorted(_cycles(GRAPH))}"


def _package(module: str) -> str:
    path = MODULES.get(module)
    return module if path is not None and path.name == "__init__.py" else module.rsplit(".", 1)[0]


def _package_graph() -> dict[str, set[str]]:
    """Imports between modules of the same package, type-only ones included."""
    return {
        m: {t for t in _imports(m, types_too=True) if t != m and _package(t) == _package(m)}
        for m in MODULES
        if MODULES[m].suffix == ".py"
    }


def test_no_cycle_inside_a_package_even_through_types() -> None:
    cyc = _cycles(_package_graph())
    assert not cyc, f"modules of one package that need each other: {sorted(cyc)}"


def test_the_checker_finds_hidden_cycles_and_skips_type_checking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cycle through a function-level import is found; a TYPE_CHECKING import is not an
    edge (so a checker that missed either would be caught here)."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("def f():\n    from pytimings.b import g\n    return g\n")
    b.write_text(
        "from typing import TYPE_CHECKING\nimport pytimings.a\n"
        "if TYPE_CHECKING:\n    from pytimings.c import T\n"
    )
    monkeypatch.setitem(MODULES, "pytimings.a", a)
    monkeypatch.setitem(MODULES, "pytimings.b", b)
    monkeypatch.setitem(MODULES, "pytimings.c", b)
    graph = {"pytimings.a": _imports("pytimings.a"), "pytimings.b": _imports("pytimings.b")}
    assert graph == {"pytimings.a": {"pytimings.b"}, "pytimings.b": {"pytimings.a"}}
    assert _cycles(graph) == {"pytimings.a", "pytimings.b"}
    assert _cycles({"x": {"y"}, "y": set()}) == set()
    # an importlib call is an edge; a TYPE_CHECKING import one only with types_too
    a.write_text("import importlib\nm = importlib.import_module('pytimings.b')\n")
    assert _imports("pytimings.a") == {"pytimings.b"}
    assert _imports("pytimings.b", types_too=True) == {"pytimings.a", "pytimings.c"}
