"""Where the SUT process's time goes: py-spy samples of it and of its child processes (vLLM's
engine cores, front-end workers), split per process, per thread and by category, and per
request and per output token.

Why: one Python process carries LoadGen's callbacks, our asyncio loop (a task per request) and
vLLM's input and output processing for every engine. When requests wait between the SUT and
the engine cores while the schedulers have room, this says which part of that process is busy
and whether its Python is saturated (busy cores near 1.0: one GIL's worth, the host path's
ceiling).

    # wrap a command: start it, sample once its timed test starts, analyse when it ends
    python bench/host_profile.py --out DIR [--delay 5] [--duration 20] [--rate 100] -- \\
        python -m harness.cli run --scenario Server ... --output RUN
    # attach to a running process
    python bench/host_profile.py --out DIR --pid PID --duration 20 [--after FILE]
    # analyse a recorded profile again (new rules, other counts)
    python bench/host_profile.py --out DIR --analyze DIR/profile.txt --rate 100

Writes DIR/profile.txt (py-spy's raw stacks), DIR/py-spy.log and DIR/host_profile.json, and
prints the tables. A wrapped command with `--output RUN` is sampled from the moment LoadGen
creates RUN/performance/mlperf_log_detail.txt (the timed test's start; --after names another
file), then --delay seconds more, for --duration seconds or until it ends. Per request and per
token figures need the load the window saw: `--requests N --tokens T` (completed in the window),
or else RUN/result.json's completed samples/s and tokens/s times the window's length (so keep
the window inside the timed test: a --duration shorter than the test).

How a sample is judged (rules below, each a small ordered table, first match wins):
- idle: the leaf frame blocks (a selector, a lock or condition, a queue, a pipe or socket, a
  process wait, or a source line that calls a blocking function such as time.sleep, os.read or
  LoadGen's StartTest). py-spy knows from the OS whether a thread runs, but its raw format does
  not carry that, so the leaf decides; threads blocked in a C call on a line these rules do not
  know count as busy (the JSON's top leaves show what was counted, to extend the rules).
- busy, by category: the innermost frame that any category claims decides, so our code calling
  vLLM's generate counts as vLLM, and vLLM calling asyncio counts as asyncio: a category names
  whose code runs. Work inside a LoadGen callback (issue_queries, the QSL's load) counts as
  LoadGen calls whatever it calls, since LoadGen's issuing waits on it.
- busy cores of a process: the sum over its threads of busy samples per tick. Busy Python
  samples include C code called from Python that may drop the GIL (numpy, zmq), so it is an
  upper bound on the GIL's load.
"""

from __future__ import annotations

import argparse
import functools
import json
import linecache
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # harness.* when run as a script

PROFILE_FILE = "profile.txt"
REPORT_FILE = "host_profile.json"
PY_SPY_LOG = "py-spy.log"
SCHEMA_VERSION = 1


class UsageError(Exception):
    """Bad input: one line naming the problem and the fix."""


# ---------------------------------------------------------------------------------------------
# py-spy's raw stacks


@dataclass(frozen=True)
class Frame:
    function: str  # qualified as py-spy writes it: "AsyncLLM.generate", "<module>"
    file: str  # as recorded: a full path with --full-filenames, else the package-relative one
    line: int  # 0 when recorded without line numbers

    def __str__(self) -> str:
        return f"{self.function} ({_short(self.file)}:{self.line})"


@dataclass(frozen=True)
class Sample:
    """One line of py-spy's raw output: a stack and how many ticks saw it."""

    pids: tuple[int, ...]  # the profiled process first, this stack's process last
    command: str  # this process's command line (vLLM's set theirs: VLLM::EngineCore_DP0)
    tid: int
    thread: str
    frames: tuple[Frame, ...]  # outermost first, the leaf last
    count: int

    @property
    def pid(self) -> int:
        return self.pids[-1]


PROCESS_RE = re.compile(r'process (\d+):"')
THREAD_RE = re.compile(r"thread \((\w+)\)(?:: (.*))?$")
FRAME_RE = re.compile(r"^(?P<function>.*?) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")


