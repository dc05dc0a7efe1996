"""A run whose output folder's file system cannot hold its logs is refused before the engine
starts, on a real small tmpfs (mounted in a mount namespace of the test's own: `unshare`), with
one line naming the space free, the space needed and the fix, and nothing written there.

Time budget: 20 s: no engine starts.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, SMOKE, run_args

pytestmark = pytest.mark.e2e

MOUNT_AND_RUN = 'mp=$1; shift; mount -t tmpfs -o size=1m tmpfs "$mp" || exit 99; "$@"; rc=$?; ls -A "$mp"; exit $rc'


def _in_small_tmpfs(mountpoint, *argv):
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace here (unshare -rm: {probe.stderr.decode().strip()})")
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", MOUNT_AND_RUN, "sh", str(mountpoint), *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(REPO),
    )


@pytest.mark.parametrize("mode", ["performance", "accuracy"])
def test_a_full_file_system_is_refused_before_the_engine(tiny_model, tiny_dataset, tmp_path, mode):
    mp = tmp_path / "small"
    mp.mkdir()
    args = run_args(tiny_model, tiny_dataset, mp / "out", SMOKE / "offline.conf", mode=mode)
    if mode == "accuracy":
        args += ["--no-evaluate"]
    proc = _in_small_tmpfs(mp, sys.executable, "-m", "harness.cli", *args)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert "file system has 1.0 MB free" in errors[0] and "pass another --output" in errors[0]
    if mode == "accuracy":
        assert "1 accuracy log(s) of 24 samples" in errors[0], errors
    assert proc.stdout.strip() == ""  # nothing in the tmpfs (ls -A), nothing run
