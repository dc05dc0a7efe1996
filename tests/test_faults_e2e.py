"""Faults on a real engine (tiny model, vLLM CPU build, real LoadGen), each run in its own
process tree; tests/test_server_e2e.py covers Ctrl-C and an engine killed mid-Server.

- the engine core killed (SIGKILL) mid-Offline: the run ends within seconds, every issued
  sample is answered exactly once (LoadGen logs every response), result.json says failed
  with the engine's error, nothing of the run is left;
- the engine core stopped (SIGSTOP) mid-Server: the stall watchdog fails the run within its
  timeout plus a few seconds, and the stopped process is reaped;
- SIGKILL of the main process mid-Offline (the OOM killer): the guard stops the engine core
  and its worker within seconds, and says so on the run's stderr;
- SIGTERM, as a scheduler sends it to the main process only, to a --no-mlflow run, to a
  sweep and to a calibrate: the whole process tree is gone within seconds and each result
  says interrupted. Sweep and calibrate are stopped while their child's engine starts (what
  matters there is the process group; a run stopped mid-test is the --no-mlflow case).

Time budget: 270 s: six runs, each ended by its fault within seconds (the sweep
and calibrate ones while their engine starts).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from harness.run.record.engine_log import RENDEZVOUS
from tests.conftest import run_args
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

FAST = ("--max-tokens", "16")
STALL_S = 10


def _result(out: Path) -> dict:
    return json.loads((out / "result.json").read_text())


def _end(proc, t0: float) -> tuple[str, str, float]:
    stdout, stderr = proc.communicate(timeout=120)
    return stdout, stderr, time.monotonic() - t0


def _mid_test(proc, out: Path, settle_s: float) -> tuple[list, list]:
    """Wait until LoadGen issues and `settle_s` more (samples in flight: no file shows them,
    and the Offline query is issued whole, the Server one at 10 QPS); (the run's process
    tree, its engine core processes)."""
    wait_for(lambda: loadgen_issuing(out), 600, "LoadGen start", [proc])
    time.sleep(settle_s)
    tree = family(proc.pid)
    engine = engine_cores(proc.pid)
    assert engine, [q.cmdline() for q in tree]
    return tree, engine


@pytest.fixture
def long_offline(tmp_path) -> Path:
    """Thousands of samples in the one Offline query, every response in the accuracy log."""
    conf = tmp_path / "long_offline.conf"
    conf.write_text(
        "*.Offline.min_duration = 0\n*.Offline.min_query_count = 2000\n"
        # LoadGen logs a response in performance mode with probability target / samples.
        "*.Offline.target_qps = 10\n*.Offline.accuracy_log_sampling_target = 100000\n"
    )
    return conf


def test_engine_killed_mid_offline_answers_every_sample_once(
    tiny_model, tiny_dataset, long_offline, tmp_path
):
    out = tmp_path / "run"
    proc = start_cli(*run_args(tiny_model, tiny_dataset, out, long_offline, *FAST))
    try:
        tree, engine = _mid_test(proc, out, 1)
        t0 = time.monotonic()
        engine[0].kill()
        stdout, stderr, took = _end(proc, t0)
    finally:
        kill_group(proc)
    print(f"engine SIGKILL mid-Offline -> run ended in {took:.1f} s")
    assert took < 30, took
    assert proc.returncode == 1, stdout[-2000:] + stderr[-4000:]
    assert "error: vLLM engine failed during the performance test: EngineDeadError" in stderr
    result = _result(out)
    assert result["status"] == "failed" and "EngineDeadError" in result["error"]
    stats = result["sut_stats"]
    entries = json.loads((out / "performance" / "mlperf_log_accuracy.json").read_text())
    seq = [e["seq_id"] for e in entries]
    # LoadGen ended on its own: each issued sample answered, once, empty where it failed.
    assert len(seq) == len(set(seq)) == stats["issued"] == stats["completed"] >= 2000
    # Those the dead engine never finished were answered empty (on a 2-core box often all).
    assert stats["failed_samples"] > 0, stats
    assert sum(not e["data"] for e in entries) == stats["failed_samples"]
    assert "Result is" in (out / "performance" / "mlperf_log_summary.txt").read_text()
    assert_all_gone(tree, [proc.pid], "killed engine")
    # the killed engine's rendezvous file (its worker named it joining) is not left in /tmp
    named = RENDEZVOUS.findall((out / "engine.log").read_bytes())
    assert named and not [p for p in named if Path(p.decode()).exists()], named


def test_stopped_engine_trips_the_stall_watchdog(tiny_model, tiny_dataset, tmp_path):
    conf = tmp_path / "long_server.conf"
    conf.write_text("*.Server.min_duration = 600000\n*.Server.target_qps = 10\n")
    out = tmp_path / "run"
    args = run_args(
        tiny_model,
        tiny_dataset,
        out,
        conf,
        *FAST,
        "--stall-timeout",
        str(STALL_S),
        scenario="Server",
    )
    proc = start_cli(*args)
    try:
        tree, engine = _mid_test(proc, out, 1)
        t0 = time.monotonic()
        engine[0].suspend()  # SIGSTOP: alive, silent, like a hung collective
        stdout, stderr, took = _end(proc, t0)
    finally:
        kill_group(proc)
    print(f"engine SIGSTOP mid-Server, --stall-timeout {STALL_S} -> run ended in {took:.1f} s")
    assert STALL_S <= took < STALL_S + 15, took
    assert proc.returncode == 1, stdout[-2000:] + stderr[-4000:]
    line = next(x for x in stderr.splitlines() if x.startswith("error: "))
    assert "StallError: stall: the Server engine produced nothing for" in line, line
    assert "in flight" in line and "raise --stall-timeout (now 10 s)" in line, line
    result = _result(out)
    assert result["status"] == "failed" and "StallError" in result["error"]
    stats = result["sut_stats"]
    assert stats["issued"] == stats["completed"] > 0, stats
    assert (out / "performance" / "mlperf_log_detail.txt").stat().st_size > 0
    assert_all_gone(tree, [proc.pid], "stopped engine")  # the stopped process included


def test_sigterm_ends_a_no_mlflow_run(tiny_model, tiny_dataset, long_offline, tmp_path):
    out = tmp_path / "run"
    proc = start_cli(*run_args(tiny_model, tiny_dataset, out, long_offline, *FAST))
    try:
        tree, _ = _mid_test(proc, out, 1)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # to the main process only, as a scheduler may
        stdout, stderr, took = _end(proc, t0)
    finally:
        kill_group(proc)
    print(f"SIGTERM to a --no-mlflow Offline run -> ended in {took:.1f} s")
    assert took < 30, took
    assert proc.returncode == 130, stdout[-2000:] + stderr[-4000:]
    assert "interrupted: LoadGen logs written so far are kept" in stderr
    assert _result(out)["status"] == "interrupted"
    assert (out / "performance" / "mlperf_log_detail.txt").stat().st_size > 0
    assert_all_gone(tree, [proc.pid], "SIGTERM run")


def _is_guard(p) -> bool:
    """The process harness.proc.orphans starts beside a command (a session of its own)."""
    return "orphans.py" in " ".join(p.cmdline())


def test_sigkill_of_the_main_process_leaves_no_engine_running(
    tiny_model, tiny_dataset, long_offline, tmp_path, monkeypatch
):
    """The OOM killer or `kill -9` gives the run no chance to stop its engine, and vLLM's
    engine core does not watch its parent: the guard stops it (and its worker)."""
    # an IPC folder of the run's own (this worker's, if it started an engine, is kept: the
    # guard removes only what its command made)
    monkeypatch.delenv("VLLM_RPC_BASE_PATH", raising=False)
    out = tmp_path / "run"
    proc = start_cli(*run_args(tiny_model, tiny_dataset, out, long_offline, *FAST))
    try:
        tree, _ = _mid_test(proc, out, 1)
        # the run's IPC folder: where the sockets its front end bound live
        ipc = {
            os.path.dirname(c.laddr)
            for c in psutil.Process(proc.pid).net_connections("unix")
            if "/mlperf-vllm-ipc-" in (c.laddr or "")
        }
        t0 = time.monotonic()
        proc.kill()  # the main process only; the engine is in its process group, left alone
        # the pipes close once every process that shares them (engine, guard) is gone
        stdout, stderr, took = _end(proc, t0)
    finally:
        kill_group(proc)
    print(f"SIGKILL of a run's main process -> its engine was gone in {took:.1f} s")
    assert took < 30, took
    assert f"the main process (pid {proc.pid}) ended without stopping" in stderr, stderr[-3000:]
    assert "EngineCore" in stderr.split("ended without stopping")[-1]
    assert (out / "performance" / "mlperf_log_detail.txt").stat().st_size > 0
    assert_all_gone(tree, [proc.pid], "SIGKILL run")
    # the folder the run's exit handler would have removed: the guard removed it
    assert ipc and all("mlperf-vllm-ipc-" in d and not Path(d).exists() for d in ipc), ipc


def _sigterm_once_engine_starts(proc, child_out: Path) -> tuple[list, str, str, float, int]:
    """Wait for the child run's engine core, SIGTERM the parent; (tree, out, err, s, pgid)."""
    try:
        wait_for(lambda: bool(engine_cores(proc.pid)), 600, "the child's engine", [proc])
        tree = family(proc.pid)
        child_pgids = {p.pid for p in tree if p.ppid() == proc.pid and not _is_guard(p)}
        assert child_out.exists()
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        stdout, stderr, took = _end(proc, t0)
    finally:
        kill_group(proc)
    (pgid,) = child_pgids
    return tree, stdout, stderr, took, pgid


