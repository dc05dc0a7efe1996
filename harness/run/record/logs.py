"""Parse LoadGen's logs. The detail log's `:::MLLOG {json}` records are the source of truth;
the summary text is only read as a fallback for the validity line."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MLLOG_PREFIX = ":::MLLOG "
DETAIL_LOG = "mlperf_log_detail.txt"
SUMMARY_LOG = "mlperf_log_summary.txt"
ACCURACY_LOG = "mlperf_log_accuracy.json"


@dataclass(frozen=True)
class DetailLog:
    values: dict[str, Any]  # last value of each key
    errors: list[str]
    warnings: list[str]


def parse_detail_log(path: str | Path) -> DetailLog:
    values: dict[str, Any] = {}
    errors: list[str] = []
    warnings: list[str] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.startswith(MLLOG_PREFIX):
                continue
            try:
                rec = json.loads(line[len(MLLOG_PREFIX) :])
            except json.JSONDecodeError:
                continue
            key, value = rec.get("key"), rec.get("value")
            if key is None:
                continue
            meta = rec.get("metadata") or {}
            if meta.get("is_error") or key.startswith("error"):
                errors.append(f"{key}: {value}")
            elif meta.get("is_warning") or key.startswith("warning"):
                warnings.append(f"{key}: {value}")
            values[key] = value
    return DetailLog(values=values, errors=errors, warnings=warnings)


_VALID_RE = re.compile(r"Result is\s*:\s*(VALID|INVALID)")


def summary_validity(path: str | Path) -> str | None:
    m = _VALID_RE.search(Path(path).read_text(errors="replace"))
    return m.group(1) if m else None


@dataclass(frozen=True)
class PerformanceResult:
    """One performance test, as the detail log reports it."""

    scenario: str
    validity: str  # VALID / INVALID
    invalid_reasons: list[str]
    tokens_per_second: float | None  # Offline: result_tokens_per_second; else completed tok/s
    samples_per_second: float | None
    duration_s: float | None
    sample_count: int | None
    query_count: int | None
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    latency_p99_ms: float | None = None
    # SingleStream's result for llama3.1-8b-edge: the submission checker reads
    # result_90.00_percentile_latency_ns for it (not early_stopping_latency_ss, which LoadGen
    # computes over the first-token latencies for token-latency models).
    latency_p90_ms: float | None = None
    ttft_limit_ms: float | None = None
    tpot_limit_ms: float | None = None
    early_stopping_met: bool | None = None
    num_errors: int = 0
    errors: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)  # every numeric result_* key
    settings: dict[str, Any] = field(default_factory=dict)  # effective_* settings

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ns_to_ms(v: Any) -> float | None:
    return float(v) / 1e6 if isinstance(v, (int, float)) else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def performance_result(log_dir: str | Path, detail: DetailLog | None = None) -> PerformanceResult:
    """The performance test's result from its logs; `detail`: the detail log, when the caller
    parsed it already."""
    d = Path(log_dir)
    if detail is None:
        detail = parse_detail_log(d / DETAIL_LOG)
    v = detail.values
    scenario = str(v.get("effective_scenario") or v.get("requested_scenario") or "")
    validity = v.get("result_validity")
    if validity is None and (d / SUMMARY_LOG).exists():
        validity = summary_validity(d / SUMMARY_LOG)
    validity = str(validity or "UNKNOWN")

    reasons: list[str] = []
    if v.get("result_perf_constraints_met") is False:
        reasons.append("latency constraints not met (TTFT/TPOT p99 above the limits)")
    if v.get("result_min_duration_met") is False:
        reasons.append("min duration not met (run shorter than min_duration)")
    if v.get("result_min_queries_met") is False:
        reasons.append("min queries not met (too few queries/samples issued)")
    if v.get("early_stopping_met") is False:
        reasons.append("early stopping not satisfied (too few queries to certify the percentile)")
    if v.get("result_invalid_reason"):
        reasons.append(str(v["result_invalid_reason"]).strip())
    num_errors = int(v.get("num_errors") or 0)
    if num_errors:
        reasons.append(f"LoadGen logged {num_errors} error(s)")

    offline = scenario == "Offline"
    tps = _num(v.get("result_tokens_per_second")) if offline else None
    if tps is None:
        tps = _num(v.get("result_completed_tokens_per_second"))
    if tps is None:
        tps = _num(v.get("result_tokens_per_second"))
    sps = _num(v.get("result_samples_per_second"))
    if sps is None:
        sps = _num(v.get("result_completed_samples_per_sec"))
    if sps is None:  # SingleStream: one sample per query
        sps = _num(v.get("result_qps_with_loadgen_overhead"))
    samples = v.get("generated_query_count")
    sample_count = None
    spq = v.get("generated_samples_per_query")
    if isinstance(samples, int) and isinstance(spq, int):
        sample_count = samples * spq
    duration = sample_count / sps if sample_count and sps else None
    numeric = {k: float(x) for k, x in v.items() if k.startswith("result_") and _num(x) is not None}
    settings = {k: x for k, x in v.items() if k.startswith("effective_")}
    # LoadGen logs the token-latency limits (ns) only as requested_server_*_latency; they are
    # applied unchanged, and only the Server scenario (Server and Interactive) checks them.
    server = scenario == "Server"
    ttft_lim = ns_to_ms(v.get("requested_server_ttft_latency")) if server else None
    tpot_lim = ns_to_ms(v.get("requested_server_tpot_latency")) if server else None
    return PerformanceResult(
        scenario=scenario,
        validity=validity,
        invalid_reasons=reasons if validity != "VALID" else [],
        tokens_per_second=tps,
        samples_per_second=sps,
        duration_s=duration,
        sample_count=sample_count,
        query_count=v.get("result_query_count")
        if isinstance(v.get("result_query_count"), int)
        else None,
        ttft_p99_ms=ns_to_ms(v.get("result_first_token_99.00_percentile_latency_ns")),
        tpot_p99_ms=ns_to_ms(v.get("result_time_per_output_token_99.00_percentile_ns")),
        latency_p99_ms=ns_to_ms(v.get("result_99.00_percentile_latency_ns")),
        latency_p90_ms=ns_to_ms(v.get("result_90.00_percentile_latency_ns")),
        ttft_limit_ms=ttft_lim,
        tpot_limit_ms=tpot_lim,
        early_stopping_met=v.get("early_stopping_met"),
        num_errors=num_errors,
        errors=detail.errors,
        metrics=numeric,
        settings=settings,
    )
