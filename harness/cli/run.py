"""`mlperf-vllm run`: one LoadGen run (performance, accuracy or both); its arguments, vLLM's
engine flags among them."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.benchmarks import SCENARIOS, scenario_name
from harness.cli.common import EXIT_ERROR, strict_code
from harness.cli.flags import (
    Parser,
    accuracy_level_of,
    add_accuracy_level_argument,
    add_benchmark_argument,
    add_mlflow_arguments,
    add_round_argument,
    add_run_name_arguments,
    choose_round_for,
    tracking_config,
)
from harness.errors import UsageError
from sut.routing import DEFAULT_ROUTING, ROUTINGS


def add_parser(sub) -> None:
    run = sub.add_parser(
        "run",
        help="one LoadGen run (performance, accuracy or both)",
        description="Unrecognised --flags are parsed as vLLM engine flags "
        "(the ones `vllm serve` takes), e.g. --max-num-seqs 256.",
    )
    _add_run_arguments(run)


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    add_benchmark_argument(p)
    p.add_argument("--scenario", required=True, type=scenario_name, choices=SCENARIOS)
    p.add_argument("--mode", default="performance", choices=["performance", "accuracy", "both"])
    p.add_argument("--model", required=True, type=Path, help="local checkpoint folder")
    p.add_argument(
        "--dataset",
        required=True,
        type=Path,
        help="preprocessed dataset (.json, .jsonl, .parquet, .pkl with --allow-pickle)",
    )
    p.add_argument("--output", required=True, type=Path, help="folder for logs and results")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a completed run already in --output (refused without it)",
    )
    p.add_argument("--user-conf", type=Path, help="LoadGen user.conf (see user_confs/)")
    p.add_argument("--audit-config", type=Path, help="compliance audit.config (e.g. TEST06)")
    p.add_argument(
        "--test06",
        action="store_true",
        help="after the run's tests, compliance TEST06 on the same engine: its logs and "
        "verify_accuracy.txt in OUTPUT/TEST06 (package finds them there)",
    )
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
        "--output-lengths",
        metavar="COLUMN",
        help="with --ignore-eos, performance mode: each sample's output length from this "
        "integer column of the dataset (a benchmark's output length profile with dummy "
        "weights, instead of every output --max-tokens long)",
    )
    p.add_argument(
        "--allow-pickle",
        action="store_true",
        help="allow loading .pkl datasets (unpickling runs code from the file)",
    )
    add_accuracy_level_argument(p)
    add_round_argument(p)
    p.add_argument(
        "--offline-order",
        default="arrival",
        choices=["arrival", "longest-first", "shortest-first"],
        help="Offline: the order the query's samples go to the engine, by prompt length "
        "(a SUT may process them in any order; default: LoadGen's)",
    )
    p.add_argument(
        "--engine-line",
        metavar="CONF",
        help="a conf with `# engine <benchmark>.<Scenario>: <flags> | ...` lines (e.g. "
        "user_confs/examples/h200.conf): its line for this benchmark and scenario is applied "
        "as if typed first (flags given here win)",
    )
    p.add_argument(
        "--prefill-policy",
        metavar="CAP[xEVERY[@MS]]",
        help="Server/Interactive: our scheduler in vLLM's engine core (sut/scheduling.py): at "
        "most CAP prefill tokens per step, and with xEVERY prefill on one step in EVERY while "
        "streams decode, or at once when a prompt has waited MS ms (e.g. 1024, 4096x4, "
        "8192x4@150; 0: vLLM's own scheduling)",
    )
    p.add_argument(
        "--dp-routing",
        default=DEFAULT_ROUTING,
        choices=ROUTINGS,
        help="with --data-parallel-size N > 1: who picks each request's engine: ours (the SUT "
        "sends it to the engine with the least outstanding work, prompts awaiting their prefill "
        "weighed above decodes; sut/routing.py) or vllm (vLLM's own balancer)",
    )
    p.add_argument(
        "--engine-stats",
        action="store_true",
        help="Server/Interactive: sample vLLM's scheduler stats (running, waiting, KV cache use, "
        "preemptions) into timeline.json / timeline.png (turns vLLM's stats on: some front-end "
        "work per token)",
    )
    p.add_argument(
        "--target-qps",
        type=float,
        metavar="QPS",
        help="LoadGen's target rate on top of the user.conf: Server/Interactive target_qps, "
        "Offline offline_expected_qps (for a shell loop over rates; recorded in result.json "
        "and MLflow)",
    )
    p.add_argument(
        "--min-duration",
        type=float,
        metavar="S",
        help="LoadGen's min_duration in seconds on top of the user.conf (below 600: not "
        "compliant, which the run says)",
    )
    p.add_argument(
        "--min-query-count",
        type=int,
        metavar="N",
        help="LoadGen's min_query_count on top of the user.conf",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="vLLM's own output (start-up, warnings) on the terminal as well; without it, it "
        "goes to OUTPUT/engine.log once the engine started (a failed start's to "
        "OUTPUT/engine_start.log, with its root cause on the terminal)",
    )
    p.add_argument(
        "--profile",
        metavar="STEPS[@SKIP]",
        help="vLLM's torch profiler over STEPS engine steps of the performance test, after "
        "skipping its first SKIP steps: traces, vLLM's kernel tables and a summary (step time, "
        "device busy share, kernel time by category) in OUTPUT/profile; result.json records "
        "it under `profile`. A diagnostic: writing the traces stalls the engine a moment",
    )
    p.add_argument(
        "--warmup-samples",
        type=int,
        default=0,
        metavar="N",
        help="generate N prompts before the LoadGen test, untimed: the dataset's lengths, "
        "none of its prompts (the first passes pay for kernel selection and graph capture)",
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
    add_mlflow_arguments(p)
    add_run_name_arguments(p)


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
    policy_text = getattr(args, "prefill_policy", None)
    if policy_text:
        from sut.scheduling import PolicyError, PrefillPolicy

        try:
            policy = PrefillPolicy.parse(policy_text)
        except PolicyError as exc:
            raise UsageError(f"--prefill-policy: {exc}") from None
        if policy.active and overrides.get("scheduler_cls"):
            raise UsageError(
                "--prefill-policy installs its own scheduler_cls: drop --scheduler-cls "
                f"{overrides['scheduler_cls']} or the policy"
            )
        overrides.update(policy.engine_kwargs(overrides.get("additional_config")))
    return overrides


def build_run_request(args: argparse.Namespace, extra: list[str]):
    """The run's flags as a RunRequest; `extra`: the flags `run` does not know (engine flags)."""
    from harness.resources import resolve_user_path
    from harness.run.runner import RunRequest

    return RunRequest(
        benchmark=args.benchmark,
        scenario=args.scenario,
        mode=args.mode,
        model=args.model,
        dataset=args.dataset,
        output=args.output,
        user_conf=resolve_user_path(args.user_conf),
        audit_config=resolve_user_path(args.audit_config),
        engine_overrides=_engine_overrides(args, extra),
        loadgen_overrides=loadgen_overrides(args),
        allow_pickle=args.allow_pickle,
        progress=not args.no_progress,
        max_tokens=args.max_tokens,
        ignore_eos=args.ignore_eos,
        output_lengths=args.output_lengths,
        accuracy_level=accuracy_level_of(args, args.benchmark),
        evaluate=not args.no_evaluate,
        nltk_data=args.nltk_data,
        submission=args.submission,
        round=args.round,
        offline_order=args.offline_order,
        engine_stats=args.engine_stats,
        profile=args.profile,
        verbose=args.verbose,
        dp_routing=args.dp_routing,
        warmup_samples=args.warmup_samples,
        price_per_hour=args.price_per_hour,
        stall_timeout_s=args.stall_timeout or None,
        engine_start_timeout_s=args.engine_start_timeout or None,
        overwrite=args.overwrite,
        test06=args.test06,
    )


