"""`mlperf-vllm demo`: the whole job on the embedded default, on any machine, in minutes.

Builds a tiny random-weight Llama and a synthetic CNN/DailyMail-style dataset into a cache
folder (once), then runs llama3_1-8b Offline performance + accuracy under LoadGen with a smoke
user.conf, evaluates accuracy and prints the result table. Random weights cannot summarise, so
the accuracy verdict is FAIL by construction: the demo shows the machinery, not a score.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli import REPO_ROOT

SMOKE_CONF = REPO_ROOT / "user_confs" / "smoke" / "offline.conf"


def ensure_assets(cache: Path, samples: int) -> tuple[Path, Path]:
    from harness.assets import build_synthetic_dataset, build_tiny_model

    model = cache / "tiny-llama"
    if not (model / "model.safetensors").exists():
        print(f"building the tiny model in {model} ...", flush=True)
        build_tiny_model(model)
    dataset = cache / f"cnn_synthetic_{samples}.json"
    if not dataset.exists():
        print(f"building {samples} synthetic samples in {dataset} ...", flush=True)
        build_synthetic_dataset("llama3_1-8b", model, dataset, samples=samples)
    return model, dataset


def demo_request(args: argparse.Namespace):
    from harness.runner import RunRequest

    model, dataset = ensure_assets(args.cache, args.samples)
    return RunRequest(
        benchmark="llama3_1-8b",
        scenario="Offline",
        mode="both",
        model=model,
        dataset=dataset,
        output=args.output,
        user_conf=SMOKE_CONF,
    )


def run_demo(args: argparse.Namespace) -> int:
    from harness import tracking
    from harness.runner import run
    from harness.summary import render_result

    cfg = tracking.resolve_tracking(args, default_experiment="mlperf-vllm-demo")
    tracking.check_reachable(cfg)  # before the engine starts
    req = demo_request(args)
    with tracking.tracked_run(
        cfg, tracking.run_name(req, args.output), output_dir=args.output, tags={"command": "demo"}
    ) as trk:
        outcome = run(req)
        print(render_result(outcome.result), flush=True)
        print(f"results: {outcome.path}")
    if cfg.enabled and not trk.logging_error:
        print(
            f"logged to MLflow ({cfg.uri}, experiment {cfg.experiment!r}); browse with: "
            "mlflow ui --backend-store-uri sqlite:///mlflow.db --host 127.0.0.1"
        )
    print(
        "note: the tiny model has random weights, so accuracy FAIL is expected; the smoke "
        "user.conf is not compliant (see user_confs/ for submission settings)."
    )
    return 0
