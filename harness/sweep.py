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

import csv
import functools
import hashlib
import json
import os
import re
import shlex
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.children import EXIT_TIMEOUT, run_child
from harness.cost import usd_per_million_tokens
from harness.errors import UsageError
from harness.runner import run_argv

KINDS = ("isolation", "stacked")
NOISE_FLOOR = 0.02
SINGLE_RUN = "single run: noise unknown"
RUN_LOG = "run.log"
REPEAT_FILE = "repeat.json"
CONFIG_FILE = "config.json"
SWEEP_FILES = ("sweep.json", "sweep.csv", "sweep.md", "sweep.png", "plan.txt", "summary.txt")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_UNEXPANDED_RE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
_SETTINGS = ("benchmark", "scenario", "model", "dataset", "user_conf", "max_tokens")
# Options of our SUT a knob may set (`--sut KEY=VALUE`), as `mlperf-vllm run` flags; each run
# records them in result.json `sut_options`.
SUT_KNOBS = {"offline_order": "--offline-order", "warmup_samples": "--warmup-samples"}


class PlanError(UsageError):
    """A plan file that cannot be run as written (one line naming the plan line and fix)."""


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class Change:
    """What a knob (or the baseline) sets: vLLM engine args and environment variables."""

    engine_args: tuple[str, ...] = ()  # KEY=VALUE as written
    env: tuple[tuple[str, str], ...] = ()
    sut: tuple[tuple[str, str], ...] = ()  # SUT_KNOBS keys

    def engine_keys(self) -> set[str]:
        return {p.partition("=")[0].strip().lstrip("-").replace("-", "_") for p in self.engine_args}

    def describe(self) -> str:
        parts = [f"--engine-arg {p}" for p in self.engine_args]
        parts += [f"--env {k}={v}" for k, v in self.env]
        parts += [f"--sut {k}={v}" for k, v in self.sut]
        return " ".join(parts)


@dataclass(frozen=True)
class Knob:
    name: str
    change: Change
    line: int


@dataclass(frozen=True)
class Plan:
    path: Path
    text: str
    benchmark: str
    scenario: str
    model: Path
    dataset: Path
    user_conf: Path | None
    max_tokens: int | None
    baseline: Change
    knobs: tuple[Knob, ...]


