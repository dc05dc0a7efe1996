"""Server / Interactive side by side: vLLM's raw `AsyncLLM` under a Poisson stream against our
Server SUT under LoadGen, on one engine, at the same rates, with the same prompts.

Both sides drive the very same engine (the SUT's own `AsyncLLM`, on the SUT's event loop), so
what differs is only what sits in front of it: on the raw side an arrival loop that
calls `generate` and reads the DELTA stream, on the other LoadGen's issue thread, our SUT and
its reports to LoadGen. Every rate runs both sides back to back (the SUT first, see below),
and each is judged by the project's one sustained-rate rule
(harness.run.record.timeline: p99 TTFT and TPOT within the scenario's limits and the backlog not
growing over the steady part).

Where both sides run at a rate, the SUT goes first and the raw side then replays LoadGen's own
arrival times from that test (as the SUT saw them), so both sides face the same arrivals: two
independent 30 s Poisson draws of one rate differ by 5-10%, which near capacity is the whole
difference being measured. A raw side alone draws a Poisson process conditioned on its count
(round(rate x duration) arrivals at uniform times). Both print the rate they issued over the
steady part. Per rate and side it prints TTFT / TPOT p50 and p99 (LoadGen's definitions: TTFT from the
issue, TPOT = (last - first) / (tokens - 1) per sample), completed/s over the steady part, the
backlog's fitted start and end, and the verdict. For the SUT it prints LoadGen's p99s and, in
brackets, the same p99s from the SUT's own clock (issue seen by the SUT -> first token): the
difference is time spent before the SUT saw the query (LoadGen's issue thread). At the end:
each side's capacity (the highest passing rate; and where the p99s cross the limits, by linear
interpolation between the rates tried) and the SUT / raw ratio.

`--policies 0,1024,4096x4` repeats all of it per prefill policy (CAP or CAPxEVERY, see
sut.scheduling; 0 = vLLM's default) on the same warm engine: the engine runs our scheduler
(sut.vllm_scheduler) with a live control file the bench rewrites between policies.
`--sut-policies 0,best` runs the SUT side only for those (best: the policy whose raw side
reached the highest capacity, ties to the lower p99 load at the highest rate).

    .venv/bin/python bench/server_vs_raw.py --scenario Server --rates 20,24 --duration-s 30
        [--model DIR --dataset FILE | --random-prompts 870] [--policies 0,1024]
        [--engine-arg KEY=VALUE ...] [--json out.json]

Without --model/--dataset it builds the tiny local model and a synthetic CNN/DailyMail-like set.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.server_capacity import add_engine_arguments, start_engine  # noqa: E402

GAUGE_S = 0.5


def pct(values: list[float], q: float) -> float | None:
    """LoadGen's percentile: the value at ceil(q x n) in sorted order."""
    if not values:
        return None
    xs = sorted(values)
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]


def latency_stats(samples: list[tuple[float, float, float, int]]) -> dict[str, float | None]:
    ttft = [(first - issued) * 1000 for issued, first, _, _ in samples]
    tpot = [(done - first) * 1000 / (n - 1) for _, first, done, n in samples if n > 1]
    return {
        "ttft_p50_ms": pct(ttft, 0.5),
        "ttft_p99_ms": pct(ttft, 0.99),
        "tpot_p50_ms": pct(tpot, 0.5),
        "tpot_p99_ms": pct(tpot, 0.99),
    }


