"""A sweep's options, and the plan checked against them before anything is written: the
option values, the plan's dataset and figure, and on `--resume` the finished repeats."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, replace
from pathlib import Path

from harness.datasets import PICKLE_SUFFIXES
from harness.errors import UsageError
from harness.sweep.plan import (
    KINDS,
    NOISE_FLOOR,
    REPEAT_FILE,
    Plan,
    make_config,
    parse_plan,
    plan_settings,
)
from harness.sweep.repeat import FIGURES


@dataclass(frozen=True)
class SweepOptions:
    kind: str = "isolation"
    repeats: int = 2
    accuracy: bool = False
    output: Path = Path("runs/sweep")
    resume: bool = False
    keep_all: bool = False
    noise_floor: float = NOISE_FLOOR
    config_timeout_s: float | None = None
    price_per_hour: float | None = None  # passed to every run; rows carry $/Mtok
    stall_timeout_s: float | None = None  # each repeat's --stall-timeout (None: run's default)
    # "tokens": a run's tokens/s; "capacity" (Server / Interactive): the highest target a
    # `calibrate` search on the config's one engine passed, with these calibrate flags;
    # "auto": capacity for a Server or Interactive plan, else tokens
    figure: str = "auto"
    calibrate_args: tuple[str, ...] = ()
    allow_pickle: bool = False  # passed to every run: a pickled dataset loads only with it


def resolve_figure(plan: Plan, options: SweepOptions) -> SweepOptions:
    """The options with "auto" resolved: capacity for a Server / Interactive plan."""
    if options.figure != "auto":
        return options
    server_like = plan.scenario in ("Server", "Interactive")
    return replace(options, figure="capacity" if server_like else "tokens")


def checked_plan(plan_path: str | Path, options: SweepOptions) -> tuple[Plan, SweepOptions]:
    """The options and the plan checked against each other, before anything is written; the
    options with their figure resolved."""
    if options.kind not in KINDS:
        raise UsageError(f"unknown sweep kind {options.kind!r}: choose one of {', '.join(KINDS)}")
    if options.repeats < 1:
        raise UsageError("--repeats must be at least 1")
    if options.price_per_hour is not None and options.price_per_hour <= 0:
        raise UsageError("--price-per-hour must be a positive number of dollars, e.g. 3.50")
    if options.figure not in ("auto", *FIGURES):
        raise UsageError(f"unknown --figure {options.figure!r}: choose one of {', '.join(FIGURES)}")
    plan = parse_plan(plan_path)
    if plan.dataset.suffix.lower() in PICKLE_SUFFIXES and not options.allow_pickle:
        raise UsageError(
            f"the plan's dataset {plan.dataset} is a pickle, and loading a pickle runs code "
            "from the file: add --allow-pickle to the sweep if you trust it (every run gets "
            "it), or point the plan at a Parquet copy"
        )
    options = resolve_figure(plan, options)
    if options.figure == "capacity" and plan.scenario not in ("Server", "Interactive"):
        raise UsageError(
            f"--figure capacity is a Server or Interactive figure; the plan's scenario is "
            f"{plan.scenario}: leave --figure out (tokens/s) or set `scenario Server`"
        )
    if options.calibrate_args and options.figure != "capacity":
        raise UsageError(
            "--trials / --trial-s / --measure-samples are a capacity sweep's (a Server or "
            "Interactive plan): leave them out of this sweep"
        )
    return plan, options


# --------------------------------------------------------------------------- resume


def _expected_signatures(plan: Plan, options: SweepOptions) -> dict[str, set[str]]:
    """Config folder -> the signatures its repeats carry under this plan (stacked: with any
    set of the earlier knobs kept, since what was kept depends on the runs)."""
    specs = [make_config(plan, 0, "baseline", [])]
    for i, knob in enumerate(plan.knobs, start=1):
        if options.kind == "isolation":
            specs.append(make_config(plan, i, knob.name, [knob]))
            continue
        earlier = plan.knobs[: i - 1]
        for n in range(len(earlier) + 1):
            for kept in itertools.combinations(earlier, n):
                specs.append(make_config(plan, i, "+" + knob.name, [*kept, knob]))
    expected: dict[str, set[str]] = {}
    for spec in specs:
        expected.setdefault(spec.dirname, set()).add(spec.signature(plan, options.accuracy))
    return expected


def check_resume(plan: Plan, options: SweepOptions) -> None:
    """Before any engine starts: every finished repeat of a config this plan holds ran under
    this plan's settings. One that did not would be run again over its own files (the same
    plan from another working directory names other absolute paths, for one), so it is
    refused with the settings that differ. Folders of configs the plan does not hold (a plan
    cut to the configs that finished) are left alone."""
    expected = _expected_signatures(plan, options)
    current = plan_settings(plan, options.accuracy)
    for path in sorted(options.output.glob(f"*/rep*/{REPEAT_FILE}")):
        config = path.parent.parent.name
        if config not in expected:
            continue
        try:
            stored = json.loads(path.read_text())
        except ValueError:
            continue  # unreadable: the repeat runs again, as one that never finished
        if str(stored.get("signature", "")).partition("/")[0] in expected[config]:
            continue
        ran = stored.get("settings") or {}
        keys = sorted(set(ran) | set(current)) if ran else []
        diff = [
            f"{k} {ran.get(k)!r} (this plan: {current.get(k)!r})"
            for k in keys
            if ran.get(k) != current.get(k)
        ]
        what = "; ".join(diff) or "its engine arguments, environment or SUT options"
        raise UsageError(
            f"--resume: {path.parent} is a finished repeat of {config} run with other "
            f"settings ({what}); resuming would run it again over its files. Resume with the "
            "plan and paths it ran with, from the working directory it ran in (relative paths "
            "are taken from there), or pass a new --output"
        )
