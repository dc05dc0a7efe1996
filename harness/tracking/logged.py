"""What a run folder and an `evaluate` command put in an MLflow run: params, metrics, tags and
files (`log_result_dir`, `log_evaluation`). The runs themselves (start, end, status, parents
and children) are harness.tracking.runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.run.record.environment import environment_tags
from harness.run.record.logs import ACCURACY_LOG, DETAIL_LOG, SUMMARY_LOG, parse_detail_log
from harness.run.record.result import RESULT_FILE, RunResult
from harness.tracking.params import (
    _read_json,
    accuracy_summary,
    kept_up_tag,
    loadgen_params,
    performance_metrics,
    result_params,
)
from harness.tracking.store import _number

ENVIRONMENT_FILE = "environment.json"
# The accuracy log of a full run is tens of MB; a copy in MLflow only helps while it is small.
MAX_ACCURACY_LOG_BYTES = 8 << 20
# Seconds subtracted from a run's start when deciding which files it wrote (coarse mtimes).
MTIME_SLACK_S = 2.0


@dataclass
class LoggedSummary:
    params: int = 0
    metrics: int = 0
    tags: int = 0
    artifacts: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    status: str | None = None  # result.json status


def log_result_dir(
    output_dir: str | Path,
    run: Any,
    *,
    since: float | None = None,
    max_accuracy_log_bytes: int = MAX_ACCURACY_LOG_BYTES,
) -> LoggedSummary:
    """Log everything a run folder holds: params (result.json + effective LoadGen settings),
    metrics (performance, latency percentiles, accuracy), validity and verdict tags, and the
    files (result.json, LoadGen logs of performance/ and accuracy/, accuracy.json/.txt,
    user.conf, the accuracy log when small). `since` (epoch seconds) ignores files older than
    the run, e.g. an accuracy/ folder left by an earlier run into the same --output."""
    out = Path(output_dir)
    summary = LoggedSummary()
    fresh = _written_since(since)

    result_path = out / RESULT_FILE
    result = RunResult.read(result_path) if result_path.is_file() and fresh(result_path) else None
    env_path = out / ENVIRONMENT_FILE
    env = _read_json(env_path) if env_path.is_file() and fresh(env_path) else None

    params: dict[str, Any] = {}
    metrics: dict[str, float] = {}
    tags: dict[str, Any] = {"output_dir": str(out.resolve())}
    if env:
        tags.update(environment_tags(env))
    if result is not None:
        summary.status = result.status if result.has("status") else None
        _result_fields(result, env, params, metrics, tags)
    _loadgen_settings(out, fresh, params)
    _verdicts(result, out, fresh, metrics, tags)

    summary.params = run.log_params(params)
    summary.metrics = run.log_metrics(metrics)
    summary.tags = run.set_tags(tags)

    # Files last: the numbers above are what people search on, and are logged even if an
    # upload fails half-way.
    _log_files(run, out, result, fresh, summary, max_accuracy_log_bytes)
    if summary.skipped:
        run.set_tags({"artifacts_skipped": "; ".join(summary.skipped)})
    return summary


def _written_since(since: float | None) -> Callable[[Path], bool]:
    """Whether a file was written by the run that started at `since` (None: any file)."""

    def fresh(p: Path) -> bool:
        try:
            return since is None or p.stat().st_mtime >= since - MTIME_SLACK_S
        except OSError:
            return False

    return fresh


def _result_fields(
    result: RunResult,
    env: Mapping[str, Any] | None,
    params: dict[str, Any],
    metrics: dict[str, float],
    tags: dict[str, Any],
) -> None:
    """What result.json gives: its params (the engine's defaults under them), status, error,
    warnings and versions as tags, the engine's start time and the SUT's counters."""
    params.update(result_params(result))
    for k, v in (env or {}).get("engine_arg_defaults", {}).items():
        params.setdefault(f"engine.{k}", v)
    tags["status"] = result.status if result.has("status") else None
    tags["error"] = result.error
    if result.warnings:
        tags["warnings"] = "; ".join(map(str, result.warnings))
    for dist, version in (result.versions or {}).items():
        tags[f"version.{dist}"] = version
    start_s = _number(result.engine_start_s)
    if start_s is not None:
        metrics["engine_start_s"] = start_s
    for k, v in (result.sut_stats or {}).items():
        if _number(v) is not None and not k.endswith("_s"):
            metrics[f"sut.{k}"] = float(v)


def _loadgen_settings(out: Path, fresh: Callable[[Path], bool], params: dict[str, Any]) -> None:
    """Effective LoadGen settings: from the detail log itself, so a run that failed before
    result.json had its performance block still records them."""
    for mode in ("performance", "accuracy"):
        detail = out / mode / DETAIL_LOG
        if detail.is_file() and fresh(detail):
            try:
                parsed = parse_detail_log(detail)
            except OSError:
                continue
            params.update(
                {k: v for k, v in loadgen_params(parsed.values).items() if k not in params}
            )


def _verdicts(
    result: RunResult | None,
    out: Path,
    fresh: Callable[[Path], bool],
    metrics: dict[str, float],
    tags: dict[str, Any],
) -> None:
    """Performance metrics and validity, the accuracy scores and verdict, TEST06's verdict."""
    perf = result.performance if result is not None else None
    if perf:
        metrics.update(performance_metrics(perf))
        tags["validity"] = perf.get("validity")
        tags["invalid_reasons"] = "; ".join(perf.get("invalid_reasons") or []) or None
        tags["kept_up"] = kept_up_tag(perf)
    acc_metrics, verdict, eval_error = accuracy_summary(result, out / "accuracy", fresh)
    if not acc_metrics and verdict is None and (out / "accuracy.json").is_file():
        acc_metrics, verdict, eval_error = accuracy_summary(None, out, fresh)  # evaluate's folder
    metrics.update(acc_metrics)
    if verdict is not None:
        tags["accuracy_verdict"] = verdict
        metrics["accuracy_pass"] = 1.0 if verdict == "PASS" else 0.0
    if eval_error:
        tags["accuracy_evaluation_error"] = eval_error
    t06 = result.test06 if result is not None else None
    if t06 and "passed" in t06:  # `run --test06`
        tags["test06"] = "PASS" if t06["passed"] else "FAIL"


def _log_files(
    run: Any,
    out: Path,
    result: RunResult | None,
    fresh: Callable[[Path], bool],
    summary: LoggedSummary,
    max_accuracy_log_bytes: int,
) -> None:
    """The run's files as artifacts, each noted in `summary` (a too-large accuracy log in
    its `skipped`)."""

    def add(path: Path, artifact_path: str | None = None, name: str | None = None) -> None:
        if path.is_file() and fresh(path) and run.log_artifact(path, artifact_path, name):
            summary.artifacts.append(
                f"{artifact_path + '/' if artifact_path else ''}{name or path.name}"
            )

    add(out / RESULT_FILE)
    add(out / ENVIRONMENT_FILE)
    add(out / "TEST06" / "verify_accuracy.txt", "TEST06")
    for name in ("timeline.json", "timeline.png"):  # Server-like runs: the backlog picture
        add(out / name)
    for mode in ("performance", "accuracy"):
        folder = out / mode
        if not folder.is_dir():
            continue
        for p in sorted(folder.iterdir()):
            if not p.is_file() or not fresh(p):
                continue
            if p.name == ACCURACY_LOG and p.stat().st_size > max_accuracy_log_bytes:
                summary.skipped.append(f"{mode}/{p.name} ({p.stat().st_size} bytes)")
                continue
            if p.stat().st_size == 0 and p.name not in (SUMMARY_LOG, DETAIL_LOG):
                continue  # empty trace file
            add(p, mode)
    for name in ("accuracy.json", "accuracy.txt"):  # evaluate's output folder
        add(out / name)
    inputs = (
        [(result.user_conf, "user.conf"), (result.audit_config, "audit.config")]
        if result is not None
        else []
    )
    for src, name in inputs:
        # Inputs are logged whatever their age.
        if src and Path(src).is_file() and run.log_artifact(Path(src), "inputs", name):
            summary.artifacts.append(f"inputs/{name}")


def log_evaluation(
    run: Any,
    *,
    benchmark: str,
    accuracy_log: Path,
    dataset: Path,
    tokenizer: Path,
    dtype: str,
    accuracy_level: str,
    output_dir: Path,
    metrics: Mapping[str, Any],
    passed: bool,
    max_accuracy_log_bytes: int = MAX_ACCURACY_LOG_BYTES,
) -> LoggedSummary:
    """An `evaluate` command: inputs as params, metrics, verdict, accuracy.json/.txt."""
    from harness.datasets import file_sha256

    summary = LoggedSummary()
    params: dict[str, Any] = {
        "benchmark": benchmark,
        "accuracy_log": str(accuracy_log),
        "dataset": str(dataset),
        "tokenizer": str(tokenizer),
        "dtype": dtype,
        "accuracy_level": accuracy_level,
    }
    for key, path in (("accuracy_log_sha256", accuracy_log), ("dataset_sha256", dataset)):
        if path.is_file():
            params[key] = file_sha256(path)
    summary.params = run.log_params(params)
    m = {k: v for k, v in metrics.items() if _number(v) is not None}
    m["accuracy_pass"] = 1.0 if passed else 0.0
    summary.metrics = run.log_metrics(m)
    summary.tags = run.set_tags(
        {"accuracy_verdict": "PASS" if passed else "FAIL", "output_dir": str(output_dir.resolve())}
    )
    for name in ("accuracy.json", "accuracy.txt"):
        if run.log_artifact(output_dir / name):
            summary.artifacts.append(name)
    if accuracy_log.is_file():
        if accuracy_log.stat().st_size <= max_accuracy_log_bytes:
            run.log_artifact(accuracy_log)
            summary.artifacts.append(accuracy_log.name)
        else:
            summary.skipped.append(f"{accuracy_log.name} ({accuracy_log.stat().st_size} bytes)")
            run.set_tags({"artifacts_skipped": "; ".join(summary.skipped)})
    return summary
