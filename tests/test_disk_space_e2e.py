"""The output folder's file system on a real small tmpfs (mounted in a mount namespace of the
test's own: `unshare`):
- too small for the run's logs: refused before the engine starts, with one line naming the
  space free, the space needed and the fix, and nothing written there;
- filled during the test (LoadGen's logger drops what it cannot write, silently): the test is
  stopped within seconds with one line, never finished over logs that were not written.

Time budget: 20 s for the refusals (no engine starts), one engine start for the filled disk.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, SMOKE, run_args

pytestmark = pytest.mark.e2e

MOUNT_AND_RUN = 'mp=$1; shift; mount -t tmpfs -o size=1m tmpfs "$mp" || exit 99; "$@"; rc=$?; ls -A "$mp"; exit $rc'


# A 16 MB tmpfs (room for the run's logs as the check before the engine counts them), filled
# 2 s into the performance test by `dd`; the time of the fill is printed; once the run ended
# the filler's file goes and result.json is shown.
FILL_DURING_TEST = (
    'mp=$1; shift; mount -t tmpfs -o size=16m tmpfs "$mp" || exit 99; '
    '(while [ ! -e "$mp/out/performance/mlperf_log_detail.txt" ]; do sleep 0.2; done; sleep 2; '
    'echo "FILLED_AT $(date +%s.%N)"; dd if=/dev/zero of="$mp/fill" bs=64k 2>/dev/null) & filler=$!; '
    '"$@"; rc=$?; echo "ENDED_AT $(date +%s.%N)"; kill $filler 2>/dev/null; rm -f "$mp/fill"; '
    'echo RESULT; cat "$mp/out/result.json"; exit $rc'
)


def _in_small_tmpfs(mountpoint, *argv, script=MOUNT_AND_RUN, timeout=300):
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace here (unshare -rm: {probe.stderr.decode().strip()})")
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "sh", str(mountpoint), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
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


def test_a_file_system_that_fills_during_the_test_stops_it_within_seconds(
    tiny_model, tiny_dataset, tmp_path
):
    mp = tmp_path / "filling"
    mp.mkdir()
    # a Server test of 120 s at least: only the full disk can end it early
    args = run_args(tiny_model, tiny_dataset, mp / "out", SMOKE / "server.conf", scenario="Server")
    args += ["--min-duration", "120", "--max-tokens", "16", "--engine-arg", "enforce_eager=true"]
    proc = _in_small_tmpfs(
        mp, sys.executable, "-m", "harness.cli", *args, script=FILL_DURING_TEST, timeout=600
    )
    said = proc.stdout[-2000:] + proc.stderr[-3000:]
    marks = dict(line.split()[:2] for line in proc.stdout.splitlines() if "_AT " in line)
    assert "FILLED_AT" in marks, said  # the test began, and the disk filled during it
    assert proc.returncode == 1, said
    assert float(marks["ENDED_AT"]) - float(marks["FILLED_AT"]) < 30, said
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert "the performance test was stopped" in errors[0], errors
    assert "file system is full" in errors[0] and "pass another --output" in errors[0], errors
    result = json.loads(proc.stdout.split("RESULT\n", 1)[1])
    assert result.get("performance") is None  # no figures over logs that were not written
    assert result["status"] in ("running", "failed"), result  # as far as it could be written
