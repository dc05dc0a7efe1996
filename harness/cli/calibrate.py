"""`mlperf-vllm calibrate`: measure this machine, write the target QPS into a user.conf."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from harness.cli.common import EXIT_OK, add_command
from harness.cli.engine_line import add_engine_line_argument
from harness.cli.flags import add_benchmark_argument, request_from_flags

if TYPE_CHECKING:
    from harness.calibrate.request import CalibrateRequest


# Run options calibrate sets on each of its runs itself: given to calibrate, they are refused.
SET_BY_CALIBRATE = ("target_qps", "min_query_count")


def passed_run_flags() -> list[str]:
    """The `run` flags calibrate hands to each of its measurement runs: every run option but
    the ones calibrate names itself (the model, data, conf, --min-duration) or sets."""
    from harness.calibrate.request import CalibrateRequest
    from harness.run.setup.spec import RunSpec, declared_options

    own = {how.flag(name) for name, how in declared_options(CalibrateRequest)}
    return [
        how.flag(name)
        for name, how in RunSpec.options()
        if how.kind not in ("common", "rest")
        and how.flag(name) not in own
        and name not in SET_BY_CALIBRATE
    ]


def add_parser(sub) -> None:
    from harness.calibrate.request import CalibrateRequest
    from harness.run.setup.spec import add_declared_arguments

    cal = add_command(
        sub,
        "calibrate",
        cmd_calibrate,
        takes_extra=True,
        starts_processes=True,
        help="measure this machine, write the target QPS into a user.conf",
        description="Offline: a short measurement -> target_qps (offline_expected_qps) with a "
        "margin. Server/Interactive: short runs search the highest target_qps within "
        "the TTFT/TPOT limits. Unrecognised --flags go to each `run` (engine flags).",
        epilog="run flags handed to each measurement run (see `mlperf-vllm run --help`): "
        + ", ".join(passed_run_flags())
        + "; and vLLM's engine flags (the ones `vllm serve` takes), e.g. --max-num-seqs 256. "
        "Calibrate sets "
        + " and ".join("--" + n.replace("_", "-") for n in SET_BY_CALIBRATE)
        + " itself.",
    )
    add_benchmark_argument(cal)
    add_declared_arguments(CalibrateRequest, cal)  # each option declared once, in the request
    add_engine_line_argument(cal)


def calibrate_request(args: argparse.Namespace, extra: list[str]) -> CalibrateRequest:
    """The flags as calibrate's request; `extra`: the flags calibrate does not know, passed to
    each `run` (engine flags, --max-tokens)."""
    from harness.calibrate.request import CalibrateRequest
    from harness.cli.run import partial_run_spec
    from harness.errors import UsageError
    from harness.resources import benchmark_conf, resolve_user_path
    from harness.run.setup.spec import RunSpec

    set_here = ["--" + n.replace("_", "-") for n in SET_BY_CALIBRATE]
    owned = [f for f in extra if f.split("=")[0] in set_here]
    if owned:
        raise UsageError(
            f"calibrate sets each run's target rate and query count itself: drop {owned[0]} "
            "(--start-qps / --start-fraction choose the first trial, --min-duration the "
            "length of the run the conf is for)"
        )
    conf = resolve_user_path(args.user_conf)
    if conf is None:
        conf = benchmark_conf(args.benchmark, args.scenario)
    base = RunSpec(
        benchmark=args.benchmark,
        scenario=args.scenario,
        model=args.model,
        dataset=args.dataset,
        output=args.output / "trials",
        user_conf=conf,
        progress=False,
    )
    run = partial_run_spec(base, extra)
    return request_from_flags(CalibrateRequest, args, user_conf=conf, run=run)


def cmd_calibrate(args: argparse.Namespace, extra: list[str]) -> int:
    from harness.calibrate.calibrate import calibrate
    from harness.folder_lock import one_writer

    req = calibrate_request(args, extra)
    from harness.proc.children import warn_if_left

    try:
        with one_writer(args.output, "--output"):  # its runs lock their own subfolders
            calibrate(req)
    finally:
        warn_if_left("the calibration's trials")
    return EXIT_OK
