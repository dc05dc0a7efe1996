"""What a calibration is asked: calibrate's flags as one frozen request."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.benchmarks import Benchmark
from harness.run.setup.spec import RunSpec

SUBMISSION_MIN_DURATION_S = 600


@dataclass(frozen=True)
class CalibrateRequest:
    benchmark: str
    scenario: str
    model: Path
    dataset: Path
    output: Path
    user_conf: Path | None = None  # base conf (user_confs/<benchmark>/<scenario>.conf)
    min_duration_s: float = SUBMISSION_MIN_DURATION_S  # of the run the conf is for
    margin: float = 1.25  # Offline: expected QPS = measured x margin
    # Offline: samples in the measurement (LoadGen repeats samples of a smaller dataset). It
    # must fill the engine's batch many times over: a pass of a few batches underestimates
    # the warm, full-batch rate of the real run, which then ends before min_duration.
    measure_samples: int = 1000
    start_qps: float | None = None  # Server: first trial (None: start_fraction x the ceiling)
    # Server: the first trial as a fraction of the same engine's Offline rate, when the rate a
    # layout sustains is not known before its engine runs (Interactive holds ~0.4-0.7 of it)
    start_fraction: float = 0.9
    trials: int = 6  # Server: trials in the search
    trial_s: float | None = None  # Server: min_duration of one trial (None: the benchmark's)
    trial_queries: int = 0  # Server: min_query_count of one trial (0: target x trial_s)
    backoff: float = 0.05  # Server: written QPS = highest passing x (1 - backoff)
    precision: float = 0.02  # Server: the search stops when pass and failure are this close
    confirm: bool = False  # Server: run the written conf for its full duration, step down
    confirm_runs: int = 3  # Server: confirmation runs at most
    # Server: consecutive confirmation runs that must hold one target before it is confirmed.
    # Runs of the same conf vary (two 60 s Interactive runs at one rate on one H200 measured TPOT
    # p99 12.8 and 31.2 ms): one held run can be luck.
    confirm_passes: int = 1
    # Wall-clock limit of one trial (its process group is ended); hangs inside a trial are
    # caught sooner by the run's own --stall-timeout / --engine-start-timeout.
    trial_timeout_s: float | None = None
    # Each measurement run: calibrate's model, data and base conf with the `run` flags it was
    # handed (engine flags, --max-tokens...). The Server trials run it in process on one
    # engine (its output: OUTPUT/trials); a child run takes it with its own output and conf.
    run: RunSpec | None = None


def trial_seconds(req: CalibrateRequest, bench: Benchmark) -> float:
    """A Server trial's length: --trial-s, else the benchmark's default."""
    return req.trial_s if req.trial_s is not None else bench.calibrate_trial_s
