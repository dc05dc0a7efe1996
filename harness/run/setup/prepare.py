"""A run prepared: every check that needs no engine, done before one starts (an engine start
costs ~30 s here, minutes on a GPU) and before anything is written, and what they found
(`PreparedRun`), which the engine session and the runner take from here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness import files
from harness.benchmarks import Benchmark
from harness.datasets import LoadedDataset, load_dataset, output_lengths
from harness.errors import UsageError
from harness.run.record.profile import check_profile, profiler_config
from harness.run.setup.checks import (
    check_model,
    check_run_inputs,
    ignored_user_conf_lines,
    require_punkt,
)
from harness.run.setup.ray_cluster import check_ray_layout
from harness.run.setup.settings import (
    SettingsRequest,
    apply_overrides,
    build_test_settings,
    check_finite,
    check_overrides,
)
from harness.run.setup.spec import RunSpec
from sut.engine import EngineConfig


@dataclass(frozen=True)
class PreparedRun:
    request: RunSpec
    bench: Benchmark
    loadgen_model: str
    dataset: LoadedDataset
    engine_config: EngineConfig
    sampling: dict[str, Any]
    warnings: list[str]
    settings: Any  # mlperf_loadgen.TestSettings, built once (FromConfig: once per process)
    earlier: str | None = None  # an earlier run's status in `output`: its files get replaced
    cluster: dict[str, Any] | None = None  # the Ray cluster a Ray layout runs on (ray_cluster)
    output_lengths: list[int] | None = None  # per sample index (RunSpec.output_lengths)


def prepare(req: RunSpec) -> PreparedRun:
    """Every check that needs no engine: fail here, in seconds, not after an engine start,
    and before anything is written."""
    bench, loadgen_model, earlier = check_run_inputs(req)
    warnings: list[str] = []
    settings = _test_settings(req, loadgen_model, warnings)
    dataset = _load_run_dataset(req, bench)
    engine_config = _engine_config(req)
    max_tokens = req.max_tokens or bench.sampling.max_tokens
    check_model(req, engine_config, dataset, max_tokens)
    need, what = log_space(req, dataset.size, max_tokens)
    files.check_free_space(req.output, need, "--output", what)
    lengths = None  # each sample's own max_tokens: checked with the dataset, before vLLM loads
    if req.output_lengths is not None:
        least = 1 if req.scenario == "Offline" else 2
        lengths = output_lengths(dataset, req.output_lengths, max_tokens, least=least)
        warnings.append(
            f"output lengths from column {req.output_lengths!r} (mean "
            f"{sum(lengths) / len(lengths):.1f} tokens): a throughput study only"
        )
    cluster = _check_engine(req, engine_config)
    sampling = _sampling(req, bench, engine_config, lengths, warnings)
    return PreparedRun(
        req,
        bench,
        loadgen_model,
        dataset,
        engine_config,
        sampling,
        warnings,
        settings,
        earlier,
        cluster,
        lengths,
    )


def _test_settings(req: RunSpec, loadgen_model: str, warnings: list[str]) -> Any:
    """LoadGen's TestSettings of the first test (mlperf.conf, the user.conf, the command
    line's overrides), checked; what LoadGen would ignore or the flags override is warned of."""
    check_overrides(req.scenario, req.loadgen_overrides)
    settings = build_test_settings(
        SettingsRequest(loadgen_model, req.scenario, req.user_conf), req.modes()[0]
    )
    apply_overrides(settings, req.scenario, req.loadgen_overrides)
    # a zero rate can only come from a conf here: check_overrides refused a zero --target-qps
    check_finite(settings, req.scenario, str(req.user_conf or "mlperf.conf"))
    if req.loadgen_overrides:
        shown = ", ".join(f"{k} {v:g}" for k, v in sorted(req.loadgen_overrides.items()))
        warnings.append(f"LoadGen settings overridden on the command line: {shown}")
    if req.user_conf is not None:
        warnings += ignored_user_conf_lines(req, loadgen_model)
    return settings


