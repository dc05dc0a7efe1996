"""Flags become typed requests in the CLI, one way for every command (harness.cli.flags): each
flag of calibrate and sweep lands in its request field, and a field no flag fills is refused."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from harness.calibrate.request import CalibrateRequest
from harness.cli import build_parser
from harness.cli.calibrate import calibrate_request
from harness.cli.flags import request_from_flags
from harness.cli.sweep import sweep_options
from harness.sweep.options import SweepOptions


def _parse(*argv: str) -> tuple[argparse.Namespace, list[str]]:
    return build_parser().parse_known_args(list(argv))


def _non_defaults(request: object, default: object) -> set[str]:
    return {
        f.name
        for f in dataclasses.fields(request)  # type: ignore[arg-type]
        if getattr(request, f.name) != getattr(default, f.name)
    }


def test_every_calibrate_flag_reaches_its_field(tmp_path):
    conf = tmp_path / "base.conf"
    conf.write_text("")
    args, extra = _parse(
        *("calibrate", "--benchmark", "llama2-70b", "--scenario", "Server"),
        *("--model", "m", "--dataset", "d.json", "--output", "o", "--user-conf", str(conf)),
        *("--min-duration", "60", "--margin", "1.5", "--measure-samples", "50"),
        *("--start-qps", "2", "--trials", "3", "--trial-s", "5", "--trial-queries", "40"),
        *("--start-fraction", "0.5"),
        *("--backoff", "0.1", "--trial-timeout", "90", "--max-num-seqs", "8"),
        *("--precision", "0.05", "--confirm", "--confirm-runs", "2", "--confirm-passes", "2"),
        *(
            "--hold-trials",
            "2",
        ),
    )
    req = calibrate_request(args, extra)
    # Each measurement run: calibrate's model, data and conf, and the flags it does not know.
    t = req.run
    assert t is not None
    assert (t.benchmark, t.scenario, t.mode) == ("llama2-70b", "Server", "performance")
    assert (t.model, t.dataset, t.output) == (Path("m"), Path("d.json"), Path("o/trials"))
    assert t.user_conf == conf and dict(t.engine_overrides) == {"max_num_seqs": 8}
    assert req == CalibrateRequest(
        benchmark="llama2-70b",
        scenario="Server",
        model=Path("m"),
        dataset=Path("d.json"),
        output=Path("o"),
        user_conf=conf,
        min_duration_s=60.0,
        margin=1.5,
        measure_samples=50,
        start_qps=2.0,
        start_fraction=0.5,
        trials=3,
        trial_s=5.0,
        trial_queries=40,
        backoff=0.1,
        hold_trials=2,
        trial_timeout_s=90.0,
        precision=0.05,
        confirm=True,
        confirm_runs=2,
        confirm_passes=2,
        run=t,
    )
    # every field was set away from its default: none can be dropped on the way silently
    default = CalibrateRequest("b", "s", Path(), Path(), Path())
    assert _non_defaults(req, default) >= {f.name for f in dataclasses.fields(CalibrateRequest)} - {
        "benchmark",
        "scenario",
        "model",
        "dataset",
        "output",
    }
    # no --user-conf: the benchmark's shipped conf
    args, extra = _parse(
        "calibrate", "--benchmark", "llama3_1-8b", "--scenario", "Offline", "--model", "m",
        "--dataset", "d", "--output", "o",
    )  # fmt: skip
    assert calibrate_request(args, extra).user_conf.name == "offline.conf"


def test_every_sweep_flag_reaches_its_option():
    args, _ = _parse(
        *("sweep", "plan.txt", "--kind", "stacked", "--repeats", "3", "--accuracy"),
        *("--output", "o", "--resume", "--keep-all", "--noise-floor", "0.05"),
        *("--price-per-hour", "2.5", "--config-timeout", "600", "--stall-timeout", "30"),
        *("--figure", "capacity", "--trials", "3", "--trial-s", "7.5"),
        *("--measure-samples", "1000000", "--allow-pickle"),
    )
    opts = sweep_options(args)
    assert opts == SweepOptions(
        kind="stacked",
        repeats=3,
        accuracy=True,
        output=Path("o"),
        resume=True,
        keep_all=True,
        noise_floor=0.05,
        config_timeout_s=600.0,
        price_per_hour=2.5,
        stall_timeout_s=30.0,
        figure="capacity",
        allow_pickle=True,
        # calibrate's own flags, as it parses them (an int never written as 1e+06)
        calibrate_args=("--trials", "3", "--trial-s", "7.5", "--measure-samples", "1000000"),
    )
    assert _non_defaults(opts, SweepOptions()) == {f.name for f in dataclasses.fields(opts)}
    args, _ = _parse("sweep", "plans/x.txt")
    assert sweep_options(args).output == Path("runs/sweeps/x-isolation")


def test_a_field_without_a_flag_is_refused():
    args, _ = _parse("sweep", "plan.txt")
    with pytest.raises(TypeError, match="CalibrateRequest: no flag or value for .*margin"):
        request_from_flags(CalibrateRequest, args)


def test_trial_length_defaults_to_the_benchmarks():
    """Without --trial-s a Server trial lasts the benchmark's default: several of its sample
    latencies (a 70B sample takes 10-60 s near capacity; 60 s trials could not judge it)."""
    from harness.benchmarks import get_benchmark
    from harness.calibrate.request import trial_seconds

    args, extra = _parse(
        *("calibrate", "--benchmark", "llama2-70b", "--scenario", "Server"),
        *("--model", "m", "--dataset", "d.json", "--output", "o"),
    )
    req = calibrate_request(args, extra)
    assert req.trial_s is None
    expected = {
        "llama3_1-8b": 60.0,
        "llama3_1-8b-interactive": 60.0,
        "llama2-70b": 240.0,
        "llama2-70b-interactive": 240.0,
        "llama3_1-405b": 600.0,
        "llama3_1-405b-interactive": 600.0,
    }
    for name, seconds in expected.items():
        assert trial_seconds(req, get_benchmark(name)) == seconds, name
    assert trial_seconds(dataclasses.replace(req, trial_s=5.0), get_benchmark("llama2-70b")) == 5.0


def test_scenarios_are_taken_in_any_case():
    base = ("--benchmark", "llama3_1-8b", "--model", "m", "--dataset", "d", "--output", "o")
    assert _parse("run", *base, "--scenario", "server")[0].scenario == "Server"
    assert _parse("run", *base, "--scenario", "OFFLINE")[0].scenario == "Offline"
    assert _parse("calibrate", *base, "--scenario", "interactive")[0].scenario == "Interactive"
    with pytest.raises(SystemExit):  # not a scenario in any case: argparse's refusal
        _parse("run", *base, "--scenario", "serverish")


def test_demo_help_states_the_sample_counts_the_code_uses():
    from harness.cli.demo import SMALL_SAMPLES, TINY_SAMPLES

    demo = build_parser()._subparsers._group_actions[0].choices["demo"]  # type: ignore[union-attr]
    text = " ".join(demo.format_help().split())
    assert f"default: {SMALL_SAMPLES} real model, {TINY_SAMPLES} tiny model" in text


def test_calibrate_spells_run_options_as_run_does_and_lists_what_it_passes(capsys):
    """calibrate's --min-duration is run's spelling; its help names every run flag it hands to
    its runs, and each of those reaches the runs' spec."""
    from harness.cli.calibrate import SET_BY_CALIBRATE, passed_run_flags
    from harness.run.setup.spec import RunSpec

    with pytest.raises(SystemExit):
        build_parser().parse_args(["calibrate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--min-duration S" in help_text and "--min-duration-s" not in help_text
    passed = passed_run_flags()
    assert {"--max-tokens", "--stall-timeout", "--note", "--dp-routing"} <= set(passed)
    assert all(f in help_text for f in passed)
    flags = {how.flag(n): n for n, how in RunSpec.options()}
    assert not {flags.get(f) for f in passed} & set(SET_BY_CALIBRATE)
    args, extra = _parse(
        *("calibrate", "--benchmark", "llama3_1-8b", "--scenario", "Offline"),
        *("--model", "m", "--dataset", "d.json", "--output", "o", "--min-duration", "30"),
        *("--max-tokens", "7", "--note", "why", "--warmup-samples", "3"),
    )
    req = calibrate_request(args, extra)
    assert req.min_duration_s == 30.0 and req.run is not None
    assert (req.run.max_tokens, req.run.note, req.run.warmup_samples) == (7, "why", 3)


def test_run_help_groups_its_flags_under_five_headings(capsys):
    from harness.run.setup.spec import GROUPS, RunSpec

    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    out = capsys.readouterr().out
    headings = [out.index(f"\n{title}:\n") for title in GROUPS.values()]
    assert headings == sorted(headings)  # inputs, engine, LoadGen, SUT, output
    sections = out.split("\n\n")
    for name, how in RunSpec.options():
        if how.kind == "rest":
            continue
        flag = how.flag(name)
        shown = re.compile(rf"\n  {re.escape(flag)}(\s|$)")
        under = [s.split("\n", 1)[0] for s in sections if shown.search(s)]
        assert under == [GROUPS[str(how.group)] + ":"], (flag, under)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["rounds", "--bogus"], "error: unrecognized arguments: --bogus (see `mlperf-vllm rounds"),
        (["run", "--scenario", "serverish"], "invalid choice: 'serverish'"),
        (["calibrate"], "the following arguments are required: --benchmark"),
        (["nosuch"], "argument command: invalid choice: 'nosuch'"),
    ],
)
def test_argparse_refusals_are_one_error_line_with_a_help_hint(argv, says, capsys):
    from harness.cli import main

    with pytest.raises(SystemExit) as exc:
        code = main(argv)
        raise SystemExit(code)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "usage:" not in err, err
    assert says in err and "--help`)" in err
