"""Preflight: each non-compliant setting is refused with its reason; a compliant one passes.

The rules are pure functions over the effective values; the values themselves are read from a
real LoadGen TestSettings object in a child process (FromConfig runs once per process), and the
CLI contract (`run --submission` exits 2 with one line, before any engine starts) is checked
through the real CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from harness.benchmarks import get_benchmark
from harness.submission.preflight import (
    SEED_KEYS,
    EffectiveSettings,
    RunFacts,
    check,
    reference_seeds,
    refusal_line,
    stray_audit_files,
    warning_line,
)
from tests.conftest import REPO, SMOKE, cli, run_args

BENCH = get_benchmark("llama3_1-8b")
SEEDS = {"qsl_rng_seed": 11, "sample_index_rng_seed": 22, "schedule_rng_seed": 33}
GREEDY = {
    "max_tokens": 128,
    "min_tokens": 1,
    "temperature": 0.0,
    "top_k": 1,
    "top_p": 1.0,
    "ignore_eos": False,
}


def compliant_offline() -> EffectiveSettings:
    return EffectiveSettings(
        scenario="Offline",
        min_duration_ms=600_000,
        min_query_count=13368,
        performance_sample_count=13368,
        seeds=dict(SEEDS),
        offline_expected_qps=60.0,
    )


def compliant_server(**kw) -> EffectiveSettings:
    base = dict(
        scenario="Server",
        min_duration_ms=600_000,
        min_query_count=100,
        performance_sample_count=13368,
        seeds=dict(SEEDS),
        server_target_qps=40.0,
        ttft_latency_ms=2000.0,
        tpot_latency_ms=100.0,
    )
    base.update(kw)
    return EffectiveSettings(**base)


def facts(**kw) -> RunFacts:
    base = dict(
        dataset_size=13368,
        engine_kwargs={"enable_prefix_caching": False},
        sampling=dict(GREEDY),
        reference_seeds=dict(SEEDS),
    )
    base.update(kw)
    return RunFacts(**base)


def rules(findings) -> set[str]:
    return {f.rule for f in findings}


def test_compliant_offline_and_server_pass():
    assert check(compliant_offline(), BENCH, "Offline", facts()) == []
    assert check(compliant_server(), BENCH, "Server", facts()) == []


@pytest.mark.parametrize(
    "change, rule, words",
    [
        (dict(min_duration_ms=120_000), "min_duration", "120000 ms is below 600000"),
        (
            dict(min_query_count=2000, offline_expected_qps=1.5),
            "offline_query",
            "fewer than the dataset's 13368",
        ),
        (dict(offline_expected_qps=1.0), "offline_expected_qps", "not calibrated"),
        (dict(performance_sample_count=1024), "performance_sample_count", "1024"),
        (dict(seeds={**SEEDS, "schedule_rng_seed": 7}), "seeds", "schedule_rng_seed"),
        (dict(sample_concatenate_permutation=False), "equal_issue", "equal issue"),
    ],
)
def test_each_noncompliant_setting_is_named(change, rule, words):
    eff = replace(compliant_offline(), **change)
    found = check(eff, BENCH, "Offline", facts())
    assert rules(found) == {rule}
    line = refusal_line(found)
    assert words in line and "\n" not in line


@pytest.mark.parametrize(
    "fact_change, rule, words",
    [
        (dict(dataset_size=24), "dataset", "24 samples"),
        (dict(engine_kwargs={"enable_prefix_caching": True}), "prefix_caching", "prefix caching"),
        (dict(sampling={**GREEDY, "temperature": 0.7}), "greedy", "not greedy"),
        (dict(sampling={**GREEDY, "top_k": 40}), "greedy", "top_k 40"),
        (dict(sampling={**GREEDY, "max_tokens": 64}), "max_tokens", "max_tokens is 64"),
        (dict(sampling={**GREEDY, "ignore_eos": True}), "ignore_eos", "ignore_eos"),
        (dict(stray_audit_files=("/x/audit.config",)), "audit_file", "/x/audit.config"),
    ],
)
def test_each_noncompliant_run_fact_is_named(fact_change, rule, words):
    found = check(compliant_offline(), BENCH, "Offline", facts(**fact_change))
    assert rules(found) == {rule}
    assert words in refusal_line(found)


def test_audit_file_is_fine_when_asked():
    f = facts(stray_audit_files=("/x/audit.config",), audit_requested=True)
    assert check(compliant_offline(), BENCH, "Offline", f) == []


def test_server_latency_limits_and_default_qps():
    lim = compliant_server(server_target_qps=1.0, ttft_latency_ms=5000.0)
    found = check(lim, BENCH, "Server", facts())
    assert rules(found) == {"latency_limits", "server_target_qps"}
    advice = [f for f in found if f.rule == "server_target_qps"]
    assert not advice[0].fatal  # valid, only slow: advice, never a refusal


def test_server_too_few_queries_for_early_stopping():
    """A slow system's 600 s Server run (a 405B at 0.7 QPS) without equal issue issues 420
    queries: LoadGen cannot certify a p99 from so few (459 with none over the limit), so the
    run is INVALID however fast the engine; min_query_count 662 fixes it, and so does a target
    that issues enough."""
    slow = compliant_server(server_target_qps=0.7, sample_concatenate_permutation=False)
    found = check(slow, BENCH, "Server", facts())
    assert rules(found) == {"early_stopping", "equal_issue"} and all(f.fatal for f in found)
    line = refusal_line(found)
    assert "about 420 queries" in line and "459" in line and "min_query_count = 662" in line
    fixed = {"equal_issue"}
    assert rules(check(replace(slow, min_query_count=662), BENCH, "Server", facts())) == fixed
    assert rules(check(replace(slow, server_target_qps=0.77), BENCH, "Server", facts())) == fixed


def test_equal_issue_pads_server_queries_to_whole_passes():
    """With equal issue (the Llama benchmarks' mlperf.conf) LoadGen issues whole passes over
    the loaded samples: 0.7 QPS over 13,368 samples issues 13,368 queries (5.3 hours), enough
    for early stopping; over a 300-sample smoke set, 600 s at 0.7 QPS is 2 passes."""
    slow = compliant_server(server_target_qps=0.7)
    assert slow.server_queries == 13368
    assert "early_stopping" not in rules(check(slow, BENCH, "Server", facts()))
    assert replace(slow, loaded_samples=300).server_queries == 600
    assert replace(slow, server_target_qps=49.245, loaded_samples=2000).server_queries == 30000


def test_several_problems_one_line_and_warning_line():
    eff = replace(
        compliant_offline(),
        min_duration_ms=200,
        min_query_count=16,
        performance_sample_count=24,
        offline_expected_qps=20.0,
    )
    found = check(eff, BENCH, "Offline", facts(dataset_size=24))
    assert rules(found) == {"min_duration", "offline_query", "performance_sample_count", "dataset"}
    line = warning_line(found)
    assert "\n" not in line and "--submission" in line


def test_stray_audit_files(tmp_path):
    assert stray_audit_files(tmp_path) == ()
    (tmp_path / "audit.config").write_text("*.*.mode = 2\n")
    assert stray_audit_files(tmp_path, tmp_path) == (str((tmp_path / "audit.config").resolve()),)


_READ_SETTINGS = textwrap.dedent("""
    import json, sys
    import mlperf_loadgen as lg
    from harness.submission.preflight import effective_settings
    s = lg.TestSettings()
    s.scenario = getattr(lg.TestScenario, sys.argv[3])
    assert s.FromConfig(sys.argv[1], sys.argv[2], sys.argv[3], 1) == 0
    e = effective_settings(s, sys.argv[3])
    print(json.dumps({**e.__dict__, "seeds": dict(e.seeds)}))
""")


def _effective(conf: Path, model: str, scenario: str) -> EffectiveSettings:
    proc = subprocess.run(
        [sys.executable, "-c", _READ_SETTINGS, str(conf), model, scenario],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return EffectiveSettings(**json.loads(proc.stdout.strip().splitlines()[-1]))


def test_effective_values_come_from_loadgen(tmp_path):
    """The reference's own user.conf for 8B: Offline passes nothing but the uncalibrated QPS,
    Server is refused for its 120 s min_duration. Its 0.5 QPS would issue 60 queries in 120 s,
    too few for early stopping, but equal issue pads the run to a whole pass over the 13,368
    samples: 7.4 hours."""
    ref = tmp_path / "reference_user.conf"
    ref.write_text(
        "*.Offline.min_duration = 600000\n"
        "*.Server.target_qps = 0.5\n*.Server.min_duration = 120000\n"
    )
    seeds = reference_seeds()
    assert seeds is not None and set(seeds) == set(SEED_KEYS)
    f = facts(reference_seeds=seeds)
    off = _effective(ref, "llama3_1-8b", "Offline")
    assert rules(check(off, BENCH, "Offline", f)) == {"offline_expected_qps"}
    srv = _effective(ref, "llama3_1-8b", "Server")
    assert srv.ttft_latency_ms == 2000.0 and srv.server_target_qps == 0.5
    assert srv.sample_concatenate_permutation and srv.server_queries == 13368
    assert rules(check(srv, BENCH, "Server", f)) == {"min_duration"}

    # LoadGen reads the seeds from mlperf.conf only: a user.conf seed line is ignored, so the
    # seeds rule guards settings changed in code (pure tests above), not user.confs.
    bad = tmp_path / "bad.conf"
    bad.write_text(
        "*.*.schedule_rng_seed = 1\n"
        "llama3_1-8b.*.performance_sample_count_override = 500\n"
        "*.Offline.target_qps = 50\n"
    )
    eff = _effective(bad, "llama3_1-8b", "Offline")
    assert eff.seeds == seeds and eff.offline_expected_qps == 50.0
    assert rules(check(eff, BENCH, "Offline", f)) == {"performance_sample_count"}


def test_shipped_compliant_confs_pass_preflight():
    """Every user_confs/<benchmark>/<scenario>.conf is compliant except for what calibrate
    sets (Offline expected QPS): nothing else may trip a rule."""
    seeds = reference_seeds()
    for bench_dir in sorted(
        p
        for p in (REPO / "user_confs").iterdir()
        if p.is_dir() and p.name not in ("smoke", "examples", "audit")
    ):
        for conf in sorted(bench_dir.glob("*.conf")):
            scenario = {
                "offline": "Offline",
                "server": "Server",
                "interactive": "Interactive",
                "singlestream": "SingleStream",
            }[conf.stem]
            bench = get_benchmark(bench_dir.name)
            name = bench.loadgen_name_for(scenario)
            lg_scenario = "Server" if scenario == "Interactive" else scenario
            eff = _effective(conf, name, lg_scenario)
            found = check(
                eff,
                get_benchmark(name),
                scenario,
                facts(
                    dataset_size=bench.total_sample_count,
                    reference_seeds=seeds,
                    sampling={**GREEDY, "max_tokens": bench.sampling.max_tokens},
                ),
            )
            assert rules(found) <= {"offline_expected_qps", "server_target_qps"}, (conf, found)


def test_run_submission_refuses_before_engine(tiny_model, tiny_dataset, tmp_path):
    """Smoke conf + tiny data with --submission: exit 2, one line naming each problem, no
    engine started (no LoadGen log written); without --submission: it would run (not tested
    here: that starts an engine) and print the same findings as one warning line."""
    out = tmp_path / "run"
    proc = cli(
        *run_args(
            tiny_model,
            tiny_dataset,
            out,
            SMOKE / "offline.conf",
            "--submission",
            "--engine-arg",
            "enable_prefix_caching=true",
        ),
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr
    for words in (
        "min_duration 200 ms",
        "Offline query has 64 samples",
        "dataset has 24",
        "prefix caching is on",
    ):
        assert words in errors[0]
    assert not (out / "performance").exists()
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "refused" and "min_duration" in result["error"]


_PREFLIGHT_OF_RUN = textwrap.dedent("""
    import json, sys
    from harness.cli import build_parser
    from harness.cli.run import run_spec
    from harness.run.setup.prepare import prepare
    from harness.submission.preflight import settings_check
    from harness.submission.rounds import choose_round

    req = run_spec(*build_parser().parse_known_args(["run", *sys.argv[1:]]))
    prep = prepare(req)
    verdict = settings_check(prep.settings, prep)
    folder = choose_round(req.round, req.benchmark, req.accuracy_level).model.folder
    print(json.dumps({"level": req.accuracy_level, "folder": folder, **verdict.__dict__}))
""")


def _preflight_of_run(argv: list[str]) -> dict:
    """What `run ARGV`'s preflight decides, right before the engine would start (prepare and
    the settings check, in a process of its own: FromConfig runs once per process)."""
    proc = subprocess.run(
        [sys.executable, "-c", _PREFLIGHT_OF_RUN, *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_default_70b_run_is_judged_compliant_by_v61(tiny_model, tmp_path):
    """`run --benchmark llama2-70b` with no --accuracy-level or --round: a 99.9 run for round
    v6.1, whose seeds the installed LoadGen carries, so neither the seeds nor the model folder
    are findings (only what a tiny dataset and an uncalibrated conf cannot meet). Asking for
    99 explicitly still means v6.0's llama2-70b-99, and its seeds warning, as before."""
    from harness.assets.synthetic import build_synthetic_dataset

    data = build_synthetic_dataset("llama2-70b", tiny_model, tmp_path / "orca.json", samples=8)
    argv = ["--benchmark", "llama2-70b", "--scenario", "Offline", "--model", str(tiny_model)]
    argv += ["--dataset", str(data), "--output", str(tmp_path / "out"), "--user-conf"]
    argv += [str(REPO / "user_confs" / "llama2-70b" / "offline.conf"), "--no-progress"]

    default = _preflight_of_run(argv)
    assert (default["level"], default["folder"], default["round"]) == (
        "99.9",
        "llama2-70b-99.9",
        "v6.1",
    )
    assert "seeds" not in default["rules"], default
    assert set(default["rules"]) <= {"offline_expected_qps", "dataset"}, default

    asked_99 = _preflight_of_run([*argv, "--accuracy-level", "99"])
    assert (asked_99["folder"], asked_99["round"]) == ("llama2-70b-99", "v6.0")
    assert "seeds" in asked_99["rules"] and "seeds" in asked_99["warning"]