def loadgen_overrides(args: argparse.Namespace) -> dict[str, float]:
    """The LoadGen settings given on the command line (harness.run.settings.OVERRIDES)."""
    given = {
        "target_qps": args.target_qps,
        "min_duration_s": args.min_duration,
        "min_query_count": args.min_query_count,
    }
    return {k: v for k, v in given.items() if v is not None}


def run_request_from_argv(argv: list[str]):
    """A RunRequest from a `run` command line (calibrate's in-process trials take the same
    flags as its child runs); argparse reports bad flags as `run` would."""
    p = Parser(prog="mlperf-vllm run", add_help=False)
    _add_run_arguments(p)
    args, extra = p.parse_known_args(argv)
    return build_run_request(args, extra)


def cmd_run(args: argparse.Namespace, extra: list[str]) -> int:
    from harness import tracking
    from harness.folder_lock import one_writer
    from harness.run.runner import prepare, run
    from harness.run.summary import render_result
    from harness.submission.compliance import verify_test06_run
    from harness.submission.preflight import settings_check

    if args.submission or args.round:
        print(f"{choose_round_for(args, args.benchmark).note}", flush=True)

    req = build_run_request(args, extra)
    with one_writer(req.output, "--output"):  # a second writer of the folder stops here
        prepared = prepare(req)  # bad input stops here: no MLflow run, no mlflow.db
        cfg = tracking_config(args)
        tracking.check_reachable(cfg)  # before any engine starts
        name = args.run_name or tracking.run_name(req, args.output)
        with tracking.tracked_run(cfg, name, tags=args.tags, output_dir=args.output) as trk:
            outcome = run(
                req,
                prepared=prepared,
                check_settings=settings_check,
                check_test06=verify_test06_run,
            )
            print(render_result(outcome.result), flush=True)
            print(f"results: {outcome.path}")
    if trk.logging_error:
        return EXIT_ERROR
    return strict_code(
        args, outcome.result.performance, outcome.result.accuracy, outcome.result.test06
    )
