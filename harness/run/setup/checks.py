"""The checks a run makes before anything is written and before its engine starts: the run's
inputs (mode, SUT options, benchmark, the output folder and an earlier run in it, the model
path, user.conf, audit config), the user.conf lines LoadGen would ignore, NLTK's punkt for an
accuracy run, the model folder against the engine config and the dataset. Each failure is one
UsageError line."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from harness.benchmarks import Benchmark, resolve
from harness.datasets import (
    LoadedDataset,
    check_tokenizer_matches,
    model_vocab_and_context,
    validate_against_model,
)
from harness.errors import UsageError
from harness.files import check_output_dir
from harness.run.record.engine_log import ENGINE_LOG, ENGINE_START_LOG
from harness.run.record.profile import PROFILE_DIR
from harness.run.record.result import RESULT_FILE, TEST06_DIR, RunResult
from harness.run.setup.preflight_model import check_local_devices, check_model_tokenizer
from harness.run.setup.settings import LOADGEN_SCENARIO, NO_AUDIT_NAME
from harness.run.setup.spec import MODES, RunSpec
from harness.run.setup.user_conf import ignored_lines
from harness.run.setup.weights import check_model_weights
from sut.engine import EngineConfig
from sut.frontend import placed_by_vllm
from sut.routing import PER_NODE_BALANCING


def check_sut_options(req: Any) -> None:
    from sut.offline import ORDERS

    if req.offline_order not in ORDERS:
        raise UsageError(
            f"unknown --offline-order {req.offline_order!r}: choose one of {', '.join(ORDERS)}"
        )
    if req.output_lengths is not None:
        if not req.ignore_eos:
            raise UsageError(
                "--output-lengths sets each sample's output length, which holds only when "
                "outputs ignore EOS (dummy weights): add --ignore-eos"
            )
        if req.modes() != ["performance"] or req.test06 or req.audit_config is not None:
            raise UsageError(
                "--output-lengths cuts each output at its sample's length, so its outputs "
                "cannot be scored nor audited: use it with --mode performance alone"
            )
    if req.profile is not None and req.submission:
        raise UsageError(
            "--profile stalls the engine while it writes its traces, so a profiled run is no "
            "submission result: drop --profile or --submission"
        )
    if req.warmup_samples < 0:
        raise UsageError("--warmup-samples must be 0 or more")
    if req.price_per_hour is not None and req.price_per_hour <= 0:
        raise UsageError("--price-per-hour must be a positive number of dollars, e.g. 3.50")
    dp = int(req.engine_overrides.get("data_parallel_size") or 1)
    per_node_lb = [k for k in PER_NODE_BALANCING if req.engine_overrides.get(k)]
    if dp > 1 and req.dp_routing == "ours" and per_node_lb:
        raise UsageError(
            f"--dp-routing ours needs one front end over every data-parallel engine, and "
            f"{per_node_lb[0]} balances per node: add --dp-routing vllm"
        )
    if req.frontend == "per-engine" and dp > 1 and placed_by_vllm(req.engine_overrides):
        raise UsageError(
            "--frontend per-engine starts each engine on this machine by itself, and this "
            "data-parallel layout is placed by vLLM (Ray, several nodes or their ranks): drop "
            "--frontend per-engine"
        )
    if req.frontend == "per-engine" and req.dp_routing != "ours":
        raise UsageError(
            "--frontend per-engine sends each request to an engine with our router: drop "
            "--dp-routing vllm, or use --frontend shared to compare with vLLM's balancer"
        )
    if req.offline_order != "arrival" and (
        req.scenario != "Offline" or dp > 1 or req.frontend_in_use != "shared"
    ):
        raise UsageError(
            "--offline-order applies to Offline on one engine (data_parallel_size 1): drop it "
            f"for {req.scenario}" + (f" with data_parallel_size {dp}" if dp > 1 else "")
        )


# What a run writes into its output folder; an earlier run's are removed together before a
# new run starts there, so no file of one run ever sits beside the result.json of another.
RUN_OUTPUTS = (
    "performance",
    "accuracy",
    TEST06_DIR,
    RESULT_FILE,
    "audit.config",
    PROFILE_DIR,
    NO_AUDIT_NAME,
    ENGINE_START_LOG,
    ENGINE_LOG,
)


def earlier_run(output: Path, overwrite: bool) -> str | None:
    """The status of a run already in `output` (None: there is none). A completed run is
    refused unless `overwrite`; what it would take to go on is said in the error."""
    if not any((output / name).exists() for name in RUN_OUTPUTS):
        return None
    earlier = RunResult.read(output / RESULT_FILE)
    status = earlier.status if earlier is not None else "unfinished"
    if status == "completed" and not overwrite:
        started = f" started {earlier.started_at}" if earlier and earlier.started_at else ""
        raise UsageError(
            f"{output} holds a completed run ({status}{started}): pass a new --output, or "
            "--overwrite to replace that run"
        )
    return status


def clear_earlier_run(output: Path, status: str) -> None:
    print(f"replacing the earlier {status} run in {output}", flush=True)
    for name in RUN_OUTPUTS:
        path = output / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def check_model_path(model: Path) -> None:
    if not model.exists():
        raise UsageError(f"model {model} does not exist: pass --model with a local checkpoint")
    if model.is_file() and model.suffix != ".gguf":
        raise UsageError(
            f"model {model} is a file: pass --model the checkpoint folder (config.json, "
            "tokenizer, weights)"
        )


def ignored_user_conf_lines(req: Any, loadgen_model: str) -> list[str]:
    """user.conf lines LoadGen would drop without a word: a refusal under --submission, one
    warning otherwise."""
    assert req.user_conf is not None
    try:
        ignored = ignored_lines(req.user_conf, loadgen_model, LOADGEN_SCENARIO[req.scenario])
    except Exception as exc:  # the check is a help: without it the run is what it was
        return [f"could not check the user.conf keys with LoadGen ({exc})"]
    if not ignored:
        return []
    what = (
        f"user.conf {req.user_conf} has line(s) LoadGen ignores for {loadgen_model} "
        f"{req.scenario}: " + "; ".join(i.describe() for i in ignored)
    )
    if req.submission:
        raise UsageError(what + ": fix them (a submission runs with the settings it names)")
    return [what]


def require_punkt(nltk_data: Path | None) -> None:
    """An accuracy run scores its log at the end: find NLTK's punkt before the engine starts,
    not after an hour of generation."""
    from evaluation.errors import EvaluationError
    from evaluation.sentences import find_punkt

    try:
        find_punkt(nltk_data)
    except EvaluationError as exc:
        raise UsageError(
            f"{exc}; or pass --no-evaluate and score the log later with `mlperf-vllm evaluate`"
        ) from None


def check_run_inputs(req: RunSpec) -> tuple[Benchmark, str, str | None]:
    """The run's own inputs: mode, SUT options, benchmark and scenario, output folder (and the
    run it holds), model path, user.conf, audit config. (benchmark, LoadGen model, earlier)."""
    if req.mode not in MODES:
        raise UsageError(f"unknown mode {req.mode!r}: choose one of {', '.join(MODES)}")
    check_sut_options(req)
    try:
        bench, loadgen_model = resolve(req.benchmark, req.scenario)
    except (KeyError, ValueError) as exc:
        raise UsageError(str(exc).strip("'\"")) from None
    check_output_dir(req.output, "--output")
    earlier = earlier_run(req.output, req.overwrite)
    check_model_path(req.model)
    if req.user_conf is not None and not req.user_conf.is_file():
        raise UsageError(
            f"user.conf {req.user_conf} does not exist: pass --user-conf with an existing file "
            "(see user_confs/)"
        )
    if req.test06 and req.audit_config is not None:
        raise UsageError(
            "--test06 runs TEST06 after the run's own tests with the shipped TEST06 settings, "
            "and --audit-config turns every test of the run into an audit test: pass one of them"
        )
    if req.audit_config is not None and not req.audit_config.is_file():
        raise UsageError(
            f"audit config {req.audit_config} does not exist: pass --audit-config with the "
            "compliance test's audit.config"
        )
    return bench, loadgen_model, earlier


def check_model(
    req: RunSpec, engine_config: EngineConfig, dataset: LoadedDataset, max_tokens: int
) -> None:
    """The model folder against the engine config (weights, tokenizer, devices) and the
    dataset's prompts against the model (vocabulary, context length)."""
    load_format = str(engine_config.kwargs.get("load_format", "auto"))
    check_model_weights(req.model, load_format)
    check_model_tokenizer(req.model, engine_config.kwargs)
    check_local_devices(engine_config.kwargs)
    if req.model.is_dir():
        vocab, ctx = model_vocab_and_context(req.model)
        max_len = engine_config.kwargs.get("max_model_len") or ctx
        if load_format != "dummy":
            check_tokenizer_matches(req.model, vocab)
        validate_against_model(
            dataset.prompts,
            vocab_size=vocab,
            max_model_len=max_len,
            max_tokens=max_tokens,
            path=dataset.path,
        )
