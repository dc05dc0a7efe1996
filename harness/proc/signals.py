"""SIGINT and SIGTERM end any command the same way: the first one raises KeyboardInterrupt in
the main thread (so the run shuts its engine down, keeps its LoadGen logs, records
`interrupted`, and MLflow says KILLED); a second one kills every process of ours at once.

A job scheduler sends SIGTERM, a terminal Ctrl-C sends SIGINT: to the whole process group
from a terminal, often to the main process only from a scheduler. Children that `sweep` and
`calibrate` start run in their own process group (harness.proc.children) and get the signal
forwarded there.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

_state = {"signals": 0, "held": 0, "pending": 0}


def _kill_everything_now(signum: int) -> None:
    """Second signal: the user wants out now. SIGKILL every descendant, exit at once."""
    with contextlib.suppress(Exception):
        import psutil

        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()
    with contextlib.suppress(Exception):
        sys.stderr.write(f"\nsignal {signum} again: killed every process of the run\n")
        sys.stderr.flush()
    os._exit(128 + signum)


def _handler(signum: int, frame: Any) -> None:
    _state["signals"] += 1
    if _state["signals"] > 1:
        _kill_everything_now(signum)
    if _state["held"]:
        _state["pending"] = signum  # raised when the commit in progress is done
        return
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


@contextlib.contextmanager
def held() -> Iterator[None]:
    """A few renames that must happen together (a result file and its companion, an old tree
    swapped for a new one): a first signal inside waits until the block is done, then raises
    as usual. A second signal still kills at once."""
    _state["held"] += 1
    try:
        yield
    finally:
        _state["held"] -= 1
        signum = _state["pending"]
        if signum and not _state["held"]:
            _state["pending"] = 0
            raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def install() -> None:
    """Take SIGINT and SIGTERM in this (main) thread for the rest of the process. A SIGINT
    that the parent shell set to be ignored (a background job) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        return
    _state["signals"] = 0
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _handler)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _handler)


@contextlib.contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """`install()` for the duration of a block, when no handler of ours is there yet."""
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    install()
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
