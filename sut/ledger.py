"""The ledger of issued samples not yet answered: the one place a sample is answered to LoadGen,
and the one count of samples in flight (`in_flight`, `peak_in_flight`), which the SUTs read.

LoadGen waits for every issued sample, so a sample never answered hangs the test, and a sample
answered twice makes LoadGen touch a freed record. Every path (normal completion, a failing
engine, a failing report, the stall watchdog, shutdown) goes through `Ledger.complete` /
`Ledger.fail_all`, which answer only what is still outstanding, under one lock.

An exception raised by LoadGen's Python binding comes from converting the arguments, before
the C++ side has seen them, so a failed report is answered again, once, with empty payloads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from sut import responses

log = logging.getLogger(__name__)


Pairs = Sequence[tuple[int, Sequence[int]]]


class Ledger:
    """Issued samples not yet answered; answers each exactly once.

    `streaming`: LoadGen wants a FirstTokenComplete before each QuerySamplesComplete
    (Server / Interactive / SingleStream). `on_error` receives any exception raised while
    reporting; the samples concerned are still answered (empty) so LoadGen can finish.
    """

    def __init__(self, streaming: bool, on_error: Callable[[BaseException], None]):
        self.streaming = streaming
        self._on_error = on_error
        self._lock = threading.RLock()
        self._open: dict[int, float] = {}  # response id -> issue time
        self._peak = 0  # the most samples in flight at one moment since mark_peak()
        self._first_sent: set[int] = set()
        self.last_progress_s = time.monotonic()
        self.late_answers_dropped = 0  # answers for samples already answered (after a failure)

    # bookkeeping -----------------------------------------------------------------------------
    def issue(self, response_ids: Sequence[int]) -> None:
        now = time.monotonic()
        with self._lock:
            if not self._open:
                self.last_progress_s = now  # the stall clock starts with the first sample
            for rid in response_ids:
                self._open[rid] = now
            self._peak = max(self._peak, len(self._open))

    def progress(self) -> None:
        """The engine did work (a step returned, a token arrived)."""
        self.last_progress_s = time.monotonic()

    @property
    def in_flight(self) -> int:
        return len(self._open)

    @property
    def peak_in_flight(self) -> int:
        """The most samples in flight at one moment since `mark_peak()`."""
        return self._peak

    def mark_peak(self) -> None:
        """A new test: its peak starts from what is in flight now."""
        with self._lock:
            self._peak = len(self._open)

    def is_open(self, rid: int) -> bool:
        return rid in self._open

    def oldest_s(self) -> float:
        """Age of the oldest sample still in flight."""
        with self._lock:
            return time.monotonic() - min(self._open.values(), default=time.monotonic())

    def stalled_for(self) -> float:
        """Seconds without progress while samples are in flight (0 when none are)."""
        if not self._open:
            return 0.0
        return time.monotonic() - self.last_progress_s

    # reporting -------------------------------------------------------------------------------
    def first_tokens(self, pairs: Pairs) -> None:
        with self._lock:
            todo = [(r, t) for r, t in pairs if r in self._open and r not in self._first_sent]
            if todo:
                self._first_sent.update(r for r, _ in todo)
                self._report(todo, first_token=True)

    def complete(self, pairs: Pairs) -> tuple[int, int]:
        """Answer the still-outstanding samples among `pairs`: (samples, tokens) reported."""
        with self._lock:
            todo = []
            for rid, tokens in pairs:
                if self._open.pop(rid, None) is None:
                    self.late_answers_dropped += 1
                    continue
                todo.append((rid, tokens))
            if not todo:
                return 0, 0
            if self.streaming:
                missing = [(r, tuple(t[:1])) for r, t in todo if r not in self._first_sent]
                if missing:
                    self._report(missing, first_token=True)
                self._first_sent.difference_update(r for r, _ in todo)
            reported = self._report(todo, first_token=False)
            self.last_progress_s = time.monotonic()
            return len(todo), reported

    def abandon(self) -> int:
        """Forget every outstanding sample without answering it: LoadGen's test is being
        abandoned (an interrupt; the process exits next), and answering a million samples
        would only delay that by seconds. Returns how many were forgotten."""
        with self._lock:
            n = len(self._open)
            self._open.clear()
            self._first_sent.clear()
            return n

    def fail_all(self) -> int:
        """Answer every outstanding sample with an empty payload; returns how many."""
        with self._lock:
            rids = list(self._open)
            return self.complete([(rid, ()) for rid in rids])[0]

    def _report(self, pairs: Pairs, *, first_token: bool) -> int:
        """Report to LoadGen; returns the number of tokens reported."""
        try:
            if first_token:
                responses.complete_first_tokens(pairs)
                return 0
            return responses.complete_samples(pairs)
        except Exception as exc:  # a report of ours or LoadGen's binding failed
            try:  # what LoadGen did not take is answered once more, empty
                responses.answer_empty([rid for rid, _ in pairs], first_token=first_token)
            except Exception as again:
                log.error("LoadGen refused even empty answers: %s", again)
            self._on_error(exc)
            return 0
