"""The test suite's own rules: each module that starts an engine (marked e2e) states its time
budget in its docstring, which `make test` orders its groups by (conftest)."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
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


def test_a_group_runs_on_one_worker(tmp_path):
    """The pinned pytest and pytest-xdist keep a module marked e2e on one worker, through this
    suite's own grouping hook: pytest 9.2 stores a test's id where xdist 3.8 cannot append its
    `@group` suffix, and then every test went to whichever worker was free, each worker making
    the session's shared runs again (about three minutes of a `make test`)."""
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    e2e: x\n    mlflow: x\n")
    tests = "".join(f"def test_{n}():\n    time.sleep(0.2)\n\n" for n in "abcdef")
    body = f"import time\nimport pytest\n\npytestmark = pytest.mark.e2e\n\n{tests}"
    (tmp_path / "test_grouped.py").write_text(body)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-n", "2", "--dist", "loadgroup"]
        + ["-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    ran = re.findall(r"\[(gw\d)\] \[\s*\d+%\] PASSED (\S+)", proc.stdout)
    assert len(ran) == 6, proc.stdout[-3000:]
    assert len({w for w, _ in ran}) == 1, ran
    assert all(nodeid.endswith("@test_grouped") for _, nodeid in ran), ran
