"""`mlperf-vllm`: the command-line entry point, one module per command (each owns its arguments).

Exit codes: 0 done; 2 bad input (one line naming the problem and the fix; --debug for the
traceback); 3 with --strict when the run is INVALID or fails accuracy; 1 anything else.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from harness.cli import (
    assets,
    calibrate,
    compare,
    compliance,
    demo,
    engine_line,
    evaluate,
    log_run,
    ray_check,
    run,
    submission,
    sweep,
)
from harness.cli.common import EXIT_ERROR, EXIT_USAGE, exit_codes_epilog
from harness.cli.flags import Parser
from harness.errors import UsageError

# Each command registers itself in its own module (name, parser, handler: common.add_command);
# this is the list of those modules' registrations, in the order `--help` lists them.
REGISTRATIONS = (
    demo.add_parser,
    run.add_parser,
    evaluate.add_parser,
    log_run.add_parser,
    compare.add_parser,
    compliance.add_parser,
    calibrate.add_parser,
    submission.add_package_commands,
    sweep.add_parser,
    assets.add_parsers,
    ray_check.add_parser,
)


def build_parser() -> argparse.ArgumentParser:
    """Every command's parser: `Parser`, whose help states each option's default (its
    subparsers take its class)."""
    parser = Parser(
        prog="mlperf-vllm",
        description="MLPerf Inference LLM benchmarks (Llama 2 70B, Llama 3.1 8B/405B) on vLLM.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    for register in REGISTRATIONS:
        register(sub)
    for name, command in sub.choices.items():  # each command's exit codes end its --help
        command.epilog = " ".join(filter(None, (command.epilog, exit_codes_epilog(name))))
    return parser


def _exit_now_if_loadgen_running(code: int) -> None:
    """After Ctrl-C or a dead engine LoadGen's threads may still run (it cannot end a test
    early), or an abandoned engine start; leaving through interpreter shutdown would let them
    call into a finalizing Python. The engine is already stopped and the logs are on disk:
    exit at once."""
    from harness.run.execute.loadgen_call import loadgen_still_running
    from sut.engine import remove_ipc_dirs
    from sut.lifecycle import engine_start_abandoned

    if loadgen_still_running() or engine_start_abandoned():
        remove_ipc_dirs()  # what atexit would have removed
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def entry() -> None:
    """The `mlperf-vllm` command's process: main(), then out at once. The exit handlers run
    (logging, multiprocessing, MLflow) and the streams are flushed, but the interpreter's own
    teardown is skipped: with vLLM loaded it took 3.4-4.9 s after every command's last line,
    in C, doing nothing a user waits for."""
    import atexit

    code = main()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        # a flag's own check (an unknown --benchmark, a --tag without `=`) refuses in one line
        args, extra = parser.parse_known_args(argv)
        note = None
        if getattr(args, "engine_line", None):  # run / calibrate: a conf's measured engine line
            argv, note = engine_line.expand(
                argv, args.command, args.benchmark, args.scenario, args.engine_line
            )
            args, extra = parser.parse_known_args(argv)
    except UsageError as exc:
        if "--debug" in argv:
            raise
        _error(str(exc))
        return EXIT_USAGE
    if note is not None:
        print(note, flush=True)
    from sut.imports import hide_unused_packages

    hide_unused_packages()  # before any command imports transformers, NLTK or vLLM
    if not getattr(args, "verbose", False):  # vLLM's import-time lines to the run's engine.log
        from harness.run.record.engine_log import hold_vllm_import_lines

        hold_vllm_import_lines()
    from harness.proc import orphans, signals

    # SIGTERM and SIGINT end every command the same way; the handlers are the caller's again
    # once main() returns (a host process calling main() in-process keeps its own).
    with contextlib.ExitStack() as stack:
        stack.enter_context(signals.interrupt_on_signals())
        if args._starts_processes:
            # a SIGKILL of this process must not leave its engine (or a child run) running
            stack.enter_context(orphans.guard_descendants())
        return _dispatch(parser, args, extra)


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]) -> int:
    debug = args.debug
    try:
        if args._takes_extra:  # run, calibrate: the flags they do not know are vLLM's
            return int(args._handler(args, extra))
        if extra:
            _error(f"unrecognized arguments: {' '.join(extra)} (see `{args._prog} --help`)")
            return EXIT_USAGE
        return int(args._handler(args))
    except UsageError as exc:
        if debug:
            raise
        _error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(_interrupted_note(args), file=sys.stderr, flush=True)
        _exit_now_if_loadgen_running(130)
        return 130
    except Exception as exc:
        from harness.run.execute.loadgen_call import EngineFailure
        from sut.lifecycle import EngineStartTimeout

        if debug:
            raise
        if isinstance(exc, (EngineFailure, EngineStartTimeout)):
            _error(f"{exc} (the run failed; result.json and the LoadGen logs so far are kept)")
            _exit_now_if_loadgen_running(EXIT_ERROR)
            return EXIT_ERROR
        if isinstance(exc, OSError) and exc.strerror:
            # a full disk, a permission taken away mid-command: the system's words, no traceback
            where = f": {exc.filename}" if exc.filename else ""
            _error(f"{exc.strerror}{where} (rerun with --debug for the traceback)")
        else:
            _error(
                f"{type(exc).__name__}: {exc} (an internal error of mlperf-vllm: rerun with "
                "--debug for the traceback and report it)"
            )
        _exit_now_if_loadgen_running(EXIT_ERROR)
        return EXIT_ERROR


def _error(message: str) -> None:
    """The one `error:` line: a message spread over lines (vLLM's, pydantic's) is joined."""
    print("error: " + " ".join(message.split()), file=sys.stderr, flush=True)


def _interrupted_note(args: argparse.Namespace) -> str:
    if args.command in ("run", "demo"):
        return (
            "interrupted: LoadGen logs written so far are kept in the output folder; the "
            "engine is stopped and result.json says interrupted"
        )
    if args._starts_processes:  # calibrate, sweep: runs and trials in folders of their own
        return (
            "interrupted: the engine is stopped; each trial's or run's LoadGen logs written so "
            "far are kept in its folder (a run's result.json says interrupted), and the conf or "
            "report written before is kept whole"
        )
    # every result file is written aside and renamed into place once complete
    return "interrupted: files written before are kept whole; nothing is half-written"


if __name__ == "__main__":
    sys.exit(main())
