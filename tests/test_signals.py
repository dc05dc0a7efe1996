"""Signals and process groups without an engine: a second signal kills at once, and a child's
timeout or interrupt ends its whole process group (the engine processes under a run)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from harness.proc.children import EXIT_TIMEOUT, run_child
from sut.reaper import IPC_PREFIX
from tests.conftest import REPO
from tests.procs import alive, default_sigint, wait_for

# A command whose first interrupt starts a shutdown that never ends (a hung engine), with a
# grandchild of its own: only a second signal gets it out.
SLOW_SHUTDOWN = textwrap.dedent(
    """
    import subprocess, sys, time
    from harness.proc import signals
    signals.install()
    child = subprocess.Popen(["sleep", "300"])
    try:
        # inside the try: the test may signal as soon as it reads this line, even before the
        # print itself has returned
        print(child.pid, flush=True)
        time.sleep(300)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        time.sleep(300)
    """
)


def _grandchildren(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_second_signal_kills_everything_at_once(signum):
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_SHUTDOWN],
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(REPO),
        start_new_session=True,
        # as from a terminal: a suite started in the background inherits SIGINT ignored, and
        # our handler rightly leaves an ignored SIGINT ignored
        preexec_fn=default_sigint,
    )
    try:
        child = psutil.Process(int(proc.stdout.readline()))
        proc.send_signal(signum)
        assert proc.stdout.readline().strip() == "interrupted"  # the first one: a clean stop
        t0 = time.monotonic()
        proc.send_signal(signum)
        proc.wait(10)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signum and took < 5, (proc.returncode, took)
    wait_for(lambda: not alive([child]), 10, "the run's child process to die")


def test_child_timeout_ends_its_whole_process_group(tmp_path):
    script = "sleep 313 & sleep 313 & wait"  # grandchildren, as an engine's processes are
    t0 = time.monotonic()
    seen: list[psutil.Process] = []

    def watch() -> None:
        parent = psutil.Process()
        while time.monotonic() - t0 < 1.5:
            for p in parent.children(recursive=True):
                try:
                    if "313" in " ".join(p.cmdline()):
                        seen.append(p)
                except psutil.Error:
                    pass
            time.sleep(0.1)

    import threading

    watcher = threading.Thread(target=watch)
    watcher.start()
    rc = run_child(["sh", "-c", script], timeout_s=1.0)
    watcher.join()
    assert rc == EXIT_TIMEOUT
    assert time.monotonic() - t0 < 1.0 + 35  # SIGTERM grace at most
    assert len({p.pid for p in seen}) >= 3  # the shell and its two sleeps were there
    wait_for(lambda: not alive(seen), 10, "the group to be gone")


def test_main_in_process_gives_the_signal_handlers_back(capsys):
    """A host that calls main() in-process (a test runner, a notebook, a scheduler's Python
    wrapper) keeps its own SIGTERM/SIGINT handling once main() returns: a SIGTERM sent later
    must not become a KeyboardInterrupt that some later main() swallows as 'interrupted'."""
    from harness.cli import main

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    assert main(["rounds"]) == 0
    assert main(["rounds", "--benchmark", "no-such-benchmark"]) == 2  # the error path too
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    capsys.readouterr()


# A command's main process with an engine-like family (a child that has children of its own),
# under the guard that harness.cli.main() starts for the commands that start processes.
GUARDED = textwrap.dedent(
    """
    import subprocess, sys, time
    import psutil
    from harness.proc.orphans import guard_descendants
    with guard_descendants():
        child = subprocess.Popen(["sh", "-c", "sleep 311 & sleep 311 & wait"])
        time.sleep(float(sys.argv[1]))
        print(child.pid, flush=True)
        time.sleep(float(sys.argv[2]))
        for p in [child, *psutil.Process(child.pid).children(recursive=True)]:
            p.kill()  # a command that returns stops its own processes
    print("returned", flush=True)
    """
)


def _command(script: str, *args: str, env: dict | None = None, stdin=None) -> subprocess.Popen:
    """`python -c SCRIPT ARGS` as a command in a session of its own, its output read as text."""
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(REPO),
        env=env,
        start_new_session=True,
    )


def _guarded(settle_s: float, stay_s: float) -> subprocess.Popen:
    return _command(GUARDED, str(settle_s), str(stay_s))


def _ignores_int_and_term(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as fh:
        mask = next(int(x.split()[1], 16) for x in fh if x.startswith("SigIgn:"))
    return all(mask >> (s - 1) & 1 for s in (signal.SIGINT, signal.SIGTERM))


def test_sigkill_of_the_main_process_leaves_nothing_running():
    """SIGKILL gives the main process no chance to stop its engine: the guard does, and says so
    on the command's stderr."""
    proc = _guarded(1.5, 300)  # long enough for the guard to have seen the whole family
    try:
        child = psutil.Process(int(proc.stdout.readline()))
        family = [child, *child.children(recursive=True)]
        assert len(family) == 3, family
        proc.kill()  # the main process only, as the OOM killer would
        proc.wait(10)
        wait_for(lambda: not alive(family), 20, "the dead command's processes to be stopped")
        stderr = proc.stderr.read()  # EOF once the guard, which shares it, has ended too
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for p in family:
            with contextlib.suppress(psutil.Error):
                p.kill()
    assert f"the main process (pid {proc.pid}) ended without stopping 3 process(es)" in stderr
    assert "sleep" in stderr


