"""MLflow tracking: one MLflow run per `run` / `evaluate` / `demo` / sweep point.

Why it is shaped this way:
- Results live on disk first (`--output`, written by harness.run.execute.runner); MLflow gets a copy. So a
  tracking failure never loses a measurement, and `mlperf-vllm log-run DIR` can log a folder later.
- The tracking store is checked *before* the engine starts (`check_reachable`): a typo in the
  URI costs seconds, not an engine start plus a benchmark.
- `tracked_run` always ends the MLflow run: FINISHED, FAILED (exception) or KILLED (Ctrl-C,
  SIGTERM), and logs whatever artifacts the run had written by then.
- Everything goes through an explicit `MlflowClient`; no fluent `mlflow.start_run` state leaks
  between calls, and MLflow's own INFO chatter is silenced.
- Sweeps: `start_parent` opens a parent run; `child` opens a nested run in this process, and
  `TrackedRun.child_env()` hands the parent to `mlperf-vllm run` subprocesses (one LoadGen
  test per process), which `resolve_tracking` picks up from the environment.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness import files
from harness.errors import UsageError
from harness.proc import signals
from harness.run.record.environment import (
    engine_arg_defaults,
    environment_tags,
    snapshot_environment,
)
from harness.run.record.result import RESULT_FILE, RunResult
from harness.tracking.logged import ENVIRONMENT_FILE, MTIME_SLACK_S, LoggedSummary, log_result_dir
from harness.tracking.store import (
    MAX_PARAM_CHARS,
    MAX_TAG_CHARS,
    PARENT_ENV,
    TrackingConfig,
    _client,
    _experiment_id,
    _number,
    _text,
    check_reachable,
    sanitize_key,
)

_BATCH = 100  # params/tags per log_batch call
_STATUS_BY_RESULT = {
    "completed": "FINISHED",
    "failed": "FAILED",
    "interrupted": "KILLED",
    "running": "FAILED",
}  # "running" on disk: the process died mid-run

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- runs


class TrackedRun:
    """One MLflow run, logged through an explicit client. A disabled config gives a run whose
    methods do nothing, so callers never branch on --no-mlflow."""

    def __init__(
        self,
        cfg: TrackingConfig,
        client: Any = None,
        run_id: str | None = None,
        experiment_id: str | None = None,
    ) -> None:
        self.config = cfg
        self.client = client
        self.run_id = run_id
        self.experiment_id = experiment_id
        self.logging_error: str | None = None
        self._params: dict[str, str] = {}

    @property
    def active(self) -> bool:
        return self.client is not None and self.run_id is not None

    def log_params(self, params: Mapping[str, Any]) -> int:
        """MLflow params are immutable: a key already logged with the same value is skipped,
        with a different value it goes to a `<key>.2` param instead of failing the batch."""
        if not self.active:
            return 0
        from mlflow.entities import Param

        batch: list[Any] = []
        for key, value in params.items():
            k, v = sanitize_key(key), _text(value, MAX_PARAM_CHARS)
            if k in self._params:
                if self._params[k] == v:
                    continue
                k = sanitize_key(f"{k}.2")
                if k in self._params:
                    continue
            self._params[k] = v
            batch.append(Param(k, v))
        for i in range(0, len(batch), _BATCH):
            self.client.log_batch(self.run_id, params=batch[i : i + _BATCH])
        return len(batch)

    def log_metrics(self, metrics: Mapping[str, Any], step: int = 0) -> int:
        if not self.active:
            return 0
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [
            Metric(sanitize_key(k), float(v), now, step)
            for k, v in metrics.items()
            if _number(v) is not None
        ]
        for i in range(0, len(batch), 1000):
            self.client.log_batch(self.run_id, metrics=batch[i : i + 1000])
        return len(batch)

    def set_tags(self, tags: Mapping[str, Any]) -> int:
        if not self.active:
            return 0
        from mlflow.entities import RunTag

        batch = [
            RunTag(sanitize_key(k), _text(v, MAX_TAG_CHARS))
            for k, v in tags.items()
            if v is not None
        ]
        for i in range(0, len(batch), _BATCH):
            self.client.log_batch(self.run_id, tags=batch[i : i + _BATCH])
        return len(batch)

    def log_artifact(
        self, path: Path, artifact_path: str | None = None, name: str | None = None
    ) -> bool:
        if not self.active or not path.is_file():
            return False
        if name and name != path.name:
            with tempfile.TemporaryDirectory() as tmp:
                copy = Path(tmp) / name
                shutil.copyfile(path, copy)
                self.client.log_artifact(self.run_id, str(copy), artifact_path)
        else:
            self.client.log_artifact(self.run_id, str(path), artifact_path)
        return True

    def child_env(self) -> dict[str, str]:
        """Environment for a `mlperf-vllm run` subprocess that should log as a child run."""
        if not self.active:
            return {}
        return {
            "MLFLOW_TRACKING_URI": self.config.uri,
            "MLFLOW_EXPERIMENT_NAME": self.config.experiment,
            PARENT_ENV: str(self.run_id),
        }

    def url(self) -> str | None:
        if not self.active:
            return None
        if self.config.uri.startswith(("http://", "https://")):
            return (
                f"{self.config.uri.rstrip('/')}/#/experiments/{self.experiment_id}"
                f"/runs/{self.run_id}"
            )
        return None


def _status_for(exc: BaseException | None) -> str:
    if exc is None:
        return "FINISHED"
    if isinstance(exc, KeyboardInterrupt):
        return "KILLED"
    return "FAILED"


def _tracking_failed(run: TrackedRun, exc: BaseException, output_dir: Path | None) -> None:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    run.logging_error = f"{type(exc).__name__}: {first}"
    where = f"; the results are in {output_dir}" if output_dir else ""
    relog = f" (log them later with `mlperf-vllm log-run {output_dir}`)" if output_dir else ""
    print(
        f"error: MLflow logging to {run.config.uri} failed ({run.logging_error}){where}{relog}",
        file=sys.stderr,
        flush=True,
    )


def write_environment(output_dir: Path, env: Mapping[str, Any]) -> None:
    """OUT/environment.json, so `log-run` can tag a folder with the machine that produced it.
    A folder that cannot take it (a full disk, maybe what ended the run) costs a warning: the
    run's own result and its reason come first."""
    if output_dir.is_dir():
        try:
            files.write_text(
                output_dir / ENVIRONMENT_FILE, json.dumps(env, indent=2, default=str) + "\n"
            )
        except OSError as exc:
            print(
                f"warning: {output_dir / ENVIRONMENT_FILE} not written ({exc.strerror or exc})",
                file=sys.stderr,
                flush=True,
            )


