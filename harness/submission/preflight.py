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
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from harness.benchmarks import Benchmark
from harness.run.record.logs import ns_to_ms
from harness.run.record.result import PreflightVerdict
from harness.run.record.timeline import EARLY_STOPPING_MIN_QUERIES, early_stopping_min_queries
from harness.run.setup.settings import OFFLINE_SLACK, whole_passes
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


Problem = tuple[str, str]  # (problem, fix), as a Finding words them


@dataclass(frozen=True)
class Subject:
    """What the rules read: the effective settings, the benchmark, the scenario asked for and
    the other facts of the run."""

    eff: EffectiveSettings
    bench: Benchmark
    scenario: str
    facts: RunFacts

    @property
    def conf(self) -> str:
        """The shipped user.conf for this benchmark and scenario."""
        return f"user_confs/{self.bench.name.removesuffix('-interactive')}/{self.scenario.lower()}.conf"


@dataclass(frozen=True)
class Rule:
    """One named rule: `problems` yields what is wrong (nothing when the run keeps it).
    `scenarios`: the LoadGen scenarios it judges (empty: all); `fatal` False: advice only."""

    name: str
    problems: Callable[[Subject], Iterator[Problem]]
    scenarios: tuple[str, ...] = ()
    fatal: bool = True


def _min_duration(s: Subject) -> Iterator[Problem]:
    if s.eff.min_duration_ms < SUBMISSION_MIN_DURATION_MS:
        yield (
            f"min_duration {s.eff.min_duration_ms} ms is below {SUBMISSION_MIN_DURATION_MS} ms",
            f"remove the min_duration line from the user.conf, e.g. use {s.conf}",
        )


def _offline_query(s: Subject) -> Iterator[Problem]:
    spq, total = s.eff.offline_samples_per_query, s.bench.total_sample_count
    if spq < total:
        yield (
            f"the Offline query has {spq} samples, fewer than the dataset's {total}",
            f"set min_query_count >= {total} or drop the line (mlperf.conf has it)",
        )


def _offline_expected_qps(s: Subject) -> Iterator[Problem]:
    if s.eff.offline_expected_qps == LOADGEN_DEFAULT_QPS:
        rate = s.bench.total_sample_count / (s.eff.min_duration_ms / 1000 or 1)
        yield (
            "offline_expected_qps is LoadGen's default 1 (not calibrated): a system "
            f"faster than {rate:.1f} samples/s ends before min_duration and the run is INVALID",
            "run `mlperf-vllm calibrate` and use the user.conf it writes",
        )


def _server_target_qps(s: Subject) -> Iterator[Problem]:
    if s.eff.server_target_qps == LOADGEN_DEFAULT_QPS:
        yield (
            "target_qps is LoadGen's default 1 (valid, but likely far below this system's peak)",
            "run `mlperf-vllm calibrate --scenario " + s.scenario + "`",
        )


def _early_stopping(s: Subject) -> Iterator[Problem]:
    eff = s.eff
    issued = eff.server_queries
    if issued < EARLY_STOPPING_NONE_OVER:
        yield (
            f"the run issues about {issued} queries ({eff.server_target_qps:g} QPS for "
            f"{eff.min_duration_ms / 1000:g} s, min_query_count {eff.min_query_count}): "
            f"LoadGen's early stopping certifies a p99 only from {EARLY_STOPPING_NONE_OVER}"
            f" queries (none over a limit), {EARLY_STOPPING_MIN_QUERIES} with one, so the "
            "run is INVALID however fast the engine",
            f"set min_query_count = {EARLY_STOPPING_MIN_QUERIES} for this scenario in the "
            "user.conf",
        )


def _performance_sample_count(s: Subject) -> Iterator[Problem]:
    have, want = s.eff.performance_sample_count, s.bench.performance_sample_count
    if have != want:
        yield (
            f"performance_sample_count is {have}, the benchmark's is {want}",
            "remove performance_sample_count_override from the user.conf",
        )


def _dataset(s: Subject) -> Iterator[Problem]:
    bench = s.bench
    if s.facts.dataset_size != bench.total_sample_count:
        yield (
            f"the dataset has {s.facts.dataset_size} samples, {bench.name}'s has "
            f"{bench.total_sample_count}",
            f"use the full {bench.dataset_description}",
        )


def _seeds(s: Subject) -> Iterator[Problem]:
    """The round's seeds when a round is chosen, else the installed mlperf.conf's."""
    eff, rnd, ref = s.eff, s.facts.round, s.facts.reference_seeds
    if rnd is not None:
        bad = [k for k in SEED_KEYS if eff.seeds.get(k) != rnd.seeds[k]]
        if not bad:
            return
        other = round_of_seeds(eff.seeds)
        base = s.bench.name.removesuffix("-interactive")
        if other and not any(m.preset == base for m in get_round(other).models):
            other_has_it = False
        else:
            other_has_it = bool(other)
        yield (
            f"{', '.join(bad)} are not round {rnd.name}'s"
            + (f" (they are round {other}'s)" if other else ""),
            f"round {rnd.name}'s seeds come from the mlperf.conf of {rnd.seeds_loadgen} "
            "(a user.conf cannot set them): install it"
            + (f", or pass --round {other}" if other_has_it else ""),
        )
    elif ref:
        changed = [k for k in SEED_KEYS if k in ref and eff.seeds.get(k) != ref[k]]
        if changed:
            yield (
                f"{', '.join(changed)} differ from mlperf.conf",
                "remove the *_rng_seed lines from the user.conf",
            )


