"""Accuracy logs of the real small model compared side by side (bench/real_small.sh report).

Each NAME=LOG is an `mlperf_log_accuracy.json` of one accuracy run over the same dataset (GPU
BF16, FP8, FP8 + FP8 KV, this CPU's float32 run, ...). Per log it scores ROUGE with the
project's evaluation (`mlperf-vllm evaluate`, the MLCommons recipe) and reads the tokens
themselves: tokens per sample, the share of outputs that end on the model's EOS, and the share
of samples whose tokens equal the reference log's (the first NAME, or --reference), token for
token. ROUGE of a quantized run is also given relative to the reference's, the way MLPerf's 99%
targets are relative: a run is inside the 99% window when none of its four ROUGE scores fell by
more than 1% (each target is 0.99 x the reference's score).

    .venv/bin/python bench/real_small_report.py --dataset DATA --model MODEL_DIR \\
        bf16=out/acc_bf16.json fp8=out/acc_fp8.json cpu_fp32=runs/cpu/accuracy/mlperf_log_accuracy.json \\
        [--reference bf16] [--json report.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

ROUGE = ("rouge1", "rouge2", "rougeL", "rougeLsum")


def eos_id(model: Path) -> int:
    """The model's EOS id from its generation_config.json (else config.json)."""
    for name in ("generation_config.json", "config.json"):
        path = model / name
        if path.is_file():
            value = json.loads(path.read_text()).get("eos_token_id")
            if isinstance(value, list):
                value = value[0] if value else None
            if isinstance(value, int):
                return value
    raise SystemExit(f"{model}: no eos_token_id in generation_config.json or config.json")


def tokens_of(log: Path, dataset_size: int) -> dict[int, list[int]]:
    from evaluation.accuracy_log import read_accuracy_log

    return {
        s.qsl_idx: [int(t) for t in s.token_ids]
        for s in read_accuracy_log(log, dataset_size=dataset_size)
    }


def rouge_of(log: Path, dataset: Path, model: Path, work: Path) -> dict[str, Any]:
    """`mlperf-vllm evaluate` of one log (its own process, as a user runs it); accuracy.json."""
    out = work / log.stem
    from harness.cli.demo import DEMO_BENCHMARK  # the benchmark the small model stands in for

    cmd = [sys.executable, "-m", "harness.cli", "evaluate", "--benchmark", DEMO_BENCHMARK]
    cmd += ["--accuracy-log", str(log), "--dataset", str(dataset), "--tokenizer", str(model)]
    cmd += ["--output", str(out), "--no-mlflow"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    report = out / "accuracy.json"
    if not report.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise SystemExit(f"evaluate of {log} wrote no accuracy.json: {' | '.join(tail)}")
    return json.loads(report.read_text())


def metric(doc: dict[str, Any], key: str) -> float | None:
    """A metric of accuracy.json (they stand at its top level)."""
    value = doc.get(key)
    return float(value) if isinstance(value, int | float) else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("logs", nargs="+", metavar="NAME=LOG")
    p.add_argument("--dataset", type=Path, required=True)
    p.add_argument("--model", type=Path, required=True, help="model folder (tokenizer, EOS)")
    p.add_argument("--reference", help="NAME whose tokens and ROUGE the others are compared to")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    pairs = []
    for item in args.logs:
        name, sep, path = item.partition("=")
        if not sep or not name or not Path(path).is_file():
            raise SystemExit(f"{item!r}: give NAME=PATH of an existing accuracy log")
        pairs.append((name, Path(path)))
    names = [n for n, _ in pairs]
    ref = args.reference or names[0]
    if ref not in names:
        raise SystemExit(f"--reference {ref!r} is none of {', '.join(names)}")
    size = len(json.loads(args.dataset.read_text()))
    eos = eos_id(args.model)
    rows: dict[str, dict[str, Any]] = {}
    tokens: dict[str, dict[int, list[int]]] = {}
    with tempfile.TemporaryDirectory(prefix="real-small-") as tmp:
        for name, log in pairs:
            toks = tokens_of(log, size)
            tokens[name] = toks
            acc = rouge_of(log, args.dataset, args.model, Path(tmp))
            lengths = [len(t) for t in toks.values()]
            rows[name] = {
                "log": str(log),
                "samples": len(toks),
                **{k: metric(acc, k) for k in (*ROUGE, "gen_len", "gen_num")},
                "tokens_per_sample": statistics.mean(lengths) if lengths else None,
                "eos_share": (
                    sum(1 for t in toks.values() if t and t[-1] == eos) / len(toks)
                    if toks
                    else None
                ),
                "verdict": "PASS" if acc.get("passed") else "FAIL",
            }
    for name in names:
        common = sorted(set(tokens[name]) & set(tokens[ref]))
        same = sum(1 for i in common if tokens[name][i] == tokens[ref][i])
        rows[name]["same_tokens_as_reference"] = same / len(common) if common else None
        rows[name]["common_samples"] = len(common)
        for k in ROUGE:
            a, b = rows[name][k], rows[ref][k]
            rows[name][f"{k}_rel"] = (a / b - 1) if a is not None and b else None
        # MLPerf's 99% targets hold each ROUGE score to 0.99 x the reference's: the run stays
        # inside the window only if no score fell by more than 1%
        # (a reference score of 0, e.g. a random model's rouge2, gives no relative change but
        # still a target: 0.99 x 0)
        pairs = [(rows[name][k], rows[ref][k]) for k in ROUGE]
        rows[name]["within_99_of_reference"] = (
            None
            if any(a is None or b is None for a, b in pairs)
            else all(a >= 0.99 * b for a, b in pairs)
        )

    def f(v: Any, nd: int = 4) -> str:
        return "n/a" if v is None else f"{v:.{nd}f}" if isinstance(v, float) else str(v)

    print(f"reference: {ref}; EOS id {eos}; dataset {args.dataset} ({size} samples)")
    head = "| run | samples | rouge1 | rouge2 | rougeL | rougeLsum | gen_len | tokens/sample "
    print(head + "| ends on EOS | tokens = reference | ROUGE 1 / 2 / L / Lsum vs reference |")
    print("|---" * 11 + "|")
    for name in names:
        r = rows[name]
        rels = [r[f"{k}_rel"] for k in ROUGE]
        within = r["within_99_of_reference"]
        rel = (
            None
            if within is None
            else " / ".join("n/a" if x is None else f"{100 * x:+.2f}%" for x in rels)
            + (" (inside 99%)" if within else " (OUTSIDE 99%)")
        )
        print(
            f"| {name} | {r['samples']} | "
            + " | ".join(f(r[k]) for k in ROUGE)
            + f" | {f(r['gen_len'], 0)} | {f(r['tokens_per_sample'], 1)} | "
            + f"{100 * r['eos_share']:.1f}% | "
            + (
                "n/a"
                if r["same_tokens_as_reference"] is None
                else f"{100 * r['same_tokens_as_reference']:.1f}%"
            )
            + " | "
            + ("-" if name == ref or rel is None else rel)
            + " |"
        )
    if args.json:
        args.json.write_text(json.dumps({"reference": ref, "eos_id": eos, "runs": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