def parse_raw(text: str) -> list[Sample]:
    """py-spy's `--format raw` output recorded with `--threads` (and `--subprocesses`):
    `process P:"cmd";...;thread (T): NAME;frame;frame COUNT`. A command line may hold ';'
    (multiprocessing's spawn line does), so a process frame ends at its closing '";'."""
    samples = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line:
            continue
        body, _, count = line.rpartition(" ")
        if not count.isdigit():
            raise UsageError(f"line {n} of the profile ends in no sample count: is it py-spy raw?")
        pids: list[int] = []
        command = ""
        while match := PROCESS_RE.match(body):
            end = min(
                (
                    i
                    for i in (body.find('";process ', match.end()), body.find('";thread ('))
                    if i >= 0
                ),
                default=-1,
            )
            if end < 0:
                raise UsageError(
                    f"line {n} of the profile: a process frame with no thread after it"
                )
            pids.append(int(match.group(1)))
            command = body[match.end() : end]
            body = body[end + 2 :]
        head, _, rest = body.partition(";")
        thread = THREAD_RE.match(head)
        if thread is None:
            raise UsageError(f"line {n} of the profile has no thread frame: record with --threads")
        frames = tuple(_frame(f) for f in rest.split(";") if f) if rest else ()
        tid = int(thread.group(1), 16 if thread.group(1).startswith("0x") else 10)
        samples.append(
            Sample(tuple(pids) or (0,), command, tid, thread.group(2) or "", frames, int(count))
        )
    return samples


def _frame(text: str) -> Frame:
    match = FRAME_RE.match(text)
    if match is None:
        return Frame(text, "", 0)
    return Frame(match["function"], match["file"], int(match["line"] or 0))


# ---------------------------------------------------------------------------------------------
# The rules


@functools.cache
def source_line(file: str, line: int) -> str:
    """The text of a frame's line, read here at analysis time (full paths resolve at once, a
    package-relative one against sys.path): a profile analysed after the files changed reads
    the new lines."""
    if line <= 0 or not file:
        return ""
    candidates = [file] if os.path.isabs(file) else [os.path.join(p, file) for p in sys.path]
    for path in candidates:
        text = linecache.getline(path, line)
        if text:
            return text.strip()
    return ""


def _short(file: str) -> str:
    """A path as the package-relative name a reader knows: vllm/v1/engine/core.py, sut/server.py."""
    for root in (*(p for p in sys.path if p), str(REPO)):
        if file.startswith(root.rstrip("/") + "/"):
            return file[len(root.rstrip("/")) + 1 :]
    return file


def _in_package(frame: Frame, *packages: str) -> bool:
    return any(re.search(rf"(^|/){p}/", frame.file) for p in packages)


def _vllm_path(frame: Frame) -> str:
    """The frame's file inside the vllm package ('v1/engine/core_client.py'), '' outside it."""
    match = re.search(r"(^|/)vllm/(.*)$", frame.file)
    return match.group(2) if match else ""


def _stdlib(frame: Frame, *names: str) -> bool:
    """A module of Python's own library (not zmq/sugar/socket.py for socket.py)."""
    if "-packages/" in frame.file:
        return False
    return any(frame.file == n or frame.file.endswith("/" + n) for n in names)


def _last_name(frame: Frame) -> str:
    return frame.function.rsplit(".", 1)[-1]


# A leaf frame that waits. Each rule: (why it is idle, predicate on the leaf frame).
BLOCKING_LINE = re.compile(
    r"\b(time\.sleep|sleep|os\.read|os\.waitpid|select\.\w+|sched_yield)\("
    r"|\.(recv\w*|accept|readline|get\(block=True|poll)\b"
    r"|\bStartTest\w*\("  # LoadGen runs the test in C++ on this thread, between our callbacks
    r"|^for line in \w+:"  # lines of a pipe (multiprocessing's resource tracker reads one)
)
WAIT_NAME = re.compile(r"^_?(wait\w*|sleep|select|poll|recv\w*|acquire|_recv\w*|_poll)$")


LOCK_WAITS = {"wait", "acquire", "join", "_wait_for_tstate_lock"}


def _lock_wait(f: Frame) -> bool:
    return _stdlib(f, "threading.py") and _last_name(f) in LOCK_WAITS