def _equal_issue(s: Subject) -> Iterator[Problem]:
    if not s.eff.sample_concatenate_permutation and not s.facts.audit_requested:
        yield (
            "sample_concatenate_permutation (equal issue mode) is off",
            "remove the sample_concatenate_permutation line from the user.conf",
        )


def _token_latencies(s: Subject) -> Iterator[Problem]:
    if s.bench.server_limits is not None and not s.eff.use_token_latencies:
        yield (
            "use_token_latencies is off",
            "remove the use_token_latencies line from the user.conf",
        )


def _latency_limits(s: Subject) -> Iterator[Problem]:
    lim = s.bench.server_limits
    if lim is None:
        return
    for name, value, want in (
        ("ttft_latency", s.eff.ttft_latency_ms, lim.ttft_ms),
        ("tpot_latency", s.eff.tpot_latency_ms, lim.tpot_ms),
    ):
        if value is not None and abs(value - want) > 1e-6:
            yield (
                f"{name} is {value:g} ms, {s.bench.name}'s limit is {want:g} ms",
                f"remove the {name} line from the user.conf",
            )


def _audit_file(s: Subject) -> Iterator[Problem]:
    if s.facts.stray_audit_files and not s.facts.audit_requested:
        yield (
            f"{', '.join(s.facts.stray_audit_files)} is present but no --audit-config was asked "
            "(LoadGen applies an audit.config it finds by name, replacing the test settings)",
            "delete it, or pass it with --audit-config for a compliance test",
        )


def _prefix_caching(s: Subject) -> Iterator[Problem]:
    if s.facts.engine_kwargs.get("enable_prefix_caching"):
        yield (
            "prefix caching is on (caching across queries is against the MLPerf LLM rules)",
            "drop --enable-prefix-caching / enable_prefix_caching=true",
        )


def _greedy(s: Subject) -> Iterator[Problem]:
    sampling = s.facts.sampling
    temperature = float(sampling.get("temperature", 0.0) or 0.0)
    top_k = sampling.get("top_k", 1)
    top_p = float(sampling.get("top_p", 1.0) if sampling.get("top_p") is not None else 1.0)
    if temperature != 0.0 or top_k not in (1, -1, 0, None) or top_p != 1.0:
        yield (
            f"sampling is not greedy (temperature {temperature:g}, top_k {top_k}, top_p {top_p:g})",
            "use the benchmark's greedy decoding: temperature 0, top_k 1",
        )


def _max_tokens(s: Subject) -> Iterator[Problem]:
    max_tokens = s.facts.sampling.get("max_tokens")
    if max_tokens is not None and max_tokens != s.bench.sampling.max_tokens:
        yield (
            f"max_tokens is {max_tokens}, {s.bench.name}'s is {s.bench.sampling.max_tokens}",
            "drop --max-tokens",
        )


def _ignore_eos(s: Subject) -> Iterator[Problem]:
    if s.facts.sampling.get("ignore_eos"):
        yield "ignore_eos is on (outputs of fixed length)", "drop --ignore-eos"


# In the order their findings are listed.
RULES: tuple[Rule, ...] = (
    Rule("min_duration", _min_duration),
    Rule("offline_query", _offline_query, scenarios=("Offline",)),
    Rule("offline_expected_qps", _offline_expected_qps, scenarios=("Offline",)),
    Rule("server_target_qps", _server_target_qps, scenarios=("Server",), fatal=False),
    Rule("early_stopping", _early_stopping, scenarios=("Server",)),
    Rule("performance_sample_count", _performance_sample_count),
    Rule("dataset", _dataset),
    Rule("seeds", _seeds),
    Rule("equal_issue", _equal_issue),
    Rule("token_latencies", _token_latencies, scenarios=("Server",)),
    Rule("latency_limits", _latency_limits, scenarios=("Server",)),
    Rule("audit_file", _audit_file),
    Rule("prefix_caching", _prefix_caching),
    Rule("greedy", _greedy),
    Rule("max_tokens", _max_tokens),
    Rule("ignore_eos", _ignore_eos),
)


def check(
    eff: EffectiveSettings, bench: Benchmark, scenario: str, facts: RunFacts
) -> list[Finding]:
    """Every reason this run cannot be a valid closed-division submission result: the findings
    of every rule in RULES that judges this LoadGen scenario."""
    subject = Subject(eff, bench, scenario, facts)
    return [
        Finding(rule.name, problem, fix, fatal=rule.fatal)
        for rule in RULES
        if not rule.scenarios or eff.scenario in rule.scenarios
        for problem, fix in rule.problems(subject)
    ]


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
