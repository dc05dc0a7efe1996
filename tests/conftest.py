"""Shared fixtures: one tiny model, one synthetic dataset and one run per distinct configuration
per test session.

Every LoadGen run goes through the real CLI in its own process (LoadGen's FromConfig reads
mlperf.conf once per process). An engine start costs 30-60 s on two CPU cores, so a run that
several tests only read is made once, by a session fixture, and its output folder is handed to
each of them:

- `offline_smoke_run`: Offline `--mode both` on the smoke conf (float32), logged to the session's
  MLflow server (test_offline_e2e, test_tracking_mlflow, test_evaluation_e2e);
- `server_smoke_run`: Server `--mode both` on the smoke conf, with its progress bars (on stderr),
  run under a probe that lists the threads and child processes left after `main()` returns
  (test_server_e2e, test_package_e2e).

A new test that only reads such a run's files takes the fixture rather than starting a run.

Engines run in eager mode, our default without a GPU (sut.engine.CPU_DEFAULTS): torch.compile
would cost 7-30 s per start. test_offline_options_e2e's run compiles (`enforce_eager=false`).

With pytest-xdist (`make test` runs four workers), the tests of a module, and the modules that
share a session run, go to one worker as one group (`xdist_group`), so that each run is still
made once; groups start longest first, by the time budget each e2e module states in its
docstring ("Time budget: N s"). The groups run on two workers (`ENGINE_WORKERS`, one engine
computing per core); a third runs the unit tests beside them, in the seconds an engine group
waits on a timed phase; a fourth, at idle priority, the groups marked `untimed`
(`EnginesUnitsAndSpares`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")

REPO = Path(__file__).resolve().parent.parent
SMOKE = REPO / "user_confs" / "smoke"
# NLTK's own punkt_tab data, where a machine has it beside the clone (CI does). Tests read it
# only as the reference the packaged model is compared with, and skip or fall back without it.
SHARED_NLTK_DATA = REPO.parent / "shared" / "nltk_data"

TINY_SAMPLES = 24  # the session's synthetic dataset
SERVER_WARMUP = 8  # warm-up prompts before the session's Server smoke run


def pytest_configure(config):
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from sut.imports import hide_unused_packages

    hide_unused_packages()  # as each command's process does: the tests import NLTK and vLLM too
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ... under xdist
    if worker.startswith("gw"):
        # vllm-cpu binds an engine's compute threads to core 0 of a 2-core machine (the other
        # is left to its scheduler process): two workers' engines would both compute on core
        # 0. Each worker's engines get a core of their own instead (an engine of one worker,
        # which computes in its engine core here, takes the list's one thread and is not
        # bound: sut.engine.cpu_compute_threads). A data-parallel run needs one list per rank:
        # it passes its own (test_parallel_e2e).
        cores = sorted(os.sched_getaffinity(0))
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", str(cores[int(worker[2:]) % len(cores)]))
        if worker_role(worker) == "spare":
            at_idle_priority()


def at_idle_priority() -> None:
    """This process, and every process and thread it starts, runs only on CPU time that nothing
    else wants (a spare worker's untimed groups, see ENGINE_WORKERS): the Linux SCHED_IDLE
    policy, in a session of its own whose autogroup is at nice 19. The policy alone yields only
    to the processes of its own autogroup: a Ray node or a sweep's child runs in a session of its
    own, and beside those a SCHED_IDLE loop took a full share of a core (measured here). Each
    step is skipped where the system refuses it (another OS, no autogroups). A Ctrl-C at the
    terminal reaches the other workers, not this session: xdist then closes this worker's
    channel, and execnet interrupts a worker still busy after 5 s (measured: the worker and the
    command its test ran were gone 5.9 s after the Ctrl-C)."""
    with contextlib.suppress(OSError):
        os.setsid()
    with contextlib.suppress(OSError):
        Path("/proc/self/autogroup").write_text("19")
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


# --- nothing left behind ---------------------------------------------------------------------
# Each pytest process (each xdist worker) watches what its own descendants put in /dev/shm and
# which processes they start (tests/leftovers.py); a module that leaves a segment or a process
# behind fails at its last test's teardown, naming what it left, which is then removed.

_WATCH_KEY = pytest.StashKey["object"]()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    import uuid

    from leftovers import MARK_ENV, LeftoverWatch

    # our mark, inherited by every process started from here on, Ray's workers included
    mark = os.environ[MARK_ENV] = uuid.uuid4().hex
    watch = LeftoverWatch(mark=mark)
    watch.start()
    session.config.stash[_WATCH_KEY] = watch
    _start_small_model_build(session.config)


# --- the small model, built beside the session -------------------------------------------------
# The real small model is converted from its PyPI wheel once per clone (~25 CPU-s, cached in
# .cache, shared with `make demo`). Its module runs on the spare worker at idle priority, where
# the conversion crawled (357 s in a fresh clone, the spare's chain then the session's last):
# under xdist the controller starts the build at the usual priority as the session starts, and
# the module's fixture waits for it (`wait_for_small_model_build`), building itself only if it
# failed. The controller picks the tests no more than a worker does; it starts the build where
# the command line names no test file or names the module, and no mark expression leaves out the
# end-to-end tests.

SMALL_MODEL_DIR = REPO / ".cache" / "mlperf-vllm" / "smollm2-135m-instruct"
SMALL_MODEL_BUILD_ENV = "MLPERF_VLLM_TEST_SMALL_MODEL_BUILD"  # the build's pid, for the workers
_BUILD_KEY = pytest.StashKey["subprocess.Popen"]()


def _start_small_model_build(config) -> None:
    from harness.assets.small_model import is_complete

    if os.environ.get("PYTEST_XDIST_WORKER") or not config.getoption("numprocesses", None):
        return
    if not (REPO / "tests" / "test_small_model_e2e.py").is_file():  # a copy of this conftest
        return
    files = [a for a in config.args if ".py" in a or os.path.isdir(a)]
    named = not files or any("test_small_model_e2e" in a or os.path.isdir(a) for a in files)
    if not named or "not e2e" in (config.option.markexpr or "") or is_complete(SMALL_MODEL_DIR):
        return
    SMALL_MODEL_DIR.parent.mkdir(parents=True, exist_ok=True)
    with open(SMALL_MODEL_DIR.parent / "small-model-build.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness.cli", "make-small-model", str(SMALL_MODEL_DIR)],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    os.environ[SMALL_MODEL_BUILD_ENV] = str(proc.pid)  # before xdist starts the workers
    config.stash[_BUILD_KEY] = proc


def wait_for_small_model_build(timeout_s: float = 900) -> None:
    """Until the controller's build of the small model (if one runs) has ended."""
    import psutil

    pid = int(os.environ.get(SMALL_MODEL_BUILD_ENV) or 0)
    deadline = time.monotonic() + timeout_s
    with contextlib.suppress(psutil.NoSuchProcess):
        build = psutil.Process(pid) if pid else None
        # a zombie (ended, not yet reaped by the controller) counts as ended
        while build and build.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.5)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    watch = item.config.stash.get(_WATCH_KEY, None)
    if watch is not None:
        watch.module = item.module.__name__
        watch.test = item.nodeid


