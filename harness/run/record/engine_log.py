"""What vLLM prints while its engine starts, held back until the start is decided.

vLLM's engine core and workers are processes of their own: when an engine start fails, each
prints its traceback (vLLM's logger to stdout, a dying process's to stderr), and the exception
that reaches us only says "Engine core initialization failed. See root cause above". So for the
start, this process's stdout and stderr (which every process it starts inherits) go through
pipes, each read by a thread:

- the start succeeds: what was held goes to the run's `engine.log` (or, asked to be verbose,
  to the real stream), and everything after follows it there (the engine's processes keep the
  pipes for their lives; the threads forward until those processes end), so the terminal
  shows the run's own lines, not vLLM's ~50 lines of start-up and warnings;
- the start fails or is interrupted: nothing held reaches the terminal. The whole text is kept
  for the run's folder (`engine_start.log`), and the root cause, the first exception line that
  is not one of vLLM's "see above" wrappers, becomes the one error line.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

ENGINE_START_LOG = "engine_start.log"
ENGINE_LOG = "engine.log"  # vLLM's processes' output over a run that started (not --verbose)
MAX_HELD = 4 << 20  # bytes held while the engine starts (a start prints ~100 KB)
TAIL = 64 << 10  # bytes of the engine's later output kept, for the reason it dies mid-run
RENDEZVOUS_READ_S = 2.0  # after a failed start: how long its output is read to its end

# "(Worker pid=1) ERROR 11-25 17:30:06 [file.py:953] RuntimeError: text" -> "RuntimeError: text"
_PREFIX = re.compile(r"^\([^)]*pid=\d+\)\s+(?:[A-Z]+\s+\d\d-\d\d [\d:]+\s+\[[^\]]*\]\s+)?")
_EXC = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Failure|Interrupt)):\s*(.+)$")
# Wrappers that point at a root cause printed earlier, not the cause itself.
_WRAPPERS = (
    "engine core initialization failed",
    "please check the stack trace above",
    "see root cause above",
    "see stack trace for root cause",
    "initialization failed due to an exception in a background process",
)


def exception_lines(text: str) -> list[str]:
    """Every `Name: message` line of a log, vLLM's process prefixes stripped, names short."""
    found = []
    for raw in text.splitlines():
        m = _EXC.match(_PREFIX.sub("", raw.strip()))
        if m:
            found.append(f"{m.group(1).rsplit('.', 1)[-1]}: {' '.join(m.group(2).split())}")
    return found


def is_wrapper(line: str) -> bool:
    return any(w in line.lower() for w in _WRAPPERS)


# vLLM's executors wrap a worker's exception in a "see above" wrapper that quotes it:
# "RuntimeError: Worker failed with error 'CUDA out of memory. ...', please check the stack
# trace above for the root cause" -- the quoted part is the cause
_QUOTED = re.compile(r"failed with error '(.+)'(?:,[^']*)?$")


def quoted_cause(line: str) -> str | None:
    """The cause a wrapper line quotes (`Worker failed with error '...'`), if it quotes one."""
    m = _QUOTED.search(line.strip())
    return " ".join(m.group(1).split()) if m else None


# "(EngineCore pid=7) ERROR 11-25 20:22:12 [ray_executor_v2.py:522] RayWorkerProc rank=[1] died"
_ERROR_LOG = re.compile(r"^\([^)]*pid=\d+\)\s+ERROR\s+\d\d-\d\d [\d:]+\s+\[[^\]]*\]\s(.*)$")
# vLLM's ERROR lines that are no reason: a traceback's lines, its input dump, the wrappers
_NOT_A_REASON = ("Traceback", "File ", "Dumping ", "EngineCore encountered a fatal error")


def first_error(text: str, limit: int = 300) -> str | None:
    """The first message vLLM's processes logged at ERROR level that says what happened (the
    executor's `RayWorkerProc rank=[1] died unexpectedly`), not a traceback line or a
    wrapper; the engine that died mid-run reports only `EngineDeadError` to its front end."""
    for raw in text.splitlines():
        m = _ERROR_LOG.match(raw.strip())
        if not m:
            continue
        msg = m.group(1)
        if not msg.strip() or msg[0].isspace() or msg.lstrip().startswith(("^", "~")):
            continue
        if msg.startswith(_NOT_A_REASON):
            continue
        if is_wrapper(msg):
            msg = quoted_cause(msg) or ""
            if not msg:
                continue
        msg = " ".join(msg.split())
        return msg if len(msg) <= limit else msg[: limit - 3] + "..."
    return None


