"""The rules that judge a py-spy sample of the SUT's process tree, and the analysis of py-spy's
raw stacks into the numbers of bench/host_profile.py's report: which frame blocks (idle), whose
code runs (the busy categories), what each process is (its role), and per process, per thread and
per request, how much is busy. Pure: stacks in, numbers out; recording, the command line and the
printed tables are bench/host_profile.py's (whose docstring says how a sample is judged).
"""

from __future__ import annotations

import functools
import linecache
import os
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


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
    # an engine core (TP 1) waiting for its step on the GPU: a CUDA event or stream sync
    ("the GPU", lambda f: _in_package(f, "torch") and _last_name(f) == "synchronize"),
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


def own_frames(sample: Sample) -> tuple[Frame, ...]:
    """The frames the sampled process runs itself: a forked child (vLLM's engine core under a
    front-end worker) keeps its parent's frames below multiprocessing's `_bootstrap`, and those
    would charge the child's work to whatever the parent was running when it forked."""
    frames = tuple(sample.frames)
    for i in range(len(frames) - 1, -1, -1):
        f = frames[i]
        if _stdlib(f, "multiprocessing/process.py") and _last_name(f) == "_bootstrap":
            return frames[i + 1 :]
    return frames


def category(sample: Sample, skip: str = "") -> str:
    """The busy category of a sample (see CATEGORIES); with `skip`, the one it would have
    without that category's rule (whom asyncio's work was for)."""
    frames = own_frames(sample)
    for rules in (CATEGORIES, FALLBACKS):
        for frame in reversed(frames):
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
