"""The progress bar of a run's tests, without an engine: one bar per test, named after it and
counting from 0, against the total the run planned before the test (a Server test's queries
arrive over minutes: "issued so far" would read ~100% all run), and the planned totals
themselves. The bar of a real run is read in test_server_e2e."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import sys
import termios
import time

from harness.run.setup.settings import IssuePlan, planned_samples
from sut.progress import Progress
from sut.stats import SUTStats

BAR = re.compile(r"([A-Za-z0-9 ]+):\s+\d+%\|[^|]*\|\s*(\d+)/(\d+)")


def _states(err: str) -> list[tuple[str, int, int]]:
    """(label, count, total) of every state of the bars tqdm drew."""
    return [(m[1].strip(), int(m[2]), int(m[3])) for m in BAR.finditer(err)]


def _issue(bar: Progress, n: int, done: int, stats: SUTStats) -> None:
    bar.add_total(n)
    stats.completed += done
    bar.update(done, stats)


def test_a_planned_test_counts_completions_against_its_plan(capsys):
    bar = Progress(True, "Server")
    bar.begin("performance", 600)
    stats = SUTStats()
    for _ in range(30):  # queries arrive a few at a time; completions trail them
        _issue(bar, 20, 10, stats)
    bar.close()
    states = _states(capsys.readouterr().err)
    assert states[0] == ("Server performance", 0, 600)
    assert {total for _, _, total in states} == {600}  # never "issued so far"
    assert states[-1] == ("Server performance", 300, 600)


def test_a_plan_is_an_estimate_the_total_follows_more_issued(capsys):
    bar = Progress(True, "Server")
    bar.begin("performance", 10)
    stats = SUTStats()
    _issue(bar, 8, 8, stats)
    _issue(bar, 4, 4, stats)  # LoadGen drew past the plan: the bar must not pass 100%
    bar.close()
    assert _states(capsys.readouterr().err)[-1] == ("Server performance", 12, 12)


def test_each_test_of_a_run_gets_its_own_bar_from_zero(capsys):
    bar = Progress(True, "Offline")
    stats = SUTStats()
    bar.begin("performance", 96)
    _issue(bar, 96, 96, stats)
    bar.begin("accuracy", 24)
    stats = SUTStats()
    _issue(bar, 24, 24, stats)
    bar.begin("TEST06")  # no plan: against what was issued so far
    _issue(bar, 10, 4, SUTStats())
    bar.close()
    states = _states(capsys.readouterr().err)
    assert ("Offline performance", 96, 96) in states
    assert ("Offline accuracy", 0, 24) in states and ("Offline accuracy", 24, 24) in states
    assert ("Offline TEST06", 4, 10) in states
    assert not [s for s in states if s[1] > s[2] or s[2] == 192]  # no 96/192


def test_an_ended_test_leaves_its_last_state_on_a_line_of_its_own(capsys):
    """The runner prints its verdicts right after a test: they must not land on the bar's line
    (which an open bar would also redraw over them)."""
    bar = Progress(True, "Server")
    bar.begin("performance", 8)
    _issue(bar, 8, 6, SUTStats())
    bar.end()
    err = capsys.readouterr().err
    assert err.endswith("\n") and _states(err.rsplit("\r", 1)[-1]) == [("Server performance", 6, 8)]
    bar.update(2, SUTStats())  # the SUT's thread, late, on the bar just ended: ignored
    assert capsys.readouterr().err == ""
    _issue(bar, 2, 2, SUTStats())  # a test after it without its own begin: a bar of its own
    bar.close()
    assert _states(capsys.readouterr().err)[-1] == ("Server", 2, 2)


def test_an_unannounced_test_still_gets_a_bar_and_a_closed_one_stays_closed(capsys):
    bar = Progress(True, "Server")
    _issue(bar, 5, 5, SUTStats())  # a caller that never names its tests (bench/)
    bar.close()
    bar.add_total(5)  # after the SUT stopped: nothing more is drawn
    bar.update(5, SUTStats())
    bar.begin("later", 5)
    states = _states(capsys.readouterr().err)
    assert states[-1] == ("Server", 5, 5) and all(s[0] == "Server" for s in states)


def test_a_disabled_bar_draws_nothing(capsys):
    bar = Progress(False, "Server")
    bar.begin("performance", 600)
    _issue(bar, 5, 5, SUTStats())
    bar.close()
    assert capsys.readouterr().err == ""


def test_planned_samples_per_test():
    server = IssuePlan("Server", 600, 600, 24, 25, 8.0, 75.0)
    offline = IssuePlan("Offline", 1, 96, 24, 4, 10.0, 9.6)
    assert planned_samples("performance", server, 24) == 600
    assert planned_samples("performance", offline, 24) == 96
    assert planned_samples("accuracy", server, 24) == 24  # every sample once
    assert planned_samples("performance", None, 24) is None  # SingleStream: no plan
    assert planned_samples("TEST06", server, 24) is None


def _draw_for(bar: Progress, seconds: float) -> None:
    """A test's completions spread over `seconds`, one every 0.1 s."""
    bar.begin("performance", 100)
    stats = SUTStats()
    for _ in range(int(seconds / 0.1)):
        _issue(bar, 1, 1, stats)
        time.sleep(0.1)
    bar.end()


def test_into_a_pipe_the_bar_draws_a_line_every_ten_seconds_not_two_a_second(capsys):
    _draw_for(Progress(True, "Server"), 1.5)
    states = _states(capsys.readouterr().err)  # pytest's capture: not a terminal
    assert states == [("Server performance", 0, 100), ("Server performance", 15, 100)]


def test_on_a_terminal_the_bar_redraws_twice_a_second(monkeypatch):
    leader, follower = pty.openpty()
    # a terminal 100 columns wide (a new pseudo-terminal has none: tqdm would draw nothing)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    drawn = b""
    with os.fdopen(follower, "w") as tty:
        monkeypatch.setattr(sys, "stderr", tty)
        _draw_for(Progress(True, "Server"), 1.5)
        tty.flush()
        while select.select([leader], [], [], 0.2)[0]:  # read while the terminal is open
            drawn += os.read(leader, 65536)
    os.close(leader)
    states = _states(drawn.decode())
    assert len(states) >= 4 and states[-1] == ("Server performance", 15, 100), states
