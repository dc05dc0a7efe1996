"""A child command (a calibrate trial, a sweep repeat) in its own process group.

The child's engine starts processes of its own. Killing only the direct child would leave
them running on the GPUs, so a timeout or an interrupt ends the whole group: SIGTERM first
(the child's `run` then shuts its engine down and records `interrupted`), SIGKILL to the
group and every descendant after a grace period.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from typing import IO, Any

from sut.reaper import terminate_then_kill

TERMINATE_GRACE_S = 30.0
EXIT_TIMEOUT = 124


def end_group(proc: subprocess.Popen, grace_s: float = TERMINATE_GRACE_S) -> None:
    """SIGTERM the child's process group, then SIGKILL whatever of it is left."""
    import psutil

    try:
        leader = psutil.Process(proc.pid)
        family = leader.children(recursive=True)
    except psutil.Error:
        leader, family = None, []
    # The grace period waits for the child alone: its `run` shuts its engine down before it
    # exits, and what is left of the group after that is killed at once.
    terminate_then_kill([leader] if leader else [], grace_s, kill_wait_s=5, group=proc.pid)
    # a process that left the group (setsid) is still ours
    terminate_then_kill(family, 5, kill_at_once=True)
    proc.wait()


def run_child(
    cmd: Sequence[str],
    *,
    stdout: IO[Any] | int | None = None,
    stderr: IO[Any] | int | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
) -> int:
    """Run `cmd` in a new process group; its exit code, or EXIT_TIMEOUT after `timeout_s`.
    KeyboardInterrupt (Ctrl-C, or SIGTERM through harness.proc.signals) ends the group and is
    re-raised."""
    proc = subprocess.Popen(
        list(cmd),
        stdout=stdout,
        stderr=stderr,
        env=dict(env) if env is not None else None,
        start_new_session=True,
    )
    try:
        rc = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        end_group(proc)
        return EXIT_TIMEOUT
    except BaseException:
        end_group(proc)
        raise
    # The child is gone; whatever it left in its group (an orphaned engine worker) goes too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    return rc