def _parse_change(tokens: list[str], where: str) -> Change:
    engine: list[str] = []
    env: list[tuple[str, str]] = []
    sut: list[tuple[str, str]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        opt, eq, inline = tok.partition("=") if tok.startswith("--") else (tok, "", "")
        if opt not in ("--engine-arg", "--env", "--sut"):
            raise PlanError(
                f"{where}: unexpected {tok!r}: a knob takes --engine-arg KEY=VALUE, "
                "--env NAME=VALUE and --sut KEY=VALUE only"
            )
        if eq:
            value = inline
        else:
            if i + 1 >= len(tokens):
                raise PlanError(f"{where}: {opt} needs a KEY=VALUE after it")
            i += 1
            value = tokens[i]
        key, sep, _ = value.partition("=")
        if not sep or not key:
            raise PlanError(f"{where}: {opt} {value!r} is not KEY=VALUE")
        if opt == "--engine-arg":
            engine.append(value)
        elif opt == "--sut":
            if key not in SUT_KNOBS:
                raise PlanError(
                    f"{where}: --sut {value!r}: {key!r} is not a SUT option; use one of "
                    f"{', '.join(SUT_KNOBS)}"
                )
            sut.append((key, _sut_value(key, value.partition("=")[2], where)))
        else:
            if not _ENV_RE.match(key):
                raise PlanError(f"{where}: --env {value!r}: {key!r} is not a variable name")
            env.append((key, value.partition("=")[2]))
        i += 1
    return Change(tuple(engine), tuple(env), tuple(sut))


def _sut_value(key: str, value: str, where: str) -> str:
    from sut.offline import ORDERS

    if key == "offline_order" and value not in ORDERS:
        raise PlanError(f"{where}: --sut offline_order={value}: use one of {', '.join(ORDERS)}")
    if key == "warmup_samples" and not value.isdigit():
        raise PlanError(f"{where}: --sut warmup_samples={value}: give a whole number >= 0")
    return value


def _expand(token: str, where: str) -> str:
    out = os.path.expandvars(token)
    missing = _UNEXPANDED_RE.search(out)
    if missing:
        raise PlanError(
            f"{where}: environment variable {missing.group(1)} is not set: "
            f"export it or write the value in the plan"
        )
    return out


def parse_plan(path: str | Path, *, check_engine_args: bool = True) -> Plan:
    """Read and validate a plan; every problem is a PlanError naming file and line."""
    from harness.resources import resolve_user_path

    path = resolve_user_path(Path(path)) or Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise PlanError(
            f"cannot read plan {path}: {exc.strerror}: pass an existing plan file "
            "(see scripts/plans/)"
        ) from None
    settings: dict[str, str] = {}
    baseline = Change()
    knobs: list[Knob] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        where = f"{path}:{n}"
        try:
            tokens = shlex.split(raw, comments=True)
        except ValueError as exc:
            raise PlanError(f"{where}: {exc}: fix the quoting") from None
        if not tokens:
            continue
        tokens = [_expand(t, where) for t in tokens]
        word, rest = tokens[0], tokens[1:]
        if word in _SETTINGS:
            if len(rest) != 1:
                raise PlanError(f"{where}: `{word}` takes one value, e.g. `{word} VALUE`")
            if word in settings:
                raise PlanError(f"{where}: `{word}` is set twice")
            settings[word] = rest[0]
        elif word == "baseline":
            more = _parse_change(rest, where)
            baseline = Change(
                baseline.engine_args + more.engine_args,
                baseline.env + more.env,
                baseline.sut + more.sut,
            )
        elif word == "knob":
            if not rest:
                raise PlanError(f"{where}: `knob` needs a name and its arguments")
            name = rest[0]
            if not _NAME_RE.match(name) or name == "baseline":
                raise PlanError(
                    f"{where}: knob name {name!r} must be letters, digits, _ . + - "
                    "and not 'baseline'"
                )
            if any(k.name == name for k in knobs):
                raise PlanError(f"{where}: knob {name!r} is defined twice")
            change = _parse_change(rest[1:], f"{where} (knob {name})")
            if not change.engine_args and not change.env and not change.sut:
                raise PlanError(
                    f"{where}: knob {name!r} changes nothing: give it "
                    "--engine-arg KEY=VALUE, --env NAME=VALUE or --sut KEY=VALUE"
                )
            knobs.append(Knob(name, change, n))
        else:
            raise PlanError(
                f"{where}: unknown directive {word!r}: use one of "
                f"{', '.join(_SETTINGS)}, baseline, knob"
            )
    for required in ("benchmark", "scenario", "model", "dataset"):
        if required not in settings:
            raise PlanError(f"{path}: no `{required}` line: the baseline needs one")
    if not knobs:
        raise PlanError(f"{path}: no `knob` lines: a sweep needs at least one knob")
    if settings["scenario"] != "Offline" and (baseline.sut or any(k.change.sut for k in knobs)):
        raise PlanError(f"{path}: --sut options apply to the Offline scenario only")
    try:
        from harness.benchmarks import resolve

        resolve(settings["benchmark"], settings["scenario"])
    except (KeyError, ValueError) as exc:
        raise PlanError(f"{path}: {str(exc).strip(chr(39) + chr(34))}") from None
    paths: dict[str, Path] = {}
    for key in ("model", "dataset", "user_conf"):
        if key in settings:
            p = Path(settings[key]).expanduser()
            if key == "user_conf":  # `user_confs/...` also names the shipped confs
                p = resolve_user_path(p) or p
            p = p.resolve()
            if not p.exists():
                raise PlanError(
                    f"{path}: {key} {settings[key]} does not exist: fix the path "
                    "(relative paths are taken from the working directory)"
                )
            paths[key] = p
    max_tokens = None
    if "max_tokens" in settings:
        try:
            max_tokens = int(settings["max_tokens"])
        except ValueError:
            raise PlanError(
                f"{path}: max_tokens {settings['max_tokens']!r} is not an integer"
            ) from None
    plan = Plan(
        path=path,
        text=text,
        benchmark=settings["benchmark"],
        scenario=settings["scenario"],
        model=paths["model"],
        dataset=paths["dataset"],
        user_conf=paths.get("user_conf"),
        max_tokens=max_tokens,
        baseline=baseline,
        knobs=tuple(knobs),
    )
    if check_engine_args:
        validate_engine_args(plan)
    return plan


def validate_engine_args(plan: Plan) -> None:
    """Every engine argument through vLLM's own parser (unknown keys, bad types, bad choices),
    and no knob that merely restates the baseline."""
    from sut.engine import EngineArgError, parse_engine_arg_pairs

    try:
        base = parse_engine_arg_pairs(plan.baseline.engine_args)
    except EngineArgError as exc:
        raise PlanError(f"{plan.path}: baseline: {exc}") from None
    base_env = dict(plan.baseline.env)
    for knob in plan.knobs:
        try:
            typed = parse_engine_arg_pairs(knob.change.engine_args)
        except EngineArgError as exc:
            raise PlanError(f"{plan.path}:{knob.line}: knob {knob.name}: {exc}") from None
        same = [k for k, v in typed.items() if k in base and base[k] == v]
        same += [k for k, v in knob.change.env if base_env.get(k) == v]
        same += [k for k, v in knob.change.sut if dict(plan.baseline.sut).get(k) == v]
        if same:
            raise PlanError(
                f"{plan.path}:{knob.line}: knob {knob.name} sets {', '.join(same)} "
                "to the baseline's value: it would measure nothing; drop or change it"
            )


# --------------------------------------------------------------------------- configs


@dataclass(frozen=True)
class ConfigSpec:
    index: int
    name: str
    knobs: tuple[str, ...]  # knob names applied on top of the baseline
    engine_args: tuple[str, ...]  # baseline's then the knobs' (later wins)
    env: tuple[tuple[str, str], ...]
    expected_keys: tuple[str, ...]  # engine keys that must differ from the baseline
    expected_values: tuple[tuple[str, str], ...]  # as written, for the report
    sut: tuple[tuple[str, str], ...] = ()  # SUT options (baseline's, then the knobs')

    @property
    def dirname(self) -> str:
        return f"{self.index:02d}_{self.name.replace('+', 'plus-')}"

    def signature(self, plan: Plan, accuracy: bool) -> str:
        doc = {
            "benchmark": plan.benchmark,
            "scenario": plan.scenario,
            "model": str(plan.model),
            "dataset": str(plan.dataset),
            "user_conf": str(plan.user_conf),
            "max_tokens": plan.max_tokens,
            "engine_args": list(self.engine_args),
            "env": list(self.env),
            **({"sut": list(self.sut)} if self.sut else {}),  # older sweeps resume as before
            "accuracy": accuracy,
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def make_config(plan: Plan, index: int, name: str, knobs: Sequence[Knob]) -> ConfigSpec:
    engine = list(plan.baseline.engine_args)
    env = dict(plan.baseline.env)
    sut = dict(plan.baseline.sut)
    keys: list[str] = []
    values: dict[str, str] = {}
    for knob in knobs:
        engine.extend(knob.change.engine_args)
        env.update(knob.change.env)
        for pair in knob.change.engine_args:
            key = pair.partition("=")[0].strip().lstrip("-").replace("-", "_")
            if key not in keys:
                keys.append(key)
            values[key] = pair.partition("=")[2]
        for k, v in knob.change.env:
            values[f"env.{k}"] = v
        sut.update(knob.change.sut)
        for k, v in knob.change.sut:
            values[f"sut.{k}"] = v
    return ConfigSpec(
        index,
        name,
        tuple(k.name for k in knobs),
        tuple(engine),
        tuple(sorted(env.items())),
        tuple(keys),
        tuple(values.items()),
        tuple(sorted(sut.items())),
    )


# --------------------------------------------------------------------------- one repeat


@dataclass
class RepeatOutcome:
    status: str  # "ok" or "failed"
    tokens_per_second: float | None = None
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


_LOG_PREFIX_RE = re.compile(r"^\([^)]*pid=\d+\)\s+(?:[A-Z]+\s+\d\d-\d\d [\d:]+\s+\[[^\]]*\]\s+)?")
_EXC_RE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Failure)):\s*(.+)$")
# Wrappers that point at a root cause printed earlier, not the cause itself.
_GENERIC = (
    "Engine core initialization failed",
    "please check the stack trace above",
    "See root cause above",
    "engine start failed: RuntimeError: Engine core",
)


