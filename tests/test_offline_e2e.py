"""The Offline SUT end to end: real LoadGen, real vLLM (CPU build), tiny model.

Reads the session's `offline_smoke_run` (conftest; shared with test_tracking_mlflow and
test_evaluation_e2e) and starts one engine of its own, in this process, for the direct
generation the payloads are compared with. Time budget: 60 s (the shared run counted in
test_tracking_mlflow's budget).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.run.record.logs import parse_detail_log

pytestmark = pytest.mark.e2e


def accuracy_entries(out: Path) -> list[dict]:
    return json.loads((out / "accuracy" / "mlperf_log_accuracy.json").read_text())


def test_run_is_valid_and_result_json_is_complete(offline_smoke_run):
    out, proc = offline_smoke_run.out, offline_smoke_run.proc
    summary = (out / "performance" / "mlperf_log_summary.txt").read_text()
    assert "Result is : VALID" in summary
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "completed"
    perf = result["performance"]
    assert perf["validity"] == "VALID" and perf["invalid_reasons"] == []
    assert perf["tokens_per_second"] > 0 and perf["samples_per_second"] > 0
    assert perf["duration_s"] > 0 and perf["sample_count"] >= result["dataset_size"]
    assert result["engine_args"]["enable_prefix_caching"] is False
    # Read back from the running engine, including what vLLM derived itself.
    resolved = result["engine_resolved"]
    assert resolved["enable_prefix_caching"] is False
    assert resolved["max_num_seqs"] == result["engine_args"]["max_num_seqs"]
    assert resolved["max_model_len"] == result["engine_args"]["max_model_len"]
    assert resolved["dtype"] == "torch.float32" and resolved["num_gpu_blocks"] > 0
    assert result["sampling"]["max_tokens"] == 128 and result["sampling"]["top_k"] == 1
    assert "VALID" in proc.stdout and "tokens/s" in proc.stdout
    # No stray trace log (LoadGen's C++ default is on) and no audit file picked up.
    assert (out / "performance" / "mlperf_log_trace.json").stat().st_size == 0
    assert not (out / "audit.config").exists()


def test_every_sample_answered_once_with_matching_token_count(offline_smoke_run, tiny_dataset):
    out = offline_smoke_run.out
    n = len(json.loads(Path(tiny_dataset).read_text()))
    entries = accuracy_entries(out)
    assert sorted(e["qsl_idx"] for e in entries) == list(range(n))  # each exactly once
    for e in entries:
        ids = np.frombuffer(bytes.fromhex(e["data"]), dtype=np.int32)
        assert e["token_count"] == ids.size >= 1
    for mode in ("performance", "accuracy"):
        detail = parse_detail_log(out / mode / "mlperf_log_detail.txt")
        assert detail.errors == [], detail.errors
    stats = json.loads((out / "result.json").read_text())["sut_stats"]
    assert stats["issued"] == stats["completed"]


def test_each_answer_belongs_to_its_own_sample(offline_smoke_run, tiny_model, tiny_dataset):
    """Payload of every qsl_idx == a direct generation of that sample's prompt."""
    from vllm.inputs import TokensPrompt

    from harness.benchmarks import get_benchmark
    from sut.engine import make_engine_config, make_sampling_params
    from sut.lifecycle import direct_llm

    out = offline_smoke_run.out
    rows = json.loads(Path(tiny_dataset).read_text())
    s = get_benchmark("llama3_1-8b").sampling
    config = make_engine_config(str(tiny_model), {"dtype": "float32"}, gpu=False)
    with direct_llm(config, gpu=False) as llm:
        params = make_sampling_params(max_tokens=s.max_tokens, min_tokens=s.min_tokens, seed=s.seed)
        direct = llm.generate(
            [TokensPrompt(prompt_token_ids=r["tok_input"]) for r in rows], params, use_tqdm=False
        )
    expected = {i: list(o.outputs[0].token_ids) for i, o in enumerate(direct)}
    got = {
        e["qsl_idx"]: np.frombuffer(bytes.fromhex(e["data"]), dtype=np.int32).tolist()
        for e in accuracy_entries(out)
    }
    assert len(set(map(tuple, expected.values()))) > 1, "outputs must differ to prove mapping"
    mismatched = [i for i in expected if got[i] != expected[i]]
    assert not mismatched, f"samples answered with another sample's output: {mismatched}"
