"""bench/host_profile_rules.py's rules on a hand-written py-spy raw profile (categories, idle
detection, the split per process), and one real py-spy recording by bench/host_profile.py of a
child process with a known busy thread and known waiting ones.

Time budget: ~8 s (the child runs 5 s, sampled for 3 s of it).
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from bench import host_profile as hp
from bench import host_profile_rules as rules

SITE = "/venv/lib/python3.11/site-packages"
LIB = "/usr/lib/python3.11"


def _sources(root: Path) -> Path:
    """The few source lines the rules read (a LoadGen call, StartTest, a sleep), as files of
    a project-shaped tree of the test's own: the rules look at lines, not at our real files."""
    files = {
        "sut/responses.py": "import mlperf_loadgen as lg\n\nlg.QuerySamplesComplete(responses)\n",
        "sut/server.py": "\n" * 9 + "out = await gen\n" + "\n" + "ids.extend(out.token_ids)\n",
        "harness/run/execute/loadgen_call.py": "\nlg.StartTestWithLogSettings(sut.handle, qsl.handle)\n",
        "harness/proc/orphans.py": "time.sleep(poll_s)\n",
        "sut/frontend.py": "outputs = processor.process_outputs(outs)\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _raw(root: Path) -> str:
    main = 'process 100:"python -m harness.cli run --output RUN"'
    loop = f"{main};thread (101): server-sut-loop;Thread.run ({LIB}/threading.py:982)"
    step = f"{loop};BaseEventLoop._run_once ({LIB}/asyncio/base_events.py:1922)"
    handle = f"{step};Handle._run ({LIB}/asyncio/events.py:80)"
    lgt = f"{main};thread (102): loadgen-test;target ({root}/harness/run/execute/loadgen_call.py:2)"
    core = f'{main};process 300:"VLLM::EngineCore_DP0";thread (300): MainThread'
    spawn = "python -B -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=4)"
    fe = f'{main};process 400:"{spawn}";thread (400): MainThread;<module> (<string>:1)'
    vllm = f"{SITE}/vllm/v1/engine"
    lines = [
        # the loop waits in its selector
        f"{step};EpollSelector.select ({LIB}/selectors.py:468) 50",
        # our task calls generate, which processes the prompt: the innermost claim is vLLM's
        f"{handle};ServerSUT._serve ({root}/sut/server.py:10);AsyncLLM.generate "
        f"({vllm}/async_llm.py:700);AsyncLLM.add_request ({vllm}/async_llm.py:400);"
        f"InputProcessor.process_inputs ({vllm}/input_processor.py:300) 10",
        # the output handler, into a vLLM helper no category names: still output processing
        f"{handle};AsyncLLM._run_output_handler.<locals>.output_handler ({vllm}/async_llm.py:860);"
        f"OutputProcessor.process_outputs ({vllm}/output_processor.py:500);"
        f"IterationStats.update ({SITE}/vllm/v1/metrics/stats.py:90) 8",
        # core_client decoding a message through msgspec (not claimed): output processing
        f"{handle};AsyncMPClient._ensure_output_queue_task.<locals>.process_outputs_socket "
        f"({vllm}/core_client.py:1180);MsgpackDecoder.decode ({SITE}/vllm/v1/serial_utils.py:300) 4",
        # zmq's socket.py is not the standard library's (a send is busy), charged to its caller
        f"{handle};AsyncMPClient._send_input ({vllm}/core_client.py:1245);Socket.send "
        f"({SITE}/zmq/sugar/socket.py:713) 3",
        # a coroutine named wait at the leaf runs: asyncio's machinery, not a wait
        f"{handle};ServerSUT._serve ({root}/sut/server.py:10);"
        f"Event.wait ({LIB}/asyncio/locks.py:213) 2",
        # our code on its own line, and our line that calls LoadGen
        f"{handle};ServerSUT._serve ({root}/sut/server.py:12) 7",
        f"{handle};ServerSUT._serve ({root}/sut/server.py:12);complete ({root}/sut/responses.py:3) 5",
        # asyncio's own work between tasks
        f"{step} 6",
        # LoadGen's thread: waiting inside StartTest, or in our issue_queries callback
        f"{lgt} 40",
        f"{lgt};ServerSUT.issue_queries ({root}/sut/server.py:14);"
        f"BaseEventLoop.call_soon_threadsafe ({LIB}/asyncio/base_events.py:800) 6",
        # a helper thread of ours sleeping, and a thread with no Python frame (native code)
        f"{main};thread (103): watcher;watch ({root}/harness/proc/orphans.py:1) 96",
        f"{main};thread (104): native 4",
        # an engine core: a step (all vLLM) and its input queue's wait
        f"{core};EngineCore.step ({vllm}/core.py:400);Scheduler.schedule "
        f"({SITE}/vllm/v1/core/sched/scheduler.py:300) 30",
        f"{core};Queue.get ({LIB}/queue.py:171);Condition.wait ({LIB}/threading.py:327) 70",
        # a spawned front-end worker (its command line holds a ';') running our code and vLLM's
        f"{fe};FrontEnd.run ({root}/sut/frontend.py:1);OutputProcessor.process_outputs "
        f"({vllm}/output_processor.py:500) 20",
        f"{fe};FrontEnd.run ({root}/sut/frontend.py:1);Poller.poll ({SITE}/zmq/sugar/poll.py:106) 80",
        # ours has a worker_main too: not vLLM's (a spawned vLLM worker is known by its own)
        f"{fe};worker_main ({root}/sut/frontend.py:1) 1",
    ]
    return "\n".join(lines) + "\n"


def test_rules_judge_each_stack_and_split_per_process(tmp_path):
    root = _sources(tmp_path / "src")
    samples = rules.parse_raw(_raw(root))
    kinds = [rules.classify(s) for s in samples]
    assert kinds == [
        rules.IDLE,
        "vLLM input processing",
        "vLLM output processing",
        "vLLM output processing",
        "vLLM input processing",
        "asyncio machinery",
        "our code",
        "LoadGen calls",
        "asyncio machinery",
        rules.IDLE,
        "LoadGen calls",
        rules.IDLE,
        rules.OTHER,
        "vLLM other",
        rules.IDLE,
        "vLLM output processing",
        rules.IDLE,
        "our code",
    ]
    assert samples[-2].command.endswith("spawn_main(tracker_fd=4)")
    assert samples[-2].pids == (100, 400)

    procs = {p.pid: p for p in rules.analyse(samples)}
    assert {pid: p.role for pid, p in procs.items()} == {
        100: "SUT main",
        300: "vLLM engine core",
        400: "front-end worker",
    }
    main = procs[100]
    # the window is the longest-seen thread's: the watcher's 96 ticks (the loop's are 95)
    assert main.ticks == 96
    assert main.threads[101].busy == 45
    assert main.busy == 45 + 6 + 4  # the loop, LoadGen's issue_queries, the native thread
    assert main.busy_cores == pytest.approx(55 / 96)
    assert main.idle_reasons == {"selector": 50, "blocking call on the line": 136}
    # asyncio's 6 + 2 loop samples came from its own loop and our code; LoadGen's call_soon was
    # LoadGen's
    assert main.asyncio_for == {rules.OTHER: 6, "our code": 2}
    assert procs[300].busy_cores == pytest.approx(0.3)
    assert procs[400].categories() == {"vLLM output processing": 20, "our code": 1}

    record = rules.report(list(procs.values()), 100, rules.Load(10, 200, "test"))
    per = record["per_request"]
    # 55 busy samples at 100 Hz = 0.55 s over 10 requests and 200 tokens
    assert per["SUT main"]["us_per_request"] == pytest.approx(55_000)
    assert per["SUT main"]["us_per_token"] == pytest.approx(2_750)
    assert per["host path"]["us_per_request"] == pytest.approx(76_000)  # + the front-end's 21
    assert "front-end worker" in hp.table(record)


def test_a_forked_engine_core_is_judged_by_its_own_frames(tmp_path):
    """vLLM forks its engine core from a front-end worker: the child's stacks keep the worker's
    frames (ours) below multiprocessing's _bootstrap. Its step is vLLM's, not ours, and a step
    that waits for the GPU (a CUDA event's sync) is idle."""
    root = _sources(tmp_path / "src")
    vllm = f"{SITE}/vllm/v1/engine"
    core = (
        'process 100:"python -m harness.cli run";process 500:"VLLM::EngineCore";'
        f"thread (500): MainThread;worker_main ({root}/sut/frontend.py:1);"
        f"BaseProcess._bootstrap ({LIB}/multiprocessing/process.py:314);"
        f"BaseProcess.run ({LIB}/multiprocessing/process.py:108);"
        f"EngineCoreProc.run_engine_core ({vllm}/core.py:900);EngineCore.step ({vllm}/core.py:400)"
    )
    samples = rules.parse_raw(
        f"{core};Scheduler.schedule ({SITE}/vllm/v1/core/sched/scheduler.py:300) 3\n"
        f"{core};Event.synchronize ({SITE}/torch/cuda/streams.py:254) 9\n"
    )
    assert [rules.classify(s) for s in samples] == ["vLLM other", rules.IDLE]
    assert rules.idle_reason(samples[1]) == "the GPU"


def test_bad_input_gets_one_line(tmp_path, capsys):
    assert hp.main(["--out", str(tmp_path), "--requests", "5", "--pid", "1"]) == 2
    assert capsys.readouterr().err.strip().endswith("give both or neither")
    bad = tmp_path / "bad.txt"
    bad.write_text("no count here\n")
    assert hp.main(["--out", str(tmp_path), "--analyze", str(bad)]) == 2
    assert "no sample count" in capsys.readouterr().err


CHILD = """
import threading, time

def spin(seconds):
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x += 1

def sleeper():
    while True:
        time.sleep(0.01)

threading.Thread(target=sleeper, name="sleeper", daemon=True).start()
event = threading.Event()
threading.Thread(target=event.wait, name="waiter", daemon=True).start()
spin(5)
"""


def _py_spy_missing() -> bool:
    try:
        hp.py_spy()
    except hp.UsageError:
        return True
    return False


@pytest.mark.skipif(_py_spy_missing(), reason="py-spy is not installed (the dev extra has it)")
def test_a_real_recording_tells_a_busy_thread_from_waiting_ones(tmp_path, capsys):
    # The child lives in a folder named sut/, so its frames count as our code.
    child = tmp_path / "sut" / "busy.py"
    child.parent.mkdir()
    child.write_text(textwrap.dedent(CHILD))
    out = tmp_path / "prof"
    argv = ["--out", str(out), "--delay", "1", "--duration", "3", "--rate", "50"]
    argv += ["--requests", "10", "--tokens", "100", "--", sys.executable, str(child)]
    assert hp.main(argv) == 0
    record = json.loads((out / hp.REPORT_FILE).read_text())
    (proc,) = record["processes"]
    assert proc["role"] == "SUT main"
    threads = {t["name"]: t for t in proc["threads"]}
    # a spinning thread, even when another process has the core, is seen inside spin()
    assert threads["MainThread"]["busy_share_of_wall"] > 0.9
    assert threads["MainThread"]["categories"].get("our code", 0) > 0.9 * proc["ticks"]
    assert threads["sleeper"]["busy_share_of_wall"] < 0.1
    assert threads["waiter"]["busy_share_of_wall"] == 0
    assert 0.9 < proc["busy_cores"] < 1.2
    assert record["py_spy"]["samples"] > 0 and record["py_spy"]["cpu_s"] >= 0
    assert "us busy per request" in capsys.readouterr().out
