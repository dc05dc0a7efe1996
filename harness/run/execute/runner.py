"""One `mlperf-vllm run`: validate inputs, start one engine, run the LoadGen test(s), parse the
logs, evaluate accuracy, write `result.json`.

Order matters for "nothing is lost": every input is validated before the engine starts (an
engine start costs ~30 s here, minutes on a GPU), LoadGen logs are on disk as each test ends,
and `result.json` is rewritten after every step, so a later failure (evaluation, MLflow) never
takes the measured results with it.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.datasets import (
    file_sha256,
)
from harness.errors import UsageError
from harness.resources import require_shipped
from harness.run.execute.session import EngineSession, Phase, PhaseResult
from harness.run.record.cost import add_cost
from harness.run.record.environment import RUN_VERSION_DISTS, engine_env_vars, installed_versions
from harness.run.record.logs import ACCURACY_LOG, DETAIL_LOG, parse_detail_log, performance_result
from harness.run.record.profile import (
    PROFILE_DIR,
    brief,
    parse_window,
    summarize,
)
from harness.run.record.result import RESULT_FILE, TEST06_DIR, PreflightVerdict, RunResult
from harness.run.record.timeline import record_timeline
from harness.run.setup.checks import (
    clear_earlier_run,
)
from harness.run.setup.prepare import PreparedRun, prepare
from harness.run.setup.settings import (
    audit_path_for,
    cap_performance_sample_count,
    issue_plan,
    planned_samples,
    set_mode,
)
from harness.run.setup.spec import RunSpec

log = logging.getLogger(__name__)

TEST06_AUDIT = "user_confs/audit/TEST06.config"  # shipped: MLCommons' TEST06 settings


@dataclass
class RunOutcome:
    result: RunResult
    path: Path


def sut_options(prep: PreparedRun) -> dict[str, Any]:
    """What result.json records of the SUT's own options."""
    req, lengths = prep.request, prep.output_lengths
    out: dict[str, Any] = {"offline_order": req.offline_order, "warmup_samples": req.warmup_samples}
    if int(prep.engine_config.kwargs.get("data_parallel_size") or 1) > 1:
        out["dp_routing"] = req.dp_routing
    out["frontend"] = req.frontend_in_use
    if req.profile:  # a profiled run's figures carry the profiler's cost
        out["profile"] = parse_window(req.profile).spec()
    if lengths:
        out["output_lengths"] = req.output_lengths
        out["output_lengths_mean"] = round(sum(lengths) / len(lengths), 2)
    return out


def run_identity(prep: PreparedRun) -> dict[str, Any]:
    """What a run records of what it runs (result.json fields): the benchmark, model, data,
    engine args as asked, sampling, engine environment, SUT options and every option of its
    spec. A sweep compares these across configs; a calibration records them for its one
    engine."""
    req = prep.request
    return {
        "benchmark": prep.bench.name,
        "loadgen_model": prep.loadgen_model,
        "scenario": req.scenario,
        "model": str(req.model),
        "dataset": str(req.dataset),
        "dataset_sha256": file_sha256(req.dataset),
        "user_conf": str(req.user_conf) if req.user_conf else None,
        "engine_args": prep.engine_config.describe(),
        "sampling": prep.sampling,
        "env_vars": engine_env_vars(),
        "sut_options": sut_options(prep),
        "loadgen_overrides": dict(req.loadgen_overrides) or None,
        "spec": req.record(),
    }


# The caller's verification of a TEST06 test's LoadGen logs (the CLI passes the compliance
# check, which writes TEST06/verify_accuracy.txt): the run layer runs it, the submission layer
# defines it. Returns what result.json records under `test06` (at least "passed").
Test06Check = Callable[[Path, "PreparedRun"], dict[str, Any]]

# The caller's check of the effective TestSettings, right after they are built and before the
# engine starts (the CLI passes the submission preflight): the run layer runs it, the
# submission layer defines it.
SettingsCheck = Callable[[Any, PreparedRun], PreflightVerdict]


def run(
    req: RunSpec,
    *,
    prepared: PreparedRun | None = None,
    check_settings: SettingsCheck | None = None,
    check_test06: Test06Check | None = None,
) -> RunOutcome:
    """Run the LoadGen test(s) of a request in this process and return the result.
    `prepared`: the request's prepare() result, when the caller validated it already (before
    opening an MLflow run, so that bad input leaves nothing behind). `check_settings`: see
    SettingsCheck; its verdict is recorded, and a refusal ends the run before the engine."""
    prep = prepared if prepared is not None and prepared.request == req else prepare(req)
    out = req.output
    if prep.earlier is not None:
        clear_earlier_run(out, prep.earlier)
    out.mkdir(parents=True, exist_ok=True)
    result_path = out / RESULT_FILE
    result = RunResult(
        status="running",
        **run_identity(prep),
        mode=req.mode,
        dataset_size=prep.dataset.size,
        audit_config=str(req.audit_config) if req.audit_config else None,
        warnings=list(prep.warnings),
        versions=installed_versions(RUN_VERSION_DISTS),
        started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        command=["mlperf-vllm", *sys.argv[1:]],
        cluster=prep.cluster,
    )
    for w in prep.warnings:
        print(f"warning: {w}", flush=True)
    result.write(result_path)

    try:
        _run_tests(prep, result, result_path, check_settings, check_test06)
        if result.accuracy is not None and req.evaluate:
            result.accuracy.update(_evaluate(prep, out / "accuracy"))
        result.status = "completed"
    except BaseException as exc:
        if result.status == "running":  # else the step that failed said how already
            result.status = ending_status(exc)
            result.error = f"{type(exc).__name__}: {exc}"
        result.finished_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        write_after_failure(result, result_path)
        raise
    # every ending leaves a final status (only SIGKILL leaves "running")
    result.finished_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    result.write(result_path)
    return RunOutcome(result, result_path)


