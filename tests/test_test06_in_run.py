"""`run --test06`: how its verdict shows in the result table and in --strict's exit code (the
run itself, on a real engine, is asserted in test_server_e2e and test_package_e2e)."""

from __future__ import annotations

import argparse

from harness.cli.common import EXIT_OK, EXIT_STRICT, strict_code
from harness.run.record.result import RunResult
from harness.run.record.summary import result_rows

LOG = "/runs/r/TEST06/performance"


def _row(test06) -> str:
    return dict(result_rows(RunResult(status="completed", test06=test06)))["TEST06"]


def test_the_result_table_says_what_test06_found():
    assert _row({"log_dir": LOG, "passed": True, "samples": 100}).startswith("PASS (100 samples")
    failed = _row({"log_dir": LOG, "passed": False, "samples": 100, "problems": ["eos: 3"]})
    assert failed.startswith("FAIL: eos: 3") and LOG in failed
    unverified = _row({"log_dir": LOG, "error": "cannot tell the model's EOS id"})
    assert unverified.startswith("ran, not verified: cannot tell the model's EOS id")
    assert "TEST06" not in dict(result_rows(RunResult(status="completed")))


def test_strict_fails_a_run_whose_test06_did_not_pass():
    strict = argparse.Namespace(strict=True)
    perf = {"validity": "VALID"}
    assert strict_code(strict, perf, None, {"passed": True}) == EXIT_OK
    assert strict_code(strict, perf, None, {"passed": False}) == EXIT_STRICT
    assert strict_code(strict, perf, None, {"error": "not verified"}) == EXIT_STRICT
    assert strict_code(strict, perf, None, None) == EXIT_OK
    assert strict_code(argparse.Namespace(strict=False), perf, None, {"passed": False}) == EXIT_OK
