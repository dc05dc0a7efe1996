"""Names as typed on the command line (harness.cli.flags): scenarios in any case, benchmarks by
preset or MLPerf submission name (with the accuracy level the name carries), the MLflow run's
--run-name and --tag, and the defaults every --help states. Parser-level: no engine starts."""

from __future__ import annotations

import argparse
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.benchmarks import BENCHMARKS, SUBMISSION_NAMES, lookup_benchmark
from harness.cli import build_parser, main
from harness.errors import UsageError
from tests.conftest import cli

RUN = ("--model", "m", "--dataset", "d.json", "--output", "o")


def _parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_known_args(list(argv))[0]


def _run(*extra: str, scenario: str = "Offline", benchmark: str = "llama3_1-8b"):
    return _parse("run", "--benchmark", benchmark, "--scenario", scenario, *RUN, *extra)


def _subparser(name: str) -> argparse.ArgumentParser:
    return build_parser()._subparsers._group_actions[0].choices[name]  # type: ignore[union-attr]


def _help(name: str) -> str:
    return " ".join(_subparser(name).format_help().split())


# --------------------------------------------------------------------------- scenarios


@pytest.mark.parametrize(
    "typed, name",
    [
        ("server", "Server"),
        ("OFFLINE", "Offline"),
        ("interactive", "Interactive"),
        ("singlestream", "SingleStream"),
        (" Server ", "Server"),
    ],
)
def test_run_takes_a_scenario_in_any_case(typed, name):
    assert _run(scenario=typed).scenario == name


@pytest.mark.parametrize("typed, name", [("server", "Server"), ("OFFLINE", "Offline")])
def test_calibrate_and_check_submission_take_a_scenario_in_any_case(typed, name):
    cal = _parse("calibrate", "--benchmark", "llama3_1-8b", "--scenario", typed, *RUN)
    assert cal.scenario == name
    chk = _parse("check-submission", "root", "--benchmark", "llama3_1-8b", "--scenario", typed)
    assert chk.scenario == name


def test_a_wrong_scenario_is_refused_naming_the_choices(capsys):
    with pytest.raises(SystemExit) as exc:
        _run(scenario="serverish")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'serverish'" in err
    for name in ("Offline", "Server", "Interactive", "SingleStream"):
        assert name in err
    assert "{Offline,Server,Interactive,SingleStream}" in _help("run")  # canonical in --help


# --------------------------------------------------------------------------- benchmarks


def test_every_submission_name_is_a_preset_of_the_registry():
    assert set(SUBMISSION_NAMES) == {
        "llama3.1-8b",
        "llama3.1-8b-edge",
        "llama2-70b-99",
        "llama2-70b-99.9",
        "llama3.1-405b",
    }
    for preset, level in SUBMISSION_NAMES.values():
        assert level in BENCHMARKS[preset].accuracy_levels
    for name in BENCHMARKS:  # a preset is itself, with no level implied
        assert lookup_benchmark(name) == (name, None)


@pytest.mark.parametrize(
    "typed, preset, level",
    [
        ("llama3.1-8b", "llama3_1-8b", None),  # one level: nothing to imply
        ("llama3.1-8b-edge", "llama3_1-8b-edge", None),
        ("llama2-70b-99", "llama2-70b", "99"),
        ("llama2-70b-99.9", "llama2-70b", "99.9"),
        ("llama3.1-405b", "llama3_1-405b", None),
        ("LLAMA2-70B-99.9", "llama2-70b", "99.9"),
        ("llama2-70b", "llama2-70b", None),
        ("llama3_1-405b-interactive", "llama3_1-405b-interactive", None),
    ],
)
def test_run_takes_a_preset_or_submission_name(typed, preset, level):
    args = _run(benchmark=typed)
    assert (args.benchmark, args.accuracy_level) == (preset, level)


def test_the_submission_name_reaches_the_run_request():
    from harness.cli.run import run_spec

    args, extra = build_parser().parse_known_args(
        ["run", "--benchmark", "llama2-70b-99", "--scenario", "server", *RUN]
    )
    req = run_spec(args, extra)
    assert (req.benchmark, req.scenario, req.accuracy_level) == ("llama2-70b", "Server", "99")
    # without a level in the name, the round's default still decides (v6.1: 99.9 for 70B)
    args, extra = build_parser().parse_known_args(
        ["run", "--benchmark", "llama2-70b", "--scenario", "Server", *RUN]
    )
    assert run_spec(args, extra).accuracy_level == "99.9"