def engine_message(log_text: str, result_error: str | None = None) -> str:
    """The most specific exception line of a failed run: the engine's own words (e.g. the
    worker's `ValueError: No common block size for 7`), not the wrappers around it."""
    found: list[str] = []
    for raw in log_text.splitlines():
        line = _LOG_PREFIX_RE.sub("", raw.strip())
        m = _EXC_RE.match(line)
        if m:
            found.append(f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2).strip()}")
    specific = [f for f in found if not any(g in f for g in _GENERIC)]
    if specific:
        return specific[0]
    if result_error:
        return result_error
    if found:
        return found[-1]
    tail = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    return tail[-1][:500] if tail else "the run ended without output"


def _fingerprint(result: Mapping[str, Any]) -> dict[str, Any]:
    """Everything besides the engine args that must be equal across the configs of a sweep."""
    perf = result.get("performance") or {}
    return {
        "benchmark": result.get("benchmark"),
        "scenario": result.get("scenario"),
        "model": result.get("model"),
        "dataset_sha256": result.get("dataset_sha256"),
        "user_conf": result.get("user_conf"),
        "sampling": result.get("sampling"),
        # SUT options (offline order, warm-up); absent before they were recorded
        **({"sut_options": result["sut_options"]} if "sut_options" in result else {}),
        "loadgen": {
            k: v for k, v in (perf.get("settings") or {}).items() if k.startswith("effective_")
        },
    }


