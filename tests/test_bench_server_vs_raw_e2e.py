"""bench/server_vs_raw.py on the tiny model: both sides on one engine, per prefill policy
switched live, each judged by the sustained rule, and the SUT / raw ratio printed.

Time budget: 90 s.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.e2e


def test_both_sides_run_on_one_engine_per_policy(tiny_model, tiny_dataset, tmp_path):
    out = tmp_path / "vs.json"
    # Each sample's output length from a column (a weights-free run's benchmark profile): both
    # sides generate it, not --max-tokens, so their TPOTs see the same short outputs.
    rows = json.loads(tiny_dataset.read_text())
    data = tmp_path / "with_lengths.json"
    data.write_text(json.dumps([{**r, "out_len": 6} for r in rows]))
    proc = subprocess.run(
        [sys.executable, "bench/server_vs_raw.py", "--model", str(tiny_model)]
        + ["--dataset", str(data), "--rates", "12", "--duration-s", "8"]
        + ["--max-tokens", "16", "--ignore-eos", "--output-lengths", "out_len"]
        + ["--policies", "0,64x2", "--sut-policies", "64x2", "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    runs = {(r["policy"], r["side"]): r for r in doc["runs"]}
    # raw for every policy, the SUT only where asked
    assert set(runs) == {("0x1", "raw"), ("64x2", "raw"), ("64x2", "sut")}, set(runs)
    assert "64x2" in doc["engine_args"]["additional_config"] or "control_file" in str(
        doc["engine_args"]["additional_config"]
    )
    for (policy, side), r in runs.items():
        assert r["samples"] >= 80, (policy, side, r)  # 12/s for 8 s, every one answered
        assert r["ttft_p99_ms"] is not None and r["tpot_p99_ms"] is not None, r
        assert r["kept_up"] in (True, False, None) and isinstance(r["passed"], bool), r
        assert r["output_tokens_mean"] == 6, (policy, side, r["output_tokens_mean"])
    # Beside the SUT the raw side replays LoadGen's own arrivals (the same count, so the same
    # realized rate); alone it draws a Poisson stream of exactly its count. Both print it.
    both, alone = runs[("64x2", "raw")], runs[("0x1", "raw")]
    assert both["arrivals_from"] == "LoadGen's, replayed"
    assert both["samples"] == runs[("64x2", "sut")]["samples"]
    assert alone["arrivals_from"] == "Poisson, count fixed" and alone["samples"] == 96
    assert 9 <= alone["issued_qps"] <= 15, alone
    assert "issued" in proc.stdout and "policy 64x2: SUT / raw capacity" in proc.stdout
    assert [c["policy"] for c in doc["capacity"]] == ["0x1", "64x2", "64x2"]
