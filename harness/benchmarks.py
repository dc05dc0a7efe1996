"""Benchmark presets: every fact about an MLPerf LLM benchmark lives here as data.

One frozen dataclass per benchmark, kept in a single registry, the way evaluation harnesses
keep tasks as data. Nothing else in the project branches on model names.
Numbers are those of LoadGen 6.0.x's mlperf.conf and the MLCommons reference implementations.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType

SCENARIOS = ("Offline", "Server", "Interactive", "SingleStream")


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
    server_limits: LatencyLimits | None = None
    # Which accuracy preset (evaluation.targets) applies: interactive variants share the base one.
    accuracy_preset: str = ""
    accuracy_levels: tuple[str, ...] = ("99",)
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


def _presets() -> dict[str, Benchmark]:
    llama3_8b = Benchmark(
        name="llama3_1-8b",
        loadgen_model="llama3_1-8b",
        model_id="meta-llama/Llama-3.1-8B-Instruct",
        dataset_description="CNN/DailyMail validation, cnn_eval.json",
        schema=_CNN,
        total_sample_count=13368,
        performance_sample_count=13368,
        sampling=_8B_SAMPLING,
        scenarios=("Offline", "Server", "Interactive"),
        server_limits=LatencyLimits(2000, 100),
        accuracy_preset="llama3_1-8b",
    )
    edge = replace(
        llama3_8b,
        name="llama3_1-8b-edge",
        loadgen_model="llama3_1-8b-edge",
        dataset_description="CNN/DailyMail 5000-sample subset, sample_cnn_eval_5000.json",
        total_sample_count=5000,
        performance_sample_count=5000,
        scenarios=("Offline", "SingleStream"),
        server_limits=None,
        accuracy_preset="llama3_1-8b-edge",
    )
    llama2_70b = Benchmark(
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
        server_limits=LatencyLimits(2000, 200),
        accuracy_preset="llama2-70b",
        accuracy_levels=("99", "99.9"),
    )
    llama3_405b = Benchmark(
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
        server_limits=LatencyLimits(6000, 175),
        accuracy_preset="llama3_1-405b",
    )
    presets = [
        llama3_8b,
        _interactive(llama3_8b, LatencyLimits(500, 30)),
        edge,
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
