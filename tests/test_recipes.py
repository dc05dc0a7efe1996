"""The multi-GPU / multi-node recipes and run scripts, validated by a dry run: every command
they print parses with our CLI and every engine flag with vLLM's own parser."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import build_parser
from sut.engine import parse_engine_flags

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
ENV = {
    **os.environ,
    "MODEL": "/models/m",
    "DATASET": "/data/d.pkl",
    "NODE_IP": "10.0.0.1",
    "HEAD_IP": "10.0.0.2",
}


def dry(script: str, *args: str) -> list[str]:
    proc = subprocess.run(
        ["bash", str(SCRIPTS / script), "--dry-run", *args],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if line.strip()]


def parse_run(line: str) -> tuple[object, dict]:
    argv = shlex.split(line)
    argv = argv[argv.index("run") :]
    args, extra = build_parser().parse_known_args(argv)
    return args, parse_engine_flags(extra)


@pytest.mark.parametrize(
    "recipe,bench,tp,pp,dp,engine",
    [
        ("405b-2node", "llama3_1-405b", 8, 2, None, {"distributed_executor_backend": "ray"}),
        ("70b-2node", "llama2-70b", 2, 2, None, {"distributed_executor_backend": "ray"}),
        ("70b-2gpu", "llama2-70b", 2, None, None, {"quantization": "fp8", "kv_cache_dtype": "fp8"}),
        ("70b-8gpu", "llama2-70b", 2, None, 4, {"quantization": "fp8"}),
        ("8b-dp2", "llama3_1-8b", None, None, 2, {}),
    ],
)
def test_parallel_recipes_produce_valid_commands(recipe, bench, tp, pp, dp, engine):
    (line,) = dry("multinode.sh", recipe, "Offline")
    args, flags = parse_run(line)
    assert args.benchmark == bench and args.scenario == "Offline" and args.mode == "both"
    assert (args.tensor_parallel_size, args.pipeline_parallel_size, args.data_parallel_size) == (
        tp,
        pp,
        dp,
    )
    for k, v in engine.items():
        assert flags[k] == v
    assert args.allow_pickle  # the 70B / 405B datasets are pickles
    assert Path(args.user_conf).exists(), args.user_conf


def test_ray_commands_keep_the_dashboard_on_loopback():
    (head,) = dry("multinode.sh", "ray-head")
    assert "--head" in head and "--dashboard-host 127.0.0.1" in head
    (worker,) = dry("multinode.sh", "ray-worker")
    assert "--address 10.0.0.2:6379" in worker


def test_ray_check_asks_for_the_405b_recipes_layout():
    (line,) = dry("multinode.sh", "ray-check")
    argv = shlex.split(line)
    args = build_parser().parse_args(argv[argv.index("ray-check") :])
    assert (args.tensor_parallel_size, args.pipeline_parallel_size, args.nodes) == (8, 2, 2)
    (line,) = dry("multinode.sh", "ray-check", "70b-2node")
    argv = shlex.split(line)
    args = build_parser().parse_args(argv[argv.index("ray-check") :])
    assert (args.tensor_parallel_size, args.pipeline_parallel_size, args.nodes) == (2, 2, 2)


def test_ray_nodes_take_an_object_store_cap():
    env = {**ENV, "OBJECT_STORE_BYTES": "2000000000", "GPUS_PER_NODE": "2"}
    for what in ("ray-head", "ray-worker"):
        proc = subprocess.run(
            ["bash", str(SCRIPTS / "multinode.sh"), "--dry-run", what],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode == 0, proc.stderr
        assert "--object-store-memory 2000000000" in proc.stdout and "--num-gpus 2" in proc.stdout


@pytest.mark.parametrize("script", ["run_offline.sh", "run_server.sh", "run_accuracy.sh"])
def test_run_scripts_pass_engine_flags_through(script):
    (line,) = dry(script, "llama3_1-8b", "--max-num-seqs", "512")
    args, flags = parse_run(line)
    assert args.benchmark == "llama3_1-8b" and flags == {"max_num_seqs": 512}


@pytest.mark.parametrize("scenario", ["Server", "Interactive"])
def test_accuracy_on_server_needs_a_rate(scenario):
    """Server accuracy issues every sample at the conf's rate: without a conf or --target-qps
    LoadGen's default 1 QPS would run the 8B for 3.7 h, so the script refuses, naming both."""
    proc = subprocess.run(
        ["bash", str(SCRIPTS / "run_accuracy.sh"), "--dry-run", "llama3_1-8b", scenario],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2 and not proc.stdout
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and "--user-conf" in line and "--target-qps" in line
    for given in (["--user-conf", "c.conf"], ["--target-qps=40"]):
        (line,) = dry("run_accuracy.sh", "llama3_1-8b", scenario, *given)
        args, _ = parse_run(line)
        assert args.scenario == scenario and args.mode == "accuracy"


def test_missing_model_is_a_clear_error():
    env = {k: v for k, v in ENV.items() if k != "MODEL"}
    proc = subprocess.run(
        ["bash", str(SCRIPTS / "multinode.sh"), "--dry-run", "8b-dp2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2 and "set MODEL" in proc.stderr


def _certify(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = {
        **os.environ,
        "MODEL": str(tmp_path / "no-such-model"),
        "DATASET": str(tmp_path / "d.json"),
        "OUT": str(tmp_path / "cert"),
        "MLPERF_VLLM": f"{sys.executable} -m harness.cli",
        **env,
    }
    return subprocess.run(
        ["bash", str(SCRIPTS / "certify.sh"), *args, "llama3_1-8b", "Offline"],
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(SCRIPTS.parent),
    )


def test_certify_stops_at_a_failed_calibration_and_names_it(tmp_path):
    proc = _certify(tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith("calibrate ")]
    assert rows and rows[0][1] == "FAIL" and "does not exist" in proc.stdout
    assert "performance " not in proc.stdout  # nothing ran after the failed step
    assert "VERDICT: NOT READY" in proc.stdout


def test_certify_table_lists_every_step_with_a_given_conf(tmp_path):
    """USER_CONF skips calibration (SKIPPED is not a failure); each later step fails on the
    missing model with its own one-line error, and the table says so step by step."""
    conf = SCRIPTS.parent / "user_confs" / "smoke" / "offline.conf"
    proc = _certify(tmp_path, USER_CONF=str(conf), SUBMISSION_FLAG="")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    table = {ln.split()[0]: ln for ln in proc.stdout.splitlines() if ln[:1].isalpha()}
    assert table["calibrate"].split()[1] == "SKIPPED"
    for step in ("performance", "accuracy", "test06-run"):
        assert "FAIL (exit 2)" in table[step] and "does not exist" in table[step], table[step]
    assert "FAIL (exit 2)" in table["package"]
    assert "test06" not in table and "check" not in table  # their inputs never existed
    assert "VERDICT: NOT READY" in proc.stdout
    # the round is chosen up front and said plainly
    assert "for round v6.1 (newest round with llama3.1-8b" in proc.stdout


def test_certify_refuses_a_benchmark_the_round_lacks_before_any_step(tmp_path):
    proc = subprocess.run(
        ["bash", str(SCRIPTS / "certify.sh"), "--round", "v6.1", "llama3_1-405b", "Offline"],
        env={
            **os.environ,
            "MODEL": str(tmp_path / "m"),
            "DATASET": str(tmp_path / "d.pkl"),
            "OUT": str(tmp_path / "cert"),
            "MLPERF_VLLM": f"{sys.executable} -m harness.cli",
        },
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(SCRIPTS.parent),
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "rounds with it: v6.0" in proc.stderr
    assert not (tmp_path / "cert").exists() and "READY" not in proc.stdout


def _certify_commands(stdout: str, prefix: list[str]) -> list[list[str]]:
    """The commands of a certify.sh dry run (comment lines dropped), each without the CLI prefix."""
    cmds = []
    for line in stdout.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        argv = shlex.split(line)
        assert argv[: len(prefix)] == prefix, line
        cmds.append(argv[len(prefix) :])
    return cmds


def test_certify_dry_run_prints_every_step_and_runs_nothing(tmp_path):
    """--dry-run prints each command (quoted; each parses with our CLI), in order, with the paths
    a real run would use; the runs read the conf calibrate would write; no folder is made."""
    proc = _certify(tmp_path, "--dry-run", RUN_ARGS="--max-num-seqs 512", SYSTEM="sys1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp_path / "cert"
    assert not out.exists()
    cmds = _certify_commands(proc.stdout, [sys.executable, "-m", "harness.cli"])
    assert [c[0] for c in cmds] == [
        "rounds", "calibrate", "run", "run", "run", "compliance", "package", "check-submission",
    ]  # fmt: skip
    parser = build_parser()
    parsed = [parser.parse_known_args(c) for c in cmds]
    for _args, extra in parsed:
        parse_engine_flags(extra)  # anything left over is a vLLM engine flag
    (rounds, _), (cal, cal_extra) = parsed[:2]
    assert rounds.benchmark == "llama3_1-8b"
    assert str(cal.output) == str(out / "calibrate")
    assert parse_engine_flags(cal_extra) == {"max_num_seqs": 512}
    conf = str(out / "calibrate" / "user.conf")
    assert "# calibrate would write the target QPS into " + conf in proc.stdout
    runs = [args for args, _ in parsed[2:5]]
    assert [(a.mode, str(a.output)) for a in runs] == [
        ("performance", str(out / "performance")),
        ("accuracy", str(out / "accuracy")),
        ("performance", str(out / "TEST06")),
    ]
    assert all(str(a.user_conf) == conf for a in runs)
    assert runs[0].submission and runs[1].submission and runs[2].audit_config
    assert Path(runs[2].audit_config).exists()
    package, check = parsed[6][0], parsed[7][0]
    assert (package.system, str(package.out)) == ("sys1", str(out / "submission"))
    assert str(check.root) == str(out / "submission")
    assert "# performance (log: " + str(out / "performance.log") + ")" in proc.stdout
    assert "nothing ran" in proc.stdout and "VERDICT" not in proc.stdout


def _dry_run(tmp_path: Path, benchmark: str, scenario: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "MODEL": "/m",
        "DATASET": "/d.json",
        "OUT": str(tmp_path / "cert"),
        "MLPERF_VLLM": f"{sys.executable} -m harness.cli",
    }
    return subprocess.run(
        ["bash", str(SCRIPTS / "certify.sh"), "--dry-run", benchmark, scenario],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(SCRIPTS.parent),
    )


def test_certify_dry_run_covers_every_benchmark_and_scenario(tmp_path):
    """Every benchmark x scenario either prints its steps or is refused up front, exit 2, in
    one `error:` line naming what to certify instead; nothing is made either way. SingleStream
    has no calibration (the shipped conf) and the edge benchmark no TEST06; Server and
    Interactive confirm with two full-length runs in a row; every run logs to MLflow; the 405B
    is refused while the installed LoadGen cannot make its round's results."""
    from harness.run.record.environment import installed_versions
    from harness.submission.rounds import choose_round, loadgen_mismatch

    loadgen = installed_versions(["mlcommons-loadgen"]).get("mlcommons-loadgen")
    for benchmark in ("llama3_1-8b", "llama3_1-8b-edge", "llama2-70b", "llama3_1-405b"):
        rnd = choose_round(None, benchmark).round
        model = choose_round(None, benchmark).model
        accepted = model.scenarios[model.home_category()].accepted
        for scenario in ("Offline", "Server", "Interactive", "SingleStream"):
            proc = _dry_run(tmp_path, benchmark, scenario)
            assert not (tmp_path / "cert").exists()
            if scenario not in accepted or loadgen_mismatch(rnd, loadgen):
                assert proc.returncode == 2, (benchmark, scenario, proc.stdout)
                (line,) = proc.stderr.strip().splitlines()
                assert line.startswith("error: "), line
                assert ("certify one of" in line) or ("pip install" in line), line
                continue
            assert proc.returncode == 0, (benchmark, scenario, proc.stderr)
            cmds = _certify_commands(proc.stdout, [sys.executable, "-m", "harness.cli"])
            names = [c[0] for c in cmds]
            assert names[0] == "rounds" and names[-2:] == ["package", "check-submission"]
            assert ("calibrate" in names) == (scenario != "SingleStream"), names
            assert ("compliance" in names) == model.test06, names
            steps = re.search(r"# dry run: (\d+) steps printed", proc.stdout)
            assert steps and int(steps.group(1)) == len(cmds) - 1  # every command but rounds
            for c in cmds:
                assert "--no-mlflow" not in c, c
                if c[0] == "calibrate":
                    confirm = scenario in ("Server", "Interactive")
                    assert ("--confirm" in c and "--confirm-passes" in c) == confirm, c
                    if confirm:
                        assert c[c.index("--confirm-passes") + 1] == "2"
                if c[0] == "run" and scenario == "SingleStream":
                    conf = c[c.index("--user-conf") + 1]
                    assert conf.endswith(f"user_confs/{benchmark}/singlestream.conf")
                    assert Path(conf).is_file()


def test_certify_dry_run_with_a_conf_skips_calibrate(tmp_path):
    conf = SCRIPTS.parent / "user_confs" / "smoke" / "offline.conf"
    proc = _certify(tmp_path, "--dry-run", "--round", "v6.1", USER_CONF=str(conf))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cmds = _certify_commands(proc.stdout, [sys.executable, "-m", "harness.cli"])
    assert "calibrate" not in [c[0] for c in cmds] and "calibrate: skipped" in proc.stdout
    for c in cmds:
        args, _ = build_parser().parse_known_args(c)
        if c[0] == "run":
            assert str(args.user_conf) == str(conf) and args.round == "v6.1"
    assert not (tmp_path / "cert").exists()


def test_certify_finds_the_cli_like_the_other_scripts(tmp_path):
    """No MLPERF_VLLM: certify.sh takes _common.sh's pick. A copy of the scripts outside the repo
    (no .venv next to it) with a stand-in `mlperf-vllm` on the PATH prints that name; the stand-in
    never runs in a dry run."""
    assert 'source "$(dirname "$0")/_common.sh"' in (SCRIPTS / "certify.sh").read_text()
    copy = tmp_path / "repo" / "scripts"
    copy.mkdir(parents=True)
    for name in ("certify.sh", "_common.sh"):
        (copy / name).write_text((SCRIPTS / name).read_text())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "ran"
    stub = bin_dir / "mlperf-vllm"
    stub.write_text(f'#!/usr/bin/env bash\necho "$1" >> {shlex.quote(str(marker))}\n')
    stub.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("MLPERF_VLLM", "DRY_RUN")}
    env.update(MODEL="/m", DATASET="/d.json", OUT=str(tmp_path / "cert"))
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    proc = subprocess.run(
        ["bash", str(copy / "certify.sh"), "--dry-run", "llama3_1-8b", "Offline"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cmds = _certify_commands(proc.stdout, ["mlperf-vllm"])
    # the one command a dry run runs is the round's table lookup (it starts and writes nothing)
    assert len(cmds) == 8 and marker.read_text() == "rounds\n"
    assert not (tmp_path / "cert").exists()
    # in the repo: .venv/bin/mlperf-vllm when it exists, as run_offline.sh takes it
    venv_cli = SCRIPTS.parent / ".venv" / "bin" / "mlperf-vllm"
    if os.access(venv_cli, os.X_OK):
        proc = subprocess.run(
            ["bash", str(SCRIPTS / "certify.sh"), "--dry-run", "llama3_1-8b", "Offline"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert len(_certify_commands(proc.stdout, [str(venv_cli)])) == 8


def test_shipped_engine_lines_parse_and_stay_compliant():
    """Every measured engine line the project ships (user_confs/engines/<gpu>/
    <benchmark>.<Scenario>.toml) names a known benchmark and scenario, its flags parse with our
    CLI and with vLLM's own parser, and none turns prefix caching on. The GPU example confs
    point at them and hold no `# engine` line of their own: one copy of each line."""
    from harness.benchmarks import get_benchmark
    from harness.cli.engine_line import line_flags
    from sut.engine import parse_engine_arg_pairs

    user_confs = SCRIPTS.parent / "user_confs"
    seen = 0
    for path in sorted((user_confs / "engines").glob("*/*.toml")):
        bench, scenario = path.stem.rsplit(".", 1)
        assert scenario in ("Offline", "Server", "Interactive"), path
        get_benchmark(bench)
        argv = ["run", "--benchmark", bench, "--scenario", scenario, "--model", "m"]
        argv += ["--dataset", "d", "--output", "o", *line_flags(path, bench, scenario)]
        args, extra = build_parser().parse_known_args(argv)
        resolved = {**parse_engine_flags(extra), **parse_engine_arg_pairs(args.engine_args)}
        assert resolved, path
        assert resolved.get("enable_prefix_caching") is not True, path
        seen += 1
    assert seen >= 5
    for conf in sorted((user_confs / "examples").glob("*.conf")):
        text = conf.read_text()
        assert f"user_confs/engines/{conf.stem}/" in text, conf.name
        assert not any(ln.startswith("# engine ") for ln in text.splitlines()), conf.name


def test_certify_dry_run_takes_the_shipped_engine_lines(tmp_path):
    """RUN_ARGS="--engine-line user_confs/engines/h200", as README and certify.sh document it:
    calibrate and every run carry it, and each expands to the Offline line's flags."""
    from harness.cli.engine_line import expand

    line = "user_confs/engines/h200"
    proc = _certify(tmp_path, "--dry-run", RUN_ARGS=f"--engine-line {line}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cmds = _certify_commands(proc.stdout, [sys.executable, "-m", "harness.cli"])
    with_line = [c for c in cmds if c[0] in ("calibrate", "run")]
    assert len(with_line) == 4
    for cmd in with_line:
        assert cmd[cmd.index("--engine-line") + 1] == line
        expanded, note = expand(cmd, cmd[0], "llama3_1-8b", "Offline", line)
        assert "--engine-line" not in expanded and "max_num_batched_tokens=65536" in note
        args, extra = build_parser().parse_known_args(expanded)
        if cmd[0] == "run":  # calibrate hands the run flags on to its runs unparsed
            parse_engine_flags(extra)
            assert "max_num_batched_tokens=65536" in args.engine_args


@pytest.mark.parametrize("script", ["isolation_sweep.sh", "stacked_sweep.sh"])
def test_both_sweep_entry_names_work(script):
    """One shared body (scripts/_sweep.sh) behind both documented names; test_sweep_e2e.py runs
    each for real."""
    proc = subprocess.run(
        [str(SCRIPTS / script)], env=ENV, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2 and proc.stderr.startswith(f"usage: {SCRIPTS / script} PLAN")
    assert ("[--keep-all]" in proc.stderr) == (script == "stacked_sweep.sh")


@pytest.mark.parametrize(
    "dataset, pickle", [("/data/d.pkl", True), ("/data/d.pickle", True), ("/data/d.json", False)]
)
def test_sweep_scripts_pass_allow_pickle_for_a_pickled_dataset(tmp_path, dataset, pickle):
    """The sweep scripts exec `mlperf-vllm sweep` (no --dry-run): a stand-in CLI on PATH
    prints the command line it was given, which parses with our CLI."""
    stub = tmp_path / "mlperf-vllm"
    stub.write_text('#!/usr/bin/env bash\nprintf "%q " mlperf-vllm "$@"\n')
    stub.chmod(0o755)
    env = {**ENV, "DATASET": dataset, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    for script, kind in (("isolation_sweep.sh", "isolation"), ("stacked_sweep.sh", "stacked")):
        proc = subprocess.run(
            [str(SCRIPTS / script), "plan.txt", "--repeats", "1"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode == 0, proc.stderr
        argv = shlex.split(proc.stdout)
        args = build_parser().parse_args(argv[argv.index("sweep") :])
        assert (args.kind, str(args.plan), args.repeats) == (kind, "plan.txt", 1)
        assert args.allow_pickle is pickle, script