@pytest.fixture(scope="module", autouse=True)
def nothing_left_behind(request):
    """Fails the module's last test when the module left a /dev/shm segment or a process."""
    yield
    watch = request.config.stash.get(_WATCH_KEY, None)
    if watch is None:
        return
    problem = watch.check(request.module.__name__)
    if problem:
        pytest.fail(problem, pytrace=False)


def pytest_sessionfinish(session, exitstatus):
    """The session as a whole: anything of ours still in /dev/shm (a session fixture's, or a
    module's that its check did not catch) fails the run."""
    build = session.config.stash.get(_BUILD_KEY, None)
    if build is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            build.wait(timeout=0 if exitstatus else 600)
        if build.poll() is None:  # an interrupted session: the build goes with it
            build.kill()
            build.wait()
    watch = session.config.stash.get(_WATCH_KEY, None)
    if watch is None:
        return
    watch.stop()
    problem = watch.check(None)
    if problem:
        session.config.stash[_LEFT_KEY] = problem
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_LEFT_KEY = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    problem = config.stash.get(_LEFT_KEY, None)
    if problem:
        terminalreporter.write_line(f"FAILED: {problem}", red=True)


@pytest.fixture(scope="session")
def nltk_root(tmp_path_factory) -> str:
    """An NLTK data folder for reference computations with `nltk.sent_tokenize`: NLTK's own
    data where present, else the packaged model written out in NLTK's file format."""
    from evaluation.sentences import packaged_punkt_parameters, write_punkt_tab

    if (SHARED_NLTK_DATA / "tokenizers" / "punkt_tab" / "english").is_dir():
        return str(SHARED_NLTK_DATA)
    return str(write_punkt_tab(packaged_punkt_parameters(), tmp_path_factory.mktemp("nltk")))


