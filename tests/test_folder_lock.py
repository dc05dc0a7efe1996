"""The folder lock and the engine-start root cause without an engine: a holder in another
process, a holder killed outright, the folders a refused command made, and which line of
vLLM's output is the root cause. (Through the real CLI: tests/test_mistakes_e2e.py.)"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest

from harness.errors import UsageError
from harness.folder_lock import LOCK_NAME, acquire, one_writer
from harness.run.record.engine_log import root_cause
from tests.conftest import REPO

HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from harness.folder_lock import acquire
    lock = acquire(Path(sys.argv[1]), "--output", ["mlperf-vllm", "run", "--output", sys.argv[1]])
    print("held", flush=True)
    time.sleep(120)
    """
)


def _holder(folder):
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_is_refused_until_the_holder_dies(tmp_path):
    folder = tmp_path / "out"
    proc = _holder(folder)
    try:
        with pytest.raises(UsageError) as err:
            acquire(folder, "--output")
        text = str(err.value)
        assert f"pid {proc.pid}" in text and "mlperf-vllm run --output" in text
        assert "is being written by another command" in text
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    record = json.loads((folder / LOCK_NAME).read_text())
    assert record["pid"] == proc.pid  # the dead holder's record stays...
    lock = acquire(folder, "--output")  # ...but not its lock
    try:
        assert lock.remains and f"pid {proc.pid}" in lock.remains
        assert json.loads((folder / LOCK_NAME).read_text())["pid"] != proc.pid
    finally:
        lock.release()
    assert not (folder / LOCK_NAME).exists()


def test_a_command_that_ends_leaves_no_lock_and_no_folder_it_made_empty(tmp_path):
    folder = tmp_path / "a" / "b"
    with one_writer(folder, "--output"):
        assert (folder / LOCK_NAME).is_file()
    assert not (tmp_path / "a").exists()  # made for the command, empty: gone
    with one_writer(folder, "--output"):
        (folder / "result.json").write_text("{}")
    assert (folder / "result.json").is_file() and not (folder / LOCK_NAME).exists()


def test_a_lock_file_taken_over_after_release_is_not_removed_by_the_old_holder(tmp_path):
    lock = acquire(tmp_path, "--output")
    (tmp_path / LOCK_NAME).unlink()
    (tmp_path / LOCK_NAME).write_text('{"pid": 1}')  # someone else's file now
    lock.release()
    assert (tmp_path / LOCK_NAME).read_text() == '{"pid": 1}'


def test_the_root_cause_is_the_first_exception_that_is_no_wrapper():
    text = textwrap.dedent(
        """\
        (Worker pid=12) ERROR 11-25 17:30:06 [multiproc_executor.py:953] Traceback (most recent call last):
        (Worker pid=12) ERROR 11-25 17:30:06 [multiproc_executor.py:953] RuntimeError: Cannot find any model weights with `/m`
        (EngineCore pid=11) ERROR 11-25 17:30:09 [core.py:1510] Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace for root cause.
        Exception: WorkerProc initialization failed due to an exception in a background process.
        """
    )
    assert root_cause(text) == "RuntimeError: Cannot find any model weights with `/m`"
    assert (
        root_cause("RuntimeError: Engine core initialization failed. See root cause above.") is None
    )
    assert root_cause("nothing went wrong here\n") is None
