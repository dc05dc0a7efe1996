"""One measurement of a calibration as a child run: `mlperf-vllm run --mode performance` in its
own process (the Offline measurement, each confirmation run)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.calibrate.request import CalibrateRequest
from harness.errors import UsageError
from harness.run.execute.child import ChildRun, run_in_child


def run_once(
    req: CalibrateRequest, scenario: str, conf: Path, out: Path, label: str = ""
) -> dict[str, Any]:
    """One `mlperf-vllm run --mode performance` in its own process; its performance result."""
    if req.run is None:
        raise UsageError("calibrate needs the run's flags (internal: no run spec)")
    spec = replace(req.run, scenario=scenario, mode="performance", output=out, user_conf=conf)
    child = ChildRun(
        spec,
        timeout_s=req.trial_timeout_s,
        timeout_flag="--trial-timeout",
    )
    print(f"calibrate: {label}{child.describe()}", flush=True)
    outcome = run_in_child(child)
    if not outcome.ok:
        raise UsageError(
            f"the calibration run failed (exit {outcome.rc}): {outcome.error} (logs in {out})"
        )
    if outcome.result is None or not outcome.result.performance:
        raise UsageError(f"the calibration run in {out} has no performance result")
    return outcome.result.performance
