"""LoadGen settings on `run`'s command line (`--target-qps`, `--min-duration`,
`--min-query-count`) over the user.conf, the refusal of settings under which LoadGen would never
end, and `mlperf-vllm compare` over finished run folders.

- One real Server run on the tiny model with all three overrides: LoadGen ran with them (its
  detail log's effective settings), result.json and the result table record them, the run is
  marked not compliant for its short duration, and MLflow gets them as `override.*` params.
- A Server conf with target_qps = 0, and `--target-qps 0`: one line naming the setting and the
  fix, exit 2, in seconds, before any engine starts or any file is written.
- The terminal of that run: our lines, vLLM's in the run's engine.log.
- `compare` over that run and the session's Server smoke run (same model, other rate and
  duration): one row each, the knobs that differ found, the CSV with a column per knob.

Time budget: 40 s: one engine start, beside the session's Server run, which the rest reuses.
"""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time

import pytest

from harness.errors import UsageError
from harness.run.record.result import RunResult
from harness.run.setup.settings import check_overrides
from harness.tracking.params import result_params
from tests.conftest import REPO, SMOKE, cli, run_args


def test_override_values_are_checked():
    check_overrides("Server", {"target_qps": 2.5, "min_duration_s": 0, "min_query_count": 1})
    with pytest.raises(UsageError, match="--target-qps 0: a rate above 0"):
        check_overrides("Server", {"target_qps": 0})
    with pytest.raises(UsageError, match="SingleStream .* no target rate"):
        check_overrides("SingleStream", {"target_qps": 3})
    with pytest.raises(UsageError, match="--min-duration -1"):
        check_overrides("Offline", {"min_duration_s": -1})
    with pytest.raises(UsageError, match="--min-query-count 0: at least 1"):
        check_overrides("Server", {"min_query_count": 0})


def test_overrides_are_mlflow_params():
    params = result_params(RunResult(benchmark="b", loadgen_overrides={"target_qps": 3.5}))
    assert params["override.target_qps"] == 3.5
    assert not any(k.startswith("override.") for k in result_params(RunResult(benchmark="b")))


@pytest.mark.e2e
@pytest.mark.parametrize("how", ["conf", "flag"])
def test_a_zero_rate_is_refused_before_the_engine(tiny_model, tiny_dataset, tmp_path, how):
    conf = tmp_path / "zero.conf"
    conf.write_text(
        "*.Server.min_duration = 1000\n*.Server.min_query_count = 10\n"
        + ("*.Server.target_qps = 0\n" if how == "conf" else "*.Server.target_qps = 4\n")
    )
    out = tmp_path / "out"
    extra = () if how == "conf" else ("--target-qps", "0")
    t0 = time.monotonic()
    proc = cli(*run_args(tiny_model, tiny_dataset, out, conf, *extra, scenario="Server"))
    took = time.monotonic() - t0
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    if how == "conf":
        assert "target_qps is 0" in errors[0] and str(conf) in errors[0], errors
        assert "pass --target-qps" in errors[0]
    else:
        assert "--target-qps 0: a rate above 0 QPS" in errors[0], errors
    assert not out.exists()  # nothing written, no engine started
    assert took < 30, took


