"""A run's result as MLflow params and metrics: inputs, effective LoadGen settings, headline
numbers, the accuracy verdict."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.run.record.result import RunResult
from harness.tracking.store import _number

_PERCENTILES = {
    "50.00": "p50",
    "90.00": "p90",
    "95.00": "p95",
    "97.00": "p97",
    "99.00": "p99",
    "99.90": "p999",
}


# --------------------------------------------------------------------------- result -> MLflow


def result_params(result: RunResult) -> dict[str, Any]:
    """Inputs of the run: what it was asked to do and with which engine and sampling."""
    params: dict[str, Any] = {}
    for key in (
        "benchmark",
        "loadgen_model",
        "scenario",
        "mode",
        "model",
        "dataset",
        "dataset_sha256",
        "dataset_size",
        "user_conf",
        "audit_config",
    ):
        if result.has(key):
            params[key] = getattr(result, key)
    for k, v in (result.engine_args or {}).items():
        params[f"engine.{k}"] = v
    for k, v in (result.sampling or {}).items():
        params[f"sampling.{k}"] = v
    for k, v in (result.engine_resolved or {}).items():
        params[f"resolved.{k}"] = v  # what the engine derived and ran with
    for k, v in (result.loadgen_overrides or {}).items():
        params[f"override.{k}"] = v  # set on the command line over the conf
    params.update(cluster_params(result.cluster))
    return params


def cluster_params(cluster: Mapping[str, Any] | None) -> dict[str, Any]:
    """A Ray layout's cluster: its address, live nodes (with their addresses) and resources."""
    if not cluster:
        return {}
    params: dict[str, Any] = {
        "cluster.address": cluster.get("address"),
        "cluster.ray_version": cluster.get("ray_version"),
        "cluster.nodes": cluster.get("nodes_alive"),
        "cluster.node_ips": ",".join(
            sorted(str(n.get("ip")) for n in cluster.get("nodes") or [] if n.get("alive"))
        ),
        "cluster.device": cluster.get("device"),
    }
    for k, v in (cluster.get("totals") or {}).items():
        params[f"cluster.{k}"] = v
    for k, v in (cluster.get("layout") or {}).items():
        params[f"cluster.layout.{k}"] = v
    return params


def loadgen_params(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Effective LoadGen settings (detail log `effective_*`), as `loadgen.<name>`."""
    skip = {"effective_test_mode"}  # differs between the performance and accuracy tests
    return {
        f"loadgen.{k.removeprefix('effective_')}": v
        for k, v in settings.items()
        if k.startswith("effective_") and k not in skip
    }


def performance_metrics(perf: Mapping[str, Any]) -> dict[str, float]:
    """Headline numbers under short names, latency percentiles in ms, and every numeric
    `result_*` key of the detail log under `loadgen.`."""
    m: dict[str, float] = {}
    for key in (
        "tokens_per_second",
        "samples_per_second",
        "duration_s",
        "sample_count",
        "query_count",
        "ttft_p99_ms",
        "tpot_p99_ms",
        "latency_p99_ms",
        "latency_p90_ms",
        "ttft_limit_ms",
        "tpot_limit_ms",
        "num_errors",
        "price_per_hour",
        "usd_per_million_tokens",
    ):
        v = _number(perf.get(key))
        if v is not None:
            m[key] = v
    if perf.get("early_stopping_met") is not None:
        m["early_stopping_met"] = 1.0 if perf["early_stopping_met"] else 0.0
    m["valid"] = 1.0 if perf.get("validity") == "VALID" else 0.0
    kept_up = (perf.get("sustained") or {}).get("kept_up")
    if kept_up is not None:  # the project's verdict beside LoadGen's; absent when not judged
        m["kept_up"] = 1.0 if kept_up else 0.0
    transit = perf.get("in_transit") or {}  # the host path (with engine stats): in no scheduler
    for key, name in (
        ("mean_in_transit", "in_transit_mean"),
        ("max_in_transit", "in_transit_max"),
        ("share_of_in_flight", "in_transit_share"),
    ):
        v = _number(transit.get(key))
        if v is not None:
            m[name] = v
    raw = perf.get("metrics") or {}
    for pct, short in _PERCENTILES.items():
        for prefix, name in (
            (f"result_{pct}_percentile_latency_ns", "latency"),
            (f"result_first_token_{pct}_percentile_latency_ns", "ttft"),
            (f"result_time_per_output_token_{pct}_percentile_ns", "tpot"),
        ):
            v = _number(raw.get(prefix))
            if v is not None:
                m[f"{name}_{short}_ms"] = v / 1e6
    for key, value in raw.items():
        v = _number(value)
        if v is not None:
            m[f"loadgen.{key}"] = v
    return m


def kept_up_tag(perf: Mapping[str, Any]) -> str | None:
    """Whether the engine kept up with the arrival rate (Server / Interactive), as a tag to
    search runs by: "yes", "no", "not judged"; None where the run has no such verdict."""
    sustained = perf.get("sustained")
    if not sustained:
        return None
    return {True: "yes", False: "no"}.get(sustained.get("kept_up"), "not judged")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def accuracy_summary(
    result: RunResult | None, acc_dir: Path, fresh: Any = lambda p: True
) -> tuple[dict[str, float], str | None, str | None]:
    """(metrics, verdict PASS/FAIL or None, evaluation error or None) from result.json's
    accuracy block, else from accuracy.json in the folder."""
    acc = (result.accuracy if result is not None else None) or {}
    metrics = {k: v for k, v in (acc.get("metrics") or {}).items() if _number(v) is not None}
    verdict = acc.get("verdict")
    error = acc.get("evaluation_error")
    doc_path = acc_dir / "accuracy.json"
    if (not metrics or verdict is None) and doc_path.is_file() and fresh(doc_path):
        doc = _read_json(doc_path) or {}
        if not metrics:
            metrics = {
                k: v
                for k, v in doc.items()
                if k != "passed" and not isinstance(v, bool) and _number(v) is not None
            }
        if verdict is None and "passed" in doc:
            verdict = "PASS" if doc["passed"] else "FAIL"
    return {k: float(v) for k, v in metrics.items()}, verdict, error