def _pipe_or_socket(f: Frame) -> bool:
    if _stdlib(f, "multiprocessing/connection.py", "socket.py", "ssl.py"):
        return True
    return _in_package(f, "zmq") and re.match(r"^(poll|recv\w*)$", _last_name(f)) is not None


def _process_wait(f: Frame) -> bool:
    waits = "wait" in f.function.lower()
    return waits and (_stdlib(f, "subprocess.py") or _in_package(f, "psutil", "multiprocessing"))


# The last two read lines and names, so neither applies in asyncio: its sockets do not block and
# its waits are coroutines (a thread's one wait there is the selector's).
def _blocking_line(f: Frame) -> bool:
    return not _in_package(f, "asyncio") and bool(BLOCKING_LINE.search(source_line(f.file, f.line)))


def _wait_name(f: Frame) -> bool:
    return not _in_package(f, "asyncio") and bool(WAIT_NAME.match(_last_name(f)))


IDLE_RULES: tuple[tuple[str, Callable[[Frame], bool]], ...] = (
    ("selector", lambda f: _stdlib(f, "selectors.py") and "select" in f.function),
    ("lock or condition", _lock_wait),
    ("queue", lambda f: _stdlib(f, "queue.py") and _last_name(f) in {"get", "put", "join"}),
    ("pipe or socket", _pipe_or_socket),
    ("process wait", _process_wait),
    ("blocking call on the line", _blocking_line),
    ("a wait by its name", _wait_name),
)


def idle_reason(sample: Sample) -> str | None:
    """Why the sample's thread waits, or None when it is busy. A thread with no Python frame
    counts as busy (it runs native code), as py-spy itself judges it."""
    if not sample.frames:
        return None
    leaf = sample.frames[-1]
    return next((name for name, waits in IDLE_RULES if waits(leaf)), None)


LOADGEN_CALLBACKS = {"issue_queries", "flush_queries", "_load", "_unload"}
LOADGEN_CALL = re.compile(r"\blg\.\w+\(|mlperf_loadgen\.\w+\(")
VLLM_INPUT_FILES = {"v1/engine/input_processor.py", "v1/engine/processor.py", "sampling_params.py"}
VLLM_OUTPUT_FILES = {
    "v1/engine/output_processor.py",
    "v1/engine/detokenizer.py",
    "v1/engine/logprobs.py",
    "outputs.py",
}
# core_client.py and async_llm.py hold both directions: the function decides.
CLIENT_INPUT = re.compile(r"add_request|_send_input|call_utility|abort|get_core_engine_for_request")
CLIENT_OUTPUT = re.compile(r"output|_process_utility_output")
ASYNC_LLM_INPUT = re.compile(r"add_request|check_admission|_add_streaming_input")
# generate()'s own lines, after add_request, hand the outputs on to the caller.
ASYNC_LLM_OUTPUT = re.compile(r"output_handler|generate")


def _ours(frame: Frame) -> bool:
    return _in_package(frame, "sut", "harness")


def _loadgen(frame: Frame, sample: Sample) -> bool:
    if _ours(frame) and LOADGEN_CALL.search(source_line(frame.file, frame.line)):
        return True
    return any(_ours(f) and _last_name(f) in LOADGEN_CALLBACKS for f in sample.frames)


def _vllm_input(frame: Frame, _: Sample) -> bool:
    path = _vllm_path(frame)
    return (
        path in VLLM_INPUT_FILES
        or path.startswith("inputs/")
        or (path == "v1/engine/core_client.py" and bool(CLIENT_INPUT.search(frame.function)))
        or (path == "v1/engine/async_llm.py" and bool(ASYNC_LLM_INPUT.search(frame.function)))
    )


def _vllm_output(frame: Frame, _: Sample) -> bool:
    path = _vllm_path(frame)
    return (
        path in VLLM_OUTPUT_FILES
        or (path == "v1/engine/core_client.py" and bool(CLIENT_OUTPUT.search(frame.function)))
        or (path == "v1/engine/async_llm.py" and bool(ASYNC_LLM_OUTPUT.search(frame.function)))
    )


