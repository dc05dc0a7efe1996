"""`issue_plan` against real LoadGen: what a performance test will issue, worked out before the
engine starts, must be what LoadGen's GenerateQueries then generates (its detail log's
generated_query_count / generated_samples_per_query). LoadGen runs in a child process with an
SUT that completes every sample at once; its schedule seed is fixed, so the arrivals are too."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

_RUN = textwrap.dedent("""
    import json, sys
    import mlperf_loadgen as lg
    from harness.run.setup.settings import issue_plan

    scenario, qps, min_ms, min_queries, loaded, equal, outdir, seed = sys.argv[1:9]
    qps, loaded = float(qps), int(loaded)
    s = lg.TestSettings()
    if seed != "-":  # another schedule than mlperf.conf's seed gives
        s.schedule_rng_seed = int(seed)
    s.scenario = getattr(lg.TestScenario, scenario)
    s.mode = lg.TestMode.PerformanceOnly
    s.min_duration_ms = int(min_ms)
    s.min_query_count = int(min_queries)
    s.sample_concatenate_permutation = equal == "1"
    if scenario == "Server":
        s.server_target_qps = qps
    else:
        s.offline_expected_qps = qps
    s.performance_sample_count_override = loaded
    plan = issue_plan(s, loaded)  # before the test, as the runner asks

    def issue(samples):
        lg.QuerySamplesComplete([lg.QuerySampleResponse(q.id, 0, 0) for q in samples])

    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(loaded, loaded, lambda idx: None, lambda idx: None)
    out = lg.LogOutputSettings()
    out.outdir = outdir
    out.copy_summary_to_stdout = False
    log = lg.LogSettings()
    log.log_output = out
    log.enable_trace = False
    lg.StartTestWithLogSettings(sut, qsl, s, log)
    lg.DestroyQSL(qsl)
    lg.DestroySUT(sut)
    print(json.dumps(plan.to_dict()))