def cli(
    *args: str, timeout: float = 900, env: dict | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """Run `python -m harness.cli ARGS` in its own process; output captured as text."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=str(cwd or REPO),
    )


def fresh_report(script: str, *args: str, timeout: float = 120) -> dict:
    """`script` run in a fresh interpreter in the checkout (for what a test's own process has
    already imported or set); what it printed last, read as JSON."""
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def checked(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, (
        f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    )
    return proc


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The random-weight tiny Llama (seeded: `make-tiny-model` writes the same one, see
    test_evaluation_e2e)."""
    from harness.assets.synthetic import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("assets") / "tiny-llama")


TINY_DATASET_SEED = 1


@pytest.fixture(scope="session")
def tiny_dataset(tiny_model, tmp_path_factory) -> Path:
    from harness.assets.synthetic import build_synthetic_dataset

    out = tmp_path_factory.mktemp("data") / "cnn_tiny.json"
    return build_synthetic_dataset(
        "llama3_1-8b", tiny_model, out, samples=TINY_SAMPLES, seed=TINY_DATASET_SEED
    )


def package_args(run: Path, root: Path, *extra: str) -> list[str]:
    """`mlperf-vllm package` of RUN into ROOT as the tests' system `tiny_cpu` of `Demo`."""
    return [
        "package",
        "--run",
        str(run),
        "--system",
        "tiny_cpu",
        "--submitter",
        "Demo",
        "--out",
        str(root),
        *extra,
    ]


def run_args(
    model: Path,
    dataset: Path,
    out: Path,
    conf: Path,
    *extra: str,
    benchmark: str = "llama3_1-8b",
    scenario: str = "Offline",
    mode: str = "performance",
    mlflow: bool = False,
    progress: bool = False,
) -> list[str]:
    """`run` arguments for a tiny-model run: no progress bar, no MLflow unless asked, `extra`."""
    return [
        "run",
        "--benchmark",
        benchmark,
        "--scenario",
        scenario,
        "--mode",
        mode,
        "--model",
        str(model),
        "--dataset",
        str(dataset),
        "--output",
        str(out),
        "--user-conf",
        str(conf),
        *([] if mlflow else ["--no-mlflow"]),
        *([] if progress else ["--no-progress"]),
        *extra,
    ]


@dataclass(frozen=True)
class CliRun:
    """A finished CLI run: its output folder and the completed process (stdout, stderr)."""

    out: Path
    proc: subprocess.CompletedProcess

    @property
    def result(self) -> dict:
        return json.loads((self.out / "result.json").read_text())

    @property
    def accuracy_log(self) -> Path:
        return self.out / "accuracy" / "mlperf_log_accuracy.json"

    def mlflow_run_id(self) -> str:
        m = re.search(r"MLflow: run ([0-9a-f]{32}) ", self.proc.stdout)
        assert m, self.proc.stdout[-3000:] + self.proc.stderr[-3000:]
        return m.group(1)


@pytest.fixture(scope="session")
def mlflow_server_uri(tmp_path_factory):
    """A real `mlflow server` on 127.0.0.1 for the whole session (one per xdist worker)."""
    from mlflow_server import mlflow_server

    with mlflow_server(tmp_path_factory.mktemp("mlflow-server")) as uri:
        yield uri


