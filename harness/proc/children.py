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

TERMINATE_GRACE_S = 30.0
EXIT_TIMEOUT = 124


def end_group(proc: subprocess.Popen, grace_s: float = TERMINATE_GRACE_S) -> None:
    """SIGTERM the child's process group, then SIGKILL whatever of it is left."""
    import psutil

    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        family = []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for p in family:  # a process that left the group (setsid) is still ours
        with contextlib.suppress(psutil.Error):
            p.kill()
    proc.wait()
    psutil.wait_procs(family, timeout=5)


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
