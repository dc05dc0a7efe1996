"""A weights-free run's dataset with a benchmark's length profile: random token-id prompts
(`tok_input`) and per-sample output lengths (`tok_output_len`) for `mlperf-vllm run --ignore-eos
--output-lengths tok_output_len`, so a dummy-weight GPU run generates what the benchmark's
real outputs would in length, not `max_tokens` every time.

Lengths are gamma-distributed, rounded and clipped to [low, high]; the scale is solved (by
bisection on the same draws) so that the clipped mean equals the target: the mean is what the
throughput depends on and what the accuracy check holds a run to (tokens_per_sample within
90-110%). Profiles (`--profile`, by dataset):

  openorca       llama2-70b's OpenOrca, 24,576 samples: inputs mean 308 (gamma shape 4,
                 100..1,024; the prompts of the project's earlier 70B GPU runs), outputs mean
                 294.45 (the benchmark's tokens_per_sample), gamma shape 1.5, 2..1,024 (its
                 max_tokens). The shapes are assumptions; the means are the benchmark's.
  cnn_dailymail  llama3_1-8b's CNN/DailyMail, 13,368 samples: inputs mean 870 (shape 4,
                 100..2,523); outputs 128 each (the reference's gen_len, 611 characters a
                 sample, is ~128 tokens: its max_tokens).

Every number can be set by flag. Deterministic for a seed. Token ids below min(30,000, vocab).

    python bench/profile_dataset.py --profile openorca --model MODEL_DIR --out data.json
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class Lengths:
    mean: float
    low: int
    high: int
    shape: float = 4.0


@dataclass(frozen=True)
class Profile:
    samples: int
    inputs: Lengths
    outputs: Lengths


PROFILES = {
    "openorca": Profile(24576, Lengths(308, 100, 1024), Lengths(294.45, 2, 1024, 1.5)),
    "cnn_dailymail": Profile(13368, Lengths(870, 100, 2523), Lengths(128, 128, 128)),
}


def draw_lengths(rng, n: int, spec: Lengths) -> list[int]:
    """n lengths in [low, high] whose mean is spec.mean (to within rounding)."""
    import numpy as np

    if not spec.low <= spec.mean <= spec.high:
        raise ValueError(f"mean {spec.mean} is outside {spec.low}..{spec.high}")
    if spec.low == spec.high:
        return [spec.low] * n
    g = rng.gamma(spec.shape, 1.0, n)

    def at(scale: float) -> np.ndarray:
        return np.clip(np.rint(g * scale), spec.low, spec.high)

    lo, hi = 0.0, spec.high / max(float(g.min()), 1e-9)  # at hi every length is `high`
    for _ in range(100):
        mid = (lo + hi) / 2
        if at(mid).mean() < spec.mean:
            lo = mid
        else:
            hi = mid
    best = min((lo, hi), key=lambda s: abs(at(s).mean() - spec.mean))
    return at(best).astype(int).tolist()


def build(profile: Profile, vocab: int, seed: int = 5) -> list[dict]:
    import numpy as np

    rng = np.random.default_rng(seed)
    ins = draw_lengths(rng, profile.samples, profile.inputs)
    outs = draw_lengths(rng, profile.samples, profile.outputs)
    top = min(30000, vocab)
    return [
        {"tok_input": rng.integers(0, top, size=k).tolist(), "tok_output_len": o}
        for k, o in zip(ins, outs, strict=True)
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--profile", choices=sorted(PROFILES), required=True)
    p.add_argument("--model", type=Path, required=True, help="folder with config.json (vocab)")
    p.add_argument("--out", type=Path, required=True, help="JSON records file to write")
    p.add_argument("--samples", type=int, help="default: the benchmark's dataset size")
    p.add_argument("--input-mean", type=float)
    p.add_argument("--output-mean", type=float)
    p.add_argument("--output-max", type=int, help="default: the benchmark's max_tokens")
    p.add_argument("--seed", type=int, default=5)
    a = p.parse_args(argv)
    prof = PROFILES[a.profile]
    if a.samples:
        prof = replace(prof, samples=a.samples)
    if a.input_mean:
        prof = replace(prof, inputs=replace(prof.inputs, mean=a.input_mean))
    if a.output_mean or a.output_max:
        out = prof.outputs
        high = a.output_max or out.high
        mean = a.output_mean or min(out.mean, high)
        prof = replace(prof, outputs=replace(out, mean=mean, high=high, low=min(out.low, high)))
    vocab = int(json.loads((a.model / "config.json").read_text())["vocab_size"])
    rows = build(prof, vocab, a.seed)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.out.with_name(a.out.name + ".part")
    tmp.write_text(json.dumps(rows))
    tmp.replace(a.out)
    ins = [len(r["tok_input"]) for r in rows]
    outs = [r["tok_output_len"] for r in rows]
    print(
        f"{a.out}: {len(rows)} samples ({a.profile}), input mean {sum(ins) / len(ins):.1f} "
        f"(max {max(ins)}), output mean {sum(outs) / len(outs):.2f} (max {max(outs)})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
