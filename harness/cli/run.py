"""`mlperf-vllm run`: one LoadGen run (performance, accuracy or both); its arguments, vLLM's
engine flags among them."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from harness.cli.common import EXIT_ERROR, add_command, strict_code
from harness.cli.engine_line import add_engine_line_argument
from harness.cli.flags import (
    Parser,
    accuracy_level_of,
    add_accuracy_level_argument,
    add_benchmark_argument,
    add_mlflow_arguments,
    add_round_argument,
    add_run_name_arguments,
    choose_round_for,
    tracking_config,
)
from harness.run.setup.spec import RunSpec


def add_parser(sub) -> None:
    run = add_command(
        sub,
        "run",
        cmd_run,
        takes_extra=True,
        starts_processes=True,
        help="one LoadGen run (performance, accuracy or both)",
        description="Unrecognised --flags are parsed as vLLM engine flags "
        "(the ones `vllm serve` takes), e.g. --max-num-seqs 256.",
    )
    _add_run_arguments(run)


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    groups = RunSpec.add_arguments(p, COMMON_FLAGS)
    add_engine_line_argument(groups["engine"])
    out = groups["output"]
    out.add_argument("--strict", action="store_true", help="exit 3 when INVALID or accuracy FAIL")
    add_mlflow_arguments(out)
    add_run_name_arguments(out)


# The run flags several commands spell alike, added by the CLI's helpers for them.
COMMON_FLAGS: dict[str, Callable[[argparse.ArgumentParser], None]] = {
    "benchmark": add_benchmark_argument,
    "accuracy_level": add_accuracy_level_argument,
    "round": add_round_argument,
}


def run_spec(args: argparse.Namespace, extra: list[str]) -> RunSpec:
    """The run's flags as its RunSpec; `extra`: the flags `run` does not know (engine flags).
    The accuracy level is resolved here, by the submission round."""
    options = {**vars(args), "accuracy_level": accuracy_level_of(args, args.benchmark)}
    return RunSpec.from_options(options, extra)


def partial_run_spec(base: RunSpec, flags: list[str]) -> RunSpec:
    """`base` with `run` flags a command does not know itself applied over it (calibrate
    hands those to each of its runs); the ones `run` does not know either are engine flags."""
    p = Parser(prog="mlperf-vllm run", add_help=False)
    owned = {"benchmark"}  # the command's own flag
    RunSpec.add_arguments(p, {k: v for k, v in COMMON_FLAGS.items() if k not in owned}, base=base)
    args, extra = p.parse_known_args(flags)
    options = {**vars(args), "accuracy_level": accuracy_level_of(args, base.benchmark)}
    return RunSpec.from_options(options, [*base.engine_flags, *extra])


def cmd_run(args: argparse.Namespace, extra: list[str]) -> int:
    from harness import tracking
    from harness.folder_lock import one_writer
    from harness.run.execute.runner import run
    from harness.run.record.summary import render_result
    from harness.run.setup.prepare import prepare
    from harness.submission.compliance import verify_test06_run
    from harness.submission.preflight import settings_check

    if args.submission or args.round:
        print(f"{choose_round_for(args, args.benchmark).note}", flush=True)

    req = run_spec(args, extra)
    with one_writer(req.output, "--output"):  # a second writer of the folder stops here
        prepared = prepare(req)  # bad input stops here: no MLflow run, no mlflow.db
        cfg = tracking_config(args)
        tracking.check_reachable(cfg)  # before any engine starts
        name = args.run_name or tracking.run_name(req, args.output)
        with tracking.tracked_run(cfg, name, tags=args.tags, output_dir=args.output) as trk:
            outcome = run(
                req,
                prepared=prepared,
                check_settings=settings_check,
                check_test06=verify_test06_run,
            )
            print(render_result(outcome.result), flush=True)
            print(f"results: {outcome.path}")
    if trk.logging_error:
        return EXIT_ERROR
    return strict_code(
        args, outcome.result.performance, outcome.result.accuracy, outcome.result.test06
    )
