"""result.json records each option of the run once (schema 2): `spec` leaves out what the file
says elsewhere with the same value (the top-level benchmark, scenario, mode, model, ...; the
LoadGen settings in loadgen_overrides; the SUT's options as given in sut_options), and loading
puts it back, so every reader (the summary, MLflow, sweeps, compare, package) reads the same
attributes. A file as the runs before it wrote them (schema 1, every option two or three times)
still loads, and is written back unchanged."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from harness.run.record.result import RunResult

# A result.json as a completed Offline run wrote it with schema 1 (figures shortened, paths
# made neutral): its options at the top, in sut_options and again in spec.
SCHEMA_1 = r"""
{
 "schema_version": 1,
 "status": "completed",
 "benchmark": "llama3_1-8b",
 "loadgen_model": "llama3_1-8b",
 "scenario": "Offline",
 "mode": "performance",
 "model": "/data/tiny",
 "dataset": "/data/data.json",
 "dataset_sha256": "fa51970582e610ec1910dbeb57b6e61991ac40c0d8921b7a748d70821783b4b0",
 "dataset_size": 24,
 "user_conf": "/src/mlperf-vllm/user_confs/smoke/offline.conf",
 "audit_config": null,
 "engine_args": {
  "dtype": "bfloat16",
  "enable_prefix_caching": false,
  "enforce_eager": true,
  "max_model_len": 2048,
  "max_num_seqs": 64,
  "model": "/data/tiny"
 },
 "sampling": {
  "max_tokens": 128,
  "min_tokens": 1,
  "temperature": 0.0,
  "top_k": 1,
  "top_p": 1.0,
  "seed": 42,
  "ignore_eos": false
 },
 "sut_options": {
  "offline_order": "arrival",
  "warmup_samples": 0,
  "frontend": "shared"
 },
 "spec": {
  "benchmark": "llama3_1-8b",
  "scenario": "Offline",
  "mode": "performance",
  "model": "/data/tiny",
  "dataset": "/data/data.json",
  "output": "/runs/base/rep1",
  "overwrite": true,
  "user_conf": "/src/mlperf-vllm/user_confs/smoke/offline.conf",
  "audit_config": null,
  "test06": false,
  "engine_args": [
   "max_num_seqs=64",
   "enforce_eager=true"
  ],
  "tensor_parallel_size": null,
  "pipeline_parallel_size": null,
  "data_parallel_size": null,
  "max_tokens": null,
  "ignore_eos": false,
  "output_lengths": null,
  "allow_pickle": false,
  "accuracy_level": "99",
  "round": null,
  "offline_order": "arrival",
  "prefill_policy": null,
  "dp_routing": "ours",
  "frontend": "auto",
  "engine_stats": false,
  "target_qps": null,
  "min_duration": null,
  "min_query_count": null,
  "verbose": false,
  "profile": null,
  "warmup_samples": 0,
  "price_per_hour": null,
  "nltk_data": null,
  "evaluate": true,
  "progress": false,
  "stall_timeout_s": 300.0,
  "engine_start_timeout_s": 3600.0,
  "submission": false,
  "note": null,
  "engine_flags": []
 },
 "started_at": "2026-11-29T04:49:09+0000",
 "command": [
  "mlperf-vllm",
  "run",
  "--benchmark",
  "llama3_1-8b",
  "--scenario",
  "Offline",
  "--model",
  "/data/tiny",
  "--dataset",
  "/data/data.json",
  "--output",
  "/runs/base/rep1",
  "--overwrite",
  "--user-conf",
  "/src/mlperf-vllm/user_confs/smoke/offline.conf",
  "--engine-arg",
  "max_num_seqs=64",
  "--engine-arg",
  "enforce_eager=true",
  "--no-progress",
  "--no-mlflow"
 ],
 "performance": {
  "scenario": "Offline",
  "validity": "VALID",
  "invalid_reasons": [],
  "tokens_per_second": 4958.68,
  "samples_per_second": 40.3692,
  "duration_s": 1.783537944769775
 },
 "accuracy": null,
 "error": null,
 "submission": false,
 "round": "v6.1",
 "issue_plan": {
  "scenario": "Offline",
  "queries": 1,
  "samples": 72,
  "loaded": 24,
  "passes": 3,
  "qps": 20.0,
  "seconds": 3.6,
  "spill_chance": 0.0,
  "spill_queries": 25
 },
 "engine_start_s": 22.51,
 "engine_resolved": {
  "max_model_len": 2048,
  "dtype": "torch.bfloat16",
  "quantization": null,
  "seed": 0
 },
 "sut_stats": {
  "issued": 72,
  "completed": 72,
  "output_tokens": 8844,
  "failed_samples": 0
 },
 "finished_at": "2026-11-29T04:49:36+0000"
}
"""


def _old() -> dict[str, Any]:
    return json.loads(SCHEMA_1)


def _places(written: dict[str, Any], option: str, value: Any) -> int:
    """How many places of result.json's mapping `written` record the spec's option with this
    value (the front end in use, `shared` for the `auto` asked, is another fact)."""
    at_top = ("benchmark", "scenario", "mode", "model", "dataset", "user_conf", "audit_config")
    loadgen = {"target_qps": "target_qps", "min_duration": "min_duration_s"}
    places = [
        written["spec"].get(option, KeyError),
        written.get(option, KeyError) if option in (*at_top, "submission", "round") else KeyError,
        (written.get("sut_options") or {}).get(option, KeyError),
        (written.get("loadgen_overrides") or {}).get(loadgen.get(option, "-"), KeyError),
    ]
    return sum(place is not KeyError and place == value for place in places)


def test_a_schema_1_file_reads_back_and_is_written_back_unchanged() -> None:
    old = _old()
    result = RunResult.from_dict(old)
    assert result.schema_version == 1
    assert (result.benchmark, result.scenario, result.mode) == (
        "llama3_1-8b",
        "Offline",
        "performance",
    )
    assert result.model == "/data/tiny" and result.user_conf.endswith("offline.conf")
    assert result.sut_options == {
        "offline_order": "arrival",
        "warmup_samples": 0,
        "frontend": "shared",
    }
    assert result.has("spec") and result.spec == old["spec"]
    assert result.loadgen_overrides is None and not result.has("loadgen_overrides")
    assert result.to_dict() == old


def test_a_run_written_now_records_each_option_once_and_reads_back_whole() -> None:
    old = _old()
    spec = dict(old["spec"], target_qps=12.5, output_lengths=None)
    now = replace(
        RunResult.from_dict(dict(old, spec=spec)),
        schema_version=2,
        loadgen_overrides={"target_qps": 12.5},
        loaded_keys=None,
    )
    written = json.loads(json.dumps(now.to_dict()))
    assert written["schema_version"] == 2
    for option in spec:
        assert _places(written, option, spec[option]) <= 1, option
    for moved in ("scenario", "mode", "model", "offline_order", "warmup_samples", "target_qps"):
        assert moved not in written["spec"], moved
    # what differs stays in both places: the spec's round (none given) and the round judged
    assert written["round"] == "v6.1" and written["spec"]["round"] is None
    assert written["sut_options"] == old["sut_options"] and written["scenario"] == "Offline"
    again = RunResult.from_dict(written)
    assert again.spec == spec  # whole again, for every reader of result.spec
    assert (again.scenario, again.model, again.loadgen_overrides) == (
        "Offline",
        "/data/tiny",
        {"target_qps": 12.5},
    )
    assert again.sut_options == now.sut_options and again.to_dict() == written