def root_cause(text: str, limit: int = 400) -> str | None:
    """The first exception line of a log that is not a wrapper of another (the worker's
    `ValueError: No common block size for 7`, not "see root cause above")."""
    line = first_cause(exception_lines(text))
    if line is None or len(line) <= limit:
        return line
    return line[: limit - 3] + "..."


def first_cause(lines: list[str]) -> str | None:
    """The first of `exception_lines` that is not a wrapper, or the cause a wrapper quotes."""
    for line in lines:
        if not is_wrapper(line):
            return line
        quoted = quoted_cause(line)
        if quoted:
            return quoted
    return None


# What vLLM's executors log when a worker process (or a Ray worker actor, with its node) is
# gone, from their monitor thread: "RayWorkerProc rank=[2] died unexpectedly, shutting down
# executor." (Ray), "Worker proc VllmWorker-1 died unexpectedly, shutting down executor."
# (multiprocessing). The engine core may not hear of it for minutes: with pipeline parallel on
# GPUs it waited 300 s in its step's RPC (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS) before it died.
# A worker may notice first that a peer is gone: Gloo's "Connection closed by peer [ip]:port"
# in the exception a worker logs (seen first on a Ray node's loss, before the executor's line).
FATAL = re.compile(
    r"ERROR[^\n]*?\]\s+([^\n]*died unexpectedly, shutting down executor\.?)"
    r"|ERROR[^\n]*?\]\s+(\w*Error: [^\n]*Connection closed by peer[^\n]*)"
)


_Text = TypeVar("_Text", str, bytes)


def whole_lines(carry: _Text, chunk: _Text, newline: _Text) -> tuple[_Text, _Text]:
    """A stream read in chunks: (the whole lines that `carry + chunk` completes, the partial
    line to carry into the next read, its last 4 KB at most)."""
    text = carry + chunk
    cut = text.rfind(newline) + 1
    return text[:cut], text[cut:][-4096:]


class FatalWatch:
    """The first line of FATAL in a stream read in chunks (lines may be split across them)."""

    def __init__(self) -> None:
        self.line: str | None = None
        self._carry = ""

    def feed(self, chunk: str) -> None:
        if self.line is not None:
            return
        lines, self._carry = whole_lines(self._carry, chunk, "\n")
        m = FATAL.search(lines)
        if m:
            self.line = " ".join((m.group(1) or m.group(2)).split())


# The file vLLM's executors rendezvous through where no TCP store is needed (one engine on one
# node): "file://TEMP/vllm_dist_<uuid hex>" in the temp folder of the engine's process, named by
# each worker as it joins ("distributed_init_method=file://..." at INFO). Not every end removes
# it: engines killed mid-run, starts refused by the engine, and some clean ends (a sweep's runs,
# engines behind front ends of their own) left one each; 181 in this machine's /tmp after a day
# of test suites. Removed here once the engine's processes are gone.
RENDEZVOUS = re.compile(
    rb"distributed_init_method=file://(/[^\s]*/vllm_dist_[0-9a-f]{32})(?![\w.])"
)


class RendezvousFiles:
    """The rendezvous files named in a stream read in chunks (lines may be split across them);
    `remove()` once the engine's processes are gone."""

    def __init__(self) -> None:
        self.paths: set[str] = set()
        self._carry = b""
        self._lock = threading.Lock()

    def feed(self, chunk: bytes) -> None:
        with self._lock:
            lines, self._carry = whole_lines(self._carry, chunk, b"\n")
            self.paths.update(os.fsdecode(m.group(1)) for m in RENDEZVOUS.finditer(lines))

    def remove(self) -> list[str]:
        """Unlink the named files still there; the ones removed."""
        with self._lock:
            paths, self.paths = sorted(self.paths), set()
        removed = []
        for path in paths:
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed.append(path)
        return removed


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