Rule = tuple[str, Callable[[Frame, Sample], bool]]
ASYNCIO = "asyncio machinery"
# Busy categories, tried frame by frame from the leaf outwards: the innermost frame some rule
# claims decides, and on that frame the first rule that matches. So LoadGen comes before our
# code (a sut/ line that calls lg.QuerySamplesComplete is both), and a frame no rule claims
# (zmq, msgspec, numpy, vllm/v1/serial_utils.py) is charged to its nearest claimed caller.
CATEGORIES: tuple[Rule, ...] = (
    ("LoadGen calls", _loadgen),
    ("vLLM input processing", _vllm_input),
    ("vLLM output processing", _vllm_output),
    ("our code", lambda f, _: _ours(f)),
    (ASYNCIO, lambda f, _: _in_package(f, "asyncio")),
)
# Tried the same way only when no category claims any frame of the stack: vLLM's helpers
# (vllm/utils, vllm/v1/metrics, serial_utils) called from its input or output path stay there;
# a stack of vLLM code and nothing else (an engine core's step) is "vLLM other".
FALLBACKS: tuple[Rule, ...] = (("vLLM other", lambda f, _: bool(_vllm_path(f))),)
OTHER = "other"
IDLE = "idle"
CATEGORY_NAMES = (*(name for name, _ in (*CATEGORIES, *FALLBACKS)), OTHER)


def category(sample: Sample, skip: str = "") -> str:
    """The busy category of a sample (see CATEGORIES); with `skip`, the one it would have
    without that category's rule (whom asyncio's work was for)."""
    for rules in (CATEGORIES, FALLBACKS):
        for frame in reversed(sample.frames):
            for name, claims in rules:
                if name != skip and claims(frame, sample):
                    return name
    return OTHER


def classify(sample: Sample) -> str:
    """IDLE, or the sample's busy category."""
    return IDLE if idle_reason(sample) is not None else category(sample)


# ---------------------------------------------------------------------------------------------
# Per process and thread


@dataclass
class ThreadProfile:
    tid: int
    name: str
    samples: int = 0
    kinds: Counter[str] = field(default_factory=Counter)  # IDLE and the busy categories

    @property
    def busy(self) -> int:
        return self.samples - self.kinds[IDLE]


