"""The package's shape: imports point down the layers and no module imports itself back.

Every import of a pytimings module in the source counts, function-level imports and
``importlib.import_module("pytimings....")`` calls included (they hide cycles as well as
top-level ones do); ``if TYPE_CHECKING:`` imports, which never run, are left out of the
layer and runtime-cycle checks but count among the modules of one package: two modules of
a package that need each other, even for types only, are one responsibility split in two
(the result object running the findings that read it).

The layers, lowest first (docs/architecture.md):

0. ``_core``, ``_native`` (compiled), ``errors``, ``stats`` (bootstrap pieces), ``fileout``
   (the one output-file writer), ``arrays`` (sorted-unique helpers)
1. ``table``, ``console`` (progress bars, text tables), ``model`` (the event model)
2. ``ingest`` (one module per format -> the model)
3. ``analysis`` (partition, windows, ranks, findings, summary)
4. ``record`` (the recorder; reads files back through ingest, statistics through analysis)
5. ``bench``, ``serving`` (neither imports the other)
6. ``report`` (the only layer that formats documents: html, perfetto, text of analyses)
7. ``commands`` (subcommands that span layers), ``session`` (``pt.analyze``: the analysis
   and its report), then ``cli`` and the package facade
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "pytimings"

LAYER = {
    "_core": 0,
    "_native": 0,
    "errors": 0,
    "stats": 0,
    "fileout": 0,
    "arrays": 0,
    "table": 1,
    "console": 1,
    "model": 1,
    "ingest": 2,
    "analysis": 3,
    "record": 4,
    "bench": 5,
    "serving": 5,
    "report": 6,
    "commands": 7,
    "session": 7,  # pytimings/session.py: the analysis session (it renders through report)
    "cli": 8,
    "": 8,  # pytimings/__init__.py, the facade
}


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
    assert tops <= set(LAYER), f"new top-level modules need a layer: {tops - set(LAYER)}"


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
