"""The CLI starts light: printing a command's help imports none of vLLM, LoadGen, torch, MLflow,
numpy, transformers, nor any of the SUT's modules but its import-free vocabularies.

A fresh interpreter per case (this process has long imported everything), the command line
built and `--help` printed as a user gets it, and what is in `sys.modules` afterwards read back.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

HEAVY = ("vllm", "mlperf_loadgen", "torch", "mlflow", "numpy", "transformers", "ray", "psutil")
# The SUT's modules the CLI may name at start-up: the choices it offers (routing policies, front
# ends) and the one way to stop a process. Loading each imports only the standard library
# (checked below).
SUT_LEAVES = frozenset({"sut", "sut.frontend", "sut.routing", "sut.reaper"})

_PROBE = """
import json, sys
from harness.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stdout.flush()
sys.stderr.write("\\nMODULES " + json.dumps(sorted(sys.modules)) + "\\n")
"""


def _modules_after(*argv: str) -> tuple[set[str], str]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    marker = [line for line in proc.stderr.splitlines() if line.startswith("MODULES ")]
    assert marker, f"the probe did not finish: {proc.stderr[-2000:]}"
    return set(json.loads(marker[-1][len("MODULES ") :])), proc.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ("--help",),
        ("run", "--help"),
        ("calibrate", "--help"),
        ("sweep", "--help"),
        ("evaluate", "--help"),
    ],
    ids=lambda argv: " ".join(argv),
)
def test_help_imports_nothing_heavy(argv: tuple[str, ...]) -> None:
    modules, out = _modules_after(*argv)
    assert "usage: mlperf-vllm" in out  # the help was printed, not an error
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert not heavy, f"`mlperf-vllm {' '.join(argv)}` imported {heavy[:10]}"
    sut = sorted(m for m in modules if m.split(".")[0] == "sut" and m not in SUT_LEAVES)
    assert not sut, f"`mlperf-vllm {' '.join(argv)}` imported the SUT's {sut}"


@pytest.mark.parametrize("module", sorted(SUT_LEAVES - {"sut"}))
def test_sut_leaves_import_only_the_standard_library(module: str) -> None:
    path = REPO / (module.replace(".", "/") + ".py")
    tree = ast.parse(path.read_text(), str(path))
    names = [
        alias.name if isinstance(node, ast.Import) else (node.module or "")
        for node in tree.body  # what loading it imports (a function may import more when called)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    outside = [n for n in names if n.split(".")[0] not in sys.stdlib_module_names]
    assert not outside, f"{module} imports {outside}: the CLI loads it to print --help"
    assert (REPO / "sut" / "__init__.py").read_text().strip() == ""