def read_repeat(out: Path, rc: int, log_text: str) -> RepeatOutcome:
    """A repeat's outcome from its result.json and the subprocess output."""
    try:
        result = json.loads((out / "result.json").read_text())
    except (OSError, ValueError):
        result = {}
    perf = result.get("performance") or {}
    acc = result.get("accuracy") or {}
    accuracy = acc.get("verdict")
    if accuracy is None and acc.get("evaluation_error"):
        accuracy = f"error: {acc['evaluation_error']}"
    outcome = RepeatOutcome(
        status="ok",
        tokens_per_second=perf.get("tokens_per_second"),
        validity=perf.get("validity"),
        accuracy=accuracy,
        engine_args=dict(result.get("engine_args") or {}),
        resolved=dict(result.get("engine_resolved_args") or {}),
        fingerprint=_fingerprint(result),
        env_vars=result.get("env_vars"),
        output=str(out),
    )
    if rc != 0 or result.get("status") != "completed" or not perf:
        outcome.status = "failed"
        outcome.error = engine_message(log_text, result.get("error"))
    return outcome


def run_command(
    plan: Plan,
    spec: ConfigSpec,
    out: Path,
    mode: str,
    nltk_data: str | None = None,
    extra: Sequence[str] = (),
    stall_timeout_s: float | None = None,
) -> list[str]:
    cmd = run_argv(
        plan.benchmark, plan.scenario, mode, plan.model, plan.dataset, out, plan.user_conf, *extra
    )
    if plan.max_tokens:
        cmd += ["--max-tokens", str(plan.max_tokens)]
    if nltk_data:
        cmd += ["--nltk-data", nltk_data]
    if stall_timeout_s is not None:
        cmd += ["--stall-timeout", f"{stall_timeout_s:g}"]
    for pair in spec.engine_args:
        cmd += ["--engine-arg", pair]
    for key, value in spec.sut:
        cmd += [SUT_KNOBS[key], value]
    return cmd


