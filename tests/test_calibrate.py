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
    however fast the engine), so the conf asks for 662; a base conf's higher count stays.
    LoadGen pads the count to whole passes over the loaded samples (equal issue), so over a
    whole dataset the padding already issues enough, and the conf says how long it runs."""
    from harness.submission.calibrate import _early_stopping_lines, _padded_over

    lines = _early_stopping_lines("llama3_1-8b", 9.9, 32, "", 0)
    assert lines[-1] == "llama3_1-8b.Server.min_query_count = 662"
    assert "issues about 317" in lines[0] and lines[0].startswith("#")
    base = "*.Server.min_query_count = 1000\n"
    assert _early_stopping_lines("llama3_1-8b", 9.9, 32, base, 0)[-1].endswith("= 1000")
    assert _early_stopping_lines("llama3_1-8b", 30.0, 32, "", 0) == []  # 961 queries: enough
    # 317 by time, padded over 40 loaded samples to 320: still short; 662 pads to 680
    padded = _early_stopping_lines("llama3_1-8b", 9.9, 32, "", 40)
    assert padded[-1].endswith("= 662") and "issues 680 and lasts about 69 s" in padded[0]
    # the 405B at 0.7 QPS over its 8,313 samples: one pass, no count needed, 3.3 h said
    (slow,) = _early_stopping_lines("llama3_1-405b", 0.7, 600, "", 8313)
    assert slow.startswith("#") and "8,313 queries" in slow and "11,876 s" in slow
    # three passes over the 8B's 13,368: 802 s for a 600 s run, said too
    (longer,) = _early_stopping_lines("llama3_1-8b", 50.0, 600, "", 13368)
    assert "40,104 queries" in longer and "802 s" in longer
    assert _early_stopping_lines("llama3_1-8b", 22.0, 600, "", 13368) == []  # 607 s: within 10%
    # what the base conf says of the padding
    assert _padded_over("", "llama3_1-8b", 13368) == 13368
    override = "llama3_1-8b.Server.performance_sample_count_override = 500\n"
    assert _padded_over(override, "llama3_1-8b", 13368) == 500
    assert _padded_over(override, "llama2-70b", 24576) == 24576  # another model's line
    assert _padded_over("*.*.sample_concatenate_permutation = 0\n", "llama3_1-8b", 13368) == 0
