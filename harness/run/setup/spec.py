"""`RunSpec`: one description of one `mlperf-vllm run`, the only place a run's options are
declared. Each field declares its flag once (`opt`), and from that one declaration the spec
adds its flags to a parser, is built from the parsed options, writes itself back out as a
`run` command line (a child run's argv) and says what result.json records of it.

vLLM's engine flags are not declared here: the flags `run` does not know are vLLM's
(`engine_flags`, the ones `vllm serve` takes), parsed and typed by vLLM's own parser.

Below the CLI nothing reads an argparse namespace (tests/test_layering.py): the CLI hands
`from_options` the parsed values as a plain mapping, the accuracy level already resolved by
the submission round (the run layer does not know rounds).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.benchmarks import SCENARIOS, scenario_name
from harness.errors import UsageError, did_you_mean
from sut.frontend import DEFAULT_FRONTEND, FRONTENDS, resolve_frontend
from sut.routing import DEFAULT_ROUTING, ROUTINGS

if TYPE_CHECKING:
    from sut.engine import EngineConfig

MODES = ("performance", "accuracy", "both")
OFFLINE_ORDERS = ("arrival", "longest-first", "shortest-first")  # sut.offline.ORDERS
PARALLEL_SIZES = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
# LoadGen settings a run sets on top of its user.conf: field -> harness.run.setup.settings.OVERRIDES
LOADGEN_FIELDS = {
    "target_qps": "target_qps",
    "min_duration": "min_duration_s",
    "min_query_count": "min_query_count",
}

# sut.lifecycle takes these as arguments; declared here, where the flags are.
DEFAULT_STALL_TIMEOUT_S = 300.0  # since the last token while samples are in flight
DEFAULT_ENGINE_START_TIMEOUT_S = 3600.0  # a cold multi-node 405B load can take many minutes

# `run --help`'s headings, in order: each field's Opt names one.
GROUPS = {
    "inputs": "inputs: what runs, on which model and data",
    "engine": "engine: vLLM's engine (any other --flag is one of vLLM's engine flags)",
    "LoadGen": "LoadGen: its settings and compliance tests",
    "SUT": "SUT: how requests reach the engine and come back",
    "output": "output: what the run writes and logs",
}

_OPT = "run_option"  # the field metadata key of a field's flag


@dataclass(frozen=True)
class Opt:
    """How one field is spelled on the command line.

    kind: "value" (`--flag VALUE`), "switch" (`--flag` sets True), "negated" (`--no-x` sets
    the field False), "append" (`--flag VALUE`, repeatable: a tuple), "common" (a flag
    several commands have in common, added by the CLI's own helper for it),
    "rest" (the flags `run` does not know: vLLM's engine flags, written last)."""

    kind: str = "value"
    help: str | None = None
    parse: Callable[[str], Any] = str
    choices: Sequence[str] | None = None
    metavar: str | None = None
    required: bool = False
    zero_is_none: bool = False  # `0` on the command line means None (a timeout: never)
    flag_name: str | None = None  # the flag when it is not the field's name
    group: str | None = None  # its heading in `run --help` (GROUPS)
    # its place in a sweep plan (harness.sweep.plan): "setting" (a line of its own that every
    # config shares) or "knob" (`--sut KEY=VALUE`, which a knob may change; the run records it
    # in result.json `sut_options`, where the sweep checks that it ran as asked); None: neither
    plan: str | None = None
    scenarios: tuple[str, ...] | None = None  # the scenarios it applies to (None: every one)

    def flag(self, name: str) -> str:
        if self.flag_name:
            return self.flag_name
        return "--" + ("no-" if self.kind == "negated" else "") + name.replace("_", "-")


def opt(default: Any = MISSING, **how: Any) -> Any:
    """A RunSpec field and its flag (Opt's arguments); without a default it is required."""
    return field(default=default, metadata={_OPT: Opt(required=default is MISSING, **how)})


def timeout_opt(default: float, flag: str, what: str, group: str) -> Any:
    """A timeout's field: seconds, `0` on the command line for never (None)."""
    return opt(
        default,
        parse=float,
        metavar="S",
        zero_is_none=True,
        flag_name=flag,
        help=f"{what} (default {default:g}; 0: never)",
        group=group,
    )


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """One run: what it runs (benchmark, scenario, model, data, engine), how (SUT options,
    LoadGen settings on top of the user.conf, watchdogs) and where it writes."""

    # a preset name (the CLI maps submission names)
    benchmark: str = opt(kind="common", group="inputs", plan="setting")
    scenario: str = opt(parse=scenario_name, choices=SCENARIOS, group="inputs", plan="setting")
    mode: str = opt("performance", choices=MODES, group="inputs")
    model: Path = opt(parse=Path, help="local checkpoint folder", group="inputs", plan="setting")
    dataset: Path = opt(
        parse=Path,
        help="preprocessed dataset (.json, .jsonl, .parquet, .pkl with --allow-pickle)",
        group="inputs",
        plan="setting",
    )
    output: Path = opt(parse=Path, help="folder for logs and results", group="output")
    overwrite: bool = opt(
        False,
        kind="switch",
        help="replace a completed run already in --output (refused without it)",
        group="output",
    )
    user_conf: Path | None = opt(
        None,
        parse=Path,
        help="LoadGen user.conf (see user_confs/)",
        group="LoadGen",
        plan="setting",
    )
    audit_config: Path | None = opt(
        None, parse=Path, help="compliance audit.config (e.g. TEST06)", group="LoadGen"
    )
    # After the run's tests, compliance TEST06 on the same engine (its logs in OUTPUT/TEST06):
    # one engine start for performance, accuracy and TEST06.
    test06: bool = opt(
        False,
        kind="switch",
        help="after the run's tests, compliance TEST06 on the same engine: its logs and "
        "verify_accuracy.txt in OUTPUT/TEST06 (package finds them there)",
        group="LoadGen",
    )
    engine_args: tuple[str, ...] = opt(
        (),
        kind="append",
        flag_name="--engine-arg",
        metavar="KEY=VALUE",
        help="any vLLM engine argument, typed by vLLM (repeatable)",
        group="engine",
    )
    tensor_parallel_size: int | None = opt(None, parse=int, group="engine")
    pipeline_parallel_size: int | None = opt(None, parse=int, group="engine")
    data_parallel_size: int | None = opt(None, parse=int, group="engine")
    max_tokens: int | None = opt(
        None,
        parse=int,
        help="override the benchmark's output cap",
        group="SUT",
        plan="setting",
    )
    ignore_eos: bool = opt(
        False,
        kind="switch",
        help="fixed-length outputs, for weights-free throughput runs only",
        group="SUT",
        plan="setting",
    )
    output_lengths: str | None = opt(
        None,
        metavar="COLUMN",
        help="with --ignore-eos, performance mode: each sample's output length from this "
        "integer column of the dataset (a benchmark's output length profile with dummy "
        "weights, instead of every output --max-tokens long)",
        group="SUT",
        plan="setting",
    )
    allow_pickle: bool = opt(
        False,
        kind="switch",
        help="allow loading .pkl datasets (unpickling runs code from the file)",
        group="inputs",
    )
    # "99" / "99.9"; None: not chosen (the CLI resolves it by the round:
    # harness.submission.rounds.accuracy_level_for); a scored run must name it.
    accuracy_level: str | None = opt(None, kind="common", group="inputs")
    round: str | None = opt(
        None, kind="common", group="inputs"
    )  # the round the preflight judges by
    offline_order: str = opt(
        "arrival",
        choices=OFFLINE_ORDERS,
        help="Offline: the order the query's samples go to the engine, by prompt length "
        "(a SUT may process them in any order; default: LoadGen's)",
        group="SUT",
        plan="knob",
        scenarios=("Offline",),
    )
    prefill_policy: str | None = opt(
        None,
        metavar="CAP[xEVERY[@MS]]",
        help="Server/Interactive: our scheduler in vLLM's engine core (sut/scheduling.py): at "
        "most CAP prefill tokens per step, and with xEVERY prefill on one step in EVERY while "
        "streams decode, or at once when a prompt has waited MS ms (e.g. 1024, 4096x4, "
        "8192x4@150; 0: vLLM's own scheduling)",
        group="SUT",
    )
    dp_routing: str = opt(
        DEFAULT_ROUTING,
        choices=ROUTINGS,
        help="with --data-parallel-size N > 1: who picks each request's engine: ours (the SUT "
        "sends it to the engine with the least outstanding work, prompts awaiting their prefill "
        "weighed above decodes; sut/routing.py) or vllm (vLLM's own balancer)",
        group="SUT",
        plan="knob",
    )
    frontend: str = opt(
        DEFAULT_FRONTEND,
        choices=FRONTENDS,
        help="where vLLM's front end runs: shared (one AsyncLLM in the SUT's process over every "
        "data-parallel engine, vLLM's own layout), per-engine (one front-end process per "
        "engine, our router and LoadGen's ledger in the SUT's process, sut/engine_pool.py: "
        "every streamed token is processed beside its engine, not in the process LoadGen "
        "calls), or auto (per-engine with --data-parallel-size > 1 and --dp-routing ours, "
        "else shared)",
        group="SUT",
        plan="knob",
    )
    engine_stats: bool = opt(
        False,
        kind="switch",
        help="Server/Interactive: sample vLLM's scheduler stats (running, waiting, KV cache use, "
        "preemptions) into timeline.json / timeline.png (turns vLLM's stats on: some front-end "
        "work per token)",
        group="SUT",
    )
    target_qps: float | None = opt(
        None,
        parse=float,
        metavar="QPS",
        help="LoadGen's target rate on top of the user.conf: Server/Interactive target_qps, "
        "Offline offline_expected_qps (for a shell loop over rates; recorded in result.json "
        "and MLflow)",
        group="LoadGen",
    )
    min_duration: float | None = opt(
        None,
        parse=float,
        metavar="S",
        help="LoadGen's min_duration in seconds on top of the user.conf (below 600: not "
        "compliant, which the run says)",
        group="LoadGen",
    )
    min_query_count: int | None = opt(
        None,
        parse=int,
        metavar="N",
        help="LoadGen's min_query_count on top of the user.conf",
        group="LoadGen",
    )
    verbose: bool = opt(
        False,
        kind="switch",
        help="vLLM's own output (start-up, warnings) on the terminal as well; without it, it "
        "goes to OUTPUT/engine.log once the engine started (a failed start's to "
        "OUTPUT/engine_start.log, with its root cause on the terminal)",
        group="output",
    )
    profile: str | None = opt(
        None,
        metavar="STEPS[@SKIP]",
        help="vLLM's torch profiler over STEPS engine steps of the performance test, after "
        "skipping its first SKIP steps: traces, vLLM's kernel tables and a summary (step time, "
        "device busy share, kernel time by category) in OUTPUT/profile; result.json records "
        "it under `profile`. A diagnostic: writing the traces stalls the engine a moment",
        group="engine",
    )
    warmup_samples: int = opt(
        0,
        parse=int,
        metavar="N",
        help="generate N prompts before the LoadGen test, untimed: the dataset's lengths, "
        "none of its prompts (the first passes pay for kernel selection and graph capture)",
        group="SUT",
        plan="knob",
    )
    price_per_hour: float | None = opt(
        None,
        parse=float,
        metavar="DOLLARS",
        help="hourly price of the machine: results also carry dollars per million output tokens",
        group="output",
    )
    nltk_data: Path | None = opt(
        None,
        parse=Path,
        help="NLTK data folder holding tokenizers/punkt_tab (default: one on $NLTK_DATA, "
        "else the packaged model)",
        group="output",
    )
    evaluate: bool = opt(
        True, kind="negated", help="keep the accuracy log unscored", group="output"
    )
    progress: bool = opt(True, kind="negated", group="output")
    # No token for this long while samples are in flight fails the run (None: never).
    stall_timeout_s: float | None = timeout_opt(
        DEFAULT_STALL_TIMEOUT_S,
        "--stall-timeout",
        "fail the run when samples are in flight and the engine produced nothing for S seconds",
        group="SUT",
    )
    engine_start_timeout_s: float | None = timeout_opt(
        DEFAULT_ENGINE_START_TIMEOUT_S,
        "--engine-start-timeout",
        "fail the run when the engine has not started after S seconds",
        group="engine",
    )
    submission: bool = opt(
        False,
        kind="switch",
        help="refuse (exit 2) a run whose settings cannot give a valid submission "
        "result; without it they are reported in one warning line",
        group="inputs",
    )
    note: str | None = opt(
        None,
        metavar="TEXT",
        help="free text about the run (why it ran, what changed since the last one), recorded "
        "in result.json under spec.note; calibrate hands it to each of its runs",
        group="output",
    )
    engine_flags: tuple[str, ...] = opt(
        (), kind="rest", group="engine"
    )  # vLLM's flags as typed (`vllm serve`)

    # ----------------------------------------------------------------- derived

    def modes(self) -> list[str]:
        return ["performance", "accuracy"] if self.mode == "both" else [self.mode]

    @functools.cached_property
    def engine_overrides(self) -> Mapping[str, Any]:
        """vLLM's engine kwargs the run sets: its engine flags and --engine-arg pairs typed by
        vLLM, the parallel sizes, and the prefill policy's scheduler (no defaults)."""
        return self.engine_config(defaults=False).kwargs

    def engine_config(
        self, run: Mapping[str, Any] | None = None, *, defaults: bool = True
    ) -> EngineConfig:
        """The engine's arguments as the engine gets them (sut.engine.assemble_engine_config:
        its layers in their declared order), `run` what the run computes besides its flags
        (the profiler's window); a bad engine flag or prefill policy is one UsageError line."""
        return _engine_config(self, run or {}, defaults)

    @property
    def frontend_in_use(self) -> str:
        """--frontend as it applies to this run (`auto` resolved: sut.frontend)."""
        return resolve_frontend(self.frontend, self.engine_overrides, self.dp_routing)

    @property
    def loadgen_overrides(self) -> dict[str, float]:
        """The LoadGen settings given (harness.run.setup.settings.OVERRIDES)."""
        given = {key: getattr(self, name) for name, key in LOADGEN_FIELDS.items()}
        return {k: v for k, v in given.items() if v is not None}

    # ----------------------------------------------------------------- flags

    @classmethod
    def options(cls) -> Iterator[tuple[str, Opt]]:
        """(field name, its flag) for every field; a field without one is refused here."""
        for f in fields(cls):
            how = f.metadata.get(_OPT)
            if not isinstance(how, Opt):
                raise TypeError(f"RunSpec.{f.name} declares no flag: declare it with opt()")
            yield f.name, how

    @classmethod
    def plan_fields(cls, role: str) -> dict[str, Opt]:
        """The fields a sweep plan names in `role` ("setting" or "knob"), in declaration order."""
        return {name: how for name, how in cls.options() if how.plan == role}

    @classmethod
    def add_arguments(
        cls,
        parser: Any,
        common: Mapping[str, Callable[[Any], None]],
        base: RunSpec | None = None,
    ) -> dict[str, Any]:
        """Every run flag on `parser` (an argparse parser); `common`: for each "common" field,
        the CLI's helper that adds the flag several commands spell alike (--benchmark).
        With `base`, the flags of a partial spec over it: none required, each defaulting to
        `base`'s value; a common field left out of `common` is `base`'s (the command owns its
        flag). The flags go under their GROUPS headings, which are returned (a command adds
        its own flags under them)."""
        groups = {key: parser.add_argument_group(title) for key, title in GROUPS.items()}
        for name, how in cls.options():
            if how.kind == "rest":
                continue
            if how.group not in groups:
                raise TypeError(f"RunSpec.{name}: group {how.group!r} is none of {list(GROUPS)}")
            under = groups[how.group]
            if how.kind == "common":
                if base is None or name in common:
                    common[name](under)
                if base is not None:
                    parser.set_defaults(**{name: getattr(base, name)})
                continue
            kwargs = _argparse_kwargs(name, how, RunSpec.__dataclass_fields__[name].default)
            if base is not None:
                value = getattr(base, name)
                kwargs.pop("required", None)
                if how.kind == "negated":
                    value = not value
                elif how.kind == "append":
                    value = list(value)
                elif value is None and how.zero_is_none:
                    value = 0
                kwargs["default"] = value
            under.add_argument(how.flag(name), **kwargs)
        return groups

    @classmethod
    def from_options(cls, options: Mapping[str, Any], engine_flags: Sequence[str]) -> RunSpec:
        """The spec of parsed flags (`options`: each field's flag's value by the field's name,
        a negated flag's as `no_<name>`); `engine_flags`: the flags `run` does not know.
        Bad engine flags or a bad prefill policy are one UsageError line, here."""
        from harness.resources import resolve_user_path

        values: dict[str, Any] = {}
        for name, how in cls.options():
            if how.kind == "rest":
                values[name] = tuple(engine_flags)
            elif how.kind == "negated":
                values[name] = not options[f"no_{name}"]
            elif how.kind == "append":
                values[name] = tuple(options[name] or ())
            elif how.zero_is_none:
                values[name] = options[name] or None
            else:
                values[name] = options[name]
        for name in ("user_conf", "audit_config"):  # `user_confs/...` names a shipped file
            values[name] = resolve_user_path(values[name])
        spec = cls(**values)
        spec.engine_overrides  # noqa: B018 - bad engine flags stop here, before any work
        return spec

    def to_argv(self) -> list[str]:
        """The spec as `run`'s arguments (after `mlperf-vllm run`): `from_options` of their
        parse is this spec again. Values at their defaults are left out."""
        argv: list[str] = []
        for f in fields(self):
            how = f.metadata[_OPT]
            value = getattr(self, f.name)
            if how.kind == "rest":
                continue
            if value == f.default:  # a required field has no default to equal
                continue
            argv += _flag_args(f.name, how, value)
        return [*argv, *self.engine_flags]

    @classmethod
    def partial_argv(cls, values: Mapping[str, Any]) -> list[str]:
        """The flags of a partial spec written as data (an engine line's TOML `[run]` table):
        each key a field other than what a command line alone names (benchmark, scenario,
        model, data, output), each value as TOML types it; a bad one is a UsageError line."""
        settable = {n: how for n, how in cls.options() if how.kind != "common" and not how.required}
        argv: list[str] = []
        rest: list[str] = []
        for name, value in values.items():
            how = settable.get(name)
            if how is None:
                hint = did_you_mean(name, settable)
                raise UsageError(f"{name!r} is not a run option a line may set{hint}")
            if how.kind in ("append", "rest"):
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise UsageError(f'{name}: give a list of strings, e.g. ["max_num_seqs=8"]')
                if how.kind == "rest":
                    rest += value
                    continue
                value = tuple(value)
            elif how.kind in ("switch", "negated"):
                if not isinstance(value, bool):
                    raise UsageError(f"{name}: give true or false")
            elif isinstance(value, (bool, list, dict)):
                raise UsageError(f"{name}: give one value, as on the command line")
            else:
                value = cls.parse_value(name, str(value))
            argv += _flag_args(name, how, value)
        return [*argv, *rest]

    def record(self) -> dict[str, Any]:
        """Every field as plain JSON values (paths as text, tuples as lists): what result.json
        records of the run's options (`spec`)."""
        return {
            f.name: (str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v)
            for f in fields(self)
            for v in [getattr(self, f.name)]
        }

    @classmethod
    def parse_value(cls, name: str, text: str) -> Any:
        """One field's value from its text as on the command line (a sweep plan's `--sut
        KEY=VALUE`); an unknown field or a bad value is one UsageError line."""
        known = {n: how for n, how in cls.options() if how.kind in ("value", "switch")}
        if name not in known:
            hint = did_you_mean(name, known)
            raise UsageError(f"{name!r} is not a run option{hint}")
        how = known[name]
        if how.kind == "switch":
            if text.lower() not in ("true", "false", "yes", "no", "1", "0"):
                raise UsageError(f"{name}={text}: give true or false")
            return text.lower() in ("true", "yes", "1")
        if how.choices is not None and text not in how.choices:
            raise UsageError(f"{name}={text}: use one of {', '.join(how.choices)}")
        try:
            return how.parse(text)
        except ValueError:
            what = "a whole number" if how.parse is int else "a number"
            raise UsageError(f"{name}={text}: give {what}") from None


def _flag_args(name: str, how: Opt, value: Any) -> list[str]:
    """One field's value as its flag's arguments."""
    flag = how.flag(name)
    if how.kind == "switch":
        return [flag] if value else []
    if how.kind == "negated":
        return [] if value else [flag]
    if how.kind == "append":
        return [a for item in value for a in (flag, item)]
    return [flag, "0" if value is None and how.zero_is_none else _text(value)]


def _text(value: Any) -> str:
    """A value as its flag's text: floats short where that reads back exactly (2, not 2.0)."""
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    return str(value)


def declared_options(cls: Any) -> Iterator[tuple[str, Opt]]:
    """(field name, its flag) for each field of a dataclass declared with `opt()`."""
    for f in fields(cls):
        how = f.metadata.get(_OPT)
        if isinstance(how, Opt):
            yield f.name, how


def add_declared_arguments(cls: Any, parser: Any) -> None:
    """The flags a frozen dataclass declares with `opt()` (calibrate's request, as RunSpec's),
    each dest the field's name; its "common" fields and those declared without a flag (values
    the command computes) are the command's to add."""
    for f in fields(cls):
        how = f.metadata.get(_OPT)
        if isinstance(how, Opt) and how.kind not in ("common", "rest"):
            parser.add_argument(how.flag(f.name), **_argparse_kwargs(f.name, how, f.default))


def _argparse_kwargs(name: str, how: Opt, default: Any) -> dict[str, Any]:
    if how.kind in ("switch", "negated"):  # `--no-x` keeps its dest no_x
        return {"action": "store_true", "help": how.help}
    kwargs: dict[str, Any] = {"dest": name, "help": how.help}
    if how.kind == "append":
        kwargs.update(action="append", default=[])
    else:
        kwargs.update(type=how.parse, required=how.required)
        if not how.required:
            kwargs["default"] = default
    if how.choices is not None:
        kwargs["choices"] = how.choices
    if how.metavar is not None:
        kwargs["metavar"] = how.metavar
    return {k: v for k, v in kwargs.items() if v is not None or k == "help"}


def _engine_config(spec: RunSpec, run: Mapping[str, Any], defaults: bool) -> EngineConfig:
    from sut.engine import EngineArgError, assemble_engine_config

    typed = {n: getattr(spec, n) for n in PARALLEL_SIZES if getattr(spec, n) is not None}
    try:
        return assemble_engine_config(
            str(spec.model),
            flags=spec.engine_flags,
            pairs=spec.engine_args,
            typed={**typed, **run},
            prefill_policy=spec.prefill_policy,
            defaults=defaults,
        )
    except EngineArgError as exc:
        raise UsageError(str(exc)) from None
