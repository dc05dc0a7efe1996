"""`mlperf-vllm calibrate`: measure this machine, write the user.conf line a valid run needs.

- Offline: one short LoadGen Offline performance test (a real `mlperf-vllm run` in its own
  process: LoadGen reads mlperf.conf once per process) gives samples/s on this dataset with
  this engine; `target_qps` (LoadGen's offline_expected_qps) = measured x margin. LoadGen then
  issues max(min_query_count, 1.1 x min_duration x qps) samples, so the real run lasts about
  1.1 x margin x min_duration at the measured rate: min_duration is still met if the real run
  is up to that much faster than the short measurement (a warm engine, fuller batches).
- Server / Interactive: trials on one engine, bounded by the same engine's Offline rate, each
  judged by the p99 limits *and* whether the engine kept up; `--confirm` then runs the written
  target for the full min_duration and steps down until a run holds (calibrate_server.py).

The Offline measurement is one `mlperf-vllm run` process and so one engine start; the Server
search shares one engine among all its trials.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from harness import files
from harness.benchmarks import Benchmark, resolve
from harness.calibrate.server import run_once
from harness.errors import UsageError
from harness.run.settings import OFFLINE_SLACK, whole_passes
from harness.run.spec import RunSpec
from harness.run.timeline import EARLY_STOPPING_MIN_QUERIES
from harness.run.user_conf import parse_lines

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


def conf_key_lines(text: str, keys: Sequence[str]) -> str:
    """The base conf without the lines that set `keys` (we write those)."""
    out = []
    for line in text.splitlines():
        body = line.split("#", 1)[0].strip()
        key = body.split("=", 1)[0].strip() if "=" in body else ""
        if key and any(key.endswith("." + k) for k in keys):
            out.append(f"# (replaced by calibrate) {line}")
        else:
            out.append(line)
    return "\n".join(out).rstrip() + "\n"


def _dataset_size(req: CalibrateRequest, bench: Benchmark) -> int:
    from harness.datasets import load_dataset

    return load_dataset(
        req.dataset,
        bench,
        allow_pickle=req.run is not None and req.run.allow_pickle,
        need_targets=False,
    ).size


def _demo_lines(
    bench: Benchmark, lg_model: str, lg_scenario: str, req: CalibrateRequest, dataset_size: int
) -> list[str]:
    """Lines for a demo-sized run (short min_duration, small dataset): never compliant."""
    lines = []
    if req.min_duration_s < SUBMISSION_MIN_DURATION_S:
        lines += [
            "# NOT COMPLIANT: --min-duration-s below 600 (a demo / CPU calibration)",
            f"{lg_model}.{lg_scenario}.min_duration = {int(req.min_duration_s * 1000)}",
        ]
    if lg_scenario == "Offline" and dataset_size < bench.total_sample_count:
        lines += [
            f"# NOT COMPLIANT: the dataset has {dataset_size} of "
            f"{bench.total_sample_count} samples",
            f"{lg_model}.Offline.min_query_count = {dataset_size}",
        ]
    return lines


def calibrate(req: CalibrateRequest) -> Path:
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
        block = _calibrate_offline(req, bench, lg_model, size)
        keys = ["target_qps", "min_duration", "min_query_count"]
    elif req.scenario in ("Server", "Interactive"):
        return _calibrate_server(req, bench, lg_model, size)
    else:
        raise UsageError(f"calibrate covers Offline, Server and Interactive, not {req.scenario}")
    base = req.user_conf.read_text() if req.user_conf else ""
    text = conf_key_lines(base, keys) if base else ""
    conf = req.output / "user.conf"
    # A base conf opens with "COMPLIANT"; a demo-sized result must say otherwise on line one.
    banner = ""
    if any(line.startswith("# NOT COMPLIANT") for line in block):
        banner = "# NOT COMPLIANT (demo calibration): see the NOT COMPLIANT lines at the end.\n"
    files.write_text(conf, banner + text + "\n".join(block) + "\n")  # aside, then renamed
    print("\n".join(line for line in block if line.startswith("#")))
    print(f"user.conf written: {conf}")
    return conf


def _calibrate_offline(
    req: CalibrateRequest, bench: Benchmark, lg_model: str, size: int
) -> list[str]:
    n = req.measure_samples
    conf = req.output / "measure-offline.conf"
    conf.write_text(
        "# calibrate: one short Offline measurement (not a benchmark run)\n"
        f"{lg_model}.Offline.min_duration = 0\n"
        f"{lg_model}.Offline.min_query_count = {n}\n"
        f"{lg_model}.Offline.target_qps = 1\n"
    )
    perf = run_once(req, "Offline", conf, req.output / "measure-offline")
    sps = perf.get("samples_per_second")
    if not sps:
        raise UsageError(f"the calibration run reported no samples/s ({req.output})")
    tps = perf.get("tokens_per_second")
    took = perf.get("duration_s") or 0.0
    if took < 10:
        print(
            f"calibrate: warning: the measurement took {took:.1f} s; under ~10 s it may "
            "underestimate the real run's rate: raise --measure-samples",
            flush=True,
        )
    qps = math.ceil(sps * req.margin * 1000) / 1000
    dur = req.min_duration_s
    mqc = size if size < bench.total_sample_count else bench.total_sample_count
    issued = max(mqc, int(OFFLINE_SLACK * dur * qps))
    lines = [
        f"# --- mlperf-vllm calibrate, {time.strftime('%Y-%m-%d %H:%M')} ---",
        f"# measured: {perf.get('sample_count')} samples in {took:.1f} s "
        f"= {sps:.3f} samples/s, {tps or 0:.1f} tokens/s (LoadGen Offline, this engine)",
        f"# target_qps (offline_expected_qps) = {sps:.3f} x margin {req.margin:g} = {qps:g}: "
        f"LoadGen issues max({mqc}, 1.1 x {dur:g} s x {qps:g}) = {issued} samples, "
        f"~{issued / sps:.0f} s at the measured rate (min_duration {dur:g} s)",
        f"{lg_model}.Offline.target_qps = {qps:g}",
    ]
    return lines + _demo_lines(bench, lg_model, "Offline", req, size)


def _padded_over(base: str, lg_model: str, loaded: int) -> int:
    """The samples a Server run's query count is padded to whole passes over: the loaded
    samples (a base conf's performance_sample_count_override first), 0 where the base conf
    turns equal issue off (every Llama benchmark's mlperf.conf turns it on)."""
    for line in parse_lines(base):
        parts = line.parts
        if parts is None or line.value is None or parts[0] not in ("*", lg_model):
            continue
        if parts[1] not in ("*", "Server"):
            continue
        try:
            value = int(float(line.value))
        except ValueError:
            continue
        if parts[2] == "performance_sample_count_override" and value > 0:
            loaded = min(loaded, value)
        elif parts[2] == "sample_concatenate_permutation" and not value:
            return 0
    return loaded


def _early_stopping_lines(
    lg_model: str, target: float, min_duration_s: float, base: str, loaded: int
) -> list[str]:
    """A Server min_query_count line when the run would issue too few queries for LoadGen's
    early stopping to certify the p99 (such a run is INVALID however fast the engine): enough
    queries for one of them to be over a limit. LoadGen pads an LLM Server run to whole passes
    over the `loaded` samples (equal issue), so what counts is the padded count; where the
    padding makes the run far longer than min_duration (a slow benchmark over its whole
    dataset: the 405B at 0.7 QPS over 8,313 samples runs 3.3 h), a comment says so."""
    need = EARLY_STOPPING_MIN_QUERIES
    by_time = math.floor(target * min_duration_s) + 1  # as issue_plan counts them
    issued = whole_passes(by_time, loaded)
    for line in parse_lines(base):
        if line.key in (f"{lg_model}.Server.min_query_count", "*.Server.min_query_count"):
            with contextlib.suppress(TypeError, ValueError):
                need = max(need, int(float(line.value)))  # type: ignore[arg-type]
    passes = f"whole passes over {loaded:,} loaded samples: equal issue" if loaded > 0 else ""
    if issued >= EARLY_STOPPING_MIN_QUERIES:
        if issued / target <= 1.1 * min_duration_s:
            return []
        return [
            f"# {target:g} QPS for {min_duration_s:g} s issues about {issued:,} queries "
            f"({passes}): the run lasts about {issued / target:,.0f} s"
        ]
    queries = whole_passes(need, loaded)
    return [
        f"# min_query_count {need}: LoadGen's early stopping certifies a p99 only from "
        f"{EARLY_STOPPING_MIN_QUERIES} queries (one of them over a limit); {target:g} QPS x "
        f"{min_duration_s:g} s issues about {issued}"
        + (f" ({passes})" if passes else "")
        + f", so the run issues {queries:,} and lasts about {queries / target:,.0f} s",
        f"{lg_model}.Server.min_query_count = {need}",
    ]


def trial_seconds(req: CalibrateRequest, bench: Benchmark) -> float:
    """A Server trial's length: --trial-s, else the benchmark's default."""
    return req.trial_s if req.trial_s is not None else bench.calibrate_trial_s


def _calibrate_server(req: CalibrateRequest, bench: Benchmark, lg_model: str, size: int) -> Path:
    from harness.calibrate.server import calibrate_server, confirm_target

    req = replace(req, trial_s=trial_seconds(req, bench))
    assert req.trial_s is not None
    if req.trial_s <= 0 or req.trials < 1 or not 0 <= req.backoff < 1:
        raise UsageError("--trial-s and --trials must be positive and --backoff in [0, 1)")
    if req.confirm and req.confirm_runs < 1:
        raise UsageError("--confirm-runs must be at least 1")
    if req.confirm and not 1 <= req.confirm_passes <= req.confirm_runs:
        raise UsageError(
            f"--confirm-passes {req.confirm_passes} must be between 1 and --confirm-runs "
            f"({req.confirm_runs}): raise --confirm-runs or lower --confirm-passes"
        )
    search, qps, record = calibrate_server(req, bench, lg_model)
    base = req.user_conf.read_text() if req.user_conf else ""
    demo = _demo_lines(bench, lg_model, "Server", req, size)
    loaded = _padded_over(base, lg_model, min(size, bench.performance_sample_count))
    conf = req.output / "user.conf"

    def write_conf(target: float, evidence: list[str], banner: str = "") -> None:
        if any(line.startswith("# NOT COMPLIANT") for line in demo):
            banner += (
                "# NOT COMPLIANT (demo calibration): see the NOT COMPLIANT lines at the end.\n"
            )
        count = _early_stopping_lines(lg_model, target, req.min_duration_s, base, loaded)
        keys = ["target_qps", "min_duration"] + (
            ["min_query_count"] if any(not c.startswith("#") for c in count) else []
        )
        text = conf_key_lines(base, keys) if base else ""
        body = [*search, *evidence, f"{lg_model}.Server.target_qps = {target:g}", *count, *demo]
        tmp = conf.with_name(conf.name + ".tmp")
        tmp.write_text(banner + text + "\n".join(body) + "\n")
        tmp.replace(conf)

    if not req.confirm:
        write_conf(
            qps,
            [
                "# not confirmed: run `calibrate --confirm` (or the conf itself) for the full "
                "min_duration before trusting this target"
            ],
        )
        print("\n".join(line for line in search if line.startswith("#")))
        print(f"user.conf written: {conf}")
        return conf
    confirmed, evidence = confirm_target(req, lg_model, conf, write_conf, qps, record)
    if confirmed is None:
        write_conf(
            qps, evidence, "# NOT CONFIRMED: no run of the full duration held; see the end.\n"
        )
        held_by = (
            "no confirmation run held"
            if req.confirm_passes == 1
            else f"no target was held by {req.confirm_passes} confirmation runs in a row"
        )
        raise UsageError(
            f"{held_by} ({len(record['confirmations'])} tried, down to the last target in "
            f"{conf}): the engine cannot sustain these rates for the full duration; try a "
            "faster engine configuration or a larger --backoff"
        )
    print(f"user.conf written: {conf} (target {confirmed:g} QPS, confirmed)")
    return conf
