"""Files the CLI ships with: user.confs (compliant and smoke), the TEST06 audit config, sweep plans.

They live at the top of the source tree (`user_confs/`, `scripts/plans/`) and are installed
into the wheel as package data of `harness.user_confs` and `harness.plans` (pyproject maps the
folders), so a pip-installed `mlperf-vllm` finds them through importlib.resources from any
working folder. An editable install has no such packages (setuptools maps only top-level
packages there); its files are the source tree's own.

A path given on the command line that does not exist but is spelled as in the README
(`user_confs/...`, `scripts/plans/...`) is looked up among the shipped files and folders (such as
`user_confs/engines/h200`, for `--engine-line`), so the README's commands work from any folder.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parent.parent
# Top folder in the source tree -> package it is installed as.
SHIPPED = {"user_confs": "harness.user_confs", "scripts/plans": "harness.plans"}


def shipped_file(relative: str | Path) -> Path | None:
    """The installed file for a source-tree path such as `user_confs/smoke/offline.conf`,
    or None when no such file ships."""
    path = _shipped(relative)
    return path if path is not None and path.is_file() else None


def _shipped(relative: str | Path) -> Path | None:
    """Where a source-tree path under a shipped folder is installed, file or folder; None when
    it names no shipped folder's content."""
    text = Path(relative).as_posix()
    for folder, package in SHIPPED.items():
        if not text.startswith(folder + "/"):
            continue
        rest = text[len(folder) + 1 :]
        try:
            path = Path(str(resources.files(package).joinpath(rest)))
        except ModuleNotFoundError:  # editable install: the source tree is the installation
            path = SOURCE_ROOT / folder / rest
        return path if path.exists() else None
    return None


def require_shipped(relative: str) -> Path:
    path = shipped_file(relative)
    if path is None:  # a broken installation, not a user error
        raise FileNotFoundError(f"{relative} is missing from the installed mlperf-vllm package")
    return path


def resolve_user_path(path: Path | None) -> Path | None:
    """`path` itself when it exists (or is None); else the shipped file or folder it names, if
    any; else `path` unchanged, for the caller's own "does not exist" error."""
    if path is None or path.exists():
        return path
    return _shipped(path) or path


def smoke_conf(scenario: str) -> Path:
    return require_shipped(f"user_confs/smoke/{scenario.lower()}.conf")


def benchmark_conf(benchmark: str, scenario: str) -> Path | None:
    """user_confs/<benchmark>/<scenario>.conf (interactive presets share their base's folder)."""
    return shipped_file(
        f"user_confs/{benchmark.removesuffix('-interactive')}/{scenario.lower()}.conf"
    )
