"""Tuning sweeps: one-knob isolation and stacked, each config gated on validity and accuracy.

A sweep plan is data (`scripts/plans/*.txt`, documented there): a baseline and one knob per
line. Nothing is generated or evaluated: lines are split with `shlex`, `${VAR}` is expanded
with `os.path.expandvars`, engine arguments are typed by vLLM's own parser
(`sut.engine.parse_engine_arg_pairs`), and the whole plan is validated before any engine starts.

Every repeat of every config is one `mlperf-vllm run` subprocess (LoadGen reads mlperf.conf
once per process, and a crashing engine must not take the sweep with it). The subprocess logs
nothing to MLflow; this process logs one parent run per sweep and one child run per config,
with the config's aggregate (median over repeats) and the files of its first repeat.

Rules (also printed under the table):
- noise: with >= 2 repeats on both sides (the default), delta = median(config) /
  median(reference) - 1; band = max(2 x the larger relative spread (max-min)/median of the
  two, floor (2%)); delta > band: "better", delta < -band: "worse", else "within noise".
  With a single repeat: "single run: noise unknown" (the floor alone is used for stacking).
- no-op: a knob whose engine arguments already held the requested values in the engine it is
  compared with (the baseline; stacked: the current stack), as that engine resolved them
  (result.json `engine_resolved_args`), changes nothing: status "no-op", never kept.
- confounding guard: the run's recorded engine_args must differ from the baseline's exactly
  in the knob's keys (stacked: all knobs kept so far plus this one), with the requested
  values (structured values such as `compilation_config` compared as JSON, on the knob's
  keys); effective LoadGen settings, sampling, model, dataset and user.conf must be equal.
  Environment variables that steer the engine (VLLM_*, OMP_*, CUDA_*, NCCL_*, ...) are
  recorded by each run and must differ only where the config sets them, to its values; so
  must the SUT options (`--sut offline_order=... / warmup_samples=...`, Offline).
  Otherwise the config is "confounded".
- safe to ship = ran, not confounded, every repeat VALID, accuracy PASS.
- stacked: knobs are tried in plan order on top of the current stack; one is kept when its
  delta against the current stack is beyond noise (single run: beyond the floor), the run
  stays VALID and accuracy does not drop from PASS; `--keep-all` keeps every knob that ran.
  A failed or confounded knob is never kept.
"""

from __future__ import annotations

import functools
import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.run.execute.child import RUN_LOG
from harness.run.record.cost import usd_per_million_tokens
from harness.sweep.options import SweepOptions, check_resume, checked_plan, resolve_figure
from harness.sweep.plan import (
    CONFIG_FILE,
    REPEAT_FILE,
    SINGLE_RUN,
    ConfigSpec,
    Knob,
    Plan,
    make_config,
    plan_settings,
)
from harness.sweep.repeat import (
    CAPACITY_VALIDITY,
    run_capacity_repeat,
    run_repeat,
)
from harness.sweep.report import ConfigRow, figure_label, figure_note, write_reports
from harness.sweep.stats import (
    RepeatOutcome,
    confounding,
    figure_of,
    no_op,
    noise_verdict,
    rel_spread,
)

RepeatRunner = Callable[[Plan, ConfigSpec, Path, str, "float | None"], RepeatOutcome]


