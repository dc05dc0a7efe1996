"""`mlperf-vllm check-submission`: the submission checker's rules for our benchmarks, run locally.

Every rule has a name and fails where the MLCommons checker (`--version` = the round) fails,
with a message naming the field or file and the fix. Two groups:

- "structure": files, fields, layout, round, seeds, TEST06. Must pass on any package, a
  demo-sized one included;
- "result": VALID, 600 s, sample counts, latency limits, accuracy targets, dataset coverage,
  LoadGen errors. Passes only on a full-size run.

The round decides which model folders and scenarios a tree may hold, per system category
(`harness.submission.rounds`); model facts come from the benchmark presets (`harness.benchmarks`).
"""

from __future__ import annotations

import ast
import contextlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.benchmarks import BENCHMARKS
from harness.run.record.logs import ACCURACY_LOG, DETAIL_LOG, SUMMARY_LOG, parse_detail_log
from harness.submission.rounds import (
    CATEGORIES,
    ROUNDS,
    Round,
    RoundModel,
    get_round,
    round_of_seeds,
)

VALID_DIVISIONS = ("closed", "open", "network")
VALID_STATUSES = ("available", "preview", "rdi")
MAX_ACCURACY_LOG_SIZE = 10 * 1024  # checker: a larger accuracy log "is not truncated"
REQUIRED_PERF_FILES = (SUMMARY_LOG, DETAIL_LOG)
REQUIRED_ACC_FILES = (SUMMARY_LOG, DETAIL_LOG, "accuracy.txt", ACCURACY_LOG)
REQUIRED_MEASURE_FILES = ("user.conf", "README.md")
CALIBRATION_DOC = Path("documentation") / "calibration.md"
MEASUREMENTS_FIELDS = (
    "input_data_types",
    "retraining",
    "starting_weights_filename",
    "weight_data_types",
    "weight_transformations",
)
TEST06_PASS_LINES = ("EOS check pass: True", "Sample length check pass: True")
TEST06_FIRST_TOKEN = ("First token check pass: True", "First token check pass: Skipped")
SUBMISSION_MIN_DURATION_MS = 600_000

SYSTEM_REQUIRED_FIELDS = (
    "division",
    "submitter",
    "status",
    "system_name",
    "number_of_nodes",
    "host_processor_model_name",
    "host_processors_per_node",
    "host_processor_core_count",
    "host_memory_capacity",
    "host_storage_capacity",
    "host_storage_type",
    "accelerators_per_node",
    "accelerator_model_name",
    "accelerator_memory_capacity",
    "framework",
    "operating_system",
    "system_type",
    "other_software_stack",
    "host_processor_frequency",
    "host_processor_caches",
    "host_memory_configuration",
    "host_processor_interconnect",
    "host_networking",
    "host_networking_topology",
    "accelerator_frequency",
    "accelerator_host_interconnect",
    "accelerator_interconnect",
    "accelerator_interconnect_topology",
    "accelerator_memory_configuration",
    "accelerator_on-chip_memories",
    "cooling",
    "hw_notes",
    "sw_notes",
    "host_network_card_count",
    "system_type_detail",
)
# Fields the checker wants a meaningful answer in: any falsy value (0, "", null) is empty.
SYSTEM_MEANINGFUL_FIELDS = (
    "division",
    "submitter",
    "system_type",
    "status",
    "system_name",
    "number_of_nodes",
    "host_processor_model_name",
    "host_processors_per_node",
    "host_processor_core_count",
    "host_memory_capacity",
    "host_memory_configuration",
    "host_storage_capacity",
    "host_storage_type",
    "host_networking",
    "host_network_card_count",
    "host_networking_topology",
    "accelerators_per_node",
    "accelerator_model_name",
    "accelerator_memory_capacity",
    "accelerator_host_interconnect",
    "accelerator_memory_configuration",
    "accelerator_interconnect",
    "cooling",
    "framework",
    "operating_system",
    "other_software_stack",
)


def empty_system_fields(system: dict[str, Any]) -> list[str]:
    """Meaningful fields the checker judges empty: absent or falsy (0 counts as empty)."""
    return [k for k in SYSTEM_MEANINGFUL_FIELDS if not system.get(k)]


