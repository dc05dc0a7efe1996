"""Accuracy certification for the MLPerf LLM benchmarks (CNN/DailyMail, OpenOrca, 405B mix).

Numbers reproduce the MLCommons reference evaluation scripts; the verdict reproduces the
submission checker. This package never imports ``sut`` or ``harness``.

Names are resolved on first use: importing ``evaluation`` (or ``harness.cli.evaluate`` to build the
command line) must not import NLTK or ROUGE, so commands that score nothing run where those
are not installed.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "EvaluationError": "evaluation.errors",
    "EvaluationResult": "evaluation.pipeline",
    "evaluate": "evaluation.pipeline",
    "ReportPaths": "evaluation.report",
    "AccuracyTargets": "evaluation.targets",
    "MetricTarget": "evaluation.targets",
    "MetricVerdict": "evaluation.targets",
    "Verdict": "evaluation.targets",
    "judge": "evaluation.targets",
    "known_benchmarks": "evaluation.targets",
    "targets_for": "evaluation.targets",
}

if TYPE_CHECKING:
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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evaluation' has no attribute {name!r}")
    return getattr(import_module(module), name)


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
