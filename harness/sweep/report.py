"""A sweep's reports: the markdown table with its rules, the CSV, the chart."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness import files
from harness.sweep.plan import NOISE_FLOOR, SINGLE_RUN, SWEEP_FILES, Plan

# --------------------------------------------------------------------------- config results


@dataclass
class ConfigRow:
    index: int
    config: str
    knobs: str
    change: str
    status: str = "pending"  # ok / failed / confounded / no-op
    repeats: int = 0
    figure: str = "tokens/s"  # what tps_* hold: tokens/s, or a capacity sweep's QPS
    tps_median: float | None = None
    tps_min: float | None = None
    tps_max: float | None = None
    usd_per_million_tokens: float | None = None  # at --price-per-hour, from the median
    spread_pct: float | None = None
    delta_pct: float | None = None  # vs baseline
    noise_band_pct: float | None = None  # |delta| at or below this is noise (see RULES)
    noise_verdict: str = ""
    validity: str = ""
    accuracy: str = ""
    safe_to_ship: str = "no"
    why_not_safe: str = ""
    step_delta_pct: float | None = None  # stacked: vs the stack it was added to
    step_verdict: str = ""
    kept: str = ""
    error: str = ""
    confounded: str = ""
    note: str = ""
    resumed: int = 0
    output_dir: str = ""
    mlflow_run_id: str = ""
    tps_repeats: list[float] = field(default_factory=list)

    def csv_row(self) -> dict[str, Any]:
        d = asdict(self)
        d["tps_repeats"] = " ".join(f"{v:.2f}" for v in self.tps_repeats)
        for k in ("tps_median", "tps_min", "tps_max"):
            d[k] = "" if d[k] is None else f"{d[k]:.2f}"
        for k in ("spread_pct", "delta_pct", "step_delta_pct", "noise_band_pct"):
            d[k] = "" if d[k] is None else f"{d[k]:+.2f}" if "delta" in k else f"{d[k]:.2f}"
        return d


CSV_COLUMNS = [f for f in ConfigRow.__dataclass_fields__]


# --------------------------------------------------------------------------- reports


def _fmt(v: float | None, spec: str = ",.1f") -> str:
    return "" if v is None else format(v, spec)


NOTE_CHARS = 160  # the report's note column: one readable line per config


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _noise_cell(r: ConfigRow) -> str:
    """The verdict with the band it was judged by, so "within noise" says how much noise."""
    if r.noise_band_pct is None or r.noise_verdict in ("", "reference", SINGLE_RUN):
        return r.noise_verdict
    return f"{r.noise_verdict} (band ±{r.noise_band_pct:.1f}%)"


def figure_label(figure: str) -> str:
    """The unit of a sweep's figure (SweepOptions.figure)."""
    return "capacity QPS" if figure == "capacity" else "tokens/s"


def markdown_table(rows: Sequence[ConfigRow], kind: str) -> str:
    priced = any(r.usd_per_million_tokens is not None for r in rows)
    head = [
        "config",
        "change",
        "status",
        f"{rows[0].figure if rows else 'tokens/s'} median",
        *(["$/M tokens"] if priced else []),
        "spread %",
        "delta %",
        "noise",
        "validity",
        "accuracy",
        "safe to ship",
    ]
    if kind == "stacked":
        head += ["vs stack %", "kept"]
    head += ["error / note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [
            r.config,
            r.change,
            r.status,
            _fmt(r.tps_median),
            *([_fmt(r.usd_per_million_tokens, ",.4f")] if priced else []),
            _fmt(r.spread_pct, ".1f"),
            _fmt(r.delta_pct, "+.1f"),
            _noise_cell(r),
            r.validity,
            r.accuracy,
            r.safe_to_ship,
        ]
        if kind == "stacked":
            cells += [_fmt(r.step_delta_pct, "+.1f"), r.kept]
        cells += [_cut(r.error or r.confounded or r.note or r.why_not_safe, NOTE_CHARS)]
        lines.append(
            "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"
        )
    return "\n".join(lines) + "\n"


RULES = f"""\
Rules: delta = median(config)/median(baseline) - 1, over each config's repeats (default 2).
Noise band = max(2 x the larger relative spread (max-min)/median of the two configs, the
{NOISE_FLOOR:.0%} floor; --noise-floor): delta above +band "better", below -band "worse", else
"within noise" (the delta is below the measured noise: no claim). One repeat on either side:
"{SINGLE_RUN}" (no spread to measure; stacking then uses the floor
alone). No-op knob = every engine argument it sets already held that value in the engine the
config is compared with (as the engine resolved it): its delta is noise, whatever its size.
Confounded = the run's engine args differ from the baseline's in other keys than the knob's
(structured values compared key by key), or LoadGen settings / sampling / model / dataset /
engine environment differ. Safe to ship = ran, not confounded, not a no-op, every repeat
VALID, accuracy PASS.
"""


