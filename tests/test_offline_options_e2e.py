"""Offline SUT options on the tiny model, in one real run: samples go to the engine longest
prompt first, an untimed warm-up runs before the LoadGen test, and the result carries dollars
per million output tokens at the given price, and vLLM's profiler records three steps of the
test (`--profile`). The one run of the suite that compiles the model
(`enforce_eager=false`, against the CPU default): the compiled engine path stays exercised.

Time budget: 90 s: one engine start with torch.compile.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import SMOKE, cli, run_args


def test_offline_order_sorts_issued_samples_by_prompt_length():
    from sut.offline import order_samples

    prompts = [[1] * 5, [1] * 9, [1] * 2, [1] * 9]
    batch = [(100, 0), (101, 1), (102, 2), (103, 3)]
    assert order_samples(batch, prompts, "arrival") == batch
    assert order_samples(batch, prompts, "longest-first") == [
        (101, 1),
        (103, 3),
        (100, 0),
        (102, 2),
    ]
    assert order_samples(batch, prompts, "shortest-first") == [
        (102, 2),
        (100, 0),
        (101, 1),
        (103, 3),
    ]


@pytest.mark.e2e
@pytest.mark.untimed
def test_longest_first_warm_up_and_cost(tiny_model, tiny_dataset, tmp_path):
    out = tmp_path / "run"
    proc = cli(
        *run_args(
            tiny_model,
            tiny_dataset,
            out,
            SMOKE / "offline.conf",
            "--no-evaluate",
            "--offline-order",
            "longest-first",
            "--warmup-samples",
            "3",
            "--price-per-hour",
            "2.5",
            # One sequence at a time: the engine finishes samples in the order they were
            # added, so the accuracy log (written as samples complete) shows that order.
            "--engine-arg",
            "max_num_seqs=1",
            "--max-tokens",
            "4",
            "--engine-arg",
            "enforce_eager=false",
            # vLLM's profiler over 3 steps of the performance test, after its first 2
            "--profile",
            "3@2",
            "--verbose",  # vLLM's own output on the terminal too
            mode="both",
        )
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    assert result["sut_options"] == {
        "offline_order": "longest-first",
        "warmup_samples": 3,
        "frontend": "shared",
        "profile": "3@2",
    }
    # the profiled window: three steps of one rank, read back from vLLM's trace
    (rank,) = result["profile"]["ranks"]
    assert rank["steps"] == 3 and rank["tokens"] > 0, rank
    assert rank["device"] is None  # a CPU engine: host operators only
    assert json.loads((out / "profile" / "summary.json").read_text()) == result["profile"]
    assert "profile: 3 steps in" in proc.stdout
    assert "(EngineCore" in proc.stdout + proc.stderr and not (out / "engine.log").exists()
    assert result["warmup"]["finished"] == 3 and result["warmup"]["samples"] == 3
    assert "warm-up: 3 of 3 samples" in proc.stdout
    resolved = result["engine_resolved_args"]
    assert resolved["enforce_eager"] is False and resolved["compilation_config"]["mode"] > 0

    entries = json.loads((out / "accuracy" / "mlperf_log_accuracy.json").read_text())
    prompts = json.loads(tiny_dataset.read_text())
    lengths = [len(prompts[e["qsl_idx"]]["tok_input"]) for e in entries]
    assert len(lengths) == len(prompts)
    assert lengths == sorted(lengths, reverse=True), lengths
    assert len(set(lengths)) > 1  # the order is not trivially true

    perf = result["performance"]
    assert perf["price_per_hour"] == 2.5
    assert perf["usd_per_million_tokens"] == pytest.approx(
        2.5 / (perf["tokens_per_second"] * 3600) * 1e6
    )
    assert "per million output tokens at $2.50/h" in proc.stdout
