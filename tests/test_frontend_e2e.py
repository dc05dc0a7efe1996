"""`run --frontend per-engine` on the CPU build: one vLLM front-end process per engine
(sut/engine_pool.py), LoadGen, the ledger and our router in the run's own process.

- Server on two engines: every sample answered once, first token before completion, each
  request served by the engine our router picked (by the engines' own count, as in
  tests/test_parallel_e2e.py), two messages per request instead of one per token, the
  timeline's per-engine series and its in-transit count, and vLLM's profiler in each engine;
- the same promises under faults, each in a 10-minute Server run on one engine behind its own
  front-end process: Ctrl-C to the process group ends it within seconds (exit 130,
  "interrupted"); the engine core killed ends it within seconds with vLLM's EngineDeadError and
  every sample answered; the front-end process itself killed ends it with a line that names
  it. Nothing of any run is left: no process, no shared-memory segment.

Time budget: 240 s: one two-engine run, three one-engine runs ended within seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import psutil
import pytest

from harness.run.record.timeline import TIMELINE_JSON
from sut.reaper import engine_segments
from tests.conftest import cli, run_args
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

PER_ENGINE = ("--frontend", "per-engine")
DP_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "auto"}  # as tests/test_parallel_e2e.py


def test_server_on_two_engines_each_behind_its_own_front_end(tiny_model, tiny_dataset, tmp_path):
    out = tmp_path / "per-engine"
    conf = tmp_path / "server.conf"
    conf.write_text(
        "*.Server.min_duration = 2000\n*.Server.min_query_count = 300\n*.Server.target_qps = 24\n"
    )
    args = (
        *("--data-parallel-size", "2", "--engine-stats", "--max-tokens", "16", *PER_ENGINE),
        *("--profile", "4@2"),
    )
    proc = cli(*run_args(tiny_model, tiny_dataset, out, conf, *args, scenario="Server"), env=DP_ENV)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    assert result["sut_options"]["frontend"] == "per-engine"
    assert result["engine_resolved_args"]["data_parallel_size"] == 2
    stats = result["sut_stats"]
    assert stats["completed"] == stats["issued"] >= 300 and stats["failed_samples"] == 0
    assert stats["first_token_order_violations"] == 0
    assert stats["first_tokens_reported"] == stats["issued"]
    # Two events per request cross into the run's process (first token, then the rest), not
    # one per streamed token: 16 tokens each here.
    assert stats["engine_outputs"] == 2 * stats["issued"], stats
    routed, served = stats["routed"], stats["engine_served"]
    assert len(routed) == len(served) == 2, stats
    for sent, done in zip(routed, served, strict=True):
        assert sent["sent"] == done["finished"] > 0, (routed, served)
        assert sent["prompt_tokens"] == done["prompt_tokens"], (routed, served)
    assert min(s["sent"] for s in routed) >= 0.4 * stats["issued"], routed
    # Every output LoadGen got has the tokens the engine made: 16 a sample, first included.
    assert stats["output_tokens"] == 16 * stats["issued"], stats
    # vLLM's profiler ran in both engines, each writing into a folder of its own (both are
    # vLLM's rank 0: one folder would keep one kernel table of the two)
    ranks = result["profile"]["ranks"]
    assert len(ranks) == 2 and all(r["steps"] == 4 for r in ranks), ranks
    for k in (0, 1):
        assert list((out / "profile" / f"engine{k}").glob("*.pt.trace.json*")), k
    timeline = json.loads((out / TIMELINE_JSON).read_text())
    rows = timeline["series"]
    assert all(len(r["engines"]) == 2 and len(r["routed"]) == 2 for r in rows), rows[-1]
    # each engine's own scheduler counts reach the timeline: some row shows it running. (Not
    # both in one row: at ~1 request in flight per engine, a 1 s sample often finds one idle.)
    for k in (0, 1):
        assert any(r["engines"][k][0] > 0 for r in rows), (k, rows)
    assert all("in_transit" in r for r in rows), rows[-1]


def _processes_named(pid: int, text: str) -> list[psutil.Process]:
    found = []
    for q in family(pid):
        try:
            if text in " ".join(q.cmdline()):
                found.append(q)
        except psutil.Error:
            pass
    return found


def test_faults_behind_a_front_end_process_end_runs_within_seconds(
    tiny_model, tiny_dataset, tmp_path
):
    long_server = tmp_path / "long_server.conf"
    long_server.write_text("*.Server.min_duration = 600000\n*.Server.target_qps = 10\n")
    names = ("ctrl_c", "engine_core", "front_end")
    outs = {name: tmp_path / name for name in names}
    procs: dict[str, subprocess.Popen] = {}
    results, families, elapsed, segments = {}, {}, {}, {}
    try:
        for name, out in outs.items():  # one at a time: CPU engines share the two cores
            args = run_args(
                tiny_model,
                tiny_dataset,
                out,
                long_server,
                *("--max-tokens", "16", *PER_ENGINE),
                # The front end killed: its engine core and that core's worker process (vllm-cpu's
                # own layout, and that of every engine of several GPUs) are left without their
                # owner, with their queues in /dev/shm.
                *(
                    ("--engine-arg", "distributed_executor_backend=mp")
                    if name == "front_end"
                    else ()
                ),
                scenario="Server",
            )
            p = procs[name] = start_cli(*args)
            wait_for(lambda o=out: loadgen_issuing(o), 600, f"{name} LoadGen start", [p])
            time.sleep(1)  # some queries in flight
            families[name] = family(p.pid)
            segments[name] = engine_segments(families[name])
            t0 = time.monotonic()
            if name == "ctrl_c":
                os.killpg(p.pid, signal.SIGINT)
            elif name == "engine_core":
                cores = engine_cores(p.pid)
                assert cores, [q.cmdline() for q in families[name]]
                cores[0].kill()
            else:
                workers = _processes_named(p.pid, "multiprocessing.spawn")
                assert len(workers) == 1, [q.cmdline() for q in families[name]]
                workers[0].kill()
            results[name] = p.communicate(timeout=120)
            elapsed[name] = time.monotonic() - t0
    finally:
        for p in procs.values():
            kill_group(p)
    assert max(elapsed.values()) < 30, elapsed  # against a 600 s schedule

    stdout, stderr = results["ctrl_c"]
    assert procs["ctrl_c"].returncode == 130, stdout[-2000:] + stderr[-4000:]
    assert json.loads((outs["ctrl_c"] / "result.json").read_text())["status"] == "interrupted"

    for name, cause in (("engine_core", "EngineDeadError"), ("front_end", "front-end process")):
        stdout, stderr = results[name]
        assert procs[name].returncode == 1, stdout[-2000:] + stderr[-4000:]
        assert "error: vLLM engine failed during the performance test" in stderr, stderr[-3000:]
        assert cause in stderr, stderr[-3000:]
        result = json.loads((outs[name] / "result.json").read_text())
        assert result["status"] == "failed" and cause in result["error"], result["error"]
        stats = result["sut_stats"]
        assert stats["issued"] == stats["completed"] > 0 and stats["failed_samples"] > 0, stats

    for name, p in procs.items():
        assert_all_gone(families[name], [p.pid], name)
        if name == "front_end":
            assert segments[name], name  # the engine core and its worker share their queues
        wait_for(
            lambda n=name: not any(os.path.exists(x) for x in segments[n]),
            15,
            f"{name}: the engine's shared memory to be unlinked",
        )
        screen = results[name][0] + results[name][1]
        assert "Traceback" not in screen, screen[-3000:]