def test_every_benchmark_command_takes_submission_names():
    ev = ("--accuracy-log", "a.json", "--dataset", "d.json", "--tokenizer", "t")
    args = _parse("evaluate", "--benchmark", "llama2-70b-99", *ev)
    assert (args.benchmark, args.accuracy_level) == ("llama2-70b", "99")
    args = _parse("calibrate", "--benchmark", "llama3.1-405b", "--scenario", "Server", *RUN)
    assert args.benchmark == "llama3_1-405b"
    args = _parse("rounds", "--benchmark", "llama2-70b-99.9")
    assert (args.benchmark, args.accuracy_level) == ("llama2-70b", "99.9")
    args = _parse(
        "check-submission", "r", "--benchmark", "llama3.1-8b-edge", "--scenario", "singlestream"
    )
    assert (args.benchmark, args.scenario) == ("llama3_1-8b-edge", "SingleStream")
    args = _parse("make-dataset", "--benchmark", "llama3.1-8b", "--tokenizer", "t", "--out", "o")
    assert args.benchmark == "llama3_1-8b"
    assert _parse("make-dataset", "--tokenizer", "t", "--out", "o").benchmark == "llama3_1-8b"


def test_a_level_given_with_the_name_agrees_or_is_refused():
    assert _run("--accuracy-level", "99", benchmark="llama2-70b-99").accuracy_level == "99"
    for order in (
        ("--benchmark", "llama2-70b-99", "--accuracy-level", "99.9"),
        ("--accuracy-level", "99.9", "--benchmark", "llama2-70b-99"),
    ):
        with pytest.raises(UsageError, match=r"llama2-70b-99 means accuracy level 99.*99\.9"):
            _parse("run", *order, "--scenario", "Offline", *RUN)
    # a preset name leaves the level to --accuracy-level
    assert _run("--accuracy-level", "99", benchmark="llama2-70b").accuracy_level == "99"
    # the last --benchmark decides the level it implies; an explicit level stays
    args = _parse("run", "--benchmark", "llama2-70b-99", "--benchmark", "llama2-70b", *RUN,
                  "--scenario", "Offline")  # fmt: skip
    assert (args.benchmark, args.accuracy_level) == ("llama2-70b", None)


def test_an_unknown_benchmark_is_one_line_naming_the_known_ones(capsys):
    code = main(["run", "--benchmark", "llama3-8b", "--scenario", "Offline", *RUN])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("error: unknown benchmark 'llama3-8b'")
    assert "did you mean llama3_1-8b?" in err
    for name in (*BENCHMARKS, *SUBMISSION_NAMES):
        assert name in err