@contextmanager
def tracked_run(
    cfg: TrackingConfig,
    name: str,
    *,
    tags: Mapping[str, Any] | None = None,
    params: Mapping[str, Any] | None = None,
    parent_run_id: str | None = None,
    output_dir: str | Path | None = None,
    discard_on: tuple[type[BaseException], ...] = (UsageError,),
) -> Iterator[TrackedRun]:
    """Open an MLflow run around a block and always close it.

    On exit the folder `output_dir` (if any) is logged with `log_result_dir` (files the block
    wrote only), then the run ends FINISHED, FAILED (exception, tag `error`) or KILLED
    (KeyboardInterrupt / SIGTERM). A `discard_on` exception (bad input, nothing ran) deletes
    the run instead of leaving an empty FAILED one. The block's exception is re-raised; a
    tracking failure never replaces it: it is printed and kept in `run.logging_error`.
    `OUT/environment.json` is written even with tracking off, for a later `log-run`."""
    started = time.time()
    out = Path(output_dir) if output_dir is not None else None
    env = snapshot_environment()
    parent = parent_run_id or cfg.parent_run_id
    if not cfg.enabled:
        run = TrackedRun(cfg)
        try:
            yield run
        finally:
            if out is not None:
                env["engine_arg_defaults"] = _defaults_from_result(out)
                write_environment(out, env)
        return

    client = _client(cfg)
    experiment_id = _experiment_id(client, cfg)
    run_tags = {
        sanitize_key(k): _text(v, MAX_TAG_CHARS)
        for k, v in {**environment_tags(env), **(tags or {})}.items()
        if v is not None
    }
    run_tags.setdefault("mlflow.source.name", "mlperf-vllm")
    run_tags.setdefault("mlflow.source.type", "LOCAL")
    if parent:
        run_tags["mlflow.parentRunId"] = parent
    mlrun = client.create_run(experiment_id, tags=run_tags, run_name=name)
    run = TrackedRun(cfg, client, mlrun.info.run_id, experiment_id)
    print(
        f"MLflow: run {run.run_id} ({name}) in experiment {cfg.experiment!r} at {cfg.uri}",
        flush=True,
    )
    error: BaseException | None = None
    try:
        # A job scheduler's SIGTERM ends the run as KILLED, like Ctrl-C (harness.proc.signals).
        with signals.interrupt_on_signals():
            if params:
                run.log_params(params)
            yield run
    except BaseException as exc:
        error = exc
        raise
    finally:
        _finish(run, error, out, env, started, discard_on)


def _defaults_from_result(out: Path) -> dict[str, Any]:
    result = RunResult.read(out / RESULT_FILE)
    return engine_arg_defaults((result.engine_args if result is not None else None) or {})


