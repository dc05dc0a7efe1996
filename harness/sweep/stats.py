"""Verdicts on repeats: noise bands, the confounding guard, no-op knobs."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.sweep.plan import NOISE_FLOOR, SINGLE_RUN, ConfigSpec, Knob


@dataclass
class RepeatOutcome:
    status: str  # "ok" or "failed"
    tokens_per_second: float | None = None
    capacity_qps: float | None = None  # a capacity repeat's figure (harness.sweep.repeat)
    validity: str | None = None
    accuracy: str | None = None  # PASS / FAIL / "error: ..." / None (not run)
    error: str | None = None
    engine_args: dict[str, Any] = field(default_factory=dict)
    # every engine argument as the engine resolved it (result.json `engine_resolved_args`)
    resolved: dict[str, Any] = field(default_factory=dict)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    env_vars: dict[str, str] | None = None  # as the run saw them; None: not recorded
    output: str = ""
    wall_s: float = 0.0
    signature: str = ""
    # the sweep's shared settings it ran under (plan.plan_settings); None in older sweeps
    settings: dict[str, Any] | None = None


def figure_of(o: RepeatOutcome) -> float | None:
    """The repeat's figure: its capacity (QPS) in a capacity sweep, else its tokens/s."""
    return o.capacity_qps if o.capacity_qps is not None else o.tokens_per_second


# --------------------------------------------------------------------------- verdicts