async def poisson_stream(
    sut: Any,
    prompts: list[list[int]],
    qps: float,
    duration_s: float,
    seed: int,
    replay: list[float] | None = None,
):
    """Raw side: arrivals straight into the SUT's engine; returns (samples, gauges). `replay`:
    arrival offsets (s) to repeat, LoadGen's own from the SUT's test at this rate."""
    engine, params_of = sut._engine, sut._params_of  # each sample's own max_tokens
    make_prompt = sut._prompt_type
    rng = random.Random(seed)
    samples: list[tuple[float, float, float, int]] = []
    gauges: list[tuple[float, int, int, int]] = []
    counts = {"issued": 0, "done": 0}

    async def one(i: int, prompt: list[int], params: Any, issued: float) -> None:
        # `issued` is the arrival's scheduled time, as LoadGen counts it: a loop too busy to
        # start the request on time shows in its TTFT, not in a lower arrival rate.
        first, n = 0.0, 0
        async for out in engine.generate(make_prompt(prompt_token_ids=prompt), params, f"raw-{i}"):
            new = out.outputs[0].token_ids if out.outputs else ()
            if new and not n:
                first = time.monotonic()
            n += len(new)
        done = time.monotonic()
        counts["done"] += 1
        samples.append((issued, first or done, done, n))

    async def gauge(stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(GAUGE_S)
            c = counts
            gauges.append((time.monotonic(), c["issued"], c["done"], c["issued"] - c["done"]))

    stop = asyncio.Event()
    gauge_task = asyncio.create_task(gauge(stop))
    # A Poisson process conditioned on its count: round(qps x duration) arrivals at uniform
    # random times. An unconditioned 30 s draw can miss its rate by 5-10%, which near capacity
    # is the whole difference being measured.
    t0 = time.monotonic()
    offsets = replay or sorted(
        rng.uniform(0.0, duration_s) for _ in range(max(1, round(qps * duration_s)))
    )
    tasks = []
    for i, offset in enumerate(offsets):
        due = t0 + offset
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        counts["issued"] += 1
        j = rng.randrange(len(prompts))
        tasks.append(asyncio.create_task(one(i, prompts[j], params_of(j), due)))
    await asyncio.gather(*tasks)
    stop.set()
    await gauge_task
    return samples, gauges


def judge(samples, gauges, qps, ttft_ms, tpot_ms, p99s=None) -> dict[str, Any]:
    from harness.run.record.timeline import judge_sustained

    verdict = judge_sustained(samples, gauges, qps)
    lat = latency_stats(samples)
    judged = dict(p99s or lat)
    reasons = []
    for label, key, limit in (("TTFT", "ttft_p99_ms", ttft_ms), ("TPOT", "tpot_p99_ms", tpot_ms)):
        v = judged.get(key)
        if limit and (v is None or v > limit):
            reasons.append(f"{label} p99 {v if v is None else round(v, 1)} > {limit:g}")
    if verdict.kept_up is not True:
        reasons.append("fell behind" if verdict.kept_up is False else "not judged")
    return {
        **lat,
        **{f"judged_{k}": v for k, v in judged.items() if k.endswith("p99_ms")},
        "completed_qps": verdict.completed_qps_in_window,
        "issued_qps": verdict.issued_in_window
        / max(1e-9, verdict.window_end_s - verdict.window_start_s),
        "backlog_start": verdict.backlog_start,
        "backlog_end": verdict.backlog_end,
        "kept_up": verdict.kept_up,
        "samples": len(samples),
        "output_tokens_mean": sum(s[3] for s in samples) / max(1, len(samples)),
        "passed": not reasons,
        "reasons": reasons,
    }


def crossing(rows: list[dict[str, Any]], ttft_ms: float, tpot_ms: float) -> float | None:
    """Rate where max(TTFT p99 / limit, TPOT p99 / limit) reaches 1, interpolated linearly
    between the tried rates that bracket it (None when none do)."""
    pts = []
    for r in sorted(rows, key=lambda r: r["qps"]):
        a, b = r.get("judged_ttft_p99_ms"), r.get("judged_tpot_p99_ms")
        if a is None or b is None:
            continue
        load = max(a / ttft_ms, b / tpot_ms)
        if r.get("kept_up") is False:
            load = max(load, 1.0 + 1e-9)
        pts.append((r["qps"], load))
    for (q0, l0), (q1, l1) in zip(pts, pts[1:], strict=False):
        if l0 <= 1.0 < l1:
            return q0 + (1.0 - l0) * (q1 - q0) / (l1 - l0)
    return None


def fmt(v: float | None, nd: int = 1) -> str:
    return "n/a" if v is None else f"{v:,.{nd}f}"


def line(side: str, r: dict[str, Any]) -> str:
    own = ""
    if "own_ttft_p99_ms" in r:
        own = f" [own clock {fmt(r['own_ttft_p99_ms'])} / {fmt(r['own_tpot_p99_ms'])}]"
    return (
        f"  {side:4s} {r['qps']:g} QPS: TTFT p50/p99 {fmt(r['ttft_p50_ms'], 0)}/"
        f"{fmt(r['judged_ttft_p99_ms'], 0)} ms, TPOT p50/p99 {fmt(r['tpot_p50_ms'])}/"
        f"{fmt(r['judged_tpot_p99_ms'])} ms{own}, issued {r['issued_qps']:.2f}/s and completed "
        f"{r['completed_qps']:.2f}/s in the steady part, backlog "
        f"{r['backlog_start']:.0f} -> {r['backlog_end']:.0f}, "
        + ("pass" if r["passed"] else "FAIL: " + "; ".join(r["reasons"]))
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_engine_arguments(p)
    p.add_argument("--rates", required=True, help="comma-separated target QPS")
    p.add_argument("--duration-s", type=float, default=60.0)
    p.add_argument("--policies", help="comma-separated prefill policies CAP[xEVERY], live")
    p.add_argument("--sut-policies", help="SUT side only for these (and/or 'best')")
    p.add_argument("--sides", default="raw,sut", help="raw, sut or both (default)")
    p.add_argument("--offline-samples", type=int, default=0, help="the same engine's Offline rate")
    p.add_argument("--warmup-samples", type=int, default=0, help="an untimed Offline pass first")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

    from sut.engine import parse_engine_arg_pairs
    from sut.scheduling import PrefillPolicy, write_control

    work = Path(tempfile.mkdtemp(prefix="server-vs-raw-"))
    overrides = parse_engine_arg_pairs(args.engine_arg)
    policies = [PrefillPolicy.parse(c) for c in args.policies.split(",")] if args.policies else []
    control = work / "policy.json"
    if policies:
        write_control(control, policies[0])
        overrides.update(PrefillPolicy(control_file=str(control)).engine_kwargs())
    sut_for = [x.strip() for x in (args.sut_policies or "").split(",") if x.strip()]
    eng, prep = start_engine(args, work, overrides)
    ttft_ms, tpot_ms = eng.ttft_ms, eng.tpot_ms
    prompts = [list(map(int, x)) for x in prep.dataset.prompts]
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    doc: dict[str, Any] = {"engine_args": prep.engine_config.describe(), "runs": []}
    try:
        if args.warmup_samples:
            eng.offline_rate(args.warmup_samples)
        if args.offline_samples:
            off = eng.offline_rate(args.offline_samples)
            doc["offline"] = off
            print(f"Offline on the same engine: {off.get('samples_per_second') or 0:.2f}/s")
        rates = [float(x) for x in args.rates.split(",")]

        def measure(policy, which) -> None:
            label = policy.label() if policy else None
            if policy is not None:
                write_control(control, policy)
                time.sleep(1.0)  # the engine core re-reads it within CONTROL_CHECK_S
                print(f"prefill policy {policy.describe()} ({label})", flush=True)
            for k, qps in enumerate(rates):
                # The SUT first: the raw side then replays LoadGen's own arrival times, so
                # both sides see the same arrivals, not two draws of one rate.
                order = sorted(which, key=lambda side: side != "sut")
                replay: list[float] | None = None
                for side in order:
                    row = run_side(
                        side, eng, prompts, qps, args.duration_s, ttft_ms, tpot_ms, k, replay
                    )
                    replay = row.pop("arrivals", None) or replay
                    row.update(policy=label, side=side, qps=qps)
                    doc["runs"].append(row)
                    print(line(side, row), flush=True)

        if not policies:
            measure(None, sides)
        for policy in policies:
            both = not sut_for or policy.label() in {
                PrefillPolicy.parse(x).label() for x in sut_for if x != "best"
            }
            measure(policy, sides if both else [s for s in sides if s != "sut"])
        if "best" in sut_for and "sut" in sides:
            best = best_policy(doc["runs"], ttft_ms, tpot_ms)
            done = {r["policy"] for r in doc["runs"] if r["side"] == "sut"}
            print(f"best raw policy: {best}", flush=True)
            if best is not None and best not in done:
                measure(PrefillPolicy.parse(best), ["sut"])
    finally:
        eng.close()
    labels = [p.label() for p in policies] or [None]
    summarize(doc, labels, sides, ttft_ms, tpot_ms)
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2, default=str))
    return 0