def run_repeat(
    plan: Plan,
    spec: ConfigSpec,
    out: Path,
    mode: str,
    timeout_s: float | None = None,
    extra: Sequence[str] = (),
    stall_timeout_s: float | None = None,
) -> RepeatOutcome:
    """One `mlperf-vllm run` in its own process (`extra`: more of its options, e.g. the
    price); its output goes to OUT/run.log."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("result.json", REPEAT_FILE):
        (out / stale).unlink(missing_ok=True)
    env = {**os.environ, **dict(spec.env)}
    for k in ("MLPERF_VLLM_PARENT_RUN_ID",):
        env.pop(k, None)
    cmd = run_command(plan, spec, out, mode, env.get("NLTK_DATA"), extra, stall_timeout_s)
    t0 = time.monotonic()
    with open(out / RUN_LOG, "w") as log:
        log.write("$ " + shlex.join(cmd) + "\n")
        if spec.env:
            log.write("# env: " + " ".join(f"{k}={v}" for k, v in spec.env) + "\n")
        log.flush()
        # Its own process group: a timeout or Ctrl-C / SIGTERM ends the engine's processes too.
        rc = run_child(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout_s=timeout_s)
        if rc == EXIT_TIMEOUT:
            log.write(f"\nTimeoutError: config ran past --config-timeout {timeout_s} s\n")
    outcome = read_repeat(out, rc, (out / RUN_LOG).read_text(errors="replace"))
    outcome.wall_s = round(time.monotonic() - t0, 1)
    return outcome


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


# --------------------------------------------------------------------------- config results


@dataclass
class ConfigRow:
    index: int
    config: str
    knobs: str
    change: str
    status: str = "pending"  # ok / failed / confounded / no-op
    repeats: int = 0
    tps_median: float | None = None
    tps_min: float | None = None
    tps_max: float | None = None
    usd_per_million_tokens: float | None = None  # at --price-per-hour, from the median
    spread_pct: float | None = None
    delta_pct: float | None = None  # vs baseline
    noise_band_pct: float | None = None  # |delta| at or below this is noise (see RULES)
    noise_verdict: str = ""
    validity: str = ""
    accuracy: str = ""
    safe_to_ship: str = "no"
    why_not_safe: str = ""
    step_delta_pct: float | None = None  # stacked: vs the stack it was added to
    step_verdict: str = ""
    kept: str = ""
    error: str = ""
    confounded: str = ""
    note: str = ""
    resumed: int = 0
    output_dir: str = ""
    mlflow_run_id: str = ""
    tps_repeats: list[float] = field(default_factory=list)

    def csv_row(self) -> dict[str, Any]:
        d = asdict(self)
        d["tps_repeats"] = " ".join(f"{v:.2f}" for v in self.tps_repeats)
        for k in ("tps_median", "tps_min", "tps_max"):
            d[k] = "" if d[k] is None else f"{d[k]:.2f}"
        for k in ("spread_pct", "delta_pct", "step_delta_pct", "noise_band_pct"):
            d[k] = "" if d[k] is None else f"{d[k]:+.2f}" if "delta" in k else f"{d[k]:.2f}"
        return d


CSV_COLUMNS = [f for f in ConfigRow.__dataclass_fields__]


@dataclass(frozen=True)
class SweepOptions:
    kind: str = "isolation"
    repeats: int = 2
    accuracy: bool = False
    output: Path = Path("runs/sweep")
    resume: bool = False
    keep_all: bool = False
    noise_floor: float = NOISE_FLOOR
    config_timeout_s: float | None = None
    price_per_hour: float | None = None  # passed to every run; rows carry $/Mtok
    stall_timeout_s: float | None = None  # each repeat's --stall-timeout (None: run's default)


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
        self.opt = options
        if parent is None:  # no tracking: a disabled run whose methods do nothing
            from harness.tracking import TrackedRun, TrackingConfig

            parent = TrackedRun(TrackingConfig(uri="", enabled=False))
        self.parent = parent
        if runner is None:
            extra = (
                ()
                if options.price_per_hour is None
                else ("--price-per-hour", f"{options.price_per_hour:g}")
            )
            runner = functools.partial(run_repeat, extra=extra)
        self.runner = runner
        self.rows: list[ConfigRow] = []
        self.repeats: dict[str, list[RepeatOutcome]] = {}
        self.baseline: RepeatOutcome | None = None

    # one config ---------------------------------------------------------------------------

    def _repeat(self, spec: ConfigSpec, i: int) -> tuple[RepeatOutcome, bool]:
        out = self.opt.output / spec.dirname / f"rep{i + 1}"
        mode = "both" if (self.opt.accuracy and i == 0) else "performance"
        sig = spec.signature(self.plan, self.opt.accuracy) + f"/{mode}"
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
            + (f" {row.tps_median:.1f} tok/s" if row.tps_median is not None else "")
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
        failed = [o for o in outcomes if o.status != "ok"]
        tps = [
            float(o.tokens_per_second)
            for o in outcomes
            if o.status == "ok" and o.tokens_per_second is not None
        ]
        row.tps_repeats = tps
        if tps:
            row.tps_median = statistics.median(tps)
            if self.opt.price_per_hour is not None:
                row.usd_per_million_tokens = usd_per_million_tokens(
                    row.tps_median, self.opt.price_per_hour
                )
            row.tps_min, row.tps_max = min(tps), max(tps)
            s = rel_spread(tps)
            row.spread_pct = None if s is None else 100 * s
        validities = {o.validity for o in outcomes if o.status == "ok"}
        row.validity = "VALID" if validities == {"VALID"} else "INVALID" if validities else ""
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
            float(o.tokens_per_second)
            for o in self.repeats.get(name, [])
            if o.status == "ok" and o.tokens_per_second is not None
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
        for i, value in enumerate(row.tps_repeats):
            ch.log_metrics({"sweep.tokens_per_second_repeat": value}, step=i)
        metrics = {
            "sweep.tps_median": row.tps_median,
            "sweep.tps_min": row.tps_min,
            "sweep.tps_max": row.tps_max,
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
        self.rows.append(base_row)
        if self.opt.kind == "isolation":
            for i, knob in enumerate(self.plan.knobs, start=1):
                spec = make_config(self.plan, i, knob.name, [knob])
                self.rows.append(self.run_config(spec, "isolation", (self.baseline, [knob])))
        else:
            self._stacked(base_row)
        return self.rows

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
            self.rows.append(row)
        self.final_stack = [k.name for k in stack]


class _ConfigFailed(Exception):
    """Raised inside a config's child run so MLflow ends it FAILED; caught by the sweep."""


