"""The one door for child runs (harness.run.execute.child), without an engine: a child runs its RunSpec
(tests/test_run_spec.py reads every field back), a calibrate child hands its run flags to each
trial, and a child that fails or runs past its limit comes back as one line. Real child processes; an engine-starting child runs in test_calibrate_e2e.py and
test_sweep_e2e.py."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.run.execute.child import ChildRun, run_in_child
from harness.run.record.result import RESULT_FILE
from harness.run.setup.spec import RunSpec


def _spec(tmp_path: Path, **fields: Any) -> RunSpec:
    values: dict[str, Any] = {
        "benchmark": "llama3_1-8b",
        "scenario": "Offline",
        "mode": "performance",
        "model": tmp_path / "model",
        "dataset": tmp_path / "data.json",
        "output": tmp_path / "out",
    }
    return RunSpec(**{**values, **fields})


def test_a_child_runs_its_spec_in_a_folder_and_terminal_its_parent_owns(tmp_path):
    from harness.cli import build_parser
    from harness.cli.run import run_spec

    spec = _spec(tmp_path, mode="both", warmup_samples=4, engine_flags=("--max-num-seqs", "8"))
    child = ChildRun(spec)
    argv = child.argv()
    assert argv[1:4] == ["-m", "harness.cli", "run"]
    args, extra = build_parser().parse_known_args(argv[3:])
    # the parent owns the folder (a retry replaces its own run) and the terminal; a child
    # logs nothing to MLflow (its caller does, if anyone)
    assert run_spec(args, extra) == replace(
        spec, overwrite=True, progress=False, accuracy_level="99"
    )
    assert args.no_mlflow
    assert child.describe().startswith("mlperf-vllm run --benchmark llama3_1-8b ")


def test_a_calibrate_child_hands_its_run_flags_to_every_trial(tmp_path):
    """A capacity sweep's repeat is `mlperf-vllm calibrate` with a run's flags: calibrate takes
    its own (benchmark, data, output, --trials) and each trial runs with the rest."""
    from harness.cli import build_parser
    from harness.cli.calibrate import calibrate_request

    (tmp_path / "user.conf").write_text("")
    spec = _spec(
        tmp_path,
        scenario="Server",
        user_conf=tmp_path / "user.conf",
        max_tokens=16,
        ignore_eos=True,
        warmup_samples=4,
        engine_args=("max_num_seqs=8",),
    )
    child = ChildRun(spec, command="calibrate", command_args=("--trials", "3", "--trial-s", "7.5"))
    argv = child.argv()
    assert argv[1:4] == ["-m", "harness.cli", "calibrate"]
    args, extra = build_parser().parse_known_args(argv[3:])
    assert (args.command, args.scenario, args.trials, args.trial_s) == (
        "calibrate",
        "Server",
        3,
        7.5,
    )
    assert args.output == tmp_path / "out" and args.user_conf == tmp_path / "user.conf"
    trial = calibrate_request(args, extra).run
    assert trial is not None
    assert trial == replace(
        spec,
        output=tmp_path / "out" / "trials",
        overwrite=True,
        progress=False,
        accuracy_level="99",
    )
    assert trial.engine_overrides["max_num_seqs"] == 8
    assert child.describe().startswith("mlperf-vllm calibrate --benchmark llama3_1-8b ")


def test_a_failed_child_comes_back_as_its_error_line(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    # an earlier attempt's result must not be read as this child's
    (out / RESULT_FILE).write_text(json.dumps({"status": "completed", "performance": {}}))
    child = ChildRun(
        _spec(tmp_path, model=tmp_path / "no-model", output=out),
        env=(("MLPERF_VLLM_CHILD_TEST", "1"),),
    )
    ran = run_in_child(child)
    assert (ran.rc, ran.ok, ran.timed_out, ran.result) == (2, False, False, None)
    assert ran.error is not None
    assert ran.error.startswith(f"model {tmp_path / 'no-model'} does not exist: pass --model")
    log = ran.log_text()
    assert log.startswith("$ ") and "harness.cli run --benchmark llama3_1-8b" in log
    assert "# env: MLPERF_VLLM_CHILD_TEST=1" in log and "Traceback" not in log


def test_a_child_past_its_limit_is_ended_and_says_so(tmp_path):
    child = ChildRun(
        _spec(tmp_path),
        timeout_s=0.05,
        timeout_flag="--trial-timeout",
    )
    ran = run_in_child(child)
    assert ran.timed_out and not ran.ok and ran.result is None
    assert ran.error == "TimeoutError: the run ran past --trial-timeout 0.05 s"
    assert ran.log_text().rstrip().endswith(ran.error)
    assert ran.wall_s < 30


def test_only_the_door_builds_child_runs():
    """Child runs are started in one place: nothing else spells the `run` command's argv."""
    repo = Path(__file__).resolve().parent.parent
    starts = re.compile(r'"harness\.cli", "run"|(?<!def )\brun_child\(')
    spelled = [
        str(p.relative_to(repo))
        for package in ("harness", "sut", "evaluation", "bench")
        for p in sorted((repo / package).rglob("*.py"))
        if starts.search(p.read_text())
    ]
    assert spelled == ["harness/run/execute/child.py"], spelled
