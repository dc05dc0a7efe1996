"""Accuracy targets of the MLPerf Inference submission checker, and the verdict against them.

The values live in the preset registry (`harness.benchmarks`, each preset's AccuracySpec);
this module turns them into the targets a score is judged by.

Values are the checker's ``accuracy-target`` / ``accuracy-upper-limit`` tables (v6.0/v6.1):
a metric passes when ``value >= reference * lower_fraction`` and, where an upper limit
exists, ``value <= reference * upper_fraction``. Both bounds are inclusive and are computed
with the same float expression as the checker (``reference * fraction``), so a value exactly
on a bound is judged the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

from evaluation.errors import EvaluationError
from harness.benchmarks import BENCHMARKS, Benchmark, Reference

ACCURACY_LEVELS: tuple[str, ...] = ("99", "99.9")


@dataclass(frozen=True)
class MetricTarget(Reference):
    """One checked metric as judged: the registry's reference (the key in our metrics dict,
    the checker's name, its bounds), possibly scaled to a subset of the dataset."""

    scaled_from: float | None = None  # the checker's reference, when scaled to a subset

    def for_samples(self, samples: int) -> MetricTarget:
        """A total's window scaled to `samples` scored out of the dataset's `total_over`: a
        48-sample check cannot reach 90% of 13,368 samples' characters. Unchanged otherwise."""
        if self.total_over is None or samples >= self.total_over or samples < 1:
            return self
        return replace(
            self,
            reference=self.reference * samples / self.total_over,
            scaled_from=self.reference,
        )

    @property
    def lower_bound(self) -> float:
        return self.reference * self.lower_fraction

    @property
    def upper_bound(self) -> float | None:
        return None if self.upper_fraction is None else self.reference * self.upper_fraction

    def accepts(self, value: float) -> bool:
        if math.isnan(value) or value < self.lower_bound:
            return False
        upper = self.upper_bound
        return upper is None or value <= upper

    def describe(self) -> str:
        """Readable bound, e.g. ">= 38.3914 (99% of 38.7792)"."""
        low_pct = _percent(self.lower_fraction)
        if self.scaled_from is not None:
            return (
                f"{self.lower_bound:.4f} .. {self.upper_bound or 0:.4f} "
                f"({low_pct}-{_percent(self.upper_fraction or 0)}% of {self.reference:.1f}: "
                f"{self.scaled_from:,.0f} scaled from {self.total_over:,} samples)"
            )
        if self.upper_fraction is None:
            return f">= {self.lower_bound:.4f} ({low_pct}% of {self.reference:g})"
        high_pct = _percent(self.upper_fraction)
        return (
            f"{self.lower_bound:.4f} .. {self.upper_bound:.4f} "
            f"({low_pct}-{high_pct}% of {self.reference:g})"
        )


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.1f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class AccuracyTargets:
    """The checked metrics of one benchmark at one accuracy level."""

    benchmark: str
    checker_model: str
    accuracy_level: str
    metrics: tuple[MetricTarget, ...]

    def for_samples(self, samples: int) -> AccuracyTargets:
        """Totals (gen_len) scaled to a subset of `samples`; the whole dataset is unchanged."""
        return replace(self, metrics=tuple(m.for_samples(samples) for m in self.metrics))


@dataclass(frozen=True)
class MetricVerdict:
    target: MetricTarget
    value: float | None
    passed: bool


@dataclass(frozen=True)
class Verdict:
    benchmark: str
    accuracy_level: str
    checks: tuple[MetricVerdict, ...]

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    def as_dict(self) -> dict[str, object]:
        return {
            "benchmark": self.benchmark,
            "accuracy_level": self.accuracy_level,
            "passed": self.passed,
            "checks": {
                check.target.metric: {
                    "value": check.value,
                    "reference": check.target.reference,
                    "lower_bound": check.target.lower_bound,
                    "upper_bound": check.target.upper_bound,
                    "passed": check.passed,
                    **(
                        {
                            "scaled_from": check.target.scaled_from,
                            "dataset_samples": check.target.total_over,
                        }
                        if check.target.scaled_from is not None
                        else {}
                    ),
                }
                for check in self.checks
            },
        }


def known_benchmarks() -> tuple[str, ...]:
    return tuple(BENCHMARKS)


def preset(benchmark: str) -> Benchmark:
    """The registry's preset; its `accuracy` holds the facts scoring and judging use."""
    bench = BENCHMARKS.get(benchmark)
    if bench is None:
        raise EvaluationError(
            f"unknown benchmark {benchmark!r}: use one of {', '.join(BENCHMARKS)}"
        )
    return bench


def targets_for(benchmark: str, accuracy_level: str = "99") -> AccuracyTargets:
    """The checker's targets for a benchmark at accuracy level "99" or "99.9"."""
    spec = preset(benchmark).accuracy
    references = spec.references.get(str(accuracy_level))
    if references is None:
        raise EvaluationError(
            f"benchmark {benchmark} has no {accuracy_level}% accuracy target: use "
            f"--accuracy-level {' or '.join(spec.levels)}"
        )
    metrics = tuple(MetricTarget(**asdict(r)) for r in references)
    checker_model = spec.checker_models[str(accuracy_level)]
    return AccuracyTargets(benchmark, checker_model, str(accuracy_level), metrics)


def judge(targets: AccuracyTargets, metrics: Mapping[str, object]) -> Verdict:
    """PASS/FAIL per checked metric; a missing or non-numeric metric fails."""
    checks = []
    for target in targets.metrics:
        value = _as_number(metrics.get(target.metric))
        checks.append(MetricVerdict(target, value, value is not None and target.accepts(value)))
    return Verdict(targets.benchmark, targets.accuracy_level, tuple(checks))


def _as_number(value: object) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
