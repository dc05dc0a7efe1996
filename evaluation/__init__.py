"""Accuracy certification for the MLPerf LLM benchmarks (CNN/DailyMail, OpenOrca, 405B mix).

Numbers reproduce the MLCommons reference evaluation scripts; the verdict reproduces the
submission checker. This package never imports ``sut`` or ``harness``.
"""

from evaluation.errors import EvaluationError
from evaluation.pipeline import EvaluationResult, evaluate
from evaluation.report import ReportPaths
from evaluation.targets import (
    AccuracyTargets,
    MetricTarget,
    MetricVerdict,
    Verdict,
    judge,
    known_benchmarks,
    targets_for,
)

__all__ = [
    "AccuracyTargets",
    "EvaluationError",
    "EvaluationResult",
    "MetricTarget",
    "MetricVerdict",
    "ReportPaths",
    "Verdict",
    "evaluate",
    "judge",
    "known_benchmarks",
    "targets_for",
]
