"""result.json: the record of one `mlperf-vllm run`, typed and versioned.

The runner is its only writer; every reader (the summary table, MLflow logging, sweeps,
calibration, packaging, TEST06) loads it with `RunResult.load` / `RunResult.read` and reads
attributes, so a renamed field fails in mypy, not silently in a reader.

`schema_version` says which layout a file has. Files written before it existed (no
`schema_version`) read as version 0: the same fields, so they load unchanged. Since version 2
each option of the run is written once: `spec` (RunSpec.record) leaves out an option the file
records elsewhere with the same value (benchmark, scenario, mode, model, dataset, user_conf,
audit_config, submission and round at the top; the LoadGen settings in `loadgen_overrides`;
offline_order, warmup_samples and output_lengths in `sut_options`: SPEC_AT_TOP and below), and
loading puts them back, so `result.spec` is the whole spec for every version. Fields a run
sets only once it gets that far (the preflight's verdict, the engine's start, the SUT's
statistics, the end time) are left out of the file until they are set, as they always were.
Keys this version does not know are kept in `extra` and written back unchanged.

The performance and accuracy blocks stay plain mappings: they are LoadGen's and the
evaluation's own records (`harness.run.record.logs.PerformanceResult`, `evaluation` reports), logged
to MLflow key by key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from harness import files

SCHEMA_VERSION = 2
RESULT_FILE = "result.json"
TEST06_DIR = "TEST06"  # `run --test06`: the TEST06 test's logs and verdict, inside the run
# How a run ends: every ending writes one of these (only a SIGKILL leaves "running" behind).
FINAL_STATUSES = ("completed", "failed", "interrupted", "refused")


@dataclass(frozen=True)
class PreflightVerdict:
    """What the submission preflight decided about a run's effective settings, handed to the
    runner by its caller (the run layer does not import the submission layer)."""

    submission: bool
    round: str
    rules: list[str]  # every finding's rule
    not_compliant: list[str]  # what keeps this run from being a submission result
    warning: str | None = None  # one line naming every finding; None when there are none
    refusal: str | None = None  # set when a --submission run must not start


# Fields left out of result.json while they are None: set only once the run gets that far.
_OPTIONAL = frozenset(
    {
        "submission",
        "round",
        "preflight",
        "not_compliant",
        "issue_plan",
        "engine_start_s",
        "engine_resolved",
        "engine_resolved_args",
        "warmup",
        "sut_stats",
        "sut_stats_by_mode",
        "test06",
        "profile",
        "finished_at",
        "sut_options",  # absent in files written before SUT options were recorded
        "loadgen_overrides",  # `run --target-qps / --min-duration / --min-query-count`
        "cluster",  # a Ray layout's cluster (harness.run.setup.ray_cluster)
        "spec",  # absent in files written before the run's spec was recorded
    }
)


# The spec's options the file records elsewhere: the top-level field of the same name; the
# LoadGen settings under `loadgen_overrides` by LoadGen's name (harness.run.setup.spec
# LOADGEN_FIELDS); the SUT's options as given under `sut_options`.
SPEC_AT_TOP = (
    "benchmark",
    "scenario",
    "mode",
    "model",
    "dataset",
    "user_conf",
    "audit_config",
    "submission",
    "round",
)
SPEC_IN_LOADGEN_OVERRIDES = {
    "target_qps": "target_qps",
    "min_duration": "min_duration_s",
    "min_query_count": "min_query_count",
}
SPEC_IN_SUT_OPTIONS = ("offline_order", "warmup_samples", "output_lengths")


def _elsewhere(record: Mapping[str, Any]) -> dict[str, Any]:
    """The spec's options that `record` (result.json's mapping) holds outside `spec`, with the
    value there: {option: value} (an override or SUT option left out reads as None)."""
    out = {k: record[k] for k in SPEC_AT_TOP if k in record}
    overrides = record.get("loadgen_overrides") or {}
    out.update({k: overrides.get(lg) for k, lg in SPEC_IN_LOADGEN_OVERRIDES.items()})
    sut = record.get("sut_options")
    if isinstance(sut, Mapping):
        out.update({k: sut.get(k) for k in SPEC_IN_SUT_OPTIONS})
    return out


@dataclass
class RunResult:
    status: str = "running"  # running, then one of FINAL_STATUSES
    benchmark: str = ""
    loadgen_model: str = ""
    scenario: str = ""
    mode: str = ""
    model: str = ""
    dataset: str = ""
    dataset_sha256: str = ""
    dataset_size: int = 0
    user_conf: str | None = None
    audit_config: str | None = None
    engine_args: dict[str, Any] = field(default_factory=dict)
    sampling: dict[str, Any] = field(default_factory=dict)
    env_vars: dict[str, str] = field(default_factory=dict)
    sut_options: dict[str, Any] | None = None
    # LoadGen settings the command line set on top of the conf (None: none)
    loadgen_overrides: dict[str, float] | None = None
    # every option the run was given (harness.run.setup.spec.RunSpec.record): a new option is
    # recorded without a line here
    spec: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    started_at: str = ""
    command: list[str] = field(default_factory=list)
    performance: dict[str, Any] | None = None
    accuracy: dict[str, Any] | None = None
    error: str | None = None
    # a Ray layout: the cluster it ran on (nodes, resources, address) and the layout
    cluster: dict[str, Any] | None = None
    # the submission preflight's verdict (before the engine starts)
    submission: bool | None = None
    round: str | None = None
    preflight: list[str] | None = None
    not_compliant: list[str] | None = None
    # what LoadGen's performance test will issue (harness.run.setup.settings.IssuePlan), known before
    # the engine starts
    issue_plan: dict[str, Any] | None = None
    # once the engine started
    engine_start_s: float | None = None
    engine_resolved: dict[str, Any] | None = None
    engine_resolved_args: dict[str, Any] | None = None
    warmup: dict[str, Any] | None = None
    sut_stats: dict[str, Any] | None = None
    sut_stats_by_mode: dict[str, dict[str, Any]] | None = None
    # `run --test06`: the TEST06 test on the same engine (log dir, verdict)
    test06: dict[str, Any] | None = None
    # `run --profile`: the profiled window's summary (harness.run.record.profile.summarize)
    profile: dict[str, Any] | None = None
    finished_at: str | None = None
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know
    # The keys a loaded file held (None: written by this process, every field is set): a file
    # that lacks a field loads with its default but is not said to have it.
    loaded_keys: frozenset[str] | None = field(default=None, repr=False, compare=False)

    def record_preflight(self, verdict: PreflightVerdict) -> None:
        self.submission = verdict.submission
        self.round = verdict.round
        self.preflight = list(verdict.rules)
        self.not_compliant = list(verdict.not_compliant)
        if verdict.warning:
            self.warnings.append(verdict.warning)

    def has(self, name: str) -> bool:
        """Whether result.json holds this field (see loaded_keys and _OPTIONAL)."""
        if self.loaded_keys is not None and name not in self.loaded_keys:
            return False
        return not (getattr(self, name) is None and name in _OPTIONAL)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.loaded_keys is None or "schema_version" in self.loaded_keys:
            out["schema_version"] = self.schema_version
        for f in fields(self):
            if f.name in ("schema_version", "extra", "loaded_keys") or not self.has(f.name):
                continue
            out[f.name] = getattr(self, f.name)
        if isinstance(out.get("spec"), Mapping) and self.schema_version >= 2:
            there = _elsewhere(out)
            out["spec"] = {
                k: v for k, v in out["spec"].items() if not (k in there and there[k] == v)
            }
        out.update(self.extra)
        return out

    def write(self, path: Path) -> None:
        """Atomically: a reader, a crash or an interrupt sees the old file or the new one."""
        files.write_text(path, json.dumps(self.to_dict(), indent=2, default=str) + "\n")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunResult:
        known = {f.name for f in fields(cls)} - {"extra", "loaded_keys"}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs.setdefault("schema_version", 0)
        spec = data.get("spec")
        if isinstance(spec, Mapping) and kwargs["schema_version"] >= 2:
            kwargs["spec"] = {**_elsewhere(data), **spec}  # what the file wrote once, whole
        return cls(
            **kwargs,
            extra={k: v for k, v in data.items() if k not in known},
            loaded_keys=frozenset(data),
        )

    @classmethod
    def load(cls, path: Path) -> RunResult:
        """Raises OSError or ValueError for a missing or unreadable file."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"{path} holds no result object")
        return cls.from_dict(data)

    @classmethod
    def read(cls, path: Path) -> RunResult | None:
        """The result in `path`, or None when it is missing or unreadable."""
        try:
            return cls.load(path)
        except (OSError, ValueError, TypeError):
            return None

    @classmethod
    def coerce(cls, result: RunResult | Mapping[str, Any]) -> RunResult:
        return result if isinstance(result, RunResult) else cls.from_dict(result)

    def validity(self) -> str | None:
        return (self.performance or {}).get("validity")

    def verdict(self) -> str | None:
        return (self.accuracy or {}).get("verdict")