@dataclass
class ProcessProfile:
    pid: int
    command: str
    depth: int  # 0: the profiled process, 1: its child, ...
    threads: dict[int, ThreadProfile] = field(default_factory=dict)
    idle_reasons: Counter[str] = field(default_factory=Counter)
    busy_leaves: Counter[str] = field(default_factory=Counter)
    idle_leaves: Counter[str] = field(default_factory=Counter)  # to check the idle rules against
    # asyncio's samples by the category of the code that called into it
    asyncio_for: Counter[str] = field(default_factory=Counter)
    ours: int = 0  # samples with a frame of sut/ or harness/ anywhere on the stack
    vllm: int = 0  # samples with a frame of vllm/ anywhere on the stack
    # every vLLM function seen, as "v1/engine/core.py:run_engine_core" (our sut/engine_worker.py
    # has a worker_main too)
    vllm_functions: set[str] = field(default_factory=set)
    role: str = ""

    @property
    def ticks(self) -> int:
        """Sampling ticks the process was seen for: py-spy samples every thread at each tick
        (with --idle), so the longest-lived thread's count is the window."""
        return max((t.samples for t in self.threads.values()), default=0)

    @property
    def busy(self) -> int:
        return sum(t.busy for t in self.threads.values())

    @property
    def busy_cores(self) -> float:
        return self.busy / self.ticks if self.ticks else 0.0

    def categories(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for t in self.threads.values():
            total.update(t.kinds)
        del total[IDLE]
        return total


# A process's role, first match wins. vLLM names its processes (setproctitle), but py-spy reads
# a command line once, so one sampled from its start keeps multiprocessing's spawn line: its
# entry function tells too. The profiled process is the SUT; a child running our code and vLLM's is a front-end worker (one AsyncLLM
# per engine); any other child (multiprocessing's resource tracker, our orphan watcher) a helper.
ENGINE_CORE = "v1/engine/core.py:run_engine_core"
VLLM_WORKER = "v1/executor/multiproc_executor.py:worker_main"
ROLES: tuple[tuple[str, Callable[[ProcessProfile], bool]], ...] = (
    ("vLLM engine core", lambda p: "EngineCore" in p.command or ENGINE_CORE in p.vllm_functions),
    ("vLLM worker", lambda p: "VLLM::" in p.command or VLLM_WORKER in p.vllm_functions),
    ("SUT main", lambda p: p.depth == 0),
    ("front-end worker", lambda p: p.ours > 0 and p.vllm > 0),
    ("helper", lambda p: True),
)
HOST_PATH_ROLES = ("SUT main", "front-end worker")


def analyse(samples: Iterable[Sample]) -> list[ProcessProfile]:
    """Samples grouped by process and thread, each judged idle or a busy category."""
    procs: dict[int, ProcessProfile] = {}
    for s in samples:
        proc = procs.setdefault(s.pid, ProcessProfile(s.pid, s.command, len(s.pids) - 1))
        thread = proc.threads.setdefault(s.tid, ThreadProfile(s.tid, s.thread))
        thread.samples += s.count
        reason = idle_reason(s)
        if reason is not None:
            thread.kinds[IDLE] += s.count
            proc.idle_reasons[reason] += s.count
            proc.idle_leaves[f"{s.frames[-1]} [{reason}]"] += s.count
        else:
            kind = category(s)
            thread.kinds[kind] += s.count
            if kind == ASYNCIO:
                proc.asyncio_for[category(s, skip=ASYNCIO)] += s.count
            proc.busy_leaves[str(s.frames[-1]) if s.frames else "(no Python frame)"] += s.count
        proc.ours += s.count if any(_ours(f) for f in s.frames) else 0
        proc.vllm += s.count if any(_vllm_path(f) for f in s.frames) else 0
        proc.vllm_functions.update(
            f"{_vllm_path(f)}:{_last_name(f)}" for f in s.frames if _vllm_path(f)
        )
    for proc in procs.values():
        proc.role = next(name for name, is_role in ROLES if is_role(proc))
    return sorted(procs.values(), key=lambda p: (p.depth, p.pid))


# ---------------------------------------------------------------------------------------------
# Load, report


@dataclass(frozen=True)
class Load:
    """Requests and output tokens completed in the profiled window, and where they came from."""

    requests: float
    tokens: float
    source: str


def load_from_result(run_dir: Path, window_s: float) -> Load | None:
    """The run's completed rates times the window (None when the run wrote no performance)."""
    from harness.run.result import RESULT_FILE, RunResult

    result = RunResult.read(run_dir / RESULT_FILE)
    perf = result.performance if result is not None else None
    if not perf or not perf.get("samples_per_second") or not perf.get("tokens_per_second"):
        return None
    qps, tps = float(perf["samples_per_second"]), float(perf["tokens_per_second"])
    return Load(
        qps * window_s,
        tps * window_s,
        f"{run_dir / RESULT_FILE}: {qps:g} samples/s, {tps:g} tokens/s x {window_s:.1f} s",
    )


def output_dir_of(command: Sequence[str]) -> Path | None:
    """The `--output DIR` of a wrapped `run` command, if it has one."""
    for i, arg in enumerate(command):
        if arg == "--output" and i + 1 < len(command):
            return Path(command[i + 1])
        if arg.startswith("--output="):
            return Path(arg.split("=", 1)[1])
    return None


def report(procs: list[ProcessProfile], rate_hz: float, load: Load | None) -> dict[str, Any]:
    """The JSON record of an analysed profile."""

    def share(part: int, whole: int) -> float:
        return round(part / whole, 4) if whole else 0.0

    processes = []
    for p in procs:
        cats = p.categories()
        processes.append(
            {
                "pid": p.pid,
                "role": p.role,
                "command": p.command,
                "depth": p.depth,
                "ticks": p.ticks,
                "window_s": round(p.ticks / rate_hz, 3),
                "busy_samples": p.busy,
                "busy_cores": round(p.busy_cores, 4),
                "categories": {c: cats[c] for c in CATEGORY_NAMES if cats[c]},
                "category_share": {c: share(cats[c], p.busy) for c in CATEGORY_NAMES if cats[c]},
                "idle_reasons": dict(p.idle_reasons.most_common()),
                "asyncio_for": dict(p.asyncio_for.most_common()),
                "top_busy_leaves": p.busy_leaves.most_common(15),
                "top_idle_leaves": p.idle_leaves.most_common(10),
                "threads": [
                    {
                        "tid": t.tid,
                        "name": t.name,
                        "samples": t.samples,
                        "busy_samples": t.busy,
                        "busy_share_of_wall": share(t.busy, p.ticks),
                        "categories": dict(t.kinds.most_common()),
                    }
                    for t in sorted(p.threads.values(), key=lambda t: -t.busy)
                ],
            }
        )
    out: dict[str, Any] = {"rate_hz": rate_hz, "processes": processes}
    if load is not None and load.requests > 0:
        out["load"] = {"requests": load.requests, "tokens": load.tokens, "source": load.source}
        out["per_request"] = {
            "SUT main": _per_unit([p for p in procs if p.role == "SUT main"], rate_hz, load)
        }
        if any(p.role == "front-end worker" for p in procs):
            host = [p for p in procs if p.role in HOST_PATH_ROLES]
            out["per_request"]["host path"] = _per_unit(host, rate_hz, load)
    return out


def _per_unit(procs: list[ProcessProfile], rate_hz: float, load: Load) -> dict[str, Any]:
    """Busy seconds of these processes per request and per output token, in microseconds, in
    total and by category."""
    busy_s = sum(p.busy for p in procs) / rate_hz
    cats: Counter[str] = Counter()
    for p in procs:
        cats.update(p.categories())
    us_per_request = {c: round(cats[c] / rate_hz / load.requests * 1e6, 1) for c in cats}
    return {
        "busy_s": round(busy_s, 3),
        "us_per_request": round(busy_s / load.requests * 1e6, 1),
        "us_per_token": round(busy_s / load.tokens * 1e6, 2) if load.tokens else None,
        "us_per_request_by_category": us_per_request,
    }


SHORT_NAMES = {
    "LoadGen calls": "LoadGen",
    "vLLM input processing": "vLLM in",
    "vLLM output processing": "vLLM out",
    "our code": "ours",
    "asyncio machinery": "asyncio",
    "vLLM other": "vLLM oth",
    OTHER: "other",
}


def table(record: dict[str, Any], threads_of: Sequence[str] = HOST_PATH_ROLES) -> str:
    """The record as text: a row per process (busy cores, the split of busy samples), the
    busiest threads of the host path's processes, and the per-request figures."""
    cols = [SHORT_NAMES[c] for c in CATEGORY_NAMES]
    lines = [
        f"{'pid':>7} {'role':<17} {'window':>7} {'busy cores':>10}  "
        + " ".join(f"{c:>8}" for c in cols)
        + "  command"
    ]
    for p in record["processes"]:
        split = " ".join(f"{100 * p['category_share'].get(c, 0.0):>7.1f}%" for c in CATEGORY_NAMES)
        lines.append(
            f"{p['pid']:>7} {p['role']:<17} {p['window_s']:>6.1f}s {p['busy_cores']:>10.3f}  "
            f"{split}  {p['command'][:60]}"
        )
    for p in record["processes"]:
        if p["role"] not in threads_of:
            continue
        lines.append(
            f"\nthreads of {p['pid']} ({p['role']}), busy share of the {p['window_s']:.1f} s window:"
        )
        for t in p["threads"][:8]:
            top = next((k for k in t["categories"] if k != IDLE), IDLE)
            lines.append(
                f"  {t['name'] or '?':<36} {t['tid']:>8} {100 * t['busy_share_of_wall']:>6.1f}%"
                f"  mostly {top}"
            )
        if p["asyncio_for"]:
            called = ", ".join(f"{SHORT_NAMES[c]} {n}" for c, n in p["asyncio_for"].items())
            lines.append(f"  asyncio's busy samples, by who called into it: {called}")
    if "per_request" in record:
        lines.append(f"\nload: {record['load']['source']}")
        for role, v in record["per_request"].items():
            per_token = f"{v['us_per_token']:.2f}" if v["us_per_token"] is not None else "-"
            parts = ", ".join(
                f"{SHORT_NAMES[c]} {us:.0f}"
                for c, us in sorted(v["us_per_request_by_category"].items(), key=lambda kv: -kv[1])
            )
            lines.append(
                f"{role}: {v['us_per_request']:.0f} us busy per request, {per_token} us per "
                f"output token ({parts})"
            )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Recording


def py_spy() -> str:
    """py-spy beside this interpreter (the venv's), else on PATH."""
    here = Path(sys.executable).with_name("py-spy")
    found = str(here) if here.exists() else shutil.which("py-spy")
    if found is None:
        raise UsageError("py-spy not found: install the dev extra (pip install -e '.[dev]')")
    return found


def py_spy_argv(pid: int, out: Path, rate: int, duration: int | None, blocking: bool) -> list[str]:
    argv = [py_spy(), "record", "--pid", str(pid), "--subprocesses", "--idle", "--threads"]
    argv += ["--full-filenames", "--rate", str(rate), "--format", "raw", "-o", str(out)]
    if duration is not None:
        argv += ["--duration", str(duration)]
    # Blocking mode stops every thread of every sampled process at each tick, the SUT and each
    # engine core alike: at 100 Hz that stalls the very host path being measured. Without it,
    # py-spy reads the stacks while they run; a stack read mid-change is counted as an error
    # (py-spy.log) or, rarely, a torn stack. --blocking is there for exact stacks.
    if not blocking:
        argv.append("--nonblocking")
    return argv


@dataclass(frozen=True)
class Recording:
    argv: list[str]
    rc: int
    wall_s: float
    cpu_s: float  # py-spy's own user + system time: what the sampling cost the host
    samples: int | None  # as py-spy counted them
    errors: int | None


def record(pid: int, out_dir: Path, rate: int, duration: int | None, blocking: bool) -> Recording:
    argv = py_spy_argv(pid, out_dir / PROFILE_FILE, rate, duration, blocking)
    log = out_dir / PY_SPY_LOG
    start = time.monotonic()
    with log.open("w") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT)
        # wait4 for py-spy's CPU time: the cost of sampling, reported beside the profile
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    said = log.read_text(errors="replace")
    counted = re.search(r"Samples: (\d+) Errors: (\d+)", said)
    return Recording(
        argv,
        proc.returncode,
        time.monotonic() - start,
        usage.ru_utime + usage.ru_stime,
        int(counted.group(1)) if counted else None,
        int(counted.group(2)) if counted else None,
    )


