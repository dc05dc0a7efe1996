"""The result table a person reads at the end of a run."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from typing import Any

from harness.run.record.host_path import host_path_warning
from harness.run.record.result import RunResult

# The table fits the terminal it is printed on, between these widths: at most 110 columns (the
# width it was laid out for, also used where the output is no terminal), at least 72 (below,
# rich would squeeze the value column into a few characters a line).
MAX_WIDTH = 110
MIN_WIDTH = 72
MAX_WARNINGS = 8  # warnings repeated under the table; result.json keeps them all


def _fmt(v: Any, unit: str = "", digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}{unit}"
    return f"{v}{unit}"


def result_rows(run: RunResult | Mapping[str, Any]) -> list[tuple[str, str]]:
    result = RunResult.coerce(run)
    rows: list[tuple[str, str]] = [
        ("benchmark", f"{result.benchmark} ({result.loadgen_model})"),
        ("scenario / mode", f"{result.scenario} / {result.mode}"),
        ("status", str(result.status)),
    ]
    if result.loadgen_overrides:
        shown = ", ".join(f"{k} {v:g}" for k, v in sorted(result.loadgen_overrides.items()))
        rows.append(("LoadGen overrides", f"{shown} (command line, over the conf)"))
    options = result.sut_options or {}
    if options.get("offline_order", "arrival") != "arrival":
        rows.append(("sample order", f"{options['offline_order']} (by prompt length)"))
    if result.warmup:
        w = result.warmup
        rows.append(
            ("warm-up", f"{w['finished']} of {w['samples']} samples in {w['s']} s, untimed")
        )
    perf = result.performance
    if perf:
        rows.append(("validity", perf["validity"]))
        for reason in perf.get("invalid_reasons") or []:
            rows.append(("  why", reason))
        if result.not_compliant:  # VALID under a smoke conf is still no submission result
            rows.append(
                (
                    "submission",
                    f"NOT COMPLIANT for round {result.round or '?'}: "
                    + ", ".join(result.not_compliant)
                    + " (see the warnings below)",
                )
            )
        label = "tokens/s" if perf["scenario"] == "Offline" else "completed tokens/s"
        rows.append((label, _fmt(perf.get("tokens_per_second"))))
        rows.append(("samples/s", _fmt(perf.get("samples_per_second"), digits=2)))
        if perf.get("price_per_hour") is not None:
            cost = perf.get("usd_per_million_tokens")
            rows.append(
                (
                    "cost",
                    f"${cost:,.4f} per million output tokens at ${perf['price_per_hour']:,.2f}/h"
                    if cost is not None
                    else f"- (no throughput) at ${perf['price_per_hour']:,.2f}/h",
                )
            )
        rows.append(("samples", _fmt(perf.get("sample_count"))))
        rows.append(("duration", _fmt(perf.get("duration_s"), " s")))
        if perf["scenario"] == "SingleStream" and perf.get("latency_p90_ms") is not None:
            rows.append(("latency p90", f"{_fmt(perf['latency_p90_ms'], ' ms')} (the result)"))
        for label, key, digits in (("TTFT p99", "ttft", 1), ("TPOT p99", "tpot", 2)):
            value, limit = perf.get(f"{key}_p99_ms"), perf.get(f"{key}_limit_ms")
            if value is None:
                continue
            text = _fmt(value, " ms", digits)
            if limit is not None:  # only Server / Interactive apply token-latency limits
                text += f" (limit {_fmt(limit, ' ms', 0)}) {_limit_ok(value, limit)}"
            rows.append((label, text))
        if perf.get("early_stopping_met") is not None and perf["scenario"] != "Offline":
            rows.append(("early stopping", "met" if perf["early_stopping_met"] else "NOT met"))
        for failed in perf.get("failed_constraints") or []:
            rows.append(("  failed", failed))
        sustained = perf.get("sustained")
        if sustained:
            rows.append(("engine kept up", _sustained_text(sustained)))
            if perf["validity"] == "VALID" and sustained.get("kept_up") is False:
                rows.append(("  meaning", _valid_but_behind(sustained)))
        # run --engine-stats only: requests handed to vLLM that its schedulers do not hold yet
        host_path = host_path_warning(perf.get("in_transit"))
        if host_path:
            rows.append(("warning", host_path))
        stats = result.sut_stats or {}
        if perf["scenario"] != "Offline" and "peak_engine_in_flight" in stats:
            rows.append(
                (
                    "peak in flight",
                    f"{stats['peak_engine_in_flight']} queries in the engine at once",
                )
            )
    acc = result.accuracy
    if acc:
        if acc.get("evaluation_error"):
            rows.append(("accuracy", f"not evaluated: {acc['evaluation_error']}"))
        elif acc.get("verdict"):
            rows.append(("accuracy", acc["verdict"]))
            for k, v in (acc.get("metrics") or {}).items():
                rows.append((f"  {k}", _fmt(v, digits=4)))
        else:
            rows.append(("accuracy log", acc.get("log", "-")))
    t06 = result.test06
    if t06:
        if "passed" not in t06:
            verdict = "ran, not verified" + (f": {t06['error']}" if t06.get("error") else "")
        else:
            verdict = "PASS" if t06["passed"] else "FAIL: " + "; ".join(t06.get("problems") or [])
        rows.append(("TEST06", f"{verdict} ({t06.get('samples', '?')} samples, {t06['log_dir']})"))
    if result.error:
        rows.append(("error", result.error))
    return rows


def _sustained_text(v: Mapping[str, Any]) -> str:
    if v.get("kept_up") is None:
        return f"not judged: {v.get('reason')}"
    head = "yes" if v["kept_up"] else "NO (the queue grew: this rate is over capacity)"
    return (
        f"{head}; backlog {v['backlog_start']:.0f} -> {v['backlog_end']:.0f} (growth allowed "
        f"{v.get('allowed_growth', 0):.0f}), completed {v['completed_to_issued']:.3f} of issued "
        f"over {v['window_start_s']:.0f}-"
        f"{v['window_end_s']:.0f} s (timeline.png)"
    )


def _valid_but_behind(v: Mapping[str, Any]) -> str:
    """VALID beside "kept up NO": LoadGen judged the p99s of this run's length only, while the
    backlog's trend says how the same rate ends over a longer one."""
    rates = ""
    if v.get("completed_qps_in_window") and v.get("target_qps"):
        rates = f" ({v['completed_qps_in_window']:.2f}/s against {v['target_qps']:g} QPS)"
    return (
        "LoadGen's p99s held over this run's length, but the engine completed fewer queries a "
        f"second than arrived{rates}, so its backlog grows and a longer run at this rate would "
        "fail: ship a lower target"
    )


