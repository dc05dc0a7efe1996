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
  longmix        llama3_1-405b's mixed long-context set, 8,313 samples: inputs 100..20,000
                 (the mix's prompts run to ~20,000 tokens), mean 9,400, shape 2 - the mean is
                 an assumption, not read from the benchmark's pickle (none is at hand here): set
                 --input-mean once it is; outputs mean 684.68 (the benchmark's
                 tokens_per_sample), shape 1, 2..2,000 (its max_tokens; 2, not 1: a
                 Server or Interactive run needs two tokens for a TPOT and refuses a 1).

Every number can be set by flag. Deterministic for a seed. Token ids below min(30,000, vocab).

`--targets` adds what `mlperf-vllm evaluate` needs of an accuracy-mode log of such a run: the
benchmark's target column (random words) and, for the 405B mix, its per-row `metric` column,
the three row kinds in turn (rouge, niah_em with UUID labels, qa_em with `|` alternatives), so
the GPU log goes through the same per-row routing as a CPU one. The scores mean nothing: the
weights are random. `--tokenizer-out DIR` writes a tokenizer with exactly the model's vocabulary
(one word per id, the config's BOS/EOS ids special) for `evaluate --tokenizer` of a weights-free
model that has none.

    python bench/profile_dataset.py --profile openorca --model MODEL_DIR --out data.json
    python bench/profile_dataset.py --profile longmix --model bench/models/llama31_405b_16l \
        --samples 200 --targets --tokenizer-out /tmp/tok405 --out mix.json
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
    "longmix": Profile(8313, Lengths(9400, 100, 20000, 2.0), Lengths(684.68, 2, 2000, 1.0)),
}
# The accuracy report style (harness.benchmarks) of the dataset each profile imitates: the
# benchmark whose columns --targets writes.
STYLE_OF = {"openorca": "open_orca", "cnn_dailymail": "cnn_dailymail", "longmix": "longbench"}
ROW_KINDS = ("rouge", "niah_em", "qa_em")  # the 405B mix's per-row metrics, in turn


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
    return [  # prompts as int32 arrays: the 405B mix's 8,313 prompts hold ~78M tokens
        {"tok_input": rng.integers(0, top, size=k).astype(np.int32), "tok_output_len": o}
        for k, o in zip(ins, outs, strict=True)
    ]


def add_targets(rows: list[dict], profile: str, vocab: int, seed: int = 5) -> None:
    """The benchmark's target column (and the mix's metric column) on each row, in place.

    Labels are made of the words `t<id>` that write_vocab_tokenizer gives ids 1,000..1,499
    (or the first 500 of a smaller vocabulary), so a crafted log can answer a row exactly."""
    import random
    import uuid

    from harness.benchmarks import BENCHMARKS

    schema = next(
        b.schema for b in BENCHMARKS.values() if b.accuracy.report_style == STYLE_OF[profile]
    )
    rng = random.Random(seed)
    first = 1000 if vocab >= 1500 else 0
    words = [f"t{i}" for i in range(first, min(first + 500, vocab))]
    for i, row in enumerate(rows):
        kind = ROW_KINDS[i % len(ROW_KINDS)] if schema.metric_column else "rouge"
        if kind == "niah_em":
            label = ", ".join(str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(3))
        elif kind == "qa_em":
            label = "|".join(rng.choice(words) for _ in range(2))
        else:
            label = " ".join(rng.choice(words) for _ in range(rng.randint(8, 40)))
        row[schema.target_column] = label
        if schema.metric_column:
            row[schema.metric_column] = kind


def write_vocab_tokenizer(config: dict, out: Path) -> Path:
    """A fast tokenizer with exactly the config's vocabulary: id i is the word `t<i>`, the
    config's BOS and EOS ids are special (dropped by skip_special_tokens, as a real model's)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab_size = int(config["vocab_size"])
    specials = {}
    for key, name in (("bos_token_id", "<|bos|>"), ("eos_token_id", "<|eos|>")):
        ids = config.get(key)
        for j, tid in enumerate(ids if isinstance(ids, list) else [ids]):
            if isinstance(tid, int) and 0 <= tid < vocab_size:
                specials[tid] = name if j == 0 else f"{name[:-2]}{j}|>"
    vocab = {specials.get(i, f"t{i}"): i for i in range(vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # words joined by spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok)
    fast.add_special_tokens({"additional_special_tokens": sorted(specials.values())})
    if (bos := config.get("bos_token_id")) in specials:
        fast.bos_token = specials[bos]
    eos = config.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) else eos
    if eos in specials:
        fast.eos_token = specials[eos]
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--profile", choices=sorted(PROFILES), required=True)
    p.add_argument("--model", type=Path, required=True, help="folder with config.json (vocab)")
    p.add_argument(
        "--out", type=Path, required=True, help="file to write: JSON records, or .parquet"
    )
    p.add_argument("--samples", type=int, help="default: the benchmark's dataset size")
    p.add_argument("--input-mean", type=float)
    p.add_argument("--input-max", type=int, help="default: the profile's longest prompt")
    p.add_argument("--output-mean", type=float)
    p.add_argument("--output-max", type=int, help="default: the benchmark's max_tokens")
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--targets", action="store_true", help="add the target (and metric) columns")
    p.add_argument("--tokenizer-out", type=Path, help="write a tokenizer of the model's vocab")
    a = p.parse_args(argv)
    prof = PROFILES[a.profile]
    if a.samples:
        prof = replace(prof, samples=a.samples)
    if a.input_mean or a.input_max:
        inp = prof.inputs
        high = a.input_max or inp.high
        mean = a.input_mean or min(inp.mean, high)
        prof = replace(prof, inputs=replace(inp, mean=mean, high=high, low=min(inp.low, high)))
    if a.output_mean or a.output_max:
        out = prof.outputs
        high = a.output_max or out.high
        mean = a.output_mean or min(out.mean, high)
        prof = replace(prof, outputs=replace(out, mean=mean, high=high, low=min(out.low, high)))
    config = json.loads((a.model / "config.json").read_text())
    rows = build(prof, int(config["vocab_size"]), a.seed)
    if a.targets:
        add_targets(rows, a.profile, int(config["vocab_size"]), a.seed)
    if a.tokenizer_out:
        write_vocab_tokenizer(config, a.tokenizer_out)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.out.with_name(a.out.name + ".part")
    if a.out.suffix == ".parquet":  # compact and quick to load: the 405B mix at full size
        import pandas as pd

        pd.DataFrame(rows).to_parquet(tmp)
    else:
        tmp.write_text(json.dumps([{**r, "tok_input": r["tok_input"].tolist()} for r in rows]))
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
