"""Sweep plans, noise verdicts, the confounding guard and the stacking rule, without an engine.

The stacking and failure paths run the real Sweep with a stand-in for the per-repeat
subprocess (a fault we choose: throughput numbers on demand); test_sweep_e2e.py runs them for
real on the tiny model.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from harness.cli.sweep import add_sweep_arguments
from harness.run.execute.child import failure_line
from harness.sweep.execute import Sweep
from harness.sweep.options import SweepOptions
from harness.sweep.plan import SINGLE_RUN, PlanError, make_config, parse_plan
from harness.sweep.report import markdown_table, write_reports
from harness.sweep.stats import RepeatOutcome, confounding, no_op, noise_verdict

REPO = Path(__file__).resolve().parent.parent


def _plan(tmp_path: Path, body: str, **env: str) -> Path:
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "data.json").write_text("[]")
    p = tmp_path / "plan.txt"
    p.write_text(
        f"benchmark llama3_1-8b\nscenario Offline\nmodel {tmp_path}/model\n"
        f"dataset {tmp_path}/data.json\n{body}"
    )
    return p


def test_shipped_plans_parse(monkeypatch, tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "d.json").write_text("[]")
    monkeypatch.setenv("MODEL", str(tmp_path / "m"))
    monkeypatch.setenv("DATASET", str(tmp_path / "d.json"))
    (tmp_path / "user.conf").write_text("")
    monkeypatch.setenv("USER_CONF", str(tmp_path / "user.conf"))
    for path in sorted((REPO / "scripts" / "plans").glob("*.txt")):
        plan = parse_plan(path)
        assert plan.knobs, path


def test_plan_format_env_expansion_and_typed_args(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQS", "128")
    p = _plan(
        tmp_path,
        "baseline --engine-arg max_num_seqs=64  # comment\n"
        "knob seqs --engine-arg max_num_seqs=${SEQS}\n"
        "knob both --engine-arg=enforce_eager=true --env 'OMP_X=a b'\n",
    )
    plan = parse_plan(p)
    assert plan.baseline.engine_args == ("max_num_seqs=64",)
    assert [k.name for k in plan.knobs] == ["seqs", "both"]
    assert plan.knobs[0].change.engine_args == ("max_num_seqs=128",)
    assert plan.knobs[1].change.env == (("OMP_X", "a b"),)
    spec = make_config(plan, 1, "seqs", [plan.knobs[0]])
    assert spec.engine_args == ("max_num_seqs=64", "max_num_seqs=128")
    assert spec.expected_keys == ("max_num_seqs",)


@pytest.mark.parametrize(
    "body, match",
    [
        ("knob x --engine-arg no_such_arg=1\n", "no engine argument 'no_such_arg'"),
        ("knob x --engine-arg max_num_seqs=many\n", "invalid"),
        (
            "knob x --max-num-seqs 4\n",
            "--engine-arg KEY=VALUE, --env NAME=VALUE and --sut KEY=VALUE only",
        ),
        ("knob x --engine-arg max_num_seqs=8\nknob x --engine-arg max_num_seqs=9\n", "twice"),
        ("knob x\n", "changes nothing"),
        ("knob x --engine-arg max_num_seqs=${NOT_SET_ANYWHERE}\n", "NOT_SET_ANYWHERE is not set"),
        (
            "baseline --engine-arg max_num_seqs=8\nknob x --engine-arg max_num_seqs=8\n",
            "baseline's value",
        ),
        ("frobnicate 3\nknob x --engine-arg max_num_seqs=8\n", "unknown directive"),
        ("", "no `knob` lines"),
        ("user_conf /nonexistent.conf\nknob x --engine-arg max_num_seqs=8\n", "does not exist"),
    ],
)
def test_bad_plans_fail_before_any_run(tmp_path, body, match):
    with pytest.raises(PlanError, match=match):
        parse_plan(_plan(tmp_path, body))


def test_bad_plan_names_the_line(tmp_path):
    p = _plan(tmp_path, "# c\nknob ok --engine-arg max_num_seqs=8\nknob bad --engine-arg nope=1\n")
    with pytest.raises(PlanError, match=r"plan.txt:7: knob bad"):
        parse_plan(p)


def test_noise_rule():
    assert noise_verdict([100.0], [110.0])[1] == SINGLE_RUN
    delta, verdict, band = noise_verdict([100.0, 101.0], [110.0, 111.0])
    assert (
        verdict == "better" and band == pytest.approx(0.02) and delta == pytest.approx(0.0995, 1e-3)
    )
    assert noise_verdict([100.0, 101.0], [101.0, 102.0])[1] == "within noise"
    assert noise_verdict([100.0, 101.0], [90.0, 91.0])[1] == "worse"
    # a noisy baseline (10% spread) widens the band to 20%: +15% is within noise
    assert noise_verdict([95.0, 100.0, 105.0], [115.0, 115.0])[1] == "within noise"


def _outcome(tps=100.0, engine=None, **fp):
    fingerprint = {"sampling": {"max_tokens": 16}, "loadgen": {"effective_min_duration_ms": 200}}
    fingerprint.update(fp)
    return RepeatOutcome(
        status="ok",
        tokens_per_second=tps,
        validity="VALID",
        accuracy="PASS",
        engine_args=engine or {"max_num_seqs": 64, "dtype": "bfloat16"},
        fingerprint=fingerprint,
    )


def test_confounding_guard(tmp_path):
    plan = parse_plan(
        _plan(
            tmp_path,
            "baseline --engine-arg max_num_seqs=64\nknob seqs --engine-arg max_num_seqs=128\n",
        )
    )
    spec = make_config(plan, 1, "seqs", [plan.knobs[0]])
    base = _outcome()
    assert (
        confounding(base, _outcome(engine={"max_num_seqs": 128, "dtype": "bfloat16"}), spec) is None
    )
    extra = confounding(base, _outcome(engine={"max_num_seqs": 128, "dtype": "float32"}), spec)
    assert "dtype" in extra
    noop = confounding(base, _outcome(engine={"max_num_seqs": 64, "dtype": "bfloat16"}), spec)
    assert "no effect" in noop
    other = confounding(
        base,
        _outcome(
            engine={"max_num_seqs": 128, "dtype": "bfloat16"},
            loadgen={"effective_min_duration_ms": 600000},
        ),
        spec,
    )
    assert "effective_min_duration_ms" in other


def test_confounding_guard_checks_engine_environment_variables(tmp_path):
    plan = parse_plan(
        _plan(
            tmp_path,
            "baseline --env VLLM_CPU_KVCACHE_SPACE=1\nknob threads --env OMP_NUM_THREADS=2\n",
        )
    )
    spec = make_config(plan, 1, "threads", [plan.knobs[0]])
    base = _outcome()
    base.env_vars = {"VLLM_CPU_KVCACHE_SPACE": "1"}

    def run(env):
        r = _outcome()
        r.env_vars = env
        return r

    clean = run({"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "2"})
    assert confounding(base, clean, spec) is None
    # something else in the environment changed too (e.g. exported in the shell mid-sweep)
    extra = run(
        {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "2", "VLLM_CPU_OMP_THREADS_BIND": "0"}
    )
    assert "environment changed beyond the knob: VLLM_CPU_OMP_THREADS_BIND=None->'0'" in (
        confounding(base, extra, spec) or ""
    )
    # a baseline variable that did not hold its value
    moved = run({"VLLM_CPU_KVCACHE_SPACE": "4", "OMP_NUM_THREADS": "2"})
    assert "VLLM_CPU_KVCACHE_SPACE ran as '4', the plan asked for '1'" in (
        confounding(base, moved, spec) or ""
    )
    # the knob's value did not reach the run
    wrong = run({"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "8"})
    assert "OMP_NUM_THREADS ran as '8', the plan asked for '2'" in (
        confounding(base, wrong, spec) or ""
    )
    # results written before env_vars were recorded are not judged on them
    assert confounding(base, run(None), spec) is None


def test_failure_line_prefers_the_root_cause():
    log = "\n".join(
        [
            "(Worker pid=1) ERROR 11-22 03:39:54 [multiproc_executor.py:1063] ValueError: "
            "No common block size for 7 (CPU_ATTN: [MultipleOf(32)]).",
            "(EngineCore pid=2) ERROR 11-22 03:39:54 [core.py:1510] RuntimeError: Worker failed "
            "with error 'x', please check the stack trace above for the root cause",
            "RuntimeError: Engine core initialization failed. See root cause above.",
        ]
    )
    assert failure_line(log) == (
        "ValueError: No common block size for 7 (CPU_ATTN: [MultipleOf(32)])."
    )
    assert failure_line("nothing useful\n", "EngineFailure: boom") == "EngineFailure: boom"
    # bad input in the child: the CLI's one line, not the door's header above it
    assert failure_line("$ python -m harness.cli run\nerror: model m does not exist\n") == (
        "model m does not exist"
    )
    assert failure_line("$ python -m harness.cli run\n") == "the run ended without output"


class FakeRunner:
    """Stands in for the `mlperf-vllm run` subprocess: throughput per knob set; the engine
    resolves what it was not given to `defaults` (vLLM's own defaults, say)."""

    def __init__(self, tps_by_knobs, fail=(), defaults=None):
        self.tps = tps_by_knobs
        self.fail = set(fail)
        self.calls: list[str] = []
        self.defaults = defaults or {}

    def __call__(self, plan, spec, out, mode, timeout):
        out.mkdir(parents=True, exist_ok=True)
        self.calls.append(spec.name)
        if set(spec.knobs) & self.fail:
            return RepeatOutcome(
                status="failed", error="ValueError: engine says no", output=str(out)
            )
        engine = {"max_num_seqs": 64, "dtype": "bfloat16"}
        for pair in spec.engine_args:
            k, _, v = pair.partition("=")
            engine[k] = int(v) if v.isdigit() else v
        tps = self.tps[tuple(spec.knobs)]
        out = _outcome(tps=tps, engine=engine)
        out.resolved = {**self.defaults, **engine}
        return out


def _stack_plan(tmp_path):
    return parse_plan(
        _plan(
            tmp_path,
            "baseline --engine-arg max_num_seqs=64\n"
            "knob a --engine-arg max_num_seqs=128\n"
            "knob b --engine-arg max_num_batched_tokens=4096\n"
            "knob c --engine-arg block_size=7\n"
            "knob d --env X=1\n",
        )
    )


def test_stacked_keeps_only_what_helped_and_goes_on_after_a_failure(tmp_path):
    plan = _stack_plan(tmp_path)
    runner = FakeRunner(
        {(): 100.0, ("a",): 120.0, ("a", "b"): 121.0, ("a", "d"): 130.0}, fail={"c"}
    )
    sweep = Sweep(
        plan, SweepOptions(kind="stacked", output=tmp_path / "out", repeats=1), runner=runner
    )
    rows = sweep.run()
    assert [r.config for r in rows] == ["baseline", "+a", "+b", "+c", "+d"]
    by = {r.config: r for r in rows}
    assert by["+a"].kept.startswith("kept") and by["+a"].noise_verdict == SINGLE_RUN
    assert by["+b"].kept.startswith("dropped")  # +0.8% on top of a: below the 2% floor
    assert by["+c"].status == "failed" and by["+c"].error == "ValueError: engine says no"
    assert by["+d"].kept.startswith("kept")
    assert sweep.final_stack == ["a", "d"]
    assert by["+d"].safe_to_ship == "yes" and by["+c"].safe_to_ship == "no"
    write_reports(tmp_path / "out", "stacked", plan, sweep.rows, {}, sweep.final_stack)
    with open(tmp_path / "out" / "sweep.csv") as fh:
        csv_rows = list(csv.DictReader(fh))
    assert [r["config"] for r in csv_rows] == ["baseline", "+a", "+b", "+c", "+d"]
    assert (tmp_path / "out" / "sweep.png").stat().st_size > 1000
    assert "| +c |" in (tmp_path / "out" / "sweep.md").read_text()


def test_resume_skips_finished_repeats(tmp_path):
    plan = _stack_plan(tmp_path)
    tps = {(): 100.0, ("a",): 90.0, ("b",): 100.0, ("c",): 1.0, ("d",): 100.0}
    first = FakeRunner(tps, fail={"c"})
    Sweep(plan, SweepOptions(output=tmp_path / "out", repeats=2), runner=first).run()
    assert len(first.calls) == 2 * 4 + 1  # the failed config stops after its first repeat
    again = FakeRunner(tps, fail={"c"})
    rows = Sweep(
        plan, SweepOptions(output=tmp_path / "out", repeats=2, resume=True), runner=again
    ).run()
    assert again.calls == []
    assert {r.config: r.resumed for r in rows}["a"] == 2
    assert {r.config: r.noise_verdict for r in rows}["a"] == "worse"
    # a changed plan is not "finished": that config runs again (the command refuses this
    # before any run, test_resume_refuses_a_finished_repeat_of_other_settings_before_any_run)
    plan2 = parse_plan(
        _plan(tmp_path, plan.text.split("\n", 4)[4].replace("max_num_seqs=128", "max_num_seqs=256"))
    )
    tps[("a",)] = 95.0
    third = FakeRunner(tps, fail={"c"})
    Sweep(plan2, SweepOptions(output=tmp_path / "out", repeats=2, resume=True), runner=third).run()
    assert third.calls == ["a", "a"]


def test_resume_refuses_a_finished_repeat_of_other_settings_before_any_run(tmp_path):
    from harness.errors import UsageError
    from harness.sweep.execute import run_sweep
    from harness.sweep.options import check_resume
    from harness.tracking import TrackingConfig

    plan = _stack_plan(tmp_path)
    out = tmp_path / "out"
    tps = {(): 100.0, ("a",): 90.0, ("b",): 100.0, ("c",): 100.0, ("d",): 100.0}
    Sweep(plan, SweepOptions(output=out, repeats=1), runner=FakeRunner(tps)).run()
    body = plan.text.split("\n", 4)[4]
    check_resume(plan, SweepOptions(output=out, resume=True))  # the same plan resumes
    # cut to the configs that finished (the rest left alone): resumes
    check_resume(
        parse_plan(_plan(tmp_path, body.split("knob c")[0])), SweepOptions(output=out, resume=True)
    )
    # the same plan from another working directory: other absolute paths
    (tmp_path / "elsewhere").mkdir()
    moved = parse_plan(_plan(tmp_path / "elsewhere", body))
    runner = FakeRunner(tps)
    with pytest.raises(UsageError) as err:
        run_sweep(
            moved.path,
            SweepOptions(output=out, repeats=1, resume=True),
            TrackingConfig(uri="", enabled=False),
            runner=runner,
        )
    assert runner.calls == []  # refused before any repeat ran
    msg = str(err.value)
    assert "00_baseline/rep1 is a finished repeat of 00_baseline" in msg
    assert f"model '{tmp_path}/model' (this plan: '{tmp_path}/elsewhere/model')" in msg
    assert "pass a new --output" in msg
    assert (out / "00_baseline" / "rep1" / "repeat.json").is_file()  # nothing touched
    # a knob of another value: its folder is not this config's
    changed = parse_plan(_plan(tmp_path, body.replace("max_num_seqs=128", "max_num_seqs=256")))
    with pytest.raises(UsageError, match=r"of 01_a run with other settings \(its engine arguments"):
        check_resume(changed, SweepOptions(output=out, resume=True))


def test_resume_of_a_stacked_sweep_knows_every_stack_it_may_have_kept(tmp_path):
    from harness.sweep.options import check_resume

    plan = _stack_plan(tmp_path)
    out = tmp_path / "out"
    runner = FakeRunner(
        {(): 100.0, ("a",): 120.0, ("a", "b"): 121.0, ("a", "c"): 100.0, ("a", "d"): 130.0}
    )
    opts = SweepOptions(kind="stacked", output=out, repeats=1, resume=True)
    assert Sweep(plan, opts, runner=runner).final_stack is None
    Sweep(plan, opts, runner=runner).run()
    check_resume(plan, opts)  # +d ran on top of a: a stack the check must know
    with pytest.raises(Exception, match="finished repeat of 00_baseline"):
        check_resume(plan, SweepOptions(kind="stacked", output=out, accuracy=True, resume=True))


def test_an_interrupted_sweep_reports_the_configs_that_finished(tmp_path):
    from harness.sweep.execute import run_sweep
    from harness.tracking import TrackingConfig

    plan = _stack_plan(tmp_path)
    out = tmp_path / "out"

    class Interrupted(FakeRunner):
        def __call__(self, plan, spec, out, mode, timeout):
            if "b" in spec.knobs:
                raise KeyboardInterrupt  # Ctrl-C or SIGTERM during b's run
            return super().__call__(plan, spec, out, mode, timeout)

    runner = Interrupted({(): 100.0, ("a",): 90.0})
    with pytest.raises(KeyboardInterrupt):
        run_sweep(
            plan.path,
            SweepOptions(output=out, repeats=2),
            TrackingConfig(uri="", enabled=False),
            runner=runner,
        )
    md = (out / "sweep.md").read_text()
    assert "**Interrupted** (not run: b, c, d)" in md
    assert "| baseline |" in md and "| a |" in md and "| b |" not in md
    with open(out / "sweep.csv") as fh:
        assert [r["config"] for r in csv.DictReader(fh)] == ["baseline", "a"]
    # stacked: the report says what the stack held when it stopped, not a final stack
    with pytest.raises(KeyboardInterrupt):
        run_sweep(
            plan.path,
            SweepOptions(kind="stacked", output=tmp_path / "stacked", repeats=1),
            TrackingConfig(uri="", enabled=False),
            runner=Interrupted({(): 100.0, ("a",): 120.0}),
        )
    md = (tmp_path / "stacked" / "sweep.md").read_text()
    assert "**Interrupted** (not run: b, c, d)" in md
    assert "Stack when interrupted: a\n" in md and "Final stack" not in md


def test_the_report_is_on_disk_after_each_config_for_a_sweep_killed_outright(tmp_path):
    """A lent GPU machine taken back ends the sweep with SIGKILL: no handler runs. What it
    leaves is the report as of the config in flight, so that is read while b runs."""
    from harness.sweep.execute import run_sweep
    from harness.tracking import TrackingConfig

    plan = _stack_plan(tmp_path)
    seen: dict[str, str] = {}

    class Snapshot(FakeRunner):
        def __call__(self, plan, spec, out, mode, timeout):
            md = out.parents[1] / "sweep.md"
            if "b" in spec.knobs and "b" not in seen:
                seen["b"] = md.read_text()
            return super().__call__(plan, spec, out, mode, timeout)

    tps = {(): 100.0, ("a",): 120.0, ("b",): 100.0, ("c",): 100.0, ("d",): 100.0}
    tps.update({("a", k): 100.0 for k in "bcd"})
    out = tmp_path / "out"
    run_sweep(
        plan.path,
        SweepOptions(output=out, repeats=1),
        TrackingConfig(uri="", enabled=False),
        runner=Snapshot(tps),
    )
    assert "**Unfinished** (not yet run: b, c, d)" in seen["b"]
    assert "| baseline |" in seen["b"] and "| a |" in seen["b"] and "| b |" not in seen["b"]
    final = (out / "sweep.md").read_text()  # the finished sweep's report says nothing of it
    assert "Unfinished" not in final and "| d |" in final
    assert "in_progress" not in json.loads((out / "sweep.json").read_text())
    seen.clear()
    run_sweep(
        plan.path,
        SweepOptions(kind="stacked", output=tmp_path / "stacked", repeats=1),
        TrackingConfig(uri="", enabled=False),
        runner=Snapshot(tps),
    )
    assert "**Unfinished** (not yet run: b, c, d)" in seen["b"]
    assert "Stack so far: a\n" in seen["b"] and "Final stack" not in seen["b"]


# --------------------------------------------------------------------------- knob semantics

CAPTURE_1024 = 'compilation_config={"max_cudagraph_capture_size":1024}'


def _recorded(*pairs: str) -> dict:
    """engine_args as a run records them in result.json: vLLM's parser, then our describe()."""
    from sut.engine import make_engine_config, parse_engine_arg_pairs

    return make_engine_config("m", parse_engine_arg_pairs(pairs), gpu=False).describe()


def test_json_valued_knob_is_compared_as_json_and_notes_stay_short(tmp_path):
    plan = parse_plan(_plan(tmp_path, f"knob capture --engine-arg '{CAPTURE_1024}'\n"))
    spec = make_config(plan, 1, "capture", [plan.knobs[0]])
    base = _outcome(engine=_recorded())
    ran = _recorded(CAPTURE_1024)
    # what result.json holds: compact JSON of what was set, not the object's ~2,000-char repr
    assert len(ran["compilation_config"]) < 200, ran["compilation_config"]
    assert confounding(base, _outcome(engine=ran), spec) is None
    # a different value is still caught, and the note quotes values cut short
    other = confounding(base, _outcome(engine=_recorded(CAPTURE_1024.replace("1024", "512"))), spec)
    assert other and "compilation_config ran as" in other and len(other) < 200, other
    # a result.json written with the whole object's text: judged, but never a 2,000-char note
    from sut.engine import parse_engine_arg_pairs

    whole = str(parse_engine_arg_pairs([CAPTURE_1024])["compilation_config"])
    assert len(whole) > 1000
    old = confounding(base, _outcome(engine={**_recorded(), "compilation_config": whole}), spec)
    assert old and len(old) < 200, old


@pytest.fixture(scope="module")
def resolved_defaults(tiny_model):
    """The engine's resolved values of every engine argument, from vLLM's real VllmConfig for
    the tiny model (no engine start), as `mlperf-vllm run` records them in result.json."""
    from vllm.engine.arg_utils import EngineArgs

    from sut.engine import make_engine_config, resolved_engine_args

    cfg = make_engine_config(str(tiny_model), gpu=False)
    return resolved_engine_args(EngineArgs(**cfg.all_kwargs()).create_engine_config())


def test_resolved_engine_args_hold_every_engine_argument(resolved_defaults):
    r = resolved_defaults
    assert r["max_num_seqs"] == 64 and r["enable_prefix_caching"] is False
    assert isinstance(r["async_scheduling"], bool)
    assert r["kv_cache_dtype"] == "auto"  # vLLM keeps it as cache_config.cache_dtype
    assert isinstance(r["compilation_config"], dict)
    assert "max_cudagraph_capture_size" in r["compilation_config"]
    import json

    json.dumps(r)  # JSON-able: it goes into result.json as is


def test_knob_equal_to_the_engines_resolved_value_is_a_no_op(tmp_path, resolved_defaults):
    r = resolved_defaults
    same_async = "true" if r["async_scheduling"] else "false"
    # a compilation_config key the engine resolved to a number (on CPU, graph capture sizes
    # stay unset): the knob restates it
    key, value = next(
        (k, v)
        for k, v in sorted(r["compilation_config"].items())
        if isinstance(v, int) and not isinstance(v, bool)
    )
    plan = parse_plan(
        _plan(
            tmp_path,
            f"knob async --engine-arg async_scheduling={same_async}\n"
            f"knob seqs --engine-arg max_num_seqs=128\n"
            f"knob capture_same --engine-arg "
            f"'compilation_config={{\"{key}\":{value}}}'\n"
            f"knob capture_new --engine-arg '{CAPTURE_1024}'\n"
            f"knob env --env OMP_NUM_THREADS=1\n",
        )
    )
    async_knob, seqs, capture_same, capture_new, env = plan.knobs
    base = _outcome()
    base.resolved = dict(r)

    def ran(**changed):
        out = _outcome()
        out.resolved = {**r, **changed}
        return out

    note = no_op(base, ran(), [async_knob])
    assert note and f"async_scheduling={r['async_scheduling']!r}" in note
    assert no_op(base, ran(max_num_seqs=128), [seqs]) is None
    assert no_op(base, ran(), [capture_same])  # compared on the knob's own key
    new_cc = {**r["compilation_config"], "max_cudagraph_capture_size": 1024}
    assert no_op(base, ran(compilation_config=new_cc), [capture_new]) is None
    assert no_op(base, ran(), [env]) is None  # environment knobs are never judged no-op
    unknown = _outcome()
    unknown.resolved = {}  # a result.json from before resolved values were recorded
    assert no_op(unknown, ran(), [async_knob]) is None

    # through the sweep: marked no-op (not a gain, however large its delta), never stacked
    runner = FakeRunner(
        {(): 100.0, ("async",): 103.0, ("seqs",): 110.0, ("async", "seqs"): 112.0},
        defaults={"async_scheduling": r["async_scheduling"]},
    )
    plan2 = parse_plan(
        _plan(
            tmp_path,
            f"knob async --engine-arg async_scheduling={same_async}\n"
            "knob seqs --engine-arg max_num_seqs=128\n",
        )
    )
    rows = Sweep(plan2, SweepOptions(output=tmp_path / "iso", repeats=1), runner=runner).run()
    by = {row.config: row for row in rows}
    assert by["async"].status == "no-op" and by["async"].noise_verdict == "no-op knob"
    assert by["async"].safe_to_ship == "no" and "no-op" in by["async"].note
    assert by["seqs"].status == "ok"
    table = markdown_table(rows, "isolation")
    assert "| no-op |" in table and "engine already ran async_scheduling" in table
    stacked = Sweep(
        plan2, SweepOptions(kind="stacked", output=tmp_path / "st", repeats=1), runner=runner
    )
    srows = stacked.run()
    assert {row.config: row.kept for row in srows}["+async"] == "dropped: no-op"
    assert stacked.final_stack == ["seqs"]
    # a knob restating a value the baseline run already passed to the engine (not in the plan:
    # a CPU default) leaves the engine args unchanged: a no-op, not "confounded"
    plan3 = parse_plan(_plan(tmp_path, "knob seqs64 --engine-arg max_num_seqs=64\n"))
    runner3 = FakeRunner({(): 100.0, ("seqs64",): 104.0})
    rows3 = Sweep(plan3, SweepOptions(output=tmp_path / "s64", repeats=1), runner=runner3).run()
    assert rows3[1].status == "no-op" and rows3[1].confounded == "", rows3[1]


def test_two_repeats_by_default_and_the_noise_band_is_reported(tmp_path):
    import argparse

    parser = argparse.ArgumentParser()
    add_sweep_arguments(parser)
    assert parser.parse_args(["plan.txt"]).repeats == 2
    assert SweepOptions().repeats == 2
    plan = _stack_plan(tmp_path)
    runner = FakeRunner({(): 100.0, ("a",): 101.0, ("b",): 110.0, ("c",): 100.0, ("d",): 99.0})
    rows = Sweep(plan, SweepOptions(output=tmp_path / "out"), runner=runner).run()
    assert runner.calls.count("baseline") == 2
    by = {row.config: row for row in rows}
    assert by["a"].noise_verdict == "within noise" and by["a"].noise_band_pct == pytest.approx(2)
    assert by["b"].noise_verdict == "better"
    table = markdown_table(rows, "isolation")
    assert "within noise (band ±2.0%)" in table and "better (band ±2.0%)" in table
    from harness.sweep.report import RULES

    assert "below the measured noise" in RULES and "no-op" in RULES.lower()


def test_price_per_hour_reaches_every_run_and_the_rows(tmp_path):
    from harness.sweep.repeat import child_run

    plan = _stack_plan(tmp_path)
    opts = SweepOptions(output=tmp_path / "out", repeats=1, price_per_hour=2.0, stall_timeout_s=9)
    default = Sweep(plan, opts)  # the real per-repeat runner: `mlperf-vllm run` child runs
    child = child_run(
        plan,
        make_config(plan, 0, "baseline", []),
        tmp_path,
        "performance",
        **default.runner.keywords,
    )
    cmd = child.argv()
    assert cmd[cmd.index("--price-per-hour") + 1] == "2"
    assert cmd[cmd.index("--stall-timeout") + 1] == "9"
    runner = FakeRunner({(): 100.0, ("a",): 200.0, ("b",): 100.0, ("c",): 100.0, ("d",): 100.0})
    rows = Sweep(plan, opts, runner=runner).run()
    by = {r.config: r for r in rows}
    # $2/h at 200 tok/s = 720,000 tokens an hour
    assert by["a"].usd_per_million_tokens == pytest.approx(2.0 / 0.72)
    assert "$/M tokens" in markdown_table(rows, "isolation")


def test_sut_option_knobs_reach_the_run_and_are_guarded(tmp_path):
    from harness.sweep.repeat import child_run

    plan = parse_plan(
        _plan(
            tmp_path,
            "baseline --sut warmup_samples=2\n"
            "knob longest --sut offline_order=longest-first\n"
            "knob warm --sut warmup_samples=8\n",
        )
    )
    longest, warm = plan.knobs
    spec = make_config(plan, 1, "longest", [longest])
    cmd = child_run(plan, spec, tmp_path, "performance").argv()
    assert cmd[cmd.index("--offline-order") + 1] == "longest-first"
    assert cmd[cmd.index("--warmup-samples") + 1] == "2"  # the baseline's
    assert spec.signature(plan, False) != make_config(plan, 2, "warm", [warm]).signature(
        plan, False
    )

    def ran(**sut_options):
        return _outcome(
            sut_options={"offline_order": "arrival", "warmup_samples": 2, **sut_options}
        )

    base = ran()
    assert confounding(base, ran(offline_order="longest-first"), spec) is None
    assert "sut offline_order ran as 'arrival'" in (confounding(base, ran(), spec) or "")
    # the baseline's own SUT option must hold too
    assert "sut warmup_samples ran as 0, the plan asked for '2'" in (
        confounding(base, ran(offline_order="longest-first", warmup_samples=0), spec) or ""
    )
    # a SUT option neither the baseline nor the knob sets must not move
    warm_spec = make_config(plan, 2, "warm", [warm])
    assert "sut_options differs from the baseline: offline_order" in (
        confounding(base, ran(warmup_samples=8, offline_order="longest-first"), warm_spec) or ""
    )
    assert confounding(base, ran(warmup_samples=8), warm_spec) is None
    assert no_op(base, ran(offline_order="longest-first"), [longest]) is None


@pytest.mark.parametrize(
    "body, match",
    [
        ("knob k --sut batch=4\n", "'batch' is not a SUT option"),
        ("knob k --sut warmup_sample=4\n", r"did you mean warmup_samples\?"),
        ("knob k --sut offline_order=random\n", "use one of arrival, longest-first"),
        ("knob k --sut warmup_samples=lots\n", "whole number"),
        ("knob k --sut dp_routing=random\n", "use one of ours, vllm"),
    ],
)
def test_bad_sut_knobs(tmp_path, body, match):
    with pytest.raises(PlanError, match=match):
        parse_plan(_plan(tmp_path, body))


def test_weights_free_output_settings_reach_every_run_and_the_signature(tmp_path):
    from harness.sweep.repeat import child_run

    plan = parse_plan(
        _plan(
            tmp_path,
            "ignore_eos yes\noutput_lengths tok_output_len\n"
            "knob seqs --engine-arg max_num_seqs=8\n",
        )
    )
    assert plan.ignore_eos and plan.output_lengths == "tok_output_len"
    spec = make_config(plan, 1, "seqs", plan.knobs)
    cmd = child_run(plan, spec, tmp_path, "performance").argv()
    assert "--ignore-eos" in cmd
    assert cmd[cmd.index("--output-lengths") + 1] == "tok_output_len"
    # a sweep folder of another output setting is not resumed as this one
    plain = parse_plan(_plan(tmp_path, "knob seqs --engine-arg max_num_seqs=8\n"))
    plain_spec = make_config(plain, 1, "seqs", plain.knobs)
    assert "--ignore-eos" not in child_run(plain, plain_spec, tmp_path, "performance").argv()
    assert spec.signature(plan, False) != plain_spec.signature(plain, False)


@pytest.mark.parametrize(
    "body, match",
    [
        ("ignore_eos maybe\n", "ignore_eos 'maybe' must be yes or no"),
        ("output_lengths tok_output_len\n", "needs `ignore_eos yes`"),
        ("ignore_eos no\noutput_lengths n\n", "needs `ignore_eos yes`"),
    ],
)
def test_bad_output_settings(tmp_path, body, match):
    with pytest.raises(PlanError, match=match):
        parse_plan(_plan(tmp_path, body + "knob k --engine-arg max_num_seqs=8\n"))


def test_sut_knobs_only_for_offline(tmp_path):
    p = _plan(tmp_path, "knob k --sut offline_order=longest-first\n")
    p.write_text(p.read_text().replace("scenario Offline", "scenario Server"))
    with pytest.raises(PlanError, match="Offline scenario only"):
        parse_plan(p)


def test_a_sut_knob_applies_where_runspec_says_it_does(tmp_path):
    """A plan's knob names and their scenarios come from RunSpec's one declaration: the
    warm-up applies to every scenario, the Offline order to Offline only."""
    from harness.run.setup.spec import RunSpec
    from harness.sweep.plan import plan_settings_names, sut_knobs

    assert set(sut_knobs()) == {n for n, how in RunSpec.options() if how.plan == "knob"}
    assert sut_knobs()["offline_order"] == ("Offline",) and sut_knobs()["warmup_samples"] is None
    assert plan_settings_names()[:2] == ("benchmark", "scenario")
    p = _plan(tmp_path, "knob k --sut warmup_samples=4\n")
    p.write_text(p.read_text().replace("scenario Offline", "scenario Server"))
    plan = parse_plan(p, check_engine_args=False)
    assert plan.scenario == "Server" and plan.knobs[0].change.sut == (("warmup_samples", "4"),)
    p.write_text(p.read_text() + "knob o --sut offline_order=longest-first\n")
    with pytest.raises(PlanError, match="offline_order applies to the Offline scenario only"):
        parse_plan(p, check_engine_args=False)


def test_a_server_sweep_says_its_figure_does_not_rank_capacity(tmp_path):
    path = _plan(
        tmp_path, "baseline --engine-arg max_num_seqs=64\nknob a --engine-arg max_num_seqs=8\n"
    )
    path.write_text(path.read_text().replace("scenario Offline", "scenario Server"))
    plan = parse_plan(path)
    runner = FakeRunner({(): 100.0, ("a",): 101.0})
    sweep = Sweep(plan, SweepOptions(output=tmp_path / "out", repeats=1), runner=runner)
    write_reports(tmp_path / "out", "isolation", plan, sweep.run(), {})
    md = (tmp_path / "out" / "sweep.md").read_text()
    assert "Figure (Server): tokens/s of a run at the user.conf's fixed target_qps" in md
    assert "does not rank capacity" in md and "mlperf-vllm calibrate --scenario Server" in md
    assert md.index("Figure (Server)") < md.index("| baseline |")
    # an Offline sweep's figure is its throughput: no such note
    (tmp_path / "o").mkdir()
    offline = parse_plan(
        _plan(tmp_path / "o", "baseline --engine-arg max_num_seqs=64\nknob a --env X=1\n")
    )
    write_reports(tmp_path / "o" / "out", "isolation", offline, [], {})
    assert "Figure (" not in (tmp_path / "o" / "out" / "sweep.md").read_text()


@pytest.mark.parametrize(
    "scenario, options, match",
    [
        ("Offline", {"figure": "capacity"}, "--figure capacity is a Server or Interactive figure"),
        ("Offline", {"calibrate_args": ("--trials", "3")}, "a capacity sweep's"),
        ("Server", {"figure": "capacity", "calibrate_args": ()}, None),
        ("Server", {"figure": "tokens", "calibrate_args": ("--trials", "3")}, "a capacity sweep's"),
        ("Server", {"figure": "fastest"}, "unknown --figure 'fastest'"),
    ],
)
def test_a_capacity_figure_fits_the_plan_before_anything_runs(tmp_path, scenario, options, match):
    from harness.errors import UsageError
    from harness.sweep.execute import run_sweep
    from harness.sweep.options import resolve_figure
    from harness.tracking import TrackingConfig

    path = _plan(tmp_path, "knob a --engine-arg max_num_seqs=8\n")
    path.write_text(path.read_text().replace("scenario Offline", f"scenario {scenario}"))
    out = tmp_path / "out"
    opts = SweepOptions(output=out, repeats=1, **options)
    if match is None:  # fits: "auto" resolves to it too, for a Server plan
        auto = resolve_figure(parse_plan(path), SweepOptions(output=out))
        assert opts.figure == auto.figure == "capacity"
        return
    with pytest.raises(UsageError, match=match):
        run_sweep(path, opts, TrackingConfig(uri="", enabled=False), runner=FakeRunner({}))
    assert not out.exists()  # refused before the sweep folder or any engine


def _pickle_plan(tmp_path: Path) -> Path:
    """A plan whose dataset is a pickle (it only has to exist: nothing loads it here)."""
    path = _plan(tmp_path, "knob a --engine-arg max_num_seqs=8\n")
    (tmp_path / "data.pkl").write_bytes(b"")
    path.write_text(path.read_text().replace("data.json", "data.pkl"))
    return path


def test_allow_pickle_reaches_every_child_run(tmp_path):
    import argparse

    from harness.cli import build_parser
    from harness.cli.sweep import sweep_options
    from harness.sweep.repeat import child_run

    path = _pickle_plan(tmp_path)
    p = argparse.ArgumentParser()
    add_sweep_arguments(p)
    assert sweep_options(p.parse_args([str(path), "--allow-pickle"])).allow_pickle
    assert not sweep_options(p.parse_args([str(path)])).allow_pickle
    plan = parse_plan(path)
    spec = make_config(plan, 1, "a", plan.knobs)
    for figure in ("tokens", "capacity"):  # a `run` child, or a `calibrate` one
        opts = SweepOptions(output=tmp_path / "out", repeats=1, figure=figure, allow_pickle=True)
        runner = Sweep(plan, opts).runner  # the real per-repeat runner: a child process
        assert runner.keywords["allow_pickle"] is True, figure
        kw = {k: v for k, v in runner.keywords.items() if k != "calibrate_args"}
        cmd = child_run(plan, spec, tmp_path, "performance", **kw).argv()
        args, _ = build_parser().parse_known_args(cmd[cmd.index("run") :])
        assert args.allow_pickle and args.dataset == plan.dataset
    plain = Sweep(plan, SweepOptions(output=tmp_path / "out", repeats=1)).runner
    assert "--allow-pickle" not in child_run(plan, spec, tmp_path, "both", **plain.keywords).argv()


def test_a_pickle_dataset_without_allow_pickle_is_refused_before_any_run(tmp_path):
    from harness.errors import UsageError
    from harness.sweep.execute import run_sweep
    from harness.tracking import TrackingConfig
    from tests.conftest import cli

    path = _pickle_plan(tmp_path)
    out = tmp_path / "out"
    runner = FakeRunner({(): 100.0, ("a",): 100.0})
    with pytest.raises(UsageError, match="add --allow-pickle to the sweep"):
        run_sweep(
            path, SweepOptions(output=out, repeats=1), TrackingConfig(uri="", enabled=False), runner
        )
    assert runner.calls == [] and not out.exists()
    proc = cli("sweep", str(path), "--output", str(out), "--no-mlflow", timeout=300)
    assert proc.returncode == 2, proc.stderr
    # (vLLM's import may print notes of its own on stderr)
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("error: ")]
    assert "is a pickle" in line and "add --allow-pickle" in line
    assert not list(out.glob("*/rep*"))  # no child run started
    # with the flag the same plan runs, and every repeat's run is given it
    opts = SweepOptions(output=out, repeats=1, allow_pickle=True)
    run_sweep(path, opts, TrackingConfig(uri="", enabled=False), runner)
    assert runner.calls == ["baseline", "a"]
