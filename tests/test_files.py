"""harness.files: a result file or tree is replaced whole or not at all, and an interrupt during
the renames that belong together lands after them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness import files
from harness.errors import UsageError
from tests.conftest import REPO


def test_a_failed_write_keeps_the_old_file_and_leaves_nothing(tmp_path):
    path = tmp_path / "result.json"
    files.write_text(path, "old\n")
    with pytest.raises(RuntimeError), files.atomic_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("disk full")
    assert path.read_text() == "old\n"
    assert files.leftovers(tmp_path) == [] and [p.name for p in tmp_path.iterdir()] == [path.name]
    files.write_text(path, "new\n")
    assert path.read_text() == "new\n" and oct(path.stat().st_mode & 0o777) == "0o644"


def test_a_tree_is_swapped_in_whole(tmp_path):
    dest = tmp_path / "Offline"
    with files.replaced_tree(dest) as new:
        (new / "a.txt").write_text("first")
    with pytest.raises(KeyboardInterrupt), files.replaced_tree(dest) as new:
        (new / "a.txt").write_text("second")
        raise KeyboardInterrupt  # while the new tree is being built
    assert (dest / "a.txt").read_text() == "first"
    assert files.leftovers(tmp_path) == []
    with files.replaced_tree(dest) as new:
        (new / "b.txt").write_text("third")
    assert sorted(p.name for p in dest.iterdir()) == ["b.txt"]
    assert files.leftovers(tmp_path) == []


# A SIGTERM that arrives while two files are renamed into place: both renames happen, then
# the interrupt is raised.
HELD = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from harness import files
    from harness.proc import signals

    signals.install()
    out = Path(sys.argv[1])
    real_replace = os.replace

    def slow_replace(src, dst):
        real_replace(src, dst)
        if dst.name == "accuracy.json":
            print("between", flush=True)
            time.sleep(2)  # the signal arrives here, between the two renames

    os.replace = slow_replace
    try:
        files.write_texts({out / "accuracy.json": "new json", out / "accuracy.txt": "new txt"})
    except KeyboardInterrupt:
        print("interrupted after", sorted(p.read_text() for p in out.iterdir()), flush=True)
    """
)


def test_an_interrupt_between_renames_that_belong_together_waits_for_them(tmp_path):
    (tmp_path / "accuracy.json").write_text("old json")
    (tmp_path / "accuracy.txt").write_text("old txt")
    proc = subprocess.Popen(
        [sys.executable, "-c", HELD, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(REPO),
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "between"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert "interrupted after ['new json', 'new txt']" in out


def test_output_paths_are_checked_before_anything_is_written(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        files.check_output_dir(a_file, "--output")
    with pytest.raises(UsageError, match="no folder can be made under it"):
        files.check_output_dir(a_file / "sub" / "deeper", "--output")
    with pytest.raises(UsageError, match="is a folder"):
        files.check_output_file(tmp_path, "--out")
    files.check_output_dir(tmp_path / "new" / "deeper", "--output")  # creatable: fine
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_leftovers_name_only_ours(tmp_path: Path):
    (tmp_path / ".tmp-result.json-abc.json").write_text("")
    (tmp_path / "result.json").write_text("")
    assert [p.name for p in files.leftovers(tmp_path)] == [".tmp-result.json-abc.json"]
