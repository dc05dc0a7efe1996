"""Signals and process groups without an engine: a second signal kills at once, and a child's
timeout or interrupt ends its whole process group (the engine processes under a run)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from harness.proc.children import EXIT_TIMEOUT, run_child
from tests.conftest import REPO
from tests.procs import alive, wait_for

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