OFFLINE_SMOKE_EXPERIMENT = "tracking-e2e"


@pytest.fixture(scope="session")
def offline_smoke_run(tiny_model, tiny_dataset, mlflow_server_uri, tmp_path_factory) -> CliRun:
    """One real Offline run (performance + accuracy, evaluated) on the smoke conf, logged to
    the session's MLflow server under the experiment `tracking-e2e`."""
    out = tmp_path_factory.mktemp("offline-smoke") / "out"
    # No NLTK_DATA: the run scores with the packaged punkt model, as on a user's machine.
    env = {k: v for k, v in os.environ.items() if k != "NLTK_DATA"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            *run_args(
                tiny_model,
                tiny_dataset,
                out,
                SMOKE / "offline.conf",
                # float32: the answer-per-sample check compares with a direct generation token
                # by token, and bf16 near-ties on random weights could flip with the batch.
                "--engine-arg",
                "dtype=float32",
                "--mlflow-uri",
                mlflow_server_uri,
                "--experiment",
                OFFLINE_SMOKE_EXPERIMENT,
                mode="both",
                mlflow=True,
            ),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=str(REPO),
    )
    checked(proc)
    return CliRun(out, proc)


SERVER_MAX_TOKENS = "32"  # the tiny model rarely emits EOS: cap outputs so runs stay short

# After main() returns, list what is still alive in the process: our threads, child processes;
# and which of the packages nothing here uses (sut.imports.UNUSED_PACKAGES) the run imported.
LEFTOVER_PROBE = """
import json, sys, threading
import psutil
from harness.cli import main
rc = main(sys.argv[1:])
threads = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
kids = [" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)
        if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
from sut.imports import UNUSED_PACKAGES
unused = [name for name in UNUSED_PACKAGES if sys.modules.get(name) is not None]
left = {"threads": threads, "children": kids, "unused_imported": unused}
print("LEFTOVER " + json.dumps(left), flush=True)
sys.exit(rc)
"""


@dataclass(frozen=True)
class ProbedRun(CliRun):
    """A run made under LEFTOVER_PROBE with a temp folder of its own."""

    temp_entries: tuple[str, ...] = ()  # socket files and IPC folders left in that temp folder

    def leftover(self) -> dict:
        line = next(x for x in self.proc.stdout.splitlines() if x.startswith("LEFTOVER "))
        return json.loads(line[len("LEFTOVER ") :])


def temp_sockets(root: Path) -> set[str]:
    """Socket files and our IPC folders in a temp folder (where vLLM puts its ZMQ sockets)."""
    found = set()
    for entry in root.iterdir():
        with contextlib.suppress(OSError):
            if entry.is_socket() or entry.name.startswith("mlperf-vllm-ipc-"):
                found.add(entry.name)
    return found


@pytest.fixture(scope="session")
def server_smoke_run(tiny_model, tiny_dataset, tmp_path_factory) -> ProbedRun:
    """One real Server run (performance, accuracy, then TEST06 on the same engine) on the smoke
    conf, 32-token outputs, in a process that reports what is left of it after `main()`
    returns. Its TMPDIR is a folder of its own, so what it leaves there is its own even while
    other tests run beside it.

    Made again, once, when its only fault is a p99 over the GPU-sized latency limits with every
    sample answered and no error (`host_latency_only`): on this tiny model the p99s sit two
    orders of magnitude under the limits (TTFT ~25-70 ms, TPOT ~6-16 ms here, even beside a
    second engine on the same core), so a TTFT p99 over 2 s is a multi-second stall of the shared
    host, not the SUT. A SUT that is slow or serialises queries fails both runs. The repeat is
    reported as a warning with the first run's worst seconds."""
    return again_on_host_stall(
        "server smoke run",
        lambda: _server_smoke_attempt(tiny_model, tiny_dataset, tmp_path_factory),
        lambda run: run.out,
    )


