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
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # bench.* and harness.* when run as a script

from bench.host_profile_rules import (  # noqa: E402
    CATEGORY_NAMES,
    HOST_PATH_ROLES,
    IDLE,
    OTHER,
    Load,
    ProcessProfile,
    UsageError,
    analyse,
    parse_raw,
    report,
)

PROFILE_FILE = "profile.txt"
REPORT_FILE = "host_profile.json"
PY_SPY_LOG = "py-spy.log"
SCHEMA_VERSION = 1


# ---------------------------------------------------------------------------------------------
# The load a window saw


def load_from_result(run_dir: Path, window_s: float) -> Load | None:
    """The run's completed rates times the window (None when the run wrote no performance)."""
    from harness.run.record.result import RESULT_FILE, RunResult

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


# ---------------------------------------------------------------------------------------------
# Printing


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