def test_an_unknown_benchmark_in_a_process_starts_nothing(tmp_path):
    out = tmp_path / "out"
    proc = cli(
        *("run", "--benchmark", "no-such-model", "--scenario", "offline"),
        *("--model", str(tmp_path / "m"), "--dataset", str(tmp_path / "d.json")),
        *("--output", str(out), "--mlflow-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"),
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown benchmark 'no-such-model'")
    assert "llama2-70b-99.9" in lines[0] and "llama3_1-8b" in lines[0]
    assert not out.exists() and not (tmp_path / "mlflow.db").exists()


def test_help_lists_the_benchmark_names():
    for command in ("run", "calibrate", "evaluate", "rounds", "check-submission"):
        text = _help(command)
        for name in ("llama3_1-8b", "llama2-70b", "llama3.1-8b-edge", "llama2-70b-99.9"):
            assert name in text, (command, name)


# --------------------------------------------------------------------------- MLflow name, tags


def test_run_name_and_tags_are_parsed():
    args = _run("--run-name", "nightly 8B", "--tag", "team=perf", "--tag", "note=a=b ")
    assert args.run_name == "nightly 8B"
    assert args.tags == {"team": "perf", "note": "a=b"}
    args = _run("--tag", "k=1", "--tag", "k=2", "--tag", "empty=")
    assert args.tags == {"k": "2", "empty": ""}
    assert (_run().run_name, _run().tags) == (None, None)


@pytest.mark.parametrize("bad", ["team", "=perf", " =x"])
def test_a_tag_without_key_and_value_is_refused_in_one_line(capsys, bad):
    with pytest.raises(UsageError, match="is not KEY=VALUE"):
        _run("--tag", bad)
    code = main(["run", "--benchmark", "llama3_1-8b", "--scenario", "Offline", *RUN, "--tag", bad])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("error: --tag") and "KEY=VALUE" in err


def test_the_mlflow_run_gets_the_name_and_tags(monkeypatch, tmp_path):
    """cmd_run hands --run-name and --tag to the MLflow run (stopped before anything runs)."""
    import harness.run.setup.prepare
    from harness import tracking

    seen: dict = {}

    class Stop(Exception):
        pass

    @contextmanager
    def fake_tracked_run(cfg, name, *, tags=None, **kwargs):
        seen.update(name=name, tags=tags)
        raise Stop
        yield

    monkeypatch.setattr(harness.run.setup.prepare, "prepare", lambda req: None)
    monkeypatch.setattr(tracking, "check_reachable", lambda cfg: None)
    monkeypatch.setattr(tracking, "tracked_run", fake_tracked_run)
    out = str(tmp_path / "o")
    base = ["run", "--benchmark", "llama3.1-8b", "--scenario", "offline", "--model", "m"]
    base += ["--dataset", "d.json", "--output", out, "--no-mlflow"]
    from harness.cli.run import cmd_run

    args, extra = build_parser().parse_known_args([*base, "--run-name", "mine", "--tag", "a=1"])
    with pytest.raises(Stop):
        cmd_run(args, extra)
    assert seen == {"name": "mine", "tags": {"a": "1"}}
    args, extra = build_parser().parse_known_args(base)
    with pytest.raises(Stop):
        cmd_run(args, extra)
    assert seen == {"name": "llama3_1-8b Offline performance (o)", "tags": None}


# --------------------------------------------------------------------------- --help defaults


def test_help_states_defaults_once():
    run = _help("run")
    assert "--mode {performance,accuracy,both} (default: performance)" in run
    assert "--warmup-samples N generate N prompts" in run and "(default: 0)" in run
    assert "(default: ours)" in run  # --dp-routing
    # None / False / empty-list defaults say nothing; a help that names its default keeps it
    assert "--no-progress --note" in run
    assert "(default: False)" not in run and "(default: None)" not in run
    assert "(default: [])" not in run
    assert "(default 300; 0: never)" in run and "never) (default" not in run
    sweep = _help("sweep")
    assert "called better/worse (default: 0.02)" in sweep and "(default 0.02)" not in sweep
    assert "cannot be told from noise (default: 2)" in sweep
    assert "process group is ended; default: no limit)" in sweep
    assert "--samples SAMPLES rows to write (default: 64)" in _help("make-dataset")
    # an option without help text still shows its default
    assert "--division {closed,open,network} (default: closed)" in _help("package")
    calibrate = _help("calibrate")
    assert "(default: 1.25)" in calibrate
    assert "on a new layout) (default: 0.9)" in calibrate
    assert "--model MODEL local checkpoint folder" in calibrate


def test_every_subparser_uses_the_defaults_formatter():
    from harness.cli.flags import DefaultsHelpFormatter

    def walk(parser: argparse.ArgumentParser):
        yield parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    yield from walk(child)

    parsers = list(walk(build_parser()))
    assert len(parsers) > 10
    for parser in parsers:
        assert parser.formatter_class is DefaultsHelpFormatter, parser.prog


def test_every_command_that_writes_takes_output():
    """One spelling for where a command writes: --output (package and make-dataset keep --out)."""
    assert _parse(
        "package", "--run", "r", "--output", "root", "--system", "s", "--submitter", "x"
    ).out == Path("root")
    assert _parse(
        "package", "--run", "r", "--out", "root", "--system", "s", "--submitter", "x"
    ).out == Path("root")
    assert _parse("make-dataset", "--tokenizer", "t", "--output", "o").out == Path("o")
    assert _parse("make-tiny-model", "--output", "m").output == Path("m")
    assert _parse("make-tiny-model", "m").dir == Path("m")


def test_the_command_runs_its_exit_handlers_and_keeps_its_exit_code():
    """`entry` skips the interpreter's teardown (seconds with vLLM loaded), not what a command
    registered to run at exit, nor its exit code."""
    script = (
        "import atexit, sys; from harness.cli import entry; "
        "atexit.register(lambda: print('handler ran', flush=True)); "
        "sys.argv = ['mlperf-vllm'] + sys.argv[1:]; entry()"
    )
    ok = subprocess.run(
        [sys.executable, "-c", script, "rounds"], capture_output=True, text=True, timeout=120
    )
    assert ok.returncode == 0 and ok.stdout.rstrip().endswith("handler ran"), ok.stderr
    refused = subprocess.run(
        [sys.executable, "-c", script, "rounds", "--benchmark", "no-such"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and "handler ran" in refused.stdout, refused.stderr


def test_every_command_help_ends_with_its_exit_codes() -> None:
    """Each command's --help names its exit codes; the ones with --strict or a failing verdict
    name 3, and every one names 2 for bad input."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name in sub.choices:
        text = _help(name)
        assert "exit codes: 0 " in text and "2 bad input" in text, name
    for name in ("run", "evaluate", "check-submission", "compliance"):
        assert "; 3 " in _help(name), name