class _Held:
    """One file descriptor (1 or 2) through a pipe, held, passed or dropped."""

    def __init__(self, fd: int, rendezvous: RendezvousFiles) -> None:
        self.fd, self.real = fd, -1
        self.rendezvous = rendezvous
        self.held: list[bytes] = []
        self.size = 0
        self.tail: collections.deque[bytes] = collections.deque()  # once passing: the latest
        self.tail_size = 0
        self.state = "hold"  # then "pass" (started) or "drop" (failed)
        self.sink = -1  # once passing: a log file's descriptor instead of the real stream
        self.watch = FatalWatch()  # once passing: a worker's death, as vLLM logs it
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        try:
            real = os.dup(fd)
            r, w = os.pipe()
        except OSError:  # nothing to take over: nothing is held back
            self.state = "pass"
            return
        self.real = real
        os.dup2(w, fd)
        os.close(w)
        self.thread = threading.Thread(
            target=self._pump, args=(r,), name=f"engine-fd{fd}", daemon=True
        )
        self.thread.start()

    def _pump(self, r: int) -> None:
        while True:
            try:
                chunk = os.read(r, 65536)
            except OSError:
                return
            if not chunk:
                os.close(r)
                return
            self.rendezvous.feed(chunk)
            with self.lock:
                state = self.state
                if state == "hold" and self.size < MAX_HELD:
                    self.held.append(chunk)
                    self.size += len(chunk)
            if state == "pass":
                with contextlib.suppress(OSError):
                    os.write(self.sink if self.sink >= 0 else self.real, chunk)
                self.watch.feed(chunk.decode("utf-8", "replace"))
                with self.lock:
                    self.tail.append(chunk)
                    self.tail_size += len(chunk)
                    while self.tail_size > TAIL and len(self.tail) > 1:
                        self.tail_size -= len(self.tail.popleft())

    def recent(self) -> bytes:
        with self.lock:
            return b"".join(self.tail)

    def end(self, state: str) -> bytes:
        if self.real >= 0:
            os.dup2(self.real, self.fd)
        with self.lock:
            held, self.held, self.state = self.held, [], state
            if state == "pass":
                for chunk in held:
                    with contextlib.suppress(OSError):
                        os.write(self.sink if self.sink >= 0 else self.real, chunk)
        return b"".join(held)

    def say(self, text: str) -> None:
        """A line of ours to the real stream now, past what is held."""
        with contextlib.suppress(OSError):
            os.write(self.real if self.real >= 0 else self.fd, text.encode())


@contextlib.contextmanager
def _stderr_to(path: str | os.PathLike[str] | None):
    """File descriptor 2 appended to `path` for the block (processes started in it keep it)."""
    if path is None:
        yield
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = os.dup(2)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


