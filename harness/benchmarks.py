"""Benchmark presets: every fact about an MLPerf LLM benchmark lives here as data.

One frozen dataclass per benchmark, kept in a single registry, the way evaluation harnesses
keep tasks as data: names (ours, LoadGen's, the submission checker's), scenarios, sample
counts, sampling, latency limits, the accuracy targets and how the outputs are scored.
Nothing else in the project branches on model names or keeps its own table of them
(tests/test_benchmarks.py checks that); `evaluation` reads the accuracy facts from here, and the
submission rounds name the presets they accept.
Numbers are those of LoadGen 6.0.x's mlperf.conf, the MLCommons reference implementations and
the submission checker's accuracy tables (v6.0/v6.1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from harness.errors import did_you_mean

SCENARIOS = ("Offline", "Server", "Interactive", "SingleStream")


def scenario_name(value: str) -> str:
    """A scenario as typed (`server`, `OFFLINE`) -> its name; the name itself otherwise, for
    the parser's choices to refuse with the list."""
    by_lower = {s.lower(): s for s in SCENARIOS}
    return by_lower.get(value.strip().lower(), value)


@dataclass(frozen=True)
class DatasetSchema:
    """Columns of the preprocessed dataset file the reference ships."""

    prompt_column: str  # token ids of the already-templated prompt
    target_column: str  # reference answer text, scored by evaluation
    text_column: str | None = "input"  # prompt text (optional, for humans)
    metric_column: str | None = None  # 405B: per-row metric name
    official_format: str = "json"  # json (CNN/DM) or pickle (OpenOrca, 405B mix)


@dataclass(frozen=True)
class SamplingConfig:
    """Greedy decoding as the reference does it; the model's own EOS ends a sample."""

    max_tokens: int
    min_tokens: int = 1
    temperature: float = 0.0
    top_k: int = 1
    top_p: float = 1.0
    seed: int = 42

    def is_greedy(self) -> bool:
        return self.temperature == 0.0 and self.top_k in (1, -1, 0)


@dataclass(frozen=True)
class LatencyLimits:
    """Server-scenario p99 limits in milliseconds (time to first token, time per output token)."""

    ttft_ms: float
    tpot_ms: float


@dataclass(frozen=True)
class Reference:
    """One metric the checker judges: our metric name, the checker's, the reference value and
    the window `reference * lower_fraction <= value [<= reference * upper_fraction]`."""

    metric: str
    checker_name: str
    reference: float
    lower_fraction: float
    upper_fraction: float | None = None
    # A total over the whole dataset (gen_len: characters of all predictions): its samples.
    total_over: int | None = None


@dataclass(frozen=True)
class AccuracySpec:
    """How a benchmark's accuracy is scored and judged (evaluation reads it)."""

    checker_models: Mapping[str, str]  # accuracy level -> the checker's model name
    references: Mapping[str, tuple[Reference, ...]]  # accuracy level -> checked metrics
    scoring: str  # "summary" (CNN/DailyMail, OpenOrca: ROUGE) or "longbench" (405B mix)
    report_style: str  # the reference script whose accuracy.txt we write
    dataset_hint: str  # the official dataset file, named in errors

    @property
    def levels(self) -> tuple[str, ...]:
        return tuple(self.references)


@dataclass(frozen=True)
class Benchmark:
    name: str  # our preset name, also the LoadGen model name given to FromConfig
    loadgen_model: str
    model_id: str  # Hugging Face id of the checkpoint the rules name
    dataset_description: str
    schema: DatasetSchema
    total_sample_count: int
    performance_sample_count: int
    sampling: SamplingConfig
    scenarios: tuple[str, ...]
    accuracy: AccuracySpec
    server_limits: LatencyLimits | None = None
    # `calibrate`'s default seconds per Server trial: a trial must hold several sample
    # latencies in its steady part to tell a queue that grows from one that fills (a 70B
    # sample takes 10-60 s near capacity on one H200; 60 s trials left it "not judged")
    calibrate_trial_s: float = 60.0
    # The preset whose accuracy run this is: interactive variants score as their base one.
    accuracy_preset: str = ""
    notes: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    def loadgen_name_for(self, scenario: str) -> str:
        """LoadGen model name for a scenario: Interactive is Server under `<model>-interactive`."""
        if scenario == "Interactive" and not self.loadgen_model.endswith("-interactive"):
            interactive = f"{self.loadgen_model}-interactive"
            if interactive not in BENCHMARKS:
                raise KeyError(f"{self.name} has no interactive variant")
            return interactive
        return self.loadgen_model

    def supports(self, scenario: str) -> bool:
        return scenario in self.scenarios

    @property
    def accuracy_levels(self) -> tuple[str, ...]:
        return self.accuracy.levels


_CNN = DatasetSchema(prompt_column="tok_input", target_column="output", official_format="json")
_ORCA = DatasetSchema(prompt_column="tok_input", target_column="output", official_format="pickle")
_MIX = DatasetSchema(
    prompt_column="tok_input",
    target_column="gt_output",
    metric_column="metric",
    official_format="pickle",
)