def test_the_guard_ignores_signals_and_ends_with_the_command():
    """A Ctrl-C to the terminal's process group or a scheduler's SIGTERM must not take the
    guard before the main process is done: it has a session of its own and ignores them."""
    proc = _guarded(0, 3)
    try:
        child = psutil.Process(int(proc.stdout.readline()))
        (guard,) = [g for g in psutil.Process(proc.pid).children() if g.pid != child.pid]
        assert os.getsid(guard.pid) == guard.pid != os.getpgid(proc.pid)
        wait_for(lambda: _ignores_int_and_term(guard.pid), 20, "the guard to start")
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            guard.send_signal(signum)
        time.sleep(0.5)
        assert guard.is_running() and guard.status() != psutil.STATUS_ZOMBIE
        assert proc.wait(20) == 0
        wait_for(lambda: not alive([guard]), 20, "the guard to end with the command")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "ended without stopping" not in proc.stderr.read()


def test_a_command_that_returns_stops_its_guard(tmp_path):
    proc = _guarded(0, 0.5)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out.split()[-1] == "returned", err
    assert "ended without stopping" not in err


# A command that starts a process which is not its descendant by the time it dies (started
# through a shell that has already exited, as a process spawned in the last moments of an
# engine start given up on is not yet on the guard's list), then is killed outright.
ORPHANING = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from harness.proc.orphans import guard_descendants
    with guard_descendants():
        started = subprocess.run(
            ["sh", "-c", "sleep 312 >/dev/null 2>&1 & echo $!"], capture_output=True, check=True
        )
        print(int(started.stdout), flush=True)  # the shell is gone: its child is an orphan
        time.sleep(300)
    """
)


def test_a_process_no_longer_our_descendant_is_stopped_by_its_mark():
    proc = _command(ORPHANING)
    orphan = None
    try:
        orphan = psutil.Process(int(proc.stdout.readline()))
        assert orphan.ppid() != proc.pid  # reparented: no parent chain leads to the command
        assert orphan.pid not in [p.pid for p in psutil.Process(proc.pid).children(True)]
        proc.kill()
        proc.wait(10)
        wait_for(lambda: not alive([orphan]), 20, "the orphaned process to be stopped")
        stderr = proc.stderr.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if orphan is not None:
            with contextlib.suppress(psutil.Error):
                orphan.kill()
    assert f"(pid {orphan.pid})" in stderr and "ended without stopping 1 process(es)" in stderr


def test_the_mark_is_the_commands_own_and_a_child_command_adds_to_it():
    from harness.proc.orphans import OWNERS_ENV, guard_descendants

    assert OWNERS_ENV not in os.environ
    with guard_descendants():
        outer = os.environ[OWNERS_ENV]
        with guard_descendants():
            inner = os.environ[OWNERS_ENV]
        assert os.environ[OWNERS_ENV] == outer
    assert OWNERS_ENV not in os.environ
    assert len(outer.split(":")) == 1 and inner.split(":")[0] == outer
    assert len(inner.split(":")) == 2 and inner.split(":")[1] != outer


# An engine-like process that maps a shared-memory segment it alone would unlink at a clean
# shutdown (vLLM's queues are not left to Python's resource tracker), and never gets to.
SHM_CHILD = textwrap.dedent(
    """
    import time
    from multiprocessing import resource_tracker, shared_memory
    shm = shared_memory.SharedMemory(create=True, size=1 << 16)
    resource_tracker.unregister(shm._name, "shared_memory")
    print(shm.name, flush=True)
    time.sleep(300)
    """
)
# A guarded command with such a child.
GUARDED_SHM = textwrap.dedent(
    f"""
    import subprocess, sys, time
    from harness.proc.orphans import guard_descendants
    with guard_descendants():
        child = subprocess.Popen([sys.executable, "-c", {SHM_CHILD!r}], stdout=subprocess.PIPE, text=True)
        print(child.stdout.readline().strip(), flush=True)
        time.sleep(300)
    """
)


def test_sigkill_of_the_main_process_leaves_no_shared_memory_of_its_engine():
    proc = _command(GUARDED_SHM)
    name = ""
    try:
        name = proc.stdout.readline().strip()
        segment = f"/dev/shm/{name}"
        assert name.startswith("psm_") and os.path.exists(segment), name
        family = psutil.Process(proc.pid).children(recursive=True)
        time.sleep(2.5)  # the guard notes a new segment at its next look (POLL_S)
        proc.kill()
        proc.wait(10)
        wait_for(lambda: not alive(family), 20, "the dead command's processes to be stopped")
        wait_for(lambda: not os.path.exists(segment), 10, "the engine's segment to be unlinked")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            if name:
                os.unlink(f"/dev/shm/{name}")


def test_reaping_an_engine_process_unlinks_the_shared_memory_it_maps():
    """What the SUT's stop does with engine processes left running: they go, and so do the
    segments of vLLM's queues they map, which nobody else would unlink."""
    from sut.reaper import reap

    child = subprocess.Popen(
        [sys.executable, "-c", SHM_CHILD],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    name = ""
    try:
        name = child.stdout.readline().strip()
        assert name.startswith("psm_") and os.path.exists(f"/dev/shm/{name}"), name
        assert reap([psutil.Process(child.pid)], grace_s=5.0) == [child.pid]
        assert child.wait(5) is not None
        assert not os.path.exists(f"/dev/shm/{name}")
    finally:
        with contextlib.suppress(OSError):
            child.kill()
        with contextlib.suppress(OSError):
            if name:
                os.unlink(f"/dev/shm/{name}")


# A guarded command whose engine has a process outside the command's tree that carries its
# mark and maps a segment that it alone would unlink, as a Ray layout's worker does (started
# by a raylet: here a shell that has already exited). vLLM's Ray executor ends its workers
# with `ray.kill`, which runs no finalizer. The command prints the worker's pid and segment,
# then returns when told to (a line on its stdin).
OUTSIDE_SHM = textwrap.dedent(
    f"""
    import subprocess, sys, time
    from harness.proc.orphans import guard_descendants
    with guard_descendants():
        started = subprocess.run(
            ["sh", "-c", '"$0" -c "$1" >"$2" 2>/dev/null & echo $!',
             sys.executable, {SHM_CHILD!r}, sys.argv[1]],
            capture_output=True, text=True, check=True,
        )
        name = ""
        while not name:
            time.sleep(0.1)
            name = open(sys.argv[1]).read().strip()
        time.sleep(2.5)  # the guard notes a new segment at its next look (POLL_S)
        print(int(started.stdout), name, flush=True)
        sys.stdin.readline()
    print("returned", flush=True)
    """
)


def _outside_worker(tmp_path) -> tuple[subprocess.Popen, psutil.Process, str]:
    proc = _command(OUTSIDE_SHM, str(tmp_path / "name"), stdin=subprocess.PIPE)
    pid, name = proc.stdout.readline().split()
    worker = psutil.Process(int(pid))
    assert worker.pid not in [p.pid for p in psutil.Process(proc.pid).children(True)]
    assert name.startswith("psm_") and os.path.exists(f"/dev/shm/{name}"), name
    return proc, worker, name


@pytest.mark.parametrize("end", ["worker-killed-then-return", "worker-left-then-return", "sigkill"])
def test_a_segment_of_a_process_outside_the_tree_is_removed_whichever_way_the_command_ends(
    tmp_path, end
):
    """A Ray worker's segment: the command's guard notes it while the command runs and unlinks
    it once the worker is gone, on a normal end (the worker ended by `ray.kill`, or still
    running and stopped) and when the command is killed outright (the worker gone first, as a
    raylet ends a dead job's workers)."""
    from harness.proc.orphans import OUTSIDE_WAIT_S

    proc, worker, name = _outside_worker(tmp_path)
    segment = f"/dev/shm/{name}"
    try:
        if end != "worker-left-then-return":
            worker.kill()
            worker.wait(10)
            assert os.path.exists(segment)  # nobody else would unlink it
        if end == "sigkill":
            proc.kill()
            proc.wait(10)
            wait_for(lambda: not os.path.exists(segment), 20, "the worker's segment to go")
            return
        t0 = time.monotonic()
        out, err = proc.communicate("\n", timeout=60)
        took = time.monotonic() - t0
        assert proc.returncode == 0 and out.split()[-1] == "returned", err
        assert not os.path.exists(segment), "left after the command exited"  # not eventually
        assert not alive([worker])
        if end == "worker-left-then-return":
            assert OUTSIDE_WAIT_S <= took < OUTSIDE_WAIT_S + 15, took
            assert f"(pid {worker.pid})" in err and "outside its process tree" in err, err
        else:
            assert took < 5, took
            assert "outside its process tree" not in err, err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(psutil.Error):
            worker.kill()
        with contextlib.suppress(OSError):
            os.unlink(segment)


# A command that starts an engine-like child the way a run does: its own IPC folder, made as
# sut.engine makes it and named in the environment the child inherits; or, as a child run of a
# command that started an engine, the folder it inherited (its maker's, never the guard's).
IPC_GUARDED = textwrap.dedent(
    """
    import os, subprocess, sys, tempfile, time
    from harness.proc.orphans import guard_descendants
    from sut.reaper import ipc_prefix
    with guard_descendants():
        if sys.argv[1] == "own":
            folder = tempfile.mkdtemp(prefix=ipc_prefix(os.getpid()))  # TMPDIR: the test's
            os.environ["VLLM_RPC_BASE_PATH"] = folder
        child = subprocess.Popen(["sleep", "311"])
        print(os.environ["VLLM_RPC_BASE_PATH"], child.pid, flush=True)
        time.sleep(300)
    """
)


@pytest.mark.parametrize("folder", ["own", "inherited"])
def test_the_guard_removes_a_killed_commands_ipc_folder_and_only_its_own(tmp_path, folder):
    path = _kill_guarded(tmp_path, folder, settle_s=1.5)  # the guard's loop has seen the child
    assert os.path.basename(path).startswith("mlperf-vllm-ipc-")
    assert os.path.exists(path) == (folder == "inherited"), path


def test_the_guard_removes_the_ipc_folder_of_a_command_killed_as_it_started_its_child(tmp_path):
    """Killed at once: the guard may not have looked yet (its interpreter still starting on a
    busy machine); it finds the child by the command's token, and the folder by the child."""
    path = _kill_guarded(tmp_path, "own", settle_s=0)
    assert not os.path.exists(path), path


def _kill_guarded(tmp_path, folder: str, settle_s: float) -> str:
    """Start IPC_GUARDED, SIGKILL it `settle_s` after its child started, wait for the guard to
    stop the child and end; the IPC folder the child was given."""
    env = {k: v for k, v in os.environ.items() if k != "VLLM_RPC_BASE_PATH"}
    env["TMPDIR"] = str(tmp_path)
    if folder == "inherited":
        env["VLLM_RPC_BASE_PATH"] = str(tmp_path / f"{IPC_PREFIX}maker")
        os.mkdir(env["VLLM_RPC_BASE_PATH"])
    proc = _command(IPC_GUARDED, folder, str(tmp_path), env=env)
    try:
        path, pid = proc.stdout.readline().split()
        child = psutil.Process(int(pid))
        time.sleep(settle_s)
        proc.kill()
        proc.wait(10)
        wait_for(lambda: not alive([child]), 20, "the dead command's child to be stopped")
        proc.stderr.read()  # EOF once the guard, which shares it, has ended too
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return path