def _limit_ok(value: float | None, limit: float | None) -> str:
    if value is None or not limit:
        return ""
    return "ok" if value <= limit else "OVER"


def table_width() -> int:
    """The terminal's width (COLUMNS where set), within MIN_WIDTH..MAX_WIDTH; MAX_WIDTH where
    the output is no terminal (a pipe, a file)."""
    columns = shutil.get_terminal_size((MAX_WIDTH, 24)).columns
    return max(MIN_WIDTH, min(MAX_WIDTH, columns))


def warnings_block(warnings: Sequence[str], width: int) -> str:
    """The run's warnings again, one line each cut to `width`: printed as the run went, before
    the engine's start and a long test, they would have scrolled away by the end."""
    shown = list(dict.fromkeys(" ".join(str(w).split()) for w in warnings))  # once each
    if not shown:
        return ""
    lines = [f"warnings ({len(shown)}; in full in result.json):"]
    for w in shown[:MAX_WARNINGS]:
        lines.append("  - " + clip_middle(w, width - 4))
    if len(shown) > MAX_WARNINGS:
        lines.append(f"  ... and {len(shown) - MAX_WARNINGS} more in result.json")
    return "\n".join(lines) + "\n"


def clip_middle(text: str, width: int) -> str:
    """`text` in `width` characters, cut in the middle at spaces: a warning says what is wrong
    first and what to do last ("... (did you mean target_qps?)")."""
    if len(text) <= width:
        return text
    gap = " ... "
    room = width - len(gap)
    head, tail = text[: room - room // 2], text[len(text) - room // 2 :]
    # whole words where a space is near: never more than a fifth of a half given up for it
    if " " in head[-len(head) // 5 :]:
        head = head[: head.rindex(" ")]
    if " " in tail[: len(tail) // 5]:
        tail = tail[tail.index(" ") + 1 :]
    return head + gap + tail


def render_result(result: RunResult, width: int | None = None) -> str:
    """The table, the accuracy table, then the run's warnings; `width`: the terminal's
    (table_width) unless given."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    width = width or table_width()
    table = Table(title="mlperf-vllm result", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    for k, v in result_rows(result):
        table.add_row(k, v)
    buf = StringIO()
    Console(file=buf, width=width, force_terminal=False).print(table)
    text = buf.getvalue()
    acc = result.accuracy or {}
    if acc.get("table"):
        text += "\n" + acc["table"] + "\n"
    return text + warnings_block(result.warnings, width)