class Sweep:
    """Runs a plan's configs one by one; `runner` runs one repeat (a subprocess by default)."""

    def __init__(
        self,
        plan: Plan,
        options: SweepOptions,
        parent: Any = None,
        runner: RepeatRunner | None = None,
    ) -> None:
        self.plan = plan
        self.opt = options = resolve_figure(plan, options)
        if parent is None:  # no tracking: a disabled run whose methods do nothing
            from harness.tracking import TrackedRun, TrackingConfig

            parent = TrackedRun(TrackingConfig(uri="", enabled=False))
        self.parent = parent
        if runner is None and options.figure == "capacity":  # each repeat a calibrate child
            runner = functools.partial(
                run_capacity_repeat,
                calibrate_args=options.calibrate_args,
                price_per_hour=options.price_per_hour,
                stall_timeout_s=options.stall_timeout_s,
                allow_pickle=options.allow_pickle,
            )
        elif runner is None:  # each repeat a child run, with the options every run takes
            runner = functools.partial(
                run_repeat,
                price_per_hour=options.price_per_hour,
                stall_timeout_s=options.stall_timeout_s,
                allow_pickle=options.allow_pickle,
            )
        self.runner = runner
        self.rows: list[ConfigRow] = []
        # called after each config's row is in (run_sweep: rewrite the report so far)
        self.on_row: Callable[[], None] | None = None
        self.repeats: dict[str, list[RepeatOutcome]] = {}
        self.baseline: RepeatOutcome | None = None
        self.final_stack: list[str] | None = None  # stacked: the knobs kept, once run

    # one config ---------------------------------------------------------------------------

    def _repeat(self, spec: ConfigSpec, i: int) -> tuple[RepeatOutcome, bool]:
        out = self.opt.output / spec.dirname / f"rep{i + 1}"
        mode = "both" if (self.opt.accuracy and i == 0) else "performance"
        sig = spec.signature(self.plan, self.opt.accuracy) + f"/{mode}"
        if self.opt.figure == "capacity":
            sig += "/capacity " + " ".join(self.opt.calibrate_args)
        if self.opt.resume and (out / REPEAT_FILE).is_file():
            try:
                stored = RepeatOutcome(**json.loads((out / REPEAT_FILE).read_text()))
                if stored.signature == sig:
                    return stored, True
            except (ValueError, TypeError):
                pass
        print(f"sweep: {spec.name} repeat {i + 1}/{self.opt.repeats} ({mode}) -> {out}", flush=True)
        outcome = self.runner(self.plan, spec, out, mode, self.opt.config_timeout_s)
        outcome.signature = sig
        outcome.settings = plan_settings(self.plan, self.opt.accuracy)
        (out / REPEAT_FILE).write_text(json.dumps(asdict(outcome), indent=2, default=str) + "\n")
        return outcome, False

    def run_config(
        self,
        spec: ConfigSpec,
        kind: str,
        noop_ref: tuple[RepeatOutcome | None, Sequence[Knob]] = (None, ()),
    ) -> ConfigRow:
        """Run a config's repeats. `noop_ref`: the run and knobs to judge "no-op" by (the
        baseline and the config's knob; stacked: the current stack and the knob added)."""
        from harness import tracking

        row = ConfigRow(
            index=spec.index,
            config=spec.name,
            knobs=" ".join(spec.knobs) or "-",
            change=" ".join(f"{k}={v}" for k, v in spec.expected_values) or "-",
            output_dir=str(self.opt.output / spec.dirname),
        )
        cdir = self.opt.output / spec.dirname
        cdir.mkdir(parents=True, exist_ok=True)
        outcomes: list[RepeatOutcome] = []
        failed_config = False
        try:
            with tracking.child(
                self.parent,
                spec.name,
                params={
                    "sweep.config": spec.name,
                    "sweep.kind": kind,
                    "sweep.knobs": row.knobs,
                    "sweep.change": row.change,
                    "sweep.env": " ".join(f"{k}={v}" for k, v in spec.env) or "-",
                    "sweep.repeats": self.opt.repeats,
                },
                tags={"sweep.config": spec.name},
            ) as ch:
                row.mlflow_run_id = ch.run_id or ""
                for i in range(self.opt.repeats):
                    outcome, resumed = self._repeat(spec, i)
                    outcomes.append(outcome)
                    row.resumed += int(resumed)
                    if outcome.status != "ok":
                        break  # a config that fails once is failed: no more engine starts
                self._fill(row, spec, outcomes, noop_ref)
                self._log_child(ch, row, outcomes)
                if row.status == "failed":
                    failed_config = True
                    raise _ConfigFailed(row.error)
        except _ConfigFailed:
            pass
        self.repeats[spec.name] = outcomes
        (cdir / CONFIG_FILE).write_text(
            json.dumps(
                {"spec": asdict(spec), "row": asdict(row), "failed": failed_config},
                indent=2,
                default=str,
            )
            + "\n"
        )
        print(
            f"sweep: {spec.name}: {row.status}"
            + (
                f" {row.tps_median:.1f} {figure_label(self.opt.figure)}"
                if row.tps_median is not None
                else ""
            )
            + (f" ({row.error})" if row.error else ""),
            flush=True,
        )
        return row

    def _fill(
        self,
        row: ConfigRow,
        spec: ConfigSpec,
        outcomes: list[RepeatOutcome],
        noop_ref: tuple[RepeatOutcome | None, Sequence[Knob]] = (None, ()),
    ) -> None:
        row.repeats = len(outcomes)
        row.figure = figure_label(self.opt.figure)
        failed = [o for o in outcomes if o.status != "ok"]
        tps = [float(v) for o in outcomes if o.status == "ok" and (v := figure_of(o)) is not None]
        row.tps_repeats = tps
        if tps:
            row.tps_median = statistics.median(tps)
            if self.opt.price_per_hour is not None and self.opt.figure == "tokens":
                row.usd_per_million_tokens = usd_per_million_tokens(
                    row.tps_median, self.opt.price_per_hour
                )
            row.tps_min, row.tps_max = min(tps), max(tps)
            s = rel_spread(tps)
            row.spread_pct = None if s is None else 100 * s
        validities = {o.validity for o in outcomes if o.status == "ok"}
        if validities in ({"VALID"}, {CAPACITY_VALIDITY}):  # every repeat the same verdict
            row.validity = str(validities.pop())
        else:
            row.validity = "INVALID" if validities else ""
        acc = [o.accuracy for o in outcomes if o.accuracy]
        row.accuracy = acc[0] if acc else ("not run" if not self.opt.accuracy else "")
        if failed:
            row.status = "failed"
            row.error = failed[0].error or "failed"
        elif spec.name == "baseline":
            row.status = "ok"
        elif self.baseline is None or self.baseline.status != "ok":
            row.status = "ok"
            row.confounded = "baseline failed: nothing to compare against"
        else:
            reasons = [r for o in outcomes if (r := confounding(self.baseline, o, spec))]
            row.status = "confounded" if reasons else "ok"
            row.confounded = reasons[0] if reasons else ""
        ref, knobs = noop_ref
        if row.status in ("ok", "confounded") and ref is not None and outcomes:
            why_noop = no_op(ref, outcomes[0], knobs)
            # a knob restating a value the baseline already passed (a CPU default, say) leaves
            # the engine args unchanged: the guard's "no effect" is this, not a confounder
            only_no_effect = all(
                p.startswith("knob had no effect") for p in row.confounded.split("; ") if p
            )
            if why_noop and only_no_effect:
                row.status, row.note, row.confounded = "no-op", why_noop, ""
        base_tps = self._tps("baseline")
        if spec.name != "baseline" and tps and base_tps:
            delta, verdict, band = noise_verdict(base_tps, tps, self.opt.noise_floor)
            row.delta_pct = None if delta is None else 100 * delta
            row.noise_band_pct = 100 * band
            # a no-op knob's delta is the run-to-run noise, whatever its size
            row.noise_verdict = "no-op knob" if row.status == "no-op" else verdict
        elif spec.name == "baseline" and tps:
            row.noise_verdict = "reference"
        why = []
        if row.status != "ok":
            why.append(row.status)
        if row.confounded and row.status == "ok":
            why.append("unverified")
        if row.validity != "VALID":
            why.append(f"validity {row.validity or 'none'}")
        if row.accuracy != "PASS":
            why.append(f"accuracy {row.accuracy or 'none'}")
        row.safe_to_ship = "no" if why else "yes"
        row.why_not_safe = ", ".join(why)

    def _tps(self, name: str) -> list[float]:
        return [
            float(v)
            for o in self.repeats.get(name, [])
            if o.status == "ok" and (v := figure_of(o)) is not None
        ]

    def _log_child(self, ch: Any, row: ConfigRow, outcomes: list[RepeatOutcome]) -> None:
        from harness import tracking

        if not getattr(ch, "active", False):
            return
        first = outcomes[0] if outcomes else None
        if first is not None and Path(first.output).is_dir():
            try:
                tracking.log_result_dir(first.output, ch)
            except Exception as exc:  # the sweep's own numbers below still get logged
                print(f"warning: MLflow logging of {first.output} failed: {exc}", flush=True)
            ch.log_artifact(Path(first.output) / RUN_LOG)
        # a capacity sweep's figure is QPS: its own metric names, never mixed with tokens/s
        capacity = self.opt.figure == "capacity"
        fig, each = ("capacity_qps",) * 2 if capacity else ("tps", "tokens_per_second")
        for i, value in enumerate(row.tps_repeats):
            ch.log_metrics({f"sweep.{each}_repeat": value}, step=i)
        metrics = {
            f"sweep.{fig}_median": row.tps_median,
            f"sweep.{fig}_min": row.tps_min,
            f"sweep.{fig}_max": row.tps_max,
            "sweep.spread_pct": row.spread_pct,
            "sweep.usd_per_million_tokens": row.usd_per_million_tokens,
            "sweep.delta_pct": row.delta_pct,
            "sweep.repeats": row.repeats,
            "sweep.valid": 1.0 if row.validity == "VALID" else 0.0,
            "sweep.safe_to_ship": 1.0 if row.safe_to_ship == "yes" else 0.0,
        }
        ch.log_metrics({k: v for k, v in metrics.items() if v is not None})
        ch.set_tags(
            {
                "sweep.status": row.status,
                "sweep.noise_verdict": row.noise_verdict,
                "sweep.validity": row.validity,
                "sweep.accuracy": row.accuracy,
                "sweep.safe_to_ship": row.safe_to_ship,
                "sweep.why_not_safe": row.why_not_safe or None,
                "sweep.error": row.error or None,
                "sweep.confounded": row.confounded or None,
                "sweep.note": row.note or None,
            }
        )

    # the sweep ------------------------------------------------------------------------------

    def run(self) -> list[ConfigRow]:
        base_spec = make_config(self.plan, 0, "baseline", [])
        base_row = self.run_config(base_spec, self.opt.kind)
        outs = self.repeats["baseline"]
        self.baseline = outs[0] if outs and outs[0].status == "ok" else None
        self._add(base_row)
        if self.opt.kind == "isolation":
            for i, knob in enumerate(self.plan.knobs, start=1):
                spec = make_config(self.plan, i, knob.name, [knob])
                self._add(self.run_config(spec, "isolation", (self.baseline, [knob])))
        else:
            self._stacked(base_row)
        return self.rows

    def _add(self, row: ConfigRow) -> None:
        self.rows.append(row)
        if self.on_row is not None:
            self.on_row()

    def not_run(self) -> list[str]:
        """The plan's configs without a row yet, in plan order."""
        done = {r.config for r in self.rows}
        names = ["baseline", *(k.name for k in self.plan.knobs)]
        return [c for c in names if c not in done and "+" + c not in done]

    def _stacked(self, base_row: ConfigRow) -> None:
        stack: list[Knob] = []
        current = base_row
        for i, knob in enumerate(self.plan.knobs, start=1):
            spec = make_config(self.plan, i, "+" + knob.name, [*stack, knob])
            ref_outs = self.repeats.get(current.config) or []
            ref = ref_outs[0] if ref_outs and ref_outs[0].status == "ok" else None
            row = self.run_config(spec, "stacked", (ref, [knob]))
            cur_tps, tps = self._tps(current.config), row.tps_repeats
            keep, reason = False, ""
            if row.status != "ok":
                reason = f"dropped: {row.status}"
            elif not cur_tps or not tps:
                reason = "dropped: no throughput to compare"
            else:
                delta, verdict, band = noise_verdict(cur_tps, tps, self.opt.noise_floor)
                row.step_delta_pct = None if delta is None else 100 * delta
                row.step_verdict = verdict
                helped = verdict == "better" or (
                    verdict == SINGLE_RUN and delta is not None and delta > band
                )
                broke = (current.validity == "VALID" and row.validity != "VALID") or (
                    current.accuracy == "PASS" and row.accuracy != "PASS"
                )
                if self.opt.keep_all:
                    keep, reason = True, "kept (--keep-all)"
                elif broke:
                    reason = "dropped: lost validity or accuracy"
                elif helped and delta is not None:
                    keep, reason = True, f"kept: {100 * delta:+.1f}% vs stack ({verdict})"
                else:
                    reason = f"dropped: {verdict}"
            row.kept = reason
            if keep:
                stack.append(knob)
                current = row
            self.final_stack = [k.name for k in stack]  # so far, if the sweep is stopped
            self._add(row)


