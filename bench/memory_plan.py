"""The memory plan of a Llama checkpoint config on GPUs, on paper: parameters, weight bytes per
GPU, KV cache bytes per token per GPU, and the KV tokens a GPU's budget holds, for a tensor and
pipeline parallel layout. With `--layers N` the same width at N layers (a dummy proxy that fits
fewer GPUs); `--proxy-of-tp T` takes N = layers / T, one GPU's share of the full model at tensor
parallel T (see proxy_layers).

Counting: every linear layer (q, k, v, o, gate, up, down) at the weight dtype's bytes; the
embedding and the LM head stay in BF16 (vLLM's FP8 quantizes linear layers only) and, under
tensor parallelism, are split by vocabulary; norms in BF16. KV per token per layer: 2 (K and V)
x KV heads x head_dim x the KV dtype's bytes; tensor parallelism splits the KV heads (at least
one per GPU), pipeline parallelism the layers. What is left of `util` x the GPU's memory after
the weights and `reserve` (activations at the step's token budget, CUDA graphs, the non-torch
part) is KV cache.

The reserve, unless `--reserve-gib` fixes it, is 2 GiB plus the step's activations on paper:
`--tokens-per-step` x (2 x intermediate / TP + 4 x hidden) x 2 bytes. It is fitted to what vLLM
0.26 reported on H200s at util 0.92 (FP8 + FP8 KV), and the plan lands within 5% of each:
  Llama 3.1 8B, one GPU, 65,536 tokens a step: 115,460 blocks of 16 (h200-server-policy)
  405B width at 16 layers, one GPU, 2,048: 141,232 and 148,144 blocks (h200-405b)
  405B width at 63 layers, TP 2, 2,048 and 512: 30,174 / 31,848 and 30,223 blocks (h200x2-405b)
The same engine line moves by a few % from start to start (the compile cache, LLM vs AsyncLLM).

    python bench/memory_plan.py bench/models/llama31_405b_dummy/config.json --tp 8
    python bench/memory_plan.py bench/models/llama31_405b_dummy/config.json --proxy-of-tp 8
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

GIB = 1 << 30
BYTES = {"fp8": 1, "bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class Plan:
    layers: int
    params: int  # the whole model's
    weights_per_gpu: int  # bytes
    kv_per_token_per_gpu: int  # bytes
    kv_tokens: int  # what one GPU's KV budget holds (each GPU of the layout holds as many)


def plan(
    cfg: dict,
    *,
    layers: int | None = None,
    tp: int = 1,
    pp: int = 1,
    weights: str = "fp8",
    kv: str = "fp8",
    gpu_gib: float = 140.4,
    util: float = 0.92,
    reserve_gib: float | None = None,
    tokens_per_step: int = 2048,
) -> Plan:
    h, inter = int(cfg["hidden_size"]), int(cfg["intermediate_size"])
    heads, kv_heads = int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"])
    head_dim = int(cfg.get("head_dim") or h // heads)
    vocab = int(cfg["vocab_size"])
    n = int(layers or cfg["num_hidden_layers"])
    linear = h * heads * head_dim * 2 + h * kv_heads * head_dim * 2 + 3 * h * inter
    norms = 2 * h
    embed = vocab * h * (1 if cfg.get("tie_word_embeddings") else 2)
    params = n * (linear + norms) + embed + h
    per_gpu_layers = -(-n // pp)  # the largest pipeline stage
    w = BYTES[weights] * linear // tp + 2 * norms
    weights_per_gpu = per_gpu_layers * w + 2 * embed // tp + 2 * h
    kv_per_layer = 2 * max(1, kv_heads // tp) * head_dim * BYTES[kv]
    kv_per_token = per_gpu_layers * kv_per_layer
    if reserve_gib is None:
        reserve_gib = reserve(cfg, tp, tokens_per_step) / GIB
    budget = gpu_gib * util * GIB - weights_per_gpu - reserve_gib * GIB
    return Plan(n, params, weights_per_gpu, kv_per_token, max(0, int(budget // kv_per_token)))


BASE_RESERVE = 2 * GIB  # CUDA graphs, NCCL and cuBLAS workspaces, the non-torch part


def reserve(cfg: dict, tp: int, tokens_per_step: int) -> int:
    """Bytes a GPU keeps beside weights and KV: a base, plus the activations of a step of
    `tokens_per_step` tokens (the MLP's gate and up halves at 1/TP, a few hidden-wide buffers)
    in BF16."""
    h, inter = int(cfg["hidden_size"]), int(cfg["intermediate_size"])
    return BASE_RESERVE + tokens_per_step * (2 * inter // tp + 4 * h) * 2


def proxy_layers(cfg: dict, tp: int) -> int:
    """Tensor parallelism T gives each GPU 1/T of every layer's matmuls and KV heads: one GPU
    holds N/T layers' worth. The same width at that many layers, on one GPU, does the same
    transformer work per token and keeps the same KV bytes per token; what differs is the LM
    head and embedding (whole, not 1/T) and the all-reduces it does not do."""
    return max(1, round(int(cfg["num_hidden_layers"]) / tp))


def describe(p: Plan, label: str) -> str:
    return (
        f"{label}: {p.layers} layers, {p.params / 1e9:.2f}B parameters; per GPU "
        f"{p.weights_per_gpu / GIB:.1f} GiB of weights, {p.kv_per_token_per_gpu:,} B of KV a "
        f"token, {p.kv_tokens:,} KV tokens"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("config", type=Path, help="a checkpoint's config.json")
    ap.add_argument("--layers", type=int, help="the same width at this many layers")
    ap.add_argument("--proxy-of-tp", type=int, metavar="T", help="one GPU standing for TP T")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--weights", choices=sorted(BYTES), default="fp8")
    ap.add_argument("--kv", choices=sorted(BYTES), default="fp8")
    ap.add_argument("--gpu-gib", type=float, default=140.4, help="default: one H200")
    ap.add_argument("--util", type=float, default=0.92, help="gpu_memory_utilization")
    ap.add_argument("--reserve-gib", type=float, help="default: 2 GiB + the step's activations")
    ap.add_argument("--tokens-per-step", type=int, default=2048, help="max_num_batched_tokens")
    a = ap.parse_args(argv)
    cfg = json.loads(a.config.read_text())
    kw = {
        "weights": a.weights,
        "kv": a.kv,
        "gpu_gib": a.gpu_gib,
        "util": a.util,
        "reserve_gib": a.reserve_gib,
        "tokens_per_step": a.tokens_per_step,
    }
    if a.proxy_of_tp:
        full = plan(cfg, tp=a.proxy_of_tp, **kw)
        n = proxy_layers(cfg, a.proxy_of_tp)
        print(describe(full, f"full model at TP {a.proxy_of_tp}"))
        print(describe(plan(cfg, layers=n, **kw), "its one-GPU proxy"))
        return 0
    p = plan(cfg, layers=a.layers, tp=a.tp, pp=a.pp, **kw)
    print(describe(p, f"TP {a.tp} x PP {a.pp}"))
    if p.kv_tokens == 0:
        print("it does not fit: fewer layers (--layers), more GPUs, or a smaller weight dtype")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
