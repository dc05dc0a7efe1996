"""One repeat of a sweep config, in a child process: an `mlperf-vllm run` (the figure is its
tokens/s) or, for a Server / Interactive capacity sweep, an `mlperf-vllm calibrate` search on the
config's one engine (the figure is the highest target that search passed by the sustained rule:
p99s within the limits, early stopping where judgeable, the engine keeping up).

A calibration's trials are short LoadGen tests, not a run of the submission's length: a capacity
repeat's validity is CAPACITY_VALIDITY, never "VALID", so no capacity row is called safe to ship.
The target a submitter ships comes from `mlperf-vllm calibrate --confirm` on the chosen config.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from harness.calibrate.record import CALIBRATION_FILE, CalibrationRecord
from harness.run.execute.child import ChildOutcome, ChildRun, failure_line, run_in_child
from harness.run.record.result import RunResult
from harness.run.setup.spec import RunSpec
from harness.sweep.plan import REPEAT_FILE, ConfigSpec, Plan
from harness.sweep.stats import RepeatOutcome

FIGURES = ("tokens", "capacity")
CAPACITY_VALIDITY = "sustained, not confirmed"


def _recorded(result: RunResult, name: str) -> Any:
    """A field as the run recorded it; None when its result.json does not hold it."""
    return getattr(result, name) if result.has(name) else None


def _fingerprint(result: RunResult) -> dict[str, Any]:
    """Everything besides the engine args that must be equal across the configs of a sweep."""
    perf = result.performance or {}
    return {
        "benchmark": _recorded(result, "benchmark"),
        "scenario": _recorded(result, "scenario"),
        "model": _recorded(result, "model"),
        "dataset_sha256": _recorded(result, "dataset_sha256"),
        "user_conf": _recorded(result, "user_conf"),
        "sampling": _recorded(result, "sampling"),
        # SUT options (offline order, warm-up); absent before they were recorded
        **({"sut_options": result.sut_options} if result.has("sut_options") else {}),
        "loadgen": {
            k: v for k, v in (perf.get("settings") or {}).items() if k.startswith("effective_")
        },
    }


def repeat_outcome(ran: ChildOutcome) -> RepeatOutcome:
    """A repeat's outcome from its child run: result.json, and the log where it failed."""
    result = ran.result or RunResult(loaded_keys=frozenset())
    perf = result.performance or {}
    acc = result.accuracy or {}
    accuracy = acc.get("verdict")
    if accuracy is None and acc.get("evaluation_error"):
        accuracy = f"error: {acc['evaluation_error']}"
    outcome = RepeatOutcome(
        status="ok",
        tokens_per_second=perf.get("tokens_per_second"),
        validity=perf.get("validity"),
        accuracy=accuracy,
        engine_args=dict(result.engine_args or {}),
        resolved=dict(result.engine_resolved_args or {}),
        fingerprint=_fingerprint(result),
        env_vars=_recorded(result, "env_vars"),
        output=str(ran.child.output),
        wall_s=ran.wall_s,
    )
    if not ran.ok or not perf:
        outcome.status = "failed"
        outcome.error = ran.error or failure_line(ran.log_text(), result.error)
    return outcome


def child_run(
    plan: Plan,
    spec: ConfigSpec,
    out: Path,
    mode: str,
    timeout_s: float | None = None,
    *,
    price_per_hour: float | None = None,
    stall_timeout_s: float | None = None,
    allow_pickle: bool = False,
) -> ChildRun:
    """The `mlperf-vllm run` of one repeat of a config: the plan's settings, the config's
    engine arguments, SUT options (a partial RunSpec over the plan's) and environment (and
    `--allow-pickle` when the sweep got it: a pickled dataset loads only with it)."""
    env = dict(spec.env)
    nltk_data = env.get("NLTK_DATA", os.environ.get("NLTK_DATA"))
    given: dict[str, Any] = {k: RunSpec.parse_value(k, v) for k, v in spec.sut}
    if stall_timeout_s is not None:  # None: the run's default; 0: never
        given["stall_timeout_s"] = stall_timeout_s or None
    run = RunSpec(
        benchmark=plan.benchmark,
        scenario=plan.scenario,
        mode=mode,
        model=plan.model,
        dataset=plan.dataset,
        output=out,
        user_conf=plan.user_conf,
        max_tokens=plan.max_tokens,
        ignore_eos=plan.ignore_eos,
        output_lengths=plan.output_lengths,
        nltk_data=Path(nltk_data) if nltk_data else None,
        price_per_hour=price_per_hour,
        engine_args=spec.engine_args,
        allow_pickle=allow_pickle,
        **given,
    )
    return ChildRun(
        run,
        env=spec.env,
        timeout_s=timeout_s,
        timeout_flag="--config-timeout",
    )


