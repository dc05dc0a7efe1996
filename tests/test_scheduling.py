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
    "text, cap, every",
    [("0", 0, 1), ("1024", 1024, 1), ("4096x4", 4096, 4), (" 0X2 ", 0, 2)],
)
def test_policy_spelling(text, cap, every):
    policy = PrefillPolicy.parse(text)
    assert (policy.cap, policy.every) == (cap, every)
    assert PrefillPolicy.parse(policy.label()) == policy


@pytest.mark.parametrize("text", ["", "x4", "1024x", "1k", "-5", "1024x0", "1024x-1", "2x2x2"])
def test_a_policy_that_cannot_work_is_one_clear_error(text):
    with pytest.raises(PolicyError, match="CAP or CAPxEVERY"):
        PrefillPolicy.parse(text)


def test_the_engine_arguments_carry_the_policy_and_keep_other_additional_config():
    kwargs = PrefillPolicy(cap=2048, every=2).engine_kwargs({"other": 1})
    assert kwargs["scheduler_cls"] == SCHEDULER_CLS
    assert kwargs["additional_config"] == {"other": 1, POLICY_KEY: {"cap": 2048, "every": 2}}
    assert PrefillPolicy.from_additional_config(kwargs["additional_config"]) == PrefillPolicy(
        cap=2048, every=2
    )
    # vLLM's own scheduling is no scheduler of ours at all
    assert PrefillPolicy.parse("0").engine_kwargs() == {}
    assert PrefillPolicy.from_additional_config(None) == PrefillPolicy()


def test_the_control_file_is_read_whole_or_not_at_all(tmp_path):
    path = tmp_path / "policy.json"
    assert read_control(str(path)) is None
    write_control(path, PrefillPolicy(cap=512, every=3))
    assert read_control(str(path)) == (512, 3)
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
    from harness.cli.run import run_request_from_argv

    base = ["--benchmark", "llama3_1-8b", "--scenario", "Interactive", "--mode", "performance"]
    base += ["--model", "m", "--dataset", "d.json", "--output", "o"]
    return run_request_from_argv(base + list(flags))


def test_run_prefill_policy_becomes_engine_arguments():
    req = _request("--prefill-policy", "4096x4", "--engine-arg", 'additional_config={"a": 1}')
    assert req.engine_overrides["scheduler_cls"] == SCHEDULER_CLS
    assert req.engine_overrides["additional_config"] == {
        "a": 1,
        POLICY_KEY: {"cap": 4096, "every": 4},
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