class _ConfigFailed(Exception):
    """Raised inside a config's child run so MLflow ends it FAILED; caught by the sweep."""


# --------------------------------------------------------------------------- entry point


def run_sweep(
    plan_path: str | Path,
    options: SweepOptions,
    tracking_cfg: Any,
    runner: RepeatRunner | None = None,
) -> Sweep:
    """Validate everything, then run the sweep under one MLflow parent run. `runner`: one
    repeat (default: an `mlperf-vllm run` child)."""
    from harness import tracking

    plan, options = checked_plan(plan_path, options)
    out = options.output
    if (out / "sweep.json").exists() and not options.resume:
        raise UsageError(
            f"{out} already holds a sweep: pass --resume to continue it or a new --output"
        )
    if options.resume:
        check_resume(plan, options)
    out.mkdir(parents=True, exist_ok=True)
    tracking.check_reachable(tracking_cfg)  # before any engine starts
    meta = _sweep_meta(plan, options)
    if note := figure_note(plan.scenario, options.figure):
        print(f"sweep: {note.strip()}", flush=True)
    name = f"{options.kind} sweep {plan.path.stem} ({out.name})"
    with tracking.start_parent(
        tracking_cfg,
        name,
        params={f"sweep.{k}": v for k, v in meta.items() if k != "knobs"},
        output_dir=out,
    ) as parent:
        meta["mlflow_parent_run_id"] = parent.run_id
        sweep = Sweep(plan, options, parent, runner=runner)

        def so_far() -> None:
            # After each config, the report of those done: a sweep whose process is killed
            # outright (a lent machine taken back, SIGKILL) keeps them, marked unfinished
            if left := sweep.not_run():
                progress = {**meta, "in_progress": "not yet run: " + ", ".join(left)}
                write_reports(out, options.kind, plan, sweep.rows, progress, sweep.final_stack)

        sweep.on_row = so_far
        try:
            sweep.run()
        except KeyboardInterrupt:
            # Ctrl-C or SIGTERM (the running repeat's engine is already ended): the configs
            # that finished keep their report, and it says what did not run
            meta["interrupted"] = "not run: " + ", ".join(sweep.not_run())
            if sweep.rows:
                write_reports(out, options.kind, plan, sweep.rows, meta, sweep.final_stack)
                print(f"sweep: interrupted; report of the finished configs: {out / 'sweep.md'}")
            raise
        write_reports(out, options.kind, plan, sweep.rows, meta, sweep.final_stack)
        rows = sweep.rows
        parent.log_metrics(
            {
                "sweep.configs": len(rows),
                "sweep.failed": sum(r.status == "failed" for r in rows),
                "sweep.confounded": sum(r.status == "confounded" for r in rows),
                "sweep.no_op": sum(r.status == "no-op" for r in rows),
                "sweep.safe": sum(r.safe_to_ship == "yes" for r in rows),
            }
        )
        parent.set_tags({"sweep.final_stack": " + ".join(sweep.final_stack or []) or None})
        for name_ in ("sweep.md", "sweep.png"):
            parent.log_artifact(out / name_)
    return sweep


def _sweep_meta(plan: Plan, options: SweepOptions) -> dict[str, Any]:
    """What sweep.json and the MLflow parent record of the sweep as a whole."""
    return {
        "plan": str(plan.path.resolve()),
        "kind": options.kind,
        "repeats": options.repeats,
        "accuracy": options.accuracy,
        "keep_all": options.keep_all,
        "noise_floor": options.noise_floor,
        "price_per_hour": options.price_per_hour,
        "figure": options.figure,
        "calibrate_args": list(options.calibrate_args),
        **plan_settings(plan, options.accuracy),
        "baseline": plan.baseline.describe(),
        "knobs": {k.name: k.change.describe() for k in plan.knobs},
    }
