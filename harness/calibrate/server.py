"""Server / Interactive calibration: the highest target QPS the engine *sustains* within the
limits, confirmed by a run of the submission's length when asked.

1. One engine (harness.calibrate.trials.TrialEngine) runs every measurement of the search, each a
   LoadGen test of its own: first an Offline test, whose samples/s is the ceiling (no Server
   target above the same engine's Offline rate can be sustained: the search never tries one),
   then trials at fixed targets from `--start-qps` (default 0.9 x the ceiling) down by x0.8 until
   one passes, then bisection between the highest pass and the lowest failure (the ceiling
   counts as one) to `--precision`.
2. A trial passes by the one rule (harness.run.record.timeline.judge_trial): p99 TTFT and TPOT within
   the limits, early stopping where the trial had enough queries to judge it, and the engine
   keeping up over the trial's steady part (completions keep pace with issues, the backlog does
   not grow). A short trial above capacity meets its p99 limits only because its queue has not
   had time to grow; the steady-part test is what catches it. A trial loads about target x
   --trial-s samples, so LoadGen's rounding to whole passes over the loaded samples does not
   stretch it.
3. Hold trials on the same engine at the highest passing target x (1 - backoff), each twice a
   search trial's length, stepping down by the backoff after a failure (`--hold-trials`, 3): a
   target is written only when one held, so the conf never holds a rate that no trial ran. The
   conf has every trial's evidence in its comments and, without `--confirm`, says NOT
   CONFIRMED on its first line.
4. `--confirm`: one `mlperf-vllm run` (its own process, the written conf, the full min_duration)
   at that target; if it is INVALID or its engine fell behind, the target steps down by the
   backoff and the run is repeated, up to `--confirm-runs` times; with `--confirm-passes N` a
   target is confirmed only by N held runs in a row (a held run short of N is repeated at the
   same target). The conf then holds a rate that
   a run of the submission's length held, or says NOT CONFIRMED and the command fails.
5. `calibration.json` beside the conf: the same evidence for programs (the ceiling, every
   trial's figures and verdict, the highest passing target, the written one, each confirmation
   run), written after the search (also when no trial passed) and again after each confirmation.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from harness.benchmarks import Benchmark
from harness.calibrate.conf import demo_lines, early_stopping_lines, padded_over, write_conf
from harness.calibrate.measure import run_once
from harness.calibrate.record import (
    CALIBRATION_FILE,
    CalibrationRecord,
    ConfirmationRun,
    TrialResult,
)
from harness.calibrate.request import CalibrateRequest, trial_seconds
from harness.errors import UsageError
from harness.run.setup.ray_cluster import layout_of

# write_conf(target, evidence lines): the conf rewritten with that target and evidence
ConfWriter = Callable[[float, list[str]], None]


def calibrate_server(
    req: CalibrateRequest, bench: Benchmark, lg_model: str
) -> tuple[list[str], float, CalibrationRecord]:
    """The conf lines of a Server / Interactive calibration, the target they set and the
    calibration's record (written to calibration.json, also when no trial passed)."""
    from harness.calibrate.trials import TrialEngine, bounded_search
    from harness.run.setup.prepare import prepare

    limits = bench.server_limits
    if limits is None:
        raise UsageError(f"{bench.name} has no Server latency limits")
    if req.run is None:
        raise UsageError("calibrate needs the run's flags (internal: no run spec)")
    prep = prepare(req.run)
    trial_s = trial_seconds(req, bench)
    eng = TrialEngine(prep, req.output / "trials")
    print(f"calibrate: engine started in {eng.engine_start_s:.0f} s", flush=True)
    try:
        off = eng.offline_rate(req.measure_samples)
        ceiling = float(off.get("samples_per_second") or 0.0)
        gpus = layout_of(prep.engine_config.kwargs).devices
        per_gpu = f"; {ceiling / gpus:.3f} per GPU over {gpus}" if gpus > 1 else ""
        print(
            f"calibrate: Offline on the same engine {ceiling:.3f} samples/s "
            f"({req.measure_samples} samples{per_gpu}): no target above it can be sustained",
            flush=True,
        )
        if ceiling <= 0:
            raise UsageError(f"the Offline measurement reported no samples/s ({eng.logs})")

        def measure(qps: float) -> bool:
            t = eng.trial(qps, trial_s, name="trial", min_queries=req.trial_queries)
            each = f" [{qps / gpus:.3f} QPS per GPU over {gpus}]" if gpus > 1 else ""
            print(f"calibrate: {t.line()}{each}", flush=True)
            for note in t.notes:
                print(f"calibrate:   ({note})", flush=True)
            return t.passed

        start = req.start_qps or req.start_fraction * ceiling
        best, _ = bounded_search(measure, start, ceiling, req.trials, req.precision)
        holds: list[TrialResult] = []
        qps = None if best is None else _backed_off(best, req.backoff)
        for _ in range(req.hold_trials if best is not None else 0):
            assert qps is not None
            t = eng.trial(qps, 2 * trial_s, name="hold", min_queries=req.trial_queries)
            holds.append(eng.trials.pop())  # a hold is no search trial
            print(f"calibrate: hold {t.line()}", flush=True)
            if t.passed:
                break
            qps = _backed_off(qps, req.backoff)
        run = eng.run_record()
    finally:
        eng.close()
    trials = eng.trials
    record = CalibrationRecord(
        benchmark=req.benchmark,
        loadgen_model=lg_model,
        scenario=req.scenario,
        limits_ms={"ttft_p99": limits.ttft_ms, "tpot_p99": limits.tpot_ms},
        engine_start_s=eng.engine_start_s,
        offline_samples_per_second=ceiling,
        gpus=gpus,
        offline_samples_per_second_per_gpu=round(ceiling / gpus, 4),
        measure_samples=req.measure_samples,
        trial_s=trial_s,
        trials=list(trials),
        highest_passing_qps=best,
        backoff=req.backoff,
        run=run,
    )
    record.holds = holds if req.hold_trials > 0 and best is not None else None
    record_path = req.output / CALIBRATION_FILE
    if best is None:
        record.write(record_path)
        lowest = min(t.target_qps for t in trials) if trials else 0
        raise UsageError(
            f"no trial passed (lowest tried {lowest:g} QPS; p99 TTFT {limits.ttft_ms:g} ms / "
            f"TPOT {limits.tpot_ms:g} ms and keeping up): pass more --trials, a lower "
            "--start-qps, or a faster engine configuration (trials in "
            f"{req.output / 'trials'})"
        )
    if holds and not holds[-1].passed:
        record.write(record_path)
        raise UsageError(
            f"the search passed {best:g} QPS, but no hold trial of {2 * trial_s:g} s at "
            f"{', '.join(f'{h.target_qps:g}' for h in holds)} QPS passed: the engine does not "
            "sustain what the short trials showed; pass a larger --backoff or more "
            f"--hold-trials (trials in {req.output / 'trials'})"
        )
    assert qps is not None
    record.written_qps = qps
    record.write(record_path)
    lines = [
        f"# --- mlperf-vllm calibrate, {time.strftime('%Y-%m-%d %H:%M')} ---",
        f"# the same engine's Offline rate: {ceiling:.3f} samples/s (the search's ceiling"
        + (f"; {ceiling / gpus:.3f} per GPU over {gpus} GPUs)" if gpus > 1 else ")"),
        f"# trials of >= {trial_s:g} s on one engine, each judged by p99 TTFT <= "
        f"{limits.ttft_ms:g} ms, TPOT <= {limits.tpot_ms:g} ms ({lg_model}), early stopping "
        "where judgeable, and the engine keeping up over the steady part:",
    ]
    for t in trials:
        lines.append(f"#   {t.line()}")
    lines.append(
        f"# highest passing {best:g} QPS = {best / ceiling:.3f} of Offline; x (1 - backoff "
        f"{req.backoff:g}) = {_backed_off(best, req.backoff):g}"
    )
    if holds:
        lines.append(
            f"# hold trials at the target, {2 * trial_s:g} s each (stepping down by the backoff):"
        )
        lines.extend(f"#   {h.line()}" for h in holds)
        lines.append(f"# held in a trial: {qps:g} QPS = {qps / ceiling:.3f} of Offline")
    else:
        lines.append("# not held by a trial at this target (--hold-trials 0)")
    return lines, qps, record


