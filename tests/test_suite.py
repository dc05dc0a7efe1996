"""The test suite's own rules: each module that starts an engine (marked e2e) states its time
budget in its docstring, which `make test` orders its groups by (conftest)."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import BUDGET

TESTS = Path(__file__).resolve().parent


def test_every_e2e_module_states_its_time_budget():
    missing = []
    for path in sorted(TESTS.glob("test_*.py")):
        text = path.read_text()
        if path.name == Path(__file__).name or "pytest.mark.e2e" not in text:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if not BUDGET.search(doc):
            missing.append(path.name)
    assert not missing, f"no 'Time budget: N s' in the docstring of {missing}"


def test_a_group_runs_on_one_worker(tmp_path):
    """The pinned pytest and pytest-xdist keep a module marked e2e on one worker, through this
    suite's own grouping hook: pytest 9.2 stores a test's id where xdist 3.8 cannot append its
    `@group` suffix, and then every test went to whichever worker was free, each worker making
    the session's shared runs again (about three minutes of a `make test`)."""
    _copy_conftest(tmp_path)
    tests = "".join(f"def test_{n}():\n    time.sleep(0.2)\n\n" for n in "abcdef")
    body = f"import time\nimport pytest\n\npytestmark = pytest.mark.e2e\n\n{tests}"
    (tmp_path / "test_grouped.py").write_text(body)
    proc = _nested_pytest(tmp_path, 2)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    ran = re.findall(r"\[(gw\d)\] \[\s*\d+%\] PASSED (\S+)", proc.stdout)
    assert len(ran) == 6, proc.stdout[-3000:]
    assert len({w for w, _ in ran}) == 1, ran
    assert all(nodeid.endswith("@test_grouped") for _, nodeid in ran), ran


def test_groups_run_on_two_workers_and_the_third_runs_unit_tests_beside_them(tmp_path):
    """Under `-n 3` (make test) the engine groups run on gw0 and gw1 only, at most one engine
    computing per core, each group whole on one of them; gw2 takes unit tests only."""
    _copy_conftest(tmp_path)
    for name in "abc":  # three groups, each long enough for every worker to be ready
        body = "import time\nimport pytest\n\npytestmark = pytest.mark.e2e\n\n"
        body += "".join(f"def test_{n}():\n    time.sleep(0.6)\n\n" for n in "xy")
        (tmp_path / f"test_group_{name}.py").write_text(body)
    units = "".join(f"def test_unit_{n}():\n    time.sleep(0.1)\n\n" for n in range(30))
    (tmp_path / "test_units.py").write_text(f"import time\n\n{units}")
    proc = _nested_pytest(tmp_path, 3, "--no-loadscope-reorder")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    ran = re.findall(r"\[(gw\d)\] \[\s*\d+%\] PASSED \S+::(test_\w+)", proc.stdout)
    assert len(ran) == 36, proc.stdout[-3000:]
    groups = {w for w, test in ran if not test.startswith("test_unit_")}
    assert groups <= {"gw0", "gw1"} and len(groups) == 2, ran
    assert "gw2" in {w for w, test in ran if test.startswith("test_unit_")}, ran
    # each group whole on one worker
    for name in "abc":
        where = set(
            re.findall(rf"\[(gw\d)\] \[\s*\d+%\] PASSED \S*test_group_{name}\.py", proc.stdout)
        )
        assert len(where) == 1, (name, ran)


# A test that writes down its worker, scheduling policy and autogroup nice (Linux), then waits
# until the tests named in `until` have started (60 s at most).
WHERE = """
def test_{name}():
    import os, pathlib
    policy = os.sched_getscheduler(0)
    try:  # "/autogroup-N nice K"; empty in the kernel's first autogroup (no setsid since boot)
        nice = (pathlib.Path("/proc/self/autogroup").read_text().split() or ["-"])[-1]
    except OSError:
        nice = "-"
    out = pathlib.Path(os.environ["WHERE_OUT"])
    (out / "{name}").write_text(f"{{os.environ['PYTEST_XDIST_WORKER']}} {{policy}} {{nice}}")
    deadline = time.monotonic() + 60
    while not all((out / n).exists() for n in {until!r}) and time.monotonic() < deadline:
        time.sleep(0.05)
"""


