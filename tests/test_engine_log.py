"""vLLM's own lines in this process: held from its import until the run's engine.log exists,
then written there; nothing of it on the terminal unless asked (--verbose)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# A stand-in for vLLM's logging set-up (a stream handler on "vllm" writing to stdout) and for
# its import-time warning, logged at the logger vLLM uses for it.
SCRIPT = textwrap.dedent(
    """
    import logging, sys
    from harness.run.record.engine_log import hold_vllm_import_lines, route_vllm_logger
    if sys.argv[2] == "hold":
        hold_vllm_import_lines()
    vllm = logging.getLogger("vllm")
    vllm.addHandler(logging.StreamHandler(sys.stdout))
    vllm.setLevel(logging.INFO)
    logging.getLogger("vllm.triton_utils.importing").warning(
        "Triton is installed, but doesn't include CPU backend. Disabling Triton."
    )
    print("ours: the engine started", flush=True)
    undo = route_vllm_logger(sys.argv[1])
    logging.getLogger("vllm.entrypoints").info("shutting down")
    undo()
    """
)


def _run(tmp_path: Path, mode: str) -> tuple[str, str]:
    log = tmp_path / f"{mode}.log"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(log), mode],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr, log.read_text()


def test_vllms_import_time_line_waits_for_the_runs_engine_log(tmp_path):
    screen, log = _run(tmp_path, "hold")
    assert screen == "ours: the engine started\n"
    lines = log.splitlines()
    assert lines[0] == (
        "WARNING vllm.triton_utils.importing: Triton is installed, but doesn't include CPU "
        "backend. Disabling Triton."
    )
    assert lines[1:] == ["shutting down"]


def test_verbose_keeps_it_on_the_terminal(tmp_path):
    screen, log = _run(tmp_path, "verbose")
    assert "Disabling Triton." in screen and "Disabling Triton" not in log


FULL_DISK = textwrap.dedent(
    """
    import logging, sys
    from harness.run.record.engine_log import route_vllm_logger
    vllm = logging.getLogger("vllm")
    vllm.addHandler(logging.StreamHandler(sys.stdout))
    vllm.setLevel(logging.INFO)
    logging.raiseExceptions = False  # the handler's own complaint is not under test
    undo = route_vllm_logger("/dev/full")  # every write there fails: No space left on device
    logging.getLogger("vllm.v1.engine").info("[shutdown] MPClient: complete")
    undo()
    logging.getLogger("vllm.entrypoints").info("after the run")
    """
)


def test_a_file_system_that_filled_under_the_engine_log_neither_fails_the_undo_nor_mutes_vllm():
    """The line vLLM logs as it shuts down stays in the file's buffer when the disk is full;
    putting the terminal back must not raise over the run's own error, and vLLM's later lines
    reach the terminal, not the closed file."""
    proc = subprocess.run(
        [sys.executable, "-c", FULL_DISK], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "after the run\n", proc.stdout + proc.stderr


def test_the_session_adds_vllms_first_line_to_an_engine_death_in_any_test(tmp_path):
    """A run's test and a calibration's trial both go through EngineSession.run: the line of
    an engine that died carries what vLLM logged first, once, and never for a full disk."""
    from types import SimpleNamespace

    from harness.run.execute.loadgen_call import EngineFailure, OutputFull
    from harness.run.execute.session import EngineSession

    logged = "(EngineCore_DP0 pid=7) ERROR 11-29 05:00:00 [core.py:1] CUDA error: out of memory\n"

    class Held:
        def fatal(self) -> None:
            return None

        def recent(self) -> str:
            return logged

        def close(self) -> None:
            pass

    prep = SimpleNamespace(request=SimpleNamespace(verbose=False))
    session = EngineSession(prep, tmp_path)  # type: ignore[arg-type]
    session._log = Held()  # type: ignore[assignment]
    died = EngineFailure("Server test: the engine died: EngineDeadError")
    assert session._said_first_about(died) == "CUDA error: out of memory"
    assert session._said_first_about(OutputFull("the output's file system is full")) is None
    assert session._said_first_about(KeyboardInterrupt()) is None
    already = EngineFailure("the engine died: CUDA error: out of memory")
    assert session._said_first_about(already) is None


def test_the_session_alone_decides_the_quick_stop_and_callers_never_reach_its_sut(tmp_path):
    """An interrupt or a dead engine, in a phase or between phases (close(exc)), stops the
    engine quickly; any other ending drains as usual. The runner and the trial engine go through
    the session's phases, never through its SUT."""
    import re
    from pathlib import Path
    from types import SimpleNamespace

    from harness.run.execute.loadgen_call import EngineFailure
    from harness.run.execute.session import EngineSession

    prep = SimpleNamespace(request=SimpleNamespace(verbose=False))
    for ending, quick in (
        (KeyboardInterrupt(), True),
        (EngineFailure("the engine died"), True),
        (ValueError("a bug between tests"), False),
        (None, False),
    ):
        session = EngineSession(prep, tmp_path)  # type: ignore[arg-type]
        session.close(ending)
        assert session._quick_stop is quick, ending
    root = Path(__file__).resolve().parents[1] / "harness"
    for path in (root / "run/execute/runner.py", root / "calibrate/trials.py"):
        assert not re.search(r"\.sut\b", path.read_text()), path


