"""`mlperf-vllm calibrate`: measure this machine, write the target QPS into a user.conf."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli.common import EXIT_OK, add_command
from harness.cli.engine_line import add_engine_line_argument
from harness.cli.flags import (
    add_benchmark_argument,
    add_mlflow_arguments,
    request_from_flags,
    tracking_config,
)

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
    # One MLflow run sums the calibration up (its measurement runs log nothing of their own).
    add_mlflow_arguments(cal)


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
    from harness import tracking
    from harness.calibrate.calibrate import calibrate
    from harness.errors import UsageError
    from harness.folder_lock import one_writer

    req = calibrate_request(args, extra)
    cfg = tracking_config(args)
    if cfg.uri.startswith(("http://", "https://")):
        tracking.check_reachable(cfg)  # a server: before any engine starts (a local store is
        # made when the calibration is logged, so bad input leaves no mlflow.db behind)
    from harness.proc.children import warn_if_left

    try:
        with one_writer(args.output, "--output"):  # its runs lock their own subfolders
            failure: UsageError | None = None
            try:
                calibrate(req)
            except UsageError as exc:
                failure = exc
            # A search or confirmation that ran and failed is logged too (calibration.json
            # says what was tried); bad input that stopped it before any measurement is not.
            if failure is None or (args.output / "calibration.json").is_file():
                log_calibration(cfg, req, args.output, None if failure is None else str(failure))
            if failure is not None:
                raise failure
    finally:
        warn_if_left("the calibration's trials")
    return EXIT_OK


def log_calibration(cfg, req: CalibrateRequest, out: Path, failure: str | None) -> None:
    """One MLflow run for the calibration: its request as params, the Offline ceiling, each
    trial (step = its order), the highest passing, written and confirmed targets as metrics,
    user.conf and calibration.json as files, and a verdict tag."""
    import json

    from harness import tracking

    record_path, conf = out / "calibration.json", out / "user.conf"
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    target = None
    if conf.is_file():
        for line in conf.read_text().splitlines():
            if not line.startswith("#") and ".target_qps = " in line:
                target = float(line.split("=", 1)[1])
    confirmed = record.get("confirmed_qps")
    verdict = (
        "FAILED"
        if failure
        else ("CONFIRMED" if confirmed is not None else "NOT CONFIRMED")
        if req.scenario != "Offline"
        else "WRITTEN"
    )
    params = {
        k: getattr(req, k)
        for k in (
            "benchmark",
            "scenario",
            "model",
            "dataset",
            "margin",
            "measure_samples",
            "backoff",
            "trial_s",
            "trials",
            "confirm",
            "confirm_runs",
            "confirm_passes",
            "min_duration_s",
        )
    }
    name = f"calibrate {req.benchmark} {req.scenario}"
    with tracking.tracked_run(cfg, name, params=params, discard_on=()) as trk:
        trk.set_tags({"calibrate.verdict": verdict, "calibrate.error": failure})
        trk.log_metrics(
            {
                "calibrate.target_qps": target,
                "calibrate.offline_samples_per_second": record.get("offline_samples_per_second"),
                "calibrate.highest_passing_qps": record.get("highest_passing_qps"),
                "calibrate.written_qps": record.get("written_qps"),
                "calibrate.confirmed_qps": confirmed,
            }
        )
        for step, trial in enumerate(record.get("trials") or []):
            trk.log_metrics(
                {
                    "trial.target_qps": trial.get("target_qps"),
                    "trial.passed": 1.0 if trial.get("passed") else 0.0,
                    "trial.ttft_p99_ms": trial.get("ttft_p99_ms"),
                    "trial.tpot_p99_ms": trial.get("tpot_p99_ms"),
                    "trial.completed_to_issued": (trial.get("sustained") or {}).get(
                        "completed_to_issued"
                    ),
                },
                step=step,
            )
        for step, run in enumerate(record.get("confirmations") or []):
            trk.log_metrics(
                {
                    "confirm.target_qps": run.get("target_qps"),
                    "confirm.held": 1.0 if run.get("held") else 0.0,
                    "confirm.ttft_p99_ms": run.get("ttft_p99_ms"),
                    "confirm.tpot_p99_ms": run.get("tpot_p99_ms"),
                },
                step=step,
            )
        trk.log_artifact(conf)
        trk.log_artifact(record_path)