def rel_spread(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med else None


def noise_verdict(
    reference: Sequence[float], candidate: Sequence[float], floor: float = NOISE_FLOOR
) -> tuple[float | None, str, float]:
    """(delta as a fraction, verdict, band used). See the module docstring for the rule."""
    if not reference or not candidate:
        return None, "n/a", floor
    ref, cand = statistics.median(reference), statistics.median(candidate)
    if not ref:
        return None, "n/a", floor
    delta = cand / ref - 1.0
    spreads = [rel_spread(reference), rel_spread(candidate)]
    if any(s is None for s in spreads):
        return delta, SINGLE_RUN, floor
    band = max(2 * max(s for s in spreads if s is not None), floor)
    if delta > band:
        return delta, "better", band
    if delta < -band:
        return delta, "worse", band
    return delta, "within noise", band


def _normal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip().lower()


NOTE_VALUE_CHARS = 60  # a value quoted in a note is cut here: notes stay one short line


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= NOTE_VALUE_CHARS else text[: NOTE_VALUE_CHARS - 3] + "..."


def _parsed(value: Any) -> Any:
    """JSON text (a dict or list, as plans and result.json write structured values) parsed;
    anything else as is."""
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def values_match(want: Any, got: Any) -> bool:
    """Whether `got` holds what `want` asks for, compared as values, not as text: JSON on both
    sides is parsed and a dict `want` is compared on its own keys only (the engine fills in
    the rest of a config object); booleans and numbers compare across spellings."""
    w, g = _parsed(want), _parsed(got)
    if isinstance(w, dict):
        return isinstance(g, dict) and all(k in g and values_match(v, g[k]) for k, v in w.items())
    if isinstance(w, list):
        return (
            isinstance(g, list)
            and len(w) == len(g)
            and all(values_match(a, b) for a, b in zip(w, g, strict=True))
        )
    return _normal(w) == _normal(g) or _numeric_equal(w, g)


def _same(a: Any, b: Any) -> bool:
    return values_match(a, b) and values_match(b, a)


def confounding(base: RepeatOutcome, run: RepeatOutcome, spec: ConfigSpec) -> str | None:
    """Why this run is not a clean change of the knob(s) against the baseline, or None."""
    problems: list[str] = []
    keys = set(base.engine_args) | set(run.engine_args)
    differ = {
        k
        for k in keys
        if (k in base.engine_args) != (k in run.engine_args)
        or not _same(base.engine_args.get(k), run.engine_args.get(k))
    }
    expected = set(spec.expected_keys)
    if differ - expected:
        problems.append(
            "engine args changed beyond the knob: "
            + ", ".join(
                f"{k}={_short(base.engine_args.get(k))}->{_short(run.engine_args.get(k))}"
                for k in sorted(differ - expected)
            )
        )
    if expected - differ:
        problems.append(
            "knob had no effect on the engine args: " + ", ".join(sorted(expected - differ))
        )
    requested = dict(spec.expected_values)
    for k in sorted(expected & differ):
        want, got = requested.get(k), run.engine_args.get(k)
        if want is not None and not values_match(want, got):
            problems.append(f"{k} ran as {_short(got)}, the plan asked for {_short(want)}")
    problems += _env_confounding(base.env_vars, run.env_vars, dict(spec.env))
    wanted_sut = dict(spec.sut)
    base_sut, run_sut = base.fingerprint.get("sut_options"), run.fingerprint.get("sut_options")
    if isinstance(base_sut, dict) and isinstance(run_sut, dict):
        for k in sorted(set(base_sut) | set(run_sut)):
            if k in wanted_sut:
                if not values_match(wanted_sut[k], run_sut.get(k)):
                    problems.append(
                        f"sut {k} ran as {_short(run_sut.get(k))}, the plan asked for "
                        f"{_short(wanted_sut[k])}"
                    )
            elif base_sut.get(k) != run_sut.get(k):
                problems.append(f"sut_options differs from the baseline: {k}")
    for key, value in base.fingerprint.items():
        if key == "sut_options":
            continue
        other = run.fingerprint.get(key)
        if value != other:
            if isinstance(value, dict) and isinstance(other, dict):
                changed = sorted(k for k in set(value) | set(other) if value.get(k) != other.get(k))
                problems.append(f"{key} differs from the baseline: {', '.join(changed)}")
            else:
                problems.append(f"{key} differs from the baseline: {value!r} -> {other!r}")
    return "; ".join(problems) or None


def _env_confounding(
    base: dict[str, str] | None, run: dict[str, str] | None, wanted: dict[str, str]
) -> list[str]:
    """Engine-relevant environment variables must differ from the baseline's only where the
    config sets them, and hold the values it set."""
    if base is None or run is None:  # a result.json from before env_vars were recorded
        return []
    problems = []
    differ = sorted(k for k in set(base) | set(run) if base.get(k) != run.get(k))
    beyond = [k for k in differ if k not in wanted]
    if beyond:
        problems.append(
            "environment changed beyond the knob: "
            + ", ".join(f"{k}={base.get(k)!r}->{run.get(k)!r}" for k in beyond)
        )
    for k, v in sorted(wanted.items()):
        if k in run and run[k] != v:
            problems.append(f"{k} ran as {run[k]!r}, the plan asked for {v!r}")
    return problems


def no_op(reference: RepeatOutcome, run: RepeatOutcome, knobs: Sequence[Knob]) -> str | None:
    """Why these knobs change nothing in the engine, or None: every engine argument they set
    already held that value in the reference run as the engine resolved it (result.json
    `engine_resolved_args`), e.g. `async_scheduling=true` where vLLM schedules asynchronously
    by default; or the run resolved it to the reference's value anyway. A knob that sets an
    environment variable, or a key the engine does not report, is never called a no-op."""
    pairs = [p.partition("=") for k in knobs for p in k.change.engine_args]
    if not pairs or any(k.change.env or k.change.sut for k in knobs):
        return None
    same = []
    for raw_key, _, want in pairs:
        key = raw_key.strip().lstrip("-").replace("-", "_")
        if key not in reference.resolved:
            return None
        had = reference.resolved[key]
        w = _parsed(want)
        if isinstance(w, dict) and isinstance(had, dict):  # compare the knob's own keys only
            had = {k: had.get(k) for k in w}
        ran = run.resolved.get(key)
        if isinstance(w, dict) and isinstance(ran, dict):
            ran = {k: ran.get(k) for k in w}
        if not (values_match(want, had) or (key in run.resolved and _same(ran, had))):
            return None
        same.append(f"{key}={_short(had)}")
    return "no-op: the engine already ran " + ", ".join(same) + " without the knob"


def _numeric_equal(a: Any, b: Any) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return False
