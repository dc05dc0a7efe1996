"""Engine settings and Offline sample order, measured on one warm engine per configuration.

For one set of engine arguments this starts one engine, times a first (cold) pass over all the
prompts, then alternates the sample orders asked for (arrival = dataset order, longest-first,
shortest-first by prompt length) for --repeats warm passes each. Every pass hands all prompts
to the engine at once, as our Offline SUT does. Prefix caching is off (a repeated prompt set
would otherwise measure the cache), so repeated passes over the same prompts are honest.

Prints one JSON line per pass and a summary line per order (median output tokens/s, spread),
plus the engine's resolved scheduler and compilation settings, so a knob that the engine
ignores or already ran with is visible.

    python bench/engine_tuning.py --model .gpu-stage/bin/llama31_8b_dummy --samples 1000 \\
        --name fp8 --engine-arg load_format=dummy --engine-arg quantization=fp8 ...
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.* when run as a script

ORDERS = ("arrival", "longest-first", "shortest-first")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--name", default="config", help="label of this configuration")
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--mean-len", type=int, default=870, help="mean prompt length (tokens)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=2, help="warm passes per order")
    p.add_argument("--orders", default="arrival", help=f"comma list of {', '.join(ORDERS)}")
    p.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--json", type=Path, help="append the JSON lines here too")
    args = p.parse_args()
    args.orders = [o.strip() for o in args.orders.split(",") if o.strip()]
    bad = [o for o in args.orders if o not in ORDERS]
    if bad:
        p.error(f"unknown order {bad[0]!r}: use {', '.join(ORDERS)}")
    return args


def engine_kwargs(pairs: list[str]) -> dict:
    kw: dict = {}
    for pair in pairs:
        key, _, raw = pair.partition("=")
        try:
            kw[key] = json.loads(raw)
        except json.JSONDecodeError:
            kw[key] = raw
    return kw


def ordered(prompts: list[list[int]], order: str) -> list[int]:
    idx = list(range(len(prompts)))
    if order == "longest-first":
        idx.sort(key=lambda i: -len(prompts[i]))
    elif order == "shortest-first":
        idx.sort(key=lambda i: len(prompts[i]))
    return idx


def resolved(llm) -> dict:
    """The scheduler and compilation settings the engine really runs with."""
    cfg = getattr(llm.llm_engine, "vllm_config", None)
    if cfg is None:
        return {}
    sched, comp = cfg.scheduler_config, cfg.compilation_config
    out = {
        "max_num_seqs": sched.max_num_seqs,
        "max_num_batched_tokens": sched.max_num_batched_tokens,
        "async_scheduling": getattr(sched, "async_scheduling", None),
        "chunked_prefill": getattr(sched, "enable_chunked_prefill", None),
        "cudagraph_mode": str(getattr(comp, "cudagraph_mode", "")),
        "max_cudagraph_capture_size": getattr(comp, "max_cudagraph_capture_size", None),
        "compile_mode": str(getattr(comp, "mode", getattr(comp, "level", ""))),
        "pass_config": str(getattr(comp, "pass_config", "")),
        "kv_cache_dtype": cfg.cache_config.cache_dtype,
        "num_gpu_blocks": cfg.cache_config.num_gpu_blocks,
        "prefix_caching": cfg.cache_config.enable_prefix_caching,
    }
    return out


def main() -> None:
    args = parse_args()
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from bench.offline_overhead import random_prompts

    prompts = random_prompts(args.model, args.samples, args.mean_len, seed=5)
    kw = {"model": str(args.model), "seed": 0, "enable_prefix_caching": False}
    kw.update(engine_kwargs(args.engine_arg))
    t0 = time.perf_counter()
    llm = LLM(**kw)
    start_s = time.perf_counter() - t0
    params = SamplingParams(
        temperature=0, max_tokens=args.max_tokens, ignore_eos=True, detokenize=False
    )

    def emit(record: dict) -> None:
        line = json.dumps({"config": args.name, **record})
        print(line, flush=True)
        if args.json:
            with args.json.open("a") as f:
                f.write(line + "\n")

    try:
        settings = resolved(llm)
    except Exception as exc:  # a renamed config field must not cost the measurement
        settings = {"error": repr(exc)}
    emit({"engine_start_s": round(start_s, 1), "args": args.engine_arg, "resolved": settings})

    def one_pass(order: str) -> float:
        idx = ordered(prompts, order)
        batch = [TokensPrompt(prompt_token_ids=prompts[i]) for i in idx]
        t = time.perf_counter()
        outs = llm.generate(batch, params, use_tqdm=False)
        dt = time.perf_counter() - t
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        return tokens / dt

    cold = one_pass(args.orders[0])
    emit({"pass": "cold", "order": args.orders[0], "out_tok_s": round(cold, 1)})
    results: dict[str, list[float]] = {o: [] for o in args.orders}
    for rep in range(args.repeats):
        for order in args.orders:
            tps = one_pass(order)
            results[order].append(tps)
            emit({"pass": f"warm{rep + 1}", "order": order, "out_tok_s": round(tps, 1)})
    for order, vals in results.items():
        emit(
            {
                "summary": order,
                "median_out_tok_s": round(statistics.median(vals), 1),
                "min": round(min(vals), 1),
                "max": round(max(vals), 1),
                "cold_out_tok_s": round(cold, 1) if order == args.orders[0] else None,
                "samples": args.samples,
                "mean_in": round(sum(map(len, prompts)) / len(prompts), 1),
            }
        )


if __name__ == "__main__":
    main()
