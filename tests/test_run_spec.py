"""RunSpec, the one description of a run (harness.run.setup.spec): every field has a flag, and a
spec written as a `run` command line (a child run's argv) reads back as the same spec through
the CLI's own parser. Values come from each field's declaration, so a new field is covered
without a line here."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from harness.cli import build_parser
from harness.cli.run import run_spec
from harness.errors import UsageError
from harness.run.setup.spec import Opt, RunSpec

# Values a declaration cannot suggest: the flags common to several commands, and texts the run parses further.
GIVEN: dict[str, Any] = {
    "benchmark": "llama2-70b",
    "accuracy_level": "99.9",
    "round": "v6.0",
    "prefill_policy": "4096x4@150",
    "profile": "10@2",
    "engine_args": ("max_num_seqs=8", "enforce_eager=true"),
    "engine_flags": ("--max-num-batched-tokens", "512"),
}


def _away_from_default(name: str, how: Opt, default: Any, tmp_path: Path) -> Any:
    """A value of the field other than its default, by its declaration."""
    if name in GIVEN:
        return GIVEN[name]
    if how.kind in ("switch", "negated"):
        return not default
    if how.choices is not None:
        return next(c for c in how.choices if c != default)
    if how.parse is Path:
        return tmp_path / name
    if how.parse is int:
        return (default or 0) + 7
    if how.parse is float:
        return (default or 0.0) + 2.5
    return f"{name}-text"


def _every_field_set(tmp_path: Path) -> RunSpec:
    defaults = {f.name: f.default for f in dataclasses.fields(RunSpec)}
    values = {
        name: _away_from_default(name, how, defaults[name], tmp_path)
        for name, how in RunSpec.options()
    }
    return RunSpec(**values)


def _read_back(argv: list[str]) -> RunSpec:
    args, extra = build_parser().parse_known_args(["run", *argv])
    return run_spec(args, extra)


def test_every_field_survives_its_command_line(tmp_path):
    spec = _every_field_set(tmp_path)
    default = RunSpec(
        benchmark="b", scenario="s", model=Path(), dataset=Path(), output=Path()
    )  # every field away from its default: none can be dropped on the way silently
    changed = {
        f.name
        for f in dataclasses.fields(RunSpec)
        if getattr(spec, f.name) != getattr(default, f.name)
    }
    assert changed == {f.name for f in dataclasses.fields(RunSpec)}
    assert _read_back(spec.to_argv()) == spec
    # and a spec with only what is required: the defaults are left out of its command line
    plain = dataclasses.replace(
        default, benchmark="llama3_1-8b", scenario="Offline", accuracy_level="99"
    )
    assert _read_back(plain.to_argv()) == plain
    assert len(plain.to_argv()) == 12


def test_the_derived_settings_read_the_fields(tmp_path):
    spec = _every_field_set(tmp_path)
    overrides = dict(spec.engine_overrides)
    assert (overrides["max_num_seqs"], overrides["max_num_batched_tokens"]) == (8, 512)
    assert overrides["tensor_parallel_size"] == spec.tensor_parallel_size
    assert "scheduler_cls" in overrides  # the prefill policy's scheduler
    assert spec.loadgen_overrides == {
        "target_qps": spec.target_qps,
        "min_duration_s": spec.min_duration,
        "min_query_count": spec.min_query_count,
    }
    assert spec.record()["model"] == str(tmp_path / "model")


def test_a_zero_timeout_is_never():
    argv = ["--benchmark", "llama3_1-8b", "--scenario", "Offline", "--model", "m"]
    argv += ["--dataset", "d", "--output", "o", "--stall-timeout", "0"]
    spec = _read_back(argv)
    assert spec.stall_timeout_s is None and spec.engine_start_timeout_s is not None
    assert spec.to_argv()[-2:] == ["--stall-timeout", "0"]


def test_a_field_without_a_flag_is_refused():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Unflagged(RunSpec):
        batch: int = 4

    with pytest.raises(TypeError, match=r"RunSpec\.batch declares no flag"):
        list(Unflagged.options())


def test_bad_engine_flags_stop_the_spec_in_one_line():
    argv = ["--benchmark", "llama3_1-8b", "--scenario", "Offline", "--model", "m"]
    argv += ["--dataset", "d", "--output", "o", "--no-such-engine-flag", "3"]
    with pytest.raises(UsageError, match="unknown option"):
        _read_back(argv)


def test_a_plan_value_is_typed_as_its_flag():
    assert RunSpec.parse_value("warmup_samples", "8") == 8
    assert RunSpec.parse_value("engine_stats", "yes") is True
    with pytest.raises(UsageError, match=r"'warmup_sample' is not a run option \(did you mean"):
        RunSpec.parse_value("warmup_sample", "8")


def test_typed_engine_kwargs_become_pairs_vllm_reads_back():
    from sut.engine import engine_arg_pairs, parse_engine_arg_pairs

    kwargs = {"dtype": "float32", "enforce_eager": True, "max_num_seqs": 8}
    assert parse_engine_arg_pairs(engine_arg_pairs(kwargs)) == kwargs


def test_a_note_is_recorded_and_reaches_calibrates_runs():
    from harness.cli.calibrate import calibrate_request

    spec = _read_back(
        ["--benchmark", "llama3_1-8b", "--scenario", "Offline", "--model", "m", "--dataset", "d"]
        + ["--output", "o", "--note", "after the driver update"]
    )
    assert spec.record()["note"] == "after the driver update"
    args, extra = build_parser().parse_known_args(
        ["calibrate", "--benchmark", "llama3_1-8b", "--scenario", "Server", "--model", "m"]
        + ["--dataset", "d", "--output", "o", "--note", "after the driver update"]
    )
    run = calibrate_request(args, extra).run
    assert run is not None and run.note == "after the driver update"


def test_the_offline_orders_are_the_suts():
    """Declared here as text (the CLI's start does not import the SUT), the same as sut.offline's."""
    from harness.run.setup.spec import OFFLINE_ORDERS
    from sut.offline import ORDERS

    assert OFFLINE_ORDERS == ORDERS