def fill_in_hint(fields: Iterable[str]) -> str:
    """How to set each field: `--system-field KEY=VALUE` (a value given there is text, so
    `accelerators_per_node=0` is an answer while the number 0 is not)."""
    return ", ".join(
        f"--system-field status={'|'.join(VALID_STATUSES)}"
        if k == "status"
        else f"--system-field {k}=..."
        for k in fields
    )


@dataclass(frozen=True)
class RuleResult:
    rule: str
    group: str  # structure | result
    where: str
    passed: bool
    detail: str = ""


@dataclass(frozen=True)
class TreeCheck:
    round: Round
    note: str  # which round and why, said to the user
    results: list[RuleResult]


@dataclass(frozen=True)
class _Scenario:
    division: str
    submitter: str
    system: str
    model: str
    scenario: str
    path: Path


def _dirs(p: Path) -> list[Path]:
    return sorted(c for c in p.iterdir() if c.is_dir()) if p.is_dir() else []


def _scenario_dirs(root: Path) -> list[_Scenario]:
    return [
        _Scenario(div.name, subm.name, system.name, model.name, scen.name, scen)
        for div in _dirs(root)
        for subm in _dirs(div)
        for system in _dirs(subm / "results")
        for model in _dirs(system)
        for scen in _dirs(model)
    ]


def accuracy_hash(lines: Iterable[str]) -> str | None:
    found = None
    for line in lines:
        m = re.match(r"^hash=([\w\d]+)$", line.strip())
        if m:
            found = m.group(1)
    return found


def default_round(folders: Iterable[str]) -> tuple[Round, str]:
    """The newest round that accepts every model folder (the newest round if none does)."""
    names = sorted(set(folders))
    for rnd in ROUNDS:
        if all(rnd.model(f) is not None for f in names):
            return rnd, (
                f"round {rnd.name} (newest round accepting {', '.join(names) or 'the tree'}; "
                "--round to choose)"
            )
    return ROUNDS[0], f"round {ROUNDS[0].name} (no round accepts all of {', '.join(names)})"


def check_submission_tree(root: Path, round_name: str | None = None) -> TreeCheck:
    """Apply every rule to a submission root (the folder holding closed/, open/...)."""
    root = Path(root)
    dirs = _scenario_dirs(root)
    if round_name is not None:
        rnd, note = get_round(round_name), f"round {round_name} (--round)"
    else:
        rnd, note = default_round(d.model for d in dirs)
    if not dirs:
        detail = (
            "no such folder"
            if not root.is_dir()
            else "no <division>/<submitter>/results/<system>/<model>/<scenario> folder"
        )
        return TreeCheck(rnd, note, [RuleResult("layout", "structure", str(root), False, detail)])
    out: list[RuleResult] = []
    seen: set[Path] = set()
    for d in dirs:
        sub = root / d.division / d.submitter
        system = _load_system(sub / "systems" / f"{d.system}.json")
        if sub not in seen:
            seen.add(sub)
            out.extend(_submitter_rules(root, d))
        sys_path = sub / "systems" / f"{d.system}.json"
        if sys_path not in seen:
            seen.add(sys_path)
            out.extend(_system_rules(root, sys_path, system, d))
        model_dir = d.path.parent
        model = rnd.model(d.model)
        if model_dir not in seen:
            seen.add(model_dir)
            out.extend(_model_rules(root, model_dir, rnd, model, system))
        out.extend(_scenario_rules(root, d, rnd, model, system))
    return TreeCheck(rnd, note, out)


def _rel(root: Path, p: Path) -> str:
    return str(p.relative_to(root))


