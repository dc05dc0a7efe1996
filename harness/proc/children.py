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
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

from sut.reaper import EngineSegments, terminate_then_kill

TERMINATE_GRACE_S = 30.0
EXIT_TIMEOUT = 124
LOOK_S = 0.5  # how often a running child's processes and shared-memory segments are noted
# After the child exits, how long what is left of its group (Python's resource tracker,
# which unlinks what the child's processes registered once they are all gone) gets to end by
# itself before it is killed: killing it at once lost the segments it was about to unlink.
GROUP_EXIT_GRACE_S = 3.0


class ChildLeftovers:
    """What the children of this process ran (their processes, the shared-memory segments
    those mapped), for the check at the end of a command that starts many (`sweep`,
    `calibrate`): what of it is still there."""

    def __init__(self) -> None:
        self.procs: dict[int, Any] = {}  # pid -> psutil.Process (identity kept by psutil)
        self.segments: set[str] = set()
        self.removed: list[str] = []  # segments a child left that run_child removed

    def alive(self) -> list[Any]:
        import psutil

        found = []
        for p in self.procs.values():
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    found.append(p)
            except psutil.Error:
                continue
        return found

    def left_segments(self) -> list[str]:
        return sorted(p for p in self.segments if os.path.exists(p))

    def warning(self, what: str) -> str | None:
        """One line naming what of `what`'s children is still there and how to remove it;
        None when nothing is."""
        segments, procs = self.left_segments(), self.alive()
        if not segments and not procs:
            return None
        parts, fixes = [], []
        if segments:
            size = 0
            for path in segments:
                with contextlib.suppress(OSError):
                    size += os.stat(path).st_size
            parts.append(
                f"{len(segments)} shared-memory segment(s) in /dev/shm ({size / 2**20:.0f} MB: "
                f"{', '.join(os.path.basename(p) for p in segments)})"
            )
            fixes.append("rm -f " + " ".join(segments))
        if procs:
            parts.append(
                f"{len(procs)} process(es) still running (pid {', '.join(str(p.pid) for p in procs)})"
            )
            fixes.append("kill -9 " + " ".join(str(p.pid) for p in procs))
        return (
            f"warning: {what} left {' and '.join(parts)} behind; remove them with: "
            f"{'; '.join(fixes)}"
        )


LEFTOVERS = ChildLeftovers()  # this process's children, over its whole life


class _Watch:
    """A running child's processes and the segments they map, noted every LOOK_S."""

    def __init__(self, pid: int, ledger: ChildLeftovers) -> None:
        self.pid = pid
        self.ledger = ledger
        self.segments = EngineSegments()

    def look(self, *, force: bool = False) -> None:
        import psutil

        try:
            leader = psutil.Process(self.pid)
            family = [leader, *leader.children(recursive=True)]
        except psutil.Error:
            return
        for p in family:
            self.ledger.procs.setdefault(p.pid, p)
        self.segments.note(family, force=force)
        self.ledger.segments |= self.segments.paths

    def finish(self) -> None:
        """The child and its group are gone: unlink what its processes left."""
        self.ledger.removed += self.segments.remove(ours=False)


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
    ledger: ChildLeftovers | None = None,
) -> int:
    """Run `cmd` in a new process group; its exit code, or EXIT_TIMEOUT after `timeout_s`.
    KeyboardInterrupt (Ctrl-C, or SIGTERM through harness.proc.signals) ends the group and is
    re-raised. Whichever way the child ends, nothing of it is left: its group is ended, and
    the shared-memory segments its processes mapped (noted while it ran, into `ledger`,
    LEFTOVERS by default) are unlinked once they are all gone."""
    proc = subprocess.Popen(
        list(cmd),
        stdout=stdout,
        stderr=stderr,
        env=dict(env) if env is not None else None,
        start_new_session=True,
    )
    watch = _Watch(proc.pid, ledger if ledger is not None else LEFTOVERS)
    try:
        try:
            rc = _wait(proc, timeout_s, watch)
        except subprocess.TimeoutExpired:
            end_group(proc)
            return EXIT_TIMEOUT
        except BaseException:
            end_group(proc)
            raise
        # The child is gone; whatever it left in its group (an orphaned engine worker) goes
        # too, once its resource tracker had the moment it needs.
        _wait_group(proc.pid, GROUP_EXIT_GRACE_S)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return rc
    finally:
        watch.finish()


def _wait(proc: subprocess.Popen, timeout_s: float | None, watch: _Watch) -> int:
    """proc.wait(timeout_s), looking at the child's family every LOOK_S meanwhile."""
    t0 = time.monotonic()
    watch.look(force=True)
    while True:
        left = None if timeout_s is None else timeout_s - (time.monotonic() - t0)
        try:
            return proc.wait(LOOK_S if left is None else max(0.0, min(LOOK_S, left)))
        except subprocess.TimeoutExpired:
            if left is not None and left <= LOOK_S:
                raise
            watch.look()


def _wait_group(pgid: int, grace_s: float) -> None:
    """Wait up to `grace_s` for process group `pgid` to empty."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)


def warn_if_left(what: str, ledger: ChildLeftovers | None = None) -> str | None:
    """At the end of a command that starts child runs: one `warning:` line on stderr naming
    what of its children is still there (a segment nobody could unlink, a process that
    survived its group's end) and how to remove it. Returns the line, None when nothing is."""
    import sys

    line = (ledger if ledger is not None else LEFTOVERS).warning(what)
    if line:
        print(line, file=sys.stderr, flush=True)
    return line