""")


def _generated(outdir) -> dict[str, float]:
    got = {}
    for line in (outdir / "mlperf_log_detail.txt").read_text().splitlines():
        if line.startswith(":::MLLOG"):
            rec = json.loads(line.split(" ", 1)[1])
            if rec["key"].startswith("generated_"):
                got[rec["key"]] = rec["value"]
    return got


def _run(tmp_path, scenario, qps, min_ms, min_queries, loaded, equal=True, seed=None):
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, scenario, str(qps), str(min_ms), str(min_queries),
         str(loaded), "1" if equal else "0", str(tmp_path), "-" if seed is None else str(seed)],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), _generated(tmp_path)


@pytest.mark.parametrize(
    "qps, min_queries, loaded, equal, queries, passes",
    [
        # 1.5 s at 1,000 QPS: ~1,501 queries, padded to 5 passes over 350 samples
        (1000.0, 100, 350, True, 1750, 5),
        # min_query_count above the time's count, padded to whole passes too
        (1000.0, 2000, 350, True, 2100, 6),
        # no equal issue: the time alone (LoadGen's Poisson arrivals: about)
        (1000.0, 100, 350, False, None, None),
    ],
)
def test_server_plan_is_what_loadgen_generates(tmp_path, qps, min_queries, loaded, equal,
                                               queries, passes):  # fmt: skip
    plan, got = _run(tmp_path, "Server", qps, 1500, min_queries, loaded, equal)
    assert plan["scenario"] == "Server" and plan["passes"] == passes
    if queries is None:  # random arrivals: within a few standard deviations (sqrt 1,500 ~ 39)
        assert abs(got["generated_query_count"] - plan["queries"]) < 150
        assert plan["queries"] == 1501
    else:
        assert got["generated_query_count"] == plan["queries"] == queries
    # the scheduled length (LoadGen: the last query's time) and ours: queries / QPS
    assert abs(got["generated_query_duration"] / 1e9 - plan["seconds"]) < 0.15 * plan["seconds"]


def test_offline_plan_is_what_loadgen_generates(tmp_path):
    """1.1 x 1 s x 100 QPS = 110 samples, padded to one pass over 350 loaded samples; the
    submission checker judges the unpadded 110 (preflight's offline_samples_per_query)."""
    plan, got = _run(tmp_path, "Offline", 100.0, 1000, 1, 350)
    assert got["generated_query_count"] == plan["queries"] == 1
    assert got["generated_samples_per_query"] == plan["samples"] == 350
    assert plan["passes"] == 1 and plan["seconds"] == pytest.approx(3.5)


def _server_settings(min_ms: int, qps: float):
    """Equal-issue Server settings of a min_duration and target, min_query_count 100."""
    import mlperf_loadgen as lg

    s = lg.TestSettings()
    s.scenario = lg.TestScenario.Server
    s.min_duration_ms = min_ms
    s.min_query_count = 100
    s.sample_concatenate_permutation = True
    s.server_target_qps = qps
    return s


def test_plan_line_names_the_passes_and_the_length():
    """The line the run prints before the engine starts: the GPU run that took 784 s."""
    import mlperf_loadgen as lg

    from harness.run.setup.settings import issue_plan

    s = _server_settings(600_000, 7.649)
    plan = issue_plan(s, 2000)
    assert (plan.queries, plan.passes) == (6000, 3)
    assert plan.line() == (
        "LoadGen will issue about 6,000 queries at 7.649 QPS (3 passes over 2,000 loaded "
        "samples: equal issue): about 784 s"
    )
    s.scenario = lg.TestScenario.SingleStream
    assert issue_plan(s, 2000) is None


def test_a_pass_boundary_near_the_schedules_end_may_spill_into_another_pass(tmp_path):
    """1.5 s at 1,000 QPS brings ~1,500 arrivals (sd ~39): padded to whole passes over 751
    loaded samples that is 1,502 queries, unless those 1,502 all fall before 1.5 s (about
    even odds), when LoadGen draws on and pads a third pass. What LoadGen generates is one
    of the two counts the plan names, and the line says so."""
    plan, got = _run(tmp_path, "Server", 1000.0, 1500, 100, 751)
    assert (plan["queries"], plan["spill_queries"]) == (1502, 2253)
    assert 0.4 < plan["spill_chance"] < 0.6
    assert got["generated_query_count"] in (plan["queries"], plan["spill_queries"])


def test_plan_line_names_a_likely_extra_pass():
    """The 240 s Server diagnostic of the 70B that planned 2,100 queries and issued 2,800."""
    from harness.run.setup.settings import issue_plan, spill_chance

    s = _server_settings(240_000, 8.6)
    plan = issue_plan(s, 700)
    assert (plan.queries, plan.spill_queries) == (2100, 2800)
    assert plan.spill_chance == pytest.approx(0.217, abs=0.005)
    assert plan.line().endswith(
        "about 244 s; a 22% chance of 2,800 (about 326 s): if those 2,100 arrivals all fall "
        "before min_duration, LoadGen pads another pass (a few more loaded samples move that "
        "boundary out)"
    )
    # 1,150 loaded samples: 2,300 queries, 5 standard deviations out: no note
    assert "chance" not in issue_plan(s, 1150).line()
    # no equal issue, nothing to pad; a boundary far past the arrivals, no chance
    s.sample_concatenate_permutation = False
    assert issue_plan(s, 700).spill_chance == 0.0
    assert spill_chance(1000.0, 2000) < 1e-12


def _counts_over_seeds(tmp_path, qps, min_ms, min_queries, loaded) -> list[int]:
    """LoadGen's generated query count for schedule seeds 1 to 12."""
    counts = []
    for seed in range(1, 13):
        out = tmp_path / str(seed)
        out.mkdir(parents=True)
        _, got = _run(out, "Server", qps, min_ms, min_queries, loaded, seed=seed)
        counts.append(got["generated_query_count"])
    return counts


def test_a_calibrate_trial_is_one_pass_whatever_the_schedule(tmp_path):
    """A 0.3 s trial at 1,000 QPS over twelve schedule seeds. Loading just the ~300 its
    arrivals reach, as trials did, LoadGen padded a second pass for some seeds (a trial twice
    its length); with `trial_counts`' three standard deviations more, every seed issues one
    pass of the loaded samples."""
    from harness.calibrate.trials import trial_counts

    wanted, loaded = trial_counts(1000.0, 0.3, 0, 10_000)
    assert (wanted, loaded) == (300, 352)
    assert trial_counts(1000.0, 0.3, 0, 320) == (300, 320)  # what the dataset holds
    assert trial_counts(1000.0, 0.3, 500, 10_000) == (500, 500)  # min_queries rules
    old = _counts_over_seeds(tmp_path / "old", 1000.0, 300, wanted, wanted)
    assert set(old) == {300, 600}, old
    new = _counts_over_seeds(tmp_path / "new", 1000.0, 300, wanted, loaded)
    assert new == [loaded] * 12, new
