"""Preflight: refuse, before any engine starts, a run meant for submission that cannot be valid.

Every rule reads the *effective* settings: the LoadGen `TestSettings` object after
`FromConfig` applied mlperf.conf and the user.conf, plus the engine kwargs, the sampling
parameters, the dataset size and whether an audit file is lying around. The rules are those
of the MLPerf Inference rules as the submission checker enforces them (min duration 600 s,
Offline query covering the dataset, performance_sample_count, the fixed RNG seeds, equal issue
mode, the latency limits) and those of the LLM benchmarks (greedy decoding, the benchmark's
output cap, no caching across queries).

`check()` is a pure function over plain values, so it is tested without LoadGen or vLLM;
`effective_settings()` reads the TestSettings fields; `settings_check()` is what the CLI hands the
runner (the run layer never imports this one).
With `--submission` a finding is fatal (exit 2, one line naming every problem and its fix);
without, the same line is printed once as a warning.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from harness.benchmarks import Benchmark
from harness.run.logs import ns_to_ms
from harness.run.result import PreflightVerdict
from harness.run.settings import OFFLINE_SLACK, whole_passes
from harness.run.timeline import EARLY_STOPPING_MIN_QUERIES, early_stopping_min_queries
from harness.submission.rounds import Round, choose_round, get_round, round_of_seeds

SUBMISSION_MIN_DURATION_MS = 600_000
LOADGEN_DEFAULT_QPS = 1.0  # LoadGen's built-in target_qps when no user.conf sets one
SEED_KEYS = ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed")
AUDIT_FILE = "audit.config"
EARLY_STOPPING_NONE_OVER = early_stopping_min_queries(0)  # 459 for a p99


@dataclass(frozen=True)
class EffectiveSettings:
    """The LoadGen settings a test will run with, as plain values."""

    scenario: str  # LoadGen scenario: Offline, Server, SingleStream
    min_duration_ms: int
    min_query_count: int
    performance_sample_count: int
    seeds: Mapping[str, int]
    offline_expected_qps: float = LOADGEN_DEFAULT_QPS
    server_target_qps: float = LOADGEN_DEFAULT_QPS
    ttft_latency_ms: float | None = None
    tpot_latency_ms: float | None = None
    use_token_latencies: bool = True
    sample_concatenate_permutation: bool = True
    # the samples LoadGen loads: the performance sample count, capped to a smaller dataset
    # (None: the performance sample count)
    loaded_samples: int | None = None

    def _whole_passes(self, n: int) -> int:
        """n padded to whole passes over the performance set, as LoadGen does in equal issue
        mode (sample_concatenate_permutation)."""
        size = self.loaded_samples or self.performance_sample_count
        if not self.sample_concatenate_permutation:
            return n
        return whole_passes(max(n, 1), size) if size > 0 else n

    @property
    def server_queries(self) -> int:
        """About what a Server test issues: target x min_duration, at least min_query_count,
        padded to whole passes in equal issue mode."""
        by_time = int(self.server_target_qps * self.min_duration_ms / 1000)
        return self._whole_passes(max(self.min_query_count, by_time))

    @property
    def offline_samples_per_query(self) -> int:
        """The Offline query's size as the settings give it (LoadGen's
        effective_samples_per_query). Equal issue then pads the query LoadGen generates to whole
        passes, but the submission checker judges this value, so it is not padded here."""
        by_rate = int(OFFLINE_SLACK * self.min_duration_ms / 1000.0 * self.offline_expected_qps)
        return max(self.min_query_count, by_rate)


@dataclass(frozen=True)
class Finding:
    rule: str
    problem: str
    fix: str
    fatal: bool = True  # False: advice, never refuses a run

    def line(self) -> str:
        return f"{self.problem} ({self.fix})"


@dataclass(frozen=True)
class RunFacts:
    """What else decides validity: engine, sampling, dataset, audit file."""

    dataset_size: int
    engine_kwargs: Mapping[str, Any] = field(default_factory=dict)
    sampling: Mapping[str, Any] = field(default_factory=dict)
    audit_requested: bool = False
    stray_audit_files: tuple[str, ...] = ()
    reference_seeds: Mapping[str, int] | None = None  # the installed LoadGen's mlperf.conf
    round: Round | None = None  # the submission round: its seeds are the ones that count


def effective_settings(settings: Any, scenario: str) -> EffectiveSettings:
    """Read a LoadGen TestSettings object (after FromConfig) into plain values."""
    lg_scenario = str(settings.scenario).rsplit(".", 1)[-1]
    pcount = int(settings.performance_sample_count_override or 0)
    return EffectiveSettings(
        scenario=lg_scenario or scenario,
        min_duration_ms=int(settings.min_duration_ms),
        min_query_count=int(settings.min_query_count),
        performance_sample_count=pcount,
        seeds={k: int(getattr(settings, k)) for k in SEED_KEYS},
        offline_expected_qps=float(settings.offline_expected_qps),
        server_target_qps=float(settings.server_target_qps),
        ttft_latency_ms=ns_to_ms(getattr(settings, "ttft_latency", None)) or None,
        tpot_latency_ms=ns_to_ms(getattr(settings, "tpot_latency", None)) or None,
        use_token_latencies=bool(getattr(settings, "use_token_latencies", True)),
        sample_concatenate_permutation=bool(
            getattr(settings, "sample_concatenate_permutation", True)
        ),
    )


_SEED_PROBE = (
    "import json, mlperf_loadgen as lg\n"
    "s = lg.TestSettings()\n"
    "s.FromConfig('', 'llama3_1-8b', 'Offline', 0)\n"
    f"print(json.dumps({{k: int(getattr(s, k)) for k in {SEED_KEYS!r}}}))\n"
)


@lru_cache(maxsize=1)
def reference_seeds() -> dict[str, int] | None:
    """The seeds of the installed LoadGen's own mlperf.conf (the ones a submission must use).

    Read in a child process: FromConfig loads mlperf.conf only once per process, and this
    process is about to load it with the user's user.conf.
    """
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _SEED_PROBE], capture_output=True, text=True, timeout=60
        )
        line = proc.stdout.strip().splitlines()[-1]
        return {k: int(v) for k, v in json.loads(line).items()}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def stray_audit_files(*folders: Path) -> tuple[str, ...]:
    """audit.config files LoadGen-based tools (ours, the reference's) would pick up by name."""
    seen: list[str] = []
    for folder in folders:
        path = folder / AUDIT_FILE
        if path.is_file() and str(path.resolve()) not in seen:
            seen.append(str(path.resolve()))
    return tuple(seen)


def check(
    eff: EffectiveSettings, bench: Benchmark, scenario: str, facts: RunFacts
) -> list[Finding]:
    """Every reason this run cannot be a valid closed-division submission result."""
    out: list[Finding] = []
    conf = f"user_confs/{bench.name.removesuffix('-interactive')}/{scenario.lower()}.conf"

    if eff.min_duration_ms < SUBMISSION_MIN_DURATION_MS:
        out.append(
            Finding(
                "min_duration",
                f"min_duration {eff.min_duration_ms} ms is below {SUBMISSION_MIN_DURATION_MS} ms",
                f"remove the min_duration line from the user.conf, e.g. use {conf}",
            )
        )

    if eff.scenario == "Offline":
        spq = eff.offline_samples_per_query
        if spq < bench.total_sample_count:
            out.append(
                Finding(
                    "offline_query",
                    f"the Offline query has {spq} samples, fewer than the dataset's "
                    f"{bench.total_sample_count}",
                    f"set min_query_count >= {bench.total_sample_count} or drop the line "
                    "(mlperf.conf has it)",
                )
            )
        if eff.offline_expected_qps == LOADGEN_DEFAULT_QPS:
            out.append(
                Finding(
                    "offline_expected_qps",
                    "offline_expected_qps is LoadGen's default 1 (not calibrated): a system "
                    f"faster than {bench.total_sample_count / (eff.min_duration_ms / 1000 or 1):.1f}"
                    " samples/s ends before min_duration and the run is INVALID",
                    "run `mlperf-vllm calibrate` and use the user.conf it writes",
                )
            )
    elif eff.scenario == "Server":
        if eff.server_target_qps == LOADGEN_DEFAULT_QPS:
            out.append(
                Finding(
                    "server_target_qps",
                    "target_qps is LoadGen's default 1 (valid, but likely far below this "
                    "system's peak)",
                    "run `mlperf-vllm calibrate --scenario " + scenario + "`",
                    fatal=False,
                )
            )
        issued = eff.server_queries
        if issued < EARLY_STOPPING_NONE_OVER:
            out.append(
                Finding(
                    "early_stopping",
                    f"the run issues about {issued} queries ({eff.server_target_qps:g} QPS for "
                    f"{eff.min_duration_ms / 1000:g} s, min_query_count {eff.min_query_count}): "
                    f"LoadGen's early stopping certifies a p99 only from {EARLY_STOPPING_NONE_OVER}"
                    f" queries (none over a limit), {EARLY_STOPPING_MIN_QUERIES} with one, so the "
                    "run is INVALID however fast the engine",
                    f"set min_query_count = {EARLY_STOPPING_MIN_QUERIES} for this scenario in the "
                    "user.conf",
                )
            )

    if eff.performance_sample_count != bench.performance_sample_count:
        out.append(
            Finding(
                "performance_sample_count",
                f"performance_sample_count is {eff.performance_sample_count}, the benchmark's is "
                f"{bench.performance_sample_count}",
                "remove performance_sample_count_override from the user.conf",
            )
        )
    if facts.dataset_size != bench.total_sample_count:
        out.append(
            Finding(
                "dataset",
                f"the dataset has {facts.dataset_size} samples, {bench.name}'s has "
                f"{bench.total_sample_count}",
                f"use the full {bench.dataset_description}",
            )
        )

    ref = facts.reference_seeds
    rnd = facts.round
    if rnd is not None:
        bad = [k for k in SEED_KEYS if eff.seeds.get(k) != rnd.seeds[k]]
        if bad:
            other = round_of_seeds(eff.seeds)
            base = bench.name.removesuffix("-interactive")
            if other and not any(m.preset == base for m in get_round(other).models):
                other_has_it = False
            else:
                other_has_it = bool(other)
            out.append(
                Finding(
                    "seeds",
                    f"{', '.join(bad)} are not round {rnd.name}'s"
                    + (f" (they are round {other}'s)" if other else ""),
                    f"round {rnd.name}'s seeds come from the mlperf.conf of {rnd.seeds_loadgen} "
                    "(a user.conf cannot set them): install it"
                    + (f", or pass --round {other}" if other_has_it else ""),
                )
            )
    elif ref:
        changed = [k for k in SEED_KEYS if k in ref and eff.seeds.get(k) != ref[k]]
        if changed:
            out.append(
                Finding(
                    "seeds",
                    f"{', '.join(changed)} differ from mlperf.conf",
                    "remove the *_rng_seed lines from the user.conf",
                )
            )

    if not eff.sample_concatenate_permutation and not facts.audit_requested:
        out.append(
            Finding(
                "equal_issue",
                "sample_concatenate_permutation (equal issue mode) is off",
                "remove the sample_concatenate_permutation line from the user.conf",
            )
        )

    if eff.scenario == "Server" and bench.server_limits is not None:
        lim = bench.server_limits
        if not eff.use_token_latencies:
            out.append(
                Finding(
                    "token_latencies",
                    "use_token_latencies is off",
                    "remove the use_token_latencies line from the user.conf",
                )
            )
        for name, value, want in (
            ("ttft_latency", eff.ttft_latency_ms, lim.ttft_ms),
            ("tpot_latency", eff.tpot_latency_ms, lim.tpot_ms),
        ):
            if value is not None and abs(value - want) > 1e-6:
                out.append(
                    Finding(
                        "latency_limits",
                        f"{name} is {value:g} ms, {bench.name}'s limit is {want:g} ms",
                        f"remove the {name} line from the user.conf",
                    )
                )

    if facts.stray_audit_files and not facts.audit_requested:
        out.append(
            Finding(
                "audit_file",
                f"{', '.join(facts.stray_audit_files)} is present but no --audit-config was asked "
                "(LoadGen applies an audit.config it finds by name, replacing the test settings)",
                "delete it, or pass it with --audit-config for a compliance test",
            )
        )

    if facts.engine_kwargs.get("enable_prefix_caching"):
        out.append(
            Finding(
                "prefix_caching",
                "prefix caching is on (caching across queries is against the MLPerf LLM rules)",
                "drop --enable-prefix-caching / enable_prefix_caching=true",
            )
        )

    s = facts.sampling
    temperature = float(s.get("temperature", 0.0) or 0.0)
    top_k = s.get("top_k", 1)
    top_p = float(s.get("top_p", 1.0) if s.get("top_p") is not None else 1.0)
    if temperature != 0.0 or top_k not in (1, -1, 0, None) or top_p != 1.0:
        out.append(
            Finding(
                "greedy",
                f"sampling is not greedy (temperature {temperature:g}, top_k {top_k}, "
                f"top_p {top_p:g})",
                "use the benchmark's greedy decoding: temperature 0, top_k 1",
            )
        )
    max_tokens = s.get("max_tokens")
    if max_tokens is not None and max_tokens != bench.sampling.max_tokens:
        out.append(
            Finding(
                "max_tokens",
                f"max_tokens is {max_tokens}, {bench.name}'s is {bench.sampling.max_tokens}",
                "drop --max-tokens",
            )
        )
    if s.get("ignore_eos"):
        out.append(
            Finding("ignore_eos", "ignore_eos is on (outputs of fixed length)", "drop --ignore-eos")
        )
    return out


def fatal(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.fatal]


def refusal_line(findings: list[Finding]) -> str:
    """One line: every problem with its fix."""
    body = "; ".join(f.line() for f in findings)
    return f"not a valid submission run: {body}"


def warning_line(findings: list[Finding]) -> str:
    names = ", ".join(f.rule for f in findings)
    return (
        f"not submission-compliant ({names}): "
        + "; ".join(f.problem for f in findings)
        + " (pass --submission to refuse such runs)"
    )


def settings_check(settings: Any, prep: Any) -> PreflightVerdict:
    """The runner's `check_settings`: run right after the TestSettings are built and before
    the engine starts. A `--submission` run with a fatal finding gets a refusal (the runner
    records it and exits 2); otherwise the findings are recorded with one warning line."""
    req = prep.request
    out_dir = req.output
    choice = choose_round(getattr(req, "round", None), prep.bench.name, req.accuracy_level)
    facts = RunFacts(
        dataset_size=prep.dataset.size,
        engine_kwargs=dict(prep.engine_config.kwargs),
        sampling=dict(prep.sampling),
        audit_requested=req.audit_config is not None,
        stray_audit_files=stray_audit_files(Path.cwd(), out_dir),
        reference_seeds=reference_seeds(),
        round=choice.round,
    )
    eff = effective_settings(settings, req.scenario)
    psc = eff.performance_sample_count or prep.bench.performance_sample_count
    eff = replace(eff, loaded_samples=min(psc, prep.dataset.size))
    findings = check(eff, prep.bench, req.scenario, facts)
    blocking = fatal(findings)
    refused = bool(req.submission and blocking)
    return PreflightVerdict(
        submission=bool(req.submission),
        round=choice.round.name,
        rules=[f.rule for f in findings],
        not_compliant=[f.rule for f in blocking],  # advice excluded
        warning=warning_line(findings) if findings and not refused else None,
        refusal=refusal_line(blocking) if refused else None,
    )
