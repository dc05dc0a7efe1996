"""Writing results so that nothing already written is lost: every writer of a result file or
tree (result.json, accuracy.json/.txt, a submission package, sweep reports, a calibrated
user.conf) writes aside and renames into place.

- A file is written to a temporary name in its own folder, flushed to disk, and renamed over
  the old one (`os.replace` is atomic within a file system): a reader, a crash or an interrupt
  sees the old file or the new one, never half of either.
- A tree is built in a hidden sibling folder; only once it is complete is the old tree renamed
  aside, the new one renamed into place and the old one removed. An interrupt while building
  leaves the old tree untouched and removes the unfinished one.
- The renames that belong together run with SIGINT/SIGTERM held (harness.proc.signals.held):
  the interrupt lands right after them.

Also the output checks every command makes before it starts: a path that must be a folder is
not a file, and can be created.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from harness.errors import UsageError
from harness.proc import signals

ASIDE_PREFIX = ".tmp-"  # what a writer leaves only while it runs (removed on any failure)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a folder be opened
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _aside_name(path: Path) -> str:
    return f"{ASIDE_PREFIX}{path.name}-"


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as fh:
        os.fsync(fh.fileno())


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` to write to (by any means: a library's savefig, a csv
    writer); renamed over `path` when the block ends without an exception, removed otherwise."""
    path = Path(path)
    with _aside_file(path) as tmp:
        yield tmp
        _fsync_file(tmp)
        with signals.held():
            os.replace(tmp, path)
    _fsync_dir(path.parent)


def write_text(path: Path, text: str) -> None:
    """Write `text` to `path` atomically (UTF-8)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes(path: Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_texts(files: Mapping[Path, str]) -> None:
    """Several files that belong together (accuracy.json and accuracy.txt): all are written
    aside first, then renamed into place one after the other with signals held."""
    with contextlib.ExitStack() as stack:
        tmps = {}
        for path, text in files.items():
            tmp = stack.enter_context(_aside_file(Path(path)))
            tmp.write_text(text, encoding="utf-8")
            _fsync_file(tmp)
            tmps[Path(path)] = tmp
        with signals.held():
            for path, tmp in tmps.items():
                os.replace(tmp, path)
        for folder in {p.parent for p in tmps}:
            _fsync_dir(folder)


@contextlib.contextmanager
def _aside_file(path: Path) -> Iterator[Path]:
    path.parent.mkdir(parents=True, exist_ok=True)
    # the aside name keeps the suffix: writers such as savefig pick the format from it
    fd, tmp_name = tempfile.mkstemp(prefix=_aside_name(path), suffix=path.suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    os.chmod(tmp, 0o644)  # mkstemp makes it private; results are ordinary files
    try:
        yield tmp
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@contextlib.contextmanager
def replaced_tree(dest: Path) -> Iterator[Path]:
    """A new, empty folder beside `dest` to build a whole tree in. When the block ends without
    an exception the new tree takes `dest`'s place (an old `dest` is removed only then);
    otherwise the unfinished tree is removed and `dest` is as it was."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    new = Path(tempfile.mkdtemp(prefix=_aside_name(dest), dir=dest.parent))
    os.chmod(new, 0o755)
    old: Path | None = None
    try:
        yield new
        _fsync_tree(new)
        with signals.held():
            if dest.exists():
                old = dest.parent / f"{_aside_name(dest)}old-{os.getpid()}"
                os.replace(dest, old)
            os.replace(new, dest)
        _fsync_dir(dest.parent)
    finally:
        shutil.rmtree(new, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _fsync_tree(root: Path) -> None:
    for folder, _, names in os.walk(root):
        for name in names:
            with contextlib.suppress(OSError), open(Path(folder) / name, "rb") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(Path(folder))


def leftovers(folder: Path) -> list[Path]:
    """What an interrupted writer of ours left in `folder` (nothing, normally)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name.startswith(ASIDE_PREFIX))


# ----------------------------------------------------------------------------- output checks


def check_output_dir(path: Path, flag: str) -> None:
    """`path` will be a folder we write into: it must not be a file, nor lie under one, and
    its nearest existing folder must be writable. Raises UsageError; creates nothing."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {path} is a file, not a folder: pass a folder (new or existing)")
    _check_creatable(path, flag)


def check_free_space(path: Path, need: int, flag: str, what: str) -> None:
    """The file system that will hold `path` has at least `need` bytes free, else one error
    naming what needs them: a full disk found before the engine starts, not minutes into a run
    whose logs could not be written."""
    free = free_bytes(path)
    if free < need:
        raise UsageError(
            f"{flag} {path}: its file system has {free / 1e6:.1f} MB free, and {what} needs "
            f"about {need / 1e6:.1f} MB: free some space there or pass another {flag}"
        )


def free_bytes(path: Path) -> int:
    """Bytes free on the file system that holds (or will hold) `path`."""
    return shutil.disk_usage(_nearest_existing(Path(path))).free


def check_output_file(path: Path, flag: str) -> None:
    """`path` will be a file we write: it must not be a folder and its folder must be usable."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a folder: pass a file name")
    _check_creatable(path.parent, flag, of=path)


def _nearest_existing(path: Path) -> Path:
    """`path` itself, or the nearest of its parents that exists (absolute)."""
    probe = path.absolute()
    while not probe.exists():
        probe = probe.parent
    return probe


def _check_creatable(folder: Path, flag: str, of: Path | None = None) -> None:
    shown = of or folder
    probe = _nearest_existing(folder)
    if not probe.is_dir():
        raise UsageError(
            f"{flag} {shown}: {probe} is a file, so no folder can be made under it: "
            "pass a path that is not inside a file"
        )
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {shown}: {probe} is not writable: pass a folder you can write")