def figure_note(scenario: str, figure: str = "tokens") -> str:
    """What a config's figure says in this scenario: a capacity, or tokens/s at a fixed
    target that does not rank capacity."""
    if scenario not in ("Server", "Interactive"):
        return ""
    if figure == "capacity":
        return (
            f"Figure ({scenario}): capacity, the highest target QPS that `mlperf-vllm "
            "calibrate` passed on the config's one engine (short trials judged by the p99 "
            "limits, early stopping where judgeable and the engine keeping up). Trials are not "
            "runs of the submission's length: no row is VALID or safe to ship here; ship the "
            f"chosen config's target from `mlperf-vllm calibrate --scenario {scenario} "
            "--confirm`.\n"
        )
    return (
        f"Figure ({scenario}): tokens/s of a run at the user.conf's fixed target_qps. Every "
        "config that keeps up with that target scores about the same, so the delta does not "
        "rank capacity; what a row shows is whether the config holds the target (VALID). A "
        "config's capacity is `mlperf-vllm calibrate --scenario "
        f"{scenario}` on it (trials on one engine, the sustained rule), and `--figure "
        "capacity` makes it this sweep's figure.\n"
    )


def write_csv(rows: Sequence[ConfigRow], path: Path) -> None:
    with files.atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow(r.csv_row())


def write_chart(rows: Sequence[ConfigRow], path: Path, title: str) -> None:
    """Median tok/s per config, min-max whiskers, colour by verdict, failed configs marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    colours = {
        "safe": "#2e7d32",
        "valid": "#1565c0",
        "invalid": "#f9a825",
        "confounded": "#8e24aa",
        "no-op": "#9e9e9e",
        "failed": "#c62828",
    }
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(rows) + 2), 4.5))
    top = max([r.tps_max or 0 for r in rows] + [1.0])
    for x, r in enumerate(rows):
        if r.status == "failed":
            ax.bar(x, top * 0.04, color=colours["failed"], hatch="xx")
            ax.text(
                x,
                top * 0.06,
                "FAILED",
                ha="center",
                va="bottom",
                fontsize=8,
                color=colours["failed"],
                rotation=90,
            )
            continue
        key = (
            r.status
            if r.status in ("confounded", "no-op")
            else "safe"
            if r.safe_to_ship == "yes"
            else "valid"
            if r.validity == "VALID"
            else "invalid"
        )
        med = r.tps_median or 0.0
        err = None
        if r.tps_min is not None and r.tps_max is not None and r.repeats > 1:
            err = [[med - r.tps_min], [r.tps_max - med]]
        ax.bar(x, med, color=colours[key], yerr=err, capsize=4)
        label = f"{r.validity or '?'}\nacc {r.accuracy or '-'}"
        if r.delta_pct is not None:
            label = f"{r.delta_pct:+.1f}%\n" + label
        ax.text(x, med + top * 0.02, label, ha="center", va="bottom", fontsize=7)
    base = next((r.tps_median for r in rows if r.config == "baseline"), None)
    if base:
        ax.axhline(base, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(rows)), [r.config for r in rows], rotation=30, ha="right")
    ax.set_ylabel(f"{rows[0].figure if rows else 'tokens/s'} (median over repeats)")
    ax.set_ylim(0, top * 1.35)
    ax.set_title(title)
    ax.legend(
        handles=[Patch(color=c, label=k) for k, c in colours.items()],
        fontsize=7,
        loc="upper right",
        ncol=5,
    )
    fig.tight_layout()
    with files.atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)


def write_reports(
    out: Path,
    kind: str,
    plan: Plan,
    rows: Sequence[ConfigRow],
    meta: Mapping[str, Any],
    final_stack: Sequence[str] | None = None,
) -> dict[str, Path]:
    """The sweep's files in `out`: what they print is given (the rows, the sweep kind, the
    plan, the run's metadata and, stacked, the knobs kept), not the executor."""
    paths = {name: out / name for name in SWEEP_FILES}
    write_csv(rows, paths["sweep.csv"])
    table = markdown_table(rows, kind)
    title = f"{kind} sweep: {plan.path.name}"
    extra = ""
    if kind == "stacked":
        label = (
            "Stack when interrupted"
            if meta.get("interrupted")
            else "Stack so far"
            if meta.get("in_progress")
            else "Final stack"
        )
        extra = f"\n{label}: {' + '.join(final_stack or []) or '(baseline)'}\n"
    note = figure_note(plan.scenario, meta.get("figure", "tokens"))
    head = f"{note}\n" if note else ""
    if meta.get("interrupted"):
        head += (
            f"**Interrupted** ({meta['interrupted']}): the rows below are the configs that "
            "finished.\n\n"
        )
    elif meta.get("in_progress"):
        head += (
            f"**Unfinished** ({meta['in_progress']}): the rows below are the configs that "
            "finished so far. The report is rewritten after each config, so this stays when "
            "the sweep is killed outright; `--resume` goes on from here.\n\n"
        )
    md = f"# {title}\n\n{head}{table}{extra}\n{RULES}"
    files.write_text(paths["sweep.md"], md)
    files.write_text(paths["summary.txt"], md)
    files.write_text(paths["plan.txt"], plan.text)
    write_chart(rows, paths["sweep.png"], title)
    files.write_text(
        paths["sweep.json"],
        json.dumps(
            {
                **meta,
                "rows": [asdict(r) for r in rows],
                "final_stack": None if final_stack is None else list(final_stack),
            },
            indent=2,
            default=str,
        )
        + "\n",
    )
    return paths
