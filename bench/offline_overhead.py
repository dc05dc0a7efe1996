"""Offline SUT overhead, measured side by side on one engine in one process.

  (a) raw engine:        one `LLM.generate` over all prompts (the ceiling)
  (b) our Offline SUT:   the same prompts as one LoadGen Offline query (real LoadGen)
  (c) reference pattern: sequential `LLM.generate` calls of 16 prompts (the MLCommons SUT)

Prefix caching is off on every side (a repeated prompt set would otherwise measure the cache),
one full-size warm-up pass runs before timing, and the sides alternate in every repeat because
this machine is noisy. Prints output tokens/s per side (median, min-max) and the ratios b/a
and b/c.

    python bench/offline_overhead.py --samples 1000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", type=Path, help="checkpoint folder (default: build the tiny model)")
    p.add_argument("--dataset", type=Path, help="dataset with tok_input (default: synthetic)")
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument(
        "--random-prompts",
        type=int,
        metavar="MEAN_LEN",
        help="random token-id prompts of this mean length (weights-free GPU runs with "
        "a dummy config: CNN/DailyMail mean ~870)",
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch", type=int, default=16, help="reference pattern's batch size")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--ignore-eos", action="store_true", help="fixed-length outputs")
    p.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--skip-reference", action="store_true")
    p.add_argument(
        "--reference-once",
        action="store_true",
        help="time the reference pattern in the first repeat only (it is the slow one)",
    )
    p.add_argument("--json", type=Path, help="also write the measurements here")
    return p.parse_args()


def random_prompts(model: Path, n: int, mean_len: int, seed: int = 0) -> list[list[int]]:
    """Unique random prompts with a CNN/DailyMail-like length spread: gamma(shape 4) lengths of
    the given mean clipped to [100, 2.9 x mean], ids below 30000 (the GPU kit's profile)."""
    import numpy as np

    vocab = int(json.loads((model / "config.json").read_text())["vocab_size"])
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.gamma(4.0, mean_len / 4.0, n), 100, mean_len * 2.9).round().astype(int)
    return [rng.integers(0, min(30000, vocab), size=k).tolist() for k in lengths]


def load_prompts(args: argparse.Namespace, workdir: Path) -> tuple[Path, list[list[int]]]:
    import pandas as pd

    from harness.assets.synthetic import build_synthetic_dataset, build_tiny_model

    if args.random_prompts:
        return args.model, random_prompts(args.model, args.samples, args.random_prompts)
    model = args.model or build_tiny_model(workdir / "tiny-llama")
    dataset = args.dataset or build_synthetic_dataset(
        "llama3_1-8b", model, workdir / "bench.json", samples=args.samples, seed=7
    )
    frame = pd.read_json(dataset) if str(dataset).endswith(".json") else pd.read_parquet(dataset)
    prompts = [list(map(int, p)) for p in frame["tok_input"].tolist()[: args.samples]]
    return model, prompts


def offline_settings(n: int):
    """Offline, one query of exactly n samples, each prompt once (a permutation of the set)."""
    import mlperf_loadgen as lg

    s = lg.TestSettings()
    s.scenario = lg.TestScenario.Offline
    s.mode = lg.TestMode.PerformanceOnly
    s.min_duration_ms = 0
    s.min_query_count = n
    s.offline_expected_qps = 1
    s.performance_sample_count_override = n
    s.sample_concatenate_permutation = True
    s.use_token_latencies = True
    return s


