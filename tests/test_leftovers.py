"""Nothing left behind, without an engine: real processes that make real /dev/shm segments the
way vLLM's engine processes do (a `SharedMemory` that only its creator would unlink, taken off
Python's resource tracker), then end without unlinking them.

- sut.reaper.EngineSegments: an engine process killed outright (SIGKILL) leaves its segment;
  the SUT that noted it removes it once the process is gone.
- harness.proc.children.run_child (every sweep repeat, calibration trial and confirmation run):
  a child whose process leaves a segment has it removed when the child ends; a process that
  escaped the child's group is named by the one-line warning that `sweep` and `calibrate`
  print at their end, with how to remove it.
- tests/leftovers.py (the suite's guard): a segment made by a process of ours is ours and is
  reported with its module; one made by a process outside this pytest process's tree (another
  engineer's tests, anybody's engine) is not.

The engine's own paths (a run's end, Ctrl-C, SIGTERM, an engine core killed, an engine that
refuses its configuration, sweep children, calibration trials) run in the e2e modules, each of
which the suite's guard fails when it leaves anything.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import time

import psutil
from leftovers import MARK_ENV, LeftoverWatch

from harness.proc.children import ChildLeftovers, run_child
from sut.reaper import EngineSegments

# A process like an engine core: makes a segment only it would unlink, says its name, waits.
MAKES_SEGMENT = textwrap.dedent(
    """
    import sys, time
    from multiprocessing import resource_tracker, shared_memory
    shm = shared_memory.SharedMemory(create=True, size=1 << 16)
    resource_tracker.unregister(shm._name, "shared_memory")
    print(shm.name, flush=True)
    time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 300)
    """
)


def _segment_maker(*args: str, **popen) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", MAKES_SEGMENT, *args], stdout=subprocess.PIPE, text=True, **popen
    )
    name = proc.stdout.readline().strip()
    assert name.startswith("psm_") and os.path.exists(f"/dev/shm/{name}"), name
    return proc, name


def _unlink(*names: str) -> None:
    for name in names:
        if name and os.path.exists(f"/dev/shm/{name}"):
            os.unlink(f"/dev/shm/{name}")


def test_a_killed_engine_process_leaves_no_segment_once_its_sut_removes_what_it_noted():
    proc, name = _segment_maker()
    try:
        segments = EngineSegments()
        segments.note([psutil.Process(proc.pid)], force=True)
        assert segments.paths == {f"/dev/shm/{name}"}
        proc.kill()
        proc.wait(10)
        assert os.path.exists(f"/dev/shm/{name}")  # nobody else would unlink it
        assert segments.remove() == [f"/dev/shm/{name}"]
        assert not os.path.exists(f"/dev/shm/{name}")
    finally:
        proc.kill()
        _unlink(name)


def test_a_segment_appearing_later_is_noted_by_a_cheap_look_and_an_old_one_is_not_looked_for():
    segments = EngineSegments()  # lists /dev/shm: what is there now is not new
    proc, name = _segment_maker()
    try:
        me = psutil.Process()
        segments.note([me])  # a new name appeared: looked, but we do not map it
        assert segments.paths == set()
        # No new name since: no look at all. Another process's engine (the suite's other
        # workers) may make a segment in between, and then the look is right: only a look
        # with nothing new in /dev/shm is judged, and one of five tries must be such.
        quiet = 0
        for _ in range(5):
            seen = set(segments._names)
            segments.note([psutil.Process(proc.pid)])
            if segments._names - seen:
                segments.paths.clear()
                continue
            quiet += 1
            assert segments.paths == set()
        assert quiet, "/dev/shm never stayed quiet between two looks"
        segments.note([psutil.Process(proc.pid)], force=True)
        assert segments.paths == {f"/dev/shm/{name}"}
    finally:
        proc.kill()
        proc.wait(10)
        _unlink(name)


# A child command whose process leaves a segment and exits without unlinking it (as an engine
# core killed mid-run, or one whose unlink never ran).
CHILD_LEAVES_SEGMENT = textwrap.dedent(
    """
    import os, sys, time
    from multiprocessing import resource_tracker, shared_memory
    shm = shared_memory.SharedMemory(create=True, size=1 << 20)
    resource_tracker.unregister(shm._name, "shared_memory")
    open(sys.argv[1], "w").write(shm.name)
    time.sleep(1.5)  # a run lasts longer than the parent's look (every half second)
    os._exit(0)
    """
)


def test_a_child_run_leaves_no_segment_of_its_processes(tmp_path):
    ledger = ChildLeftovers()
    out = tmp_path / "name"
    rc = run_child([sys.executable, "-c", CHILD_LEAVES_SEGMENT, str(out)], ledger=ledger)
    name = out.read_text()
    try:
        assert rc == 0
        assert not os.path.exists(f"/dev/shm/{name}"), "the child's segment was left behind"
        assert ledger.removed == [f"/dev/shm/{name}"]
        assert ledger.warning("the sweep's runs") is None  # nothing is left to warn about
    finally:
        _unlink(name)


# A child command that starts a process outside its group (setsid) and exits: the group's end
# cannot reach it.
CHILD_LEAVES_PROCESS = textwrap.dedent(
    """
    import subprocess, sys, time
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                         start_new_session=True)
    open(sys.argv[1], "w").write(str(p.pid))
    time.sleep(1.2)
    """
)


def test_what_a_child_left_running_is_named_in_one_line_with_how_to_remove_it(tmp_path):
    ledger = ChildLeftovers()
    out = tmp_path / "pid"
    assert run_child([sys.executable, "-c", CHILD_LEAVES_PROCESS, str(out)], ledger=ledger) == 0
    pid = int(out.read_text())
    try:
        line = ledger.warning("the sweep's runs")
        assert line is not None and "\n" not in line
        assert line.startswith("warning: the sweep's runs left 1 process(es) still running")
        assert f"pid {pid}" in line and f"kill -9 {pid}" in line
    finally:
        left = psutil.Process(pid)
        left.kill()
        left.wait(10)
    assert ledger.warning("the sweep's runs") is None


def test_the_suites_guard_blames_its_own_process_and_its_module_only(tmp_path):
    watch = LeftoverWatch()  # looks by hand here: no thread
    watch.module = "tests.test_leftovers"
    # Outside this process's tree: started by an intermediate that exits at once, so the
    # segment's maker is an orphan by the time it makes it, as anybody else's process is.
    named = tmp_path / "theirs"
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; "
            "subprocess.Popen([sys.executable, '-c', sys.argv[1], '3'], "
            "stdout=open(sys.argv[2], 'w'), start_new_session=True)",
            "import time; time.sleep(0.5)\n" + MAKES_SEGMENT,
            str(named),
        ],
        check=True,
        timeout=30,
    )
    theirs = ""
    ours_proc, ours = _segment_maker()
    try:
        deadline = time.monotonic() + 20
        while not (theirs := named.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert theirs.startswith("psm_") and os.path.exists(f"/dev/shm/{theirs}")
        watch.look()
        assert f"/dev/shm/{ours}" in watch.segments
        assert f"/dev/shm/{theirs}" not in watch.segments
        ours_proc.kill()
        ours_proc.wait(10)
        problem = watch.check("tests.test_leftovers", settle_s=0.5)
        assert problem is not None and problem.startswith("tests.test_leftovers left behind:")
        assert f"/dev/shm/{ours}" in problem and theirs not in problem
        assert not os.path.exists(f"/dev/shm/{ours}")  # removed: the next module starts clean
        assert os.path.exists(f"/dev/shm/{theirs}")  # never anybody else's
        assert watch.check("tests.test_leftovers", settle_s=0) is None
    finally:
        ours_proc.kill()
        time.sleep(3)  # the outsider ends by itself
        _unlink(ours, theirs)


def _outsider(tmp_path, env: dict[str, str], tag: str) -> tuple[psutil.Process, str]:
    """A process outside this process's tree (its starter exits at once, as `ray start` does),
    started with `env`, that makes a segment and waits: the process and the segment's name."""
    named = tmp_path / tag
    started = subprocess.run(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; "
            "p = subprocess.Popen([sys.executable, '-c', sys.argv[1]], "
            "stdout=open(sys.argv[2], 'w'), start_new_session=True); print(p.pid)",
            MAKES_SEGMENT,
            str(named),
        ],
        check=True,
        timeout=30,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # the maker inherits it: a pipe would hold this run open
        text=True,
    )
    maker = psutil.Process(int(started.stdout))
    deadline = time.monotonic() + 30
    while not (name := named.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not name:  # it would hold its segment for minutes
        maker.kill()
    assert name.startswith("psm_") and os.path.exists(f"/dev/shm/{name}"), name
    return maker, name


def test_the_suites_guard_blames_a_process_outside_its_tree_that_carries_its_mark(tmp_path):
    """A Ray worker of a test's cluster is the raylet's child, not ours, but was started with
    our environment: its segment is ours. The same kind of process with another pytest
    process's mark (the other xdist worker's) or none is not."""
    watch = LeftoverWatch(mark="ours-mark")  # looks by hand here: no thread
    watch.module, watch.test = "tests.test_leftovers", "tests/test_leftovers.py::the-ray-test"
    base = {k: v for k, v in os.environ.items() if k != MARK_ENV}
    makers: list[psutil.Process] = []
    names: list[str] = []
    try:
        for mark in ("ours-mark", "their-mark", None):
            env = base if mark is None else {**base, MARK_ENV: mark}
            maker, name = _outsider(tmp_path, env, str(mark))
            makers.append(maker)
            names.append(name)
        ours, theirs, unmarked = names
        watch.look()
        assert set(watch.segments) == {f"/dev/shm/{ours}"}
        for maker in makers:  # each ends without unlinking its segment
            maker.kill()
        psutil.wait_procs(makers, timeout=10)
        problem = watch.check("tests.test_leftovers", settle_s=0.5)
        assert problem is not None and f"/dev/shm/{ours}" in problem, problem
        assert "made during tests/test_leftovers.py::the-ray-test" in problem, problem
        assert theirs not in problem and unmarked not in problem
        assert not os.path.exists(f"/dev/shm/{ours}")
        assert os.path.exists(f"/dev/shm/{theirs}") and os.path.exists(f"/dev/shm/{unmarked}")
    finally:
        for maker in makers:
            with contextlib.suppress(psutil.Error):
                maker.kill()
        _unlink(*names)
