"""bench/host_path.py on a stand-in engine (bench/standin_engine.py): one short Server run of
`mlperf-vllm run` on the config-only Llama-3.1-8B (no weights: an engine that started at all ran
the stand-in), 20 ms steps, read back by the bench.

Time budget: 60 s.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

STEP_MS = 20.0
RATE = 8.0  # req/s: a third of the engine's capacity (64 seqs x 1000 / 20 ms / 128 = 25/s)
MAX_TOKENS = 128
DURATION_S = 12  # LoadGen's min_duration; the set's 125 samples take ~16 s to issue
CHUNK = 512  # tokens per step: most prompts (mean 870) take two prefill steps or more


@pytest.mark.e2e
def test_one_standin_engine_serves_every_sample_at_its_step_time(tmp_path):
    out = tmp_path / "hp.json"
    proc = subprocess.run(
        [sys.executable, "bench/host_path.py", "--engines", "1", "--stream-intervals", "1"]
        + ["--frontends", "shared"]
        + ["--rate-per-engine", str(RATE), "--step-ms", str(STEP_MS), "--max-num-seqs", "64"]
        + ["--max-num-batched-tokens", str(CHUNK), "--max-tokens", str(MAX_TOKENS)]
        + ["--duration-s", str(DURATION_S), "--out", str(tmp_path / "runs"), "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["error"] == "" and row["validity"] in ("VALID", "INVALID"), row
    # every sample answered, each with max_tokens tokens (the stand-in never ends one early)
    assert row["issued"] == row["completed"] >= RATE * DURATION_S, row
    assert row["output_tokens"] == row["completed"] * MAX_TOKENS, row
    # no weights: the engine is up in seconds (the tiny real model takes ~30 s here, and the
    # 8B's dummy weights would not fit this machine's time or memory)
    assert row["engine_start_s"] < 30, row
    # the engine runs at its step time: a decode step is one sleep of 20 ms (the host adds to it)
    assert STEP_MS * 0.9 <= row["tpot_p50_ms"] <= STEP_MS * 3, row
    # a partial prefill chunk samples nothing: a prompt over 512 tokens waits two steps or more
    assert row["ttft_p50_ms"] >= 2 * STEP_MS, row
    # tokens/s: what the stand-in produces at the target rate, less the drain after the last
    # issue (~16 / (16 + 128 x 20 ms)) that LoadGen's figure counts
    assert 0.7 * RATE * MAX_TOKENS <= row["output_tokens_per_s"] <= 1.05 * RATE * MAX_TOKENS, row
    # in transit: computed from vLLM's running + waiting and our engine count; at a third of one
    # engine's capacity the host path holds a few requests at most
    assert row["in_transit_mean"] is not None and 0 <= row["in_transit_max"] <= 10, row
    timeline = json.loads(
        (tmp_path / "runs" / "dp1_shared_si1" / "run" / "timeline.json").read_text()
    )
    assert any(r.get("running") for r in timeline["series"]), "no engine stats in the timeline"
    assert "dp1_shared_si1" in proc.stdout and "TTFT99" in proc.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("async_scheduling", [True, False])
def test_standin_engine_core_samples_once_a_prompt_is_complete(async_scheduling, tmp_path):
    """vLLM's EngineCore in this process on the stand-in: 512 tokens a step, prompts of 100, 1,300
    and 700 tokens. The 1,300-token prompt's chunks (412 + 511 + 377 beside the first's decodes)
    yield its first token at the third step, not the first; async scheduling reports each step's
    output one step later."""
    pytest.importorskip("vllm")
    from bench.host_path import write_llama31_8b_config
    from bench.standin_engine import drive_engine_core

    got = drive_engine_core(
        str(write_llama31_8b_config(tmp_path / "llama31_8b")),
        prompt_lens=(100, 1300, 700),
        max_tokens=6,
        chunk=512,
        async_scheduling=async_scheduling,
    )
    assert got["scheduler"] == ("AsyncScheduler" if async_scheduling else "Scheduler"), got
    assert got["tokens"] == {"r0": 6, "r1": 6, "r2": 6}, got
    late = 1 if async_scheduling else 0
    assert got["first_token_step"] == {"r0": 1 + late, "r1": 3 + late, "r2": 5 + late}, got


def test_standin_options_are_checked():
    pytest.importorskip("vllm")
    from bench.standin_engine import StandInConfig, StandInError

    config = StandInConfig.from_additional_config({"standin": {"step_ms": 35, "kv_tokens": 1000}})
    assert config.step_s(prefill_tokens=2000) == pytest.approx(0.035)
    slow_prefill = StandInConfig(step_ms=10, prefill_us_per_token=50)
    assert slow_prefill.step_s(prefill_tokens=1000) == pytest.approx(0.06)
    assert StandInConfig.from_additional_config({}) == StandInConfig()
    with pytest.raises(StandInError, match="unknown option.*step_msec"):
        StandInConfig.from_additional_config({"standin": {"step_msec": 35}})
    with pytest.raises(StandInError, match="kv_tokens"):
        StandInConfig.from_additional_config({"standin": {"kv_tokens": 0}})
