"""One `mlperf-vllm run` in a child process, its typed result back: the one door for every
caller that starts runs (calibration trials, sweep repeats, a confirmation run), and for a
capacity sweep's `mlperf-vllm calibrate` (the same flags: calibrate hands those it does not
know to each of its runs).

Why a child process: LoadGen reads mlperf.conf once per process, and a crashing engine must
not take its caller with it. The child runs in its own process group under its time limit
(harness.proc.children), logs nothing to MLflow (its caller does, if anyone) and writes its
output to `OUTPUT/run.log`. The child's argv is its RunSpec's own (`RunSpec.to_argv`).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from harness.proc.children import EXIT_TIMEOUT, run_child
from harness.run.record.engine_log import exception_lines, first_cause
from harness.run.record.result import RESULT_FILE, RunResult
from harness.run.setup.spec import RunSpec

RUN_LOG = "run.log"  # the child's stdout and stderr, in its output folder


@dataclass(frozen=True)
class ChildRun:
    """What to run: the run's spec, and how the child is started (its command, environment
    and time limit), which no run option says."""

    spec: RunSpec
    env: tuple[tuple[str, str], ...] = ()  # set in the child's environment only
    timeout_s: float | None = None  # wall clock; the whole process group is ended after it
    timeout_flag: str = "its time limit"  # the caller's name for timeout_s, for messages
    command: str = "run"  # or "calibrate": it writes calibration.json, not result.json
    command_args: tuple[str, ...] = ()  # the command's own flags (calibrate's --trials ...)

    @property
    def output(self) -> Path:
        return self.spec.output

    def flags(self) -> list[str]:
        """The command's arguments (after `mlperf-vllm COMMAND`). The parent owns the child's
        folder (a retried trial or repeat replaces its own earlier run) and the terminal; a
        `run` or `calibrate` child logs nothing to MLflow (its caller does, if anyone)."""
        spec = replace(self.spec, overwrite=True, progress=False)
        no_mlflow = ["--no-mlflow"] if self.command in ("run", "calibrate") else []
        return [*spec.to_argv(), *no_mlflow, *self.command_args]

    def argv(self) -> list[str]:
        """The child's command line: this interpreter, so the child runs the same install."""
        return [sys.executable, "-m", "harness.cli", self.command, *self.flags()]

    def describe(self) -> str:
        """The command as a user would type it."""
        return shlex.join(["mlperf-vllm", self.command, *self.flags()])


@dataclass(frozen=True)
class ChildOutcome:
    """How a child run ended. `result`: its result.json (None when it wrote none); `error`:
    one line saying why it failed, None when it completed."""

    child: ChildRun
    rc: int
    result: RunResult | None
    log: Path
    wall_s: float
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def timed_out(self) -> bool:
        return self.rc == EXIT_TIMEOUT

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.is_file() else ""


def run_in_child(child: ChildRun) -> ChildOutcome:
    """Run `child` to its end (or its time limit) and read its result. A result.json left in
    its output folder by an earlier attempt is removed first, so a child that writes none is
    never read as finished. KeyboardInterrupt (Ctrl-C, SIGTERM) ends the child's process
    group and is re-raised."""
    out = child.output
    out.mkdir(parents=True, exist_ok=True)
    result_path = out / RESULT_FILE
    result_path.unlink(missing_ok=True)
    cmd = child.argv()
    env = {**os.environ, **dict(child.env)}
    log_path = out / RUN_LOG
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        log.write("$ " + shlex.join(cmd) + "\n")
        if child.env:
            log.write("# env: " + " ".join(f"{k}={v}" for k, v in child.env) + "\n")
        log.flush()
        # Its own process group: a timeout or Ctrl-C / SIGTERM ends the engine's processes too.
        rc = run_child(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout_s=child.timeout_s
        )
        if rc == EXIT_TIMEOUT:
            log.write(f"\n{_timeout_line(child)}\n")
    wall_s = round(time.monotonic() - t0, 1)
    result = RunResult.read(result_path)
    error = None
    if rc == EXIT_TIMEOUT:
        error = _timeout_line(child)
    elif child.command != "run":  # calibrate: its exit status says it all
        error = failure_line(log_path.read_text(errors="replace")) if rc != 0 else None
    elif rc != 0 or result is None or result.status != "completed":
        log_text = log_path.read_text(errors="replace")
        error = failure_line(log_text, result.error if result is not None else None)
    return ChildOutcome(child, rc, result, log_path, wall_s, error)


def _timeout_line(child: ChildRun) -> str:
    limit = f"{child.timeout_s:g} s" if child.timeout_s is not None else ""
    return f"TimeoutError: the run ran past {child.timeout_flag} {limit}".rstrip()


def failure_line(log_text: str, result_error: str | None = None) -> str:
    """The most specific line on why a run failed: the engine's own words (e.g. the worker's
    `ValueError: No common block size for 7`), not the wrappers around them; else what the
    run recorded, else the CLI's one-line `error:` (bad input), else the log's last line."""
    found = exception_lines(log_text)
    cli_errors = [
        ln.strip().removeprefix("error: ")
        for ln in log_text.splitlines()
        if ln.strip().startswith("error: ")
    ]
    specific = first_cause(found)
    if specific:
        return specific
    if result_error:
        return result_error
    if cli_errors:
        return cli_errors[-1]
    if found:
        return found[-1]
    tail = [
        ln.strip()
        for ln in log_text.splitlines()
        if ln.strip() and not ln.startswith(("$ ", "# env: "))  # the door's header
    ]
    return tail[-1][:500] if tail else "the run ended without output"
