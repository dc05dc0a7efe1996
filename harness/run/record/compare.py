"""`mlperf-vllm compare DIR...`: finished run folders side by side.

Why: a shell loop over rates, durations or engine flags leaves one folder per value; reading
each result.json to see which held is slow and error-prone. This reads them all and puts one
row per run: what LoadGen ran (scenario, target, min duration), its verdict (validity, the
engine keeping up), the figures (samples/s, tokens/s, TTFT and TPOT p99 against their limits),
and what differs between the runs (engine arguments, SUT options, LoadGen overrides): the knob
of the loop, found rather than typed.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.run.record.result import RESULT_FILE, RunResult

COLUMNS = (
    "run",
    "scenario",
    "status",
    "validity",
    "kept_up",
    "target_qps",
    "min_duration_s",
    "samples_per_s",
    "tokens_per_s",
    "ttft_p99_ms",
    "tpot_p99_ms",
    "differs",
)


def load_runs(dirs: Sequence[Path]) -> list[tuple[str, RunResult]]:
    """Every folder's result.json; one error naming each folder without one, before output."""
    missing = [str(d) for d in dirs if not (d / RESULT_FILE).is_file()]
    if missing:
        raise UsageError(
            f"no {RESULT_FILE} in {', '.join(missing)}: pass the --output folders of runs "
            "(`mlperf-vllm run ... --output DIR`)"
        )
    names = [d.name or str(d) for d in dirs]
    if len(set(names)) < len(names):  # the same folder name under different parents
        names = [str(d) for d in dirs]
    return [(n, RunResult.load(d / RESULT_FILE)) for n, d in zip(names, dirs, strict=True)]


def _knobs(result: RunResult) -> dict[str, Any]:
    """What a run was asked to run with, flat: engine arguments, SUT options, overrides."""
    out: dict[str, Any] = {}
    out.update({f"engine.{k}": v for k, v in (result.engine_args or {}).items()})
    out.update({f"sut.{k}": v for k, v in (result.sut_options or {}).items()})
    out.update({f"loadgen.{k}": v for k, v in (result.loadgen_overrides or {}).items()})
    out["user_conf"] = result.user_conf
    out["model"] = result.model
    out["dataset_sha256"] = result.dataset_sha256
    return out


def differing(results: Sequence[RunResult]) -> list[str]:
    """The knobs whose values are not the same in every run (absent counts as a value)."""
    knobs = [_knobs(r) for r in results]
    keys = sorted(set().union(*knobs)) if knobs else []
    return [k for k in keys if len({repr(kn.get(k)) for kn in knobs}) > 1]


def rows(runs: Sequence[tuple[str, RunResult]]) -> list[dict[str, Any]]:
    diff = differing([r for _, r in runs])
    out = []
    for name, r in runs:
        perf = r.performance or {}
        settings = perf.get("settings") or {}
        sustained = perf.get("sustained") or {}
        knobs = _knobs(r)
        scenario = r.scenario
        target = settings.get("effective_target_qps")
        duration = settings.get("effective_min_duration_ms")
        out.append(
            {
                "run": name,
                "scenario": scenario,
                "status": r.status,
                "validity": perf.get("validity"),
                "kept_up": sustained.get("kept_up") if sustained else None,
                "target_qps": target,
                "min_duration_s": duration / 1000 if duration is not None else None,
                "samples_per_s": perf.get("samples_per_second"),
                "tokens_per_s": perf.get("tokens_per_second"),
                "ttft_p99_ms": perf.get("ttft_p99_ms"),
                "tpot_p99_ms": perf.get("tpot_p99_ms"),
                "ttft_limit_ms": perf.get("ttft_limit_ms"),
                "tpot_limit_ms": perf.get("tpot_limit_ms"),
                "differs": {k: knobs.get(k) for k in diff},
            }
        )
    return out


def _cell(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _latency(value: Any, limit: Any) -> str:
    if value is None:
        return "-"
    over = " OVER" if limit and value > limit else ""
    return f"{value:,.1f}{over}"


def render(table: Sequence[dict[str, Any]]) -> str:
    """A plain-text table, one row per run, columns aligned; the differing knobs last."""
    head = list(COLUMNS)
    body = []
    for row in table:
        body.append(
            [
                row["run"],
                _cell(row["scenario"]),
                _cell(row["status"]),
                _cell(row["validity"]),
                _cell(row["kept_up"]),
                _cell(row["target_qps"], 3),
                _cell(row["min_duration_s"], 1),
                _cell(row["samples_per_s"]),
                _cell(row["tokens_per_s"], 1),
                _latency(row["ttft_p99_ms"], row["ttft_limit_ms"]),
                _latency(row["tpot_p99_ms"], row["tpot_limit_ms"]),
                " ".join(f"{k}={_cell(v)}" for k, v in row["differs"].items()) or "-",
            ]
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=True)]
    lines = [
        "  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)).rstrip()
        for line in [head, *body]
    ]
    return "\n".join(lines)


def to_csv(table: Sequence[dict[str, Any]]) -> str:
    """One row per run; each differing knob its own column."""
    knobs = sorted({k for row in table for k in row["differs"]})
    fields = [c for c in COLUMNS if c != "differs"] + ["ttft_limit_ms", "tpot_limit_ms", *knobs]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in table:
        flat = {k: v for k, v in row.items() if k != "differs"}
        flat.update(row["differs"])
        writer.writerow({k: flat.get(k) for k in fields})
    return buf.getvalue()