def write_after_failure(result: RunResult, path: Path) -> None:
    """result.json after a failure, whose own line must reach the user: a file system too full
    to take it (what ended the run, maybe) costs a warning, not the reason."""
    try:
        result.write(path)
    except OSError as exc:
        print(f"warning: {path} not updated ({exc.strerror or exc})", flush=True)


def ending_status(exc: BaseException) -> str:
    """result.json's status for a run that ended with `exc`."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return "refused" if isinstance(exc, UsageError) else "failed"


def _run_tests(
    prep: PreparedRun,
    result: RunResult,
    result_path: Path,
    check_settings: SettingsCheck | None,
    check_test06: Test06Check | None = None,
) -> None:
    """The checks of the effective settings, then one engine session: warm-up, the LoadGen
    test(s) and TEST06; the result is written after each."""
    req = prep.request
    settings = prep.settings
    if check_settings is not None:  # the effective settings are known only now
        verdict = check_settings(settings, prep)
        result.record_preflight(verdict)
        if verdict.refusal:
            result.status, result.error = "refused", verdict.refusal
            result.write(result_path)
            raise UsageError(verdict.refusal)
        if verdict.warning:
            print(f"warning: {verdict.warning}", flush=True)
    capped = cap_performance_sample_count(
        settings, prep.dataset.size, prep.bench.performance_sample_count
    )
    if capped:
        result.warnings.append(capped)
        print(f"warning: {capped}", flush=True)
    plan = None
    if "performance" in req.modes():
        loaded = settings.performance_sample_count_override or prep.bench.performance_sample_count
        plan = issue_plan(settings, min(loaded, prep.dataset.size))
        if plan is not None:
            result.issue_plan = plan.to_dict()
            print(plan.line(), flush=True)

    # leaving the block stops the engine: quickly after an interrupt or a dead engine
    with EngineSession(
        prep, req.output, settings.performance_sample_count_override or None
    ) as session:
        try:
            result.engine_start_s = session.start()
        except BaseException as exc:
            result.status = ending_status(exc)
            result.error = session.failure_line(exc)
            write_after_failure(result, result_path)
            raise
        _run_on_engine(session, plan, result, result_path, check_test06)


def _run_on_engine(
    session: EngineSession,
    plan: Any,
    result: RunResult,
    result_path: Path,
    check_test06: Test06Check | None,
) -> None:
    """The run's phases on the started engine; a failure is recorded with what vLLM said."""
    prep = session.prep
    req, out, settings = prep.request, prep.request.output, prep.settings
    audit = audit_path_for(out, req.audit_config)
    resolved, result.engine_resolved_args = session.engine_resolved()
    result.engine_resolved = resolved
    if resolved.get("enable_prefix_caching"):
        # Our default turns it off; this catches a vLLM version or config that turned it on.
        note = "the engine runs with prefix caching on: not compliant (MLPerf LLM rules)"
        result.warnings.append(note)
        print(f"warning: {note}", flush=True)
    stats_by_mode: dict[str, dict[str, Any]] = {}
    mode = req.modes()[0]

    def keep_stats(mode: str, stats: dict[str, Any]) -> None:
        stats_by_mode[mode] = stats
        # The performance test's stats are the run's (MLflow metrics, summary table).
        result.sut_stats = stats_by_mode.get("performance", stats_by_mode[mode])
        result.sut_stats_by_mode = stats_by_mode

    try:
        if req.warmup_samples:
            result.warmup = session.run(Phase.warm_up(req.warmup_samples)).warmup
        for mode in req.modes():
            set_mode(settings, mode)
            log_dir = out / mode
            # an audit.config changes what LoadGen issues after the plan was made: no total
            planned = None if req.audit_config else planned_samples(mode, plan, prep.dataset.size)
            profiling = req.profile is not None and mode == "performance"
            phase = Phase(
                mode,
                settings,
                log_dir,
                audit,
                progress=mode,
                planned=planned,
                profile=profiling,
                timeline=mode == "performance" and req.scenario != "Offline",
            )
            done = session.run(phase)
            if profiling:
                result.profile = summarize(out / PROFILE_DIR)
                print(brief(result.profile), flush=True)
            if mode == "performance":
                _record_performance(prep, done.timeline, log_dir, result)
            else:
                result.accuracy = {"log": str(log_dir / ACCURACY_LOG)}
            keep_stats(mode, done.stats)
            result.write(result_path)
        if req.test06:
            mode = "TEST06"
            keep_stats(mode, _run_test06(session, result, check_test06).stats)
            result.write(result_path)
    except BaseException as exc:
        result.status = ending_status(exc)
        # an engine that died in a phase: the session's line already carries what vLLM said
        result.error = session.failure_line(exc)
        keep_stats(mode, session.stats_record())
        write_after_failure(result, result_path)
        raise  # the session decides how quickly its engine stops (EngineSession.close)