def run_side(
    side, eng, prompts, qps, duration_s, ttft_ms, tpot_ms, k, replay=None
) -> dict[str, Any]:
    if side == "raw":
        fut = asyncio.run_coroutine_threadsafe(
            poisson_stream(eng.session.sut, prompts, qps, duration_s, 1000 + k, replay),
            eng.session.sut._loop,
        )
        samples, gauges = fut.result()
        row = judge(samples, gauges, qps, ttft_ms, tpot_ms)
        row["arrivals_from"] = "LoadGen's, replayed" if replay else "Poisson, count fixed"
        return row
    t = eng.trial(qps, duration_s, name="sut")
    tl = eng.session.sut.timeline()
    p99s = {"ttft_p99_ms": t.ttft_p99_ms, "tpot_p99_ms": t.tpot_p99_ms}
    row = judge(tl.samples, tl.gauges, qps, ttft_ms, tpot_ms, p99s=p99s)
    own = latency_stats(tl.samples)
    row["own_ttft_p99_ms"], row["own_tpot_p99_ms"] = own["ttft_p99_ms"], own["tpot_p99_ms"]
    # The trial's own judgement (the same rule, with LoadGen's p99s and early stopping)
    row["passed"], row["reasons"] = t.passed, list(t.reasons)
    row["loadgen_validity"] = t.validity
    first = min((x[0] for x in tl.samples), default=0.0)
    row["arrivals"] = sorted(x[0] - first for x in tl.samples)  # for the raw side's replay
    return row