def run_repeat(
    plan: Plan,
    spec: ConfigSpec,
    out: Path,
    mode: str,
    timeout_s: float | None = None,
    *,
    price_per_hour: float | None = None,
    stall_timeout_s: float | None = None,
    allow_pickle: bool = False,
) -> RepeatOutcome:
    """One repeat as a child run (harness.run.execute.child); its output goes to OUT/run.log."""
    (out / REPEAT_FILE).unlink(missing_ok=True)
    child = child_run(
        plan,
        spec,
        out,
        mode,
        timeout_s,
        price_per_hour=price_per_hour,
        stall_timeout_s=stall_timeout_s,
        allow_pickle=allow_pickle,
    )
    return repeat_outcome(run_in_child(child))


def capacity_outcome(ran: ChildOutcome) -> RepeatOutcome:
    """A capacity repeat's outcome from its `calibrate` child: calibration.json's highest
    passing target, and the engine it ran as the calibration recorded it."""
    path = ran.child.output / CALIBRATION_FILE
    try:
        record = CalibrationRecord.read(path) if path.is_file() else None
    except ValueError:
        record = None
    run, best = (record.run or {}, record.highest_passing_qps) if record else ({}, None)
    result = RunResult.from_dict(run) if run else RunResult(loaded_keys=frozenset())
    outcome = RepeatOutcome(
        status="ok",
        capacity_qps=None if best is None else float(best),
        validity=CAPACITY_VALIDITY,
        engine_args=dict(result.engine_args or {}),
        resolved=dict(result.engine_resolved_args or {}),
        fingerprint=_fingerprint(result),
        env_vars=_recorded(result, "env_vars"),
        output=str(ran.child.output),
        wall_s=ran.wall_s,
    )
    if not ran.ok or best is None or not run:
        outcome.status = "failed"
        outcome.error = ran.error or f"calibrate left no passing target in {path}"
    return outcome


def run_capacity_repeat(
    plan: Plan,
    spec: ConfigSpec,
    out: Path,
    mode: str,
    timeout_s: float | None = None,
    *,
    calibrate_args: tuple[str, ...] = (),
    price_per_hour: float | None = None,
    stall_timeout_s: float | None = None,
    allow_pickle: bool = False,
) -> RepeatOutcome:
    """One capacity repeat: `mlperf-vllm calibrate` (no confirmation) with the config's run
    flags, then, when `mode` is "both", an accuracy run of the same config in OUT/accuracy."""
    (out / REPEAT_FILE).unlink(missing_ok=True)
    child = child_run(
        plan,
        spec,
        out,
        "performance",
        timeout_s,
        stall_timeout_s=stall_timeout_s,
        allow_pickle=allow_pickle,
    )
    # The capacity is the search's highest pass: no hold trials at a written target (a plan's
    # calibrate flags may still ask for them).
    args = ("--hold-trials", "0", *calibrate_args)
    child = dataclasses.replace(child, command="calibrate", command_args=args)
    outcome = capacity_outcome(run_in_child(child))
    if mode == "both" and outcome.status == "ok":
        acc_child = child_run(
            plan,
            spec,
            out / "accuracy",
            "accuracy",
            timeout_s,
            price_per_hour=price_per_hour,
            stall_timeout_s=stall_timeout_s,
            allow_pickle=allow_pickle,
        )
        ran = run_in_child(acc_child)
        # a FAIL verdict ends `run` with a nonzero status: the verdict is still the answer
        verdict = ((ran.result.accuracy or {}) if ran.result else {}).get("verdict")
        outcome.accuracy = verdict or f"error: {ran.error or 'no accuracy verdict'}"
    return outcome