def _load_run_dataset(req: RunSpec, bench: Benchmark) -> LoadedDataset:
    """The dataset, with its targets when the run scores accuracy (and what scoring needs)."""
    need_targets = "accuracy" in req.modes() and req.evaluate
    if need_targets:
        require_punkt(req.nltk_data)
        if req.accuracy_level is None:
            raise UsageError("no accuracy level to score at: pass --accuracy-level 99 or 99.9")
    return load_dataset(
        req.dataset, bench, allow_pickle=req.allow_pickle, need_targets=need_targets
    )


def _engine_config(req: RunSpec) -> EngineConfig:
    """The engine's configuration (RunSpec.engine_config: every layer in its declared order),
    with --profile's window among what the run sets."""
    window = check_profile(req.profile, req.engine_overrides)
    run: dict[str, Any] = {}
    if window is not None:
        if "performance" not in req.modes():
            raise UsageError("--profile records the performance test: add --mode performance")
        run["profiler_config"] = profiler_config(window, req.output)
    return req.engine_config(run)


def _check_engine(req: RunSpec, engine_config: EngineConfig) -> dict[str, Any] | None:
    """What only vLLM can judge, judged by vLLM, and a Ray layout's cluster: still before any
    engine starts. The cluster a Ray layout found (None without one)."""
    from sut.engine import EngineArgError, check_engine_config

    try:
        check_engine_config(
            engine_config,
            async_engine=not uses_offline_sut(
                req.scenario, engine_config.kwargs, req.frontend_in_use
            ),
        )
    except EngineArgError as exc:
        raise UsageError(str(exc)) from None
    return check_ray_layout(engine_config.kwargs)  # a Ray layout: its cluster, in seconds


def _sampling(
    req: RunSpec,
    bench: Benchmark,
    engine_config: EngineConfig,
    lengths: list[int] | None,
    warnings: list[str],
) -> dict[str, Any]:
    """The run's sampling parameters; a departure from the benchmark's is warned of."""
    s = bench.sampling
    sampling = {
        "max_tokens": req.max_tokens or s.max_tokens,
        "min_tokens": s.min_tokens,
        "temperature": s.temperature,
        "top_k": s.top_k,
        "top_p": s.top_p,
        "seed": s.seed,
        "ignore_eos": req.ignore_eos,
    }
    if req.max_tokens and req.max_tokens != s.max_tokens:
        warnings.append(f"max_tokens {req.max_tokens} differs from the benchmark's {s.max_tokens}")
    if req.ignore_eos and lengths is None:
        warnings.append("ignore_eos is on: outputs have fixed length (throughput study only)")
    if engine_config.prefix_caching:
        warnings.append("prefix caching is on: not compliant with the MLPerf LLM rules")
    return sampling


# What a run writes besides accuracy logs (LoadGen's detail and summary logs, result.json,
# timeline, environment), with room to spare; an accuracy log holds each sample's tokens as hex
# (8 characters an int32 token, plus its JSON); a profile, every rank's trace of its window.
LOG_BASE_BYTES = 4_000_000
ACCURACY_BYTES_PER_TOKEN = 9
PROFILE_BYTES = 64_000_000


def log_space(req: RunSpec, samples: int, max_tokens: int) -> tuple[int, str]:
    """Bytes the run's files may take in its output folder at most, and what they are."""
    need, parts = LOG_BASE_BYTES, ["its logs"]
    logged = (req.mode != "performance") + bool(req.test06 or req.audit_config)
    if logged:
        need += logged * samples * (max_tokens * ACCURACY_BYTES_PER_TOKEN + 100)
        parts.append(f"{logged} accuracy log(s) of {samples} samples x {max_tokens} tokens")
    if req.profile:
        need += PROFILE_BYTES
        parts.append("the profile's traces")
    return need, "this run (" + ", ".join(parts) + ")"


def uses_offline_sut(
    scenario: str, engine_kwargs: Mapping[str, Any], frontend: str = "shared"
) -> bool:
    """Offline on one engine runs `vllm.LLM`; everything else `AsyncLLM`, in this process or
    in one front-end process per engine (see build_sut)."""
    return (
        scenario == "Offline"
        and int(engine_kwargs.get("data_parallel_size") or 1) == 1
        and frontend == "shared"
    )