_8B_SAMPLING = SamplingConfig(max_tokens=128)
_70B_SAMPLING = SamplingConfig(max_tokens=1024)
_405B_SAMPLING = SamplingConfig(max_tokens=2000)


_ROUGE_NAMES = {
    "rouge1": "ROUGE1",
    "rouge2": "ROUGE2",
    "rougeL": "ROUGEL",
    "rougeLsum": "ROUGELSUM",
}


def _rouge(values: Mapping[str, float], fraction: float) -> tuple[Reference, ...]:
    return tuple(Reference(m, _ROUGE_NAMES[m], v, fraction) for m, v in values.items())


def _cnn_dailymail(rouge: Mapping[str, float], gen_len: int, samples: int) -> tuple[Reference, ...]:
    # gen_len (characters of all postprocessed predictions) must stay within 90-110%.
    return _rouge(rouge, 0.99) + (
        Reference("gen_len", "GEN_LEN", gen_len, 0.9, 1.1, total_over=samples),
    )


def _accuracy(
    checker_models: dict[str, str],
    references: dict[str, tuple[Reference, ...]],
    scoring: str,
    report_style: str,
    dataset_hint: str,
) -> AccuracySpec:
    return AccuracySpec(
        MappingProxyType(checker_models),
        MappingProxyType(references),
        scoring,
        report_style,
        dataset_hint,
    )


_70B_ROUGE = {"rouge1": 44.4312, "rouge2": 22.0352, "rougeL": 28.6162}
_70B_TOKENS = Reference("tokens_per_sample", "TOKENS_PER_SAMPLE", 294.45, 0.9, 1.1)


def _interactive(base: Benchmark, limits: LatencyLimits) -> Benchmark:
    """The `<model>-interactive` LoadGen model: the same task under tighter latency limits."""
    name = f"{base.name}-interactive"
    return replace(
        base,
        name=name,
        loadgen_model=name,
        scenarios=("Interactive", "Server"),
        server_limits=limits,
    )


def _llama3_8b() -> Benchmark:
    """Llama 3.1 8B on CNN/DailyMail (datacenter)."""
    return Benchmark(
        name="llama3_1-8b",
        loadgen_model="llama3_1-8b",
        model_id="meta-llama/Llama-3.1-8B-Instruct",
        dataset_description="CNN/DailyMail validation, cnn_eval.json",
        schema=_CNN,
        total_sample_count=13368,
        performance_sample_count=13368,
        sampling=_8B_SAMPLING,
        scenarios=("Offline", "Server", "Interactive"),
        accuracy=_accuracy(
            {"99": "llama3.1-8b"},
            {
                "99": _cnn_dailymail(
                    {"rouge1": 38.7792, "rouge2": 15.9075, "rougeL": 24.4957, "rougeLsum": 35.793},
                    8167644,
                    13368,
                )
            },
            "summary",
            "cnn_dailymail",
            "cnn_eval.json",
        ),
        server_limits=LatencyLimits(2000, 100),
        accuracy_preset="llama3_1-8b",
    )


def _llama3_8b_edge(llama3_8b: Benchmark) -> Benchmark:
    """The 8B on the 5,000-sample CNN/DailyMail subset (edge: Offline and SingleStream)."""
    return replace(
        llama3_8b,
        name="llama3_1-8b-edge",
        loadgen_model="llama3_1-8b-edge",
        dataset_description="CNN/DailyMail 5000-sample subset, sample_cnn_eval_5000.json",
        total_sample_count=5000,
        performance_sample_count=5000,
        scenarios=("Offline", "SingleStream"),
        accuracy=_accuracy(
            {"99": "llama3.1-8b-edge"},
            {
                "99": _cnn_dailymail(
                    {"rouge1": 39.06, "rouge2": 16.1147, "rougeL": 24.6375, "rougeLsum": 36.124},
                    3051113,
                    5000,
                )
            },
            "summary",
            "cnn_dailymail",
            "sample_cnn_eval_5000.json",
        ),
        server_limits=None,
        accuracy_preset="llama3_1-8b-edge",
    )


def _llama2_70b() -> Benchmark:
    """Llama 2 70B on OpenOrca."""
    return Benchmark(
        name="llama2-70b",
        loadgen_model="llama2-70b",
        model_id="meta-llama/Llama-2-70b-chat-hf",
        dataset_description="OpenOrca 24576-sample pickle, "
        "open_orca_gpt4_tokenized_llama.sampled_24576.pkl",
        schema=_ORCA,
        total_sample_count=24576,
        performance_sample_count=24576,
        sampling=_70B_SAMPLING,
        scenarios=("Offline", "Server", "Interactive"),
        accuracy=_accuracy(
            {"99": "llama2-70b-99", "99.9": "llama2-70b-99.9"},
            {
                "99": _rouge(_70B_ROUGE, 0.99) + (_70B_TOKENS,),
                "99.9": _rouge(_70B_ROUGE, 0.999) + (_70B_TOKENS,),
            },
            "summary",
            "open_orca",
            "the OpenOrca pickle",
        ),
        server_limits=LatencyLimits(2000, 200),
        calibrate_trial_s=240.0,
        accuracy_preset="llama2-70b",
    )


