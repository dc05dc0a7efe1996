"""The import rules, read from the source with `ast` (nothing is imported or run).

Data flows one way: dataset -> harness.datasets -> sut -> LoadGen logs -> harness.run /
evaluation -> harness.tracking. So:
- `sut` imports neither `harness` nor `evaluation`;
- `evaluation` imports no `sut`, and of `harness` only the shared top-level modules;
- inside `harness`, each folder is a layer and imports only the layers below it:
  shared (benchmarks, datasets, errors, files, resources, proc/) < run/ < tracking/, submission/,
  sweep/, assets/ < cli/. The run layer never imports submission (the CLI hands the runner
  the preflight), and nothing outside cli/ imports the CLI;
- no import cycle among modules (imports at module level; lazy ones inside functions and
  TYPE_CHECKING blocks are not cycles at import time, but still obey the layers above).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("sut", "harness", "evaluation")

SHARED = (
    "harness.benchmarks",
    "harness.datasets",
    "harness.errors",
    "harness.files",
    "harness.resources",
    "harness.proc",
)
RUN = ("harness.run",)
# What each part of the tree may import from this project (a prefix allows its submodules).
ALLOWED: dict[str, tuple[str, ...]] = {
    "sut": ("sut",),
    "evaluation": (
        "evaluation",
        "harness.benchmarks",
        "harness.datasets",
        "harness.errors",
        "harness.files",
    ),
    "harness.benchmarks": SHARED,
    "harness.datasets": SHARED,
    "harness.errors": SHARED,
    "harness.files": SHARED,
    "harness.resources": SHARED,
    "harness.proc": SHARED,
    "harness.run": (*SHARED, *RUN, "sut", "evaluation"),
    "harness.tracking": (*SHARED, *RUN, "harness.tracking"),
    "harness.submission": (*SHARED, *RUN, "harness.submission", "evaluation"),
    "harness.sweep": (*SHARED, *RUN, "harness.tracking", "harness.sweep", "sut"),
    "harness.assets": (*SHARED, *RUN, "harness.assets"),
    "harness.cli": ("harness", "sut", "evaluation"),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(p): p
        for package in PACKAGES
        for p in sorted((REPO / package).rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, path: Path) -> Iterator[tuple[str, int, bool]]:
    """(imported module, line, at module level) for every import of this project's code."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"

    def visit(node: ast.AST, top: bool) -> Iterator[tuple[str, int, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, child.lineno, top
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative: resolve against this module's package
                    package = module.split(".")
                    if not is_package:
                        package = package[:-1]
                    package = package[: len(package) - (child.level - 1)]
                    base = ".".join([*package, base] if base else package)
                for alias in child.names:
                    # `from harness import tracking` imports the module harness.tracking
                    yield (
                        (f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base),
                        (child.lineno),
                        top,
                    )
            elif isinstance(child, ast.If) and _is_type_checking(child):
                yield from visit(child, False)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield from visit(child, False if not isinstance(child, ast.ClassDef) else top)
            else:
                yield from visit(child, top)

    for name, line, top in visit(tree, True):
        if name.split(".")[0] in PACKAGES:
            yield name, line, top


MODULES = _modules()


def _part(module: str) -> str:
    """The ALLOWED key a module belongs to: its longest matching prefix."""
    keys = [k for k in ALLOWED if module == k or module.startswith(k + ".")]
    if not keys:
        raise AssertionError(f"{module} belongs to no layer: add it to tests/test_layering.py")
    return max(keys, key=len)


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_every_module_belongs_to_a_layer() -> None:
    for module in MODULES:
        if module != "harness":  # the package itself holds nothing
            _part(module)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "harness"))
def test_imports_follow_the_layers(module: str) -> None:
    allowed = ALLOWED[_part(module)]
    bad = [
        f"{MODULES[module].relative_to(REPO)}:{line} imports {name}"
        for name, line, _ in _imports(module, MODULES[module])
        if not _within(name, allowed)
    ]
    assert not bad, "; ".join(bad)


def test_nothing_outside_the_cli_imports_it() -> None:
    bad = [
        f"{MODULES[m].relative_to(REPO)}:{line} imports {name}"
        for m in MODULES
        if not _within(m, ("harness.cli",))
        for name, line, _ in _imports(m, MODULES[m])
        if _within(name, ("harness.cli",))
    ]
    assert not bad, "; ".join(bad)


def test_no_import_cycles() -> None:
    graph = {
        m: {
            name
            for name, _, top in _imports(m, MODULES[m])
            if top and name in MODULES and name != m
        }
        for m in MODULES
    }
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = path[path.index(n) :] + [n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_the_checker_sees_the_known_edges() -> None:
    """The rules above only mean something if the reader finds imports: spot-check a few."""
    runner = {n for n, _, _ in _imports("harness.run.runner", MODULES["harness.run.runner"])}
    assert {"harness.run.result", "sut.engine", "evaluation"} <= runner
    cli = {n for n, _, _ in _imports("harness.cli", MODULES["harness.cli"])}
    assert "harness.cli.run" in cli and "harness.proc.signals" in cli
