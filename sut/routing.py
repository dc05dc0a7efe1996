"""Which data-parallel engine serves each request: our policy, or vLLM's own balancer.

Why route ourselves: with `data_parallel_size N` one `AsyncLLM` front end feeds N engine cores,
and by default vLLM picks the core for each request from counts its coordinator publishes every
~100 ms (`waiting x 4 + running`). Under Poisson arrivals a burst lands between two updates, and
the counts it is judged by do not see the prompts just sent, nor how long they are; requests
pile onto a few cores while others have room (vLLM issue 36748), and the Server tail is exactly
such a burst overflowing one engine's slots. The SUT already knows, without asking anyone, every
request it sent, to which engine, whether its first token came back and whether it finished.

The policy (`LeastWorkRouter`): send each request to the engine with the least outstanding work,
where work is the requests in flight there plus the prompt tokens it has been sent and not yet
begun answering, the latter weighted (PREFILL_WEIGHT) in units of the dataset's mean prompt:
a prompt waiting for its prefill holds up every stream on that engine for a step, a decode in
flight costs one token a step. That mirrors the best vLLM MLPerf harness routing seen (in
flight + 8 x awaiting a first token), with prompt lengths instead of counts. Ties go round the
engines in turn, so an empty start spreads evenly. O(N) per request, no lock: every call comes
from the SUT's one event-loop thread, between awaits.

The chosen index goes to `AsyncLLM.generate(..., data_parallel_rank=R)` (vLLM >= 0.10 takes it
and sends the request to that core). `vllm` routing passes nothing and lets vLLM choose.

This module imports nothing of vLLM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

ROUTINGS = ("ours", "vllm")
DEFAULT_ROUTING = "ours"
# vLLM's data-parallel layouts that balance per node, each front end seeing only its own cores
PER_NODE_BALANCING = ("data_parallel_external_lb", "data_parallel_hybrid_lb")
# One prompt of the dataset's mean length waiting for its prefill weighs as much as this many
# requests decoding.
PREFILL_WEIGHT = 8.0


class RoutingError(ValueError):
    """A routing that cannot apply to this engine (one clear line)."""


def check_routing(name: str) -> str:
    if name not in ROUTINGS:
        raise RoutingError(
            f"unknown data-parallel routing {name!r}: choose {' or '.join(ROUTINGS)}"
        )
    return name


def engines_to_route(vllm_config: object) -> int:
    """How many engine cores the front end may address by `data_parallel_rank` (1: nothing to
    route). Only the one-front-end layout, where this process's client holds every core: with
    vLLM's external or hybrid load balancing each front end sees only its own."""
    parallel = getattr(vllm_config, "parallel_config", None)
    size = int(getattr(parallel, "data_parallel_size", 1) or 1)
    if size <= 1:
        return 1
    if any(getattr(parallel, key, False) for key in PER_NODE_BALANCING):
        raise RoutingError(
            "--dp-routing ours needs one front end over every data-parallel engine; this layout "
            "balances per node (vLLM's external or hybrid load balancing): use --dp-routing vllm"
        )
    return size


@dataclass
class EngineLoad:
    """One engine's outstanding work as the SUT has sent it."""

    in_flight: int = 0  # sent, not finished
    awaiting_first: int = 0  # sent, no token back yet
    prefill_tokens: int = 0  # prompt tokens of those awaiting a first token
    sent: int = 0  # requests sent over the test
    sent_prompt_tokens: int = 0
    peak_in_flight: int = 0


class LeastWorkRouter:
    """Least outstanding work across `n` engines (see the module docstring).

    `pick(prompt_tokens)` chooses and books a request; `first_token(rank, prompt_tokens)` and
    `finished(rank, prompt_tokens, had_first)` release it. `mean_prompt_tokens` is the unit a
    waiting prompt is weighed in (the dataset's mean)."""

    def __init__(self, n: int, mean_prompt_tokens: float, prefill_weight: float = PREFILL_WEIGHT):
        if n < 1:
            raise ValueError(f"a router needs at least one engine, not {n}")
        self.n = n
        self._unit = prefill_weight / max(1.0, float(mean_prompt_tokens))
        self.loads = [EngineLoad() for _ in range(n)]
        self._start = 0

    def score(self, rank: int) -> float:
        load = self.loads[rank]
        return load.in_flight + load.prefill_tokens * self._unit

    def pick(self, prompt_tokens: int) -> int:
        best, best_score = self._start, float("inf")
        for k in range(self.n):
            rank = (self._start + k) % self.n
            s = self.score(rank)
            if s < best_score:
                best, best_score = rank, s
        self._start = (best + 1) % self.n
        load = self.loads[best]
        load.in_flight += 1
        load.awaiting_first += 1
        load.prefill_tokens += prompt_tokens
        load.sent += 1
        load.sent_prompt_tokens += prompt_tokens
        if load.in_flight > load.peak_in_flight:
            load.peak_in_flight = load.in_flight
        return best

    def first_token(self, rank: int, prompt_tokens: int) -> None:
        load = self.loads[rank]
        load.awaiting_first -= 1
        load.prefill_tokens -= prompt_tokens

    def finished(self, rank: int, prompt_tokens: int, *, had_first: bool) -> None:
        load = self.loads[rank]
        load.in_flight -= 1
        if not had_first:
            self.first_token(rank, prompt_tokens)

    def gauge(self) -> tuple[tuple[int, int], ...]:
        """(in flight, awaiting a first token) per engine, now."""
        return tuple((x.in_flight, x.awaiting_first) for x in self.loads)

    def reset_counts(self) -> None:
        """Between tests: the totals start again (what is in flight stays booked)."""
        for load in self.loads:
            load.sent = load.sent_prompt_tokens = 0
            load.peak_in_flight = load.in_flight

    def summary(self) -> list[dict[str, int]]:
        """Per engine: requests and prompt tokens sent over the test, peak in flight."""
        return [
            {
                "sent": x.sent,
                "prompt_tokens": x.sent_prompt_tokens,
                "peak_in_flight": x.peak_in_flight,
            }
            for x in self.loads
        ]


def mean_length(prompts: Sequence[Sequence[int]]) -> float:
    return sum(len(p) for p in prompts) / len(prompts) if prompts else 1.0
