"""`mlperf-vllm calibrate`: measure this machine, write the user.conf line a valid run needs.

- Offline: one short LoadGen Offline performance test (a real `mlperf-vllm run` in its own
  process: LoadGen reads mlperf.conf once per process) gives samples/s on this dataset with
  this engine; `target_qps` (LoadGen's offline_expected_qps) = measured x margin. LoadGen then
  issues max(min_query_count, 1.1 x min_duration x qps) samples, so the real run lasts about
  1.1 x margin x min_duration at the measured rate: min_duration is still met if the real run
  is up to that much faster than the short measurement (a warm engine, fuller batches).
- Server / Interactive: short Server runs at increasing target QPS (doubling, then bisection)
  find the highest QPS whose p99 TTFT and TPOT stay within the benchmark's limits; the conf
  gets that QPS x (1 - backoff). Short trials cannot certify a p99 (early stopping wants
  hundreds of queries over the full 600 s), so the final run can still be INVALID when the
  search ran too close to the edge: the backoff is the margin for that.

Each trial is one `mlperf-vllm run` process and so one engine start.
"""

from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import files
from harness.benchmarks import Benchmark, resolve
from harness.errors import UsageError
from harness.proc.children import EXIT_TIMEOUT, run_child
from harness.run.result import RESULT_FILE, RunResult
from harness.run.runner import run_argv

OFFLINE_SLACK = 1.1
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
    start_qps: float = 1.0  # Server: first trial
    trials: int = 6  # Server: trial runs in the search
    trial_s: float = 30.0  # Server: min_duration of one trial
    trial_queries: int = 200  # Server: min_query_count of one trial
    backoff: float = 0.05  # Server: written QPS = highest passing x (1 - backoff)
    # Wall-clock limit of one trial (its process group is ended); hangs inside a trial are
    # caught sooner by the run's own --stall-timeout / --engine-start-timeout.
    trial_timeout_s: float | None = None
    run_args: tuple[
        str, ...
    ] = ()  # passed to each `mlperf-vllm run` (engine flags, --max-tokens...)


@dataclass(frozen=True)
class Trial:
    qps: float
    passed: bool
    ttft_p99_ms: float | None
    tpot_p99_ms: float | None
    completed_qps: float | None
    validity: str
    output: Path


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


