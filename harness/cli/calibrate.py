"""`mlperf-vllm calibrate`: measure this machine, write the target QPS into a user.conf."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from harness.benchmarks import scenario_name
from harness.cli.common import EXIT_OK
from harness.cli.flags import add_benchmark_argument, request_from_flags

if TYPE_CHECKING:
    from harness.calibrate.request import CalibrateRequest


def add_parser(sub) -> None:
    cal = sub.add_parser(
        "calibrate",
        help="measure this machine, write the target QPS into a user.conf",
        description="Offline: a short measurement -> target_qps (offline_expected_qps) with a "
        "margin. Server/Interactive: short runs search the highest target_qps within "
        "the TTFT/TPOT limits. Unrecognised --flags go to each `run` (engine flags).",
    )
    add_benchmark_argument(cal)
    cal.add_argument(
        "--scenario",
        required=True,
        type=scenario_name,
        choices=["Offline", "Server", "Interactive"],
        help="the scenario the conf is for",
    )
    cal.add_argument("--model", required=True, type=Path, help="local checkpoint folder")
    cal.add_argument(
        "--dataset",
        required=True,
        type=Path,
        help="preprocessed dataset (.json, .jsonl, .parquet, .pkl with --allow-pickle)",
    )
    cal.add_argument(
        "--output",
        required=True,
        type=Path,
        help="folder for the measurement runs and the written user.conf",
    )
    cal.add_argument(
        "--user-conf",
        type=Path,
        help="base conf to extend (default: user_confs/<benchmark>/<scenario>.conf)",
    )
    cal.add_argument(
        "--min-duration-s",
        type=float,
        default=600.0,
        help="min_duration of the run the conf is for (below 600: demo, marked "
        "NOT COMPLIANT in the conf)",
    )
    cal.add_argument(
        "--margin",
        type=float,
        default=1.25,
        help="Offline: expected QPS = measured samples/s x margin",
    )
    cal.add_argument(
        "--measure-samples",
        type=int,
        default=1000,
        help="Offline: samples in the measurement; enough to fill the batch many "
        "times (lower it for 405B: ~1 sample/s per GPU node)",
    )
    cal.add_argument(
        "--engine-line",
        metavar="LINES",
        help="the measured engine line for this benchmark and scenario, applied as if typed "
        "first (flags given here win): a folder of <benchmark>.<Scenario>.toml lines (e.g. "
        "user_confs/engines/h200), one such file, or a conf with `# engine` lines",
    )
    _add_search_flags(cal)
    _add_confirm_flags(cal)
    cal.add_argument(
        "--trial-timeout",
        type=float,
        metavar="S",
        dest="trial_timeout_s",
        help="seconds one measurement run may take before it is ended with its engine "
        "(default: no limit; each run's --stall-timeout still fails a stalled engine)",
    )


def _add_search_flags(p: argparse.ArgumentParser) -> None:
    """The Server / Interactive search: where it starts, how many trials, how long each."""
    p.add_argument(
        "--start-qps",
        type=float,
        default=None,
        help="Server: first trial QPS (default: --start-fraction x the same engine's Offline "
        "samples/s)",
    )
    p.add_argument(
        "--start-fraction",
        type=float,
        default=0.9,
        help="Server: without --start-qps, the first trial at this fraction of the same "
        "engine's Offline samples/s (~0.5 suits Interactive on a new layout)",
    )
    p.add_argument("--trials", type=int, default=6, help="Server: trial runs")
    p.add_argument(
        "--trial-s",
        type=float,
        default=None,
        help="Server: seconds per trial; long enough for a queue above capacity to show "
        "(several sample latencies; default: the benchmark's, 60 for the 8B, 240 for the "
        "70B, 600 for the 405B)",
    )
    p.add_argument(
        "--trial-queries",
        type=int,
        default=0,
        help="Server: at least this many queries per trial (default: target x --trial-s)",
    )
    p.add_argument(
        "--precision",
        type=float,
        default=0.02,
        help="Server: stop when the highest pass and the lowest failure are this close",
    )


def _add_confirm_flags(p: argparse.ArgumentParser) -> None:
    """`--confirm`'s full-length runs and the step down between them (the backoff also sets
    the written target below the highest passing one)."""
    p.add_argument(
        "--confirm",
        action="store_true",
        help="Server: run the written conf for its full min_duration and step the target "
        "down by --backoff until a run is VALID and its engine kept up",
    )
    p.add_argument("--confirm-runs", type=int, default=3, help="Server: confirmation runs")
    p.add_argument(
        "--confirm-passes",
        type=int,
        default=1,
        metavar="N",
        help="Server: a target is confirmed only by N held runs in a row at it (runs of one conf "
        "vary; each counts toward --confirm-runs)",
    )
    p.add_argument(
        "--backoff",
        type=float,
        default=0.05,
        help="Server: written QPS = highest passing x (1 - backoff)",
    )


def calibrate_request(args: argparse.Namespace, extra: list[str]) -> CalibrateRequest:
    """The flags as calibrate's request; `extra`: the flags calibrate does not know, passed to
    each `run` (engine flags, --max-tokens)."""
    from harness.calibrate.request import CalibrateRequest
    from harness.cli.run import partial_run_spec
    from harness.errors import UsageError
    from harness.resources import benchmark_conf, resolve_user_path
    from harness.run.setup.spec import RunSpec

    owned = [f for f in extra if f.split("=")[0] in ("--target-qps", "--min-query-count")]
    if owned:
        raise UsageError(
            f"calibrate sets each run's target rate and query count itself: drop {owned[0]} "
            "(--start-qps / --start-fraction choose the first trial, --min-duration-s the "
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
    with one_writer(args.output, "--output"):  # its runs lock their own subfolders
        calibrate(req)
    return EXIT_OK
