"""`mlperf-vllm compliance test06`: apply TEST06's checks to a run's logs."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.benchmarks import SCENARIOS, scenario_name
from harness.cli.common import EXIT_OK, EXIT_STRICT, add_command


def add_parser(sub) -> None:
    comp = add_command(
        sub, "compliance", cmd_compliance, help="apply a compliance test's checks to a run's logs"
    )
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
        type=scenario_name,
        choices=SCENARIOS,
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


def cmd_compliance(args: argparse.Namespace) -> int:
    from harness.folder_lock import one_writer

    if not args.log_dir.is_dir():  # said by run_test06 in full; no folder made for it here
        return _test06(args)
    with one_writer(args.output or args.log_dir, "--output"):
        return _test06(args)


def _test06(args: argparse.Namespace) -> int:
    from harness.submission.compliance import run_test06

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
