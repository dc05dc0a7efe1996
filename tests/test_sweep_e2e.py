"""Isolation and stacked sweeps of the shipped smoke plan on the tiny model, through the shell
scripts, logged to a real MLflow server: one knob is refused by the engine at start (block_size
7 parses, the CPU attention backend rejects it), the sweep goes on, and the table, CSV, PNG and
the MLflow parent/child runs agree.

Each config is one engine start (~60 s here beside the suite's other worker), so the two
sweeps split the shipped plan's configs between them and run each property once: the isolation
sweep runs the baseline with its accuracy run and the refused knob, then `--resume`; the
stacked sweep runs the baseline, the engine knob (its delta and the values the engine resolved)
and the environment knob stacked on it (the variable in the run's log, the confounding guard
passing). How a stacked sweep goes on past a refused knob, and what it keeps, is
tests/test_sweep_plan.py's.

The two sweeps share nothing but the MLflow server, so they run side by side: an engine start
is three interpreters importing vLLM one after another (the run, its engine core, the core's
worker), about 0.7 of a core, and a second sweep's starts fill the rest where the Offline smoke
runs' few seconds of generation barely overlap. What is asserted does not depend on it: every
figure is checked for being there and consistent, not for its size.

Time budget: 220 s: five runs of `--repeats 1` (the refused one ends at engine start) in two
sweeps side by side, the `--resume` pass and the MLflow logging (165 s of CPU either way; 639 s
one after the other and 345 s side by side on a 2-core machine loaded ~7 by other work).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PLAN = REPO / "scripts" / "plans" / "smoke_cpu.txt"
ISOLATION_CONFIGS = ["baseline", "block7"]
STACKED_CONFIGS = ["baseline", "+seqs8", "+kvspace2"]

pytestmark = [pytest.mark.e2e, pytest.mark.mlflow]


@pytest.fixture(scope="module")
def server(mlflow_server_uri):
    return mlflow_server_uri


def _plan_without(tmp_path_factory, name: str, *knobs: str) -> Path:
    """The shipped smoke plan without the named knobs (see the module's docstring)."""
    lines = PLAN.read_text().splitlines(keepends=True)
    kept = [ln for ln in lines if not any(ln.startswith(f"knob {k} ") for k in knobs)]
    assert len(kept) == len(lines) - len(knobs)
    out = tmp_path_factory.mktemp("sweep-plan") / name
    out.write_text("".join(kept))
    return out


@pytest.fixture(scope="module")
def isolation_plan(tmp_path_factory) -> Path:
    return _plan_without(tmp_path_factory, "smoke_isolation.txt", "seqs8", "kvspace2")


@pytest.fixture(scope="module")
def stacked_plan(tmp_path_factory) -> Path:
    return _plan_without(tmp_path_factory, "smoke_stacked.txt", "block7")


@pytest.fixture(scope="module")
def small_dataset(tiny_model, tmp_path_factory) -> Path:
    from harness.assets.synthetic import build_synthetic_dataset

    out = tmp_path_factory.mktemp("sweep-data") / "cnn_12.json"
    return build_synthetic_dataset("llama3_1-8b", tiny_model, out, samples=12, seed=3)


def _script_env(model, dataset) -> dict[str, str]:
    env = {
        **os.environ,
        "MODEL": str(model),
        "DATASET": str(dataset),
        "PYTHON": sys.executable,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def _script(name, *args, model, dataset, plan=PLAN, timeout=1800) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(REPO / "scripts" / name), str(plan), *args],
        cwd=REPO,
        env=_script_env(model, dataset),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@dataclass
class _Background:
    """A sweep script started in a session of its own, its output going to files (a pipe
    nobody reads would stop it once full)."""

    proc: subprocess.Popen
    stdout: Path
    stderr: Path

    @classmethod
    def start(cls, name, *args, model, dataset, plan, logs: Path) -> _Background:
        logs.mkdir(parents=True)
        out, err = logs / "stdout.txt", logs / "stderr.txt"
        with open(out, "w") as fo, open(err, "w") as fe:
            proc = subprocess.Popen(
                [str(REPO / "scripts" / name), str(plan), *args],
                cwd=REPO,
                env=_script_env(model, dataset),
                stdout=fo,
                stderr=fe,
                start_new_session=True,
            )
        return cls(proc, out, err)

    def wait(self, timeout: float = 1800) -> subprocess.CompletedProcess:
        rc = self.proc.wait(timeout=timeout)
        return subprocess.CompletedProcess(
            self.proc.args, rc, self.stdout.read_text(), self.stderr.read_text()
        )

    def kill(self) -> None:
        """The script, its sweep and the sweep's run (one process group), when still going."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)


def _csv(out: Path) -> list[dict[str, str]]:
    with open(out / "sweep.csv") as fh:
        return list(csv.DictReader(fh))


def _check_mlflow(uri: str, out: Path, rows: list[dict[str, str]]) -> None:
    """The parent run and one child per config, agreeing with the CSV."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    parent_id = json.loads((out / "sweep.json").read_text())["mlflow_parent_run_id"]
    parent = client.get_run(parent_id)
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["sweep.configs"] == len(rows)
    assert parent.data.metrics["sweep.failed"] == sum(r["status"] == "failed" for r in rows)
    names = {a.path for a in client.list_artifacts(parent_id)}
    assert {"sweep.csv", "sweep.md", "sweep.png", "sweep.json", "plan.txt"} <= names
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'"
    )
    assert len(children) == len(rows)
    by_id = {c.info.run_id: c for c in children}
    for row in rows:
        child = by_id[row["mlflow_run_id"]]
        assert child.info.run_name == row["config"]
        assert child.data.tags["sweep.status"] == row["status"]
        assert child.data.tags["sweep.safe_to_ship"] == row["safe_to_ship"]
        if row["status"] == "failed":
            assert child.info.status == "FAILED"
            assert child.data.tags["sweep.error"] == row["error"]
            assert "sweep.tps_median" not in child.data.metrics
        else:
            assert child.info.status == "FINISHED"
            assert child.data.metrics["sweep.tps_median"] == pytest.approx(
                float(row["tps_median"]), abs=0.01
            )
            assert child.data.tags["sweep.validity"] == row["validity"]
            assert child.data.tags["sweep.accuracy"] == row["accuracy"]
            assert child.data.params.get("engine.block_size") != "7"
            artifacts = {a.path for a in client.list_artifacts(child.info.run_id)}
            assert "result.json" in artifacts