def _llama3_405b() -> Benchmark:
    """Llama 3.1 405B on the mixed long-context set."""
    return Benchmark(
        name="llama3_1-405b",
        loadgen_model="llama3_1-405b",
        model_id="meta-llama/Llama-3.1-405B-Instruct",
        dataset_description="mixed long-context set (8313 rows), "
        "mlperf_llama3.1_405b_dataset_8313_processed.pkl",
        schema=_MIX,
        total_sample_count=8313,
        performance_sample_count=8313,
        sampling=_405B_SAMPLING,
        scenarios=("Offline", "Server", "Interactive"),
        accuracy=_accuracy(
            {"99": "llama3.1-405b"},
            {
                "99": (
                    Reference("rougeL", "ROUGEL", 21.6666, 0.99),
                    Reference("exact_match", "exact_match", 90.1335, 0.99),
                    Reference("tokens_per_sample", "TOKENS_PER_SAMPLE", 684.68, 0.9, 1.1),
                )
            },
            "longbench",
            "longbench",
            "the 405B dataset pickle",
        ),
        server_limits=LatencyLimits(6000, 175),
        calibrate_trial_s=600.0,  # ~685 output tokens at up to 175 ms each
        accuracy_preset="llama3_1-405b",
    )


def _presets() -> dict[str, Benchmark]:
    llama3_8b, llama2_70b, llama3_405b = _llama3_8b(), _llama2_70b(), _llama3_405b()
    presets = [
        llama3_8b,
        _interactive(llama3_8b, LatencyLimits(500, 30)),
        _llama3_8b_edge(llama3_8b),
        llama2_70b,
        _interactive(llama2_70b, LatencyLimits(450, 40)),
        llama3_405b,
        _interactive(llama3_405b, LatencyLimits(4500, 80)),
    ]
    return {x.name: x for x in presets}


BENCHMARKS: MappingProxyType[str, Benchmark] = MappingProxyType(_presets())


class UnknownBenchmarkError(KeyError):
    pass


def get_benchmark(name: str) -> Benchmark:
    try:
        return BENCHMARKS[name]
    except KeyError:
        known = ", ".join(BENCHMARKS)
        raise UnknownBenchmarkError(f"unknown benchmark {name!r}: choose one of {known}") from None


def _submission_names() -> dict[str, tuple[str, str]]:
    """The submission checker's model names (the model folders `mlperf-vllm rounds` lists:
    llama3.1-8b, llama2-70b-99.9, ...) -> (our preset, the accuracy level the name carries).
    Interactive variants share their base's names, so only base presets are read."""
    return {
        checker: (b.name, level)
        for b in BENCHMARKS.values()
        if b.name == b.accuracy_preset
        for level, checker in b.accuracy.checker_models.items()
    }


SUBMISSION_NAMES: Mapping[str, tuple[str, str]] = MappingProxyType(_submission_names())


def benchmark_names() -> tuple[str, ...]:
    """Every name `--benchmark` takes: the presets, then the submission names."""
    return (*BENCHMARKS, *(n for n in SUBMISSION_NAMES if n not in BENCHMARKS))


def lookup_benchmark(name: str) -> tuple[str, str | None]:
    """A benchmark as typed -> (its preset, the accuracy level the name implies or None).

    A preset name is itself (no level implied); a submission name is its preset, with its
    level where the benchmark has several (llama2-70b-99.9 -> llama2-70b at 99.9). Case is
    ignored. Raises UnknownBenchmarkError naming the known names (and the nearest one)."""
    key = name.strip()
    for candidate in (key, key.lower()):
        if candidate in BENCHMARKS:
            return candidate, None
        if candidate in SUBMISSION_NAMES:
            preset, level = SUBMISSION_NAMES[candidate]
            several = len(BENCHMARKS[preset].accuracy_levels) > 1
            return preset, level if several else None
    names = benchmark_names()
    hint = did_you_mean(key.lower(), names)
    submission = [n for n in SUBMISSION_NAMES if n not in BENCHMARKS]
    raise UnknownBenchmarkError(
        f"unknown benchmark {name!r}{hint}: choose a preset ({', '.join(BENCHMARKS)}) or a "
        f"submission name ({', '.join(submission)})"
    )


def resolve(name: str, scenario: str) -> tuple[Benchmark, str]:
    """The preset and the LoadGen model name for a (benchmark, scenario) pair.

    `--benchmark llama3_1-8b --scenario Interactive` runs LoadGen's Server scenario under the
    `llama3_1-8b-interactive` name, which carries the tighter latency limits.
    """
    bench = get_benchmark(name)
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}: choose one of {', '.join(SCENARIOS)}")
    if not bench.supports(scenario):
        raise ValueError(
            f"{bench.name} has no {scenario} scenario in MLPerf: "
            f"choose one of {', '.join(bench.scenarios)}"
        )
    loadgen_name = bench.loadgen_name_for(scenario)
    return BENCHMARKS[loadgen_name], loadgen_name
