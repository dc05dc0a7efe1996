"""LoadGen TestSettings and LogSettings, built the way a submission needs them.

- `FromConfig` loads LoadGen's built-in mlperf.conf on its first call in a process and logs an
  error for any later call, so a process builds its settings exactly once; the accuracy test of
  a `--mode both` run reuses the same object with only `mode` changed.
- StartTest silently applies an `audit.config` it finds by name; we always hand it an explicit
  path: the user's audit file copied into the output folder, or a path known not to exist.
- The trace log is off unless asked (LoadGen's C++ default is on and it is huge).
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Mapping
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
        from harness.run.setup.user_conf import unparsable_line

        where = unparsable_line(req.user_conf) if req.user_conf is not None else None
        raise UsageError(
            f"LoadGen could not parse {req.user_conf or 'mlperf.conf'} (code {rc})"
            + (f", {where}" if where else "")
            + ": each line must be `model.scenario.key = value` with a number as value"
        )
    set_mode(settings, mode)
    return settings


# `run --target-qps / --min-duration / --min-query-count`: LoadGen settings set on top of the
# user.conf, for a shell loop over rates or lengths without a conf per value.
OVERRIDES = ("target_qps", "min_duration_s", "min_query_count")


def check_overrides(scenario: str, overrides: Mapping[str, float]) -> None:
    """Each override's value and scenario, judged before anything runs."""
    unknown = set(overrides) - set(OVERRIDES)
    if unknown:
        raise UsageError(f"unknown LoadGen override(s) {sorted(unknown)}: known {OVERRIDES}")
    qps = overrides.get("target_qps")
    if qps is not None:
        if scenario == "SingleStream":
            raise UsageError(
                "--target-qps: SingleStream issues one query after another and has no target "
                "rate; set single_stream_expected_latency_ns in the user.conf instead"
            )
        if not qps > 0:
            raise UsageError(f"--target-qps {qps:g}: a rate above 0 QPS, e.g. --target-qps 8.5")
    dur = overrides.get("min_duration_s")
    if dur is not None and not dur >= 0:
        raise UsageError(f"--min-duration {dur:g}: seconds, 0 or more (600 for a submission)")
    count = overrides.get("min_query_count")
    if count is not None and not count >= 1:
        raise UsageError(f"--min-query-count {count:g}: at least 1")


def apply_overrides(settings, scenario: str, overrides: Mapping[str, float]) -> None:
    """Set the overrides on LoadGen's settings (after its confs; checked by check_overrides)."""
    if "target_qps" in overrides:
        if scenario == "Offline":
            settings.offline_expected_qps = float(overrides["target_qps"])
        else:
            settings.server_target_qps = float(overrides["target_qps"])
    if "min_duration_s" in overrides:
        settings.min_duration_ms = int(round(float(overrides["min_duration_s"]) * 1000))
    if "min_query_count" in overrides:
        settings.min_query_count = int(overrides["min_query_count"])


def check_finite(settings, scenario: str, source: str) -> None:
    """Refuse settings under which LoadGen issues nothing or never ends, before the engine
    starts: a target rate of 0 (LoadGen's Server schedule never reaches min_duration)."""
    if scenario == "Offline":
        rate, key = settings.offline_expected_qps, "target_qps (offline_expected_qps)"
    elif scenario in ("Server", "Interactive"):
        rate, key = settings.server_target_qps, "target_qps"
    else:
        return
    if not rate > 0:
        raise UsageError(
            f"the effective {scenario} {key} is {rate:g} (from {source}): LoadGen would issue "
            "no query or never end; set a rate above 0 in the user.conf or pass --target-qps"
        )


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


OFFLINE_SLACK = 1.1  # LoadGen sizes the Offline query as max(min_query_count, 1.1 x T x qps)


