"""The one door for child runs (harness.run.child), without an engine: the flags it writes are
the ones `mlperf-vllm run` reads, and a child that fails or runs past its limit comes back as
one line. Real child processes; an engine-starting child runs in test_calibrate_e2e.py and
test_sweep_e2e.py."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from harness.run.child import ChildRun, run_in_child
from harness.run.result import RESULT_FILE

# ChildRun fields that are not `run` flags: how the child is started, not what it runs.
NOT_FLAGS = {"extra_args", "env", "timeout_s", "timeout_flag", "command"}


def test_the_flags_it_writes_are_the_ones_run_reads(tmp_path):
    from harness.cli import build_parser

    child = ChildRun(
        benchmark="llama3_1-8b",
        scenario="Offline",
        mode="both",
        model=tmp_path / "model",
        dataset=tmp_path / "data.json",
        output=tmp_path / "out",
        user_conf=tmp_path / "user.conf",
        max_tokens=16,
        ignore_eos=True,
        output_lengths="tok_output_len",
        nltk_data=tmp_path / "nltk",
        stall_timeout_s=12.5,
        price_per_hour=3.5,
        offline_order="longest-first",
        warmup_samples=4,
        dp_routing="vllm",
        engine_args=("max_num_seqs=8", "enforce_eager=true"),
        extra_args=("--max-num-batched-tokens", "512", "--allow-pickle"),
    )
    argv = child.argv()
    assert argv[1:4] == ["-m", "harness.cli", "run"]
    args, extra = build_parser().parse_known_args(argv[3:])
    read_back = {
        "benchmark": args.benchmark,
        "scenario": args.scenario,
        "mode": args.mode,
        "model": args.model,
        "dataset": args.dataset,
        "output": args.output,
        "user_conf": args.user_conf,
        "max_tokens": args.max_tokens,
        "ignore_eos": args.ignore_eos,
        "output_lengths": args.output_lengths,
        "nltk_data": args.nltk_data,
        "stall_timeout_s": args.stall_timeout,
        "price_per_hour": args.price_per_hour,
        "offline_order": args.offline_order,
        "warmup_samples": args.warmup_samples,
        "dp_routing": args.dp_routing,
        "engine_args": tuple(args.engine_arg),
    }
    # every field that is a flag is read back, so a new field cannot go unchecked
    assert set(read_back) == {f.name for f in dataclasses.fields(ChildRun)} - NOT_FLAGS
    assert read_back == {k: v for k, v in vars(child).items() if k in read_back}
    # a child logs nothing to MLflow and draws no progress bar; unknown flags are engine flags
    assert args.no_mlflow and args.no_progress and args.allow_pickle
    assert extra == ["--max-num-batched-tokens", "512"]
    assert child.describe().startswith("mlperf-vllm run --benchmark llama3_1-8b ")


def test_a_calibrate_child_hands_its_run_flags_to_every_trial(tmp_path):
    """A capacity sweep's repeat is `mlperf-vllm calibrate` with a run's flags: calibrate takes
    its own (benchmark, data, output, --trials) and each trial runs with the rest."""
    from harness.cli import build_parser
    from harness.cli.calibrate import calibrate_request

    (tmp_path / "user.conf").write_text("")
    child = ChildRun(
        benchmark="llama3_1-8b",
        scenario="Server",
        mode="performance",
        model=tmp_path / "model",
        dataset=tmp_path / "data.json",
        output=tmp_path / "out",
        user_conf=tmp_path / "user.conf",
        max_tokens=16,
        ignore_eos=True,
        warmup_samples=4,
        engine_args=("max_num_seqs=8",),
        extra_args=("--trials", "3", "--trial-s", "7.5"),
        command="calibrate",
    )
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
    trial = calibrate_request(args, extra).run_template
    assert trial is not None and trial.output == tmp_path / "out" / "trials"
    assert (trial.max_tokens, trial.ignore_eos, trial.warmup_samples) == (16, True, 4)
    assert trial.engine_overrides["max_num_seqs"] == 8 and trial.mode == "performance"
    assert child.describe().startswith("mlperf-vllm calibrate --benchmark llama3_1-8b ")


def test_a_failed_child_comes_back_as_its_error_line(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    # an earlier attempt's result must not be read as this child's
    (out / RESULT_FILE).write_text(json.dumps({"status": "completed", "performance": {}}))
    child = ChildRun(
        benchmark="llama3_1-8b",
        scenario="Offline",
        mode="performance",
        model=tmp_path / "no-model",
        dataset=tmp_path / "data.json",
        output=out,
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
        benchmark="llama3_1-8b",
        scenario="Offline",
        mode="performance",
        model=tmp_path / "m",
        dataset=tmp_path / "d.json",
        output=tmp_path / "out",
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
    assert spelled == ["harness/run/child.py"], spelled
