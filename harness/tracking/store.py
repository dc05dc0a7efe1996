"""The MLflow tracking store: which one (the values the CLI passes, the environment, the SQLite
default), whether it answers, and the names and values it accepts."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import UsageError

DEFAULT_EXPERIMENT = "mlperf-vllm"
DB_FILE = "mlflow.db"
PARENT_ENV = "MLPERF_VLLM_PARENT_RUN_ID"
# MLflow limits (mlflow.utils.validation): param values 6000 chars, tags 8000, keys 250.
MAX_PARAM_CHARS = 6000
MAX_TAG_CHARS = 8000
MAX_KEY_CHARS = 250


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class TrackingConfig:
    uri: str
    experiment: str = DEFAULT_EXPERIMENT
    enabled: bool = True
    parent_run_id: str | None = None  # set for sweep points started as subprocesses


def default_uri(cwd: Path | None = None) -> str:
    """The embedded default: a SQLite store in the working directory, which
    `mlflow ui --backend-store-uri sqlite:///mlflow.db --host 127.0.0.1` opens."""
    return f"sqlite:///{(cwd or Path.cwd()).resolve() / DB_FILE}"


def resolve_tracking(
    uri: str | None = None,
    experiment: str | None = None,
    *,
    enabled: bool = True,
    environ: Mapping[str, str] | None = None,
    default_experiment: str = DEFAULT_EXPERIMENT,
) -> TrackingConfig:
    """The store: `uri` (the CLI's --mlflow-uri), then MLFLOW_TRACKING_URI, then the SQLite
    file in the working directory. The experiment: `experiment`, then MLFLOW_EXPERIMENT_NAME,
    then the command's default. Empty values count as unset."""
    env = os.environ if environ is None else environ
    return TrackingConfig(
        uri=uri or env.get("MLFLOW_TRACKING_URI") or default_uri(),
        experiment=experiment or env.get("MLFLOW_EXPERIMENT_NAME") or default_experiment,
        enabled=enabled,
        parent_run_id=env.get(PARENT_ENV) or None,
    )


def _quiet_mlflow() -> None:
    import mlflow  # noqa: F401  - configures its loggers on import; quiet them afterwards

    for name in ("mlflow", "alembic", "urllib3.connectionpool"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # A dead server should fail a logging call in seconds, not after MLflow's default ~2 min of
    # retries; users who set these themselves keep their values.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")


def _client(cfg: TrackingConfig):
    _quiet_mlflow()
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=cfg.uri)


def _fix(cfg: TrackingConfig) -> str:
    return (
        "start the server, pass --mlflow-uri with its address (or set MLFLOW_TRACKING_URI), "
        "or pass --no-mlflow to run without tracking"
    )


def check_reachable(cfg: TrackingConfig, timeout_s: float = 5.0) -> str | None:
    """Fail fast, before any engine starts, with one line naming the URI and the fix.
    Returns the experiment id (created when missing), or None when tracking is off."""
    if not cfg.enabled:
        return None
    parsed = urllib.parse.urlparse(cfg.uri)
    if parsed.scheme in ("http", "https"):
        url = cfg.uri.rstrip("/") + "/health"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as resp:
                if resp.status != 200:
                    raise UsageError(
                        f"MLflow tracking server {cfg.uri} answered {resp.status} "
                        f"on /health: {_fix(cfg)}"
                    )
        except UsageError:
            raise
        except urllib.error.HTTPError as exc:
            raise UsageError(
                f"MLflow tracking server {cfg.uri} answered {exc.code} on /health: {_fix(cfg)}"
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise UsageError(
                f"MLflow tracking server {cfg.uri} is not reachable ({reason}): {_fix(cfg)}"
            ) from None
    elif parsed.scheme == "sqlite":
        db = sqlite_file(cfg)
        if db is not None:
            folder = db.parent if db.parent != Path("") else Path(".")
            if not folder.is_dir() or not os.access(folder, os.W_OK):
                raise UsageError(
                    f"MLflow store {cfg.uri}: folder {folder} is missing or not "
                    f"writable: {_fix(cfg)}"
                )
    try:
        return _experiment_id(_client(cfg), cfg)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(
            f"MLflow tracking store {cfg.uri} cannot be used ({first[:300]}): {_fix(cfg)}"
        ) from None


def sqlite_file(cfg: TrackingConfig) -> Path | None:
    """The database file of a SQLite store (`sqlite:///PATH`), None for any other store."""
    if not cfg.uri.startswith("sqlite:///"):
        return None
    db = Path(cfg.uri[len("sqlite:///") :])
    return None if str(db) in ("", ":memory:") else db


def artifact_location(cfg: TrackingConfig) -> str | None:
    """Where a new experiment of a SQLite store keeps its runs' artifacts: beside the database
    file, in `mlruns/<experiment>` (None, the server's or MLflow's choice, for any other store).
    MLflow's own default for a SQLite store is `./mlruns` under the working directory of the
    process that creates the experiment: a run with `--mlflow-uri sqlite:////data/mlflow.db`
    started from a home folder copied its logs into that folder. For the embedded default (the
    database in the working directory) that is the same `mlruns` folder as MLflow's."""
    db = sqlite_file(cfg)
    if db is None:
        return None
    folder = re.sub(r"[^A-Za-z0-9_.-]", "_", cfg.experiment).strip(".") or "experiment"
    return str(db.resolve().parent / "mlruns" / folder)


def _experiment_id(client: Any, cfg: TrackingConfig) -> str:
    name = cfg.experiment
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            client.restore_experiment(exp.experiment_id)
        return exp.experiment_id
    try:
        return client.create_experiment(name, artifact_location=artifact_location(cfg))
    except Exception:  # created concurrently by another process
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


# --------------------------------------------------------------------------- names and values


_KEY_BAD = re.compile(r"[^A-Za-z0-9_\-./ ]")


def sanitize_key(key: str) -> str:
    """A valid MLflow param/metric/tag key: allowed characters only, no path tricks."""
    k = _KEY_BAD.sub("_", str(key)).strip().strip("/")
    while ".." in k:
        k = k.replace("..", "_.")
    k = re.sub(r"/+", "/", k)
    return (k or "_")[:MAX_KEY_CHARS]


def _text(value: Any, limit: int) -> str:
    if isinstance(value, (dict, list, tuple)):
        s = json.dumps(value, default=str, sort_keys=True)
    else:
        s = str(value)
    if len(s) > limit:
        marker = f"...[truncated {len(s)} chars]"
        s = s[: limit - len(marker)] + marker
    return s


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(float(value)):
        return float(value)
    return None
