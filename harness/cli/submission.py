"""The submission commands of `mlperf-vllm`: package, check-submission, rounds."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from harness.benchmarks import SCENARIOS, scenario_name
from harness.cli.common import EXIT_OK, EXIT_STRICT, add_command
from harness.cli.flags import (
    accuracy_level_of,
    add_accuracy_level_argument,
    add_benchmark_argument,
    add_round_argument,
    choose_round_for,
)
from harness.errors import UsageError


def add_package_commands(sub) -> None:
    pkg = add_command(sub, "package", cmd_package, help="assemble the submission folder of one run")
    pkg.add_argument("--run", required=True, type=Path, help="an `mlperf-vllm run` --output")
    pkg.add_argument(
        "--test06",
        type=Path,
        help="TEST06 output (the folder given to `compliance test06 --output`); default: "
        "the run's own TEST06 folder when it ran with --test06",
    )
    pkg.add_argument("--accuracy-run", type=Path, help="take accuracy/ from this run folder")
    pkg.add_argument("--system", required=True, help="system name (folder and systems/*.json)")
    pkg.add_argument(
        "--submitter", required=True, help="the submitting organization (the root's folder name)"
    )
    pkg.add_argument("--division", default="closed", choices=["closed", "open", "network"])
    pkg.add_argument(  # --output, as every command writes its result; --out for earlier scripts
        "--output",
        "--out",
        dest="out",
        required=True,
        type=Path,
        metavar="ROOT",
        help="submission root",
    )
    add_accuracy_level_argument(pkg)
    add_round_argument(pkg)
    pkg.add_argument(
        "--system-field",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="systems json field (repeatable), e.g. cooling=air",
    )
    pkg.add_argument(
        "--measurement",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="measurements.json field (repeatable)",
    )

    chk = add_command(
        sub,
        "check-submission",
        cmd_check_submission,
        help="apply the submission checker's rules to a submission root",
    )
    chk.add_argument(
        "root",
        type=Path,
        metavar="ROOT",
        help="submission root: the folder holding closed/ (or open/), as `package --output` wrote it",
    )
    add_round_argument(chk)
    add_benchmark_argument(
        chk,
        required=False,
        what="show only this benchmark's rows (with --scenario); every rule still counts",
    )
    chk.add_argument(
        "--scenario",
        type=scenario_name,
        choices=SCENARIOS,
        help="with --benchmark: show only this scenario's rows (case is ignored)",
    )
    add_accuracy_level_argument(chk)
    chk.add_argument(
        "--official",
        type=Path,
        metavar="INFERENCE_REPO",
        help="also run the official MLCommons submission checker from this clone of "
        "github.com/mlcommons/inference (its tools/submission/submission_checker) on ROOT, "
        "for the round checked; without it the command to run it is printed",
    )
    chk.add_argument(
        "--structure-only",
        action="store_true",
        help="only files, fields, truncation, hash and TEST06 (a demo-sized run "
        "cannot pass the result rules)",
    )

    rounds = add_command(
        sub,
        "rounds",
        cmd_rounds,
        help="the submission rounds: model folders, scenarios and seeds each accepts",
    )
    add_benchmark_argument(
        rounds,
        required=False,
        what="say which round this benchmark is prepared for, the scenarios and TEST06 it "
        "needs, and whether the installed LoadGen can make its results",
    )
    rounds.add_argument(
        "--scenario",
        type=scenario_name,
        choices=SCENARIOS,
        help="with --benchmark: refuse (exit 2, naming the ones it takes) a scenario the round "
        "does not accept for the benchmark",
    )
    add_accuracy_level_argument(rounds)
    add_round_argument(rounds)


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{flag} {item!r} is not KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def cmd_package(args: argparse.Namespace) -> int:
    from harness.folder_lock import one_writer

    with one_writer(args.out, "--output"):
        return _package(args)


def _package(args: argparse.Namespace) -> int:
    from harness.submission.package import PackageRequest, package

    report = package(
        PackageRequest(
            run=args.run,
            system=args.system,
            submitter=args.submitter,
            out=args.out,
            division=args.division,
            test06=args.test06,
            accuracy_run=args.accuracy_run,
            accuracy_level=args.accuracy_level,  # None: the round's (package resolves it)
            round=args.round,
            system_fields=_pairs(args.system_field, "--system-field"),
            measurements=_pairs(args.measurement, "--measurement"),
            command=tuple(["mlperf-vllm", *sys.argv[1:]]),
        )
    )
    print(
        f"packaged {len(report.written)} files into {report.scenario_dir} for {report.round_note}"
        + (" (it replaced the package that was there)" if report.replaced else "")
    )
    if report.todo:
        from harness.submission.checker import fill_in_hint

        print(
            f"to fill in systems/{args.system}.json (what the run's machine could not report, "
            "left empty: the checker reads absent, 0 or blank as missing; package again with "
            "the flags): " + fill_in_hint(report.todo)
        )
    for note in report.notes:
        print(f"to do: {note}")
    return EXIT_OK


def cmd_check_submission(args: argparse.Namespace) -> int:
    from harness.submission.checker import check_submission_tree, focus, render_checks, summary_line
    from harness.submission.official import official_command, run_official
    from harness.submission.rounds import folder_for

    if (args.benchmark is None) != (args.scenario is None):
        raise UsageError("--benchmark and --scenario go together: pass both or neither")
    check = check_submission_tree(args.root, args.round)
    results = check.results
    if args.structure_only:
        results = [r for r in results if r.group == "structure"]
    print(f"checking {args.root} against {check.note}")
    # The official checker first, so that our verdict line stays the last line printed.
    official_passed = True
    if args.official is None:
        cmd = official_command(Path("INFERENCE_REPO"), args.root, check.round.name)
        print(
            "the official MLCommons checker, which every submission must pass: "
            + " ".join(shlex.quote(c) for c in cmd)
            + " (or check-submission --official INFERENCE_REPO)"
        )
    else:
        verdict = run_official(args.official, args.root, check.round.name)
        official_passed = verdict.passed
        print(verdict.describe())
    if args.benchmark is None:
        print(render_checks(results))
        print(summary_line(results))
    else:
        folder = folder_for(args.benchmark, accuracy_level_of(args, args.benchmark))
        shown = focus(results, folder, args.scenario)
        rest = [r for r in results if r not in shown]
        print(render_checks(shown))
        line = summary_line(shown, f"{folder} {args.scenario}: ")
        if any(not r.passed for r in rest):
            line += "; " + summary_line(rest, "elsewhere in the tree: ")
        print(line)
    failed = any(not r.passed for r in results) or not official_passed
    return EXIT_STRICT if failed else EXIT_OK


def cmd_rounds(args: argparse.Namespace) -> int:
    from harness.run.record.environment import installed_versions
    from harness.submission.rounds import ROUNDS, loadgen_mismatch

    if args.scenario is not None and args.benchmark is None:
        raise UsageError("--scenario goes with --benchmark: pass both")
    if args.benchmark:
        choice = choose_round_for(args, args.benchmark)
        model = choice.model
        rule = model.scenarios[model.home_category()]
        if args.scenario is not None and args.scenario not in rule.accepted:
            raise UsageError(
                f"{choice.note.split(' (')[0]} takes no {args.scenario} for {model.folder}: it "
                f"takes {rule.describe()}; certify one of {', '.join(rule.accepted)}"
            )
        print(choice.note)
        print(
            f"{model.folder} ({model.home_category()}): {rule.describe()}; "
            + ("TEST06 for each scenario" if model.test06 else "no TEST06")
        )
        installed = installed_versions(["mlcommons-loadgen"]).get("mlcommons-loadgen")
        problem = loadgen_mismatch(choice.round, installed)
        print(
            f"LoadGen: {problem}"
            if problem
            else f"LoadGen: {choice.round.seeds_loadgen} (installed: {installed or 'none'})"
        )
        return EXIT_OK
    for rnd in ROUNDS if args.round is None else [r for r in ROUNDS if r.name == args.round]:
        print(f"{rnd.name}  (RNG seeds of {rnd.seeds_loadgen})")
        for m in rnd.models:
            rules = "; ".join(f"{c}: {r.describe()}" for c, r in m.scenarios.items())
            print(f"  {m.folder:<18} {m.preset:<18} {rules}" + ("; TEST06" if m.test06 else ""))
    return EXIT_OK
