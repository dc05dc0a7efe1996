"""Flags several commands share, and the one way a command's flags become its typed request.

Below the CLI nothing reads an argparse namespace (tests/test_layering.py): each command
turns its flags into a frozen request or config here, in the CLI, and hands that down.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from harness.errors import UsageError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from harness.submission.rounds import RoundChoice
    from harness.tracking import TrackingConfig

Request = TypeVar("Request", bound="DataclassInstance")


def request_from_flags(cls: type[Request], args: argparse.Namespace, **given: Any) -> Request:
    """A frozen dataclass `cls` with each field taken from the flag whose dest has its name,
    unless `given` (values the command computes: a resolved path, the unparsed engine flags).
    A field that neither supplies is a mistake in the command, caught by its first use."""
    names = [f.name for f in dataclasses.fields(cls)]
    missing = [n for n in names if n not in given and not hasattr(args, n)]
    if missing:
        raise TypeError(f"{cls.__name__}: no flag or value for {', '.join(missing)}")
    values = {n: given[n] if n in given else getattr(args, n) for n in names}
    return cls(**values)


# --------------------------------------------------------------------------- help


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """`--help` states an option's default, `(default: X)`, unless it is None, False, an empty
    list or SUPPRESS, or the option's help already speaks of its default."""

    @staticmethod
    def _shows_default(action: argparse.Action) -> bool:
        default = action.default
        if default is None or default is False or default is argparse.SUPPRESS:
            return False
        if isinstance(default, (list, tuple, dict)) and not default:
            return False
        if not action.option_strings and action.nargs not in (argparse.OPTIONAL, "*"):
            return False
        return "default" not in (action.help or "").lower()

    def _format_action(self, action: argparse.Action) -> str:
        if not action.help and action.help is not argparse.SUPPRESS and self._shows_default(action):
            action = copy.copy(action)  # an option without help still shows its default
            action.help = "(default: %(default)s)"
        return super()._format_action(action)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        """A description or epilog, wrapped without breaking a flag at its hyphens."""
        import textwrap

        text = " ".join(text.split())
        return textwrap.fill(
            text, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
        )

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_text = action.help
        if help_text and "%(default)" not in help_text and self._shows_default(action):
            help_text += " (default: %(default)s)"
        return help_text


class Parser(argparse.ArgumentParser):
    """mlperf-vllm's parser: `DefaultsHelpFormatter` unless told otherwise. Subparsers take
    the parser's own class (argparse's default), so every command's `--help` has it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """argparse's refusal (a missing or unknown flag, a bad choice) as the CLI's one
        `error:` line with where to look, exit 2: not argparse's usage block."""
        import sys

        sys.stderr.write(f"error: {' '.join(message.split())} (see `{self.prog} --help`)\n")
        sys.exit(2)


# --------------------------------------------------------------------------- benchmark

# The namespace attribute that records which --benchmark name set --accuracy-level.
_IMPLIED_LEVEL = "_accuracy_level_implied_by"


def _level_conflict(name: str, implied: str, given: str) -> UsageError:
    from harness.benchmarks import SUBMISSION_NAMES, lookup_benchmark

    preset = lookup_benchmark(name)[0]
    other = next((n for n, v in SUBMISSION_NAMES.items() if v == (preset, given)), None)
    fix = f"--benchmark {other}" if other else f"--benchmark {preset}"
    return UsageError(
        f"--benchmark {name} means accuracy level {implied}, but --accuracy-level {given} was "
        f"given: drop --accuracy-level, or pass {fix} for {given}"
    )


class BenchmarkAction(argparse.Action):
    """--benchmark: a preset (llama3_1-8b) or a submission name (llama3.1-8b, llama2-70b-99.9)
    stored as its preset. A name that carries an accuracy level sets --accuracy-level when the
    command has one and it was not given; a different level given is refused. An unknown name
    is refused in one line (UsageError, which `main` prints), naming the known ones."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        from harness.benchmarks import UnknownBenchmarkError, lookup_benchmark

        name = str(values)
        try:
            preset, level = lookup_benchmark(name)
        except UnknownBenchmarkError as exc:
            raise UsageError(exc.args[0]) from None
        setattr(namespace, self.dest, preset)
        if not hasattr(namespace, "accuracy_level"):
            return  # a command without --accuracy-level (calibrate: performance only)
        if getattr(namespace, _IMPLIED_LEVEL, None) is not None:
            # an earlier --benchmark set the level: the last name given decides it
            namespace.accuracy_level = None
            setattr(namespace, _IMPLIED_LEVEL, None)
        if level is None:
            return
        given = namespace.accuracy_level  # here: given by --accuracy-level, or None
        if given is None:
            namespace.accuracy_level = level
            setattr(namespace, _IMPLIED_LEVEL, (name, level))
        elif given != level:
            raise _level_conflict(name, level, given)


class AccuracyLevelAction(argparse.Action):
    """--accuracy-level, checked against the level a --benchmark submission name carries
    when that name came first (BenchmarkAction checks the other order)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        implied = getattr(namespace, _IMPLIED_LEVEL, None)
        if implied is not None and implied[1] != values:
            raise _level_conflict(implied[0], implied[1], str(values))
        setattr(namespace, self.dest, values)
        setattr(namespace, _IMPLIED_LEVEL, None)  # given, not implied: a later name keeps it


