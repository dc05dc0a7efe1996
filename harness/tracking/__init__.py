"""MLflow tracking: one MLflow run per `run` / `evaluate` / `demo` / sweep point.

store.py        which tracking store, whether it answers, the keys and values it accepts
params.py       a result as MLflow params and metrics
logged.py       what a run folder or an evaluation puts in an MLflow run
runs.py         the MLflow runs themselves: tracked_run, sweep parents and children, relog

What ran the benchmark (host, GPUs, versions, git commit, vLLM defaults) is read by
harness/run/record/environment.py, below this package, since the run and the submission need it too;
runs.py writes it to OUT/environment.json and tags the MLflow runs with it.
The CLI turns its flags into a TrackingConfig (`resolve_tracking`); nothing here reads them.

The names below are the package's public face, what the commands use.
"""

from harness.tracking.logged import log_evaluation, log_result_dir
from harness.tracking.params import performance_metrics
from harness.tracking.runs import (
    TrackedRun,
    child,
    relog,
    run_name,
    start_parent,
    tracked_run,
)
from harness.tracking.store import (
    MAX_KEY_CHARS,
    MAX_PARAM_CHARS,
    PARENT_ENV,
    TrackingConfig,
    check_reachable,
    resolve_tracking,
    sanitize_key,
)

__all__ = [
    "MAX_KEY_CHARS",
    "MAX_PARAM_CHARS",
    "PARENT_ENV",
    "TrackedRun",
    "TrackingConfig",
    "check_reachable",
    "child",
    "log_evaluation",
    "log_result_dir",
    "performance_metrics",
    "relog",
    "resolve_tracking",
    "run_name",
    "sanitize_key",
    "start_parent",
    "tracked_run",
]