class EngineStartLog:
    """stdout and stderr through pipes while the engine starts (see the module doc); vLLM's
    logger writes to stdout, a dying process's traceback goes to stderr."""

    def __init__(self, held: list[_Held], rendezvous: RendezvousFiles) -> None:
        self.held = held
        self.sink = -1
        self.rendezvous = rendezvous  # what the pumps of `held` found

    @classmethod
    def begin(cls, tracker_log: str | os.PathLike[str] | None = None) -> EngineStartLog:
        _flush()
        # Python's resource tracker, once started, lives as long as this interpreter: started
        # here, before the redirection, it keeps the real stdout, not our pipes. Its stderr goes
        # to `tracker_log` where given: vLLM's engine core registers its queues' shared memory
        # with it, and an engine stopped before it unlinked them (Ctrl-C, a failure) had the
        # tracker warn about "leaked shared_memory objects" on the terminal after the run's
        # last line; the tracker still unlinks them, and says so in the log.
        with contextlib.suppress(Exception):
            from multiprocessing import resource_tracker

            with _stderr_to(tracker_log):
                resource_tracker.ensure_running()
        rendezvous = RendezvousFiles()
        return cls([_Held(1, rendezvous), _Held(2, rendezvous)], rendezvous)

    def close(self, timeout_s: float = 3.0) -> None:
        """After the engine stopped: its processes closed their ends of the pipes, so the
        threads forward what is left and end (waited for up to `timeout_s`); the rendezvous
        files its workers named and left are removed."""
        deadline = time.monotonic() + timeout_s
        for h in self.held:
            if h.thread is not None:
                h.thread.join(max(0.0, deadline - time.monotonic()))
        self.rendezvous.remove()
        if self.sink >= 0 and all(h.thread is None or not h.thread.is_alive() for h in self.held):
            with contextlib.suppress(OSError):
                os.close(self.sink)
            self.sink = -1

    def say(self, text: str) -> None:
        """One line of ours on the terminal while the start's output is held back."""
        self.held[0].say(text.rstrip("\n") + "\n")

    def started(self, log_path: str | os.PathLike[str] | None = None) -> None:
        """The engine is up: what was held goes out now, the rest as it comes; into
        `log_path` (appended) where given, else to the real streams."""
        _flush()
        if log_path is not None:
            try:
                self.sink = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            except OSError:
                self.sink = -1  # the terminal, then: nothing is lost
        for h in self.held:
            h.sink = self.sink
            h.end("pass")

    def fatal(self) -> str | None:
        """What vLLM's executor logged when one of its workers died mid-run (FATAL), once it
        did: the run's watchdog ends the test on it instead of waiting for the engine core."""
        return next((h.watch.line for h in self.held if h.watch.line), None)

    def recent(self) -> str:
        """The engine's processes' latest output since the start (up to TAIL bytes each of
        stdout's and stderr's), already shown as it came."""
        return "".join(h.recent().decode("utf-8", "replace") for h in self.held)

    def failed(self) -> str:
        """The start failed: stdout and stderr are ours again; returns what was printed
        meanwhile (stdout's, then stderr's), none of it shown. Engine processes still dying
        may write more: that is dropped."""
        _flush()
        printed = "".join(h.end("drop").decode("utf-8", "replace") for h in self.held)
        # the start's processes were reaped before the failure came: what they wrote last is
        # read to the end (the pipes close with them) for the rendezvous files they named
        self.close(RENDEZVOUS_READ_S)
        return printed


# vLLM's loggers that speak when vLLM is imported, before any engine starts (the run's checks
# import it): on a CPU build, Triton's "installed, but doesn't include CPU backend. Disabling
# Triton." at every command. Held until the run's engine.log exists (route_vllm_logger).
IMPORT_LOGGERS = ("vllm.triton_utils.importing",)
_held_records: list[Any] = []


class _HoldRecords:
    """A logging filter that keeps a logger's records for later instead of letting them out."""

    def filter(self, record: Any) -> bool:
        _held_records.append(record)
        return False


_HOLDER = _HoldRecords()


def hold_vllm_import_lines() -> None:
    """Keep vLLM's import-time lines (IMPORT_LOGGERS) off the terminal: they go to the run's
    engine.log with the rest of vLLM's output once the engine started. Call before vLLM is
    imported; `--verbose` runs do not call it."""
    import logging

    for name in IMPORT_LOGGERS:
        logger = logging.getLogger(name)
        if _HOLDER not in logger.filters:
            logger.addFilter(_HOLDER)


def route_vllm_logger(path: str | os.PathLike[str]) -> Callable[[], None]:
    """vLLM's logger in this process (its front end's lines: shutdown steps, deprecations)
    into `path` as well, instead of the terminal; returns what puts it back. The lines held
    since vLLM's import (hold_vllm_import_lines) are written there first."""
    import logging

    swapped: list[tuple[logging.StreamHandler, Any]] = []
    try:
        stream = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed by the returned undo)
    except OSError:
        return lambda: None
    held, _held_records[:] = list(_held_records), []
    try:
        for record in held:
            stream.write(f"{record.levelname} {record.name}: {record.getMessage()}\n")
        stream.flush()
    except OSError:  # a full file system: the terminal keeps vLLM's lines
        with contextlib.suppress(OSError):
            stream.close()
        return lambda: None
    for handler in logging.getLogger("vllm").handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(
            handler, logging.FileHandler
        ):
            swapped.append((handler, handler.setStream(stream)))

    def undo() -> None:
        # setStream flushes the file first: on a file system that filled since, that raises,
        # and the handler would keep writing into the closed file
        for handler, old in swapped:
            try:
                handler.setStream(old)
            except OSError:
                with handler.lock:  # type: ignore[union-attr]
                    handler.stream = old
        with contextlib.suppress(OSError):
            stream.close()

    return undo
