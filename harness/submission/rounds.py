"""Submission rounds as data: what each MLPerf Inference round accepts for our benchmarks.

A round is a version of the MLCommons submission checker (`--version v6.0`, `v6.1`, ...). It
decides which model folders a results tree may hold, which scenarios each needs per system
category, which RNG seeds the performance logs must carry and which folders need TEST06.
Model facts (dataset size, sample counts, latency limits, accuracy targets) stay with the
benchmark presets in `harness.benchmarks`; a round only says what it accepts.

Facts from the public checker's tables (mlcommons/inference `tools/submission`) and LoadGen's
mlperf.conf history. To add a round: one more `Round(...)` in `ROUNDS`, newest first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from harness.benchmarks import BENCHMARKS
from harness.errors import UsageError

CATEGORIES = ("datacenter", "edge", "datacenter,edge")
SEED_KEYS = ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed")


@dataclass(frozen=True)
class ScenarioRule:
    """Scenarios a model folder needs in one system category: all of `required`, and at least
    one of `one_of` when that is not empty. Any other scenario folder is refused."""

    required: tuple[str, ...]
    one_of: tuple[str, ...] = ()

    @property
    def accepted(self) -> tuple[str, ...]:
        return self.required + self.one_of

    def missing(self, present: set[str]) -> list[str]:
        out = [s for s in self.required if s not in present]
        if self.one_of and not present & set(self.one_of):
            out.append(" or ".join(self.one_of))
        return out

    def describe(self) -> str:
        parts = [" and ".join(self.required)] if self.required else []
        if self.one_of:
            parts.append("one of " + ", ".join(self.one_of))
        return " plus ".join(parts)


@dataclass(frozen=True)
class RoundModel:
    """One model folder of a round and the preset whose facts it uses."""

    folder: str  # the checker's name: llama3.1-8b, llama2-70b-99.9, ...
    preset: str  # our benchmark preset (harness.benchmarks), without -interactive
    accuracy_level: str  # "99" or "99.9"
    scenarios: Mapping[str, ScenarioRule]  # per system category
    test06: bool = True

    def categories(self) -> tuple[str, ...]:
        return tuple(c for c in CATEGORIES if c in self.scenarios)

    def home_category(self) -> str:
        """The system_type `package` writes for this folder on its own."""
        return "edge" if "datacenter" not in self.scenarios else "datacenter"


@dataclass(frozen=True)
class Round:
    name: str
    models: tuple[RoundModel, ...]
    seeds: Mapping[str, int]
    seeds_loadgen: str  # the mlcommons-loadgen releases whose mlperf.conf carries these seeds
    # The same releases as versions: the lowest, and the highest (None: every later one).
    loadgen_range: tuple[tuple[int, ...], tuple[int, ...] | None] = ((0,), None)

    def model(self, folder: str) -> RoundModel | None:
        return next((m for m in self.models if m.folder == folder), None)

    def folders(self) -> tuple[str, ...]:
        return tuple(m.folder for m in self.models)


_DC_LLM = ScenarioRule(("Offline",), ("Server", "Interactive"))
_EDGE_8B = ScenarioRule(("SingleStream", "Offline"))


def _folder(preset: str, level: str) -> str:
    """The checker's model folder: the registry's checker name for this accuracy level."""
    return BENCHMARKS[preset].accuracy.checker_models[level]


def _dc(preset: str, level: str = "99") -> RoundModel:
    """A datacenter LLM: Offline plus Server or Interactive (also in a datacenter,edge system)."""
    return RoundModel(
        _folder(preset, level),
        preset,
        level,
        MappingProxyType({"datacenter": _DC_LLM, "datacenter,edge": _DC_LLM}),
    )


def _edge(preset: str, level: str = "99") -> RoundModel:
    """An edge LLM: SingleStream and Offline; no TEST06."""
    return RoundModel(
        _folder(preset, level),
        preset,
        level,
        MappingProxyType({"edge": _EDGE_8B, "datacenter,edge": _EDGE_8B}),
        test06=False,
    )


ROUNDS: tuple[Round, ...] = (
    Round(
        name="v6.1",
        models=(
            _dc("llama3_1-8b"),
            _edge("llama3_1-8b-edge"),
            _dc("llama2-70b", "99.9"),
        ),
        seeds=MappingProxyType(
            {
                "qsl_rng_seed": 2085463073848966840,
                "sample_index_rng_seed": 2747215439041700203,
                "schedule_rng_seed": 16159082839903944936,
            }
        ),
        seeds_loadgen="mlcommons-loadgen 6.0.16 or later",
        loadgen_range=((6, 0, 16), None),
    ),
    Round(
        name="v6.0",
        models=(
            _dc("llama3_1-8b"),
            _edge("llama3_1-8b-edge"),
            _dc("llama2-70b", "99"),
            _dc("llama2-70b", "99.9"),
            _dc("llama3_1-405b"),
        ),
        seeds=MappingProxyType(
            {
                "qsl_rng_seed": 2465351861681999779,
                "sample_index_rng_seed": 14276810075590677512,
                "schedule_rng_seed": 3936089224930324775,
            }
        ),
        seeds_loadgen="mlcommons-loadgen 6.0.4 to 6.0.15",
        loadgen_range=((6, 0, 4), (6, 0, 15)),
    ),
)
ROUND_NAMES = tuple(r.name for r in ROUNDS)


def get_round(name: str) -> Round:
    for r in ROUNDS:
        if r.name == name:
            return r
    raise UsageError(f"unknown round {name!r}: choose one of {', '.join(ROUND_NAMES)}")


def accuracy_level_for(
    preset: str, round_name: str | None = None, accuracy_level: str | None = None
) -> str:
    """The accuracy level a run of `preset` is prepared and judged at: `accuracy_level` when
    given (checked against the round later, by `choose_round`), else the level the round
    (`round_name`, or the newest round that has the benchmark) accepts for it. v6.1 accepts
    only llama2-70b-99.9, so a default 70B run is a 99.9 run; where a round accepts several
    levels (v6.0's 70B), the benchmark's first (99). The one place the default is decided:
    every command's --accuracy-level defaults to None and comes here."""
    if accuracy_level is not None:
        return accuracy_level
    base = preset.removesuffix("-interactive")
    bench = BENCHMARKS.get(base)
    levels = bench.accuracy_levels if bench is not None else ()
    having = [r for r in ROUNDS if any(m.preset == base for m in r.models)]
    if round_name is not None:
        having = [r for r in having if r.name == round_name]
    if not having:  # no round takes it: the benchmark's first level; choose_round refuses it
        return levels[0] if levels else "99"
    accepted = {m.accuracy_level for m in having[0].models if m.preset == base}
    return next(lvl for lvl in (*levels, *sorted(accepted)) if lvl in accepted)


def folder_for(preset: str, accuracy_level: str | None = None) -> str:
    """The model folder name of a preset (interactive variants share their base's folder);
    `accuracy_level` None: the newest round's (`accuracy_level_for`)."""
    accuracy_level = accuracy_level_for(preset, None, accuracy_level)
    base = preset.removesuffix("-interactive")
    known = [m for r in ROUNDS for m in r.models if m.preset == base]
    if not known:
        raise UsageError(f"no round accepts benchmark {preset!r}")
    for m in known:
        if m.accuracy_level == accuracy_level:
            return m.folder
    levels = sorted({m.accuracy_level for m in known})
    raise UsageError(
        f"{base} has no {accuracy_level} accuracy level in any round: "
        f"use --accuracy-level {' or '.join(levels)}"
    )


def rounds_with(folder: str) -> tuple[str, ...]:
    return tuple(r.name for r in ROUNDS if r.model(folder) is not None)


@dataclass(frozen=True)
class RoundChoice:
    round: Round
    model: RoundModel
    note: str  # said to the user: which round and why


def choose_round(name: str | None, preset: str, accuracy_level: str | None = None) -> RoundChoice:
    """The round a benchmark is prepared for: `name`, else the newest round that has it
    (at `accuracy_level`, or by default the level that round accepts: `accuracy_level_for`).

    Raises UsageError (one line, naming the rounds that have it) when `name` lacks it."""
    folder = folder_for(preset, accuracy_level_for(preset, name, accuracy_level))
    having = rounds_with(folder)
    if name is not None:
        rnd = get_round(name)
        model = rnd.model(folder)
        if model is None:
            base = preset.removesuffix("-interactive")
            other = [m for m in rnd.models if m.preset == base]
            raise UsageError(
                f"round {rnd.name} does not accept {folder} (rounds with it: "
                f"{', '.join(having)}): pass --round {having[0]}"
                + (
                    f" or --accuracy-level {other[0].accuracy_level}"
                    f" (--benchmark {other[0].folder})"
                    if other
                    else ""
                )
            )
        return RoundChoice(rnd, model, f"round {rnd.name} (--round)")
    rnd = get_round(having[0])
    model = rnd.model(folder)
    assert model is not None
    newer = [r.name for r in ROUNDS[: ROUND_NAMES.index(rnd.name)]]
    why = f"newest round with {folder}" + (
        f"; {', '.join(newer)} does not accept it" if newer else ""
    )
    return RoundChoice(rnd, model, f"round {rnd.name} ({why}; --round to choose)")


def round_of_seeds(seeds: Mapping[str, int]) -> str | None:
    """The round whose seeds these are, if any."""
    for r in ROUNDS:
        if all(seeds.get(k) == v for k, v in r.seeds.items()):
            return r.name
    return None


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def loadgen_mismatch(rnd: Round, installed: str | None) -> str | None:
    """Why the installed mlcommons-loadgen cannot make a result for `rnd` (its mlperf.conf
    carries another round's RNG seeds, which a user.conf may not change), with the fix; None
    when it can (or when LoadGen is not installed here: the run's own preflight says so)."""
    if not installed:
        return None
    low, high = rnd.loadgen_range
    have = _version_tuple(installed)
    if have >= low and (high is None or have <= high):
        return None
    spec = ">=" + ".".join(map(str, low))
    if high is not None:
        spec += ",<" + ".".join(map(str, (*high[:-1], high[-1] + 1)))
    return (
        f"round {rnd.name} needs the RNG seeds of {rnd.seeds_loadgen}, and "
        f"mlcommons-loadgen {installed} is installed: `run --submission` refuses its runs. "
        f"Certify in an environment of its own with pip install 'mlcommons-loadgen{spec}'"
    )
