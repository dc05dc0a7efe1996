"""accuracy.txt, accuracy.json and the verdict table.

accuracy.txt is what the submission checker reads: it matches each line against regexes
such as ``.*'rouge1':\\s+'?([\\d.]+)'?.*``, ``.*'gen_len':\\s([\\d.]+).*`` and
``^hash=([\\w\\d]+)$``. The reference scripts' printed result dict is exactly such a line, so
the file holds that dict, built from plain Python numbers (a numpy scalar would print as
``np.int64(...)`` and not match), followed by the SHA-256 of the accuracy log.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from evaluation.targets import AccuracyTargets, Verdict
from harness import files

# Which keys each reference script prints, in its order. The CNN/DailyMail script formats
# its ROUGE values as strings (f"{...}"), which the checker's '?-quoted patterns accept.
SUMMARY_KEYS_CNN_DAILYMAIL = ("rouge1", "rouge2", "rougeL", "rougeLsum", "gen_len", "gen_num")
SUMMARY_KEYS_OPEN_ORCA = (
    "rouge1",
    "rouge2",
    "rougeL",
    "rougeLsum",
    "gen_len",
    "gen_num",
    "gen_tok_len",
    "tokens_per_sample",
)
LENGTH_KEYS = ("gen_len", "gen_num", "gen_tok_len", "tokens_per_sample")
QUOTED_IN_REFERENCE = {"cnn_dailymail": ("rouge1", "rouge2", "rougeL", "rougeLsum")}


@dataclass(frozen=True)
class ReportPaths:
    accuracy_json: Path
    accuracy_txt: Path


def reference_result(style: str, metrics: Mapping[str, float | int]) -> dict[str, object]:
    """The result dict the reference script of this style prints, as plain Python values."""
    if style == "cnn_dailymail":
        keys: tuple[str, ...] = SUMMARY_KEYS_CNN_DAILYMAIL
    elif style == "open_orca":
        keys = SUMMARY_KEYS_OPEN_ORCA
    elif style == "longbench":
        # Pooled metrics first, in the order the rows introduced them, then the lengths.
        keys = tuple(k for k in metrics if k not in LENGTH_KEYS) + LENGTH_KEYS
    else:
        raise ValueError(f"unknown report style {style!r}")
    quoted = QUOTED_IN_REFERENCE.get(style, ())
    result: dict[str, object] = {}
    for key in keys:
        value = metrics[key]
        result[key] = str(value) if key in quoted else _plain_number(value)
    return result


def _plain_number(value: float | int) -> float | int:
    # numbers.Integral covers numpy integers too; everything else is a float score.
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def accuracy_txt(style: str, metrics: Mapping[str, float | int], log_sha256: str) -> str:
    return f"\nResults\n\n{reference_result(style, metrics)!r}\n\nhash={log_sha256}\n"


def accuracy_json(
    targets: AccuracyTargets,
    metrics: Mapping[str, float | int],
    verdict: Verdict,
    *,
    accuracy_log: Path,
    log_sha256: str,
    rows_per_metric: Mapping[str, int] | None = None,
) -> str:
    document: dict[str, object] = {
        "benchmark": targets.benchmark,
        "checker_model": targets.checker_model,
        "accuracy_level": targets.accuracy_level,
        **{key: _plain_number(value) for key, value in metrics.items()},
        **({"rows_per_metric": dict(rows_per_metric)} if rows_per_metric is not None else {}),
        "passed": verdict.passed,
        "verdict": verdict.as_dict()["checks"],
        "accuracy_log": str(accuracy_log),
        "accuracy_log_sha256": log_sha256,
    }
    return json.dumps(document, indent=2) + "\n"


def write_reports(
    output_dir: Path,
    *,
    style: str,
    targets: AccuracyTargets,
    metrics: Mapping[str, float | int],
    verdict: Verdict,
    accuracy_log: Path,
    log_sha256: str,
    rows_per_metric: Mapping[str, int] | None = None,
) -> ReportPaths:
    paths = ReportPaths(output_dir / "accuracy.json", output_dir / "accuracy.txt")
    # The pair is written aside and renamed into place together: an interrupt leaves the
    # earlier pair or the new one, never a json of one scoring beside the txt of another.
    files.write_texts(
        {
            paths.accuracy_json: accuracy_json(
                targets,
                metrics,
                verdict,
                accuracy_log=accuracy_log,
                log_sha256=log_sha256,
                rows_per_metric=rows_per_metric,
            ),
            paths.accuracy_txt: accuracy_txt(style, metrics, log_sha256),
        }
    )
    return paths


def verdict_table(
    targets: AccuracyTargets, metrics: Mapping[str, float | int], verdict: Verdict
) -> str:
    """Fixed-width table: every metric, its bound where checked, PASS/FAIL, overall line."""
    rows = [("metric", "value", "target", "verdict")]
    checked = {check.target.metric: check for check in verdict.checks}
    for check in verdict.checks:
        rows.append(
            (
                check.target.metric,
                "missing" if check.value is None else _format_value(metrics[check.target.metric]),
                check.target.describe(),
                "PASS" if check.passed else "FAIL",
            )
        )
    for key, value in metrics.items():
        if key not in checked:
            rows.append((key, _format_value(value), "", ""))
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    lines = [
        f"{targets.benchmark} accuracy ({targets.accuracy_level}% targets of "
        f"{targets.checker_model})"
    ]
    for index, row in enumerate(rows):
        lines.append(
            "  ".join(
                cell.rjust(widths[col]) if col == 1 and index else cell.ljust(widths[col])
                for col, cell in enumerate(row)
            ).rstrip()
        )
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    lines.append(f"overall: {'PASS' if verdict.passed else 'FAIL'}")
    return "\n".join(lines)


def _format_value(value: float | int) -> str:
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return f"{float(value):.4f}"