def add_benchmark_argument(
    p: argparse.ArgumentParser, *, required: bool = True, default: str | None = None, what: str = ""
) -> None:
    """--benchmark by preset or submission name (`BenchmarkAction`); `what`: the command's
    words for it, before the list of names."""
    from harness.benchmarks import BENCHMARKS, SUBMISSION_NAMES

    submission = [n for n in SUBMISSION_NAMES if n not in BENCHMARKS]
    p.add_argument(
        "--benchmark",
        required=required,
        default=default,
        action=BenchmarkAction,
        help=(f"{what}: " if what else "")
        + f"a preset ({', '.join(BENCHMARKS)}) or an MLPerf submission name "
        f"({', '.join(submission)}; a name with -99 / -99.9 sets --accuracy-level); "
        "case is ignored",
    )


# --------------------------------------------------------------------------- MLflow


def add_mlflow_arguments(p: argparse.ArgumentParser, experiment: str | None = None) -> None:
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


class TagAction(argparse.Action):
    """--tag KEY=VALUE, repeatable: collected into a dict (a later KEY wins); one without
    `=` or with an empty KEY is refused in one line (UsageError, which `main` prints)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        text = str(values)
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise UsageError(
                f"{option_string} {text!r} is not KEY=VALUE: pass e.g. --tag team=perf"
            )
        tags = dict(getattr(namespace, self.dest, None) or {})
        tags[key.strip()] = value.strip()
        setattr(namespace, self.dest, tags)


def add_run_name_arguments(p: argparse.ArgumentParser) -> None:
    """--run-name and --tag: the name and extra tags of the command's MLflow run."""
    p.add_argument(
        "--run-name",
        help="MLflow run name (default: benchmark, scenario, mode and the output folder's name)",
    )
    p.add_argument(
        "--tag",
        action=TagAction,
        dest="tags",
        metavar="KEY=VALUE",
        help="a tag on the MLflow run (repeatable; over the environment tags of the same key)",
    )


def tracking_config(
    args: argparse.Namespace, default_experiment: str | None = None
) -> TrackingConfig:
    """The flags of `add_mlflow_arguments` as the tracking layer's config; `default_experiment`:
    the command's own (else the tracking layer's)."""
    from harness import tracking
    from harness.tracking.store import DEFAULT_EXPERIMENT

    return tracking.resolve_tracking(
        args.mlflow_uri,
        args.experiment,
        enabled=not args.no_mlflow,
        default_experiment=default_experiment or DEFAULT_EXPERIMENT,
    )


# --------------------------------------------------------------------------- submission round


def add_round_argument(p: argparse.ArgumentParser) -> None:
    from harness.submission.rounds import ROUND_NAMES

    p.add_argument(
        "--round",
        choices=ROUND_NAMES,
        help="MLPerf submission round whose rules apply (seeds, model folders, scenarios); "
        "default: the newest round that has the benchmark",
    )


def add_accuracy_level_argument(p: argparse.ArgumentParser, with_round: bool = True) -> None:
    """--accuracy-level, default None: the level the round accepts for the benchmark, resolved
    by `accuracy_level_of` (one rule for every command)."""
    from evaluation.targets import ACCURACY_LEVELS

    p.add_argument(
        "--accuracy-level",
        choices=ACCURACY_LEVELS,
        action=AccuracyLevelAction,
        help="accuracy target: 99 or 99.9 (llama2-70b); default: the level the "
        + (
            "round (--round, else the newest round with the benchmark)"
            if with_round
            else "newest round with the benchmark"
        )
        + " accepts (v6.1: 99.9 for llama2-70b, 99 for the others)",
    )


def accuracy_level_of(args: argparse.Namespace, benchmark: str) -> str:
    """The run's accuracy level: --accuracy-level, else the one its round accepts."""
    from harness.submission.rounds import accuracy_level_for

    return accuracy_level_for(benchmark, getattr(args, "round", None), args.accuracy_level)


def choose_round_for(args: argparse.Namespace, benchmark: str) -> RoundChoice:
    """The submission round of --round and --accuracy-level, checked before anything else
    happens (exit 2 if refused)."""
    from harness.benchmarks import get_benchmark
    from harness.submission.rounds import choose_round

    try:
        get_benchmark(benchmark)
    except KeyError as exc:
        raise UsageError(str(exc).strip("'\"")) from None
    return choose_round(args.round, benchmark, args.accuracy_level)
