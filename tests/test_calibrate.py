"""Calibrate's logic without an engine: the conf it writes, its bad input (the Server search and
its pass rule are in test_timeline.py).

The end-to-end check (calibrate on the tiny model, then an Offline run with the written conf
meets min duration) is in test_package_e2e.py, which reuses that run for packaging.
"""

from __future__ import annotations

import pytest

from harness.calibrate.conf import conf_key_lines
from harness.calibrate.record import CalibrationRecord
from tests.conftest import cli


def test_base_conf_lines_we_set_are_commented_out():
    base = (
        "# header\nllama3_1-8b.Offline.target_qps = 1\n"
        "llama3_1-8b.Server.target_qps = 3 # keep\n*.Offline.min_duration = 5\n"
    )
    out = conf_key_lines(base, ["target_qps"])
    assert "# (replaced by calibrate) llama3_1-8b.Offline.target_qps = 1" in out
    assert "# (replaced by calibrate) llama3_1-8b.Server.target_qps = 3 # keep" in out
    assert "\n*.Offline.min_duration = 5" in out


def test_calibrate_bad_input_is_one_line(tmp_path):
    proc = cli(
        "calibrate",
        "--benchmark",
        "llama3_1-8b",
        "--scenario",
        "Offline",
        "--model",
        str(tmp_path / "nope"),
        "--dataset",
        str(tmp_path / "d.json"),
        "--output",
        str(tmp_path / "out"),
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("error: model") and "--model" in proc.stderr


def test_a_target_too_slow_for_early_stopping_gets_a_min_query_count():
    """9.9 QPS for 32 s issues ~317 queries: LoadGen could never certify the p99 (INVALID
    however fast the engine), so the conf asks for 662; a base conf's higher count stays.
    LoadGen pads the count to whole passes over the loaded samples (equal issue), so over a
    whole dataset the padding already issues enough, and the conf says how long it runs."""
    from harness.calibrate.conf import early_stopping_lines, padded_over

    lines = early_stopping_lines("llama3_1-8b", 9.9, 32, "", 0)
    assert lines[-1] == "llama3_1-8b.Server.min_query_count = 662"
    assert "issues about 317" in lines[0] and lines[0].startswith("#")
    base = "*.Server.min_query_count = 1000\n"
    assert early_stopping_lines("llama3_1-8b", 9.9, 32, base, 0)[-1].endswith("= 1000")
    assert early_stopping_lines("llama3_1-8b", 30.0, 32, "", 0) == []  # 961 queries: enough
    # 317 by time, padded over 40 loaded samples to 320: still short; 662 pads to 680
    padded = early_stopping_lines("llama3_1-8b", 9.9, 32, "", 40)
    assert padded[-1].endswith("= 662") and "issues 680 and lasts about 69 s" in padded[0]
    # the 405B at 0.7 QPS over its 8,313 samples: one pass, no count needed, 3.3 h said
    (slow,) = early_stopping_lines("llama3_1-405b", 0.7, 600, "", 8313)
    assert slow.startswith("#") and "8,313 queries" in slow and "11,876 s" in slow
    # three passes over the 8B's 13,368: 802 s for a 600 s run, said too
    (longer,) = early_stopping_lines("llama3_1-8b", 50.0, 600, "", 13368)
    assert "40,104 queries" in longer and "802 s" in longer
    assert early_stopping_lines("llama3_1-8b", 22.0, 600, "", 13368) == []  # 607 s: within 10%
    # what the base conf says of the padding
    assert padded_over("", "llama3_1-8b", 13368) == 13368
    override = "llama3_1-8b.Server.performance_sample_count_override = 500\n"
    assert padded_over(override, "llama3_1-8b", 13368) == 500
    assert padded_over(override, "llama2-70b", 24576) == 24576  # another model's line
    assert padded_over("*.*.sample_concatenate_permutation = 0\n", "llama3_1-8b", 13368) == 0


def _perf(valid: bool, kept_up: bool = True) -> dict:
    """A confirmation run's performance result, as `run_once` returns it."""
    return {
        "validity": "VALID" if valid else "INVALID",
        "invalid_reasons": [] if valid else ["latency constraints not met"],
        "duration_s": 60.0,
        "samples_per_second": 77.4,
        "ttft_p99_ms": 70.7,
        "tpot_p99_ms": 12.8 if valid else 31.2,
        "sustained": {"kept_up": kept_up},
    }


def _confirm(monkeypatch, tmp_path, outcomes, **flags):
    """`confirm_target` from 100 QPS with backoff 0.1, each full-duration run replaced by the
    next of `outcomes`. The fault under test, runs of one conf that differ (an H200 measured
    TPOT p99 12.8 ms, then 31.2 ms, in two 60 s runs at one rate), cannot be caused on demand
    here; the real confirmation runs are in test_calibrate_e2e."""
    from pathlib import Path

    from harness.calibrate import server as calibrate_server
    from harness.calibrate.request import CalibrateRequest

    script, ran, written = iter(outcomes), [], []

    def run_once(req, scenario, conf, out, label=""):
        ran.append(out.name)
        return next(script)

    monkeypatch.setattr(calibrate_server, "run_once", run_once)
    req = CalibrateRequest(
        "llama3_1-8b", "Interactive", Path("m"), Path("d"), tmp_path, backoff=0.1, confirm=True,
        **flags,
    )  # fmt: skip
    record = CalibrationRecord(
        "llama3_1-8b", "llama3_1-8b-interactive", "Interactive", {}, 1.0, 120.0, 1, 120.0,
        1000, 60.0, [], 105.0, 0.1, {}, written_qps=100.0,
    )  # fmt: skip
    qps, evidence = calibrate_server.confirm_target(
        req,
        "llama3_1-8b-interactive",
        tmp_path / "user.conf",
        lambda target, lines: written.append((target, list(lines))),
        100.0,
        record,
    )
    return qps, evidence, ran, record, written


def test_a_target_is_confirmed_only_by_the_passes_asked_for_in_a_row(monkeypatch, tmp_path):
    """--confirm-passes 2: a held run is repeated at its target; a run that fails (INVALID, or
    VALID with its engine falling behind) steps the target down and starts the count again."""
    import json

    outcomes = [_perf(True), _perf(True, kept_up=False), _perf(True), _perf(True)]
    qps, evidence, ran, record, written = _confirm(
        monkeypatch, tmp_path, outcomes, confirm_runs=4, confirm_passes=2
    )
    assert ran == ["confirm-1-qps-100", "confirm-2-qps-100", "confirm-3-qps-90", "confirm-4-qps-90"]
    assert qps == 90.0 and written[-1][0] == 90.0
    assert evidence[-1] == "# confirmed: 2 runs in a row of the conf's full duration held 90 QPS"
    assert [r.held for r in record.confirmations or []] == [True, False, True, True]
    assert record.confirmed_qps == 90.0 and record.confirm_passes == 2
    written_record = json.loads((tmp_path / "calibration.json").read_text())
    assert written_record["confirmed_qps"] == 90.0
    assert CalibrationRecord.read(tmp_path / "calibration.json") == record


def test_one_pass_confirms_on_the_first_held_run(monkeypatch, tmp_path):
    qps, evidence, ran, record, _ = _confirm(monkeypatch, tmp_path, [_perf(True)])
    assert (qps, ran) == (100.0, ["confirm-1-qps-100"])
    assert evidence[-1] == "# confirmed: a run of the conf's full duration held 100 QPS"


def test_no_target_held_in_a_row_is_not_confirmed(monkeypatch, tmp_path):
    outcomes = [_perf(True), _perf(False), _perf(True)]
    qps, evidence, ran, record, _ = _confirm(
        monkeypatch, tmp_path, outcomes, confirm_runs=3, confirm_passes=2
    )
    assert qps is None and record.confirmed_qps is None and len(ran) == 3
    assert evidence[-1] == (
        "# NOT CONFIRMED: no target was held by 2 runs in a row (last tried 90 QPS)"
    )


def test_more_passes_than_runs_is_refused_before_any_run(tiny_model, tiny_dataset, tmp_path):
    out = tmp_path / "cal"
    proc = cli(
        *("calibrate", "--benchmark", "llama3_1-8b", "--scenario", "Server"),
        *("--model", str(tiny_model), "--dataset", str(tiny_dataset), "--output", str(out)),
        *("--confirm", "--confirm-runs", "2", "--confirm-passes", "3"),
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert "--confirm-passes 3" in line and "--confirm-runs (2)" in line
    assert not out.exists()  # nothing made: the folder the command locked is gone again


# calibration.json as calibrate wrote it before the record was typed (a capacity sweep reads
# such files back): the same keys, in the same order, and the file reads.
OLD_RECORD = {
    "benchmark": "llama3_1-8b",
    "loadgen_model": "llama3_1-8b",
    "scenario": "Server",
    "limits_ms": {"ttft_p99": 2000.0, "tpot_p99": 100.0},
    "engine_start_s": 41.5,
    "offline_samples_per_second": 12.0,
    "gpus": 1,
    "offline_samples_per_second_per_gpu": 12.0,
    "measure_samples": 1000,
    "trial_s": 60.0,
    "trials": [
        {
            "name": "trial", "target_qps": 10.8, "duration_s": 60.0, "loaded_samples": 700,
            "passed": True, "reasons": [], "notes": [], "validity": "VALID",
            "ttft_p99_ms": 900.0, "tpot_p99_ms": 40.0, "completed_qps": 10.7, "queries": 650,
            "wall_s": 66.0, "sustained": {"kept_up": True}, "log_dir": "trials/01-trial-10.8",
            "extra": {"peak_engine_in_flight": 30},
        }
    ],
    "highest_passing_qps": 10.8,
    "backoff": 0.05,
    "run": {"engine_args": {"max_num_seqs": 64}},
    "written_qps": 10.26,
}  # fmt: skip


def test_calibration_json_keeps_its_keys_and_old_files_read(tmp_path):
    import json

    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(OLD_RECORD))
    record = CalibrationRecord.read(path)
    assert record.highest_passing_qps == 10.8 and record.trials[0].passed
    assert record.confirmations is None
    assert record.to_dict() == OLD_RECORD
    assert list(record.to_dict()) == list(OLD_RECORD)
    record.write(tmp_path / "again.json")
    assert json.loads((tmp_path / "again.json").read_text()) == OLD_RECORD
    path.write_text('{"benchmark": "llama3_1-8b"}')
    with pytest.raises(ValueError):
        CalibrationRecord.read(path)


def test_a_capacity_repeat_reads_its_calibration_record(tmp_path):
    """The sweep's side: the highest passing target and the engine args of calibration.json;
    a file that is no record leaves the repeat failed, naming the file."""
    import json

    from harness.run.execute.child import ChildOutcome, ChildRun
    from harness.run.setup.spec import RunSpec
    from harness.sweep.repeat import capacity_outcome

    spec = RunSpec(
        benchmark="llama3_1-8b",
        scenario="Server",
        model=tmp_path / "m",
        dataset=tmp_path / "d",
        output=tmp_path,
    )
    ran = ChildOutcome(
        ChildRun(spec, command="calibrate"), 0, None, tmp_path / "run.log", 9.0, None
    )
    (tmp_path / "calibration.json").write_text(json.dumps(OLD_RECORD))
    outcome = capacity_outcome(ran)
    assert (outcome.status, outcome.capacity_qps) == ("ok", 10.8)
    assert outcome.engine_args == {"max_num_seqs": 64}
    (tmp_path / "calibration.json").write_text("{}")
    outcome = capacity_outcome(ran)
    assert outcome.status == "failed" and "calibration.json" in (outcome.error or "")
