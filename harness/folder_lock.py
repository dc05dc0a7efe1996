"""One writer per output folder.

Every command that writes an output folder (run, calibrate, sweep, package, compliance test06,
evaluate, demo) holds that folder's lock for its whole life. A second command aimed at the same
folder is refused at once with the holder's pid and command, before it writes anything.

The lock is the operating system's (a POSIX record lock, `fcntl.lockf`, on `FOLDER/LOCK_NAME`),
not the file's presence: it goes with the process that holds it, however that process ends
(SIGKILL, a power cut). Record locks belong to the process alone: the engine processes a run
forks or spawns never inherit them, so a run that is killed is no longer a holder even while
its orphaned engine is being reaped.

The file also records who holds it (pid, command, start time). A command that ends normally
removes the file; one that dies leaves it, and the next command to take the folder says it
found the remains of an interrupted command, and whose.

Rules that keep the lock sound:
- the file is read and written only through the one descriptor that holds the lock (closing any
  descriptor of the file would drop a record lock);
- after locking, the path must still name the locked file (a holder that was finishing may have
  removed it in between); otherwise the lock is taken again on the new file;
- a holder removes the file only while it still names the file it locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import UsageError
from harness.files import check_output_dir

LOCK_NAME = ".mlperf-vllm.lock"


@dataclass
class FolderLock:
    folder: Path
    fd: int
    created: list[Path] = field(default_factory=list)  # folders this lock made (removed if empty)
    remains: str | None = None  # what an interrupted holder left, said once taken

    def release(self) -> None:
        if self.fd < 0:
            return
        path = self.folder / LOCK_NAME
        with contextlib.suppress(OSError):
            if _same_file(self.fd, path):
                path.unlink()
        os.close(self.fd)
        self.fd = -1
        for folder in reversed(self.created):  # a refused or failed command leaves no empty folder
            with contextlib.suppress(OSError):
                folder.rmdir()


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _read(fd: int) -> dict:
    try:
        raw = os.pread(fd, 64 * 1024, 0)
        doc = json.loads(raw.decode("utf-8")) if raw.strip() else {}
    except (OSError, ValueError):
        return {"unreadable": True}
    return doc if isinstance(doc, dict) else {"unreadable": True}


def _who(doc: dict) -> str:
    if doc.get("unreadable") or "pid" not in doc:
        return "a command whose record is unreadable"
    where = f" on {doc['host']}" if doc.get("host") and doc["host"] != socket.gethostname() else ""
    since = f", since {doc['started']}" if doc.get("started") else ""
    return f"pid {doc['pid']}{where} ({doc.get('command', '?')}){since}"


def _makedirs(folder: Path) -> list[Path]:
    """mkdir -p, returning the folders it made (outermost first)."""
    missing: list[Path] = []
    probe = folder.absolute()
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    folder.mkdir(parents=True, exist_ok=True)
    return list(reversed(missing))


def acquire(folder: Path, flag: str, command: Sequence[str] | None = None) -> FolderLock:
    """Take `folder`'s lock (creating the folder), or raise UsageError naming the holder."""
    folder = Path(folder)
    check_output_dir(folder, flag)
    created = _makedirs(folder)
    path = folder / LOCK_NAME
    cmd = shlex.join(command if command is not None else ["mlperf-vllm", *sys.argv[1:]])
    for _ in range(20):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _read(fd)
            os.close(fd)
            FolderLock(folder, -1, created).release()
            raise UsageError(
                f"{flag} {folder} is being written by another command, {_who(holder)}: wait "
                f"for it to end, or pass another {flag}"
            ) from None
        if not _same_file(fd, path):  # its holder removed it while we waited: take the new one
            os.close(fd)
            continue
        earlier = _read(fd)
        remains = None
        if earlier:
            remains = (
                f"{folder} holds the remains of an interrupted command, {_who(earlier)}: it "
                "ended without finishing (killed, or the machine went down); its files are "
                "as it left them"
            )
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": cmd,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode("utf-8"), 0)
        return FolderLock(folder, fd, created, remains)
    raise UsageError(f"{flag} {folder}: its lock file keeps changing hands: try again")


@contextlib.contextmanager
def one_writer(folder: Path, flag: str) -> Iterator[FolderLock]:
    """Hold `folder`'s lock for the block; says what an interrupted holder left."""
    lock = acquire(folder, flag)
    try:
        if lock.remains:
            print(f"note: {lock.remains}", flush=True)
        yield lock
    finally:
        lock.release()
