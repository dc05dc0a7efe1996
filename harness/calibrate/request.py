"""What a calibration is asked: calibrate's options as one frozen request, each declared once
with its flag (`opt`, as RunSpec's are): the CLI adds the flags from here, and a run option
keeps `run`'s spelling (`--min-duration`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.benchmarks import Benchmark, scenario_name
from harness.run.setup.spec import RunSpec, opt

SUBMISSION_MIN_DURATION_S = 600


@dataclass(frozen=True)
class CalibrateRequest:
    benchmark: str = opt(kind="common")  # --benchmark, the CLI's helper for it
    scenario: str = opt(
        parse=scenario_name,
        choices=("Offline", "Server", "Interactive"),
        help="the scenario the conf is for",
    )
    model: Path = opt(parse=Path, help="local checkpoint folder")
    dataset: Path = opt(
        parse=Path, help="preprocessed dataset (.json, .jsonl, .parquet, .pkl with --allow-pickle)"
    )
    output: Path = opt(parse=Path, help="folder for the measurement runs and the written user.conf")
    # base conf (None: user_confs/<benchmark>/<scenario>.conf; the CLI hands it resolved)
    user_conf: Path | None = opt(
        None,
        parse=Path,
        help="base conf to extend (default: user_confs/<benchmark>/<scenario>.conf)",
    )
    # of the run the conf is for
    min_duration_s: float = opt(
        float(SUBMISSION_MIN_DURATION_S),
        parse=float,
        metavar="S",
        flag_name="--min-duration",
        help="min_duration of the run the conf is for, in seconds (below 600: demo, marked "
        "NOT COMPLIANT in the conf)",
    )
    margin: float = opt(
        1.25, parse=float, help="Offline: expected QPS = measured samples/s x margin"
    )
    # Offline: samples in the measurement (LoadGen repeats samples of a smaller dataset). It
    # must fill the engine's batch many times over: a pass of a few batches underestimates
    # the warm, full-batch rate of the real run, which then ends before min_duration.
    measure_samples: int = opt(
        1000,
        parse=int,
        help="Offline: samples in the measurement; enough to fill the batch many times (lower "
        "it for 405B: ~1 sample/s per GPU node)",
    )
    start_qps: float | None = opt(
        None,
        parse=float,
        help="Server: first trial QPS (default: --start-fraction x the same engine's Offline "
        "samples/s)",
    )
    # Server: the first trial as a fraction of the same engine's Offline rate, when the rate a
    # layout sustains is not known before its engine runs (Interactive holds ~0.4-0.7 of it)
    start_fraction: float = opt(
        0.9,
        parse=float,
        help="Server: without --start-qps, the first trial at this fraction of the same "
        "engine's Offline samples/s (~0.5 suits Interactive on a new layout)",
    )
    trials: int = opt(6, parse=int, help="Server: trial runs")
    trial_s: float | None = opt(
        None,
        parse=float,
        help="Server: seconds per trial; long enough for a queue above capacity to show "
        "(several sample latencies; default: the benchmark's, 60 for the 8B, 240 for the "
        "70B, 600 for the 405B)",
    )
    trial_queries: int = opt(
        0,
        parse=int,
        help="Server: at least this many queries per trial (default: target x --trial-s)",
    )
    backoff: float = opt(
        0.05,
        parse=float,
        help="Server: written QPS = highest passing x (1 - backoff); 0.05 leaves more than the "
        "2.9%% one target lost between two H200 hosts (bench/record/RESULTS.md)",
    )
    # Server: hold trials at the written target, each twice a search trial's length, on the
    # same engine; one that fails steps the target down by the backoff. A target no hold trial
    # passed is not written (0: none, and the conf says the target was not held).
    hold_trials: int = opt(
        3,
        parse=int,
        metavar="N",
        help="Server: trials at the target to write, each twice --trial-s on the same engine, "
        "stepping down by --backoff after a failure; no target is written unless one held "
        "(0: none, the conf then says its target was not held)",
    )
    precision: float = opt(
        0.02,
        parse=float,
        help="Server: stop when the highest pass and the lowest failure are this close",
    )
    confirm: bool = opt(
        False,
        kind="switch",
        help="Server: run the written conf for its full min_duration and step the target "
        "down by --backoff until a run is VALID and its engine kept up",
    )
    confirm_runs: int = opt(3, parse=int, help="Server: confirmation runs")
    # Server: consecutive confirmation runs that must hold one target before it is confirmed.
    # Runs of the same conf vary (two 60 s Interactive runs at one rate on one H200 measured TPOT
    # p99 12.8 and 31.2 ms): one held run can be luck.
    confirm_passes: int = opt(
        1,
        parse=int,
        metavar="N",
        help="Server: a target is confirmed only by N held runs in a row at it (runs of one "
        "conf vary; each counts toward --confirm-runs)",
    )
    # Wall-clock limit of one trial (its process group is ended); hangs inside a trial are
    # caught sooner by the run's own --stall-timeout / --engine-start-timeout.
    trial_timeout_s: float | None = opt(
        None,
        parse=float,
        metavar="S",
        flag_name="--trial-timeout",
        help="seconds one measurement run may take before it is ended with its engine "
        "(default: no limit; each run's --stall-timeout still fails a stalled engine)",
    )
    # Each measurement run: calibrate's model, data and base conf with the `run` flags it was
    # handed (engine flags, --max-tokens...). The Server trials run it in process on one
    # engine (its output: OUTPUT/trials); a child run takes it with its own output and conf.
    # No flag of its own: the CLI builds it from the flags calibrate does not know.
    run: RunSpec | None = None


def trial_seconds(req: CalibrateRequest, bench: Benchmark) -> float:
    """A Server trial's length: --trial-s, else the benchmark's default."""
    return req.trial_s if req.trial_s is not None else bench.calibrate_trial_s
