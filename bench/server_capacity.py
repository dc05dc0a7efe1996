"""Server capacity: the highest QPS at which a Server SUT meets the TTFT / TPOT p99 limits.

Both contenders run side by side in one process, on one engine (same engine arguments, same
dataset, same sampling), through real LoadGen Server tests:

- ours: `sut.ServerSUT`, every issued query in the engine at once;
- reference pattern: the same SUT limited to one query in the engine at a time, which is what
  the MLCommons reference Server SUT does (its worker thread runs each query's stream to the
  end before taking the next). Limiting our SUT rather than copying the reference's code keeps
  every other cost equal, so the ratio isolates the scheduling pattern.

For each contender the search doubles the target QPS until a test misses a limit, then
bisects. A test "meets the limits" when LoadGen's measured TTFT p99 and TPOT p99 are both under
them (early stopping, which only depends on the query count, is left out of the verdict and
printed). An Offline LoadGen test on the same engine gives the saturated tokens/s, against
which each capacity's completed tokens/s is expressed.

TestSettings are built field by field (no FromConfig, which reads mlperf.conf only once per
process), so several LoadGen tests can share one engine start.

    .venv/bin/python bench/server_capacity.py [--model DIR --dataset FILE] [--max-tokens 32]
        [--ttft-ms 2000 --tpot-ms 100] [--duration-s 10] [--json out.json]

Without --model/--dataset it builds the tiny local model and a synthetic CNN/DailyMail-like set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


@dataclass
class Trial:
    sut: str
    target_qps: float
    ttft_p99_ms: float
    tpot_p99_ms: float
    completed_tokens_per_s: float
    completed_qps: float
    queries: int
    meets_limits: bool
    early_stopping_met: bool | None
    peak_engine_in_flight: int
    num_errors: int
    wall_s: float


def _server_settings(lg, qps: float, args) -> object:
    s = lg.TestSettings()
    s.scenario = lg.TestScenario.Server
    s.mode = lg.TestMode.PerformanceOnly
    s.server_target_qps = qps
    s.min_duration_ms = int(args.duration_s * 1000)
    s.min_query_count = args.min_queries
    s.use_token_latencies = True
    s.ttft_latency = int(args.ttft_ms * 1e6)
    s.tpot_latency = int(args.tpot_ms * 1e6)
    s.server_target_latency_percentile = 0.99
    s.server_target_latency_ns = 0
    return s


def _offline_settings(lg, n_samples: int) -> object:
    s = lg.TestSettings()
    s.scenario = lg.TestScenario.Offline
    s.mode = lg.TestMode.PerformanceOnly
    s.use_token_latencies = True
    # One query of n_samples samples: the Offline query size is its min_query_count (in
    # samples) when min_duration asks for fewer.
    s.min_duration_ms = 0
    s.min_query_count = n_samples
    s.offline_expected_qps = float(n_samples)
    return s


def _detail(outdir: Path) -> dict:
    from harness.run.logs import DETAIL_LOG, parse_detail_log

    return parse_detail_log(outdir / DETAIL_LOG).values


class Bench:
    def __init__(self, args, prompts):
        import mlperf_loadgen as lg

        from sut.engine import make_engine_config
        from sut.qsl import TokenQSL
        from sut.server import ServerStats, ServerSUT

        self.lg, self.args, self.stats_type = lg, args, ServerStats
        from sut.engine import parse_engine_arg_pairs

        overrides = parse_engine_arg_pairs(args.engine_arg)
        if args.max_num_seqs:
            overrides["max_num_seqs"] = args.max_num_seqs
        if args.dtype:
            overrides["dtype"] = args.dtype
        self.config = make_engine_config(str(args.model), overrides)
        sampling = {
            "max_tokens": args.max_tokens,
            "min_tokens": 1,
            "temperature": 0.0,
            "top_k": 1,
            "top_p": 1.0,
            "seed": 42,
            "ignore_eos": args.ignore_eos,
        }
        t0 = time.monotonic()
        self.sut = ServerSUT.create(self.config, prompts, sampling)
        self.engine_start_s = time.monotonic() - t0
        self.qsl = TokenQSL(prompts)
        self.out = Path(args.logs)
        self.n = 0
        self.trials: list[Trial] = []

    def _start(self, settings, name: str) -> tuple[Path, float]:
        from harness.run.settings import build_log_settings

        self.n += 1
        outdir = self.out / f"{self.n:02d}-{name}"
        self.sut.stats = self.stats_type()
        t0 = time.monotonic()
        self.lg.StartTestWithLogSettings(
            self.sut.handle,
            self.qsl.handle,
            settings,
            build_log_settings(outdir),
            str(self.out / ".no-audit.config"),
        )
        if self.sut.error is not None:
            raise RuntimeError(f"engine failed: {self.sut.error}")
        return outdir, time.monotonic() - t0

    def offline_tokens_per_s(self) -> float:
        self.sut.limit_in_flight(None)
        outdir, _ = self._start(_offline_settings(self.lg, self.args.offline_samples), "offline")
        v = _detail(outdir)
        return float(v.get("result_tokens_per_second") or 0.0)

    def trial(self, name: str, qps: float, max_in_flight: int | None) -> Trial:
        self.sut.limit_in_flight(max_in_flight)
        outdir, wall = self._start(_server_settings(self.lg, qps, self.args), f"{name}-{qps:g}")
        v = _detail(outdir)
        ttft = float(v.get("result_first_token_99.00_percentile_latency_ns") or 0) / 1e6
        tpot = float(v.get("result_time_per_output_token_99.00_percentile_ns") or 0) / 1e6
        t = Trial(
            sut=name,
            target_qps=qps,
            ttft_p99_ms=ttft,
            tpot_p99_ms=tpot,
            completed_tokens_per_s=float(v.get("result_completed_tokens_per_second") or 0),
            completed_qps=float(v.get("result_completed_samples_per_sec") or 0),
            queries=int(v.get("result_query_count") or 0),
            meets_limits=ttft <= self.args.ttft_ms and tpot <= self.args.tpot_ms,
            early_stopping_met=v.get("early_stopping_met"),
            peak_engine_in_flight=self.sut.stats.peak_engine_in_flight,
            num_errors=int(v.get("num_errors") or 0),
            wall_s=wall,
        )
        self.trials.append(t)
        print(
            f"  {name:9s} target {qps:7.2f} qps: TTFT p99 {ttft:8.1f} ms, TPOT p99 {tpot:6.2f} "
            f"ms, {t.completed_tokens_per_s:7.1f} tok/s, peak in engine "
            f"{t.peak_engine_in_flight:3d} -> {'meets' if t.meets_limits else 'misses'} limits"
            f" ({wall:.0f} s)",
            flush=True,
        )
        return t

    def capacity(self, name: str, max_in_flight: int | None, start_qps: float) -> Trial | None:
        """Double from start_qps until a miss, then bisect `--bisect` times."""
        best: Trial | None = None
        qps, miss = start_qps, None
        while miss is None and qps <= self.args.max_qps:
            t = self.trial(name, qps, max_in_flight)
            if t.meets_limits:
                best, qps = t, qps * 2
            else:
                miss = qps
        if best is None and miss is not None:  # even the start missed: go down
            qps = start_qps
            while best is None and qps >= start_qps / 16:
                qps /= 2
                t = self.trial(name, qps, max_in_flight)
                if t.meets_limits:
                    best = t
                else:
                    miss = qps
        if best is None or miss is None:
            return best
        lo, hi = best.target_qps, miss
        for _ in range(self.args.bisect):
            mid = round((lo + hi) / 2, 2)
            if mid in (lo, hi):
                break
            t = self.trial(name, mid, max_in_flight)
            if t.meets_limits:
                lo, best = mid, t
            else:
                hi = mid
        return best

    def close(self) -> None:
        self.sut.shutdown()
        self.qsl.destroy()


def capacity_line(name: str, t: Trial | None, offline: float) -> str:
    if t is None:
        return f"{name}: no tested QPS met the limits"
    return (
        f"{name}: {t.target_qps:g} qps (TTFT p99 {t.ttft_p99_ms:,.0f} ms, TPOT p99 "
        f"{t.tpot_p99_ms:.1f} ms), {t.completed_tokens_per_s:,.1f} completed tokens/s = "
        f"{t.completed_tokens_per_s / offline:.2f} of Offline, peak "
        f"{t.peak_engine_in_flight} in the engine"
    )


def summary(ours: Trial | None, ref: Trial | None, offline: float, *, reference_ran: bool) -> str:
    """The closing lines. Without a reference trial (--skip-reference) there is no reference
    line: "no tested QPS met the limits" would claim trials that never ran."""
    lines = [capacity_line("ours     ", ours, offline)]
    if reference_ran:
        lines.append(capacity_line("reference", ref, offline))
    else:
        lines.append("reference: not measured (--skip-reference)")
    if ours and ref:
        lines.append(
            f"capacity ratio ours / reference pattern: {ours.target_qps / ref.target_qps:.1f}x"
        )
    lines.append(f"Offline tokens/s on the same engine: {offline:,.1f}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path)
    p.add_argument("--dataset", type=Path)
    p.add_argument("--benchmark", default="llama3_1-8b")
    p.add_argument("--samples", type=int, default=64, help="synthetic samples if no --dataset")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--ttft-ms", type=float, default=2000.0)
    p.add_argument("--tpot-ms", type=float, default=100.0)
    p.add_argument("--duration-s", type=float, default=8.0, help="min_duration of each trial")
    p.add_argument("--min-queries", type=int, default=100, help="min_query_count of each trial")
    p.add_argument(
        "--max-num-seqs",
        type=int,
        default=None,
        help="default: the engine's (64 on a machine without a GPU)",
    )
    p.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any vLLM engine argument, e.g. load_format=dummy (repeatable)",
    )
    p.add_argument(
        "--random-prompts",
        type=int,
        metavar="MEAN_LEN",
        help="random token-id prompts of this mean length instead of a dataset "
        "(weights-free GPU runs; --samples of them)",
    )
    p.add_argument(
        "--reference-min-queries",
        type=int,
        default=None,
        help="min_query_count of the reference pattern's trials (it serves ~1 query "
        "per output-length of time, so 100 queries can take minutes on a GPU)",
    )
    p.add_argument("--skip-reference", action="store_true")
    p.add_argument("--dtype", default=None)
    p.add_argument("--start-qps", type=float, default=2.0)
    p.add_argument("--reference-start-qps", type=float, default=1.0)
    p.add_argument("--max-qps", type=float, default=512.0)
    p.add_argument("--bisect", type=int, default=3)
    p.add_argument("--offline-samples", type=int, default=512)
    p.add_argument("--logs", type=Path, default=None, help="LoadGen log folders (default: tmp)")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

    from harness.benchmarks import get_benchmark
    from harness.datasets import load_dataset

    work = Path(tempfile.mkdtemp(prefix="server-capacity-"))
    args.logs = args.logs or work / "logs"
    if args.random_prompts:
        from bench.offline_overhead import random_prompts

        prompts = random_prompts(args.model, args.samples, args.random_prompts)
    elif args.model is None or args.dataset is None:
        from harness.assets.synthetic import build_synthetic_dataset, build_tiny_model

        args.model = args.model or build_tiny_model(work / "tiny")
        args.dataset = args.dataset or build_synthetic_dataset(
            args.benchmark, args.model, work / "data.json", args.samples, seed=3
        )
    if not args.random_prompts:
        prompts = load_dataset(args.dataset, get_benchmark(args.benchmark)).prompts

    bench = Bench(args, prompts)
    print(
        f"engine started in {bench.engine_start_s:.0f} s; limits TTFT p99 {args.ttft_ms:g} ms, "
        f"TPOT p99 {args.tpot_ms:g} ms; {len(prompts)} prompts, max_tokens {args.max_tokens}",
        flush=True,
    )
    try:
        # Warm pass: the first batches pay for compilation; measure on a warm engine.
        bench.trial("warmup", args.start_qps, None)
        offline = bench.offline_tokens_per_s()
        print(f"  Offline on the same engine: {offline:,.1f} tokens/s", flush=True)
        ours = bench.capacity("ours", None, args.start_qps)
        ref = None
        if not args.skip_reference:
            if args.reference_min_queries:
                args.min_queries = args.reference_min_queries
            ref = bench.capacity("reference", 1, args.reference_start_qps)
    finally:
        bench.close()

    print()
    print(summary(ours, ref, offline, reference_ran=not args.skip_reference))
    ratio = ours.target_qps / ref.target_qps if ours and ref else None
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "engine_args": bench.config.describe(),
                    "max_tokens": args.max_tokens,
                    "limits_ms": {"ttft": args.ttft_ms, "tpot": args.tpot_ms},
                    "offline_tokens_per_s": offline,
                    "ours": asdict(ours) if ours else None,
                    "reference": asdict(ref) if ref else None,
                    "ratio": ratio,
                    "trials": [asdict(t) for t in bench.trials],
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
