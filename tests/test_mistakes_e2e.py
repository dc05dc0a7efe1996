"""Ordinary mistakes and badly timed interrupts, through the real CLI (its own process, real
LoadGen, real vLLM on the tiny model, real files), one table row each.

Every refusal must exit 2 with exactly one `error:` line that names the problem, print no
traceback, start no engine, and leave every file that was there before as it was, with nothing
new beside it. Every interrupt must end the command within seconds (exit 130, one
`interrupted:` line, no traceback, no process left), keep what was written before whole, and
leave no half-written file; a run it stops says `interrupted` in its result.json.

The classes of the table: (1) input that used to end in a traceback, (2) a finished result
that used to be overwritten without a word, (3) an interrupt that used to lose what was
there, (4) state that used to be left half-written, (5) user.conf lines LoadGen ignores
silently, (6) an Offline SUT deaf to an interrupt while it adds a huge query.

Engine starts: the refusals share the session's finished run (`offline_smoke_run`, also used
by other modules) and never start one; the interrupts start two (one stopped while the engine
starts, one while the SUT adds a 400k-sample query).

The one-writer case starts a run and stops it (SIGSTOP) once it holds its folder, before any
engine starts; three commands aimed at that folder are refused, then the holder is killed.

A model whose weights vLLM rejects inside its worker starts one more engine, which fails.

Time budget: 220 s: three engine starts, 22 refusals in seconds each, the one-writer case.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from harness.folder_lock import LOCK_NAME
from tests.conftest import REPO, SMOKE, cli, package_args, run_args
from tests.procs import (
    assert_all_gone,
    engine_cores,
    family,
    kill_group,
    loadgen_issuing,
    start_cli,
    wait_for,
)

pytestmark = pytest.mark.e2e

FAST = ("--max-tokens", "16", "--engine-arg", "enforce_eager=true")
INTERRUPT_LIMIT_S = 20.0  # SIGTERM to exit, on two shared cores (about 7 s when idle)


@dataclass
class Workspace:
    """What a case works with: the session's tiny model, dataset and finished run (never
    changed by a case), and a folder of its own."""

    tmp: Path
    model: Path
    dataset: Path
    finished: Path  # a completed `run --mode both` output folder

    def run(self, out: Path, *extra: str, conf: Path = SMOKE / "offline.conf") -> list[str]:
        return run_args(self.model, self.dataset, out, conf, *extra)

    def model_copy(self) -> Path:
        dest = self.tmp / "model"
        shutil.copytree(self.model, dest)
        return dest

    def run_copy(self, name: str, **changes: object) -> Path:
        """A copy of the finished run whose result.json has `changes` applied."""
        dest = self.tmp / name
        shutil.copytree(self.finished, dest)
        result = json.loads((dest / "result.json").read_text())
        result.update(changes)
        (dest / "result.json").write_text(json.dumps(result, indent=2))
        return dest

    def conf(self, text: str) -> Path:
        path = self.tmp / "user.conf"
        path.write_text((SMOKE / "offline.conf").read_text() + text)
        return path

    def file(self, name: str, text: str = "not a folder\n") -> Path:
        path = self.tmp / name
        path.write_text(text)
        return path


@pytest.fixture
def ws(tiny_model, tiny_dataset, offline_smoke_run, tmp_path) -> Workspace:
    return Workspace(tmp_path, tiny_model, tiny_dataset, offline_smoke_run.out)


def _evaluate_args(ws: Workspace, log: Path, dataset: Path, *extra: str) -> list[str]:
    return [
        "evaluate",
        "--benchmark",
        "llama3_1-8b",
        "--accuracy-log",
        str(log),
        "--dataset",
        str(dataset),
        "--tokenizer",
        str(ws.model),
        "--no-mlflow",
        *extra,
    ]


# ------------------------------------------------------------------------------ the cases


def broken_config(ws: Workspace) -> list[str]:
    model = ws.model_copy()
    (model / "config.json").write_text('{"model_type": "llama", "vocab_size": ')  # cut short
    return ws.run(ws.tmp / "out", "--model", str(model))


def missing_config(ws: Workspace) -> list[str]:
    model = ws.model_copy()
    (model / "config.json").unlink()
    return ws.run(ws.tmp / "out", "--model", str(model))


def no_weights(ws: Workspace) -> list[str]:
    model = ws.model_copy()
    for f in model.glob("*.safetensors"):
        f.unlink()  # a config and a tokenizer, nothing to load
    return ws.run(ws.tmp / "out", "--model", str(model))


def shard_cut_short(ws: Workspace) -> list[str]:
    model = ws.model_copy()
    shard = next(model.glob("*.safetensors"))
    with open(shard, "r+b") as fh:  # a download that stopped half-way
        fh.truncate(shard.stat().st_size // 2)
    return ws.run(ws.tmp / "out", "--model", str(model))


def index_names_a_missing_shard(ws: Workspace) -> list[str]:
    model = ws.model_copy()
    shard = next(model.glob("*.safetensors"))
    weight_map = {
        "lm_head.weight": shard.name,
        "model.norm.weight": "model-00002-of-00002.safetensors",
    }
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return ws.run(ws.tmp / "out", "--model", str(model))


def model_is_a_file(ws: Workspace) -> list[str]:
    return ws.run(ws.tmp / "out", "--model", str(ws.file("model.bin")))


def output_is_a_file(ws: Workspace) -> list[str]:
    return ws.run(ws.file("results"))


def output_inside_a_file(ws: Workspace) -> list[str]:
    return ws.run(ws.file("results") / "run1")


def bad_user_conf_value(ws: Workspace) -> list[str]:
    conf = ws.tmp / "user.conf"
    conf.write_text("*.Offline.min_duration = 0\n*.Offline.target_qps = fast\n")
    return ws.run(ws.tmp / "out", conf=conf)


def broken_result_json(ws: Workspace) -> list[str]:
    run = ws.run_copy("run")
    (run / "result.json").write_text('{"status": "completed", ')
    return package_args(run, ws.tmp / "submission")


def unfinished_run(ws: Workspace) -> list[str]:
    run = ws.run_copy("run", status="interrupted", error="KeyboardInterrupt: signal SIGTERM")
    return package_args(run, ws.tmp / "submission")


def evaluate_output_is_a_file(ws: Workspace) -> list[str]:
    log = ws.finished / "accuracy" / "mlperf_log_accuracy.json"
    return _evaluate_args(ws, log, ws.dataset, "--output", str(ws.file("scores")))


def dataset_inside_a_file(ws: Workspace) -> list[str]:
    out = ws.file("data") / "cnn.json"
    return [
        "make-dataset",
        "--benchmark",
        "llama3_1-8b",
        "--tokenizer",
        str(ws.model),
        "--out",
        str(out),
    ]


def over_a_finished_run(ws: Workspace) -> list[str]:
    return ws.run(ws.finished)


def against_another_dataset(ws: Workspace) -> list[str]:
    rows = json.loads(ws.dataset.read_text())
    rows[0]["output"] = "A reference the run never saw."
    other = ws.tmp / "cnn_other.json"
    other.write_text(json.dumps(rows))
    return _evaluate_args(ws, ws.finished / "accuracy" / "mlperf_log_accuracy.json", other)


def another_log_over_scores(ws: Workspace) -> list[str]:
    samples = json.loads((ws.finished / "accuracy" / "mlperf_log_accuracy.json").read_text())
    log = ws.tmp / "mlperf_log_accuracy.json"
    log.write_text(json.dumps(samples[:-1]))  # another log: one sample fewer
    return _evaluate_args(ws, log, ws.dataset, "--output", str(ws.finished / "accuracy"))


def misspelt_key(ws: Workspace) -> list[str]:
    conf = ws.conf("*.Offline.traget_qps = 5\n")
    return ws.run(ws.tmp / "out", "--submission", conf=conf)


def unknown_scenario(ws: Workspace) -> list[str]:
    conf = ws.conf("llama3_1-8b.Ofline.min_query_count = 100\n")
    return ws.run(ws.tmp / "out", "--submission", conf=conf)


def no_spaces(ws: Workspace) -> list[str]:
    conf = ws.conf("*.Offline.min_duration=600000\n")
    return ws.run(ws.tmp / "out", "--submission", conf=conf)


@dataclass(frozen=True)
class Refusal:
    name: str
    kind: int  # the class of mistake (module docstring)
    argv: Callable[[Workspace], list[str]]
    needles: tuple[str, ...]  # what the one error line says


REFUSALS = [
    Refusal("broken config.json", 1, broken_config, ("config.json is not valid JSON",)),
    Refusal("missing config.json", 1, missing_config, ("has no config.json",)),
    Refusal("model is a file", 1, model_is_a_file, ("is a file", "checkpoint folder")),
    Refusal(
        "model folder without weights",
        1,
        no_weights,
        ("has no weight files vLLM can load", "*.safetensors", "load_format=dummy"),
    ),
    Refusal("weight shard cut short", 1, shard_cut_short, ("cut short", "copy it again")),
    Refusal(
        "index naming a missing shard",
        1,
        index_names_a_missing_shard,
        ("model-00002-of-00002.safetensors", "missing"),
    ),
    Refusal("--output is a file", 1, output_is_a_file, ("is a file, not a folder",)),
    Refusal("--output inside a file", 1, output_inside_a_file, ("no folder can be made",)),
    Refusal(
        "max_num_seqs 0",
        1,
        lambda ws: ws.run(ws.tmp / "out", "--max-num-seqs", "0"),
        ("vLLM rejects the engine arguments", "max_num_seqs", "greater than or equal to 1"),
    ),
    Refusal(
        "max_model_len beyond the checkpoint",
        1,
        lambda ws: ws.run(ws.tmp / "out", "--engine-arg", "max_model_len=100000"),
        ("vLLM rejects the engine arguments", "max_model_len (100000)"),
    ),
    Refusal(
        "tensor parallel size that does not divide the heads",
        1,
        lambda ws: ws.run(ws.tmp / "out", "--tensor-parallel-size", "3"),
        ("vLLM rejects the engine arguments", "divisible by tensor parallel size (3)"),
    ),
    Refusal("result.json cut short", 1, broken_result_json, ("not a readable result.json",)),
    Refusal("evaluate --output is a file", 1, evaluate_output_is_a_file, ("is a file",)),
    Refusal("make-dataset --out inside a file", 1, dataset_inside_a_file, ("is a file",)),
    Refusal(
        "run over a finished run",
        2,
        over_a_finished_run,
        ("holds a completed run", "new --output", "--overwrite"),
    ),
    Refusal(
        "evaluate against another dataset",
        2,
        against_another_dataset,
        ("used dataset", "another file", "--output another folder", "--overwrite"),
    ),
    Refusal(
        "evaluate another log over a run's scores",
        2,
        another_log_over_scores,
        ("holds the scores of another accuracy log", "--overwrite"),
    ),
    Refusal("package a run that did not complete", 2, unfinished_run, ("did not complete",)),
    Refusal(
        "user.conf value that is not a number",
        4,
        bad_user_conf_value,
        ("line 2", "value 'fast' is not a number"),
    ),
    Refusal(
        "misspelt user.conf key",
        5,
        misspelt_key,
        ("`*.Offline.traget_qps`", "did you mean target_qps?"),
    ),
    Refusal(
        "user.conf scenario that does not exist",
        5,
        unknown_scenario,
        ("'Ofline' is no LoadGen scenario", "did you mean Offline?"),
    ),
    Refusal("key=value without spaces", 5, no_spaces, ("with spaces around `=`",)),
]


# ------------------------------------------------------------------------------ checks


def snapshot(*roots: Path) -> dict[str, str]:
    """Every file and folder under `roots`: {path: content digest, or "dir"}."""
    seen: dict[str, str] = {}
    for root in roots:
        for path in [root, *root.rglob("*")] if root.exists() else []:
            if path.is_dir():
                seen[str(path)] = "dir"
            else:
                seen[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


# What other tests running beside these (another xdist worker) may add to the clone: the
# small model's extraction cache (test_small_model_e2e), pytest's own cache.
SHARED_CACHES = {".cache", ".pytest_cache"}


def _repo_entries() -> set[str]:
    """The clone's top-level entries, where a refused command (its working directory) must
    write nothing: no output folder, no mlflow.db, no mlruns."""
    return {p.name for p in REPO.iterdir()} - SHARED_CACHES


def assert_one_line(stderr: str, stdout: str, prefix: str, *needles: str) -> str:
    assert "Traceback" not in stderr + stdout, stderr[-3000:]
    lines = [ln for ln in stderr.splitlines() if ln.startswith(prefix)]
    assert len(lines) == 1, stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("case", REFUSALS, ids=[f"{c.kind}-{c.name}" for c in REFUSALS])
def test_refused(ws: Workspace, case: Refusal):
    argv = case.argv(ws)
    before = snapshot(ws.tmp, ws.finished, ws.model)
    repo_before = _repo_entries()
    proc = cli(*argv, timeout=300)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert_one_line(proc.stderr, proc.stdout, "error: ", *case.needles)
    assert "EngineCore" not in proc.stdout + proc.stderr  # refused before any engine start
    assert snapshot(ws.tmp, ws.finished, ws.model) == before  # nothing changed, nothing new
    assert _repo_entries() == repo_before


# ------------------------------------------------------------------------------ interrupts


@dataclass
class Started:
    proc: subprocess.Popen[str]
    out: Path  # what the case watches
    kept: dict[str, str]  # snapshot of what must survive the interrupt unchanged


def package_over_a_package(ws: Workspace) -> Started:
    """An earlier package, then a second one slow enough to interrupt mid-tree: its
    accuracy log is 2 GB (sparse), hashed once to check and once to package."""
    root = ws.tmp / "submission"
    small = ws.run_copy("run", benchmark="llama3_1-8b-edge")  # edge: no TEST06 needed
    first = cli(*package_args(small, root))
    assert first.returncode == 0, first.stdout + first.stderr
    big = ws.run_copy("run-big", benchmark="llama3_1-8b-edge")
    with open(big / "accuracy" / "mlperf_log_accuracy.json", "wb") as fh:
        fh.truncate(2 << 30)
    txt = big / "accuracy" / "accuracy.txt"
    txt.write_text("".join(ln for ln in txt.read_text().splitlines(True) if "hash=" not in ln))
    kept = snapshot(root)
    return Started(start_cli(*package_args(big, root)), root, kept)


def _scenario_parent(root: Path) -> Path:
    return root / "closed" / "Demo" / "results" / "tiny_cpu" / "llama3.1-8b-edge"


def package_building(started: Started) -> bool:
    parent = _scenario_parent(started.out)
    return parent.is_dir() and any(p.name.startswith(".tmp-") for p in parent.iterdir())


def run_with_typo(ws: Workspace) -> Started:
    out = ws.tmp / "out"
    conf = ws.conf("*.Offline.traget_qps = 5\n")
    return Started(start_cli(*ws.run(out, *FAST, conf=conf)), out, {})


def engine_starting(started: Started) -> bool:
    """The engine core is there and is held in its start (SIGSTOP): a forked core is up in
    ~3 s, a window the signal could miss, and a start that does not move is the case of an
    interrupt at its hardest (the run must still end within seconds)."""
    cores = engine_cores(started.proc.pid)
    for core in cores:
        with contextlib.suppress(psutil.Error):
            core.suspend()
    return bool(cores)


def huge_offline_query(ws: Workspace) -> Started:
    out = ws.tmp / "out"
    conf = ws.tmp / "huge.conf"
    conf.write_text(
        "*.Offline.min_duration = 0\n*.Offline.min_query_count = 400000\n"
        "*.Offline.target_qps = 10\n"
    )
    return Started(start_cli(*ws.run(out, *FAST, conf=conf)), out, {})


def adding_the_query(started: Started) -> bool:
    if not loadgen_issuing(started.out):
        return False
    time.sleep(3)  # the SUT is handing the query to the engine
    return True


def package_kept(ws: Workspace, started: Started, stdout: str, stderr: str) -> None:
    assert snapshot(started.out) == started.kept  # the earlier package, whole
    again = cli(*package_args(ws.tmp / "run", started.out))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "it replaced the package that was there" in again.stdout


def run_interrupted(ws: Workspace, started: Started, stdout: str, stderr: str) -> None:
    result = json.loads((started.out / "result.json").read_text())
    assert result["status"] == "interrupted", result
    assert result["finished_at"]
    assert "EngineDeadError" not in stderr and "SUT failed" not in stderr, stderr[-3000:]


def typo_warned(ws: Workspace, started: Started, stdout: str, stderr: str) -> None:
    run_interrupted(ws, started, stdout, stderr)
    result = json.loads((started.out / "result.json").read_text())
    assert result["error"].startswith("engine start failed: KeyboardInterrupt")
    warned = [w for w in result["warnings"] if "traget_qps" in w]
    assert warned and "did you mean target_qps?" in warned[0]
    assert f"warning: {warned[0]}" in stdout


@dataclass(frozen=True)
class Interrupt:
    name: str
    kind: int
    start: Callable[[Workspace], Started]
    ready: Callable[[Started], bool]  # when to send SIGTERM
    check: Callable[[Workspace, Started, str, str], None]


INTERRUPTS = [
    Interrupt(
        "package over an earlier package", 3, package_over_a_package, package_building, package_kept
    ),
    Interrupt("run while its engine starts", 4, run_with_typo, engine_starting, typo_warned),
    Interrupt(
        "Offline run handing a 400k-sample query to the engine",
        6,
        huge_offline_query,
        adding_the_query,
        run_interrupted,
    ),
]


@pytest.mark.parametrize("case", INTERRUPTS, ids=[f"{c.kind}-{c.name}" for c in INTERRUPTS])
def test_interrupted(ws: Workspace, case: Interrupt):
    started = case.start(ws)
    proc = started.proc
    try:
        wait_for(lambda: case.ready(started), 600, case.name, [proc])
        tree = family(proc.pid)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
        took = time.monotonic() - t0
    finally:
        kill_group(proc)
    assert proc.returncode == 130, stdout[-2000:] + stderr[-3000:]
    assert took < INTERRUPT_LIMIT_S, f"{took:.1f} s from SIGTERM to exit"
    assert_one_line(stderr, stdout, "interrupted:")
    assert_all_gone(tree, [proc.pid], case.name)
    leftovers = list(ws.tmp.rglob(".tmp-*"))
    assert not leftovers, leftovers  # nothing half-written beside the results
    case.check(ws, started, stdout, stderr)


# ------------------------------------------------------------------------------ one writer


def _lock_holder(out: Path) -> int | None:
    try:
        return int(json.loads((out / LOCK_NAME).read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def test_one_writer_per_folder_and_a_killed_holder_leaves_remains(ws: Workspace):
    """A run holds its output folder (stopped with SIGSTOP once it holds it, so it stays there
    as long as the test needs); a second run, an evaluate and a package aimed at that folder
    are each refused at once naming the holder; once the holder is killed (SIGKILL: no chance
    to clean up) the folder is free again and the next command says what was left there."""
    out = ws.tmp / "out"
    holder = start_cli(*ws.run(out, *FAST))
    try:
        wait_for(
            lambda: _lock_holder(out) == holder.pid, 120, "the run to lock its folder", [holder]
        )
        os.killpg(holder.pid, signal.SIGSTOP)
        before = snapshot(out)
        log = ws.finished / "accuracy" / "mlperf_log_accuracy.json"
        second = {
            "run": ws.run(out, *FAST),
            "evaluate": _evaluate_args(ws, log, ws.dataset, "--output", str(out)),
            "package": package_args(ws.finished, out),
        }
        for kind, argv in second.items():
            proc = cli(*argv, timeout=120)
            assert proc.returncode == 2, (kind, proc.stdout[-2000:], proc.stderr[-2000:])
            line = assert_one_line(
                proc.stderr,
                proc.stdout,
                "error: ",
                f"{out} is being written by another command",
                f"pid {holder.pid}",
                "mlperf-vllm run",
            )
            assert "--output" in line or "--out" in line, line
            assert "EngineCore" not in proc.stdout + proc.stderr, kind
            assert snapshot(out) == before, kind  # nothing written into the holder's folder
    finally:
        kill_group(holder)  # SIGKILL, stopped or not
        holder.wait(timeout=30)
    assert (out / LOCK_NAME).exists()  # the dead holder could not remove its record...
    after = cli(*_evaluate_args(ws, log, ws.dataset, "--output", str(out)), timeout=300)
    assert after.returncode == 0, (
        after.stdout[-2000:] + after.stderr[-3000:]
    )  # ...nor keep the lock
    notes = [ln for ln in after.stdout.splitlines() if ln.startswith("note: ")]
    assert len(notes) == 1 and "remains of an interrupted command" in notes[0], after.stdout
    assert f"pid {holder.pid}" in notes[0] and "mlperf-vllm run" in notes[0], notes[0]
    assert (out / "accuracy.json").is_file()
    assert not (out / LOCK_NAME).exists()  # a command that ends removes its record


def test_an_engine_start_that_fails_says_vllms_root_cause_in_one_line(ws: Workspace):
    """Weights that pass every check before the engine (a readable safetensors file) but belong
    to no Llama: vLLM fails inside its worker process. The command ends with one `error:` line
    carrying the worker's own reason, no traceback on the terminal, and vLLM's whole output of
    the start kept in the run's folder."""
    import numpy as np
    from safetensors.numpy import save_file

    model = ws.model_copy()
    for f in model.glob("*.safetensors"):
        f.unlink()
    save_file(
        {"not_a_llama_tensor": np.zeros(4, dtype=np.float32)}, str(model / "model.safetensors")
    )
    out = ws.tmp / "out"
    proc = cli(*ws.run(out, *FAST, "--model", str(model)), timeout=600)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-3000:]
    line = assert_one_line(proc.stderr, proc.stdout, "error: ", "the vLLM engine did not start")
    assert "not_a_llama_tensor" in line, line  # the worker's reason, not "see root cause above"
    assert "root cause above" not in line, line
    kept = (out / "engine_start.log").read_text()
    assert "Traceback" in kept and "not_a_llama_tensor" in kept
    assert json.loads((out / "result.json").read_text())["status"] == "failed"
