"""`mlperf-vllm sweep PLAN`: its arguments and the command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.cli.common import add_command
from harness.cli.flags import add_mlflow_arguments, request_from_flags, tracking_config
from harness.sweep.execute import run_sweep
from harness.sweep.options import SweepOptions
from harness.sweep.plan import KINDS, NOISE_FLOOR
from harness.sweep.report import RULES, markdown_table

# --------------------------------------------------------------------------- CLI


def add_parser(sub) -> None:
    sweep = add_command(
        sub,
        "sweep",
        cmd_sweep,
        starts_processes=True,
        help="one-knob isolation or stacked tuning sweep of a plan",
    )
    add_sweep_arguments(sweep)
    add_mlflow_arguments(sweep)


def add_sweep_arguments(p: Any) -> None:
    """`mlperf-vllm sweep PLAN`: the arguments (harness.cli adds the MLflow ones)."""
    p.add_argument("plan", type=Path, help="plan file (see scripts/plans/)")
    p.add_argument(
        "--kind",
        default="isolation",
        choices=KINDS,
        help="isolation: baseline + each knob alone; stacked: knobs added in order",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=2,
        help="runs per config; 1 gives no noise estimate: deltas of a few percent cannot be "
        "told from noise",
    )
    p.add_argument(
        "--accuracy",
        action="store_true",
        help="also run accuracy + evaluation for each config (first repeat)",
    )
    p.add_argument("--output", type=Path, help="sweep folder (default: runs/sweeps/<plan>-<kind>)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue a sweep in --output: finished repeats are not run again (one that ran "
        "with other settings, such as another model path, is refused, not overwritten)",
    )
    p.add_argument(
        "--keep-all", action="store_true", help="stacked: keep every knob that ran, helped or not"
    )
    p.add_argument(
        "--noise-floor",
        type=float,
        default=NOISE_FLOOR,
        help="smallest relative change called better/worse",
    )
    p.add_argument(
        "--price-per-hour",
        type=float,
        metavar="DOLLARS",
        help="hourly machine price, passed to every run: rows carry dollars per million "
        "output tokens",
    )
    p.add_argument(
        "--config-timeout",
        type=float,
        metavar="S",
        dest="config_timeout_s",
        help="seconds one repeat may take before it is recorded as failed (its whole "
        "process group is ended; default: no limit)",
    )
    p.add_argument(
        "--figure",
        default="auto",
        choices=("auto", "tokens", "capacity"),
        help="what ranks the configs: tokens = each run's tokens/s; capacity (Server / "
        "Interactive) = the highest target QPS a `calibrate` search on the config's one engine "
        "passes (trials judged by the p99 limits and the engine keeping up); auto (default): "
        "capacity for a Server or Interactive plan, else tokens",
    )
    p.add_argument("--trials", type=int, help="capacity: trials per search (calibrate's --trials)")
    p.add_argument(
        "--trial-s", type=float, help="capacity: seconds per trial (calibrate's --trial-s)"
    )
    p.add_argument(
        "--measure-samples",
        type=int,
        help="capacity: samples of the Offline test that caps each search (calibrate's)",
    )
    p.add_argument(
        "--allow-pickle",
        action="store_true",
        help="allow loading .pkl datasets (unpickling runs code from the file); passed to "
        "every run of the sweep",
    )
    p.add_argument(
        "--stall-timeout",
        type=float,
        metavar="S",
        dest="stall_timeout_s",
        help="each repeat fails when its engine produces nothing for S seconds with samples "
        "in flight (default: the run's)",
    )


def sweep_options(args: Any) -> SweepOptions:
    """The flags as the sweep's options (the output folder defaults by plan and kind)."""
    output = args.output or Path("runs/sweeps") / f"{Path(args.plan).stem}-{args.kind}"
    cal: list[str] = []
    for flag, value in (
        ("--trials", args.trials),
        ("--trial-s", args.trial_s),
        ("--measure-samples", args.measure_samples),
    ):
        if value is not None:
            cal += [flag, str(value) if isinstance(value, int) else f"{value:g}"]
    return request_from_flags(SweepOptions, args, output=output, calibrate_args=tuple(cal))


def cmd_sweep(args: Any) -> int:
    opts = sweep_options(args)
    output = opts.output
    cfg = tracking_config(args, default_experiment="mlperf-vllm-sweeps")
    if opts.repeats == 1:
        print(
            "warning: --repeats 1: no run-to-run noise is measured; a delta below the "
            f"{opts.noise_floor:.0%} floor is noise, and larger ones are unconfirmed",
            flush=True,
        )
    from harness.folder_lock import one_writer
    from harness.proc.children import warn_if_left

    try:
        with one_writer(output, "--output"):  # each configuration's run locks its own subfolder
            sweep = run_sweep(args.plan, opts, cfg)
    finally:
        warn_if_left("the sweep's runs")
    print(markdown_table(sweep.rows, opts.kind))
    print(RULES)
    print(f"sweep results: {output / 'sweep.md'} {output / 'sweep.csv'} {output / 'sweep.png'}")
    return 0
