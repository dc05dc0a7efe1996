"""`mlperf-vllm calibrate`: measure this machine, write the user.conf line a valid run needs.

- Offline: one short measurement, target = measured samples/s x margin (offline.py).
- Server / Interactive: trials on one engine, bounded by the same engine's Offline rate, each
  judged by the p99 limits *and* whether the engine kept up; `--confirm` then runs the written
  target for the full min_duration and steps down until a run holds (server.py).

The Offline measurement is one `mlperf-vllm run` process and so one engine start; the Server
search shares one engine among all its trials.
"""

from __future__ import annotations

from pathlib import Path

from harness.benchmarks import Benchmark, resolve
from harness.calibrate.offline import calibrate_offline
from harness.calibrate.request import CalibrateRequest
from harness.calibrate.server import calibrate_server_conf
from harness.errors import UsageError


def calibrate(req: CalibrateRequest) -> Path:
    """Check the request, measure, write OUTPUT/user.conf; its path."""
    try:
        bench, lg_model = resolve(req.benchmark, req.scenario)
    except (KeyError, ValueError) as exc:
        raise UsageError(str(exc).strip("'\"")) from None
    if req.user_conf is not None and not req.user_conf.is_file():
        raise UsageError(
            f"user.conf {req.user_conf} does not exist: pass --user-conf with the "
            f"base conf, e.g. user_confs/{req.benchmark}/{req.scenario.lower()}.conf"
        )
    if not req.model.exists():
        raise UsageError(f"model {req.model} does not exist: pass --model with a local checkpoint")
    if not 0 < req.start_fraction <= 1:
        raise UsageError(
            f"--start-fraction {req.start_fraction:g}: the first trial's share of the engine's "
            "Offline rate, above 0 and at most 1 (e.g. 0.5 for Interactive)"
        )
    if req.measure_samples < 1:
        raise UsageError("--measure-samples must be at least 1")
    if req.margin < 1.0:
        raise UsageError("--margin must be at least 1.0 (it makes the Offline query longer)")
    req.output.mkdir(parents=True, exist_ok=True)
    size = _dataset_size(req, bench)
    if req.scenario == "Offline":
        return calibrate_offline(req, bench, lg_model, size)
    if req.scenario in ("Server", "Interactive"):
        return calibrate_server_conf(req, bench, lg_model, size)
    raise UsageError(f"calibrate covers Offline, Server and Interactive, not {req.scenario}")


def _dataset_size(req: CalibrateRequest, bench: Benchmark) -> int:
    from harness.datasets import load_dataset

    return load_dataset(
        req.dataset,
        bench,
        allow_pickle=req.run is not None and req.run.allow_pickle,
        need_targets=False,
    ).size
