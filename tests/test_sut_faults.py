"""Faults a real engine cannot be made to produce on demand, injected into both SUTs: each
LoadGen test (real LoadGen, in its own process, see tests/fault_sut.py) must end, with every
issued sample answered exactly once and the SUT's `error` naming the fault.

- an exception in `add_request` (Offline) and in `generate` (streaming),
- an exception in an engine step (Offline),
- an exception inside completion reporting (both) and first-token reporting (streaming),
- a step / stream that never returns: the stall watchdog fails the test;
- the same with no stall limit, and a process of the engine logging that a worker died (vLLM's
  executor's line): the test ends on that line, not on the engine core's minutes-long timeout.

Time budget: 30 s: eight LoadGen tests, no engine start.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.e2e

N_SAMPLES = 24  # tests/fault_sut.py
STALL_S = 2.0

CASES = {
    "offline-add-request": "add_request failed",
    "offline-step": "engine step failed",
    "offline-report": "complete_samples failed",
    "offline-stall": "StallError",
    "server-generate": "generate failed",
    "server-report": "complete_samples failed",
    "server-first-token": "complete_first_tokens failed",
    "server-stall": "StallError",
    "offline-worker-died": "RayWorkerProc rank=[2] died unexpectedly",
    "server-worker-died": "RayWorkerProc rank=[2] died unexpectedly",
}


def _fault_run(case: str, out: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.fault_sut", case, str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(REPO),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("FAULT_RESULT "))
    return json.loads(line[len("FAULT_RESULT ") :])


@pytest.mark.parametrize("case", list(CASES))
def test_fault_ends_the_test_with_every_sample_answered_once(case, tmp_path):
    report = _fault_run(case, tmp_path)
    assert CASES[case] in report["error"], report
    # LoadGen ended on its own: every sample was answered, none is left in the ledger.
    assert report["raised"] is None, report
    assert report["in_flight"] == 0, report
    entries = json.loads((tmp_path / "mlperf_log_accuracy.json").read_text())
    # Accuracy mode issues each sample once; LoadGen logs each answer it receives.
    assert sorted(e["qsl_idx"] for e in entries) == list(range(N_SAMPLES)), entries
    stats = report["stats"]
    assert stats["issued"] == stats["completed"] == N_SAMPLES, stats
    assert stats["failed_samples"] >= 1, stats  # the fault cost samples, answered empty
    empty = [e for e in entries if not e["data"]]
    assert len(empty) >= 1
    if case.endswith("stall"):
        assert STALL_S <= report["elapsed_s"] < STALL_S + 5, report
    elif case.endswith("worker-died"):
        assert 1.5 <= report["elapsed_s"] < 1.5 + 5, report  # tests/fault_sut.py DIED_AFTER_S
        assert "the engine lost a worker" in report["error"], report
        assert "died unexpectedly" in (tmp_path / "engine.log").read_text()
    else:
        assert report["elapsed_s"] < 10, report
