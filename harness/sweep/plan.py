"""A sweep plan: its format (documented in scripts/plans/), parsing and validation, and the
config each line becomes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError, did_you_mean

KINDS = ("isolation", "stacked")
NOISE_FLOOR = 0.02
SINGLE_RUN = "single run: noise unknown"
REPEAT_FILE = "repeat.json"
CONFIG_FILE = "config.json"
SWEEP_FILES = ("sweep.json", "sweep.csv", "sweep.md", "sweep.png", "plan.txt", "summary.txt")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_UNEXPANDED_RE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def plan_settings_names() -> tuple[str, ...]:
    """A plan's setting lines: the RunSpec fields declared `plan="setting"` (one declaration)."""
    from harness.run.setup.spec import RunSpec

    return tuple(RunSpec.plan_fields("setting"))


def sut_knobs() -> dict[str, tuple[str, ...] | None]:
    """Options of our SUT a knob may set (`--sut KEY=VALUE`): the RunSpec fields declared
    `plan="knob"`, each with the scenarios it applies to (None: every one). They are applied
    over the plan's run, and each run records them in result.json `sut_options`."""
    from harness.run.setup.spec import RunSpec

    return {name: how.scenarios for name, how in RunSpec.plan_fields("knob").items()}


class PlanError(UsageError):
    """A plan file that cannot be run as written (one line naming the plan line and fix)."""


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class Change:
    """What a knob (or the baseline) sets: vLLM engine args and environment variables."""

    engine_args: tuple[str, ...] = ()  # KEY=VALUE as written
    env: tuple[tuple[str, str], ...] = ()
    sut: tuple[tuple[str, str], ...] = ()  # sut_knobs() keys

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
    # weights-free throughput sweeps (dummy weights): fixed-length outputs, or each sample's
    # output length from a dataset column (a benchmark's output length profile)
    ignore_eos: bool = False
    output_lengths: str | None = None


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
            knobs = sut_knobs()
            if key not in knobs:
                hint = did_you_mean(key, knobs)
                raise PlanError(
                    f"{where}: --sut {value!r}: {key!r} is not a SUT option{hint}; use one of "
                    f"{', '.join(knobs)}"
                )
            sut.append((key, _sut_value(key, value.partition("=")[2], where)))
        else:
            if not _ENV_RE.match(key):
                raise PlanError(f"{where}: --env {value!r}: {key!r} is not a variable name")
            env.append((key, value.partition("=")[2]))
        i += 1
    return Change(tuple(engine), tuple(env), tuple(sut))


def _sut_value(key: str, value: str, where: str) -> str:
    """A knob's `--sut KEY=VALUE` checked as the run will read it (RunSpec.parse_value)."""
    from harness.run.setup.spec import RunSpec

    try:
        RunSpec.parse_value(key, value)
    except UsageError as exc:
        raise PlanError(f"{where}: --sut {exc}") from None
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
    settings, baseline, knobs = _parse_lines(path, text)
    for required in ("benchmark", "scenario", "model", "dataset"):
        if required not in settings:
            raise PlanError(f"{path}: no `{required}` line: the baseline needs one")
    if not knobs:
        raise PlanError(f"{path}: no `knob` lines: a sweep needs at least one knob")
    _check_scenarios(path, settings["scenario"], baseline, knobs)
    try:
        from harness.benchmarks import resolve

        resolve(settings["benchmark"], settings["scenario"])
    except (KeyError, ValueError) as exc:
        raise PlanError(f"{path}: {str(exc).strip(chr(39) + chr(34))}") from None
    paths = _plan_paths(path, settings)
    max_tokens, ignore_eos, output_lengths = _sampling(path, settings)
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
        ignore_eos=ignore_eos,
        output_lengths=output_lengths,
    )
    if check_engine_args:
        validate_engine_args(plan)
    return plan


def _check_scenarios(path: Path, scenario: str, baseline: Change, knobs: list[Knob]) -> None:
    """Each `--sut` option only in a plan whose scenario it applies to (RunSpec's declaration)."""
    applies = sut_knobs()
    for key, _ in baseline.sut + tuple(p for k in knobs for p in k.change.sut):
        only = applies.get(key)
        if only is not None and scenario not in only:
            raise PlanError(
                f"{path}: --sut {key} applies to the {' / '.join(only)} scenario only, "
                f"not {scenario}: drop it or sweep a {only[0]} plan"
            )


def _parse_lines(path: Path, text: str) -> tuple[dict[str, str], Change, list[Knob]]:
    """The plan's lines, each checked as read: its settings, the baseline, the knobs."""
    settings: dict[str, str] = {}
    baseline = Change()
    knobs: list[Knob] = []
    names = plan_settings_names()
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
        if word in names:
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
                f"{', '.join(names)}, baseline, knob"
            )
    return settings, baseline, knobs


def _plan_paths(path: Path, settings: dict[str, str]) -> dict[str, Path]:
    """The model, dataset and user.conf the plan names, resolved; each must exist."""
    from harness.resources import resolve_user_path

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
    return paths


def _sampling(path: Path, settings: dict[str, str]) -> tuple[int | None, bool, str | None]:
    """The plan's max_tokens, ignore_eos and output_lengths lines, checked."""
    max_tokens = None
    if "max_tokens" in settings:
        try:
            max_tokens = int(settings["max_tokens"])
        except ValueError:
            raise PlanError(
                f"{path}: max_tokens {settings['max_tokens']!r} is not an integer"
            ) from None
    ignore_eos = False
    if "ignore_eos" in settings:
        flag = settings["ignore_eos"].lower()
        if flag not in ("yes", "no"):
            raise PlanError(f"{path}: ignore_eos {settings['ignore_eos']!r} must be yes or no")
        ignore_eos = flag == "yes"
    output_lengths = settings.get("output_lengths")
    if output_lengths is not None and not ignore_eos:
        raise PlanError(
            f"{path}: output_lengths needs `ignore_eos yes` (each output runs to its length "
            "only when EOS is ignored): add that line"
        )
    return max_tokens, ignore_eos, output_lengths


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
            **plan_settings(plan, accuracy),
            "engine_args": list(self.engine_args),
            "env": list(self.env),
            **({"sut": list(self.sut)} if self.sut else {}),  # older sweeps resume as before
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def plan_settings(plan: Plan, accuracy: bool) -> dict[str, object]:
    """What every config of a sweep shares, as its repeats' signatures take it (a finished
    repeat keeps it, so a `--resume` of other settings can say which one differs)."""
    return {
        "benchmark": plan.benchmark,
        "scenario": plan.scenario,
        "model": str(plan.model),
        "dataset": str(plan.dataset),
        "user_conf": str(plan.user_conf),
        "max_tokens": plan.max_tokens,
        **({"ignore_eos": True} if plan.ignore_eos else {}),
        **({"output_lengths": plan.output_lengths} if plan.output_lengths else {}),
        "accuracy": accuracy,
    }


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
