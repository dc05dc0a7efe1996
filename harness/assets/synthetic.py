"""Local assets for the demo and the tests: a tiny Llama checkpoint and synthetic datasets.

Nothing is downloaded. The tokenizer is a byte-level BPE trained here on seeded synthetic text,
the model has the real Llama architecture with random weights (so vLLM loads it through its
normal Llama path), and the datasets follow the official column layout of each benchmark.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from harness import files

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
PAD = "<|pad|>"

_TOPICS = [
    ("council", "the city council", "a new transport budget", "residents"),
    ("storm", "the weather service", "a storm along the coast", "fishermen"),
    ("market", "the central bank", "interest rates", "investors"),
    ("football", "the club", "a late winning goal", "supporters"),
    ("hospital", "the health ministry", "longer opening hours", "patients"),
    ("school", "the education board", "a reading programme", "teachers"),
    ("science", "a research team", "a new species of frog", "biologists"),
    ("courts", "the supreme court", "a ruling on privacy", "lawyers"),
    ("energy", "the grid operator", "a solar farm", "farmers"),
    ("travel", "the airport", "delays after a strike", "passengers"),
]
_PLACES = ["London", "Atlanta", "Sydney", "Toronto", "Cardiff", "Dublin", "Denver", "Leeds"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_VERBS = ["announced", "confirmed", "reported", "warned about", "celebrated", "criticised"]
_ADJ = ["sharp", "modest", "unexpected", "long-awaited", "controversial", "record"]
_FILLER = [
    "Officials said more details would follow later in the week.",
    "The decision follows months of debate among local groups.",
    "Critics argued that the plan did not go far enough.",
    "Supporters said the change was overdue and welcome.",
    "Figures released on {day} showed a {adj} change compared with last year.",
    "A spokesperson for {who} declined to comment further.",
    "Several {group} in {place} told reporters they were cautiously optimistic.",
    "The announcement was made at a press conference in {place} on {day}.",
]

PROMPT_TEMPLATE = (
    "Summarize the following news article in 128 tokens. Please output the summary only, "
    "without any other text.\n\nArticle:\n{article}\n\nSummary:"
)


@dataclass(frozen=True)
class TinyModelSpec:
    """Small enough to start in seconds on two cores, shaped so vLLM's CPU build accepts it
    (head_dim 64: the CPU attention backend rejects 16)."""

    hidden_size: int = 256
    intermediate_size: int = 512
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 2048
    vocab_size: int = 2048
    seed: int = 0


def _article(rng: random.Random, sentences: int) -> tuple[str, str]:
    topic, who, what, group = rng.choice(_TOPICS)
    place, day = rng.choice(_PLACES), rng.choice(_DAYS)
    verb, adj = rng.choice(_VERBS), rng.choice(_ADJ)
    lead = f"({place}) -- On {day}, {who} {verb} {what}, a {adj} step for {group} in {place}."
    body = [lead]
    for _ in range(max(0, sentences - 1)):
        body.append(
            rng.choice(_FILLER).format(
                day=rng.choice(_DAYS), adj=rng.choice(_ADJ), who=who, group=group, place=place
            )
        )
    summary = (
        f"{who.capitalize()} {verb} {what} on {day}. The {adj} step affects {group} in {place}."
    )
    return " ".join(body), summary


def synthetic_corpus(n: int = 400, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        article, summary = _article(rng, rng.randint(3, 10))
        texts.append(PROMPT_TEMPLATE.format(article=article))
        texts.append(summary)
    return texts


def build_tokenizer(out_dir: Path, vocab_size: int = 2048, seed: int = 0):
    """Byte-level BPE trained on synthetic news text, saved as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(synthetic_corpus(seed=seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
    )
    fast.save_pretrained(out_dir)
    return fast


def build_tiny_model(out_dir: str | Path, spec: TinyModelSpec | None = None) -> Path:
    """Write a random-weight Llama checkpoint (bf16 safetensors) plus tokenizer to out_dir."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    spec = spec or TinyModelSpec()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(out, vocab_size=spec.vocab_size, seed=spec.seed)
    torch.manual_seed(spec.seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)  # type: ignore[arg-type]
    model.save_pretrained(out, safe_serialization=True)
    (out / "tiny_model_spec.json").write_text(json.dumps(asdict(spec), indent=2) + "\n")
    return out


def has_chat_template(tokenizer_dir: str | Path) -> bool:
    from transformers import AutoTokenizer

    return bool(getattr(AutoTokenizer.from_pretrained(str(tokenizer_dir)), "chat_template", None))


def build_synthetic_dataset(
    benchmark: str,
    tokenizer_dir: str | Path,
    out_file: str | Path,
    samples: int = 64,
    seed: int = 0,
    min_sentences: int = 3,
    max_sentences: int = 12,
    chat_template: bool = True,
) -> Path:
    """Synthetic news articles and reference summaries in a benchmark's official columns.

    The prompt is the MLPerf summarisation instruction; when the tokenizer has a chat template
    (an instruct model) and `chat_template` is on, it is wrapped in that template, as the
    official llama3.1-8b data wraps it in Llama 3.1's. Otherwise it is plain text after BOS.

    llama3_1-8b(-edge): `input`, `tok_input`, `output` (JSON records, like cnn_eval.json).
    llama2-70b: same columns (OpenOrca layout minus the system prompt).
    llama3_1-405b: adds `metric` = "rouge" and `gt_output` as the target column.
    Written as JSON unless out_file ends in .parquet.
    """
    import pandas as pd
    from transformers import AutoTokenizer

    from harness.benchmarks import get_benchmark

    bench = get_benchmark(benchmark)
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    templated = chat_template and bool(getattr(tok, "chat_template", None))
    rng = random.Random(seed)
    rows = []
    for _ in range(samples):
        article, summary = _article(rng, rng.randint(min_sentences, max_sentences))
        prompt = PROMPT_TEMPLATE.format(article=article)
        if templated:
            # As the official llama3.1-8b data does: the instruction is the user turn of the
            # model's own chat template, ending where the assistant's answer starts.
            prompt = str(
                tok.apply_chat_template(
                    [{"role": "user", "content": prompt}],
                    tokenize=False,
                    add_generation_prompt=True,
                )
            )
            ids = tok.encode(prompt, add_special_tokens=False)
        else:
            ids = [tok.bos_token_id, *tok.encode(prompt, add_special_tokens=False)]
        rows.append({"input": prompt, "tok_input": ids, bench.schema.target_column: summary})
        if bench.schema.metric_column:
            rows[-1][bench.schema.metric_column] = "rouge"
    frame = pd.DataFrame(rows)
    out = Path(out_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".parquet":
        frame.to_parquet(out)
    else:
        files.write_text(out, frame.to_json(orient="records"))
    return out