def best_policy(runs, ttft_ms, tpot_ms) -> str | None:
    """The policy whose raw side passed the highest rate; ties go to the lower p99 load
    (max of TTFT / limit and TPOT / limit) at the highest rate tried."""
    scores = {}
    for r in runs:
        if r["side"] != "raw" or r["policy"] is None:
            continue
        a, b = r.get("judged_ttft_p99_ms") or 1e9, r.get("judged_tpot_p99_ms") or 1e9
        load = max(a / ttft_ms, b / tpot_ms)
        best, top = scores.get(r["policy"], (0.0, (0.0, 0.0)))
        if r["passed"]:
            best = max(best, r["qps"])
        top = max(top, (r["qps"], -load))
        scores[r["policy"]] = (best, top)
    if not scores:
        return None
    return max(scores, key=lambda k: (scores[k][0], scores[k][1][1]))


def summarize(doc, caps, sides, ttft_ms, tpot_ms) -> None:
    print()
    off = (doc.get("offline") or {}).get("samples_per_second")
    doc["capacity"] = []
    for cap in caps:
        caps_of = {}
        for side in sides:
            rows = [r for r in doc["runs"] if r["policy"] == cap and r["side"] == side]
            if not rows:
                continue
            best = max((r["qps"] for r in rows if r["passed"]), default=None)
            cross = crossing(rows, ttft_ms, tpot_ms)
            caps_of[side] = (best, cross)
            doc["capacity"].append(
                {"policy": cap, "side": side, "best_pass": best, "crossing": cross}
            )
            rel = f" = {best / off:.3f} of Offline" if best and off else ""
            print(
                f"policy {cap}: {side} capacity {fmt(best, 2)} QPS{rel} (p99s reach the limit at "
                f"{fmt(cross, 2)} QPS)"
            )
        if "raw" in caps_of and "sut" in caps_of:
            (rb, rc), (sb, sc) = caps_of["raw"], caps_of["sut"]
            ratio = sc / rc if sc and rc else (sb / rb if sb and rb else None)
            doc.setdefault("ratios", []).append({"policy": cap, "sut_over_raw": ratio})
            print(f"policy {cap}: SUT / raw capacity {fmt(ratio, 3)}")


if __name__ == "__main__":
    sys.exit(main())
