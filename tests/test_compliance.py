"""TEST06 checks on hand-made accuracy logs (the e2e run on real output is in test_server_e2e.py).

The records are built the way LoadGen writes them: `data` and `token_data` are the hex of the
int32 ids the SUT sent, `token_count` the n_tokens it reported.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.errors import UsageError
from harness.submission.compliance import check_test06, run_test06, trailing_eos

EOS = 1


def _record(i: int, data: list[int], first: list[int] | None, count: int | None = None) -> dict:
    rec = {
        "seq_id": i,
        "qsl_idx": i,
        "data": np.asarray(data, np.int32).tobytes().hex().upper(),
        "token_count": len(data) if count is None else count,
    }
    if first is not None:
        rec["token_data"] = np.asarray(first, np.int32).tobytes().hex().upper()
    return rec


def _log(tmp_path: Path, records: list[dict]) -> Path:
    d = tmp_path / "logs"
    d.mkdir(exist_ok=True)
    (d / "mlperf_log_accuracy.json").write_text(json.dumps(records))
    return d


GOOD = [
    _record(0, [5, 6, 7, EOS], [5]),
    _record(1, [9, 9, 9], [9, 9]),  # first delta of two ids, no EOS (max_tokens reached)
    _record(2, [4, EOS], [4]),
]


def test_good_log_passes_and_writes_checker_lines(tmp_path):
    d = _log(tmp_path, GOOD)
    result, verify = run_test06(d, eos_token_ids=[EOS], scenario="Server")
    assert result.passed and result.samples == 3
    assert verify == d / "TEST06" / "verify_accuracy.txt"
    lines = verify.read_text().splitlines()
    # The exact lines the submission checker's TEST06 check matches.
    assert lines == [
        "First token check pass: True",
        "EOS check pass: True",
        "Sample length check pass: True",
        "TEST06 verification complete",
    ]
    assert (d / "TEST06" / "accuracy" / "mlperf_log_accuracy.json").read_text() == (
        d / "mlperf_log_accuracy.json"
    ).read_text()


@pytest.mark.parametrize(
    "bad, failing",
    [
        (_record(3, [5, 6, 7], [6]), "first"),  # first token not a prefix
        (_record(3, [5, 6], [5, 6, 7]), "first"),  # first tokens longer than the output
        (_record(3, [5, 6], None), "first"),  # no first token logged in a Server run
        (_record(3, [5, EOS, EOS], [5]), "eos"),
        (_record(3, [EOS, EOS], [EOS]), "eos"),  # the MLCommons loop misses this one
        (_record(3, [5, 6, EOS], [5], count=4), "length"),
    ],
)
def test_each_corruption_fails_its_check(tmp_path, bad, failing):
    result = check_test06(_log(tmp_path, [*GOOD, bad]) / "mlperf_log_accuracy.json", [EOS])
    assert not result.passed
    assert (result.first_token_pass is False) == (failing == "first")
    assert (not result.eos_pass) == (failing == "eos")
    assert (not result.length_pass) == (failing == "length")
    assert any("qsl_idx 3" in p for p in result.problems)
    assert result.text().endswith("TEST06 verification failed\n")


def test_offline_skips_the_first_token_check(tmp_path):
    d = _log(tmp_path, [_record(0, [5, EOS], None)])
    result, verify = run_test06(d, eos_token_ids=[EOS], scenario="Offline")
    assert result.passed and result.first_token_pass is None
    assert verify.read_text().startswith("First token check pass: Skipped\n")


def test_every_eos_id_of_the_model_counts():
    data = np.asarray([3, 128009, 128001], np.int32)
    assert trailing_eos(data, [128001, 128008, 128009]) == 2
    assert trailing_eos(data, [128001]) == 1


def test_eos_id_comes_from_the_runs_model(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 8]}))
    d = _log(tmp_path, [_record(0, [5, 7], [5]), _record(1, [5, 8, 7], [5])])
    (tmp_path / "result.json").write_text(json.dumps({"model": str(model)}))
    result, _ = run_test06(d)  # model from ../result.json, scenario defaults to Server
    assert result.eos_token_ids == (7, 8)
    assert not result.eos_pass  # [5, 8, 7] ends with two EOS ids


def test_cli_reports_and_strict_exit_code(tmp_path, capsys):
    d = _log(tmp_path, [*GOOD, _record(3, [5, EOS, EOS], [5])])
    out = tmp_path / "sub"
    assert (
        main(
            [
                "compliance",
                "test06",
                "--log-dir",
                str(d),
                "--eos-token-id",
                str(EOS),
                "--output",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "EOS check pass: False" in text and "qsl_idx 3" in text
    assert (out / "TEST06" / "verify_accuracy.txt").exists()
    assert (
        main(
            [
                "compliance",
                "test06",
                "--log-dir",
                str(d),
                "--eos-token-id",
                str(EOS),
                "--output",
                str(out),
                "--strict",
            ]
        )
        == 3
    )


def test_missing_inputs_are_usage_errors(tmp_path, capsys):
    with pytest.raises(UsageError, match="--log-dir"):
        run_test06(tmp_path / "nope", eos_token_ids=[EOS])
    d = _log(tmp_path, GOOD)
    with pytest.raises(UsageError, match="--model"):
        run_test06(d)  # no result.json, no --model, no --eos-token-id
    assert main(["compliance", "test06", "--log-dir", str(tmp_path / "nope")]) == 2
    assert "error:" in capsys.readouterr().err


def test_output_named_test06_is_the_test06_folder(tmp_path):
    """`--output OUT/TEST06` (the TEST06 run's own folder, as certify.sh passes it) writes
    OUT/TEST06/verify_accuracy.txt, never OUT/TEST06/TEST06/..."""
    d = _log(tmp_path, GOOD)
    out = tmp_path / "run" / "TEST06"
    assert (
        main(
            [
                "compliance",
                "test06",
                "--log-dir",
                str(d),
                "--eos-token-id",
                str(EOS),
                "--output",
                str(out),
            ]
        )
        == 0
    )
    assert (out / "verify_accuracy.txt").is_file()
    assert (out / "accuracy" / "mlperf_log_accuracy.json").is_file()
    assert not (out / "TEST06").exists()
