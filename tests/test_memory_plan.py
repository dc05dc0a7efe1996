"""bench/memory_plan.py: parameter counts equal the published ones, the arithmetic of tensor and
pipeline parallelism, and the one-GPU 405B proxy kept in bench/models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import memory_plan as mp

MODELS = Path(__file__).resolve().parent.parent / "bench" / "models"
LLAMA31_405B = json.loads((MODELS / "llama31_405b_dummy" / "config.json").read_text())
# the public architectures (their config.json files) of the other two benchmarks' models
LLAMA31_8B = {
    **LLAMA31_405B,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
}
LLAMA2_70B = {
    **LLAMA31_405B,
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "vocab_size": 32000,
}


@pytest.mark.parametrize(
    "cfg, params",
    [(LLAMA31_8B, 8_030_261_248), (LLAMA2_70B, 68_976_648_192), (LLAMA31_405B, 405_853_388_800)],
)
def test_parameter_counts_are_the_published_ones(cfg, params):
    assert mp.plan(cfg).params == params


def test_the_8b_on_one_h200_matches_what_vllm_reported():
    # FP8 + FP8 KV at util 0.92, 65,536 tokens a step: vLLM reported 115,460 blocks of 16 tokens
    got = mp.plan(LLAMA31_8B, tokens_per_step=65_536).kv_tokens
    assert got == pytest.approx(115_460 * 16, rel=0.01)


@pytest.mark.parametrize(
    "layers, tp, step, blocks",
    [
        (16, 1, 2048, 141_232),  # bench/record/results/h200-405b: the Offline engine (LLM)
        (16, 1, 2048, 148_144),  # its Server engine (AsyncLLM)
        (63, 2, 2048, 30_174),  # bench/record/results/h200x2-405b: Offline, a cold start
        (63, 2, 2048, 31_848),  # the accuracy run, the same line from the compile cache
        (63, 2, 512, 30_223),  # the Server line
    ],
)
def test_the_405b_plans_are_within_5_percent_of_what_vllm_reported_on_h200s(
    layers, tp, step, blocks
):
    got = mp.plan(LLAMA31_405B, layers=layers, tp=tp, tokens_per_step=step).kv_tokens
    assert got == pytest.approx(blocks * 16, rel=0.05)


def test_a_bigger_step_reserves_more():
    small = mp.plan(LLAMA31_8B, tokens_per_step=2048)
    big = mp.plan(LLAMA31_8B, tokens_per_step=65_536)
    fixed = mp.plan(LLAMA31_8B, tokens_per_step=65_536, reserve_gib=8.0)
    assert small.kv_tokens > big.kv_tokens != fixed.kv_tokens


def test_tensor_and_pipeline_parallelism_split_what_they_split():
    one = mp.plan(LLAMA31_405B, layers=16)
    tp8 = mp.plan(LLAMA31_405B, tp=8)
    tp8pp2 = mp.plan(LLAMA31_405B, tp=8, pp=2)
    # TP 8: one KV head of eight per GPU; PP 2: half the layers
    assert tp8.kv_per_token_per_gpu == 126 * 2 * 1 * 128
    assert tp8pp2.kv_per_token_per_gpu == 63 * 2 * 1 * 128
    assert tp8pp2.weights_per_gpu < tp8.weights_per_gpu < mp.plan(LLAMA31_405B).weights_per_gpu
    assert mp.plan(LLAMA31_405B).kv_tokens == 0  # 382 GiB of FP8 weights: not on one GPU
    # the one-GPU proxy of TP 8: 126 / 8 layers' worth, KV bytes a token within 2%
    assert mp.proxy_layers(LLAMA31_405B, 8) == 16
    assert one.kv_per_token_per_gpu == pytest.approx(tp8.kv_per_token_per_gpu, rel=0.02)


def test_the_kept_405b_proxy_is_the_full_width_at_16_layers():
    kept = json.loads((MODELS / "llama31_405b_16l" / "config.json").read_text())
    assert kept == {**LLAMA31_405B, "num_hidden_layers": 16}
    assert mp.main([str(MODELS / "llama31_405b_16l" / "config.json")]) == 0  # fits one H200
    assert mp.main([str(MODELS / "llama31_405b_dummy" / "config.json")]) == 1  # does not
    # the serialized-FP8 stand-ins: the whole model at TP 4, and 63 layers at TP 2 (one TP 4
    # GPU's work on each of two GPUs) fit four and two H200s
    assert mp.main([str(MODELS / "llama31_405b_fp8" / "config.json"), "--tp", "4"]) == 0
    half = ["--tp", "2", "--layers", "63"]
    assert mp.main([str(MODELS / "llama31_405b_63l_fp8" / "config.json"), *half]) == 0
