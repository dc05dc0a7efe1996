"""Calibrate -> Offline run -> TEST06 -> package -> check, and the same for a Server run, on
the tiny model: five engine starts in all (calibrate's measurement, the Offline run, its TEST06
run, the Server run, its TEST06 run), shared by every assertion through module fixtures.

A tiny-model run can never be a compliant result (3 s instead of 600 s, 24 samples, random
weights), so the checks split in two: the "structure" rules (files, fields, truncation, hash,
TEST06) must pass on the packaged tree; the "result" rules must fail, each for its own reason.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.logs import DETAIL_LOG, parse_detail_log
from harness.package import check_submission_tree
from tests.conftest import REPO, SMOKE, cli, run_args

pytestmark = pytest.mark.e2e

MAX_TOKENS = "32"  # keeps every run short on two shared CPU cores
MIN_DURATION_S = "3"
AUDIT = REPO / "user_confs" / "audit" / "TEST06.config"
SYSTEM_FIELDS = (
    "--system-field",
    "cooling=air",
    "--system-field",
    "host_memory_configuration=unknown (VM)",
)


def _run(model, dataset, out, scenario, conf, mode, *extra):
    proc = cli(
        *run_args(
            model,
            dataset,
            out,
            conf,
            "--max-tokens",
            MAX_TOKENS,
            *extra,
            scenario=scenario,
            mode=mode,
        )
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _test06(model, dataset, out, scenario, conf):
    _run(model, dataset, out, scenario, conf, "performance", "--audit-config", str(AUDIT))
    proc = cli(
        "compliance",
        "test06",
        "--log-dir",
        str(out / "performance"),
        "--model",
        str(model),
        "--output",
        str(out),
        "--strict",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="module")
def calibrated(tiny_model, tiny_dataset, tmp_path_factory):
    out = tmp_path_factory.mktemp("calibrate")
    proc = cli(
        "calibrate",
        "--benchmark",
        "llama3_1-8b",
        "--scenario",
        "Offline",
        "--model",
        str(tiny_model),
        "--dataset",
        str(tiny_dataset),
        "--output",
        str(out),
        "--min-duration-s",
        MIN_DURATION_S,
        "--measure-samples",
        "600",
        "--max-tokens",
        MAX_TOKENS,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out / "user.conf", proc


@pytest.fixture(scope="module")
def offline(tiny_model, tiny_dataset, calibrated, tmp_path_factory):
    conf, _ = calibrated
    run = tmp_path_factory.mktemp("offline-run")
    proc = _run(tiny_model, tiny_dataset, run, "Offline", conf, "both")
    t06 = _test06(tiny_model, tiny_dataset, tmp_path_factory.mktemp("offline-t06"), "Offline", conf)
    return run, t06, proc


@pytest.fixture(scope="module")
def server(tiny_model, tiny_dataset, tmp_path_factory):
    run = tmp_path_factory.mktemp("server-run")
    _run(tiny_model, tiny_dataset, run, "Server", SMOKE / "server.conf", "both")
    t06 = _test06(
        tiny_model,
        tiny_dataset,
        tmp_path_factory.mktemp("server-t06"),
        "Server",
        SMOKE / "server.conf",
    )
    return run, t06


def _package(run, t06, root, *extra):
    return cli(
        "package",
        "--run",
        str(run),
        "--test06",
        str(t06),
        "--system",
        "tiny_cpu",
        "--submitter",
        "Demo",
        "--out",
        str(root),
        *extra,
    )


def test_calibrated_conf_meets_min_duration(calibrated, offline):
    conf, proc = calibrated
    text = conf.read_text()
    # the measured line, explained, on top of the compliant base conf
    assert "llama3_1-8b.Offline.target_qps = " in text
    assert "# measured:" in text and "samples/s" in text and "COMPLIANT user.conf" in text
    assert "llama3_1-8b.Offline.min_duration = 3000" in text and "NOT COMPLIANT" in text
    assert text.startswith("# NOT COMPLIANT")  # a demo conf says so on its first line
    lines = [ln for ln in text.splitlines() if ln.startswith("llama3_1-8b.Offline.target_qps = ")]
    assert len(lines) == 1
    qps = float(lines[0].split("= ")[1])
    measured = json.loads((conf.parent / "measure-offline" / "result.json").read_text())
    assert qps == pytest.approx(measured["performance"]["samples_per_second"] * 1.25, rel=0.01)

    run, _, _ = offline
    v = parse_detail_log(run / "performance" / DETAIL_LOG).values
    assert v["effective_min_duration_ms"] == 3000
    assert v["result_min_duration_met"] is True, v.get("result_invalid_reason")
    assert v["result_validity"] == "VALID"
    assert v["effective_samples_per_query"] >= 24  # the whole (tiny) dataset


def _expect_tree(root: Path, scenario: str) -> Path:
    sdir = root / "closed" / "Demo" / "results" / "tiny_cpu" / "llama3.1-8b" / scenario
    for rel in (
        "performance/run_1/mlperf_log_summary.txt",
        "performance/run_1/mlperf_log_detail.txt",
        "accuracy/mlperf_log_summary.txt",
        "accuracy/mlperf_log_detail.txt",
        "accuracy/accuracy.txt",
        "accuracy/mlperf_log_accuracy.json",
        "TEST06/verify_accuracy.txt",
        "TEST06/accuracy/mlperf_log_accuracy.json",
        "measurements.json",
        "user.conf",
        "README.md",
    ):
        assert (sdir / rel).is_file(), rel
    assert (root / "closed" / "Demo" / "systems" / "tiny_cpu.json").is_file()
    assert (root / "closed" / "Demo" / "src").is_dir()
    return sdir


def _by_rule(results, group):
    return {r.rule: r for r in results if r.group == group}


@pytest.mark.parametrize("which", ["offline", "server"])
def test_package_full_tree_and_checks(which, request, tmp_path, tiny_model):
    if which == "offline":
        run, t06, _ = request.getfixturevalue("offline")
        scenario = "Offline"
    else:
        run, t06 = request.getfixturevalue("server")
        scenario = "Server"
    root = tmp_path / "submission"
    proc = _package(run, t06, root, *SYSTEM_FIELDS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sdir = _expect_tree(root, scenario)

    # accuracy logs over 10 KiB are truncated to their two ends (TEST06 logs 100 samples, so
    # its log always is); accuracy.txt carries the hash of the original log either way
    import hashlib

    for src, dest in (
        (run / "accuracy", sdir / "accuracy"),
        (t06 / "TEST06" / "accuracy", sdir / "TEST06" / "accuracy"),
    ):
        original = (src / "mlperf_log_accuracy.json").read_bytes()
        packaged = (dest / "mlperf_log_accuracy.json").read_bytes()
        if len(original) > 10 * 1024:
            assert len(packaged) <= 10 * 1024 and b"\n\n...\n\n" in packaged
            assert packaged.startswith(original[:4096]) and packaged.endswith(original[-4096:])
        else:
            assert packaged == original
        assert f"hash={hashlib.sha256(original).hexdigest()}" in (dest / "accuracy.txt").read_text()
    assert (t06 / "TEST06" / "accuracy" / "mlperf_log_accuracy.json").stat().st_size > 10 * 1024
    readme = (sdir / "README.md").read_text()
    assert f"mlperf-vllm run --benchmark llama3_1-8b --scenario {scenario} --mode both" in readme
    assert "--audit-config" in readme and "mlperf-vllm package --run" in readme
    system = json.loads((root / "closed" / "Demo" / "systems" / "tiny_cpu.json").read_text())
    assert system["host_processor_core_count"] and system["accelerators_per_node"] == 0
    assert system["cooling"] == "air"

    results = check_submission_tree(root)
    structure = _by_rule(results, "structure")
    assert {
        "layout",
        "model-scenario",
        "system-json",
        "src-dir",
        "performance-files",
        "accuracy-files",
        "measurements",
        "accuracy-log-truncated",
        "accuracy-hash",
        "test06",
    } <= set(structure)
    assert all(r.passed for r in structure.values()), [
        r for r in structure.values() if not r.passed
    ]
    result = _by_rule(results, "result")
    assert not result["min-duration"].passed and "600000" in result["min-duration"].detail
    assert not result["performance-sample-count"].passed
    assert not result["accuracy-targets"].passed  # random weights
    if scenario == "Offline":
        assert result["performance-valid"].passed
        assert not result["offline-samples-per-query"].passed

    ok = cli("check-submission", str(root), "--structure-only")
    assert ok.returncode == 0, ok.stdout
    full = cli("check-submission", str(root))
    assert full.returncode == 3 and "min-duration" in full.stdout.splitlines()[-1]

    # one file gone: its rule fails and names it
    (sdir / "accuracy" / "accuracy.txt").unlink()
    (sdir / "TEST06" / "verify_accuracy.txt").unlink()
    failed = {r.rule: r for r in check_submission_tree(root) if not r.passed}
    assert "accuracy.txt" in failed["accuracy-files"].detail
    assert "verify_accuracy.txt" in failed["test06"].detail
    bad = cli("check-submission", str(root), "--structure-only")
    assert bad.returncode == 3 and "accuracy-files" in bad.stdout


def test_package_refuses_missing_inputs_and_writes_nothing(offline, tmp_path):
    run, t06, _ = offline
    partial = tmp_path / "run"
    shutil.copytree(run, partial)
    (partial / "accuracy" / "accuracy.txt").unlink()
    root = tmp_path / "submission"
    proc = _package(partial, tmp_path / "no-test06", root)
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert err.count("\n") == 0 and "accuracy.txt" in err and "TEST06" in err
    assert not root.exists()


def test_package_without_system_fields_names_what_to_fill(offline, tmp_path):
    run, t06, _ = offline
    root = tmp_path / "submission"
    proc = _package(run, t06, root)
    assert proc.returncode == 0, proc.stderr
    assert "cooling" in proc.stdout and "host_memory_configuration" in proc.stdout
    failed = {r.rule: r for r in check_submission_tree(root) if not r.passed}
    assert "cooling" in failed["system-json"].detail
