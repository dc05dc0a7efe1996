"""What a busy loop at each priority costs a process that sleeps and wakes on the same core
(Linux): why `make test`'s spare worker takes a session of its own, an autogroup at nice 19 and
SCHED_IDLE (tests/conftest.py `at_idle_priority`).

The sleeper sleeps 1 ms and computes a little, ROUNDS times, pinned to one core, alone or beside a
busy loop pinned to the same core; it runs in the loop's session (one autogroup) or in a session
of its own (another autogroup, as Ray's nodes and a sweep's children are). Printed per case: the
sleep's overshoot at the median and p99, and the share of a core the sleeper got; the p99 is
also given as a ratio to the sleeper's alone.

    python bench/idle_priority.py [--rounds 1500] [--core 0]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from pathlib import Path

CASES = ("alone", "nice 0", "SCHED_IDLE", "SCHED_IDLE + own session at nice 19")


def busy_loop(case: str, core: int, seconds: float) -> None:
    os.sched_setaffinity(0, {core})
    if case.startswith("SCHED_IDLE"):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    if case.endswith("nice 19"):
        os.setsid()
        Path("/proc/self/autogroup").write_text("19")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def sleeper(own_session: bool, core: int, rounds: int, out) -> None:
    if own_session:
        os.setsid()
    os.sched_setaffinity(0, {core})
    over = []
    cpu, wall = time.process_time(), time.monotonic()
    for _ in range(rounds):
        t = time.perf_counter()
        time.sleep(0.001)
        over.append(time.perf_counter() - t - 0.001)
        sum(range(20000))  # ~0.1-0.5 ms of work between sleeps
    over.sort()
    share = (time.process_time() - cpu) / (time.monotonic() - wall)
    out.put((over[len(over) // 2] * 1e6, over[int(len(over) * 0.99)] * 1e6, share))


def measure(case: str, own_session: bool, core: int, rounds: int) -> tuple[float, float, float]:
    loop = None
    if case != "alone":
        loop = mp.Process(target=busy_loop, args=(case, core, 120.0))
        loop.start()
        time.sleep(0.2)
    out: mp.Queue = mp.Queue()
    proc = mp.Process(target=sleeper, args=(own_session, core, rounds, out))
    proc.start()
    result = out.get(timeout=300)
    proc.join()
    if loop is not None:
        loop.terminate()
        loop.join()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1500)
    ap.add_argument("--core", type=int, default=0)
    args = ap.parse_args()
    print(
        f"{'busy loop':38} {'sleeper':16} {'p50 us':>8} {'p99 us':>8} {'p99/alone':>9} {'share':>6}"
    )
    for own_session in (False, True):
        base = None
        for case in CASES:
            p50, p99, share = measure(case, own_session, args.core, args.rounds)
            base = base or p99
            where = "own session" if own_session else "same session"
            print(f"{case:38} {where:16} {p50:8.0f} {p99:8.0f} {p99 / base:9.2f} {share:6.2f}")


if __name__ == "__main__":
    main()