# An engine's worker as vLLM's executors make it join: the rendezvous file in the temp folder,
# named in its INFO line on stdout, then left behind (the process ends without removing it).
RENDEZVOUS_SCRIPT = textwrap.dedent(
    """
    import subprocess, sys
    from harness.run.record.engine_log import EngineStartLog
    named, other = sys.argv[1], sys.argv[2]
    log = EngineStartLog.begin()
    worker = (
        "import sys; open(sys.argv[1], 'w').write('x'); open(sys.argv[2], 'w').write('x'); "
        "print('(Worker pid=1) INFO 11-29 13:40:00 [parallel_state.py:1906] world_size=1 "
        "rank=0 local_rank=0 distributed_init_method=file://' + sys.argv[1] + "
        "' backend=gloo', flush=True)"
    )
    subprocess.run([sys.executable, "-c", worker, named, other], check=True)
    if sys.argv[3] == "started":
        log.started(sys.argv[4])
        log.close()
    else:
        log.failed()
    """
)


def _rendezvous(tmp_path: Path, how: str) -> tuple[Path, Path]:
    named = tmp_path / "vllm_dist_0123456789abcdef0123456789abcdef"
    other = tmp_path / "vllm_dist_fedcba9876543210fedcba9876543210"  # another engine's
    proc = subprocess.run(
        [sys.executable, "-c", RENDEZVOUS_SCRIPT, str(named), str(other), *how.split(" ")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return named, other


def test_the_rendezvous_file_a_started_engine_left_is_removed_when_it_ends(tmp_path):
    log = tmp_path / "engine.log"
    named, other = _rendezvous(tmp_path, "started " + str(log))
    assert not named.exists() and other.exists()
    assert f"distributed_init_method=file://{named}" in log.read_text()


def test_the_rendezvous_file_of_a_failed_start_is_removed(tmp_path):
    named, other = _rendezvous(tmp_path, "failed")
    assert not named.exists() and other.exists()


def test_a_rendezvous_line_split_across_reads_is_still_found(tmp_path):
    from harness.run.record.engine_log import RendezvousFiles

    path = tmp_path / "vllm_dist_0123456789abcdef0123456789abcdef"
    path.write_text("x")
    line = f"(Worker pid=1) INFO [x] distributed_init_method=file://{path} backend=gloo\n".encode()
    found = RendezvousFiles()
    for cut in range(0, len(line), 7):  # seven bytes a read
        found.feed(line[cut : cut + 7])
    found.feed(b"distributed_init_method=file:///tmp/vllm_dist_not_hex backend=gloo\n")
    found.feed(b"distributed_init_method=tcp://127.0.0.1:40999 backend=gloo\n")
    assert found.paths == {str(path)}
    assert found.remove() == [str(path)] and not path.exists()
    assert found.remove() == []  # once
