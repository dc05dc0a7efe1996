"""Calibrate's logic without an engine: the conf it writes, its bad input (the Server search and
its pass rule are in test_timeline.py).

The end-to-end check (calibrate on the tiny model, then an Offline run with the written conf
meets min duration) is in test_package_e2e.py, which reuses that run for packaging.
"""

from __future__ import annotations

from harness.submission.calibrate import conf_key_lines
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
    however fast the engine), so the conf asks for 662; a base conf's higher count stays."""
    from harness.submission.calibrate import _early_stopping_lines

    lines = _early_stopping_lines("llama3_1-8b", 9.9, 32, "")
    assert lines[-1] == "llama3_1-8b.Server.min_query_count = 662"
    assert "issues about 317" in lines[0] and lines[0].startswith("#")
    base = "*.Server.min_query_count = 1000\n"
    assert _early_stopping_lines("llama3_1-8b", 9.9, 32, base)[-1].endswith("= 1000")
    assert _early_stopping_lines("llama3_1-8b", 30.0, 32, "") == []  # 960 queries: enough
    assert _early_stopping_lines("llama3_1-405b", 0.7, 600, "") != []  # a slow 600 s run
