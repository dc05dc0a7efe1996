"""Prefill admission policy for the latency-bound scenarios, as vLLM engine arguments.

Why: under Poisson arrivals vLLM's default scheduler fills every step's token budget with
whatever prefill is waiting, so a burst of arrivals makes a few steps long, and every stream
decoding through them pays for it in its time per output token (TPOT is the mean step time over
a request's life). The work per second is fixed by the arrival rate; what a policy can change
is how evenly it is spread. Two levers, applied by our scheduler in vLLM's engine core:

- `cap`: at most this many prefill tokens per step (new prompts and continuing chunks alike),
  decodes always fit; a burst waits in the queue (TTFT has room) instead of stretching steps.
- `every`: while streams decode, prefill only on one step in `every` (up to the cap); the others
  are decode-only, the uniform batches vLLM runs fastest (full CUDA graphs), and arrivals
  gather into larger prefill batches. Prefill never waits when nothing is decoding.
- `deadline_ms`: a prompt that has waited this long gets a prefill step now, whatever the
  cadence says. TPOT is a mean over a request's whole life, so a few prefill steps closer
  together barely move it, while TTFT is one wait: the cadence spaces prefill out while the queue
  is young and steps aside when a burst ages it.

The policy travels to the engine core as two documented engine arguments: `scheduler_cls` (our
class, `sut.vllm_scheduler.PrefillPolicyScheduler`, a subclass of the scheduler vLLM would have
picked: its async scheduler when async scheduling is on, the plain one otherwise) and
`additional_config` (the policy's fields under POLICY_KEY). No patched vLLM.

This module imports nothing of vLLM: the harness builds engine arguments from it on any machine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

POLICY_KEY = "mlperf_vllm_prefill_policy"
SCHEDULER_CLS = "sut.vllm_scheduler.PrefillPolicyScheduler"
# How often (seconds, checked at engine steps) the scheduler looks at a control file.
CONTROL_CHECK_S = 0.25


class PolicyError(ValueError):
    """A prefill policy that cannot work (one clear line)."""


@dataclass(frozen=True)
class PrefillPolicy:
    """`cap`: most prefill tokens per engine step (0: vLLM's token budget alone). `every`: new
    prefill compute on one step in `every` (1: every step). `control_file`: for benches only, a
    JSON file of {"cap": N, "every": K} the engine core re-reads when it changes, so one warm
    engine can measure several policies side by side."""

    cap: int = 0
    every: int = 1
    deadline_ms: float = 0.0
    control_file: str | None = None

    def __post_init__(self) -> None:
        if self.cap < 0:
            raise PolicyError(f"prefill cap {self.cap} is negative: give 0 (off) or a token count")
        if self.every < 1:
            raise PolicyError(f"prefill cadence {self.every} must be 1 (every step) or more")
        if self.deadline_ms < 0:
            raise PolicyError(f"prefill deadline {self.deadline_ms} ms is negative: give 0 (off)")
        if self.deadline_ms and self.every == 1:
            raise PolicyError(
                "a prefill deadline only shortens a cadence: give one, e.g. 8192x4@150"
            )

    @property
    def active(self) -> bool:
        return bool(self.cap or self.every > 1 or self.control_file)

    def describe(self) -> str:
        if not self.active:
            return "vLLM's default"
        parts = [f"cap {self.cap} prefill tokens/step" if self.cap else "no cap"]
        if self.every > 1:
            parts.append(f"prefills every {self.every} steps")
        if self.deadline_ms:
            parts.append(f"or once a prompt has waited {self.deadline_ms:g} ms")
        if self.control_file:
            parts.append(f"live control {self.control_file}")
        return ", ".join(parts)

    def engine_kwargs(self, additional_config: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The engine arguments that install this policy (nothing when it is inactive)."""
        if not self.active:
            return {}
        extra = dict(additional_config or {})
        extra[POLICY_KEY] = {k: v for k, v in asdict(self).items() if v is not None}
        return {"scheduler_cls": SCHEDULER_CLS, "additional_config": extra}

    @classmethod
    def from_additional_config(cls, additional_config: Any) -> PrefillPolicy:
        """The policy inside vLLM's `additional_config` (vLLM's default when absent)."""
        raw = additional_config.get(POLICY_KEY) if isinstance(additional_config, Mapping) else None
        if not raw:
            return cls()
        try:
            return cls(**dict(raw))
        except TypeError as exc:
            raise PolicyError(f"additional_config[{POLICY_KEY!r}]: {exc}") from None

    @classmethod
    def parse(cls, text: str) -> PrefillPolicy:
        """`CAP`, `CAPxEVERY` or `CAPxEVERY@MS` (`1024`, `4096x4`, `8192x4@150`, `0`): the
        bench and CLI spelling."""
        head, at, deadline = text.strip().lower().partition("@")
        cap, sep, every = head.partition("x")
        try:
            return cls(
                cap=int(cap),
                every=int(every) if sep else 1,
                deadline_ms=float(deadline) if at else 0.0,
            )
        except PolicyError as exc:
            raise PolicyError(f"prefill policy {text!r}: {exc}") from None
        except ValueError:
            raise PolicyError(
                f"prefill policy {text!r}: write CAP, CAPxEVERY or CAPxEVERY@MS, "
                "e.g. 1024, 4096x4 or 8192x4@150"
            ) from None

    def label(self) -> str:
        text = f"{self.cap}x{self.every}"
        return f"{text}@{self.deadline_ms:g}" if self.deadline_ms else text


def write_control(path: Path, policy: PrefillPolicy) -> None:
    """Set a live policy for an engine started with `control_file=path` (benches). Written
    aside and renamed into place, so the engine never reads half a file."""
    tmp = path.with_name(path.name + ".tmp")
    doc = {"cap": policy.cap, "every": policy.every, "deadline_ms": policy.deadline_ms}
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)


def read_control(path: str) -> PrefillPolicy | None:
    """The policy in a control file, None when it is missing or unreadable."""
    try:
        doc = json.loads(Path(path).read_text())
        return PrefillPolicy(
            cap=int(doc.get("cap", 0)),
            every=int(doc.get("every", 1)),
            deadline_ms=float(doc.get("deadline_ms", 0.0)),
        )
    except (OSError, ValueError, TypeError, AttributeError):
        return None