def test_sigterm_ends_a_sweep_and_its_child(tiny_model, tiny_dataset, tmp_path):
    plan = tmp_path / "plan.txt"
    plan.write_text(
        f"benchmark llama3_1-8b\nscenario Offline\nmodel {tiny_model}\n"
        f"dataset {tiny_dataset}\nuser_conf user_confs/smoke/offline.conf\nmax_tokens 16\n"
        "baseline --engine-arg enforce_eager=true\nknob seqs8 --engine-arg max_num_seqs=8\n"
    )
    out = tmp_path / "sweep"
    proc = start_cli("sweep", str(plan), "--output", str(out), "--no-mlflow")
    child_out = out / "00_baseline" / "rep1"
    tree, stdout, stderr, took, pgid = _sigterm_once_engine_starts(proc, child_out)
    print(f"SIGTERM to a sweep -> sweep and its run ended in {took:.1f} s")
    assert took < 30, took
    assert proc.returncode == 130, stdout[-2000:] + stderr[-4000:]
    assert "interrupted" in stderr
    assert pgid != proc.pid  # the child ran in its own process group
    assert _result(child_out)["status"] == "interrupted"
    assert not (out / "01_seqs8").exists()  # nothing ran after the interrupt
    assert_all_gone(tree, [proc.pid, pgid], "sweep")


def test_sigterm_ends_a_calibrate_and_its_child(tiny_model, tiny_dataset, tmp_path):
    out = tmp_path / "cal"
    proc = start_cli(
        "calibrate",
        "--benchmark",
        "llama3_1-8b",
        "--scenario",
        "Offline",
        "--model",
        str(tiny_model),
        "--dataset",
        str(tiny_dataset),
        "--output",
        str(out),
        "--min-duration",
        "10",
        *FAST,
    )
    child_out = out / "measure-offline"
    tree, stdout, stderr, took, pgid = _sigterm_once_engine_starts(proc, child_out)
    print(f"SIGTERM to a calibrate -> calibrate and its run ended in {took:.1f} s")
    assert took < 30, took
    assert proc.returncode == 130, stdout[-2000:] + stderr[-4000:]
    assert pgid != proc.pid
    assert _result(child_out)["status"] == "interrupted"
    assert not (out / "user.conf").exists()
    assert_all_gone(tree, [proc.pid, pgid], "calibrate")
