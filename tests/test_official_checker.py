"""`check-submission --official INFERENCE_REPO`: the official MLCommons checker found in the
user's clone, run on the root for the round checked, its verdict shown and counted in the exit
code; without the flag, the command to run it is printed. No engine starts.

This machine has no clone of mlcommons/inference (and no network): the routing is tested with a
stand-in script at the checker's path that records how it was called; the real checker runs in
test_package_e2e on a packaged CPU run when MLPERF_INFERENCE_REPO names a clone.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import cli

STAND_IN = """import json, sys
from pathlib import Path
Path(sys.argv[0]).with_name("called.json").write_text(json.dumps(sys.argv[1:]))
print("INFO:main:Results x 1")
print("ERROR:main:stand-in error line")
print("ERROR:main:SUMMARY: submission has errors" if {fail} else "INFO:main:SUMMARY: submission looks OK")
sys.exit(1 if {fail} else 0)
"""


def _clone(tmp_path: Path, fail: bool) -> Path:
    repo = tmp_path / "inference"
    script = repo / "tools" / "submission" / "submission_checker" / "main.py"
    script.parent.mkdir(parents=True)
    script.write_text(STAND_IN.format(fail=fail))
    return repo


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "submission"
    (root / "closed" / "MyOrg" / "systems").mkdir(parents=True)
    return root


def test_without_a_clone_the_command_is_printed(tmp_path):
    root = _root(tmp_path)
    proc = cli("check-submission", str(root), "--round", "v6.1", timeout=120)
    assert proc.returncode == 3  # an empty tree fails our own rules
    (line,) = [ln for ln in proc.stdout.splitlines() if "official MLCommons checker" in ln]
    assert "INFERENCE_REPO/tools/submission/submission_checker/main.py" in line
    assert f"--input {root} --version v6.1 --submitter MyOrg" in line


def test_a_folder_that_is_no_clone_is_one_error_line(tmp_path):
    root = _root(tmp_path)
    proc = cli("check-submission", str(root), "--official", str(tmp_path / "nope"), timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: --official") and "git clone" in line


def test_the_checker_runs_on_the_root_for_the_round_and_its_verdict_counts(tmp_path):
    root = _root(tmp_path)
    for fail in (True, False):
        repo = _clone(tmp_path / str(fail), fail)
        proc = cli("check-submission", str(root), "--official", str(repo), timeout=120)
        assert proc.returncode == 3, proc.stderr  # our rules fail the empty tree either way
        called = json.loads((repo / "tools/submission/submission_checker/called.json").read_text())
        assert called[:6] == ["--input", str(root.resolve()), "--version", "v6.1",
                              "--submitter", "MyOrg"]  # fmt: skip
        assert called[6] == "--csv" and not Path(called[7]).exists()  # aside, and removed
        assert not any(p.name == "summary.csv" for p in root.rglob("*"))
        verdict = "FAIL (exit 1)" if fail else "PASS (no errors)"
        assert f"official checker: {verdict}: {sys.executable}" in proc.stdout
        assert "stand-in error line" in proc.stdout