def _finish(
    run: TrackedRun,
    error: BaseException | None,
    out: Path | None,
    env: dict[str, Any],
    started: float,
    discard_on: tuple[type[BaseException], ...],
) -> None:
    client = run.client
    try:
        if (
            error is not None
            and isinstance(error, discard_on)
            and not (
                out is not None
                and (out / RESULT_FILE).is_file()
                and (out / RESULT_FILE).stat().st_mtime >= started - MTIME_SLACK_S
            )
        ):
            client.delete_run(run.run_id)
            return
        if out is not None:
            env["engine_arg_defaults"] = _defaults_from_result(out)
            write_environment(out, env)
            logged = log_result_dir(out, run, since=started)
            if error is None and logged.status not in (None, "completed"):
                error = RuntimeError(f"run ended with status {logged.status}")
        if error is not None:
            # The whole message (pydantic names the bad field on its second line), bounded.
            message = str(error).strip()[:2000]
            run.set_tags({"error": f"{type(error).__name__}: {message}".rstrip(": ")})
    except Exception as exc:  # tracking failure: results stay on disk
        _tracking_failed(run, exc, out)
    status = "FAILED" if run.logging_error else _status_for(error)
    if isinstance(error, KeyboardInterrupt):
        status = "KILLED"
    try:
        client.set_terminated(run.run_id, status)
    except Exception as exc:
        if run.logging_error is None:
            _tracking_failed(run, exc, out)
    if run.logging_error is None:
        url = run.url()
        print(f"MLflow: run {run.run_id} {status}" + (f": {url}" if url else ""), flush=True)


@contextmanager
def start_parent(
    cfg: TrackingConfig,
    name: str,
    *,
    params: Mapping[str, Any] | None = None,
    tags: Mapping[str, Any] | None = None,
    output_dir: str | Path | None = None,
) -> Iterator[TrackedRun]:
    """A sweep's parent run. Children: `child(parent, ...)` in this process, or subprocesses
    started with `env={**os.environ, **parent.child_env()}`."""
    with tracked_run(
        cfg,
        name,
        params=params,
        tags={"mlperf_vllm.role": "sweep", **(tags or {})},
        output_dir=None,
    ) as parent:
        yield parent
        if output_dir is not None and parent.active:
            for name_ in ("sweep.json", "sweep.csv", "plan.txt", "summary.txt"):
                parent.log_artifact(Path(output_dir) / name_)


def child(
    parent: TrackedRun,
    name: str,
    *,
    output_dir: str | Path | None = None,
    params: Mapping[str, Any] | None = None,
    tags: Mapping[str, Any] | None = None,
):
    """One sweep point as a child run of `parent` (in this process)."""
    return tracked_run(
        parent.config,
        name,
        params=params,
        tags={"mlperf_vllm.role": "sweep-point", **(tags or {})},
        parent_run_id=parent.run_id,
        output_dir=output_dir,
    )


def relog(
    cfg: TrackingConfig, output_dir: str | Path, *, name: str | None = None
) -> tuple[TrackedRun, LoggedSummary]:
    """`mlperf-vllm log-run DIR`: log a finished (or crashed) run folder as a new MLflow run,
    ending it with the status result.json records."""
    out = Path(output_dir)
    result = RunResult.read(out / RESULT_FILE)
    if result is None:
        raise UsageError(
            f"{out / RESULT_FILE} is missing or unreadable: pass the --output "
            "folder of an `mlperf-vllm run`"
        )
    check_reachable(cfg)
    client = _client(cfg)
    experiment_id = _experiment_id(client, cfg)
    tags = {
        "mlflow.source.name": "mlperf-vllm log-run",
        "mlflow.source.type": "LOCAL",
        "relogged": "true",
    }
    if cfg.parent_run_id:
        tags["mlflow.parentRunId"] = cfg.parent_run_id
    mlrun = client.create_run(experiment_id, tags=tags, run_name=name or run_name(result, out))
    run = TrackedRun(cfg, client, mlrun.info.run_id, experiment_id)
    try:
        summary = log_result_dir(out, run)
    except BaseException:
        client.set_terminated(run.run_id, "FAILED")
        raise
    client.set_terminated(run.run_id, _STATUS_BY_RESULT.get(result.status, "FAILED"))
    return run, summary


def run_name(result_or_request: Any, output_dir: Path | None = None) -> str:
    """`llama3_1-8b Offline both (out1)`: what and where, readable in the MLflow run list."""
    get = (
        result_or_request.get
        if isinstance(result_or_request, Mapping)
        else lambda k, d=None: getattr(result_or_request, k, d)
    )
    parts = [
        str(get("benchmark", "") or ""),
        str(get("scenario", "") or ""),
        str(get("mode", "") or ""),
    ]
    name = " ".join(p for p in parts if p)
    if output_dir is not None:
        name += f" ({Path(output_dir).name})"
    return name or "mlperf-vllm"