def _backed_off(qps: float, backoff: float) -> float:
    return math.floor(qps * (1 - backoff) * 1000) / 1000


def confirm_target(
    req: CalibrateRequest,
    lg_model: str,
    conf: Path,
    write_conf: ConfWriter,
    qps: float,
    record: CalibrationRecord,
) -> tuple[float | None, list[str]]:
    """Run the written conf for its full min_duration, stepping the target down by the backoff
    while the run is INVALID or its engine fell behind. `write_conf(qps, lines)` rewrites the
    conf with that target and the evidence lines so far; `record` (calibration.json) gets each
    run under "confirmations" and the held target as "confirmed_qps", and is rewritten after
    each run. Returns the confirmed target (None if no run held) and the evidence lines."""
    runs: list[ConfirmationRun] = []
    record.confirmations, record.confirmed_qps = runs, None
    record.confirm_passes = req.confirm_passes
    evidence: list[str] = []
    passes = 0  # held runs in a row at the current target
    for attempt in range(1, req.confirm_runs + 1):
        write_conf(qps, evidence)
        out = req.output / f"confirm-{attempt}-qps-{qps:g}"
        perf = run_once(req, req.scenario, conf, out, f"confirming {qps:g} QPS: ")
        sustained = perf.get("sustained") or {}
        held = perf.get("validity") == "VALID" and sustained.get("kept_up") is not False
        line = (
            f"# confirm {attempt}: {qps:g} QPS for {perf.get('duration_s') or 0:.0f} s -> "
            f"{perf.get('validity')}, TTFT p99 {perf.get('ttft_p99_ms') or 0:,.1f} ms, TPOT p99 "
            f"{perf.get('tpot_p99_ms') or 0:,.1f} ms, engine "
            + {True: "kept up", False: "FELL BEHIND", None: "not judged"}[sustained.get("kept_up")]
            + (
                ""
                if held
                else f" ({'; '.join(perf.get('invalid_reasons') or []) or 'fell behind'})"
            )
            + f" [{out.name}]"
        )
        print(f"calibrate: {line[2:]}", flush=True)
        evidence.append(line)
        runs.append(
            ConfirmationRun(
                attempt=attempt,
                target_qps=qps,
                held=held,
                validity=perf.get("validity"),
                invalid_reasons=perf.get("invalid_reasons") or [],
                duration_s=perf.get("duration_s"),
                samples_per_second=perf.get("samples_per_second"),
                ttft_p99_ms=perf.get("ttft_p99_ms"),
                tpot_p99_ms=perf.get("tpot_p99_ms"),
                kept_up=sustained.get("kept_up"),
                output=str(out),
            )
        )
        passes = passes + 1 if held else 0
        record.confirmed_qps = qps if passes >= req.confirm_passes else None
        record.write(req.output / CALIBRATION_FILE)
        if passes >= req.confirm_passes:
            evidence.append(
                f"# confirmed: a run of the conf's full duration held {qps:g} QPS"
                if passes == 1
                else f"# confirmed: {passes} runs in a row of the conf's full duration held "
                f"{qps:g} QPS"
            )
            write_conf(qps, evidence)
            return qps, evidence
        if not held:  # a held run short of the passes asked for is repeated at its target
            qps = math.floor(qps * (1 - req.backoff) * 1000) / 1000
    held_by = (
        "no run of the conf's full duration held"
        if req.confirm_passes == 1
        else f"no target was held by {req.confirm_passes} runs in a row"
    )
    evidence.append(f"# NOT CONFIRMED: {held_by} (last tried {qps:g} QPS)")
    return None, evidence