@pytest.fixture(scope="module")
def overridden_run(tiny_model, tiny_dataset, tmp_path_factory, request):
    """The overridden Server run, started in the background while the session's Server run
    (which `compare` puts beside it) is made: two engine starts of the tiny model overlap, and
    nothing asserted of either is a rate or a latency beyond what the session run's own retry
    on a host stall covers."""
    root = tmp_path_factory.mktemp("overrides")
    out = root / "q12"
    args = run_args(
        tiny_model,
        tiny_dataset,
        out,
        SMOKE / "server.conf",
        *("--max-tokens", "16", "--target-qps", "12", "--min-duration", "1.5"),
        *("--min-query-count", "40"),
        scenario="Server",
    )
    # Its output goes to files: a pipe nobody reads while the session run is made could fill.
    stdout, stderr = root / "stdout.txt", root / "stderr.txt"
    with open(stdout, "w") as fo, open(stderr, "w") as fe:
        child = subprocess.Popen(
            [sys.executable, "-m", "harness.cli", *args], stdout=fo, stderr=fe, cwd=str(REPO)
        )
    try:
        request.getfixturevalue("server_smoke_run")
        child.wait(timeout=900)
    finally:
        if child.poll() is None:  # the session run failed: the run is interrupted, as by Ctrl-C
            child.send_signal(signal.SIGINT)
            try:
                child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    proc = subprocess.CompletedProcess(
        child.args, child.returncode, stdout.read_text(), stderr.read_text()
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return out, proc


@pytest.mark.e2e
def test_overrides_reach_loadgen_and_are_recorded(overridden_run):
    out, proc = overridden_run
    result = json.loads((out / "result.json").read_text())
    assert result["loadgen_overrides"] == {
        "target_qps": 12.0,
        "min_duration_s": 1.5,
        "min_query_count": 40,
    }
    # what LoadGen itself says it ran with (its detail log), over the conf's 8 QPS / 5 s / 500
    effective = result["performance"]["settings"]
    assert effective["effective_target_qps"] == 12
    assert effective["effective_min_duration_ms"] == 1500
    assert effective["effective_min_query_count"] == 40
    assert "min_duration" in (result["not_compliant"] or [])
    assert "LoadGen overrides" in proc.stdout and "target_qps 12" in proc.stdout


@pytest.mark.e2e
def test_the_terminal_shows_our_lines_and_vllm_its_log(overridden_run):
    """Without --verbose, vLLM's output (its processes' and its front end's logger) goes to
    the run's engine.log; the terminal says the engine is starting and when it started."""
    out, proc = overridden_run
    shown = proc.stdout + proc.stderr
    assert "starting the vLLM engine" in proc.stdout and "engine started in" in proc.stdout
    vllm_lines = [x for x in shown.splitlines() if x.startswith(("(EngineCore", "(MainProcess"))]
    assert vllm_lines == [], vllm_lines[:5]
    log = (out / "engine.log").read_text()
    assert "(EngineCore" in log and "[shutdown]" in log  # its processes' and its logger's


@pytest.mark.e2e
def test_compare_puts_runs_side_by_side(overridden_run, server_smoke_run, tmp_path):
    out, _ = overridden_run
    table = tmp_path / "cmp.csv"
    proc = cli("compare", str(out), str(server_smoke_run.out), "--csv", str(table))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:5] == ["run", "scenario", "status", "validity", "kept_up"]
    row = next(line for line in lines if line.startswith("q12 "))
    assert row.split()[1:3] == ["Server", "completed"]
    assert row.split()[5:7] == ["12", "1.5"]  # target QPS, min duration: LoadGen's own
    assert "loadgen.target_qps=12.00" in row  # the knob that differs, found
    rows = list(csv.DictReader(table.open()))
    assert [r["run"] for r in rows] == ["q12", server_smoke_run.out.name]
    assert float(rows[0]["target_qps"]) == 12 and float(rows[1]["target_qps"]) == 8
    assert rows[0]["loadgen.min_duration_s"] == "1.5" and rows[1]["loadgen.min_duration_s"] == ""
    # a folder that holds no run: one line, nothing printed before it
    bad = cli("compare", str(out), str(tmp_path))
    assert bad.returncode == 2 and bad.stdout == ""
    assert f"no result.json in {tmp_path}" in bad.stderr


def test_calibrate_refuses_the_overrides_it_sets_itself(tmp_path):
    proc = cli(
        *("calibrate", "--benchmark", "llama3_1-8b", "--scenario", "Server"),
        *("--model", str(tmp_path), "--dataset", str(tmp_path / "d.json")),
        *("--output", str(tmp_path / "cal"), "--target-qps", "3"),
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "calibrate sets each run's target rate" in proc.stderr
    assert "drop --target-qps" in proc.stderr and not (tmp_path / "cal").exists()
