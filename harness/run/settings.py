"""LoadGen TestSettings and LogSettings, built the way a submission needs them.

- `FromConfig` loads LoadGen's built-in mlperf.conf on its first call in a process and logs an
  error for any later call, so a process builds its settings exactly once; the accuracy test of
  a `--mode both` run reuses the same object with only `mode` changed.
- StartTest silently applies an `audit.config` it finds by name; we always hand it an explicit
  path: the user's audit file copied into the output folder, or a path known not to exist.
- The trace log is off unless asked (LoadGen's C++ default is on and it is huge).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError

LOADGEN_SCENARIO = {
    "Offline": "Offline",
    "Server": "Server",
    "Interactive": "Server",  # Interactive is Server under the `<model>-interactive` name
    "SingleStream": "SingleStream",
}

NO_AUDIT_NAME = ".no-audit.config"


@dataclass(frozen=True)
class SettingsRequest:
    loadgen_model: str
    scenario: str  # our scenario name
    user_conf: Path | None


def build_test_settings(req: SettingsRequest, mode: str = "performance"):
    import mlperf_loadgen as lg

    lg_scenario = LOADGEN_SCENARIO[req.scenario]
    settings = lg.TestSettings()
    settings.scenario = getattr(lg.TestScenario, lg_scenario)
    if req.user_conf is not None:
        if not req.user_conf.is_file():
            raise UsageError(
                f"user.conf {req.user_conf} does not exist: pass --user-conf with an existing file "
                "(see user_confs/)"
            )
        rc = settings.FromConfig(str(req.user_conf), req.loadgen_model, lg_scenario, 1)
    else:
        rc = settings.FromConfig("", req.loadgen_model, lg_scenario, 0)
    if rc != 0:
        from harness.run.user_conf import unparsable_line

        where = unparsable_line(req.user_conf) if req.user_conf is not None else None
        raise UsageError(
            f"LoadGen could not parse {req.user_conf or 'mlperf.conf'} (code {rc})"
            + (f", {where}" if where else "")
            + ": each line must be `model.scenario.key = value` with a number as value"
        )
    set_mode(settings, mode)
    return settings


def set_mode(settings, mode: str) -> None:
    import mlperf_loadgen as lg

    settings.mode = {
        "performance": lg.TestMode.PerformanceOnly,
        "accuracy": lg.TestMode.AccuracyOnly,
    }[mode]


def cap_performance_sample_count(settings, dataset_size: int, preset_count: int) -> str | None:
    """A dataset smaller than the benchmark's (smoke data) cannot back the preset's
    performance_sample_count; LoadGen would index past the QSL. Cap it and say so."""
    effective = settings.performance_sample_count_override or preset_count
    if effective > dataset_size:
        settings.performance_sample_count_override = dataset_size
        return (
            f"dataset has {dataset_size} samples, fewer than performance_sample_count "
            f"{effective}: capped to {dataset_size} (not a compliant run)"
        )
    return None


def build_log_settings(outdir: Path, *, trace: bool = False):
    import mlperf_loadgen as lg

    outdir.mkdir(parents=True, exist_ok=True)
    out = lg.LogOutputSettings()
    out.outdir = str(outdir)
    out.copy_summary_to_stdout = False
    log = lg.LogSettings()
    log.log_output = out
    log.enable_trace = trace
    return log


def audit_path_for(output: Path, audit_config: Path | None) -> Path:
    """The audit file StartTest will read: the user's, copied next to the logs, or none."""
    if audit_config is None:
        path = output / NO_AUDIT_NAME
        if path.exists():
            path.unlink()
        return path
    if not audit_config.is_file():
        raise UsageError(
            f"audit config {audit_config} does not exist: pass --audit-config with the compliance "
            "test's audit.config"
        )
    dest = output / "audit.config"
    if audit_config.resolve() != dest.resolve():
        shutil.copyfile(audit_config, dest)
    return dest