def calibrate_server_conf(
    req: CalibrateRequest, bench: Benchmark, lg_model: str, size: int
) -> Path:
    """Search (and confirm, when asked), then write OUTPUT/user.conf with the target."""

    req = replace(req, trial_s=trial_seconds(req, bench))
    assert req.trial_s is not None
    if req.trial_s <= 0 or req.trials < 1 or not 0 <= req.backoff < 1:
        raise UsageError("--trial-s and --trials must be positive and --backoff in [0, 1)")
    if req.hold_trials < 0:
        raise UsageError("--hold-trials must be 0 or more")
    if req.confirm and req.confirm_runs < 1:
        raise UsageError("--confirm-runs must be at least 1")
    if req.confirm and not 1 <= req.confirm_passes <= req.confirm_runs:
        raise UsageError(
            f"--confirm-passes {req.confirm_passes} must be between 1 and --confirm-runs "
            f"({req.confirm_runs}): raise --confirm-runs or lower --confirm-passes"
        )
    search, qps, record = calibrate_server(req, bench, lg_model)
    base = req.user_conf.read_text() if req.user_conf else ""
    demo = demo_lines(bench, lg_model, "Server", req, size)
    loaded = padded_over(base, lg_model, min(size, bench.performance_sample_count))
    conf = req.output / "user.conf"

    def write_target(target: float, evidence: list[str], banner: str = "") -> None:
        count = early_stopping_lines(lg_model, target, req.min_duration_s, base, loaded)
        keys = ["target_qps", "min_duration"] + (
            ["min_query_count"] if any(not c.startswith("#") for c in count) else []
        )
        body = [*search, *evidence, f"{lg_model}.Server.target_qps = {target:g}", *count, *demo]
        write_conf(conf, banner, base, keys, body)

    if not req.confirm:
        write_target(
            qps,
            [
                "# not confirmed: run `calibrate --confirm` (or the conf itself) for the full "
                "min_duration before trusting this target"
            ],
            f"# NOT CONFIRMED: {qps:g} QPS "
            + ("held in a trial" if record.holds else "passed no trial of its own")
            + ", not a run of the full min_duration (calibrate --confirm --confirm-passes 2)\n",
        )
        print("\n".join(line for line in search if line.startswith("#")))
        print(f"user.conf written: {conf}")
        return conf
    confirmed, evidence = confirm_target(req, lg_model, conf, write_target, qps, record)
    if confirmed is None:
        write_target(
            qps, evidence, "# NOT CONFIRMED: no run of the full duration held; see the end.\n"
        )
        held_by = (
            "no confirmation run held"
            if req.confirm_passes == 1
            else f"no target was held by {req.confirm_passes} confirmation runs in a row"
        )
        raise UsageError(
            f"{held_by} ({len(record.confirmations or [])} tried, down to the last target in "
            f"{conf}): the engine cannot sustain these rates for the full duration; try a "
            "faster engine configuration or a larger --backoff"
        )
    print(f"user.conf written: {conf} (target {confirmed:g} QPS, confirmed)")
    return conf
