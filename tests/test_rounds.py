"""The rounds registry: default round, refusals, seeds, and what each round accepts.

No engine here: the trees packaged from real runs are checked in test_package_e2e.py.
"""

from __future__ import annotations

import pytest

from harness.benchmarks import BENCHMARKS
from harness.errors import UsageError
from harness.submission.rounds import (
    ROUND_NAMES,
    ROUNDS,
    accuracy_level_for,
    choose_round,
    folder_for,
    get_round,
    round_of_seeds,
)
from tests.conftest import cli


def test_default_is_the_newest_round_that_has_the_benchmark_and_says_so():
    assert ROUND_NAMES[0] == "v6.1"
    c = choose_round(None, "llama3_1-8b")
    assert c.round.name == "v6.1" and c.model.folder == "llama3.1-8b"
    assert "newest round with llama3.1-8b" in c.note
    c = choose_round(None, "llama3_1-405b-interactive")
    assert c.round.name == "v6.0" and c.model.folder == "llama3.1-405b"
    assert "v6.1 does not accept it" in c.note
    # no level: the one the newest round accepts (v6.1: 99.9 only), not the v6.0-only 99
    c = choose_round(None, "llama2-70b")
    assert (c.round.name, c.model.folder) == ("v6.1", "llama2-70b-99.9")
    c = choose_round(None, "llama2-70b", "99")
    assert (c.round.name, c.model.folder) == ("v6.0", "llama2-70b-99")
    assert "v6.1 does not accept it" in c.note
    assert choose_round("v6.0", "llama3_1-8b-edge").model.test06 is False


@pytest.mark.parametrize(
    "preset,level,having",
    [("llama3_1-405b", "99", "v6.0"), ("llama2-70b", "99", "v6.0")],
)
def test_a_round_without_the_benchmark_is_refused_naming_the_rounds_with_it(preset, level, having):
    with pytest.raises(UsageError) as err:
        choose_round("v6.1", preset, level)
    msg = str(err.value)
    assert "\n" not in msg and "round v6.1 does not accept" in msg
    assert f"rounds with it: {having}" in msg and f"--round {having}" in msg


def test_cli_refuses_before_anything_runs(tmp_path):
    proc = cli("rounds", "--benchmark", "llama3_1-405b", "--round", "v6.1")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "rounds with it: v6.0" in proc.stderr and "Traceback" not in proc.stderr
    # `run` refuses the same way, before the dataset or the model is even looked at
    out = tmp_path / "out"
    proc = cli(
        "run",
        "--benchmark",
        "llama3_1-405b",
        "--scenario",
        "Offline",
        "--model",
        str(tmp_path / "no-model"),
        "--dataset",
        str(tmp_path / "no-data.pkl"),
        "--output",
        str(out),
        "--round",
        "v6.1",
        "--no-mlflow",
    )
    assert proc.returncode == 2 and "rounds with it: v6.0" in proc.stderr, proc.stderr
    assert not out.exists()
    assert "v6.0" in cli("rounds", "--benchmark", "llama3_1-405b").stdout


def test_unknown_levels_and_rounds_are_usage_errors():
    with pytest.raises(UsageError, match="accuracy-level 99"):
        folder_for("llama3_1-8b", "99.9")
    with pytest.raises(UsageError, match="v6.1, v6.0"):
        get_round("v5.9")


def test_installed_loadgen_carries_the_v61_seeds():
    """LoadGen 6.0.16+ has round v6.1's seeds in its built-in mlperf.conf: a run made with it
    checks for v6.1 and fails v6.0's seeds rule (test_package_e2e shows the tree side)."""
    from harness.submission.preflight import reference_seeds

    seeds = reference_seeds()
    assert seeds is not None and round_of_seeds(seeds) == "v6.1"
    assert get_round("v6.0").seeds != get_round("v6.1").seeds


