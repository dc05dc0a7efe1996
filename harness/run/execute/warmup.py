"""The untimed warm-up before a run's LoadGen test (`--warmup-samples N`, every scenario on one
engine): N prompts that are not prompts of the test, on the engine, before LoadGen starts.

Why other prompts: a warm-up exists to pay for what an engine's first work costs (kernel
selection and autotuning, allocator growth, the first mixed prefill/decode batches) outside the
timed test. It must not hand the test anything: with prefix caching on by mistake, a test
prompt seen in the warm-up would be a cache hit. So each warm-up prompt has the length of a
dataset prompt (the dataset's length profile, which is what the warm-up should exercise) and
token ids drawn at random from the ids the dataset uses, and none equals, or shares its first
block of tokens with, a prompt of the dataset (checked, redrawn where it would).

Offline hands all of them to the engine at once as its query would; Server and Interactive too
(the engine then runs them as one burst: the largest prefill steps and the fullest decode
batches the test will see).
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

# vLLM's KV block (prefix-cache granularity) is 16 tokens by default: a warm-up prompt shares
# no first block with any dataset prompt.
PREFIX_TOKENS = 16


def warmup_prompts(dataset: Sequence[Sequence[int]], n: int, seed: int = 0) -> list[list[int]]:
    """`n` prompts with the dataset's lengths (cycled) and random ids from its vocabulary in
    use; none is a dataset prompt nor starts like one."""
    if n <= 0 or not dataset:
        return []
    rng = random.Random(seed)
    vocab = sorted({int(t) for p in dataset[:1000] for t in p})
    starts = {tuple(int(t) for t in p[:PREFIX_TOKENS]) for p in dataset}
    out: list[list[int]] = []
    for i in range(n):
        length = max(1, len(dataset[i % len(dataset)]))
        while True:
            prompt = [rng.choice(vocab) for _ in range(length)]
            if tuple(prompt[:PREFIX_TOKENS]) not in starts or len(vocab) < 2:
                break
        out.append(prompt)
    return out


def warm_up(sut: Any, dataset: Sequence[Sequence[int]], n: int) -> dict[str, Any]:
    """Run the warm-up on a started SUT; what it did, for result.json and the summary."""
    t0 = time.monotonic()
    finished = sut.warm_up(warmup_prompts(dataset, n))
    done = {"samples": n, "finished": finished, "s": round(time.monotonic() - t0, 2)}
    print(f"warm-up: {finished} of {n} samples in {done['s']} s, untimed", flush=True)
    return done