def wait_for_start(alive: Callable[[], bool], after: Path | None, delay: float) -> None:
    """Until `after` exists, newer than now, then `delay` seconds more, while `alive()`."""
    since = time.time()
    if after is not None:
        print(f"host_profile: sampling starts once {after} appears, then {delay:g} s", flush=True)
    while after is not None and not (after.exists() and after.stat().st_mtime >= since - 1):
        if not alive():
            raise UsageError(f"the process ended before {after} appeared: nothing to profile")
        time.sleep(0.2)
    end = time.monotonic() + delay
    while time.monotonic() < end:
        if not alive():
            raise UsageError(f"the process ended within --delay {delay:g} s: nothing to profile")
        time.sleep(min(0.2, max(0.0, end - time.monotonic())))


# ---------------------------------------------------------------------------------------------
# Command line


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    argv = list(argv)
    command: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, required=True, help="folder for the profile and report")
    ap.add_argument("--pid", type=int, help="attach to this running process instead of a command")
    ap.add_argument("--analyze", type=Path, help="analyse this raw profile again; records nothing")
    ap.add_argument(
        "--after",
        type=Path,
        help="start sampling once this file appears, newer than this tool's start (default for a "
        "command with --output RUN: RUN/performance/mlperf_log_detail.txt, which LoadGen creates "
        "as the timed test starts; an engine's start time varies too much for --delay alone)",
    )
    ap.add_argument(
        "--delay", type=float, default=0.0, help="seconds before sampling starts (after --after)"
    )
    ap.add_argument("--duration", type=int, help="seconds to sample (default: until it ends)")
    ap.add_argument("--rate", type=int, default=100, help="samples per second (default 100)")
    ap.add_argument("--blocking", action="store_true", help="pause the processes at each sample")
    ap.add_argument("--requests", type=float, help="requests completed in the window")
    ap.add_argument("--tokens", type=float, help="output tokens completed in the window")
    args = ap.parse_args(argv)
    modes = sum(x is not None and x != [] for x in (args.pid, args.analyze, command or None))
    if modes != 1:
        raise UsageError("give one of: -- COMMAND ..., --pid PID, or --analyze PROFILE")
    if (args.requests is None) != (args.tokens is None):
        raise UsageError("--requests and --tokens go together: give both or neither")
    if args.rate <= 0 or (args.duration is not None and args.duration < 1) or args.delay < 0:
        raise UsageError("--rate must be > 0, --duration >= 1 s and --delay >= 0")
    return args, command


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args, command = parse_args(sys.argv[1:] if argv is None else argv)
        return _main(args, command)
    except UsageError as exc:
        print(f"host_profile: {exc}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace, command: list[str]) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    rc = 0
    meta: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "rate_hz": args.rate}
    profile = args.out / PROFILE_FILE
    if args.analyze is not None:
        profile = args.analyze
        if not profile.is_file():
            raise UsageError(f"--analyze {profile}: no such file")
    elif args.pid is not None:
        if not Path(f"/proc/{args.pid}").exists():
            raise UsageError(f"--pid {args.pid}: no such process")
        wait_for_start(Path(f"/proc/{args.pid}").exists, args.after, args.delay)
        rec = record(args.pid, args.out, args.rate, args.duration, args.blocking)
        meta.update(pid=args.pid, py_spy=_recording(rec))
    else:
        py_spy()  # fail before starting a long command
        run_dir = output_dir_of(command)
        after = args.after
        if after is None and run_dir is not None:
            after = run_dir / "performance" / "mlperf_log_detail.txt"
        cmd = subprocess.Popen(command)
        try:
            wait_for_start(lambda: cmd.poll() is None, after, args.delay)
            rec = record(cmd.pid, args.out, args.rate, args.duration, args.blocking)
            rc = cmd.wait()
        except BaseException:
            # Ctrl-C reached the command too (one process group); an error of ours must not
            # leave it running.
            if cmd.poll() is None:
                cmd.send_signal(signal.SIGINT)
            cmd.wait()
            raise
        meta.update(command=command, command_rc=rc, pid=cmd.pid, py_spy=_recording(rec))
    if not profile.is_file() or not profile.stat().st_size:
        raise UsageError(f"py-spy wrote no samples to {profile}: see {args.out / PY_SPY_LOG}")
    procs = analyse(parse_raw(profile.read_text(errors="replace")))
    load = _load(args, command, procs)
    record_ = {**meta, **report(procs, args.rate, load)}
    (args.out / REPORT_FILE).write_text(json.dumps(record_, indent=1) + "\n")
    print(table(record_))
    if "py_spy" in meta:
        p = meta["py_spy"]
        print(
            f"\npy-spy: {p['samples']} samples, {p['errors']} errors, {p['cpu_s']:.1f} s of CPU "
            f"over {p['wall_s']:.1f} s ({p['cpu_s'] / max(p['wall_s'], 1e-9):.2f} cores)"
        )
    print(f"written: {args.out / REPORT_FILE}")
    return rc


def _recording(rec: Recording) -> dict[str, Any]:
    return {
        "argv": rec.argv,
        "rc": rec.rc,
        "wall_s": round(rec.wall_s, 3),
        "cpu_s": round(rec.cpu_s, 3),
        "samples": rec.samples,
        "errors": rec.errors,
    }


def _load(args: argparse.Namespace, command: list[str], procs: list[ProcessProfile]) -> Load | None:
    if args.requests is not None:
        return Load(args.requests, args.tokens, "--requests / --tokens")
    run_dir = output_dir_of(command)
    main_proc = next((p for p in procs if p.role == "SUT main"), None)
    if run_dir is None or main_proc is None:
        return None
    return load_from_result(run_dir, main_proc.ticks / args.rate)


if __name__ == "__main__":
    raise SystemExit(main())