def _run_once(req: CalibrateRequest, scenario: str, conf: Path, out: Path) -> dict[str, Any]:
    """One `mlperf-vllm run --mode performance` in its own process; its performance result."""
    cmd = run_argv(
        req.benchmark,
        scenario,
        "performance",
        req.model,
        req.dataset,
        out,
        conf,
        *req.run_args,
    )
    print(f"calibrate: {' '.join(cmd[2:])}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    result_path = out / RESULT_FILE
    result_path.unlink(missing_ok=True)
    run_log = out / "run.log"
    with open(run_log, "w") as log:
        # Its own process group: a timeout or Ctrl-C / SIGTERM ends the engine's processes too.
        rc = run_child(cmd, stdout=log, stderr=subprocess.STDOUT, timeout_s=req.trial_timeout_s)
    if rc != 0 or not result_path.exists():
        lines = run_log.read_text(errors="replace").strip().splitlines()
        errors = [line for line in lines if line.startswith("error:")]
        tail = (errors or lines)[-1:] or ["no output"]
        if rc == EXIT_TIMEOUT:
            tail = [f"it ran past --trial-timeout {req.trial_timeout_s:g} s"]
        raise UsageError(f"the calibration run failed (exit {rc}): {tail[0]} (logs in {out})")
    result = RunResult.load(result_path)
    if not result.performance:
        raise UsageError(f"the calibration run in {out} has no performance result")
    return result.performance


def _dataset_size(req: CalibrateRequest, bench: Benchmark) -> int:
    from harness.datasets import load_dataset

    return load_dataset(
        req.dataset, bench, allow_pickle="--allow-pickle" in req.run_args, need_targets=False
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
        block = _calibrate_server(req, bench, lg_model, size)
        keys = ["target_qps", "min_duration"]
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
    perf = _run_once(req, "Offline", conf, req.output / "measure-offline")
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


def latency_ok(perf: dict[str, Any], ttft_ms: float, tpot_ms: float) -> bool:
    ttft, tpot = perf.get("ttft_p99_ms"), perf.get("tpot_p99_ms")
    return ttft is not None and tpot is not None and ttft <= ttft_ms and tpot <= tpot_ms


def search_qps(
    measure: Callable[[float], bool], start: float, trials: int, decimals: int = 3
) -> tuple[float | None, list[tuple[float, bool]]]:
    """Highest passing QPS: double (or halve) from `start` until the outcome flips, then bisect.

    `measure(qps)` runs one trial; the search spends at most `trials` of them.
    """
    history: list[tuple[float, bool]] = []
    lo: float | None = None  # highest passing
    hi: float | None = None  # lowest failing
    q = start
    for _ in range(trials):
        q = round(q, decimals)
        ok = measure(q)
        history.append((q, ok))
        if ok:
            lo = q if lo is None else max(lo, q)
        else:
            hi = q if hi is None else min(hi, q)
        if lo is not None and hi is not None:
            q = (lo + hi) / 2
            if round(q, decimals) in (lo, hi):
                break
        elif lo is not None:
            q = lo * 2
        else:
            q = q / 2
            if q < 10**-decimals:
                break
    return lo, history


def _calibrate_server(
    req: CalibrateRequest, bench: Benchmark, lg_model: str, size: int
) -> list[str]:
    limits = bench.server_limits
    if limits is None:
        raise UsageError(f"{bench.name} has no Server latency limits")
    trials: list[Trial] = []

    def measure(qps: float) -> bool:
        tag = f"qps-{qps:g}"
        conf = req.output / f"trial-{tag}.conf"
        conf.write_text(
            f"# calibrate: one short Server trial at {qps:g} QPS (not a benchmark run)\n"
            f"{lg_model}.Server.target_qps = {qps:g}\n"
            f"{lg_model}.Server.min_duration = {int(req.trial_s * 1000)}\n"
            f"{lg_model}.Server.min_query_count = {req.trial_queries}\n"
        )
        out = req.output / f"trial-{tag}"
        perf = _run_once(req, req.scenario, conf, out)
        ok = latency_ok(perf, limits.ttft_ms, limits.tpot_ms)
        trials.append(
            Trial(
                qps,
                ok,
                perf.get("ttft_p99_ms"),
                perf.get("tpot_p99_ms"),
                perf.get("samples_per_second"),
                str(perf.get("validity")),
                out,
            )
        )
        print(
            f"calibrate: {qps:g} QPS -> TTFT p99 {perf.get('ttft_p99_ms')} ms, TPOT p99 "
            f"{perf.get('tpot_p99_ms')} ms: {'within' if ok else 'over'} the limits",
            flush=True,
        )
        return ok

    best, _ = search_qps(measure, req.start_qps, req.trials)
    if best is None:
        raise UsageError(
            f"no trial QPS met p99 TTFT {limits.ttft_ms:g} ms / TPOT {limits.tpot_ms:g} ms "
            f"(lowest tried {min(t.qps for t in trials):g}): pass a lower --start-qps or more "
            "--trials, or a faster engine configuration"
        )
    qps = math.floor(best * (1 - req.backoff) * 1000) / 1000
    lines = [
        f"# --- mlperf-vllm calibrate, {time.strftime('%Y-%m-%d %H:%M')} ---",
        f"# searched target_qps for p99 TTFT <= {limits.ttft_ms:g} ms and TPOT <= "
        f"{limits.tpot_ms:g} ms ({lg_model}), {len(trials)} trials of "
        f">= {req.trial_s:g} s / {req.trial_queries} queries:",
    ]
    for t in trials:
        lines.append(
            f"#   {t.qps:>10g} QPS: TTFT p99 {_ms(t.ttft_p99_ms)}, TPOT p99 "
            f"{_ms(t.tpot_p99_ms)} -> {'pass' if t.passed else 'FAIL'}"
        )
    lines += [
        f"# highest passing {best:g} QPS x (1 - backoff {req.backoff:g}) = {qps:g}; short "
        "trials cannot certify a p99 (early stopping): check the 600 s run's verdict",
        f"{lg_model}.Server.target_qps = {qps:g}",
    ]
    return lines + _demo_lines(bench, lg_model, "Server", req, size)


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.1f} ms"