def main() -> None:
    args = parse_args()
    import mlperf_loadgen as lg
    from vllm.inputs import TokensPrompt

    from harness.run.setup.settings import build_log_settings
    from sut.engine import make_engine_config, make_sampling_params, parse_engine_arg_pairs
    from sut.lifecycle import direct_llm
    from sut.offline import OfflineSUT
    from sut.qsl import TokenQSL

    work = Path(tempfile.mkdtemp(prefix="offline-bench-"))
    model, prompts = load_prompts(args, work)
    overrides = {"enable_prefix_caching": False, **parse_engine_arg_pairs(args.engine_arg)}
    config = make_engine_config(str(model), overrides)
    params = make_sampling_params(max_tokens=args.max_tokens, ignore_eos=args.ignore_eos)
    token_prompts = [TokensPrompt(prompt_token_ids=p) for p in prompts]
    n = len(prompts)

    t = time.perf_counter()
    with direct_llm(config) as llm:
        print(
            f"engine start {time.perf_counter() - t:.1f} s; {n} prompts, mean input "
            f"{statistics.mean(map(len, prompts)):.0f} tokens",
            flush=True,
        )

        def out_tokens(outputs) -> int:
            return sum(len(o.outputs[0].token_ids) for o in outputs)

        def raw() -> tuple[float, int]:
            t0 = time.perf_counter()
            outs = llm.generate(token_prompts, params, use_tqdm=False)
            return time.perf_counter() - t0, out_tokens(outs)

        def reference() -> tuple[float, int]:
            t0, total = time.perf_counter(), 0
            for i in range(0, n, args.batch):
                total += out_tokens(
                    llm.generate(token_prompts[i : i + args.batch], params, use_tqdm=False)
                )
            return time.perf_counter() - t0, total

        qsl = TokenQSL(prompts, n)
        settings = offline_settings(n)

        def ours() -> tuple[float, int]:
            sut = OfflineSUT(llm, prompts, params, progress=False)
            log = build_log_settings(work / "loadgen")
            t0 = time.perf_counter()
            lg.StartTestWithLogSettings(
                sut.handle, qsl.handle, settings, log, str(work / "no-audit.config")
            )
            wall = time.perf_counter() - t0
            sut.stop()
            assert sut.stats.completed == n, (sut.stats.completed, n)
            # LoadGen's Offline tokens/s spans query issue -> last completion; the StartTest wall
            # time adds LoadGen's own set-up and log writing, reported alongside.
            span = sut.stats.last_complete_s - sut.stats.first_issue_s
            print(f"    (StartTest wall {wall:.2f} s, issue->last completion {span:.2f} s)")
            return span, sut.stats.output_tokens

        print("warm-up (full size) ...", flush=True)
        raw()
        sides = {"raw": raw, "sut": ours}
        if not args.skip_reference:
            sides["reference"] = reference
        rates = alternate(sides, args.repeats, args.reference_once)
    qsl.destroy()
    report(rates, n, config.describe(), args.json)


def alternate(
    sides: dict[str, Callable[[], tuple[float, int]]], repeats: int, reference_once: bool
) -> dict[str, list[float]]:
    """Each side's output tokens/s per repeat, the side that goes first alternating."""
    rates: dict[str, list[float]] = {k: [] for k in sides}
    order = list(sides)
    for r in range(repeats):
        for name in order:
            if name == "reference" and reference_once and rates["reference"]:
                continue
            dt, tokens = sides[name]()
            rates[name].append(tokens / dt)
            print(
                f"  repeat {r + 1} {name:9s} {tokens / dt:10,.0f} output tok/s "
                f"({tokens} tokens in {dt:.2f} s)",
                flush=True,
            )
        order = order[1:] + order[:1]  # alternate which side goes first
    return rates


def report(rates: dict[str, list[float]], n: int, engine_args: Any, json_path: Path | None) -> None:
    """The medians and spreads per side, the ratios b/a and b/c; with --json, the same as JSON."""
    med = {k: statistics.median(v) for k, v in rates.items()}
    print("\nside        median tok/s     min      max")
    for k, v in rates.items():
        print(f"{k:10s} {med[k]:12,.0f} {min(v):8,.0f} {max(v):8,.0f}")
    b_a = med["sut"] / med["raw"]
    print(f"\nours / raw engine       b/a = {b_a:.3f}")
    if "reference" in med:
        print(f"ours / reference (x16)  b/c = {med['sut'] / med['reference']:.2f}")
    if json_path:
        json_path.write_text(
            json.dumps(
                {
                    "rates": rates,
                    "median": med,
                    "b_over_a": b_a,
                    "samples": n,
                    "engine_args": engine_args,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