def _check_common(
    out: Path, rows: list[dict[str, str]], names: list[str], refused: str = ""
) -> None:
    """Every config in order, each that started VALID and unconfounded; `refused` failed at
    engine start, in the engine's own words."""
    assert [r["config"] for r in rows] == names
    md = (out / "sweep.md").read_text()
    for r in rows:
        assert f"| {r['config']} |" in md
        if r["config"] == refused:
            assert r["status"] == "failed"
            # the engine's own words, not the wrappers around them
            assert "No common block size for 7" in r["error"], r["error"]
            assert r["safe_to_ship"] == "no"
            assert "No common block size for 7" in md
        else:
            assert r["status"] == "ok", r
            assert r["validity"] == "VALID" and float(r["tps_median"]) > 0
            assert r["confounded"] == ""
    png = (out / "sweep.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_isolation_and_stacked_sweeps(
    tiny_model, small_dataset, server, isolation_plan, stacked_plan, tmp_path
):
    stacked = tmp_path / "stacked"
    background = _Background.start(
        "stacked_sweep.sh",
        "--repeats",
        "1",
        "--output",
        str(stacked),
        "--mlflow-uri",
        server,
        "--experiment",
        "sweep-test",
        model=tiny_model,
        dataset=small_dataset,
        plan=stacked_plan,
        logs=tmp_path / "stacked-logs",
    )
    try:
        _isolation_sweep_and_resume(tiny_model, small_dataset, server, isolation_plan, tmp_path)
        proc = background.wait()
    finally:
        background.kill()
    _check_stacked(proc, stacked, server)


def _isolation_sweep_and_resume(tiny_model, small_dataset, server, isolation_plan, tmp_path):
    iso = tmp_path / "isolation"
    proc = _script(
        "isolation_sweep.sh",
        "--accuracy",
        "--repeats",  # one run per config keeps this test short; the default is 2
        "1",
        "--output",
        str(iso),
        "--mlflow-uri",
        server,
        "--experiment",
        "sweep-test",
        model=tiny_model,
        dataset=small_dataset,
        plan=isolation_plan,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = _csv(iso)
    _check_common(iso, rows, ISOLATION_CONFIGS, refused="block7")
    by = {r["config"]: r for r in rows}
    # accuracy ran for the config that started (random weights: FAIL, so nothing is safe)
    assert by["baseline"]["accuracy"] == "FAIL"
    assert "accuracy FAIL" in by["baseline"]["why_not_safe"]
    assert "--repeats 1: no run-to-run noise is measured" in proc.stdout
    _check_mlflow(server, iso, rows)

    # --resume: every repeat is finished, nothing runs again
    logs = {p: p.stat().st_mtime for p in iso.glob("*/rep*/run.log")}
    again = _script(
        "isolation_sweep.sh",
        "--accuracy",
        "--repeats",  # one run per config keeps this test short; the default is 2
        "1",
        "--output",
        str(iso),
        "--resume",
        "--no-mlflow",
        model=tiny_model,
        dataset=small_dataset,
        plan=isolation_plan,
        timeout=300,
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert {p: p.stat().st_mtime for p in iso.glob("*/rep*/run.log")} == logs
    assert [r["resumed"] for r in _csv(iso)] == ["1"] * len(ISOLATION_CONFIGS)


def _check_stacked(proc: subprocess.CompletedProcess, stacked: Path, server: str) -> None:
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = _csv(stacked)
    _check_common(stacked, rows, STACKED_CONFIGS)
    by = {r["config"]: r for r in rows}
    assert all(r["kept"] for r in rows[1:])
    assert all(r["accuracy"] == "not run" for r in rows)
    assert by["+seqs8"]["noise_verdict"] == "single run: noise unknown"
    assert by["+seqs8"]["delta_pct"] != ""
    seqs8 = json.loads((stacked / "01_plus-seqs8" / "rep1" / "result.json").read_text())
    assert seqs8["engine_args"]["max_num_seqs"] == 8
    # what the engine resolved, which the no-op rule compares knobs with
    assert seqs8["engine_resolved_args"]["max_num_seqs"] == 8
    # an environment knob: the variable reached the run (its log lists the engine's env)
    env_log = (stacked / "02_plus-kvspace2" / "rep1" / "run.log").read_text()
    assert "VLLM_CPU_KVCACHE_SPACE=2" in env_log
    # a knob that ran after a kept one carries both: engine args differ from the baseline in
    # exactly the accumulated keys (else the guard would have marked it confounded)
    kept = [r["config"][1:] for r in rows[1:] if r["kept"].startswith("kept")]
    final = json.loads((stacked / "sweep.json").read_text())["final_stack"]
    assert final == kept
    _check_mlflow(server, stacked, rows)
