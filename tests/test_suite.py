"""The test suite's own rules: each module that starts an engine (marked e2e) states its time
budget in its docstring, which `make test` orders its groups by (conftest)."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import BUDGET

TESTS = Path(__file__).resolve().parent


def test_every_e2e_module_states_its_time_budget():
    missing = []
    for path in sorted(TESTS.glob("test_*.py")):
        text = path.read_text()
        if path.name == Path(__file__).name or "pytest.mark.e2e" not in text:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if not BUDGET.search(doc):
            missing.append(path.name)
    assert not missing, f"no 'Time budget: N s' in the docstring of {missing}"
