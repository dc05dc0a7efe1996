"""Server / Interactive capacity: the highest target QPS a Server SUT sustains within the limits.

One engine, many LoadGen tests (harness.calibrate.trials.TrialEngine), each judged by the project's one
rule (harness.run.record.timeline.judge_trial): p99 TTFT and TPOT within the limits, early stopping
where judgeable, and the engine keeping up over the trial's steady part (completions keep pace
with issues, the backlog does not grow). An Offline test on the same engine gives the ceiling:
no Server target above the engine's Offline samples/s is sustainable, so the search never tries
one, and every capacity is printed as a fraction of it.

- `--rates 50,53,56`: trials at those targets only (a table, no search);
- otherwise: a search from `--start-fraction` of the Offline rate, bisecting between the highest
  pass and the lowest fail (the Offline rate counts as a fail) to `--precision`;
- `--reference`: the same search with one query in the engine at a time, which is what the
  MLCommons reference Server SUT does (same engine, same costs, only the pattern differs).

    .venv/bin/python bench/server_capacity.py [--model DIR --dataset FILE | --random-prompts 870]
        [--scenario Server|Interactive] [--max-tokens 32] [--duration-s 60] [--rates ...]
        [--engine-arg KEY=VALUE ...] [--json out.json]

Without --model/--dataset it builds the tiny local model and a synthetic CNN/DailyMail-like set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _dataset(args, work: Path) -> tuple[Path, Path]:
    if args.random_prompts:
        from bench.offline_overhead import random_prompts

        prompts = random_prompts(args.model, args.samples, args.random_prompts, seed=5)
        path = work / "random.json"
        path.write_text(json.dumps([{"tok_input": p} for p in prompts]))
        return args.model, path
    if args.model is not None and args.dataset is not None:
        return args.model, args.dataset
    from harness.assets.synthetic import build_synthetic_dataset, build_tiny_model

    model = args.model or build_tiny_model(work / "tiny")
    data = args.dataset or build_synthetic_dataset(
        args.benchmark, model, work / "data.json", args.samples, seed=3
    )
    return model, data


def add_engine_arguments(p: argparse.ArgumentParser) -> None:
    """The model, prompts, scenario and engine of a one-engine Server bench (shared with
    bench/server_vs_raw.py)."""
    p.add_argument("--model", type=Path)
    p.add_argument("--dataset", type=Path)
    p.add_argument("--benchmark", default="llama3_1-8b")
    p.add_argument("--scenario", default="Server", choices=["Server", "Interactive"])
    p.add_argument("--samples", type=int, default=2000, help="random / synthetic prompts")
    p.add_argument("--random-prompts", type=int, metavar="MEAN_LEN")
    p.add_argument("--max-tokens", type=int, default=None)
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument(
        "--output-lengths",
        metavar="COLUMN",
        help="each sample's output length from this dataset column (with --ignore-eos), as run",
    )
    p.add_argument("--ttft-ms", type=float, help="override the scenario's TTFT limit")
    p.add_argument("--tpot-ms", type=float, help="override the scenario's TPOT limit")
    p.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE")


def start_engine(args, work: Path, overrides: dict, logs: Path | None = None):
    """prepare() the run the arguments describe and start its one engine: (TrialEngine, prep)."""
    from harness.calibrate.trials import TrialEngine
    from harness.run.setup.prepare import prepare
    from harness.run.setup.spec import RunSpec
    from sut.engine import engine_arg_pairs

    model, data = _dataset(args, work)
    req = RunSpec(
        benchmark=args.benchmark,
        scenario=args.scenario,
        mode="performance",
        model=model,
        dataset=data,
        output=work / "out",
        engine_args=engine_arg_pairs(overrides),
        progress=False,
        max_tokens=args.max_tokens,
        ignore_eos=args.ignore_eos,
        output_lengths=args.output_lengths,
    )
    prep = prepare(req)
    eng = TrialEngine(prep, logs or work / "logs", ttft_ms=args.ttft_ms, tpot_ms=args.tpot_ms)
    print(
        f"engine started in {eng.engine_start_s:.0f} s; {args.scenario} limits TTFT p99 "
        f"{eng.ttft_ms:g} ms, TPOT p99 {eng.tpot_ms:g} ms; {prep.dataset.size} prompts, "
        f"max_tokens {prep.sampling['max_tokens']}; engine {prep.engine_config.describe()}",
        flush=True,
    )
    return eng, prep


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_engine_arguments(p)
    p.add_argument("--duration-s", type=float, default=60.0, help="min_duration of each trial")
    p.add_argument("--rates", help="comma-separated target QPS: trials at these only")
    p.add_argument("--start-fraction", type=float, default=0.9)
    p.add_argument("--precision", type=float, default=0.02)
    p.add_argument("--trials", type=int, default=6)
    p.add_argument("--offline-samples", type=int, default=1000)
    p.add_argument("--warmup-samples", type=int, default=0, help="an untimed Offline pass first")
    p.add_argument("--reference", action="store_true", help="also the one-at-a-time pattern")
    p.add_argument("--logs", type=Path, default=None)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

    from harness.calibrate.trials import bounded_search
    from sut.engine import parse_engine_arg_pairs

    work = Path(tempfile.mkdtemp(prefix="server-capacity-"))
    eng, prep = start_engine(args, work, parse_engine_arg_pairs(args.engine_arg), args.logs)
    doc: dict = {"engine_args": prep.engine_config.describe(), "scenario": args.scenario}
    try:
        if args.warmup_samples:
            w = eng.offline_rate(args.warmup_samples)
            print(f"warm-up Offline pass: {w.get('samples_per_second') or 0:.2f} samples/s")
        off = eng.offline_rate(args.offline_samples)
        ceiling = float(off.get("samples_per_second") or 0)
        doc["offline"] = off
        print(
            f"Offline on the same engine: {ceiling:.2f} samples/s, "
            f"{off.get('tokens_per_second') or 0:,.1f} tokens/s",
            flush=True,
        )

        def measure(name, max_in_flight=None):
            def run(qps: float) -> bool:
                t = eng.trial(qps, args.duration_s, name=name, max_in_flight=max_in_flight)
                print(f"  {name}: {t.line()} ({t.wall_s:.0f} s)", flush=True)
                return t.passed

            return run

        if args.rates:
            for q in (float(x) for x in args.rates.split(",")):
                measure("fixed")(q)
            best = max((t.target_qps for t in eng.trials if t.passed), default=None)
        else:
            best, _ = bounded_search(
                measure("ours"),
                args.start_fraction * ceiling,
                ceiling,
                args.trials,
                args.precision,
            )
        doc["capacity_qps"] = best
        doc["capacity_over_offline"] = best / ceiling if best and ceiling else None
        if args.reference:
            ref, _ = bounded_search(measure("reference", 1), 1.0, ceiling, args.trials, 0.1)
            doc["reference_capacity_qps"] = ref
    finally:
        eng.close()
    doc["trials"] = [t.to_dict() for t in eng.trials]
    print()
    for t in eng.trials:
        print(f"{t.name:9s} {t.line()}")
    cap = doc["capacity_qps"]
    print(
        f"sustained capacity: {cap if cap is not None else 'none found'} QPS"
        + (f" = {doc['capacity_over_offline']:.3f} of Offline ({ceiling:.2f}/s)" if cap else "")
    )
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
