"""The import rules, read from the source with `ast` (nothing is imported or run).

Data flows one way: dataset -> harness.datasets -> sut -> LoadGen logs -> harness.run /
evaluation -> harness.tracking. So:
- `sut` imports neither `harness` nor `evaluation`;
- `evaluation` imports no `sut`, and of `harness` only the shared top-level modules;
- inside `harness`, each folder is a layer and imports only the layers below it:
  shared (benchmarks, datasets, errors, files, resources, proc/) < run/ < calibrate/ (trials on
  one engine, the searches and their record) < tracking/, submission/, sweep/, assets/ < cli/.
  calibrate/ may use the SUT, as its trials drive it; sweep/ reads calibration.json through it.
  run/ holds three rooms, each importing only those below it: record/ (what a run leaves
  behind: it imports no SUT) < setup/ (what a run is, checked before the engine starts) <
  execute/ (how it runs). The run layer never imports submission (the CLI hands the runner the preflight), and nothing
  outside cli/ imports the CLI;
- no import cycle among modules, counting every import: at module level, inside functions and
  under TYPE_CHECKING (a lazy import still ties the two modules together);
- the CLI turns its flags into typed requests and hands those down: no module below it imports
  argparse or reads an argparse namespace (`args.x`, `getattr(args, ...)`, a `Namespace`
  parameter). sut/engine.py is the one exception: it parses vLLM's own engine flags with
  vLLM's parser, which are engine flags, not the CLI's.
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
    "harness.folder_lock",
    "harness.resources",
    "harness.proc",
)
RUN = ("harness.run",)
RECORD = ("harness.run.record",)
SETUP = (*RECORD, "harness.run.setup")
EXECUTE = (*SETUP, "harness.run.execute")
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
    "harness.folder_lock": SHARED,
    "harness.resources": SHARED,
    # the one way processes are stopped, shared with the SUT's reaper (it imports nothing)
    "harness.proc": (*SHARED, "sut.reaper"),
    "harness.run": (*SHARED,),
    "harness.run.record": (*SHARED, *RECORD),
    "harness.run.setup": (*SHARED, *SETUP, "sut", "evaluation"),
    "harness.run.execute": (*SHARED, *EXECUTE, "sut", "evaluation"),
    "harness.calibrate": (*SHARED, *RUN, "harness.calibrate", "sut"),
    "harness.tracking": (*SHARED, *RUN, "harness.tracking"),
    "harness.submission": (*SHARED, *RUN, "harness.submission", "evaluation"),
    "harness.sweep": (
        *SHARED,
        *RUN,
        "harness.calibrate",
        "harness.tracking",
        "harness.sweep",
        "sut",
    ),
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


def _imports(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import of this project's code, wherever it is."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"

    def visit(node: ast.AST) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, child.lineno
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
                        child.lineno,
                    )
            else:  # function bodies and TYPE_CHECKING blocks included
                yield from visit(child)

    for name, line in visit(tree):
        if name.split(".")[0] in PACKAGES:
            yield name, line


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
        for name, line in _imports(module, MODULES[module])
        if not _within(name, allowed)
    ]
    assert not bad, "; ".join(bad)


def test_nothing_outside_the_cli_imports_it() -> None:
    bad = [
        f"{MODULES[m].relative_to(REPO)}:{line} imports {name}"
        for m in MODULES
        if not _within(m, ("harness.cli",))
        for name, line in _imports(m, MODULES[m])
        if _within(name, ("harness.cli",))
    ]
    assert not bad, "; ".join(bad)


# vLLM's own engine-flag parser (engine flags, the ones `vllm serve` takes): not the CLI's.
READS_VLLM_FLAGS = ("sut.engine",)


def _namespace_reads(path: Path) -> Iterator[tuple[int, str]]:
    """(line, what) for every sign of an argparse namespace in a module: argparse imported,
    a `Namespace` annotation, or attributes of `args` read (`args.x`, `getattr(args, ...)`)."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names):
            yield node.lineno, "imports argparse"
        elif isinstance(node, ast.ImportFrom) and node.module == "argparse":
            yield node.lineno, "imports from argparse"
        elif isinstance(node, ast.arg) and node.annotation is not None:
            if "Namespace" in ast.unparse(node.annotation):
                yield node.lineno, f"takes {node.arg}: {ast.unparse(node.annotation)}"
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "args":
                yield node.lineno, f"reads args.{node.attr}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            first = node.args[0] if node.args else None
            if (
                node.func.id in ("getattr", "hasattr", "vars")
                and isinstance(first, ast.Name)
                and first.id == "args"
            ):
                yield node.lineno, f"reads args through {node.func.id}()"


def test_no_module_below_the_cli_reads_its_namespace() -> None:
    bad = [
        f"{MODULES[m].relative_to(REPO)}:{line} {what}"
        for m in MODULES
        if not _within(m, ("harness.cli", *READS_VLLM_FLAGS))
        for line, what in _namespace_reads(MODULES[m])
    ]
    assert not bad, "; ".join(bad)


def test_the_namespace_check_sees_what_tracking_once_did(tmp_path) -> None:
    old = tmp_path / "store.py"
    old.write_text(
        "from typing import Any\n\ndef resolve_tracking(args: Any = None):\n"
        "    uri = getattr(args, 'mlflow_uri', None)\n    return args.experiment, uri\n\n"
        "def f(ns: 'argparse.Namespace'):\n    import argparse\n"
    )
    found = sorted(what for _, what in _namespace_reads(old))
    assert found == [
        "imports argparse",
        "reads args through getattr()",
        "reads args.experiment",
        "takes ns: 'argparse.Namespace'",
    ]


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` (module -> modules it imports), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n) :] + [n]
            if n not in state and (found := visit(n)):
                return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_cycles() -> None:
    graph = {
        m: {name for name, _ in _imports(m, MODULES[m]) if name in MODULES and name != m}
        for m in MODULES
    }
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_a_lazy_or_type_checking_import_back_is_a_cycle(tmp_path) -> None:
    """What the sweep's reports once did: a TYPE_CHECKING import of the module importing them."""
    report = tmp_path / "report.py"
    report.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from harness.sweep.execute "
        "import Sweep\n\ndef f():\n    import harness.run.execute.runner\n"
    )
    found = {name for name, _ in _imports("harness.sweep.report", report)}
    assert {"harness.sweep.execute", "harness.run.execute.runner"} <= found
    graph = {"harness.sweep.execute": {"harness.sweep.report"}, "harness.sweep.report": found}
    assert _cycle(graph) is not None


def test_the_checker_sees_the_known_edges() -> None:
    """The rules above only mean something if the reader finds imports: spot-check a few."""
    runner = {
        n for n, _ in _imports("harness.run.execute.runner", MODULES["harness.run.execute.runner"])
    }
    assert {"harness.run.record.result", "harness.run.execute.session", "evaluation"} <= runner
    session = {
        n
        for n, _ in _imports("harness.run.execute.session", MODULES["harness.run.execute.session"])
    }
    assert "sut.engine" in session  # the session, not the runner, reaches the engine side
    cli = {n for n, _ in _imports("harness.cli", MODULES["harness.cli"])}
    assert "harness.cli.run" in cli and "harness.proc.signals" in cli