def test_untimed_groups_run_on_the_spare_worker_at_idle_priority(tmp_path):
    """Under `-n 4` (make test) the timed groups run on gw0 and gw1 at the usual priority, the
    unit tests on gw2, and the untimed groups on gw3, one after the other, under SCHED_IDLE and
    in an autogroup of its own at nice 19. Each timed group's first test waits until the spare
    has started both untimed groups, so gw0 and gw1 stay busy and cannot take the second: the
    spare takes it while on the last test of the first (a worker runs its last test only once
    it has the next unit or is told to stop)."""
    _copy_conftest(tmp_path)
    out = tmp_path / "where"
    out.mkdir()
    head = "import time\nimport pytest\n\n"
    spare_started = ("dx", "dy", "ex")  # ey, its last test, waits for the end of the session
    for name in "abc":
        body = head + "pytestmark = pytest.mark.e2e\n"
        body += WHERE.format(name=f"{name}x", until=spare_started)
        body += WHERE.format(name=f"{name}y", until=())
        (tmp_path / f"test_group_{name}.py").write_text(body)
    for name in "de":
        body = head + "pytestmark = [pytest.mark.e2e, pytest.mark.untimed]\n"
        body += "".join(WHERE.format(name=f"{name}{n}", until=()) for n in "xy")
        (tmp_path / f"test_group_{name}.py").write_text(body)
    units = "".join(WHERE.format(name=f"unit{n}", until=()) for n in range(10))
    (tmp_path / "test_units.py").write_text(head + units)
    env = {**os.environ, "WHERE_OUT": str(out)}
    proc = _nested_pytest(tmp_path, 4, "--no-loadscope-reorder", env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    ran = {p.name: p.read_text().split() for p in out.iterdir()}
    assert len(ran) == 20, sorted(ran)
    assert {ran[t][0] for t in ("dx", "dy", "ex", "ey")} == {"gw3"}, ran
    for test, (worker, policy, nice) in ran.items():
        if worker == "gw3":
            assert test[0] in "de", ran  # untimed groups only
            assert int(policy) == os.SCHED_IDLE and nice in ("19", "-"), (test, ran[test])
        else:
            assert int(policy) == os.SCHED_OTHER and nice != "19", (test, ran[test])
        if test[0] in "abc":
            assert worker in ("gw0", "gw1"), ran
        if test.startswith("unit"):
            assert worker != "gw3", ran
    for name in "abc":  # each group whole on one worker
        assert ran[f"{name}x"][0] == ran[f"{name}y"][0], ran


def _copy_conftest(where: Path) -> None:
    for name in ("conftest.py", "leftovers.py"):  # the guard's watcher beside it
        shutil.copy(TESTS / name, where / name)
    (where / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    e2e: x\n    mlflow: x\n    untimed: x\n"
    )


def _nested_pytest(where: Path, workers: int, *extra: str, env=None, timeout: float = 120):
    """pytest over `where` (this suite's conftest copied beside its tests), `workers` xdist
    workers under `--dist loadgroup`, as make test runs them."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-n", str(workers), "--dist", "loadgroup"]
        + ["-p", "no:cacheprovider", *extra, str(where)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=where,
        env=env,
    )


# A test that leaves a /dev/shm segment behind: a process of its own makes one that only it
# would unlink (as an engine core's queue) and exits without doing so.
LEAKY = """
import subprocess, sys

import pytest

pytestmark = pytest.mark.e2e

MAKER = (
    "import os, time\\n"
    "from multiprocessing import resource_tracker, shared_memory\\n"
    "shm = shared_memory.SharedMemory(create=True, size=1 << 16)\\n"
    "resource_tracker.unregister(shm._name, 'shared_memory')\\n"
    "time.sleep(4)\\n"  # mapped for eight of the watcher's half-second looks: a busy machine may starve one
    "os._exit(0)\\n"
)


def test_leaves_a_segment():
    subprocess.run([sys.executable, "-c", MAKER], check=True)
"""
CLEAN = """
import time

import pytest

pytestmark = pytest.mark.e2e


def test_clean():
    time.sleep(3)
"""


def test_a_module_that_leaves_a_segment_fails_by_name_beside_a_clean_one(tmp_path):
    """The guard under xdist, two workers: the leaky module fails at its teardown naming the
    segment it left (which is then removed); the clean module beside it passes."""
    _copy_conftest(tmp_path)
    (tmp_path / "test_leaky.py").write_text(LEAKY)
    (tmp_path / "test_clean.py").write_text(CLEAN)
    proc = _nested_pytest(
        tmp_path, 2, "-p", "no:randomly", env={**os.environ, "LEFTOVER_SETTLE_S": "1"}
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert re.search(r"PASSED \S*test_clean\.py::test_clean", out), out[-3000:]
    assert re.search(r"ERROR \S*test_leaky\.py::test_leaves_a_segment", out), out[-3000:]
    assert "test_leaky left behind:" in out and "test_clean left behind" not in out, out[-3000:]
    made = set(re.findall(r"/dev/shm/(psm_\w+) \(0 MB, made during \S*test_leaves_a_segment", out))
    assert len(made) == 1, out[-3000:]
    assert not Path(f"/dev/shm/{made.pop()}").exists()  # removed by the guard
