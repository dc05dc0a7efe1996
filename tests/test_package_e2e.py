"""Calibrate -> Offline run (performance, accuracy and TEST06 on one engine: `run --test06`)
-> package -> check, and the same for a Server run, on the tiny model: three engine starts in
all (calibrate's measurement, the Offline run, the Server run), shared by every assertion
through module fixtures; the Server run is the session's `server_smoke_run` (conftest), shared
with test_server_e2e. The Offline run's TEST06 folder is named to `package --test06`, the
Server run's is found by `package` itself. (TEST06 as a run of its own, under
`--audit-config`, then `compliance test06`, is test_server_e2e's Interactive overload run.) The
other trees (edge, 70B, 405B, every round's folders) are packaged from copies of these runs
whose result.json names another benchmark or scenario: no further engine start.

A tiny-model run can never be a compliant result (3 s instead of 600 s, 24 samples, random
weights), so the checks split in two: the "structure" rules (files, fields, layout, round,
seeds, TEST06) must pass on a complete packaged tree and fail, by name, on each divergence
from what the official checker accepts; the "result" rules must fail, each for its own reason.

Time budget: 300 s: two engine starts of its own (the Server run is counted in
test_server_e2e's budget) and about 25 package / check commands without an engine (measured
141 s alone; twice that beside another engine on two cores).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.run.record.logs import DETAIL_LOG, parse_detail_log
from harness.submission.checker import check_submission_tree
from harness.submission.package import PackageRequest, package
from harness.submission.rounds import ROUND_NAMES, get_round
from tests.conftest import cli, package_args, run_args

pytestmark = pytest.mark.e2e

MAX_TOKENS = "32"  # keeps every run short on two shared CPU cores
MIN_DURATION_S = "3"
MARGIN = "2"
SYSTEM_FIELDS = (
    "--system-field",
    "status=available",
    "--system-field",
    "cooling=air",
    "--system-field",
    "host_memory_configuration=unknown (VM)",
    "--system-field",
    "accelerators_per_node=0",  # text: an answer; the number 0 reads as empty to the checker
)
FIELDS = {
    "status": "available",
    "cooling": "air",
    "host_memory_configuration": "unknown (VM)",
    "accelerators_per_node": "0",
}


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
        "--min-duration",
        MIN_DURATION_S,
        "--measure-samples",
        "600",
        # Two engines share two cores here: the measured rate can be well under the run's
        # (63 against 90 samples/s seen), which the default margin (1.25 x LoadGen's 1.1)
        # does not cover; a submission's GPU has no neighbour.
        "--margin",
        MARGIN,
        "--max-tokens",
        MAX_TOKENS,
        # not logged: the default store is the working directory, this clone (where another
        # worker's test checks that a refused command writes nothing)
        "--no-mlflow",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out / "user.conf", proc


@pytest.fixture(scope="module")
def offline(tiny_model, tiny_dataset, calibrated, tmp_path_factory):
    conf, _ = calibrated
    run = tmp_path_factory.mktemp("offline-run")
    proc = _run(tiny_model, tiny_dataset, run, "Offline", conf, "both", "--test06")
    t06 = json.loads((run / "result.json").read_text())["test06"]
    assert t06["passed"] is True and t06["samples"] == 100, t06
    assert "TEST06" in proc.stdout and "TEST06 verification complete" in proc.stdout
    return run, run, proc


@pytest.fixture(scope="module")
def server(server_smoke_run):
    # `--max-tokens 32`, as every run here (conftest.SERVER_MAX_TOKENS); its TEST06 ran on
    # its engine (`--test06`), the run's own TEST06 folder
    run = server_smoke_run.out
    assert json.loads((run / "result.json").read_text())["test06"]["passed"] is True
    return run, run


def _package(run, t06, root, *extra):
    """`mlperf-vllm package`; t06 None: no --test06 (package finds the run's own)."""
    return cli(*package_args(run, root, *(("--test06", str(t06)) if t06 else ()), *extra))


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
    assert qps == pytest.approx(
        measured["performance"]["samples_per_second"] * float(MARGIN), rel=0.01
    )

    run, _, run_proc = offline
    # VALID under the 3 s demo conf, and said to be no submission result
    result = json.loads((run / "result.json").read_text())
    assert result["round"] == "v6.1" and "min_duration" in result["not_compliant"]
    assert "NOT COMPLIANT for round v6.1: min_duration" in run_proc.stdout
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


def _failed(root, round_name=None, group=None):
    return {
        (r.rule, r.where.split("/results/")[-1]): r
        for r in check_submission_tree(root, round_name).results
        if not r.passed and (group is None or r.group == group)
    }


@pytest.fixture(scope="module")
def full_tree(offline, server, tmp_path_factory):
    """Offline packaged first (checked alone), then Server into the same tree."""
    run, t06, _ = offline
    root = tmp_path_factory.mktemp("tree") / "submission"
    proc = _package(run, t06, root, *SYSTEM_FIELDS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "round v6.1 (newest round with llama3.1-8b" in proc.stdout
    offline_only = _failed(root, group="structure")
    srun, _ = server
    proc = _package(srun, None, root, *SYSTEM_FIELDS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root, offline_only


def test_required_scenarios_offline_alone_fails_then_passes_with_server(full_tree):
    root, offline_only = full_tree
    (rule,) = [r for (name, _), r in offline_only.items() if name == "required-scenarios"]
    assert rule.where.endswith("results/tiny_cpu/llama3.1-8b")
    assert "Offline plus one of Server, Interactive" in rule.detail
    assert "missing Server or Interactive" in rule.detail
    assert set(offline_only) == {("required-scenarios", "tiny_cpu/llama3.1-8b")}
    assert not _failed(root, group="structure")  # Server added: every structure rule holds
    ok = cli("check-submission", str(root), "--structure-only")
    assert ok.returncode == 0, ok.stdout
    assert "against round v6.1 (newest round accepting llama3.1-8b" in ok.stdout


@pytest.mark.parametrize("which", ["offline", "server"])
def test_package_full_tree_and_checks(which, request, full_tree):
    if which == "offline":
        run, t06, _ = request.getfixturevalue("offline")
        scenario = "Offline"
    else:
        run, t06 = request.getfixturevalue("server")
        scenario = "Server"
    tree, _ = full_tree
    root = tree.parent / f"copy-{which}"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(tree, root)
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
    assert "--test06" in readme and "mlperf-vllm package --run" in readme
    assert "on the same engine" in readme
    assert "round v6.1" in readme
    system = json.loads((root / "closed" / "Demo" / "systems" / "tiny_cpu.json").read_text())
    assert system["host_processor_core_count"] and system["accelerators_per_node"] == "0"
    assert system["cooling"] == "air" and system["system_type"] == "datacenter"
    calibration = (root / "closed" / "Demo" / "documentation" / "calibration.md").read_text()
    assert "## llama3.1-8b Offline" in calibration and "## llama3.1-8b Server" in calibration

    results = check_submission_tree(root).results
    structure = _by_rule(results, "structure")
    assert {
        "layout",
        "round-benchmark",
        "system-type",
        "required-scenarios",
        "model-scenario",
        "system-json",
        "src-dir",
        "calibration-doc",
        "performance-files",
        "accuracy-files",
        "measurements",
        "accuracy-log-truncated",
        "accuracy-hash",
        "test06",
        "scenario-log",
        "seeds",
    } <= set(structure)
    assert all(r.passed for r in results if r.group == "structure"), [
        r for r in results if r.group == "structure" and not r.passed
    ]
    result = {r.rule: r for r in results if r.group == "result" and scenario in r.where}
    assert not result["min-duration"].passed and "600000" in result["min-duration"].detail
    assert not result["performance-sample-count"].passed
    assert not result["accuracy-targets"].passed  # random weights
    # the accuracy run covered the tiny dataset, not the benchmark's 13,368 samples
    assert not result["accuracy-dataset"].passed and "13368" in result["accuracy-dataset"].detail
    if scenario == "Offline":
        assert result["performance-valid"].passed
        assert not result["offline-samples-per-query"].passed
    else:
        assert "latency-limits" in result and "early-stopping" in result

    full = cli("check-submission", str(root), "--benchmark", "llama3_1-8b", "--scenario", scenario)
    last = full.stdout.splitlines()[-1]
    assert (
        full.returncode == 3
        and last.startswith(f"llama3.1-8b {scenario}: ")
        and "min-duration" in last
    )
    other = "Server" if scenario == "Offline" else "Offline"
    assert f"llama3.1-8b/{scenario}" in full.stdout and f"llama3.1-8b/{other}" not in full.stdout
    assert "elsewhere in the tree" in last  # the other scenario's result rules fail too

    # one file gone: its rule fails and names it
    (sdir / "accuracy" / "accuracy.txt").unlink()
    (sdir / "TEST06" / "verify_accuracy.txt").unlink()
    (root / "closed" / "Demo" / "documentation" / "calibration.md").unlink()
    failed = {r.rule: r for r in check_submission_tree(root).results if not r.passed}
    assert "accuracy.txt" in failed["accuracy-files"].detail
    assert "verify_accuracy.txt" in failed["test06"].detail
    assert "documentation/calibration.md" in failed["calibration-doc"].detail
    bad = cli("check-submission", str(root), "--structure-only")
    assert bad.returncode == 3 and "accuracy-files" in bad.stdout


def test_seeds_are_judged_by_the_round(full_tree):
    """LoadGen 6.0.17 writes round v6.1's seeds: the v6.0 check fails them by name."""
    root, _ = full_tree
    assert not _failed(root, "v6.1", "structure")
    failed = _failed(root, "v6.0", "structure")
    assert {name for name, _ in failed} == {"seeds"}
    detail = failed[("seeds", "tiny_cpu/llama3.1-8b/Offline")].detail
    assert "not round v6.0's but round v6.1's" in detail and "6.0.4 to 6.0.15" in detail
    proc = cli("check-submission", str(root), "--round", "v6.0", "--structure-only")
    assert proc.returncode == 3 and "round v6.0 (--round)" in proc.stdout
    assert proc.stdout.splitlines()[-1].endswith("failed: seeds")


def test_accuracy_dataset_passes_when_the_whole_dataset_was_run(full_tree, tmp_path):
    """The rule reads LoadGen's own count: a full accuracy run logs the dataset's size."""
    tree, _ = full_tree
    root = tmp_path / "sub"
    shutil.copytree(tree, root)
    detail = root / "closed/Demo/results/tiny_cpu/llama3.1-8b/Offline/accuracy" / DETAIL_LOG
    text = detail.read_text()
    for name in ("qsl_reported_total_count", "effective_accuracy_sample_count"):
        key = f'"key": "{name}", "value": 24,'
        assert key in text
        text = text.replace(key, key.replace("24", "13368"))
    detail.write_text(text)
    assert ("accuracy-dataset", "tiny_cpu/llama3.1-8b/Offline") not in _failed(root)
    assert ("accuracy-dataset", "tiny_cpu/llama3.1-8b/Server") in _failed(root)


def _retarget(run: Path, dest: Path, **fields) -> Path:
    """A copy of a real run folder whose result.json names another benchmark / scenario."""
    shutil.copytree(run, dest)
    result = json.loads((dest / "result.json").read_text())
    result.update(fields)
    (dest / "result.json").write_text(json.dumps(result))
    return dest


def test_edge_benchmark_needs_an_edge_system(offline, tmp_path):
    run, t06, _ = offline
    edge = _retarget(run, tmp_path / "edge-run", benchmark="llama3_1-8b-edge")
    root = tmp_path / "edge"
    proc = _package(edge, t06, root, *SYSTEM_FIELDS, "--system-field", "system_type=datacenter")
    assert proc.returncode == 0, proc.stderr
    failed = _failed(root, group="structure")
    rule = failed[("system-type", "tiny_cpu/llama3.1-8b-edge")]
    assert "needs a system_type of 'edge'" in rule.detail and "system_type=edge" in rule.detail
    assert ("model-scenario", "tiny_cpu/llama3.1-8b-edge/Offline") not in failed
    shutil.rmtree(root)
    proc = _package(edge, t06, root, *SYSTEM_FIELDS)  # package writes edge for -edge itself
    assert proc.returncode == 0, proc.stderr
    system = json.loads((root / "closed/Demo/systems/tiny_cpu.json").read_text())
    assert system["system_type"] == "edge"
    assert not (root / "closed/Demo/results/tiny_cpu/llama3.1-8b-edge/Offline/TEST06").exists()
    failed = _failed(root, group="structure")
    assert set(failed) == {("required-scenarios", "tiny_cpu/llama3.1-8b-edge")}
    assert (
        "missing SingleStream" in failed[("required-scenarios", "tiny_cpu/llama3.1-8b-edge")].detail
    )
    # the datacenter llama3.1-8b run into the same system: it becomes "datacenter,edge"
    proc = _package(run, t06, root, *SYSTEM_FIELDS)
    system = json.loads((root / "closed/Demo/systems/tiny_cpu.json").read_text())
    assert system["system_type"] == "datacenter,edge"
    assert ("system-type", "tiny_cpu/llama3.1-8b") not in _failed(root)


def test_round_benchmark_lists(offline, tmp_path):
    run, t06, _ = offline
    r70 = _retarget(run, tmp_path / "70b-run", benchmark="llama2-70b")
    root = tmp_path / "70b"
    level_99 = ("--accuracy-level", "99")
    refused = _package(r70, t06, root, *SYSTEM_FIELDS, *level_99, "--round", "v6.1")
    err = refused.stderr.strip()
    assert refused.returncode == 2 and "\n" not in err and not root.exists()
    assert "round v6.1 does not accept llama2-70b-99 (rounds with it: v6.0)" in err
    proc = _package(r70, t06, root, *SYSTEM_FIELDS, *level_99)
    assert proc.returncode == 0 and "round v6.0 (newest round with llama2-70b-99;" in proc.stdout
    failed = _failed(root, "v6.1")
    rule = failed[("round-benchmark", "tiny_cpu/llama2-70b-99")]
    assert "round v6.1 does not accept model folder llama2-70b-99" in rule.detail
    assert "--round v6.0" in rule.detail
    assert ("round-benchmark", "tiny_cpu/llama2-70b-99") not in _failed(root, "v6.0")
    # no level, no round: the level the newest round accepts (v6.1: 99.9 only)
    proc = _package(r70, t06, root, *SYSTEM_FIELDS)
    assert proc.returncode == 0, proc.stderr
    assert "round v6.1 (newest round with llama2-70b-99.9;" in proc.stdout
    assert (root / "closed/Demo/results/tiny_cpu/llama2-70b-99.9/Offline").is_dir()


@pytest.mark.parametrize("round_name", ROUND_NAMES)
def test_every_folder_we_write_is_one_the_round_accepts(round_name, offline, server, tmp_path):
    """Every benchmark / scenario / accuracy level we support, packaged for the round: either
    refused up front (the round lacks it) or written where the round's rules accept it."""
    from harness.benchmarks import BENCHMARKS

    rnd = get_round(round_name)
    runs = {"Offline": offline[0], "Server": server[0]}
    root = tmp_path / "sub"
    written, refused = set(), set()
    for name, bench in BENCHMARKS.items():
        for scenario in bench.scenarios:
            for level in bench.accuracy_levels:
                src = runs["Offline" if scenario in ("Offline", "SingleStream") else "Server"]
                tag = f"{name}-{scenario}-{level}"
                run = _retarget(src, tmp_path / tag, benchmark=name, scenario=scenario)
                req = PackageRequest(
                    run=run,
                    system=f"sys-{name}",
                    submitter="Demo",
                    out=root,
                    test06=offline[1],
                    accuracy_level=level,
                    round=round_name,
                    system_fields=FIELDS,
                )
                try:
                    report = package(req)
                except UsageError as exc:
                    assert f"round {round_name} does not accept" in str(exc), str(exc)
                    refused.add((name.removesuffix("-interactive"), level))
                    continue
                folder, scen = report.scenario_dir.parent.name, report.scenario_dir.name
                assert rnd.model(folder) is not None and scen == scenario
                written.add((folder, scen))
    results = check_submission_tree(root, round_name).results
    layout = {"round-benchmark", "system-type", "model-scenario", "test06"}
    assert all(r.passed for r in results if r.rule in layout), [
        r for r in results if r.rule in layout and not r.passed
    ]
    # what the round has, we can write; what it lacks, we refuse
    assert {f for f, _ in written} == set(rnd.folders())
    if round_name == "v6.1":
        assert refused == {("llama2-70b", "99"), ("llama3_1-405b", "99")}
    else:
        assert not refused
    assert ("llama3.1-8b-edge", "SingleStream") in written
    assert ("llama3.1-8b", "Interactive") in written


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
    """A falsy field (accelerators_per_node 0 on a host without GPUs) is empty to the checker:
    listed to fill in with the flag that sets it, failed by system-json, fixed by the flag."""
    run, t06, _ = offline
    root = tmp_path / "submission"
    proc = _package(run, t06, root)
    assert proc.returncode == 0, proc.stderr
    todo = next(ln for ln in proc.stdout.splitlines() if ln.startswith("to fill in"))
    for key in ("status", "cooling", "host_memory_configuration", "accelerators_per_node"):
        assert f"--system-field {key}=" in todo
    assert "--system-field status=available|preview|rdi" in todo
    system = json.loads((root / "closed/Demo/systems/tiny_cpu.json").read_text())
    assert system["accelerators_per_node"] == 0  # what this machine reports
    failed = {r.rule: r for r in check_submission_tree(root).results if not r.passed}
    assert "accelerators_per_node" in failed["system-json"].detail
    assert "--system-field accelerators_per_node=" in failed["system-json"].detail
    proc = _package(run, t06, root, *SYSTEM_FIELDS)
    assert "to fill in" not in proc.stdout
    failed = {r.rule: r for r in check_submission_tree(root).results if not r.passed}
    assert "system-json" not in failed


def test_package_fills_the_system_json_from_the_machine_that_ran(offline, tmp_path):
    """The system json describes the machine in the run's environment.json (an eight-GPU node
    here, packaged on this CPU host): accelerators, their count and memory, the host CPU,
    memory and OS, the driver and the software versions. Only what no machine can know is left
    for the user, listed with its flag: the availability (status) and the cooling."""
    run, t06, _ = offline
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    env = json.loads((copy / "environment.json").read_text())
    node = {
        "host_processor_model_name": "INTEL(R) XEON(R) PLATINUM 8568Y+",
        "host_processors_per_node": 2,
        "host_processor_core_count": "96",
        "host_memory_capacity": "2048 GB",
        "host_memory_configuration": "32 x 64 GB DDR5",
        "host_storage_capacity": "30720 GB",
        "host_storage_type": "NVMe SSD",
        "host_network_card_count": "10",
        "operating_system": "Ubuntu 22.04.5 LTS (kernel 5.15.0-134-generic)",
        "accelerators_per_node": 8,
        "accelerator_model_name": "NVIDIA H200",
        "accelerator_memory_capacity": "143771 MiB",
        "accelerator_host_interconnect": "PCIe Gen5 x16",
        "accelerator_frequency": "1980 MHz",
        "accelerator_memory_configuration": "HBM3e",
        "accelerator_interconnect": "NVLink, 18 links per GPU, 478 GB/s per GPU",
    }
    env.update(machine=node, gpu_driver="570.124.06", gpu_count="8")
    (copy / "environment.json").write_text(json.dumps(env))
    root = tmp_path / "submission"
    proc = _package(copy, t06, root)
    assert proc.returncode == 0, proc.stderr
    system = json.loads((root / "closed/Demo/systems/tiny_cpu.json").read_text())
    assert {k: system[k] for k in node} == node
    assert "NVIDIA driver 570.124.06" in system["other_software_stack"]
    assert system["framework"].startswith("vLLM ")
    (todo,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("to fill in")]
    asked = sorted(re.findall(r"--system-field (\w+)=", todo))
    assert asked == ["cooling", "status"], todo
    assert system["status"] == "" and system["cooling"] == ""
    proc = _package(
        copy, t06, root, "--system-field", "status=available", "--system-field", "cooling=liquid"
    )
    assert "to fill in" not in proc.stdout
    failed = {r.rule for r in check_submission_tree(root).results if not r.passed}
    assert "system-json" not in failed


@pytest.mark.skipif(
    not os.environ.get("MLPERF_INFERENCE_REPO"),
    reason="MLPERF_INFERENCE_REPO names no clone of github.com/mlcommons/inference here",
)
def test_the_official_checker_judges_the_packaged_tree(full_tree):
    """The real MLCommons checker on the packaged CPU tree (Offline + Server): it runs to its
    summary. A tiny-model run is no compliant result (3 s, 24 samples), so it must report
    errors, as our own "result" rules do; our command exits 3 and shows its lines."""
    root, _ = full_tree
    proc = cli("check-submission", str(root), "--official", os.environ["MLPERF_INFERENCE_REPO"])
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "official checker: FAIL" in proc.stdout and "SUMMARY" in proc.stdout
