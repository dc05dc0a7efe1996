"""A LoadGen test's progress bar: completed samples and live output tokens/s."""

from __future__ import annotations

import functools
import sys
import time
from typing import Any

from sut.stats import SUTStats

TTY_INTERVAL_S = 0.5  # a terminal redraws its bar in place
# A pipe or a log file gets each redraw as a line of its own (a 10-minute test at two a second
# would be 1,200 lines): one every 10 s there.
PIPE_INTERVAL_S = 10.0


def _on_a_terminal() -> bool:
    """Whether the bar's stream (stderr, as it is when a test begins) is a terminal."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without a file, or closed
        return False


@functools.cache
def _bar_type() -> Any:
    """tqdm's bar without its monitor thread, which outlives every bar (it only hurries a bar
    that is slow to redraw; ours redraw on each completion)."""
    from tqdm import tqdm

    class Bar(tqdm):
        monitor_interval = 0

    return Bar


class Progress:
    """Completed samples and live output tokens/s on a tqdm bar, refreshed at most 2x a second
    on a terminal, every 10 s into a pipe or a file.

    One bar per LoadGen test (`begin`), named after it ("Server performance", "Server
    accuracy"), its count from 0: a run of several tests on one engine does not add them up.
    Its total is what the harness planned for the test before it started, where it has a plan
    (a Server test's queries arrive over minutes, so "issued so far" would sit near 100% all
    run); without one, and past it (a plan is an estimate), the samples issued so far. A test
    nobody announced gets an unnamed bar at its first issue."""

    def __init__(self, enabled: bool, desc: str):
        self._enabled = enabled
        self._desc = desc
        self._bar: Any = None
        self._planned: int | None = None
        self._issued = 0
        self._last = 0.0
        self._tty = False

    def begin(self, label: str | None = None, planned: int | None = None) -> None:
        """A new bar for the next test; `planned`: the samples it will issue, if known."""
        self.end()
        self._planned = planned if planned and planned > 0 else None
        self._issued = 0
        if self._enabled:
            desc = f"{self._desc} {label}" if label else self._desc
            self._tty = _on_a_terminal()
            self._bar = _bar_type()(
                total=self._planned or 0,
                unit="sample",
                desc=desc,
                mininterval=TTY_INTERVAL_S if self._tty else PIPE_INTERVAL_S,
                smoothing=0.1,
            )

    def add_total(self, n: int) -> None:
        """`n` more samples issued."""
        if not self._enabled:
            return
        if self._bar is None:
            self.begin()
        self._issued += n
        bar = self._bar
        if bar is not None and self._issued > (self._planned or 0):
            bar.total = self._issued
            if self._tty:  # into a pipe, the next timed redraw shows it
                bar.refresh()

    def update(self, n: int, stats: SUTStats) -> None:
        # The SUT's thread reports the test's last completions while the runner, whose test
        # just ended, may be closing the bar: read it once (a closed tqdm bar ignores updates).
        bar = self._bar
        if bar is None or n == 0:
            return
        bar.update(n)
        now = time.monotonic()
        if now - self._last >= 0.5:
            self._last = now
            bar.set_postfix_str(f"{stats.tokens_per_second:,.0f} tok/s", refresh=False)

    def end(self) -> None:
        """The test ended: its bar's last state stays on its own line, before whatever the
        caller prints next (an open bar would be redrawn over it)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def close(self) -> None:
        """The SUT stopped: no bar from here on."""
        self.end()
        self._enabled = False