# --------------------------------------------------------------------------- reports


def _fmt(v: float | None, spec: str = ",.1f") -> str:
    return "" if v is None else format(v, spec)


NOTE_CHARS = 160  # the report's note column: one readable line per config


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _noise_cell(r: ConfigRow) -> str:
    """The verdict with the band it was judged by, so "within noise" says how much noise."""
    if r.noise_band_pct is None or r.noise_verdict in ("", "reference", SINGLE_RUN):
        return r.noise_verdict
    return f"{r.noise_verdict} (band ±{r.noise_band_pct:.1f}%)"


def markdown_table(rows: Sequence[ConfigRow], kind: str) -> str:
    priced = any(r.usd_per_million_tokens is not None for r in rows)
    head = [
        "config",
        "change",
        "status",
        "tok/s median",
        *(["$/M tokens"] if priced else []),
        "spread %",
        "delta %",
        "noise",
        "validity",
        "accuracy",
        "safe to ship",
    ]
    if kind == "stacked":
        head += ["vs stack %", "kept"]
    head += ["error / note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [
            r.config,
            r.change,
            r.status,
            _fmt(r.tps_median),
            *([_fmt(r.usd_per_million_tokens, ",.4f")] if priced else []),
            _fmt(r.spread_pct, ".1f"),
            _fmt(r.delta_pct, "+.1f"),
            _noise_cell(r),
            r.validity,
            r.accuracy,
            r.safe_to_ship,
        ]
        if kind == "stacked":
            cells += [_fmt(r.step_delta_pct, "+.1f"), r.kept]
        cells += [_cut(r.error or r.confounded or r.note or r.why_not_safe, NOTE_CHARS)]
        lines.append(
            "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"
        )
    return "\n".join(lines) + "\n"


RULES = f"""\
Rules: delta = median(config)/median(baseline) - 1, over each config's repeats (default 2).
Noise band = max(2 x the larger relative spread (max-min)/median of the two configs, the
{NOISE_FLOOR:.0%} floor; --noise-floor): delta above +band "better", below -band "worse", else
"within noise" (the delta is below the measured noise: no claim). One repeat on either side:
"{SINGLE_RUN}" (no spread to measure; stacking then uses the floor
alone). No-op knob = every engine argument it sets already held that value in the engine the
config is compared with (as the engine resolved it): its delta is noise, whatever its size.
Confounded = the run's engine args differ from the baseline's in other keys than the knob's
(structured values compared key by key), or LoadGen settings / sampling / model / dataset /
engine environment differ. Safe to ship = ran, not confounded, not a no-op, every repeat
VALID, accuracy PASS.
"""


def write_csv(rows: Sequence[ConfigRow], path: Path) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow(r.csv_row())