def _server_smoke_attempt(tiny_model, tiny_dataset, tmp_path_factory) -> ProbedRun:
    out = tmp_path_factory.mktemp("server-smoke") / "out"
    # A short path: vLLM's IPC socket paths inside it must stay under 108 characters.
    tmp = Path(tempfile.mkdtemp(prefix="mlperf-test-"))
    # The warm-up (an untimed burst of other prompts first) and vLLM's scheduler stats in the
    # timeline come from a conf's engine line (`--engine-line`), as a submitter applies a
    # measured line: test_server_e2e finds both, so the line's flags reached the run.
    lines = out.parent / "engine_lines.conf"
    lines.write_text(
        "# engine llama3_1-8b.Offline: --engine-arg max_num_seqs=1 | not this scenario's | -\n"
        f"# engine llama3_1-8b.Server: --warmup-samples {SERVER_WARMUP} --engine-stats | test | -\n"
    )
    args = run_args(
        tiny_model,
        tiny_dataset,
        out,
        SMOKE / "server.conf",
        "--max-tokens",
        SERVER_MAX_TOKENS,
        "--test06",  # TEST06 on the same engine: test_package_e2e packages it
        "--engine-line",
        str(lines),
        scenario="Server",
        mode="both",
        progress=True,  # its bars, one per test, are read in test_server_e2e
    )
    proc = subprocess.run(
        [sys.executable, "-c", LEFTOVER_PROBE, *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=str(REPO),
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    left = tuple(sorted(temp_sockets(tmp)))
    shutil.rmtree(tmp, ignore_errors=True)
    checked(proc)
    return ProbedRun(out, proc, left)


def again_on_host_stall(what: str, attempt: Callable[[], T], out: Callable[[T], Path]) -> T:
    """`attempt()` once more, with a warning naming the first run's worst seconds, when the
    first's only fault is its latency p99s (`host_latency_only`): a stall of the shared host,
    not the SUT, which fails both runs when it is slow or loses a sample."""
    run = attempt()
    stalled = host_latency_only(out(run))
    if not stalled:
        return run
    warnings.warn(f"{what} made again: the first was {stalled}", stacklevel=2)
    return attempt()


def host_latency_only(out: Path) -> str:
    """Why a finished Server run was INVALID, when the only fault is its latency p99s with every
    sample answered and no error: a description with the run's worst
    seconds from its timeline. "" for any other run (VALID, or INVALID for anything else)."""
    result = json.loads((out / "result.json").read_text())
    perf, stats = result["performance"], result["sut_stats"]
    clean = (
        perf["validity"] == "INVALID"
        and perf.get("failed_constraints")
        and perf["num_errors"] == 0
        and stats["failed_samples"] == 0
        and stats["issued"] == stats["completed"]
    )
    if not clean:
        return ""
    series = json.loads((out / "timeline.json").read_text())["series"]
    worst = sorted(series, key=lambda s: -(s.get("ttft_p99_ms") or 0))[:3]
    seconds = ", ".join(f"t={s['t']:g} s TTFT p99 {s['ttft_p99_ms']} ms" for s in worst)
    return f"INVALID on {'; '.join(perf['failed_constraints'])} (worst seconds: {seconds})"


# --- pytest-xdist: groups and order ---------------------------------------------------------

# Three kinds of worker. gw0 .. gw{ENGINE_WORKERS - 1} run the engine groups: each computes on a
# core of its own (pytest_configure), and a Server run's latencies are measured beside one other
# engine at most. The next worker takes only the unit tests (no engine start), which then run
# while the engine groups wait on their timed phases (a Server test at a few QPS keeps ~0.15 of
# a core busy). Any worker beyond it is a spare: it takes only the groups whose every test is
# marked `untimed` (nothing asserted depends on how fast it runs, no timeout it could come near
# when slowed many times), and runs them at idle priority (at_idle_priority), on the CPU time
# the others leave. An engine worker takes an untimed group once no other group is left, and a
# unit test once no group is left.
ENGINE_WORKERS = 2


def worker_role(worker: str) -> str:
    """The role of an xdist worker ("gw0", ...): "engine", "unit" or "spare"."""
    index = int(worker.removeprefix("gw"))
    if index < ENGINE_WORKERS:
        return "engine"
    return "unit" if index == ENGINE_WORKERS else "spare"


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None  # xdist's own scheduler for the mode asked
    from xdist.scheduler import LoadGroupScheduling

    class EnginesUnitsAndSpares(LoadGroupScheduling):
        """xdist's `loadgroup`, with each unit of work sent to the kind of worker it is for
        (ENGINE_WORKERS): an engine worker takes groups (the timed first), the unit worker unit
        tests, a spare the untimed groups. An untimed group waits for whichever of a spare and
        an engine worker is free first: queued behind a busy worker's group, it would wait for
        that group to end."""

        def _assign_work_unit(self, node) -> None:
            role = worker_role(node.gateway.id)
            # A worker holds its last test back until it has the next unit or shuts down: one
            # pending test is a free worker. A busy one takes only what it alone may run.
            free = self._pending_of(self.assigned_work.get(node, {})) <= 1
            kinds = {
                "engine": ("timed", "untimed", "unit") if free else ("timed",),
                "unit": ("unit",),
                "spare": ("untimed",) if free else (),
            }[role]
            scope = next(
                (
                    s
                    for kind in kinds
                    for s, unit in self.workqueue.items()
                    if _kind(s, unit) == kind
                ),
                None,
            )
            if scope is None:
                return  # nothing of its kind is left: idle until the end
            unit = self.workqueue.pop(scope)
            self.assigned_work.setdefault(node, {})[scope] = unit
            collection = self.registered_collections[node]
            node.send_runtest_some([collection.index(i) for i, done in unit.items() if not done])

    return EnginesUnitsAndSpares(config, log)


def _kind(scope: str, unit: dict[str, bool]) -> str:
    """A work unit's kind: "unit" tests, or a group, "untimed" when its name says so (the
    controller sees test ids, not marks: pytest_collection_modifyitems names such groups)."""
    if not _is_group(unit):
        return "unit"
    return "untimed" if scope.endswith(UNTIMED_GROUP) else "timed"


UNTIMED_GROUP = "-untimed"  # the end of an untimed group's name


def _is_group(unit: dict[str, bool]) -> bool:
    """A work unit of xdist_group tests: their ids carry the group after `@` (past any `]`)."""
    return any(i.rfind("@") > i.rfind("]") for i in unit)


# Session runs shared across modules: the modules that use one run share one xdist worker.
SHARED_RUNS = ("offline_smoke_run", "server_smoke_run")
BUDGET = re.compile(r"[Tt]ime budget: (\d+) s")


def module_budget_s(module) -> int:
    """The time budget an e2e module states in its docstring (0 when none)."""
    m = BUDGET.search(module.__doc__ or "")
    return int(m.group(1)) if m else 0


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Group every engine-starting module (and the modules sharing a session run) into one
    xdist group, and run the groups longest first, then the unit tests. Without xdist the
    marks are inert and only the order changes."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    e2e = [i for i in items if i.get_closest_marker("e2e") or i.get_closest_marker("mlflow")]
    for item in e2e:
        for run in SHARED_RUNS:
            if run in item.fixturenames:
                parent[find(item.module.__name__)] = find(run)
    budget: dict[str, int] = {}
    modules = {item.module.__name__: item.module for item in e2e}
    for name, module in modules.items():
        group = find(name)
        budget[group] = budget.get(group, 0) + module_budget_s(module)
    timed = {find(item.module.__name__) for item in e2e if not item.get_closest_marker("untimed")}
    group_of = {}
    for item in e2e:
        group_of[id(item)] = group = find(item.module.__name__)
        name = group if group in timed else group + UNTIMED_GROUP
        item.add_marker(pytest.mark.xdist_group(name))
    position = {id(item): n for n, item in enumerate(items)}

    def order(item) -> tuple:
        group = group_of.get(id(item))
        if group is None:
            return (1, 0, "", position[id(item)])
        return (0, -budget[group], group, position[id(item)])

    items.sort(key=order)