def whole_passes(n: int, size: int) -> int:
    """n rounded up to whole passes over `size` loaded samples, as LoadGen pads in equal issue
    mode (sample_concatenate_permutation); n itself where no size is known (size <= 0)."""
    return -(-n // size) * size if size > 0 else n


@dataclass(frozen=True)
class IssuePlan:
    """What a performance test's LoadGen will issue, worked out before the engine starts the
    way LoadGen's GenerateQueries does it. With `sample_concatenate_permutation` (equal issue,
    on for the Llama benchmarks) a Server run's query count and the Offline query are padded
    to whole passes over the loaded samples, so a run can last well past min_duration: 6,000
    queries (784 s) for a 600 s Server run at 7.649 QPS over 2,000 loaded samples."""

    scenario: str  # LoadGen's: Offline or Server
    queries: int  # Server: queries LoadGen generates (about: arrivals are random); Offline: 1
    samples: int  # samples over all queries
    loaded: int  # samples in the performance set
    passes: int | None  # whole passes over the loaded samples (equal issue), else None
    qps: float  # Server target / Offline expected QPS
    seconds: float  # Server: scheduled length of the test; Offline: at the expected QPS
    # Server, equal issue: the chance that the random schedule places all `queries` before
    # min_duration, so that LoadGen draws on and pads one more pass, to `spill_queries`
    spill_chance: float = 0.0

    @property
    def spill_queries(self) -> int:
        """The count one more pass over the loaded samples makes (equal issue), else 0."""
        return self.queries + self.loaded if self.passes else 0

    def line(self) -> str:
        over = (
            f" ({self.passes} passes over {self.loaded:,} loaded samples: equal issue)"
            if self.passes
            else ""
        )
        if self.scenario == "Server":
            text = (
                f"LoadGen will issue about {self.queries:,} queries at {self.qps:g} QPS{over}: "
                f"about {self.seconds:,.0f} s"
            )
            if self.spill_chance >= SPILL_NOTE:
                text += (
                    f"; a {self.spill_chance:.0%} chance of {self.spill_queries:,} "
                    f"(about {self.spill_queries / self.qps:,.0f} s): if those "
                    f"{self.queries:,} arrivals all fall before min_duration, LoadGen pads "
                    "another pass (a few more loaded samples move that boundary out)"
                )
            return text
        return (
            f"LoadGen will issue one query of {self.samples:,} samples{over}: about "
            f"{self.seconds:,.0f} s at offline_expected_qps {self.qps:g}"
        )

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in (*self.__dataclass_fields__, "spill_queries")}


def issue_plan(settings, loaded: int) -> IssuePlan | None:
    """The IssuePlan of a performance test with these settings over `loaded` samples (the
    performance sample count after any cap), whatever mode the settings are in now; None for
    scenarios it does not model (SingleStream)."""
    import mlperf_loadgen as lg

    if loaded <= 0:
        return None
    seconds = settings.min_duration_ms / 1000.0
    equal = bool(settings.sample_concatenate_permutation)
    min_queries = int(settings.min_query_count)
    if settings.scenario == lg.TestScenario.Offline:
        qps = float(settings.offline_expected_qps)
        spq = max(min_queries, int(OFFLINE_SLACK * seconds * qps))
        passes = None
        if equal:
            spq = whole_passes(spq, loaded)
            passes = spq // loaded
        return IssuePlan("Offline", 1, spq, loaded, passes, qps, spq / qps if qps else 0.0)
    if settings.scenario != lg.TestScenario.Server:
        return None
    qps = float(settings.server_target_qps)
    # queries until the last one is scheduled at or past min_duration
    by_time = math.floor(qps * seconds) + 1
    queries = max(min_queries, by_time)
    if equal:
        queries = whole_passes(queries, loaded)
    passes = queries // loaded if equal else None
    spill = spill_chance(qps * seconds, queries) if equal else 0.0
    return IssuePlan(
        "Server",
        queries,
        queries,
        loaded,
        passes,
        qps,
        queries / qps if qps else 0.0,
        spill_chance=spill,
    )


def planned_samples(mode: str, plan: IssuePlan | None, total_samples: int) -> int | None:
    """The samples a test of the run will issue, as the run knows them before it starts (the
    progress bar's total): the performance test's plan; every sample of the set once in the
    accuracy test; None where the run has no plan (SingleStream, an audit test)."""
    if mode == "accuracy":
        return total_samples
    if mode == "performance" and plan is not None:
        return plan.samples
    return None


SPILL_NOTE = 0.02  # the plan line names the padded count from this chance up


def spill_chance(arrivals: float, queries: int) -> float:
    """The chance that LoadGen draws more than `queries` queries when its Poisson schedule
    brings `arrivals` of them before min_duration on average: it draws until one falls at or
    past min_duration, so more than `queries` means `queries` or more arrivals before it
    (a Poisson count; its normal approximation, continuity-corrected)."""
    if arrivals <= 0:
        return 0.0
    z = (queries - 0.5 - arrivals) / math.sqrt(arrivals)
    return 0.5 * math.erfc(z / math.sqrt(2))


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