def write_chart(rows: Sequence[ConfigRow], path: Path, title: str) -> None:
    """Median tok/s per config, min-max whiskers, colour by verdict, failed configs marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    colours = {
        "safe": "#2e7d32",
        "valid": "#1565c0",
        "invalid": "#f9a825",
        "confounded": "#8e24aa",
        "no-op": "#9e9e9e",
        "failed": "#c62828",
    }
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(rows) + 2), 4.5))
    top = max([r.tps_max or 0 for r in rows] + [1.0])
    for x, r in enumerate(rows):
        if r.status == "failed":
            ax.bar(x, top * 0.04, color=colours["failed"], hatch="xx")
            ax.text(
                x,
                top * 0.06,
                "FAILED",
                ha="center",
                va="bottom",
                fontsize=8,
                color=colours["failed"],
                rotation=90,
            )
            continue
        key = (
            r.status
            if r.status in ("confounded", "no-op")
            else "safe"
            if r.safe_to_ship == "yes"
            else "valid"
            if r.validity == "VALID"
            else "invalid"
        )
        med = r.tps_median or 0.0
        err = None
        if r.tps_min is not None and r.tps_max is not None and r.repeats > 1:
            err = [[med - r.tps_min], [r.tps_max - med]]
        ax.bar(x, med, color=colours[key], yerr=err, capsize=4)
        label = f"{r.validity or '?'}\nacc {r.accuracy or '-'}"
        if r.delta_pct is not None:
            label = f"{r.delta_pct:+.1f}%\n" + label
        ax.text(x, med + top * 0.02, label, ha="center", va="bottom", fontsize=7)
    base = next((r.tps_median for r in rows if r.config == "baseline"), None)
    if base:
        ax.axhline(base, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(rows)), [r.config for r in rows], rotation=30, ha="right")
    ax.set_ylabel("tokens/s (median over repeats)")
    ax.set_ylim(0, top * 1.35)
    ax.set_title(title)
    ax.legend(
        handles=[Patch(color=c, label=k) for k, c in colours.items()],
        fontsize=7,
        loc="upper right",
        ncol=5,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_reports(sweep: Sweep, meta: dict[str, Any]) -> dict[str, Path]:
    out = sweep.opt.output
    paths = {name: out / name for name in SWEEP_FILES}
    write_csv(sweep.rows, paths["sweep.csv"])
    table = markdown_table(sweep.rows, sweep.opt.kind)
    title = f"{sweep.opt.kind} sweep: {sweep.plan.path.name}"
    extra = ""
    if sweep.opt.kind == "stacked":
        extra = f"\nFinal stack: {' + '.join(getattr(sweep, 'final_stack', [])) or '(baseline)'}\n"
    md = f"# {title}\n\n{table}{extra}\n{RULES}"
    paths["sweep.md"].write_text(md)
    paths["summary.txt"].write_text(md)
    paths["plan.txt"].write_text(sweep.plan.text)
    write_chart(sweep.rows, paths["sweep.png"], title)
    paths["sweep.json"].write_text(
        json.dumps(
            {
                **meta,
                "rows": [asdict(r) for r in sweep.rows],
                "final_stack": getattr(sweep, "final_stack", None),
            },
            indent=2,
            default=str,
        )
        + "\n"
    )
    return paths


# --------------------------------------------------------------------------- entry point


def run_sweep(plan_path: str | Path, options: SweepOptions, tracking_cfg: Any) -> Sweep:
    """Validate everything, then run the sweep under one MLflow parent run."""
    from harness import tracking

    if options.kind not in KINDS:
        raise UsageError(f"unknown sweep kind {options.kind!r}: choose one of {', '.join(KINDS)}")
    if options.repeats < 1:
        raise UsageError("--repeats must be at least 1")
    if options.price_per_hour is not None and options.price_per_hour <= 0:
        raise UsageError("--price-per-hour must be a positive number of dollars, e.g. 3.50")
    plan = parse_plan(plan_path)
    out = options.output
    if (out / "sweep.json").exists() and not options.resume:
        raise UsageError(
            f"{out} already holds a sweep: pass --resume to continue it or a new --output"
        )
    out.mkdir(parents=True, exist_ok=True)
    tracking.check_reachable(tracking_cfg)  # before any engine starts
    meta = {
        "plan": str(plan.path.resolve()),
        "kind": options.kind,
        "repeats": options.repeats,
        "accuracy": options.accuracy,
        "keep_all": options.keep_all,
        "noise_floor": options.noise_floor,
        "price_per_hour": options.price_per_hour,
        "benchmark": plan.benchmark,
        "scenario": plan.scenario,
        "model": str(plan.model),
        "dataset": str(plan.dataset),
        "user_conf": str(plan.user_conf),
        "max_tokens": plan.max_tokens,
        "baseline": plan.baseline.describe(),
        "knobs": {k.name: k.change.describe() for k in plan.knobs},
    }
    name = f"{options.kind} sweep {plan.path.stem} ({out.name})"
    with tracking.start_parent(
        tracking_cfg,
        name,
        params={f"sweep.{k}": v for k, v in meta.items() if k != "knobs"},
        output_dir=out,
    ) as parent:
        meta["mlflow_parent_run_id"] = parent.run_id
        runner = functools.partial(run_repeat, stall_timeout_s=options.stall_timeout_s)
        sweep = Sweep(plan, options, parent, runner)
        sweep.run()
        write_reports(sweep, meta)
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
        parent.set_tags(
            {"sweep.final_stack": " + ".join(getattr(sweep, "final_stack", [])) or None}
        )
        for name_ in ("sweep.md", "sweep.png"):
            parent.log_artifact(out / name_)
    return sweep


# --------------------------------------------------------------------------- CLI


def add_sweep_arguments(p: Any) -> None:
    """`mlperf-vllm sweep PLAN`: the arguments (harness.cli adds the MLflow ones)."""
    p.add_argument("plan", type=Path, help="plan file (see scripts/plans/)")
    p.add_argument(
        "--kind",
        default="isolation",
        choices=KINDS,
        help="isolation: baseline + each knob alone; stacked: knobs added in order",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=2,
        help="runs per config (default 2; 1 gives no noise estimate: deltas of a few "
        "percent cannot be told from noise)",
    )
    p.add_argument(
        "--accuracy",
        action="store_true",
        help="also run accuracy + evaluation for each config (first repeat)",
    )
    p.add_argument("--output", type=Path, help="sweep folder (default: runs/sweeps/<plan>-<kind>)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue a sweep in --output: finished repeats are not run again",
    )
    p.add_argument(
        "--keep-all", action="store_true", help="stacked: keep every knob that ran, helped or not"
    )
    p.add_argument(
        "--noise-floor",
        type=float,
        default=NOISE_FLOOR,
        help="smallest relative change called better/worse (default 0.02)",
    )
    p.add_argument(
        "--price-per-hour",
        type=float,
        metavar="DOLLARS",
        help="hourly machine price, passed to every run: rows carry dollars per million "
        "output tokens",
    )
    p.add_argument(
        "--config-timeout",
        type=float,
        help="seconds one repeat may take before it is recorded as failed (its whole "
        "process group is ended)",
    )
    p.add_argument(
        "--stall-timeout",
        type=float,
        metavar="S",
        help="each repeat fails when its engine produces nothing for S seconds with samples "
        "in flight (default: the run's)",
    )


def cmd_sweep(args: Any) -> int:
    from harness import tracking

    output = args.output or Path("runs/sweeps") / f"{Path(args.plan).stem}-{args.kind}"
    opts = SweepOptions(
        kind=args.kind,
        repeats=args.repeats,
        accuracy=args.accuracy,
        output=output,
        resume=args.resume,
        keep_all=args.keep_all,
        noise_floor=args.noise_floor,
        config_timeout_s=args.config_timeout,
        price_per_hour=args.price_per_hour,
        stall_timeout_s=args.stall_timeout,
    )
    cfg = tracking.resolve_tracking(args, default_experiment="mlperf-vllm-sweeps")
    if opts.repeats == 1:
        print(
            "warning: --repeats 1: no run-to-run noise is measured; a delta below the "
            f"{opts.noise_floor:.0%} floor is noise, and larger ones are unconfirmed",
            flush=True,
        )
    sweep = run_sweep(args.plan, opts, cfg)
    print(markdown_table(sweep.rows, opts.kind))
    print(RULES)
    print(f"sweep results: {output / 'sweep.md'} {output / 'sweep.csv'} {output / 'sweep.png'}")
    return 0
