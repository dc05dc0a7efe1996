"""What the SUT saw during one LoadGen test: its counters (SUTStats, and the Server SUT's
ServerStats), the Server SUT's timeline of samples and gauges, and `InFlight`, the one count
of requests inside vLLM, which the Server SUT keeps and its stats record and gauges read
(samples in flight are the ledger's count, sut.ledger)."""

from __future__ import annotations

from dataclasses import dataclass, field


class InFlight:
    """What was sent and is not back yet, and the most at one moment since `mark()`: kept by
    its one owner, read by everyone else (stats records, gauges)."""

    __slots__ = ("now", "peak")

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0

    def add(self, n: int = 1) -> None:
        self.now += n
        if self.now > self.peak:
            self.peak = self.now

    def done(self, n: int = 1) -> None:
        self.now -= n

    def mark(self) -> None:
        """A new test: its peak starts from what is out now."""
        self.peak = self.now


@dataclass
class SUTStats:
    """What the SUT saw during one LoadGen test, JSON-able through `vars()`."""

    issued: int = 0
    completed: int = 0
    output_tokens: int = 0
    failed_samples: int = 0  # answered without a (full) generation: engine error, stall, stop
    first_issue_s: float = 0.0
    last_complete_s: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        span = self.last_complete_s - self.first_issue_s
        return self.output_tokens / span if span > 0 else 0.0


@dataclass
class ServerStats(SUTStats):
    """What the SUT saw, JSON-able through `vars()` (the runner stores it as `sut_stats`)."""

    # Read from their owners when the record is taken (ServerSUT.stats_record): samples issued
    # and not yet answered (the ledger's count), requests inside vLLM (the SUT's)
    in_flight: int = 0
    peak_in_flight: int = 0  # most samples issued and not yet completed at one moment
    engine_in_flight: int = 0
    peak_engine_in_flight: int = 0  # most requests inside vLLM at one moment
    first_tokens_reported: int = 0
    engine_outputs: int = 0  # outputs the engine streamed back (final-only: one per sample)
    # Order of the LoadGen calls per sample, checked as they are made.
    first_token_before_complete: int = 0
    first_token_order_violations: int = 0
    single_token_outputs: int = 0
    loadgen_first_token_calls: int = 0
    loadgen_complete_calls: int = 0
    # data parallel: "ours" or "vllm"; per engine what our router sent (None: one engine, or
    # vLLM's routing, which the SUT does not see)
    dp_routing: str | None = None
    routed: list[dict[str, int]] | None = None
    # per engine, the requests of the test that vLLM's engines finished and their prompt
    # tokens, by the engine index they report (run with engine stats; warm-up not counted)
    engine_served: list[dict[str, int]] | None = None


@dataclass
class Timeline:
    """What one LoadGen test looked like from the SUT, in `time.monotonic()` seconds.

    `samples`: (issued, first token, completed, tokens) per answered sample (first token is the
    completion time when none came before it). `gauges`: (time, issued, completed, in the
    engine), sampled every sut.server.GAUGE_PERIOD_S while the test runs.
    """

    samples: list[tuple[float, float, float, int]]
    gauges: list[tuple[float, int, int, int]]
    # (time, running, waiting, KV cache use 0-1, preemptions so far): vLLM's own scheduler
    # stats at each gauge, when the SUT was built with engine_stats (else empty)
    engine: list[tuple[float, int, int, float, int]] = field(default_factory=list)
    # Data parallel, per engine at each gauge: vLLM's (running, waiting) when built with
    # engine_stats, and what our router has in flight / awaiting a first token there
    engines: list[tuple[float, tuple[tuple[int, int], ...]]] = field(default_factory=list)
    routed: list[tuple[float, tuple[tuple[int, int], ...]]] = field(default_factory=list)