def test_preflight_judges_seeds_by_the_round():
    from harness.submission.preflight import EffectiveSettings, RunFacts, check

    bench = BENCHMARKS["llama3_1-405b"]
    v61 = dict(get_round("v6.1").seeds)
    eff = EffectiveSettings("Offline", 600_000, bench.total_sample_count, 8313, v61, 20.0)
    facts = RunFacts(dataset_size=8313, round=get_round("v6.0"))
    (seeds,) = [f for f in check(eff, bench, "Offline", facts) if f.rule == "seeds"]
    assert "not round v6.0's (they are round v6.1's)" in seeds.problem
    assert "6.0.4 to 6.0.15" in seeds.fix and "--round v6.1" not in seeds.fix  # v6.1 has no 405B
    facts = RunFacts(dataset_size=8313, round=get_round("v6.1"))
    eff8 = EffectiveSettings("Offline", 600_000, 13368, 13368, v61, 30.0)
    assert "seeds" not in [f.rule for f in check(eff8, BENCHMARKS["llama3_1-8b"], "Offline", facts)]


def test_every_round_model_uses_a_real_preset_and_a_known_scenario():
    for rnd in ROUNDS:
        assert set(rnd.seeds) == {"qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed"}
        for m in rnd.models:
            bench = BENCHMARKS[m.preset]
            assert m.accuracy_level in bench.accuracy_levels
            for rule in m.scenarios.values():
                assert set(rule.accepted) <= set(bench.scenarios), (rnd.name, m.folder)


@pytest.mark.parametrize(
    "preset,round_name,level",
    [
        ("llama2-70b", None, "99.9"),  # v6.1 accepts only llama2-70b-99.9
        ("llama2-70b-interactive", None, "99.9"),
        ("llama2-70b", "v6.1", "99.9"),
        ("llama2-70b", "v6.0", "99"),  # v6.0 has both: the benchmark's first level
        ("llama3_1-8b", None, "99"),  # one level only
        ("llama3_1-8b-edge", "v6.0", "99"),
        ("llama3_1-405b", None, "99"),
        ("llama3_1-405b", "v6.1", "99"),  # v6.1 lacks 405B: choose_round refuses it later
    ],
)
def test_default_accuracy_level_is_the_one_the_round_accepts(preset, round_name, level):
    assert accuracy_level_for(preset, round_name) == level
    assert accuracy_level_for(preset, round_name, "99.9") == "99.9"  # asked: kept as asked
    if (preset, round_name) != ("llama3_1-405b", "v6.1"):
        c = choose_round(round_name, preset)
        assert c.model.accuracy_level == level and c.round.name == (round_name or c.round.name)


def test_every_command_defaults_its_accuracy_level_the_same_way(tmp_path):
    """run, calibrate (its runs), package, check-submission, rounds and evaluate: the parsed
    default (None) resolves through the one rule, per benchmark and round."""
    from harness.cli import build_parser
    from harness.cli.calibrate import calibrate_request
    from harness.cli.flags import accuracy_level_of
    from harness.cli.run import run_spec

    parser = build_parser()
    p = str(tmp_path)
    for preset in ("llama2-70b", "llama3_1-8b", "llama3_1-405b"):
        for rnd in (None, "v6.0", "v6.1"):
            r = [] if rnd is None else ["--round", rnd]
            expected = accuracy_level_for(preset, rnd)
            commands = {
                "run": ["run", "--benchmark", preset, "--scenario", "Offline", "--model", p]
                + ["--dataset", p, "--output", p, *r],
                "package": ["package", "--run", p, "--system", "s", "--submitter", "o"]
                + ["--out", p, *r],
                "check-submission": ["check-submission", p, "--benchmark", preset]
                + ["--scenario", "Offline", *r],
                "rounds": ["rounds", "--benchmark", preset, *r],
            }
            if rnd is None:  # evaluate has no --round: the newest round's level
                commands["evaluate"] = ["evaluate", "--benchmark", preset, "--accuracy-log", p]
                commands["evaluate"] += ["--dataset", p, "--tokenizer", p]
            for name, argv in commands.items():
                args, extra = parser.parse_known_args(argv)
                assert args.accuracy_level is None, name
                assert accuracy_level_of(args, preset) == expected, (name, preset, rnd)
            run_args, extra = parser.parse_known_args(commands["run"])
            assert run_spec(run_args, extra).accuracy_level == expected
            cal_args, extra = parser.parse_known_args(
                ["calibrate", "--benchmark", preset, "--scenario", "Server", "--model", p]
                + ["--dataset", p, "--output", p, *r]
            )
            template = calibrate_request(cal_args, extra).run  # --round: a run flag
            assert template is not None and template.accuracy_level == expected, (
                "calibrate",
                preset,
                rnd,
            )
