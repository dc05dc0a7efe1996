"""The prefill policy's plumbing without an engine: its spelling, the engine arguments that
carry it to vLLM's engine core, the live control file, the scheduler variant per config, and
`run --prefill-policy` refusing what cannot work before anything starts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.errors import UsageError
from sut.scheduling import (
    POLICY_KEY,
    SCHEDULER_CLS,
    PolicyError,
    PrefillPolicy,
    read_control,
    write_control,
)


@pytest.mark.parametrize(
    "text, cap, every, deadline",
    [
        ("0", 0, 1, 0),
        ("1024", 1024, 1, 0),
        ("4096x4", 4096, 4, 0),
        (" 0X2 ", 0, 2, 0),
        ("8192x4@150", 8192, 4, 150),
        ("4096x3@12.5", 4096, 3, 12.5),
    ],
)
def test_policy_spelling(text, cap, every, deadline):
    policy = PrefillPolicy.parse(text)
    assert (policy.cap, policy.every, policy.deadline_ms) == (cap, every, deadline)
    assert PrefillPolicy.parse(policy.label()) == policy


@pytest.mark.parametrize(
    "text, says",
    [
        ("", "CAPxEVERY@MS"),
        ("x4", "CAPxEVERY@MS"),
        ("1024x", "CAPxEVERY@MS"),
        ("1k", "CAPxEVERY@MS"),
        ("2x2x2", "CAPxEVERY@MS"),
        ("4096x4@", "CAPxEVERY@MS"),
        ("4096x4@soon", "CAPxEVERY@MS"),
        ("-5", "negative"),
        ("1024x0", "1 .every step. or more"),
        ("1024x-1", "1 .every step. or more"),
        ("4096x4@-1", "negative"),
        ("4096@100", "only shortens a cadence"),
    ],
)
def test_a_policy_that_cannot_work_is_one_clear_error(text, says):
    with pytest.raises(PolicyError, match=says) as err:
        PrefillPolicy.parse(text)
    assert repr(text) in str(err.value)


def test_the_engine_arguments_carry_the_policy_and_keep_other_additional_config():
    kwargs = PrefillPolicy(cap=2048, every=2).engine_kwargs({"other": 1})
    assert kwargs["scheduler_cls"] == SCHEDULER_CLS
    assert kwargs["additional_config"] == {
        "other": 1,
        POLICY_KEY: {"cap": 2048, "every": 2, "deadline_ms": 0.0},
    }
    assert PrefillPolicy.from_additional_config(kwargs["additional_config"]) == PrefillPolicy(
        cap=2048, every=2
    )
    # vLLM's own scheduling is no scheduler of ours at all
    assert PrefillPolicy.parse("0").engine_kwargs() == {}
    assert PrefillPolicy.from_additional_config(None) == PrefillPolicy()


def test_the_control_file_is_read_whole_or_not_at_all(tmp_path):
    path = tmp_path / "policy.json"
    assert read_control(str(path)) is None
    write_control(path, PrefillPolicy(cap=512, every=3, deadline_ms=80))
    assert read_control(str(path)) == PrefillPolicy(cap=512, every=3, deadline_ms=80)
    assert not list(tmp_path.glob("*.tmp"))
    path.write_text('{"cap": -1}')
    assert read_control(str(path)) is None
    path.write_text("{not json")
    assert read_control(str(path)) is None


def test_the_scheduler_extends_what_vllm_would_pick():
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    from sut.vllm_scheduler import variant_for

    def config(flag):
        return SimpleNamespace(scheduler_config=SimpleNamespace(async_scheduling=flag))

    assert issubclass(variant_for(config(True)), AsyncScheduler)
    assert not issubclass(variant_for(config(False)), AsyncScheduler)
    assert issubclass(variant_for(config(False)), Scheduler)
    assert not issubclass(variant_for(config(None)), AsyncScheduler)


def _request(*flags: str):
    from harness.cli import build_parser
    from harness.cli.run import run_spec

    base = ["--benchmark", "llama3_1-8b", "--scenario", "Interactive", "--mode", "performance"]
    base += ["--model", "m", "--dataset", "d.json", "--output", "o"]
    return run_spec(*build_parser().parse_known_args(["run", *base, *flags]))


def test_run_prefill_policy_becomes_engine_arguments():
    req = _request("--prefill-policy", "4096x4@90", "--engine-arg", 'additional_config={"a": 1}')
    assert req.engine_overrides["scheduler_cls"] == SCHEDULER_CLS
    assert req.engine_overrides["additional_config"] == {
        "a": 1,
        POLICY_KEY: {"cap": 4096, "every": 4, "deadline_ms": 90.0},
    }
    assert "scheduler_cls" not in _request("--prefill-policy", "0").engine_overrides


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--prefill-policy", "4096x0"], "--prefill-policy"),
        (["--prefill-policy", "1024", "--scheduler-cls", "my.Sched"], "drop --scheduler-cls"),
    ],
)
def test_run_refuses_a_policy_that_cannot_work(flags, words):
    with pytest.raises(UsageError, match=words):
        _request(*flags)