def _record_performance(prep: PreparedRun, timeline: Any, log_dir: Path, result: RunResult) -> None:
    """The performance test's figures from its logs (and the timeline, Server-like)."""
    req = prep.request
    detail = parse_detail_log(log_dir / DETAIL_LOG)
    perf = performance_result(log_dir, detail).to_dict()
    result.performance = perf
    add_cost(perf, req.price_per_hour)
    if req.scenario != "Offline":
        add_latency_fields(perf, detail.values)
        title = f"{prep.loadgen_model} {req.scenario}"
        perf.update(
            record_timeline(timeline, prep.settings, req.output, title, prep.bench.server_limits)
        )


def _run_test06(
    session: EngineSession, result: RunResult, check_test06: Test06Check | None
) -> PhaseResult:
    """Compliance TEST06 on the running engine: a performance-mode test under the shipped
    TEST06 audit.config (LoadGen applies it to this test only), logs in OUTPUT/TEST06/performance,
    then the caller's verification of them."""
    prep = session.prep
    folder = prep.request.output / TEST06_DIR
    log_dir = folder / "performance"
    log_dir.mkdir(parents=True, exist_ok=True)
    audit = audit_path_for(folder, require_shipped(TEST06_AUDIT))
    set_mode(prep.settings, "performance")
    done = session.run(Phase("TEST06", prep.settings, log_dir, audit, progress="TEST06"))
    result.test06 = {"log_dir": str(log_dir), "audit_config": TEST06_AUDIT}
    if check_test06 is not None:
        try:
            result.test06.update(check_test06(log_dir, prep))
        except Exception as exc:  # the logs are on disk: `compliance test06` can judge them
            result.test06["error"] = " ".join(str(exc).split()) or type(exc).__name__
            print(f"warning: TEST06 not verified: {result.test06['error']}", flush=True)
    return done


def add_latency_fields(perf: dict[str, Any], v: Mapping[str, Any]) -> None:
    """Server / Interactive / SingleStream: the limits LoadGen applied and which ones failed;
    `v`: the detail log's values."""
    failed = []
    for label, value, limit in (
        ("TTFT", perf.get("ttft_p99_ms"), perf.get("ttft_limit_ms")),
        ("TPOT", perf.get("tpot_p99_ms"), perf.get("tpot_limit_ms")),
    ):
        if value is not None and limit and value > limit:
            failed.append(f"{label} p99 {value:,.1f} ms > limit {limit:,.0f} ms")
    for key in ("early_stopping_ttft_result", "early_stopping_tpot_result"):
        text = str(v.get(key) or "").strip(" *")
        if text and "successful" not in text.lower():
            failed.append(f"{key.split('_')[2].upper()} early stopping: {text}")
    perf["failed_constraints"] = failed if perf.get("validity") != "VALID" else []


def _evaluate(prep: PreparedRun, acc_dir: Path) -> dict[str, Any]:
    """Score the accuracy log; a scoring failure is recorded, the logs stay."""
    try:
        from evaluation import evaluate
    except ImportError as exc:  # pragma: no cover - evaluation ships with the package
        return {"evaluation_error": f"evaluation package unavailable: {exc}"}
    level = prep.request.accuracy_level
    assert level is not None  # prepare() refuses a scored run without one
    try:
        ev = evaluate(
            prep.bench.accuracy_preset or prep.bench.name,
            acc_dir / ACCURACY_LOG,
            prep.dataset.frame,
            str(prep.request.model),
            output_dir=acc_dir,
            accuracy_level=level,
            nltk_data=prep.request.nltk_data,
        )
    except Exception as exc:
        msg = f"{type(exc).__name__}: {exc}"
        print(f"accuracy evaluation failed: {msg}", flush=True)
        return {"evaluation_error": msg}
    return {
        "metrics": dict(ev.metrics),
        "passed": ev.passed,
        "verdict": "PASS" if ev.passed else "FAIL",
        "table": ev.table(),
        "accuracy_log_sha256": ev.accuracy_log_sha256,
        "paths": {k: str(v) for k, v in vars(ev.paths).items()},
    }