def _load_system(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _category(system: dict[str, Any] | None) -> str | None:
    value = str((system or {}).get("system_type") or "")
    if value == "edge,datacenter":
        return "datacenter,edge"
    return value if value in CATEGORIES else None


def _submitter_rules(root: Path, d: _Scenario) -> list[RuleResult]:
    sub = root / d.division / d.submitter
    where = _rel(root, sub)
    out = [RuleResult("src-dir", "structure", where, (sub / "src").is_dir(), f"missing {sub}/src")]
    if d.division != "open":
        ok = (sub / CALIBRATION_DOC).is_file() or (sub / "calibration.md").is_file()
        out.append(
            RuleResult(
                "calibration-doc",
                "structure",
                where,
                ok,
                f"missing {sub / CALIBRATION_DOC} (how the weights were quantized and "
                "calibrated; `mlperf-vllm package` writes one)",
            )
        )
    return out


def _system_rules(
    root: Path, path: Path, data: dict[str, Any] | None, d: _Scenario
) -> list[RuleResult]:
    where = _rel(root, path) if path.is_relative_to(root) else str(path)
    if data is None:
        return [
            RuleResult("system-json", "structure", where, False, f"missing or not JSON: {path}")
        ]
    problems = [f"field {k} missing" for k in SYSTEM_REQUIRED_FIELDS if k not in data]
    empty = empty_system_fields(data)
    if empty:
        problems.append(
            "empty to the checker (absent, 0 or blank): "
            + ", ".join(empty)
            + " (set each with "
            + fill_in_hint(empty)
            + " when packaging)"
        )
    status = str(data.get("status") or "").lower()
    if status and status not in VALID_STATUSES:
        problems.append(f"status {data.get('status')!r} is not one of {', '.join(VALID_STATUSES)}")
    stype = data.get("system_type")
    if stype and _category(data) is None:
        problems.append(f"system_type {stype!r} is not one of {', '.join(CATEGORIES)}")
    for key, folder in (("division", d.division), ("submitter", d.submitter)):
        value = str(data.get(key) or "")
        if value and value.lower() != folder.lower():
            problems.append(f"{key} {value!r} but the folder is {folder!r}")
    return [RuleResult("system-json", "structure", where, not problems, "; ".join(problems))]


def _model_rules(
    root: Path, model_dir: Path, rnd: Round, model: RoundModel | None, system: dict | None
) -> list[RuleResult]:
    where = _rel(root, model_dir)
    folder = model_dir.name
    if model is None:
        having = [r.name for r in ROUNDS if r.model(folder) is not None]
        fix = (
            f"rounds with it: {', '.join(having)}; check with --round {having[0]}"
            if having
            else f"round {rnd.name} accepts {', '.join(rnd.folders())}"
        )
        return [
            RuleResult(
                "round-benchmark",
                "structure",
                where,
                False,
                f"round {rnd.name} does not accept model folder {folder} ({fix})",
            )
        ]
    out = [RuleResult("round-benchmark", "structure", where, True)]
    category = _category(system)
    rule = model.scenarios.get(category or "")
    if rule is None:
        want = " or ".join(repr(c) for c in model.categories())
        out.append(
            RuleResult(
                "system-type",
                "structure",
                where,
                False,
                f"{folder} needs a system_type of {want}, the system's is "
                f"{(system or {}).get('system_type')!r} (set --system-field "
                f"system_type={model.home_category()} when packaging)",
            )
        )
        return out
    out.append(RuleResult("system-type", "structure", where, True))
    present = {p.name for p in _dirs(model_dir)}
    missing = rule.missing(present)
    out.append(
        RuleResult(
            "required-scenarios",
            "structure",
            where,
            not missing,
            f"{folder} in a system of type {category} needs {rule.describe()} "
            f"(round {rnd.name}); "
            f"missing {', '.join(missing)}: package that scenario's run into this tree",
        )
    )
    return out


def _scenario_rules(
    root: Path, d: _Scenario, rnd: Round, model: RoundModel | None, system: dict | None
) -> list[RuleResult]:
    out: list[RuleResult] = []
    where = _rel(root, d.path)
    sdir = d.path

    def add(rule: str, group: str, ok: bool, detail: str = "") -> None:
        out.append(RuleResult(rule, group, where, ok, detail if not ok else ""))

    add("layout", "structure", d.division in VALID_DIVISIONS, f"division {d.division!r} unknown")
    if model is not None:
        rule = model.scenarios.get(_category(system) or "")
        if rule is not None:  # else system-type fails for the model folder
            add(
                "model-scenario",
                "structure",
                d.scenario in rule.accepted,
                f"{d.model} has no {d.scenario} scenario in round {rnd.name} "
                f"(accepted: {', '.join(rule.accepted)})",
            )
    perf = sdir / "performance" / "run_1"
    miss = [str(perf / f) for f in REQUIRED_PERF_FILES if not (perf / f).is_file()]
    add("performance-files", "structure", not miss, "missing " + ", ".join(miss))
    acc = sdir / "accuracy"
    miss = [str(acc / f) for f in REQUIRED_ACC_FILES if not (acc / f).is_file()]
    add("accuracy-files", "structure", not miss, "missing " + ", ".join(miss))
    problems = _measurement_problems(sdir)
    add("measurements", "structure", not problems, "; ".join(problems))
    test06 = model is not None and model.test06
    logs = [acc / ACCURACY_LOG] + ([sdir / "TEST06" / "accuracy" / ACCURACY_LOG] if test06 else [])
    big = [
        f"{p} is {p.stat().st_size} bytes"
        for p in logs
        if p.is_file() and p.stat().st_size > MAX_ACCURACY_LOG_SIZE
    ]
    add("accuracy-log-truncated", "structure", not big, "; ".join(big) + " (> 10 KiB)")
    txt = acc / "accuracy.txt"
    has_hash = txt.is_file() and accuracy_hash(txt.read_text().splitlines()) is not None
    add("accuracy-hash", "structure", has_hash, f"no hash= line in {txt}")
    if test06:
        ok, detail = _test06(sdir / "TEST06" / "verify_accuracy.txt")
        add("test06", "structure", ok, detail)

    values = parse_detail_log(perf / DETAIL_LOG).values if (perf / DETAIL_LOG).is_file() else None
    if values is not None:
        logged = str(values.get("effective_scenario") or "")
        expected = "Server" if d.scenario == "Interactive" else d.scenario
        add(
            "scenario-log",
            "structure",
            logged == expected,
            f"the performance log is a {logged or '?'} run but the folder is {d.scenario}",
        )
        seeds: dict[str, Any] = {k: values.get(f"effective_{k}") for k in rnd.seeds}
        bad = [k for k, want in rnd.seeds.items() if seeds[k] != want]
        other = round_of_seeds(seeds)
        add(
            "seeds",
            "structure",
            not bad,
            f"{', '.join(bad)} are not round {rnd.name}'s"
            + (f" but round {other}'s (check with --round {other})" if other else "")
            + f"; round {rnd.name}'s come from the mlperf.conf of {rnd.seeds_loadgen} "
            "(a user.conf cannot set seeds)",
        )
        if model is not None:
            for name, ok, detail in _performance_rules(values, d.scenario, model):
                add(name, "result", ok, detail)
    if model is not None:
        if txt.is_file():
            ok, detail = _accuracy_targets(txt, model)
            add("accuracy-targets", "result", ok, detail)
        if (acc / DETAIL_LOG).is_file():
            ok, detail = _accuracy_dataset(acc / DETAIL_LOG, model)
            add("accuracy-dataset", "result", ok, detail)
    errs = [
        f"{p}: {e}"
        for p in (perf / DETAIL_LOG, acc / DETAIL_LOG)
        if p.is_file()
        for e in parse_detail_log(p).errors
    ]
    add("loadgen-errors", "result", not errs, "; ".join(errs[:3]))
    return out


def _measurement_problems(sdir: Path) -> list[str]:
    problems = [
        f"missing or empty {sdir / f}"
        for f in REQUIRED_MEASURE_FILES
        if not ((sdir / f).is_file() and (sdir / f).stat().st_size > 0)
    ]
    mj = sdir / "measurements.json"
    if not mj.is_file():
        return problems + [f"missing {mj}"]
    try:
        data = json.loads(mj.read_text())
    except json.JSONDecodeError as exc:
        return problems + [f"measurements.json is not JSON ({exc})"]
    return problems + [
        f"measurements.json field {k} missing or empty"
        for k in MEASUREMENTS_FIELDS
        if not data.get(k)
    ]


def _test06(verify: Path) -> tuple[bool, str]:
    if not verify.is_file():
        return False, f"missing {verify}"
    lines = {ln.strip() for ln in verify.read_text().splitlines()}
    fails = [p for p in TEST06_PASS_LINES if p not in lines]
    if not lines & set(TEST06_FIRST_TOKEN):
        fails.append("First token check pass: True|Skipped")
    return not fails, f"{verify} lacks: " + ", ".join(fails)


def _performance_rules(
    v: dict[str, Any], scenario: str, model: RoundModel
) -> list[tuple[str, bool, str]]:
    bench = BENCHMARKS[model.preset]
    rules: list[tuple[str, bool, str]] = []
    validity = v.get("result_validity")
    rules.append(("performance-valid", validity == "VALID", f"result_validity {validity}"))
    md = v.get("effective_min_duration_ms")
    rules.append(
        (
            "min-duration",
            isinstance(md, int) and md >= SUBMISSION_MIN_DURATION_MS,
            f"effective_min_duration_ms {md}, needs >= {SUBMISSION_MIN_DURATION_MS} "
            "(a smoke conf's min_duration; run with the compliant user.conf)",
        )
    )
    if scenario == "Offline":
        spq = v.get("effective_samples_per_query")
        rules.append(
            (
                "offline-samples-per-query",
                isinstance(spq, int) and spq >= bench.total_sample_count,
                f"effective_samples_per_query {spq}, needs >= {bench.total_sample_count}",
            )
        )
    psc = v.get("effective_performance_sample_count")
    rules.append(
        (
            "performance-sample-count",
            isinstance(psc, int) and psc >= bench.performance_sample_count,
            f"effective_performance_sample_count {psc}, needs >= {bench.performance_sample_count}",
        )
    )
    if scenario in ("Server", "Interactive", "SingleStream"):
        es = v.get("early_stopping_met")
        rules.append(("early-stopping", es is True, f"early_stopping_met {es}"))
    if scenario in ("Server", "Interactive"):
        name = model.preset + ("-interactive" if scenario == "Interactive" else "")
        lim = BENCHMARKS[name].server_limits
        ttft = v.get("result_first_token_99.00_percentile_latency_ns")
        tpot = v.get("result_time_per_output_token_99.00_percentile_ns")
        if lim is not None:
            ok = (
                isinstance(ttft, (int, float))
                and isinstance(tpot, (int, float))
                and ttft < lim.ttft_ms * 1e6
                and tpot < lim.tpot_ms * 1e6
            )
            rules.append(
                (
                    "latency-limits",
                    ok,
                    f"p99 TTFT {ttft} ns, TPOT {tpot} ns; limits {lim.ttft_ms:g} / "
                    f"{lim.tpot_ms:g} ms",
                )
            )
    return rules


def _accuracy_targets(txt: Path, model: RoundModel) -> tuple[bool, str]:
    from evaluation.targets import judge, targets_for

    metrics: dict[str, Any] = {}
    for line in txt.read_text().splitlines():
        line = line.strip()
        if line.startswith("{"):
            with contextlib.suppress(ValueError, SyntaxError):
                metrics.update(ast.literal_eval(line))
    if not metrics:
        return False, f"no result dict in {txt}"
    verdict = judge(targets_for(model.preset, model.accuracy_level), metrics)
    fails = [
        f"{c.target.metric} {c.value} not {c.target.describe()}"
        for c in verdict.checks
        if not c.passed
    ]
    return verdict.passed, "; ".join(fails)


def _accuracy_dataset(detail: Path, model: RoundModel) -> tuple[bool, str]:
    """The accuracy run must cover the whole dataset (the checker reads the LoadGen count)."""
    v = parse_detail_log(detail).values
    count = v.get("effective_accuracy_sample_count", v.get("qsl_reported_total_count"))
    want = BENCHMARKS[model.preset].total_sample_count
    return count == want, (
        f"the accuracy run covered {count} samples, {model.preset}'s dataset has {want} "
        "(run --mode accuracy on the full dataset)"
    )


def focus(results: list[RuleResult], folder: str, scenario: str) -> list[RuleResult]:
    """The rows about one model folder's scenario: its own, its model folder's, and the
    submitter's and systems' rows they depend on."""
    out = []
    for r in results:
        parts = r.where.split("/")
        if "results" not in parts:
            out.append(r)
            continue
        rest = parts[parts.index("results") + 1 :]
        if len(rest) >= 2 and rest[1] == folder and (len(rest) == 2 or rest[2] == scenario):
            out.append(r)
    return out


def render_checks(results: list[RuleResult]) -> str:
    width = max((len(r.rule) for r in results), default=10)
    lines = []
    for r in results:
        mark = "PASS" if r.passed else "FAIL"
        lines.append(
            f"{mark}  {r.group:<9} {r.rule:<{width}}  {r.where}"
            + (f"  -- {r.detail}" if r.detail and not r.passed else "")
        )
    return "\n".join(lines)


def summary_line(results: list[RuleResult], label: str = "") -> str:
    failed = [r for r in results if not r.passed]
    return f"{label}{len(results) - len(failed)} passed, {len(failed)} failed" + (
        ": " + ", ".join(sorted({r.rule for r in failed})) if failed else ""
    )
